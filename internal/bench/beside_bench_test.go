package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
)

// BenchmarkBaseBeside measures, in both watch modes (defaults otherwise, but a TTL of
// 4 minutes and an hourly schedule), the keep-alive of a dataset of a 3,000,000-row
// collection (big) and a 10-row one (items): past half the TTL each chain's base is
// built from storage beside the stream of versions while a commit to items every 1–2 s
// is timed until served. It reports the worst commit while big's base was built, the
// source rows rendered meanwhile (the commits' own rows only: the keep-alive reads
// none), and how long big's base took against the first version's full read of the
// source. BENCH_BESIDE_ROWS changes the size of big, BENCH_BESIDE_PACE sets
// base_rows_per_second. Run it with -benchtime 1x.
func BenchmarkBaseBeside(b *testing.B) {
	bigBesideSmall(b, "beside", "BENCH_BESIDE_ROWS", paceSetting{"BENCH_BESIDE_PACE", "base_rows_per_second"}, []string{"ttl: 4m"}, func(b *testing.B, mode string, rows int, rig servingRig, c *committer, first float64) {
		w := watchBase(rig.sp.metrics, "big")
		m0 := scrape(rig.sp.metrics)
		var during, all []time.Duration
		deadline := time.Now().Add(8 * time.Minute)
		for i := 0; !w.taken(); i++ {
			if time.Now().After(deadline) {
				b.Fatalf("big's base was not built and taken within 8 minutes\n%s", rig.sp.logTail())
			}
			time.Sleep(time.Second + time.Duration(c.rng.Int64N(int64(time.Second))))
			building := w.building()
			lat := c.commit(i, true)
			all = append(all, lat)
			if building || w.building() {
				during = append(during, lat)
			}
		}
		m1 := scrape(rig.sp.metrics)
		w.stop()
		rig.sp.stop()
		if len(during) == 0 {
			b.Fatalf("no commit was timed while big's base was built (%d in all)", len(all))
		}
		d, a := summarize(during), summarize(all)
		rendered := renderedOf(rig.sp, "big")
		build := baseDuration(b, rig.sp, "big")
		ratio := build.Seconds() / first
		bound, target := 2*time.Second, "worst ≤ 2 s"
		if mode == "logical" {
			bound, target = time.Second, "worst ≤ 1 s"
		}
		b.ReportMetric(d.max.Seconds(), "worst_during_s")
		b.ReportMetric(ratio, "base/first_read")
		b.Logf("watch.mode %s, %d rows in big: commits while its base was built %s, max %s; all %s, max %s",
			mode, rows, d, d.max.Round(time.Millisecond), a, a.max.Round(time.Millisecond))
		b.Logf("  big's rows rendered after the first version %d; big's base %.1f s against the first version's full read %.1f s (%.2f×)",
			rendered, build.Seconds(), first, ratio)
		b.Logf("  every commit (ms): %s", a.every())
		for _, line := range logLines(rig.sp, "beside the stream", "TTL", "writing a base") {
			b.Logf("  syncer: %s", line)
		}
		logSyncs(b, m0, m1)
		record(b, Figure{Measurement: fmt.Sprintf("commit to served for a 10-row collection while the keep-alive builds a %s-row collection's base beside the stream, watch.mode %s (commits 1–2 s apart)", thousands(rows), mode),
			Figure: fmt.Sprintf("%s, worst %.2f s", d, d.max.Seconds()), Target: target, Missed: d.max > bound})
		record(b, Figure{Measurement: fmt.Sprintf("source rows of a %s-row collection read for its keep-alive, watch.mode %s", thousands(rows), mode),
			Figure: fmt.Sprintf("%d rows", rendered), Target: "0", Missed: rendered != 0})
		record(b, Figure{Measurement: fmt.Sprintf("a %s-row base built from storage beside the stream (base_rows_per_second default), against the first version's full read of the source, watch.mode %s", thousands(rows), mode),
			Figure: fmt.Sprintf("%.1f s vs %.1f s: %.2f×", build.Seconds(), first, ratio), Target: "≤ 1.3×", Missed: ratio > 1.3})
	})
}

// paceSetting is a setting that paces a base (key), and the variable that sets it.
type paceSetting struct{ env, key string }

