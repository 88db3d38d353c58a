package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/testenv"
)

// envBenchProbes sets how many probes BenchmarkLogicalProbes commits (default 3,000).
const envBenchProbes = "SNAPFLIP_BENCH_PROBES"

// BenchmarkLogicalProbes is the stress test of logical-mode freshness, on the built
// binaries with every default (min_interval 250 ms, the API's 500 ms pointer refresh)
// but an hourly schedule, over 100,000 rows: 12 probers, each on a pooled connection of
// its own, read a row, then update their own and poll the API every 10 ms until it
// serves the update, then probe again at once, so commits never stop (a write storm);
// the second half of the probes run with a spinning goroutine per core beside them.
// It reports the percentiles of commit to served, the slowest probe, and the versions
// published. Run it with -benchtime 1x.
func BenchmarkLogicalProbes(b *testing.B) {
	const rows, probers = 100_000, 12
	probes := 3000
	if s := os.Getenv(envBenchProbes); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < probers {
			b.Fatalf("%s=%q: want an integer of at least %d", envBenchProbes, s, probers)
		}
		probes = n
	}
	defaultEnv(b)
	dir := b.TempDir()
	dsn, settings := logicalItems(b, rows)
	for range b.N {
		rig, _ := logicalServing(b, dir, "probes", dsn, settings, rows)
		m0 := scrape(rig.sp.metrics)
		lat, err := runProbes(dsn, rig.api, probers, probes)
		m1 := scrape(rig.sp.metrics)
		if err != nil {
			b.Fatalf("%v\n%s", err, rig.sp.logTail())
		}
		rig.sp.stop()
		slices.Sort(lat)
		p50, p99, p999, worst := percentile(lat, 50), percentile(lat, 99), percentile(lat, 99.9), lat[len(lat)-1]
		versions := m1.sum("snapflip_syncs_total", `result="published"`) - m0.sum("snapflip_syncs_total", `result="published"`)
		b.ReportMetric(p999.Seconds(), "p99.9_s")
		b.ReportMetric(worst.Seconds(), "max_s")
		figure := fmt.Sprintf("p50 %.2f s, p99 %.2f s, p99.9 %.2f s, max %.2f s (%d probes, %.0f versions)",
			p50.Seconds(), p99.Seconds(), p999.Seconds(), worst.Seconds(), len(lat), versions)
		b.Logf("%d probes by %d pooled probers, commit to served: %s", len(lat), probers, figure)
		record(b, Figure{Measurement: "commit to served, watch.mode logical, 100,000 rows, 12 pooled connections that each read a row, then update one, without pause (half of it with every core kept busy)",
			Figure: figure, Target: "every probe served; p99.9 ≤ 1 s; none over 5 s", Missed: p999 > time.Second || worst > 5*time.Second})
	}
}

// runProbes runs probes probes over probers pooled connections (see
// BenchmarkLogicalProbes) and returns each probe's time from its commit returning to
// the API at api serving it. A probe not served within a minute is an error.
func runProbes(dsn, api string, probers, probes int) ([]time.Duration, error) {
	return testenv.Probers(probers, probes, func(ctx context.Context, p int, served func(time.Duration)) error {
		return prober(ctx, dsn, api, p, probers, probes/probers, served)
	})
}

// prober is one of runProbes' probers: row p+1 is its own, and it reads the next
// prober's before each update, on one connection.
func prober(ctx context.Context, dsn, api string, p, probers, n int, served func(time.Duration)) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	client := &http.Client{Timeout: 5 * time.Second}
	id, next := p+1, (p+1)%probers+1
	url := fmt.Sprintf("%s/v1/data/items/%d", api, id)
	for i := range n {
		var title string
		if err := conn.QueryRow(ctx, commitReadSQL, next).Scan(&title); err != nil {
			return err
		}
		marker := fmt.Sprintf(`"probe-%d-%d"`, p, i)
		if _, err := conn.Exec(ctx, commitUpdateSQL, marker[1:len(marker)-1], id); err != nil {
			return err
		}
		at := time.Now()
		for !servedAt(ctx, client, url, marker) {
			if time.Since(at) > time.Minute {
				return fmt.Errorf("probe %s (prober %d) not served a minute after its commit", marker, p)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(10 * time.Millisecond)
		}
		served(time.Since(at))
	}
	return nil
}

// servedAt reports whether the document at url holds want.
func servedAt(ctx context.Context, client *http.Client, url, want string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && strings.Contains(string(body), want)
}
