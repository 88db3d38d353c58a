package e2e

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
	"github.com/snapflip/snapflip/internal/testenv/stack"
)

// envProbes sets how many probes TestLogicalProbesAreAllServed commits (make chaos:
// 3000).
const envProbes = "SNAPFLIP_PROBES"

// probeLimit is the longest a commit may wait to be served: far below the hourly
// schedule that would otherwise serve one the watch missed, and long enough for a
// loaded machine. How soon commits are served (the freshness budget) is make bench's
// figure; a test logs it.
const probeLimit = time.Minute

// TestLogicalProbesAreAllServed: in watch.mode logical, with the schedule hourly,
// probers on pooled sessions each read a row, then update another (the read/write
// pattern of a connection pool), and wait for the API to serve the update; half the
// probes run with every core kept busy. Every probe is served within probeLimit: a
// commit the stream delivered never waits for the schedule, not even one that a
// version's snapshot was opened a moment too early to see. The percentiles it logs
// are under -race, with the syncer and the API in the test's process; the freshness
// target (p99.9 ≤ 1 s) is measured on the built binaries by
// internal/bench.BenchmarkLogicalProbes.
func TestLogicalProbesAreAllServed(t *testing.T) {
	probes := 480
	if s := os.Getenv(envProbes); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive integer", envProbes, s)
		}
		probes = n
	}
	const probers = 12
	e := start(t)
	testenv.Exec(t, e.DSN, `ALTER TABLE flags REPLICA IDENTITY FULL`,
		`INSERT INTO things (id, note) SELECT 'probe-' || g, '' FROM generate_series(0, 11) g`)
	defer e.runSyncer(t, logicalConfig(t, e))()
	e.awaitServed(t, docPath("things", "probe-0"), `"id":"probe-0"`, time.Now(), 30*time.Second)

	// Probers keeps every core busy while the second half of the probes runs.
	all, err := testenv.Probers(probers, probes, func(ctx context.Context, p int, served func(time.Duration)) error {
		return e.probe(ctx, p, probes/probers, served)
	})
	if err != nil {
		t.Error(err)
	}
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	q := func(f float64) time.Duration {
		return all[min(len(all)-1, int(f*float64(len(all))))].Round(time.Millisecond)
	}
	t.Logf("%d probes served: p50 %s, p99 %s, p99.9 %s, max %s", len(all), q(0.5), q(0.99), q(0.999), all[len(all)-1].Round(time.Millisecond))
}

// probe runs n probes on one pooled session: read a row, update this prober's own,
// await it served. It returns the first probe not served within probeLimit.
func (e *env) probe(ctx context.Context, p, n int, served func(time.Duration)) error {
	conn, err := pgx.Connect(ctx, e.DSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	id := fmt.Sprintf("probe-%d", p)
	path := docPath("things", id)
	for i := range n {
		var note string
		if err := conn.QueryRow(ctx, `SELECT note FROM things WHERE id = $1`, fmt.Sprintf("probe-%d", (p+1)%12)).Scan(&note); err != nil {
			return err
		}
		want := fmt.Sprintf("p%d-%d", p, i)
		if _, err := conn.Exec(ctx, `UPDATE things SET note = $1 WHERE id = $2`, want, id); err != nil {
			return err
		}
		at := time.Now()
		err := testenv.Poll(probeLimit, func() error {
			r, err := e.tryGet(path)
			if err != nil {
				return err
			}
			if r.status != http.StatusOK || !strings.Contains(string(r.body), `"note":"`+want+`"`) {
				return fmt.Errorf("GET %s: %d %s", path, r.status, genShort(string(r.body), 200))
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("probe %s (prober %d, %d of %d) not served: %w", want, p, i+1, n, err)
		}
		served(time.Since(at))
	}
	return nil
}

// tryGet sends GET path to the API, from any goroutine.
func (e *env) tryGet(path string) (response, error) {
	resp, err := http.Get(e.Base + path)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header.Get("Snapshot-Version"), resp.Header.Get("Content-Type"), body}, err
}

// TestLogicalCommitVisibleLateIsServed: a commit that the replication stream delivers
// before Postgres makes it visible is served once it is, without the schedule. A
// synchronous standby that never connects holds a commit there for as long as the
// test likes: its record is flushed (and decoded), and it stays invisible until its
// wait is cancelled. Meanwhile another commit is published, by a version whose
// snapshot did not see the first; with nothing else to report it, the first would
// wait an hour.
func TestLogicalCommitVisibleLateIsServed(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	// Sessions commit asynchronously on this server (synchronous_commit off), so only
	// the session that asks for it waits for the standby.
	testenv.Exec(t, pg.DSN, `ALTER SYSTEM SET synchronous_standby_names = 'nobody'`, `SELECT pg_reload_conf()`)
	testenv.Eventually(t, time.Minute, func() error {
		if got := stack.SourceRows(t, pg.DSN, `SHOW synchronous_standby_names`)[0][0]; got != "nobody" {
			return fmt.Errorf("synchronous_standby_names is %q", got)
		}
		return nil
	})
	e := startOn(t, pg.DSN)
	testenv.Exec(t, e.DSN, `ALTER TABLE flags REPLICA IDENTITY FULL`)
	defer e.runSyncer(t, logicalConfig(t, e))()
	e.awaitServed(t, docPath("things", "plain"), `"id":"plain"`, time.Now(), 30*time.Second)
	// The slot exists and is read: creating it waits for every transaction in progress.
	testenv.Eventually(t, 30*time.Second, func() error {
		if n := stack.SourceRows(t, e.DSN, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'`)[0][0]; n != "1" {
			return fmt.Errorf("%s replication streams; want 1", n)
		}
		return nil
	})

	ctx := context.Background()
	held, err := pgx.Connect(ctx, e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close(ctx)
	var pid int
	if _, err := held.Exec(ctx, `SET synchronous_commit = on`); err != nil {
		t.Fatal(err)
	}
	if err := held.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	committed := make(chan error, 1)
	go func() {
		_, err := held.Exec(ctx, `UPDATE things SET note = 'visible late' WHERE id = 'plain'`)
		committed <- err
	}()
	testenv.Eventually(t, time.Minute, func() error {
		rows := stack.SourceRows(t, e.DSN, fmt.Sprintf(`SELECT coalesce(wait_event, '') FROM pg_stat_activity WHERE pid = %d`, pid))
		if len(rows) != 1 || rows[0][0] != "SyncRep" {
			return fmt.Errorf("the commit does not wait for the standby yet: %v", rows)
		}
		return nil
	})
	// Another commit, decoded after the held one, is published by a version that
	// cannot see the held one.
	testenv.Exec(t, e.DSN, `UPDATE things SET note = 'seen at once' WHERE id = 'a/b'`)
	e.awaitServed(t, docPath("things", "a/b"), "seen at once", time.Now(), probeLimit)
	if r := e.get(t, docPath("things", "plain")); strings.Contains(string(r.body), "visible late") {
		t.Fatalf("a commit no snapshot can see yet is served: %s", r.body)
	}
	testenv.Exec(t, e.DSN, fmt.Sprintf(`SELECT pg_cancel_backend(%d)`, pid))
	if err := <-committed; err != nil {
		t.Fatalf("the held commit: %v", err)
	}
	d := e.awaitServed(t, docPath("things", "plain"), "visible late", time.Now(), probeLimit)
	t.Logf("the commit was served %s after it became visible", d.Round(time.Millisecond))
}
