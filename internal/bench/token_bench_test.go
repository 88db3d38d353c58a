package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkTokenReads measures read-your-writes on the built binaries with every
// default but an hourly schedule, 2,000 rows, in both watch modes: a writer commits an
// update taking its token (RETURNING pg_current_xact_id()), then reads the document at
// once with Snapshot-After and Prefer: wait=10; the figure is commit to answer, over
// 100 writes 1–2 s apart, as the other freshness figures are taken. Every answer
// must hold the write. Run it with -benchtime 1x.
func BenchmarkTokenReads(b *testing.B) {
	const rows, writes = 2_000, 100
	servedInEachMode(b, "token", rows, []string{"logical", "stats"}, func(b *testing.B, mode, _ string, rig servingRig, c *committer) {
		client := &http.Client{Timeout: 15 * time.Second} // beyond the wait asked for
		lat := make([]time.Duration, 0, writes)
		for i := range writes {
			time.Sleep(time.Second + time.Duration(c.rng.Int64N(int64(time.Second)))) // the writer's own pace
			id := 1 + c.rng.IntN(rows)
			title := fmt.Sprintf("token-%d", i)
			var xid string
			at := time.Now()
			if err := c.conn.QueryRow(context.Background(), `UPDATE items SET title = $1 WHERE id = $2 RETURNING pg_current_xact_id()::text`,
				title, id).Scan(&xid); err != nil {
				b.Fatal(err)
			}
			status, body := readWithToken(b, client, fmt.Sprintf("%s/v1/data/items/%d", rig.api, id), "x:"+xid)
			lat = append(lat, time.Since(at))
			if status != http.StatusOK || !strings.Contains(body, `"title":"`+title+`"`) {
				b.Fatalf("write %d: the read with its token answered %d %s\n%s", i, status, body, rig.sp.logTail())
			}
		}
		rig.sp.stop()
		l := summarize(lat)
		target, bound := "p99 ≤ 0.5 s", 500*time.Millisecond
		if mode == "stats" {
			target, bound = "p99 ≤ 1.0 s", time.Second
		}
		b.ReportMetric(l.p99.Seconds(), "p99_s")
		b.Logf("commit to a read with its token answered, watch.mode %s: %s, max %s; every write (ms): %s", mode, l, l.max.Round(time.Millisecond), l.every())
		record(b, Figure{Measurement: fmt.Sprintf("commit to a read with its token answered, watch.mode %s, 2,000 rows (%d writes 1–2 s apart)", mode, writes),
			Figure: fmt.Sprintf("%s, max %.2f s", l, l.max.Seconds()), Target: target, Missed: l.p99 > bound})
	})
}

// readWithToken reads url with Snapshot-After: token and Prefer: wait=10.
func readWithToken(tb testing.TB, client *http.Client, url, token string) (int, string) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Snapshot-After", token)
	req.Header.Set("Prefer", "wait=10")
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
