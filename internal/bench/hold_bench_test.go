package bench

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
)

// BenchmarkDefinitionChangeHeld measures, in both watch modes (defaults otherwise,
// definition_changes: hold, but an hourly schedule), a column added with a default
// to a 3,000,000-row table (big) of a dataset that also holds a 10-row one (items):
// big is held at its last state while its new base is read beside the stream, and a
// commit to items every 1–2 s is timed until served. It reports the worst commit
// while big was held, and how long after the DDL big was served in its new shape
// against the first version's full read of the source (the time `syncer once` takes
// to read it), and the longest source transaction meanwhile. BENCH_HOLD_ROWS
// changes the size of big, BENCH_HOLD_PACE sets source_base_rows_per_second. Run it with
// -benchtime 1x.
func BenchmarkDefinitionChangeHeld(b *testing.B) {
	bigBesideSmall(b, "hold", "BENCH_HOLD_ROWS", paceSetting{"BENCH_HOLD_PACE", "source_base_rows_per_second"}, nil, func(b *testing.B, mode string, rows int, rig servingRig, c *committer, first float64) {
		m0 := scrape(rig.sp.metrics)
		testenv.Exec(b, c.dsn, `ALTER TABLE big ADD COLUMN extra int NOT NULL DEFAULT 7`)
		ddl := time.Now()
		longest := longestTransaction(b, c.dsn)
		var during []time.Duration
		var served time.Duration
		for i := 0; served == 0; i++ {
			if time.Since(ddl) > 8*time.Minute {
				b.Fatalf("big was not served in its new shape within 8 minutes\n%s", rig.sp.logTail())
			}
			time.Sleep(time.Second + time.Duration(c.rng.Int64N(int64(time.Second))))
			if newShape(c, "big", rows) {
				served = time.Since(ddl)
				break
			}
			during = append(during, c.commit(i, true))
			if newShape(c, "big", rows) {
				served = time.Since(ddl)
			}
		}
		m1 := scrape(rig.sp.metrics)
		held := longest()
		rig.sp.stop()
		if len(during) == 0 {
			b.Fatalf("no commit was timed while big was held")
		}
		d := summarize(during)
		ratio := served.Seconds() / first
		bound, target := 2*time.Second, "worst ≤ 2 s"
		if mode == "logical" {
			bound, target = time.Second, "worst ≤ 1 s"
		}
		b.ReportMetric(d.max.Seconds(), "worst_during_s")
		b.ReportMetric(ratio, "served/first_read")
		b.Logf("watch.mode %s, %d rows in big: commits while it was held %s, max %s; every commit (ms): %s",
			mode, rows, d, d.max.Round(time.Millisecond), d.every())
		b.Logf("  big served in its new shape %.1f s after the DDL; the first version's full read %.1f s (%.2f×)", served.Seconds(), first, ratio)
		for _, line := range logLines(rig.sp, "held", "beside the stream", "writing a base", "joins") {
			b.Logf("  syncer: %s", line)
		}
		logSyncs(b, m0, m1)
		record(b, Figure{Measurement: fmt.Sprintf("commit to served for a 10-row collection while a %s-row collection is held after ADD COLUMN … DEFAULT, its base read beside the stream, watch.mode %s (commits 1–2 s apart)", thousands(rows), mode),
			Figure: fmt.Sprintf("%s, worst %.2f s", d, d.max.Seconds()), Target: target, Missed: d.max > bound})
		b.Logf("  longest source transaction from the DDL until big was served: %.1f s", held.Seconds())
		record(b, Figure{Measurement: fmt.Sprintf("longest source transaction while a %s-row collection's base is read beside the stream (base_transaction default), from pg_stat_activity, watch.mode %s", thousands(rows), mode),
			Figure: fmt.Sprintf("%.1f s", held.Seconds()), Target: "≤ 10 s", Missed: held > 10*time.Second})
		record(b, Figure{Measurement: fmt.Sprintf("ADD COLUMN … DEFAULT on a %s-row table to served in the new shape (base read beside the stream, source_base_rows_per_second default), against the first version's full read, watch.mode %s", thousands(rows), mode),
			Figure: fmt.Sprintf("%.1f s vs %.1f s: %.2f×", served.Seconds(), first, ratio), Target: "≤ 1.3×", Missed: ratio > 1.3})
	})
}

// newShape reports whether the API serves the last row of table collection (rows
// of them) with the column extra added.
func newShape(c *committer, collection string, rows int) bool {
	resp, err := c.client.Get(fmt.Sprintf("%s/v1/data/%s/%d", c.api, collection, rows))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"extra":7`)
}
