package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// writeConfig writes a syncer config for dataset bench with one collection, items,
// copied from table, and the given top-level settings (YAML lines), and returns its path.
func writeConfig(tb testing.TB, dir, name, table string, settings ...string) string {
	tb.Helper()
	return writeCollectionConfig(tb, dir, name, fmt.Sprintf("{name: items, table: %s, key: id}", table), settings...)
}

// writeCollectionConfig is writeConfig with the collection given as YAML (a flow
// mapping).
func writeCollectionConfig(tb testing.TB, dir, name, collection string, settings ...string) string {
	tb.Helper()
	var y strings.Builder
	y.WriteString("dataset: bench\n")
	for _, s := range settings {
		y.WriteString(s + "\n")
	}
	fmt.Fprintf(&y, "collections:\n  - %s\n", collection)
	p := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(p, []byte(y.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

// syncRun is one `syncer once` that published: the process's measurements, the
// version's manifest, and the Postgres time its sessions spent executing statements.
type syncRun struct {
	measured
	man   snapshot.Manifest
	pg    time.Duration // Postgres's active time (pg_stat_database)
	pgCPU time.Duration // the CPU time of every Postgres process
}

// publishOnce runs `syncer once` against the emulator at addr, requires it to
// publish, and reads the new version's manifest.
func publishOnce(tb testing.TB, syncer, cfg, dsn, addr string) syncRun {
	tb.Helper()
	before, cpu := pgActive(tb, dsn), postgresCPU(tb, dsn)
	m := runProc(tb, []string{"SNAPFLIP_POSTGRES_DSN=" + dsn, "BIGTABLE_EMULATOR_HOST=" + addr}, syncer,
		"--config", cfg, "--log-level", "warn", "once")
	pg := pgActive(tb, dsn) - before
	cpu = postgresCPU(tb, dsn) - cpu
	f := strings.Fields(m.out)
	if len(f) < 2 || f[0] != "published" {
		tb.Fatalf("syncer did not publish: %s", m.out)
	}
	return syncRun{measured: m, man: readManifest(tb, addr, snapshot.Version(f[1])), pg: pg, pgCPU: cpu}
}

// readManifest reads version v's manifest of dataset bench from the emulator at addr.
func readManifest(tb testing.TB, addr string, v snapshot.Version) snapshot.Manifest {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, testenv.StoreConfig(addr))
	if err != nil {
		tb.Fatalf("open store: %v", err)
	}
	defer st.Close()
	m, err := st.ReadManifest(ctx, "bench", v)
	if err != nil {
		tb.Fatalf("read manifest %s: %v", v, err)
	}
	return m
}

// postgresCPU returns the CPU time every process of the Postgres server at dsn (on
// this machine) has used so far, once no other session is connected: a backend's time
// is its postmaster's only once it has ended and been reaped.
func postgresCPU(tb testing.TB, dsn string) time.Duration {
	tb.Helper()
	pgActive(tb, dsn)
	return treeCPU(postmasterPID(tb, dsn), clockTicks())
}

// pgActive returns pg_stat_database.active_time of dsn's database: the time its
// sessions have spent running statements (a query streaming rows to a slow client
// counts while it waits on the client). It first waits until no other session is
// connected, since a session's figures are flushed when it ends.
func pgActive(tb testing.TB, dsn string) time.Duration {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			tb.Fatalf("pg_stat_activity: %v", err)
		}
		if n == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A session leaves pg_stat_activity just before it flushes its statistics.
	time.Sleep(200 * time.Millisecond)
	var ms float64
	// Each statement is its own transaction, so it sees fresh statistics.
	if err := conn.QueryRow(ctx, `SELECT active_time FROM pg_stat_database WHERE datname = current_database()`).Scan(&ms); err != nil {
		tb.Fatalf("pg_stat_database: %v", err)
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// deltaResult is one measurement of BenchmarkDeltaSync.
type deltaResult struct {
	base, delta, full syncRun
}

// BenchmarkDeltaSync measures, at 100,000 and 1,000,000 rows, the cycle after a
// random 0.1% or 10% of the rows changed, in incremental mode (a delta layer against
// the base the first cycle wrote; both on a fresh emulator), against a full copy of
// the same rows (versions: full, on another fresh emulator): wall time, bytes sent to
// Bigtable (the manifest's BytesWritten), Postgres time (pg_stat_database.active_time
// of the benchmark's database) and the syncer's peak RSS.
// Run it with -benchtime 1x: one iteration is two measurements, of which it keeps the
// fastest of each side.
func BenchmarkDeltaSync(b *testing.B) {
	results := map[deltaCase]deltaResult{}
	defer recordDelta(b, results)
	dir := b.TempDir()
	syncer := build(b, dir, "github.com/snapflip/snapflip/cmd/syncer")
	incremental := writeConfig(b, dir, "incremental", "items", "versions: incremental")
	full := writeConfig(b, dir, "full", "items", "versions: full")

	for _, size := range []struct {
		name string
		rows int
	}{{"100k", 100_000}, {"1M", 1_000_000}} {
		b.Run(size.name, func(b *testing.B) {
			dsn := testenv.Postgres(b)
			loadItems(b, dsn, "items", size.rows)
			// No background vacuum inside one measurement and not the other.
			testenv.Exec(b, dsn, "ALTER TABLE items SET (autovacuum_enabled = false)")

			measure := func(b *testing.B, changed int) deltaResult {
				var r deltaResult
				func() {
					addr, stop := freshEmulator(b)
					defer stop()
					r.base = publishOnce(b, syncer, incremental, dsn, addr)
					testenv.Exec(b, dsn, fmt.Sprintf(`UPDATE items SET qty = qty + 1, updated_at = now()
						WHERE id IN (SELECT id FROM items ORDER BY random() LIMIT %d)`, changed))
					r.delta = publishOnce(b, syncer, incremental, dsn, addr)
				}()
				func() {
					addr, stop := freshEmulator(b)
					defer stop()
					r.full = publishOnce(b, syncer, full, dsn, addr)
				}()
				if k := r.base.man.Collections["items"].Own; k == nil || k.Kind != snapshot.LayerBase {
					b.Fatalf("the first cycle did not write a base: %+v", k)
				}
				own := r.delta.man.Collections["items"].Own
				if own == nil || own.Kind != snapshot.LayerDelta || own.Changed != int64(changed) || own.Inserted+own.Deleted != 0 {
					b.Fatalf("the second cycle did not write a delta of %d changed rows: %+v", changed, own)
				}
				if r.full.man.Format != snapshot.FormatFull || r.full.man.Rows() != int64(size.rows) {
					b.Fatalf("the full sync is not a full copy of %d rows: format %d, %d rows", size.rows, r.full.man.Format, r.full.man.Rows())
				}
				return r
			}

			for _, share := range []struct {
				name    string
				percent float64
				targets bool
			}{{"0.1%", 0.1, true}, {"10%", 10, false}} {
				b.Run(share.name, func(b *testing.B) {
					changed := int(float64(size.rows) * share.percent / 100)
					for range b.N {
						// Two measurements, keeping each side's fastest run (the machine is
						// shared, and a full sync is long enough to catch more of the noise),
						// and the delta cycle's highest peak RSS.
						var r deltaResult
						rss := 0.0
						for i := range 2 {
							m := measure(b, changed)
							if i == 0 || m.delta.took < r.delta.took {
								r.base, r.delta = m.base, m.delta
							}
							if i == 0 || m.full.took < r.full.took {
								r.full = m.full
							}
							rss = max(rss, m.delta.rssMiB)
						}
						r.delta.rssMiB = rss
						results[deltaCase{size.rows, share.percent}] = r
						d, f := r.delta, r.full
						bytesRatio := float64(d.man.BytesWritten) / float64(f.man.BytesWritten)
						timeRatio := d.took.Seconds() / f.took.Seconds()
						pgRatio := d.pg.Seconds() / f.pg.Seconds()
						// The publish itself, as its manifest times it (start to flip), without
						// the process's start, connections and schema check.
						dc, fc := d.man.PublishedAt.Sub(d.man.StartedAt), f.man.PublishedAt.Sub(f.man.StartedAt)
						cycleRatio := dc.Seconds() / fc.Seconds()
						b.ReportMetric(dc.Seconds(), "delta_publish_s")
						b.ReportMetric(fc.Seconds(), "full_publish_s")
						b.ReportMetric(cycleRatio, "publish/full")
						b.ReportMetric(d.took.Seconds(), "delta_s")
						b.ReportMetric(f.took.Seconds(), "full_s")
						b.ReportMetric(float64(d.man.BytesWritten), "delta_bytes")
						b.ReportMetric(float64(f.man.BytesWritten), "full_bytes")
						b.ReportMetric(bytesRatio, "bytes/full")
						b.ReportMetric(timeRatio, "time/full")
						b.ReportMetric(d.pg.Seconds(), "delta_pg_s")
						b.ReportMetric(pgRatio, "pg/full")
						b.ReportMetric(d.rssMiB, "delta_rss_MiB")
						target := func(s string) string {
							if share.targets {
								return s
							}
							return "no target"
						}
						own := d.man.Collections["items"].Own
						b.Logf("%d rows, %d changed (%s), a fresh emulator for each side; fastest of 2 each, highest delta RSS of 2", size.rows, changed, share.name)
						b.Logf("  delta cycle    %8.2fs  %12d bytes  pg %7.2fs  peak RSS %6.1f MiB  (%s: %d changed, %d rendered, chain %d)",
							d.took.Seconds(), d.man.BytesWritten, d.pg.Seconds(), d.rssMiB, own.Mode, own.Changed, own.Rendered,
							len(d.man.Collections["items"].Layers))
						b.Logf("  full sync      %8.2fs  %12d bytes  pg %7.2fs  peak RSS %6.1f MiB", f.took.Seconds(), f.man.BytesWritten, f.pg.Seconds(), f.rssMiB)
						b.Logf("  (base cycle    %8.2fs  %12d bytes  pg %7.2fs  peak RSS %6.1f MiB)", r.base.took.Seconds(), r.base.man.BytesWritten, r.base.pg.Seconds(), r.base.rssMiB)
						rssTarget := "target < 200 MB at 1M"
						if size.rows >= 1_000_000 {
							rssTarget = "target < 200 MB"
						}
						b.Logf("  bytes/full %.4f (%s)  time/full %.3f (%s)  pg/full %.3f  delta peak RSS %.1f MiB (%s)",
							bytesRatio, target("target <= 0.05"), timeRatio, target("target <= 0.20"), pgRatio, d.rssMiB, rssTarget)
						b.Logf("  the publish alone (manifest start to flip): delta %.3fs, full %.3fs, publish/full %.3f",
							dc.Seconds(), fc.Seconds(), cycleRatio)
					}
				})
			}
		})
	}
}

// deltaCase is one of BenchmarkDeltaSync's measurements: the table's rows, and the
// percentage of them changed.
type deltaCase struct {
	rows    int
	percent float64
}

// recordDelta records BenchmarkDeltaSync's figures, each measurement's sizes in
// adjacent rows. Memory and a base's size are figures of the largest table only.
func recordDelta(b *testing.B, results map[deltaCase]deltaResult) {
	var sizes []int
	for c := range results {
		if !slices.Contains(sizes, c.rows) {
			sizes = append(sizes, c.rows)
		}
	}
	slices.Sort(sizes)
	each := func(percent float64, add func(what string, r deltaResult)) {
		for _, n := range sizes {
			if r, ok := results[deltaCase{n, percent}]; ok {
				add(fmt.Sprintf("%g%% of %s rows changed", percent, thousands(n)), r)
			}
		}
	}
	each(0.1, func(what string, r deltaResult) {
		ratio := r.delta.took.Seconds() / r.full.took.Seconds()
		record(b, Figure{Measurement: "delta cycle against a full sync (`syncer once`), " + what,
			Figure: fmt.Sprintf("%.2f s vs %.2f s: %.3f", r.delta.took.Seconds(), r.full.took.Seconds(), ratio),
			Target: "≤ 0.20", Missed: ratio > 0.20})
	})
	bytesSent := func(target bool) func(string, deltaResult) {
		return func(what string, r deltaResult) {
			share := float64(r.delta.man.BytesWritten) / float64(r.full.man.BytesWritten)
			f := Figure{Measurement: "bytes sent, " + what,
				Figure: fmt.Sprintf("%s of %s (%.3g%%)", sizeSI(r.delta.man.BytesWritten), sizeSI(r.full.man.BytesWritten), 100*share)}
			if target {
				f.Target, f.Missed = "≤ 5% of a full copy", share > 0.05
			}
			record(b, f)
		}
	}
	each(0.1, bytesSent(true))
	each(10, bytesSent(false))
	each(0.1, func(what string, r deltaResult) {
		record(b, Figure{Measurement: "Postgres time of the delta cycle, " + what, Figure: fmt.Sprintf("%.2f s", r.delta.pg.Seconds())})
	})
	if len(sizes) == 0 {
		return
	}
	largest := sizes[len(sizes)-1]
	for _, percent := range []float64{0.1, 10} {
		if r, ok := results[deltaCase{largest, percent}]; ok {
			record(b, Figure{Measurement: fmt.Sprintf("syncer peak RSS, delta cycle, %g%% of %s rows changed", percent, thousands(largest)),
				Figure: fmt.Sprintf("%.0f MiB", r.delta.rssMiB), Target: "< 200 MB", Missed: !underMB(r.delta.rssMiB, 200)})
		}
	}
	if r, ok := results[deltaCase{largest, 0.1}]; ok {
		base, full := r.base.man.BytesWritten, r.full.man.BytesWritten
		record(b, Figure{Measurement: fmt.Sprintf("bytes sent, a base layer against a full copy, %s rows", thousands(largest)),
			Figure: fmt.Sprintf("%s vs %s (%+.0f%%)", sizeSI(base), sizeSI(full), 100*(float64(base)/float64(full)-1))})
	}
}
