package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
)

// loadItems fills table name with n rows of about 345 bytes of JSON each, of several
// column types, a million rows a statement (each statement has a minute).
func loadItems(tb testing.TB, dsn, name string, n int) {
	tb.Helper()
	testenv.Exec(tb, dsn, fmt.Sprintf(`CREATE TABLE %s (
		id bigint PRIMARY KEY, sku text NOT NULL, title text NOT NULL, price numeric(12,2) NOT NULL,
		qty integer NOT NULL, active boolean NOT NULL, tags text[] NOT NULL, attrs jsonb NOT NULL,
		created_at timestamptz NOT NULL, updated_at timestamptz)`, name))
	const chunk = 1_000_000
	for from := 1; from <= n; from += chunk {
		testenv.Exec(tb, dsn, fmt.Sprintf(`INSERT INTO %s SELECT g, 'SKU-' || lpad(g::text, 8, '0'), 'Item ' || g || ' ' || md5(g::text) || md5((g+1)::text),
		(g %% 100000) / 100.0, g %% 1000, g %% 7 <> 0, ARRAY['t' || (g %% 10), 'c' || (g %% 33)],
		jsonb_build_object('color', 'c' || (g %% 17), 'size', g %% 5, 'note', md5((g*3)::text)),
		timestamptz '2025-01-01' + make_interval(secs => g),
		CASE WHEN g %% 3 = 0 THEN NULL ELSE timestamptz '2026-01-01' + make_interval(secs => g) END
		FROM generate_series(%d, %d) g`, name, from, min(from+chunk-1, n)))
	}
	testenv.Exec(tb, dsn, "VACUUM ANALYZE "+name)
}

// build compiles a main package (once per test process) and returns its binary.
func build(tb testing.TB, _ string, pkg string) string {
	tb.Helper()
	return testenv.Build(tb, pkg)
}

// measured is one process run: wall time and peak RSS.
type measured struct {
	took   time.Duration
	rssMiB float64
	out    string
}

