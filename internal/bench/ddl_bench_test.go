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

// BenchmarkDDLToServed measures, in both watch modes (defaults otherwise: min_interval
// 1 s, the API's 500 ms pointer refresh; an hourly schedule, so only the watch
// publishes), the time from a DDL statement returning to the metadata API serving
// documents in the new shape, over 2,000 rows: 20 statements, each a random 1–2 s
// after the previous one was served, in turn a column added (NOT NULL with a
// default), renamed, retyped with a rewrite that changes its values, and dropped. No
// row change announces any of them: only the watch's digest of the definitions does.
// Run it with -benchtime 1x.
func BenchmarkDDLToServed(b *testing.B) {
	const rows, statements = 2_000, 20
	servedInEachMode(b, "ddl", rows, []string{"stats", "logical"}, func(b *testing.B, mode, dsn string, rig servingRig, c *committer) {
		var lat []time.Duration
		for i := range statements {
			col := fmt.Sprintf("c%d", i/4)
			var stmt string
			var shaped func(doc string) bool
			switch i % 4 {
			case 0:
				stmt = fmt.Sprintf(`ALTER TABLE items ADD COLUMN %s text NOT NULL DEFAULT 'x%d'`, col, i)
				shaped = func(doc string) bool { return strings.Contains(doc, fmt.Sprintf(`"%s":"x%d"`, col, i)) }
			case 1:
				stmt = fmt.Sprintf(`ALTER TABLE items RENAME COLUMN %s TO r%s`, col, col)
				shaped = func(doc string) bool { return strings.Contains(doc, fmt.Sprintf(`"r%s":"x%d"`, col, i-1)) }
			case 2:
				stmt = fmt.Sprintf(`ALTER TABLE items ALTER COLUMN r%s TYPE varchar(40) USING r%s || '!'`, col, col)
				shaped = func(doc string) bool { return strings.Contains(doc, fmt.Sprintf(`"r%s":"x%d!"`, col, i-2)) }
			default:
				stmt = fmt.Sprintf(`ALTER TABLE items DROP COLUMN r%s`, col)
				shaped = func(doc string) bool { return strings.Contains(doc, `"id":1,`) && !strings.Contains(doc, `"r`+col+`"`) }
			}
			time.Sleep(time.Second + time.Duration(c.rng.Int64N(int64(time.Second))))
			testenv.Exec(b, dsn, stmt)
			at := time.Now()
			for !shaped(c.doc(1)) {
				if time.Since(at) > 2*time.Minute {
					b.Fatalf("%s not served two minutes after it returned\n%s", stmt, rig.sp.logTail())
				}
				time.Sleep(10 * time.Millisecond)
			}
			lat = append(lat, time.Since(at))
		}
		rig.sp.stop()
		l := summarize(lat)
		target, bound := "p99 ≤ 2 s", 2*time.Second
		if mode == "logical" {
			target, bound = "p99 ≤ 1 s", time.Second
		}
		b.ReportMetric(l.p99.Seconds(), "p99_s")
		b.Logf("%d rows, DDL to served, watch.mode %s: %s, max %s; every statement (ms): %s", rows, mode, l, l.max.Round(time.Millisecond), l.every())
		record(b, Figure{Measurement: fmt.Sprintf("DDL to served, watch.mode %s, 2,000 rows (%d statements 1–2 s apart: columns added, renamed, retyped with a rewrite, dropped)", mode, statements),
			Figure: l.String(), Target: target, Missed: l.p99 > bound})
	})
}

// doc returns the API's answer for the document id, or "" when there is none.
func (c *committer) doc(id int) string {
	resp, err := c.client.Get(fmt.Sprintf("%s/v1/data/items/%d", c.api, id))
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(body)
}
