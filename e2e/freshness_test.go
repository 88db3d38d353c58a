package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/cli"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
)

// freshnessBudget is the time from a commit to the API serving it, as make bench
// measures it (BenchmarkCommitToVisible); tests log a commit served later, and fail
// one not served within probeLimit.
const freshnessBudget = 2 * time.Second

// awaitServed polls GET path until its body holds want, and returns how long that took
// from since.
func (e *env) awaitServed(tb testing.TB, path, want string, since time.Time, limit time.Duration) time.Duration {
	tb.Helper()
	testenv.Eventually(tb, limit-time.Since(since), func() error {
		if r := e.get(tb, path); r.status != http.StatusOK || !strings.Contains(string(r.body), want) {
			return fmt.Errorf("GET %s still answers %d %s after the commit; want %q", path, r.status, r.body, want)
		}
		return nil
	})
	return time.Since(since)
}

// TestCommitsAreServedWithinTheBudget: with the default configuration (watch on, the
// API's default pointer refresh; the schedule hourly, so only the watch can do it), a
// commit to a table collection, and one to the table a query collection reads, is
// served by the watch every time; it logs any served later than the 2 s budget.
func TestCommitsAreServedWithinTheBudget(t *testing.T) {
	// Not parallel: it measures latency.
	e := start(t)
	e.StopAPI()
	e.startAPI(t, cli.EnvRefresh, "") // the default refresh
	defer e.runSyncer(t, config)()
	e.awaitServed(t, docPath("things", "plain"), `"id":"plain"`, time.Now(), probeLimit)

	var lat []time.Duration
	for i := range 10 {
		table, path := "things", docPath("things", "plain")
		stmt := fmt.Sprintf(`UPDATE things SET note = 'probe-%d' WHERE id = 'plain'`, i)
		if i%2 == 1 { // the query collection: SELECT key, value, gen FROM flags WHERE enabled
			table, path = "flags", docPath("flags", "on")
			stmt = fmt.Sprintf(`UPDATE flags SET value = 'probe-%d' WHERE key = 'on'`, i)
		}
		testenv.Exec(t, e.DSN, stmt)
		at := time.Now()
		d := e.awaitServed(t, path, fmt.Sprintf("probe-%d", i), at, probeLimit)
		lat = append(lat, d)
		if d > freshnessBudget {
			t.Logf("commit %d to %s served after %s, past the budget of %s (make bench measures it)", i, table, d.Round(time.Millisecond), freshnessBudget)
		}
	}
	slices.Sort(lat)
	t.Logf("commit to served, 10 commits: min %s, median %s, max %s", lat[0].Round(time.Millisecond),
		lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
}

// TestWriteStormMakesVersionsAtTheMinimumInterval: in each watch mode, 150 commits in
// about 3 s make a version about every watch.min_interval (by default 1 s in stats mode,
// 250 ms in logical mode), not one per commit, and the last commit is served.
func TestWriteStormMakesVersionsAtTheMinimumInterval(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode     string
		interval time.Duration
	}{{"stats", time.Second}, {"logical", 250 * time.Millisecond}} {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			e := start(t)
			cfg := config
			if tt.mode == "logical" {
				testenv.Exec(t, e.DSN, `ALTER TABLE flags REPLICA IDENTITY FULL`)
				cfg = logicalConfig(t, e)
			}
			defer e.runSyncer(t, cfg)()
			e.awaitServed(t, docPath("things", "plain"), `"id":"plain"`, time.Now(), 30*time.Second)
			st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
			before := publishedCount(t, st)

			ctx := context.Background()
			conn, err := pgx.Connect(ctx, e.DSN)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			start := time.Now()
			const commits = 150
			for i := 1; i <= commits; i++ {
				if _, err := conn.Exec(ctx, `UPDATE things SET gen = $1 WHERE id = 'plain'`, i); err != nil {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Millisecond) // pacing the storm: commits spread over time are what is under test
			}
			storm := time.Since(start)
			e.awaitServed(t, docPath("things", "plain"), fmt.Sprintf(`"gen":%d`, commits), time.Now(), probeLimit)
			versions := publishedCount(t, st) - before
			// One per min_interval during the storm, plus the one after it, give or take one.
			most := int(storm/tt.interval) + 3
			if versions < 2 || versions > most {
				t.Errorf("%d commits in %s made %d versions; want 2..%d (one per min_interval, %s)", commits, storm.Round(time.Millisecond), versions, most, tt.interval)
			}
			t.Logf("%d commits in %s: %d versions", commits, storm.Round(time.Millisecond), versions)
		})
	}
}

// publishedCount counts the versions ever published.
func publishedCount(tb testing.TB, st interface {
	ListManifests(context.Context, string) ([]snapshot.Manifest, error)
}) int {
	tb.Helper()
	ms, err := st.ListManifests(context.Background(), "e2e")
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, m := range ms {
		if m.State == snapshot.StatePublished || m.State == snapshot.StateRetired {
			n++
		}
	}
	return n
}