// bigBesideSmall runs body in both watch modes against `syncer run` and the API
// serving a collection big of 3,000,000 rows (or the number in the variable
// envRows) and a 10-row one, items, with every default but an hourly schedule and
// settings (and the setting pace, as the variable in pace.env says, when set); body gets the rig, a
// committer on items whose first commit is served, and the first version's sync
// duration, and the syncer's log is kept in /tmp/<name>-<mode>.log.
func bigBesideSmall(b *testing.B, name, envRows string, pace paceSetting, settings []string, body func(b *testing.B, mode string, rows int, rig servingRig, c *committer, first float64)) {
	rows := envInt(b, envRows, 3_000_000)
	defaultEnv(b)
	dir := b.TempDir()
	for _, mode := range []string{"stats", "logical"} {
		b.Run(mode, func(b *testing.B) {
			dsn := testenv.Postgres(b)
			loadItems(b, dsn, "big", rows)
			loadItems(b, dsn, "items", 10)
			settle(b, dsn, "big")
			all, slot := []string{`schedule: "@every 1h"`}, ""
			if mode == "logical" {
				all = logicalSettings(b, dsn)
				slot = slotOf(all)
			}
			all = append(all, settings...)
			if v := os.Getenv(pace.env); v != "" {
				all = append(all, pace.key+": "+v)
			}
			cfg := writeCollectionConfig(b, dir, name+mode, "{name: items, table: items, key: id}\n  - {name: big, table: big, key: id}", all...)
			for range b.N {
				rig := startServing(b, cfg, dsn, slot)
				b.Cleanup(func() {
					if data, err := os.ReadFile(rig.sp.logPath); err == nil {
						_ = os.WriteFile("/tmp/"+name+"-"+mode+".log", data, 0o600)
					}
				})
				first := scrape(rig.sp.metrics).sum("snapflip_sync_duration_seconds_sum")
				c := newCommitter(b, dsn, rig.api, 10, rig.sp)
				time.Sleep(1500 * time.Millisecond) // past the connection's first statistics report
				c.commit(-1, true)                  // the stats watch's first report of a connection comes late
				body(b, mode, rows, rig, c, first)
			}
		})
	}
}

// baseWatch follows one collection's base beside the stream through the syncer's
// metrics, scraped every 200 ms: whether it was seen building, and when a version
// took it.
type baseWatch struct {
	mu     sync.Mutex
	seen   bool
	goneAt time.Time
	done   chan struct{}
	wg     sync.WaitGroup
}

func watchBase(metrics, collection string) *baseWatch {
	w := &baseWatch{done: make(chan struct{})}
	label := fmt.Sprintf(`collection="%s"`, collection)
	w.wg.Go(func() {
		for {
			m := scrape(metrics)
			w.mu.Lock()
			if m.sum("snapflip_base_state", label, `state="building"`) > 0 {
				w.seen = true
			}
			if w.seen && w.goneAt.IsZero() && m.sum("snapflip_base_state", label, `state="taken"`) > 0 {
				w.goneAt = time.Now()
			}
			w.mu.Unlock()
			select {
			case <-w.done:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	return w
}

func (w *baseWatch) building() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen && w.goneAt.IsZero()
}

func (w *baseWatch) taken() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.goneAt.IsZero()
}

func (w *baseWatch) stop() { close(w.done); w.wg.Wait() }

// logLines returns the syncer's log lines that contain any of subs.
func logLines(p *syncerProc, subs ...string) []string {
	data, _ := os.ReadFile(p.logPath)
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		for _, s := range subs {
			if strings.Contains(line, s) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}

// renderedOf sums the rows the syncer logged rendering for the collection's layers,
// the first version's aside.
func renderedOf(p *syncerProc, collection string) int {
	n := 0
	for i, line := range logLines(p, `msg="layer written"`) {
		if !strings.Contains(line, "collection="+collection+" ") || i < 2 || strings.Contains(line, "compacted from storage") {
			continue
		}
		if _, after, ok := strings.Cut(line, " rendered="); ok {
			r, _ := strconv.Atoi(strings.Fields(after)[0])
			n += r
		}
	}
	return n
}

// baseDuration returns how long the collection's base beside the stream took to
// build, as the syncer logged it.
func baseDuration(tb testing.TB, p *syncerProc, collection string) time.Duration {
	tb.Helper()
	for _, line := range logLines(p, "base built beside the stream") {
		if !strings.Contains(line, "collection="+collection+" ") {
			continue
		}
		_, after, ok := strings.Cut(line, " duration=")
		if !ok {
			continue
		}
		d, err := time.ParseDuration(strings.Fields(after)[0])
		if err == nil {
			return d
		}
	}
	tb.Fatalf("the syncer did not log the build of %s's base\n%s", collection, p.logTail())
	return 0
}

// envInt returns the number in the environment variable name, or def when it is
// unset.
func envInt(tb testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		tb.Fatalf("%s=%q: %v", name, s, err)
	}
	return n
}
