package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
)

// BenchmarkLargeSync measures the envelope at 5,000,000 rows (and 10,000,000 with
// BENCH_LARGE=1) of the benchmarks' items table (about 330 bytes of JSON a row):
// `syncer once` (a full sync) against the minimal pipelined copy, side by side, each
// on a fresh emulator, alternately, twice, keeping each one's fastest; the syncer's
// rows/s, MB/s, peak RSS and Postgres time (pg_stat_database.active_time); then, on
// the emulator of the syncer's fastest run, `syncer once` after a random 0.01% of the
// rows changed (the default stats watch's delta), beside the same at 500,000 rows.
// Run it with -benchtime 1x.
func BenchmarkLargeSync(b *testing.B) {
	sizes := []int{500_000, 5_000_000}
	if os.Getenv("BENCH_LARGE") != "" {
		sizes = append(sizes, 10_000_000)
	}
	dir := b.TempDir()
	syncer := build(b, dir, "github.com/snapflip/snapflip/cmd/syncer")
	mincopy := build(b, dir, "github.com/snapflip/snapflip/internal/bench/mincopy")
	cfg := writeConfig(b, dir, "large", "items")
	var deltaSmall time.Duration
	for _, rows := range sizes {
		b.Run(thousands(rows), func(b *testing.B) {
			dsn := testenv.Postgres(b)
			loadItems(b, dsn, "items", rows)
			testenv.Exec(b, dsn, "ALTER TABLE items SET (autovacuum_enabled = false)")
			env := func(addr string) []string {
				return []string{"SNAPFLIP_POSTGRES_DSN=" + dsn, "BIGTABLE_EMULATOR_HOST=" + addr}
			}
			for range b.N {
				var sync, delta syncRun
				var minimal measured
				var minimalPG time.Duration // the minimal copy's Postgres CPU
				for i := range 2 {
					if rows >= 5_000_000 {
						func() {
							addr, stop := freshEmulator(b)
							defer stop()
							cpu := postgresCPU(b, dsn)
							m := runProc(b, env(addr), mincopy, "-mode", "copy", "-dsn", dsn, "-emulator", addr, "-table", "items")
							if i == 0 || m.took < minimal.took {
								minimal, minimalPG = m, postgresCPU(b, dsn)-cpu
							}
						}()
					}
					func() {
						addr, stop := freshEmulator(b)
						defer stop()
						s := publishOnce(b, syncer, cfg, dsn, addr)
						testenv.Exec(b, dsn, fmt.Sprintf(`UPDATE items SET qty = qty + 1, updated_at = now()
							WHERE id IN (SELECT id FROM items ORDER BY random() LIMIT %d)`, rows/10_000))
						d := publishOnce(b, syncer, cfg, dsn, addr)
						if own := d.man.Collections["items"].Own; own == nil || own.Changed != int64(rows/10_000) {
							b.Fatalf("the second sync did not write a delta of %d changed rows: %+v", rows/10_000, own)
						}
						if i == 0 || s.took < sync.took {
							sync = s
						}
						if i == 0 || d.took < delta.took {
							delta = d
						}
					}()
				}
				n := thousands(rows)
				rps := float64(rows) / sync.took.Seconds()
				mbps := float64(sync.man.BytesWritten) / 1e6 / sync.took.Seconds()
				b.ReportMetric(sync.took.Seconds(), "sync_s")
				b.ReportMetric(delta.took.Seconds(), "delta_0.01%_s")
				b.Logf("%s rows: syncer once %.1f s (%s rows/s, %.1f MB/s to Bigtable, peak RSS %.0f MiB, Postgres CPU %.1f s, active %.1f s); 0.01%% delta %.2f s",
					n, sync.took.Seconds(), thousands(rps), mbps, sync.rssMiB, sync.pgCPU.Seconds(), sync.pg.Seconds(), delta.took.Seconds())
				if rows >= 5_000_000 {
					ratio := sync.took.Seconds() / minimal.took.Seconds()
					b.ReportMetric(ratio, "sync/mincopy")
					b.Logf("  minimal pipelined copy %.1f s (Postgres CPU %.1f s): syncer %.2f×", minimal.took.Seconds(), minimalPG.Seconds(), ratio)
					record(b, Figure{Measurement: fmt.Sprintf("full sync of %s rows, `syncer once` against the minimal pipelined copy", n),
						Figure: fmt.Sprintf("%.1f s against %.1f s: %.2f×; %s rows/s, %.1f MB/s, peak RSS %.0f MiB, Postgres CPU %.1f s (the copy's %.1f s)",
							sync.took.Seconds(), minimal.took.Seconds(), ratio, thousands(rps), mbps, sync.rssMiB, sync.pgCPU.Seconds(), minimalPG.Seconds()),
						Target: "≤ 1.15×", Missed: ratio > 1.15})
				} else {
					record(b, Figure{Measurement: fmt.Sprintf("full sync of %s rows, `syncer once`", n),
						Figure: fmt.Sprintf("%.1f s; %s rows/s, %.1f MB/s, peak RSS %.0f MiB, Postgres CPU %.1f s",
							sync.took.Seconds(), thousands(rps), mbps, sync.rssMiB, sync.pgCPU.Seconds())})
				}
				fig := Figure{Measurement: fmt.Sprintf("`syncer once` after 0.01%% of %s rows changed (stats watch's delta)", n),
					Figure: fmt.Sprintf("%.2f s (Postgres active %.2f s)", delta.took.Seconds(), delta.pg.Seconds())}
				if rows == 500_000 {
					deltaSmall = delta.took
				} else if deltaSmall > 0 {
					ratio := delta.took.Seconds() / deltaSmall.Seconds()
					fig.Figure += fmt.Sprintf(": %.2f× the 500,000-row delta", ratio)
					fig.Target, fig.Missed = "≤ 1.5× of 500,000 rows", ratio > 1.5
				}
				record(b, fig)
				b.Logf("  %s", strings.TrimSpace(fig.Figure))
			}
		})
	}
}