// runProc runs a program to completion and measures it.
func runProc(tb testing.TB, env []string, name string, args ...string) measured {
	tb.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err != nil {
		tb.Fatalf("%s %v: %v\n%s", filepath.Base(name), args, err, out)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return measured{took: took, rssMiB: float64(ru.Maxrss) / 1024, out: string(out)}
}

// freshEmulator starts an emulator process with the snapflip schema and returns its
// address and a function that stops it.
func freshEmulator(tb testing.TB) (string, func()) {
	tb.Helper()
	addr, cmd := testenv.StartEmulator(tb)
	testenv.Store(tb, testenv.StoreConfig(addr))
	return addr, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
}

// BenchmarkSync measures, on 1,000,000 rows: the syncer against a minimal pipelined
// copy (each with a fresh emulator), reading alone, writing alone, the syncer's peak RSS
// at 1,000,000 and 100,000 rows, a no-op cycle, and a naive loop on 20,000 rows.
// Run it with -benchtime 1x: one iteration is the whole suite.
func BenchmarkSync(b *testing.B) {
	dsn := testenv.Postgres(b)
	const big, small, naiveRows = 1_000_000, 100_000, 20_000
	loadItems(b, dsn, "items", big)
	loadItems(b, dsn, "items_small", small)
	dir := b.TempDir()
	syncer := build(b, dir, "github.com/snapflip/snapflip/cmd/syncer")
	mincopy := build(b, dir, "github.com/snapflip/snapflip/internal/bench/mincopy")
	config := func(table string) string {
		p := filepath.Join(dir, table+".yaml")
		y := fmt.Sprintf("dataset: bench\ncollections:\n  - name: items\n    table: %s\n    key: id\n", table)
		if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
			b.Fatal(err)
		}
		return p
	}
	env := func(addr string) []string {
		return []string{"SNAPFLIP_POSTGRES_DSN=" + dsn, "BIGTABLE_EMULATOR_HOST=" + addr}
	}
	syncOnce := func(table string) (measured, measured) {
		addr, stop := freshEmulator(b)
		defer stop()
		full := runProc(b, env(addr), syncer, "--config", config(table), "--log-level", "warn", "once")
		if !strings.Contains(full.out, "published") {
			b.Fatalf("syncer did not publish: %s", full.out)
		}
		noop := runProc(b, env(addr), syncer, "--config", config(table), "--log-level", "warn", "once")
		if !strings.Contains(noop.out, "unchanged") {
			b.Fatalf("second sync was not a no-op: %s", noop.out)
		}
		return full, noop
	}
	// rollback publishes two versions of a table on a fresh emulator, then times
	// `syncer rollback --previous` (the process, and the rollback itself as it reports).
	rollback := func(table string) (took, process time.Duration) {
		addr, stop := freshEmulator(b)
		defer stop()
		runProc(b, env(addr), syncer, "--config", config(table), "--log-level", "warn", "once")
		testenv.Exec(b, dsn, "UPDATE "+table+" SET qty = qty + 1 WHERE id = 1")
		runProc(b, env(addr), syncer, "--config", config(table), "--log-level", "warn", "once")
		testenv.Exec(b, dsn, "UPDATE "+table+" SET qty = qty - 1 WHERE id = 1")
		r := runProc(b, env(addr), syncer, "--config", config(table), "--log-level", "warn", "rollback", "--previous", "--reason", "bench")
		took = -1
		for _, line := range strings.Split(r.out, "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "took" {
				if d, err := time.ParseDuration(f[1]); err == nil {
					took = d
				}
			}
		}
		if took < 0 {
			b.Fatalf("rollback said: %s", r.out)
		}
		return took, r.took
	}
	minimal := func(mode string, rows int) measured {
		addr, stop := freshEmulator(b)
		defer stop()
		return runProc(b, env(addr), mincopy, "-mode", mode, "-dsn", dsn, "-emulator", addr, "-table", "items", "-rows", fmt.Sprint(rows))
	}

	for range b.N {
		// Interleave the two runs that are compared, twice, and keep each one's best.
		var syncBest, minBest measured
		var noop measured
		for i := range 2 {
			m := minimal("copy", 0)
			s, n := syncOnce("items")
			if i == 0 || m.took < minBest.took {
				minBest = m
			}
			if i == 0 || s.took < syncBest.took {
				syncBest, noop = s, n
			}
		}
		smallSync, _ := syncOnce("items_small")
		rollSmall, rollSmallProc := rollback("items_small")
		rollBig, rollBigProc := rollback("items")
		read := minimal("read", 0)
		write := minimal("write", big)
		// The naive loop is one loopback round trip per row, and its rate varies from
		// run to run; keep its fastest of three, the figure least favourable to us.
		var naive measured
		for i := range 3 {
			if n := minimal("naive", naiveRows); i == 0 || n.took < naive.took {
				naive = n
			}
		}

		rowsPerSec := float64(big) / syncBest.took.Seconds()
		naivePerSec := float64(naiveRows) / naive.took.Seconds()
		b.ReportMetric(syncBest.took.Seconds(), "sync_s")
		b.ReportMetric(minBest.took.Seconds(), "mincopy_s")
		b.ReportMetric(syncBest.took.Seconds()/minBest.took.Seconds(), "sync/mincopy")
		b.ReportMetric(rowsPerSec, "rows/s")
		b.ReportMetric(rowsPerSec/naivePerSec, "x_naive")
		b.ReportMetric(syncBest.rssMiB, "rss_1M_MiB")
		b.ReportMetric(syncBest.rssMiB/smallSync.rssMiB, "rss_1M/100k")
		b.ReportMetric(noop.took.Seconds()/syncBest.took.Seconds(), "noop/sync")
		fmt.Printf(`
full sync of %d rows (fresh emulator process each)
  syncer once             %8.2fs  %9.0f rows/s  peak RSS %6.1f MiB
  minimal pipelined copy  %8.2fs  (syncer/minimal = %.3f; target <= 1.15)
  read alone (pgx)        %8.2fs
  write alone (ApplyBulk) %8.2fs
  no-op cycle             %8.2fs  (%.1f%% of a full sync; target < 5%%)
  naive loop, %d rows  %8.2fs  %9.0f rows/s  (fastest of 3; syncer is %.1fx; target >= 20x)
  syncer, %d rows       %8.2fs  peak RSS %6.1f MiB (1M/100k = %.2f; target <= 1.5, and < 200 MB)
  rollback --previous: %s (process %s) at 100,000 rows, %s (process %s) at 1,000,000 rows (target: well under a second)
`, big, syncBest.took.Seconds(), rowsPerSec, syncBest.rssMiB, minBest.took.Seconds(), syncBest.took.Seconds()/minBest.took.Seconds(),
			read.took.Seconds(), write.took.Seconds(), noop.took.Seconds(), 100*noop.took.Seconds()/syncBest.took.Seconds(),
			naiveRows, naive.took.Seconds(), naivePerSec, rowsPerSec/naivePerSec,
			small, smallSync.took.Seconds(), smallSync.rssMiB, syncBest.rssMiB/smallSync.rssMiB,
			rollSmall, rollSmallProc.Round(time.Millisecond), rollBig, rollBigProc.Round(time.Millisecond))

		syncRatio, rssRatio, noopShare := syncBest.took.Seconds()/minBest.took.Seconds(), syncBest.rssMiB/smallSync.rssMiB, noop.took.Seconds()/syncBest.took.Seconds()
		record(b, Figure{Measurement: fmt.Sprintf("syncer, full sync of %s rows", thousands(big)),
			Figure: fmt.Sprintf("%.2f s, %s rows/s", syncBest.took.Seconds(), thousands(rowsPerSec))})
		record(b, Figure{Measurement: "minimal pipelined copy of the same rows",
			Figure: fmt.Sprintf("%.2f s: syncer %.2f×", minBest.took.Seconds(), syncRatio),
			Target: "syncer ≤ 1.15×", Missed: syncRatio > 1.15})
		record(b, Figure{Measurement: "reading alone / writing alone",
			Figure: fmt.Sprintf("%.2f s / %.2f s", read.took.Seconds(), write.took.Seconds())})
		record(b, Figure{Measurement: fmt.Sprintf("naive loop (one `Apply` per row), %s rows, fastest of 3", thousands(naiveRows)),
			Figure: fmt.Sprintf("%.2f s, %s rows/s: syncer %.1f×", naive.took.Seconds(), thousands(naivePerSec), rowsPerSec/naivePerSec),
			Target: "syncer ≥ 20×", Missed: rowsPerSec/naivePerSec < 20})
		record(b, Figure{Measurement: fmt.Sprintf("syncer peak RSS, %s vs %s rows", thousands(big), thousands(small)),
			Figure: fmt.Sprintf("%.1f MiB vs %.1f MiB: %.2f×", syncBest.rssMiB, smallSync.rssMiB, rssRatio),
			Target: "≤ 1.5×, < 200 MB", Missed: rssRatio > 1.5 || !underMB(syncBest.rssMiB, 200)})
		record(b, Figure{Measurement: fmt.Sprintf("no-op cycle on the unchanged %s rows", thousands(big)),
			Figure: fmt.Sprintf("%.2f s: %.1f%% of a full sync", noop.took.Seconds(), 100*noopShare),
			Target: "< 5%", Missed: noopShare >= 0.05})
		record(b, Figure{Measurement: fmt.Sprintf("`syncer rollback --previous`, %s / %s rows", thousands(small), thousands(big)),
			Figure: fmt.Sprintf("%s / %s (the whole process: %s / %s)", msFigure(rollSmall), msFigure(rollBig), msFigure(rollSmallProc), msFigure(rollBigProc)),
			Target: "well under a second"})
	}
}

// msFigure formats d in whole milliseconds: 27 ms.
func msFigure(d time.Duration) string { return fmt.Sprintf("%.0f ms", ms(d)) }
