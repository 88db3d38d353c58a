package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/cli"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
	"github.com/snapflip/snapflip/snapshot"
)

// tokenAnswer is an answer to a read that carried a token.
type tokenAnswer struct {
	response
	problem string        // the problem document's type, for an error
	token   string        // the answer's Snapshot-Token
	took    time.Duration // from sending to the whole answer
}

// readAfter sends GET path with Snapshot-After: token (none when "") and
// Prefer: wait=wait (none when ""), checked against the OpenAPI document.
func (e *env) readAfter(tb testing.TB, base, path, token, wait string) tokenAnswer {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Snapshot-After", token)
	}
	if wait != "" {
		req.Header.Set("Prefer", "wait="+wait)
	}
	start := time.Now()
	resp, body := callAPI(tb, req)
	a := tokenAnswer{response: response{resp.StatusCode, resp.Header.Get("Snapshot-Version"), resp.Header.Get("Content-Type"), body},
		token: resp.Header.Get("Snapshot-Token"), took: time.Since(start)}
	if resp.StatusCode != http.StatusOK {
		if i := strings.Index(string(body), `"type":"`); i >= 0 {
			a.problem = strings.SplitN(string(body[i+8:]), `"`, 2)[0]
		}
	}
	return a
}

// readCovered reads path with the token, asking the longest wait and asking again
// while the answer is 503 token-not-yet-covered, for up to a minute: on a loaded
// machine a sync may take longer than one wait, and what is checked is the answer
// once covered, not how soon.
func (e *env) readCovered(tb testing.TB, path, token string) tokenAnswer {
	tb.Helper()
	return e.readCoveredAt(tb, e.Base, path, token)
}

// readCoveredAt is readCovered from the API at base.
func (e *env) readCoveredAt(tb testing.TB, base, path, token string) tokenAnswer {
	tb.Helper()
	var a tokenAnswer
	testenv.Eventually(tb, time.Minute, func() error {
		if a = e.readAfter(tb, base, path, token, "10"); notYetCovered(a) {
			return fmt.Errorf("token %s not covered yet", token)
		}
		return nil
	})
	return a
}

// notYetCovered reports whether a is a 503 whose wait for a covering version passed.
func notYetCovered(a tokenAnswer) bool {
	return a.status == http.StatusServiceUnavailable && strings.HasSuffix(a.problem, "/token-not-yet-covered")
}

// loops returns the env var's count, or def.
func loops(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// snapshotOf returns the Postgres snapshot a Snapshot-Token names.
func snapshotOf(tb testing.TB, tok string) string {
	tb.Helper()
	t, err := snapshot.ParseToken(tok)
	if err != nil || t.Kind != snapshot.TokenSnapshot {
		tb.Fatalf("Snapshot-Token %q: not a snapshot token (%v)", tok, err)
	}
	return t.Snapshot.String()
}

// Write, take the token, commit, read with it: every read returns the written value,
// and Postgres itself says that the served version's snapshot sees the write. The same
// read without the token, sent first, is stale at least once, so the loop could fail.
// Odd rounds take the token as a snapshot from another session after the commit. Then a
// write to a table no collection reads is covered without a flip, and an xid the source
// never issued is refused within a few watch polls, not the whole wait.
func TestReadYourWrites(t *testing.T) {
	for _, mode := range []string{"stats", "logical"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := start(t)
			cfg := config
			if mode == "logical" {
				cfg = logicalConfig(t, e)
				testenv.Exec(t, e.DSN, `ALTER TABLE flags REPLICA IDENTITY FULL`)
			}
			defer e.runSyncer(t, cfg)()
			path := docPath("things", "plain")
			e.awaitServed(t, path, `"id":"plain"`, time.Now(), 20*time.Second)
			ctx := context.Background()
			writer, err := pgx.Connect(ctx, e.DSN)
			if err != nil {
				t.Fatal(err)
			}
			defer writer.Close(ctx)
			other, err := pgx.Connect(ctx, e.DSN)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close(ctx)

			stale, n := 0, loops("SNAPFLIP_RYW_LOOPS", 20)
			for i := range n {
				note := fmt.Sprintf("ryw-%d", i)
				var xid string
				if err := writer.QueryRow(ctx, `UPDATE things SET note = $1 WHERE id = 'plain' RETURNING pg_current_xact_id()::text`, note).Scan(&xid); err != nil {
					t.Fatal(err)
				}
				tok := "x:" + xid
				if i%2 == 1 {
					if err := other.QueryRow(ctx, `SELECT 's:' || pg_current_snapshot()`).Scan(&tok); err != nil {
						t.Fatal(err)
					}
				}
				if r := e.get(t, path); !strings.Contains(string(r.body), note) {
					stale++
				}
				a := e.readCovered(t, path, tok)
				if a.status != http.StatusOK || !strings.Contains(string(a.body), `"note":"`+note+`"`) {
					t.Fatalf("round %d: GET with %s = %d %s; want the written %q", i, tok, a.status, a.body, note)
				}
				var sees bool
				if err := other.QueryRow(ctx, `SELECT pg_visible_in_snapshot($1::xid8, $2::pg_snapshot)`, xid, snapshotOf(t, a.token)).Scan(&sees); err != nil {
					t.Fatal(err)
				}
				if !sees {
					t.Errorf("round %d: version %s's snapshot %s does not see the write's transaction %s", i, a.version, a.token, xid)
				}
			}
			if stale == 0 {
				t.Errorf("the read without a token was never stale in %d rounds: the loop proves nothing", n)
			}
			t.Logf("%s: %d of %d reads without the token were stale", mode, stale, n)

			// A write no collection reads: covered without a new version.
			testenv.Exec(t, e.DSN, `CREATE TABLE unrelated (x int)`)
			before := e.get(t, path).version
			var xid string
			if err := writer.QueryRow(ctx, `INSERT INTO unrelated VALUES (1) RETURNING pg_current_xact_id()::text`).Scan(&xid); err != nil {
				t.Fatal(err)
			}
			if a := e.readCovered(t, path, "x:"+xid); a.status != http.StatusOK {
				t.Errorf("a write to a table no collection reads: %d %s; want 200", a.status, a.body)
			} else if a.version != before {
				t.Logf("answered from %s, not %s: another sync flipped meanwhile", a.version, before)
			}

			// An xid the source has not issued: refused once the syncer has looked.
			var next uint64
			if err := writer.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&next); err != nil {
				t.Fatal(err)
			}
			a := e.readAfter(t, e.Base, path, fmt.Sprintf("x:%d", next+1_000_000), "10")
			if a.status != http.StatusBadRequest || !strings.HasSuffix(a.problem, "/token-rejected") {
				t.Errorf("an xid from the future: %d %s after %s; want 400 token-rejected", a.status, a.body, a.took)
			}
			t.Logf("%s: an xid from the future refused in %s", mode, a.took.Round(time.Millisecond))
		})
	}
}

// 16 writers, each writing and then reading with its token: every read shows at
// least that writer's last write. And a causal chain: B reads A's committed row in
// Postgres, takes a snapshot token after, and the API shows A's write.
func TestReadYourWritesConcurrently(t *testing.T) {
	t.Parallel()
	e := start(t)
	testenv.Exec(t, e.DSN, `ALTER TABLE flags REPLICA IDENTITY FULL`)
	defer e.runSyncer(t, logicalConfig(t, e))()
	e.awaitServed(t, docPath("things", "plain"), `"id":"plain"`, time.Now(), 20*time.Second)
	ctx := context.Background()
	const writers = 16
	per := loops("SNAPFLIP_RYW_WRITES", 6)
	for w := range writers {
		testenv.Exec(t, e.DSN, fmt.Sprintf(`INSERT INTO things (id, gen) VALUES ('writer-%d', 0)`, w))
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pgx.Connect(ctx, e.DSN)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close(ctx)
			path := docPath("things", fmt.Sprintf("writer-%d", w))
			for g := 1; g <= per; g++ {
				var xid string
				if err := conn.QueryRow(ctx, `UPDATE things SET gen = $1 WHERE id = $2 RETURNING pg_current_xact_id()::text`,
					g, fmt.Sprintf("writer-%d", w)).Scan(&xid); err != nil {
					errs <- err
					return
				}
				// A sync may take longer than one wait (10s) on a busy machine: a 503
				// saying the wait passed is asked again, for a minute.
				var resp *http.Response
				var body []byte
				for until := time.Now().Add(time.Minute); ; {
					req, _ := http.NewRequest(http.MethodGet, e.Base+path, nil)
					req.Header.Set("Snapshot-After", "x:"+xid)
					req.Header.Set("Prefer", "wait=10")
					if resp, body, err = sendAPI(t, req); err != nil {
						errs <- err
						return
					}
					if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "/token-not-yet-covered") || time.Now().After(until) {
						break
					}
				}
				if resp.StatusCode != http.StatusOK || gen(t, body) < g {
					errs <- fmt.Errorf("writer %d, write %d: %d %s", w, g, resp.StatusCode, body)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// The causal chain.
	a, b := testenv.OpenTx(t, e.DSN), (*pgx.Conn)(nil)
	if _, err := a.Exec(ctx, `UPDATE things SET note = 'from-a' WHERE id = 'plain'`); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := pgx.Connect(ctx, e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	var note, tok string
	if err := b.QueryRow(ctx, `SELECT note FROM things WHERE id = 'plain'`).Scan(&note); err != nil || note != "from-a" {
		t.Fatalf("B reads %q, %v", note, err)
	}
	if err := b.QueryRow(ctx, `SELECT 's:' || pg_current_snapshot()`).Scan(&tok); err != nil {
		t.Fatal(err)
	}
	if r := e.readCovered(t, docPath("things", "plain"), tok); r.status != http.StatusOK || !strings.Contains(string(r.body), `"note":"from-a"`) {
		t.Errorf("B's token %s: %d %s; want A's write", tok, r.status, r.body)
	}
}

// A client alternating between two API replicas, handing each the Snapshot-Token of
// its last answer, is never answered from an older version, over many flips; one
// replica refreshes its pointer far less often than the other.
func TestSessionTokenAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := start(t)
	fast := e.Base
	e.startAPI(t, cli.EnvRefresh, "400ms")
	slow := e.Base
	testenv.Exec(t, e.DSN, `ALTER TABLE flags REPLICA IDENTITY FULL`)
	defer e.runSyncer(t, logicalConfig(t, e))()
	path := docPath("things", "plain")
	for _, base := range []string{fast, slow} { // each replica, before reading across them
		e.Base = base
		e.awaitServed(t, path, `"id":"plain"`, time.Now(), 20*time.Second)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		conn, err := pgx.Connect(ctx, e.DSN)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for i := 0; ctx.Err() == nil; i++ {
			_, _ = conn.Exec(ctx, `UPDATE things SET gen = $1 WHERE id = 'plain'`, i)
			time.Sleep(30 * time.Millisecond) // a steady write load, not a condition
		}
	}()
	var last snapshot.Version
	var tok string
	versions := map[snapshot.Version]bool{}
	reads, deadline := loops("SNAPFLIP_SESSION_READS", 150), time.Now().Add(time.Minute)
	for i := 0; i < reads || (len(versions) < 5 && time.Now().Before(deadline)); i++ {
		base := fast
		if i%2 == 1 {
			base = slow
		}
		a := e.readCoveredAt(t, base, path, tok)
		if a.status != http.StatusOK {
			t.Fatalf("read %d: %d %s", i, a.status, a.body)
		}
		v := snapshot.Version(a.version)
		if last != "" && v.Millis() < last.Millis() {
			t.Fatalf("read %d from %s: version %s is older than %s, answered before", i, base, v, last)
		}
		last, tok, versions[v] = v, a.token, true
	}
	if len(versions) < 5 {
		t.Errorf("the reads saw %d versions in a minute; want several flips", len(versions))
	}
}

// After a rollback, a token the pinned version does not cover is refused at once
// (412), also for requests already waiting; a covered one is answered from the pinned
// version; after unpin and a publish, the token is served.
func TestTokensAcrossRollback(t *testing.T) {
	t.Parallel()
	e := start(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	write := func(g int) string {
		var xid string
		if err := conn.QueryRow(ctx, `UPDATE things SET gen = $1 RETURNING pg_current_xact_id()::text`, g).Scan(&xid); err != nil {
			t.Fatal(err)
		}
		return "x:" + xid
	}
	publish := func() {
		if _, err := e.sync(t); err != nil {
			t.Fatal(err)
		}
	}
	t1 := write(1)
	publish()
	t2 := write(2)
	publish()
	path := docPath("things", "plain")
	if a := e.readCovered(t, path, t2); a.status != http.StatusOK || gen(t, a.body) != 2 {
		t.Fatalf("before the rollback: %d %s", a.status, a.body)
	}
	t3 := write(3) // never published while pinned
	// A request waits for t3 until the rollback lands; one whose wait (10s at most)
	// passes first is sent again.
	waiting, rolled := make(chan tokenAnswer, 1), make(chan struct{})
	go func() {
		for {
			a := e.readAfter(t, e.Base, path, t3, "10")
			select {
			case <-rolled:
			default:
				if notYetCovered(a) {
					continue
				}
			}
			waiting <- a
			return
		}
	}()
	testenv.Eventually(t, time.Minute, func() error {
		if !strings.Contains(e.metrics(t), "snapflip_api_token_waiters 1") {
			return fmt.Errorf("the request with %s is not waiting yet", t3)
		}
		return nil
	})
	out, err := e.syncerCmd(t, "rollback", "--previous", "--reason", "tokens")
	close(rolled)
	if err != nil {
		t.Fatalf("rollback: %s %v", out, err)
	}
	if a := <-waiting; a.status != http.StatusPreconditionFailed || !strings.HasSuffix(a.problem, "/token-not-covered") {
		t.Errorf("a request waiting when the rollback landed: %d %s after %s; want 412", a.status, a.body, a.took)
	} else {
		t.Logf("a waiting request got 412 %s after it was sent", a.took.Round(time.Millisecond))
	}
	a := e.readAfter(t, e.Base, path, t2, "10")
	if a.status != http.StatusPreconditionFailed || a.took > 5*time.Second {
		t.Errorf("an uncovered token while pinned: %d %s after %s; want 412 at once", a.status, a.body, a.took)
	}
	t.Logf("an uncovered token while pinned: 412 in %s", a.took.Round(time.Millisecond))
	if a := e.readAfter(t, e.Base, path, t1, "10"); a.status != http.StatusOK || gen(t, a.body) != 1 {
		t.Errorf("a covered token while pinned: %d %s; want 200 from the pinned version", a.status, a.body)
	}
	if out, err := e.syncerCmd(t, "unpin", "--reason", "tokens"); err != nil {
		t.Fatalf("unpin: %s %v", out, err)
	}
	publish()
	if a := e.readCovered(t, path, t3); a.status != http.StatusOK || gen(t, a.body) != 3 {
		t.Errorf("after unpin and a publish: %d %s; want the third write", a.status, a.body)
	}
}

// metrics returns the API's /metrics text.
func (e *env) metrics(tb testing.TB) string {
	tb.Helper()
	resp, err := http.Get(e.Base + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}

// Bad tokens get 400 at once, whatever the wait asked for; requests over the
// waiters' cap get 503 at once; the waiters' gauge returns to 0.
func TestBadTokens(t *testing.T) {
	t.Parallel()
	e := start(t)
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	e.StopAPI()
	e.startAPI(t, cli.EnvMaxWaiters, "2")
	path := docPath("things", "plain")
	for _, tc := range []struct {
		name, target, header string
	}{
		{"garbled", path, "zz:top"},
		{"a version id", path, "7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1763737200000"},
		{"64 KiB", path, "x:" + strings.Repeat("1", 64<<10)},
		{"NUL in the query", path + "?after=x:5%00", ""},
		{"an empty query", path + "?after=", ""},
		{"a foreign cluster", path, "x:5@1"},
		{"xmin above xmax", path, "s:9:5:"},
		{"query and header disagree", path + "?after=x:5", "x:6"},
		{"a list", "/v1/data/things?limit=2&after=bogus", ""},
		{"collections", "/v1/collections", "s:1"},
		{"the pointer", "/v1/versions/current", "x:-3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e.readAfter(t, e.Base, tc.target, tc.header, "10")
			if a.status != http.StatusBadRequest || !strings.HasSuffix(a.problem, "/token-rejected") || a.took > 5*time.Second {
				t.Errorf("%d %.200s after %s; want 400 token-rejected at once", a.status, a.body, a.took)
			}
		})
	}

	// A token no version covers yet (the syncer is not running): two wait, the third
	// is refused at once, and the gauge returns to 0 when the two time out.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var xid string
	if err := conn.QueryRow(ctx, `UPDATE things SET gen = 9 WHERE id = 'plain' RETURNING pg_current_xact_id()::text`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if a := e.readAfter(t, e.Base, path, "x:"+xid, "10"); a.status != http.StatusServiceUnavailable || !strings.HasSuffix(a.problem, "/token-not-yet-covered") {
				t.Errorf("a waiter: %d %s; want 503 once its wait passed", a.status, a.body)
			}
		}()
	}
	testenv.Eventually(t, time.Minute, func() error {
		if !strings.Contains(e.metrics(t), "snapflip_api_token_waiters 2") {
			return fmt.Errorf("two requests are not waiting yet")
		}
		return nil
	})
	if a := e.readAfter(t, e.Base, path, "x:"+xid, "10"); a.status != http.StatusServiceUnavailable || a.took > 5*time.Second {
		t.Errorf("over the cap: %d %s after %s; want 503 at once", a.status, a.body, a.took)
	}
	wg.Wait()
	testenv.Eventually(t, time.Minute, func() error {
		if !strings.Contains(e.metrics(t), "snapflip_api_token_waiters 0") {
			return fmt.Errorf("the waiters' gauge is not back to 0")
		}
		return nil
	})
	// The two waiters' 503s and the refused one's are counted apart from the
	// server's errors.
	if m := e.metrics(t); !strings.Contains(m, "snapflip_api_token_timeouts_total 3") {
		t.Errorf("snapflip_api_token_timeouts_total after three 503s token-not-yet-covered:\n%s", grepLines(m, "snapflip_api_token"))
	}
	// A version named with the token: 412 without waiting, 200 for one that covers it.
	cur := e.get(t, path).version
	if a := e.readAfter(t, e.Base, path+"?version="+cur, "x:"+xid, "10"); a.status != http.StatusPreconditionFailed || a.took > 5*time.Second {
		t.Errorf("a named version that does not cover the token: %d %s after %s; want 412 at once", a.status, a.body, a.took)
	}
	// A transaction that ended before the version was read: one below its xmin.
	xmin, _, _ := strings.Cut(strings.TrimPrefix(e.readAfter(t, e.Base, path+"?version="+cur, "", "").token, "s:"), ":")
	n, err := strconv.ParseUint(xmin, 10, 64)
	if err != nil {
		t.Fatalf("the version's Snapshot-Token has no xmin: %q", xmin)
	}
	old := strconv.FormatUint(n-1, 10)
	if a := e.readAfter(t, e.Base, path+"?version="+cur, "x:"+old, ""); a.status != http.StatusOK {
		t.Errorf("a named version that covers the token: %d %s; want 200", a.status, a.body)
	}
}

// A commit whose WAL record is written but which synchronous replication holds back
// (the standby it waits for never answers) is not visible in Postgres, so no version
// may hold it and its x: token is not covered; a snapshot token taken meanwhile lists
// it as in progress and is answered without it. Once it is released, every token
// taken after must be answered with it. Each watch mode on a server of its own, whose
// synchronous_standby_names names a standby that never connects.
func TestTokenOfACommitHeldInSyncReplication(t *testing.T) {
	for _, mode := range []string{"stats", "logical"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			pg := testenv.StartPostgres(t)
			e := startOn(t, pg.DSN)
			cfg := config
			if mode == "logical" {
				cfg = logicalConfig(t, e)
				testenv.Exec(t, e.DSN, `ALTER TABLE flags REPLICA IDENTITY FULL`)
			}
			defer e.runSyncer(t, cfg)()
			path, other := docPath("things", "plain"), docPath("flags", "on")
			e.awaitServed(t, path, `"id":"plain"`, time.Now(), 20*time.Second)

			if mode == "logical" {
				// Creating a logical slot waits for every transaction in progress to end,
				// a held commit included: the stream must be up before one is held.
				testenv.Eventually(t, time.Minute, func() error {
					var n int
					testenv.QueryRow(t, e.DSN, `SELECT count(*) FROM pg_replication_slots WHERE active AND confirmed_flush_lsn IS NOT NULL`, &n)
					if n != 1 {
						return errors.New("the syncer's replication slot is not created and streaming yet")
					}
					return nil
				})
			}
			// The server runs with synchronous_commit off: only the writer's connection
			// waits for the standby, so the syncer's own connections go on.
			testenv.Exec(t, e.DSN, `ALTER SYSTEM SET synchronous_standby_names = 'ghost'`, `SELECT pg_reload_conf()`)
			h := holdCommit(t, e.DSN)
			xid, held := h.xid, `"note":"`+h.note+`"`
			// Held: another commit is served, from a version without the held one.
			testenv.Exec(t, e.DSN, `UPDATE flags SET value = 'during' WHERE key = 'on'`)
			e.awaitServed(t, other, `"value":"during"`, time.Now(), probeLimit)
			if r := e.get(t, path); strings.Contains(string(r.body), held) {
				t.Fatalf("version %s serves a commit Postgres does not show yet: %s", r.version, r.body)
			}
			var during string
			testenv.QueryRow(t, e.DSN, `SELECT 's:' || pg_current_snapshot()`, &during)
			if a := e.readCovered(t, path, during); a.status != http.StatusOK || strings.Contains(string(a.body), held) {
				t.Errorf("a snapshot token taken while the commit is held (%s): %d %s; want 200 without it", during, a.status, a.body)
			}
			if a := e.readAfter(t, e.Base, path, "x:"+xid, "1"); a.status != http.StatusServiceUnavailable || !strings.HasSuffix(a.problem, "/token-not-yet-covered") {
				t.Errorf("the held commit's own token: %d %s; want 503 token-not-yet-covered", a.status, a.body)
			}

			// Released: every token taken from now on holds it.
			testenv.Exec(t, e.DSN, `ALTER SYSTEM RESET synchronous_standby_names`, `SELECT pg_reload_conf()`)
			if err := <-h.committed; err != nil {
				t.Fatal(err)
			}
			var after string
			testenv.QueryRow(t, e.DSN, `SELECT 's:' || pg_current_snapshot()`, &after)
			for _, tok := range []string{"x:" + xid, after} {
				a := e.readCovered(t, path, tok)
				if a.status != http.StatusOK || !strings.Contains(string(a.body), held) {
					t.Fatalf("token %s after the release: %d %s; want the held write", tok, a.status, a.body)
				}
				var sees bool
				testenv.QueryRow(t, e.DSN, fmt.Sprintf(`SELECT pg_visible_in_snapshot('%s'::xid8, '%s'::pg_snapshot)`, xid, snapshotOf(t, a.token)), &sees)
				if !sees {
					t.Errorf("token %s: answered from version %s, whose snapshot %s does not see %s", tok, a.version, a.token, xid)
				}
			}
		})
	}
}

// heldCommit is a commit synchronous replication holds: its transaction, the note it
// wrote, and its Commit's outcome once released.
type heldCommit struct {
	xid, note string
	committed <-chan error
}

// holdCommit writes a note to things/plain with synchronous_commit on and commits
// it, until a commit is held waiting for the standby. A backend reads
// synchronous_standby_names when it reloads, but commits wait only once the
// checkpointer has also reloaded it: a commit made before returns at once, and the
// next write is tried.
func holdCommit(t *testing.T, dsn string) heldCommit {
	t.Helper()
	ctx := context.Background()
	writer := testenv.Connect(t, ctx, dsn)
	t.Cleanup(func() { writer.Close(context.Background()) })
	if _, err := writer.Exec(ctx, `SET synchronous_commit = on`); err != nil {
		t.Fatal(err)
	}
	var h heldCommit
	testenv.Eventually(t, time.Minute, func() error {
		h.note = fmt.Sprintf("held-%d", time.Now().UnixNano())
		if _, err := writer.Exec(ctx, `BEGIN`); err != nil {
			t.Fatal(err)
		}
		if err := writer.QueryRow(ctx, `UPDATE things SET note = $1 WHERE id = 'plain' RETURNING pg_current_xact_id()::text`, h.note).Scan(&h.xid); err != nil {
			t.Fatal(err)
		}
		committed := make(chan error, 1)
		go func() { _, err := writer.Exec(ctx, `COMMIT`); committed <- err }()
		h.committed = committed
		// A commit either returns or waits for the standby: await one of the two.
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
			select {
			case err := <-committed:
				if err != nil {
					t.Fatal(err)
				}
				return fmt.Errorf("the commit of %s was not held: the setting had not reached the checkpointer", h.note)
			case <-time.After(50 * time.Millisecond):
			}
			var n int
			testenv.QueryRow(t, dsn, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`, &n)
			if n == 1 {
				return nil
			}
		}
		t.Fatalf("the commit of %s neither returned nor waited for the standby in a minute", h.note)
		return nil
	})
	return h
}

// grepLines returns the lines of s that hold sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// On a cluster whose transaction ids are past 2^32 (the test cluster's start in
// epoch 1, as a long-lived database's are), an x: token made of a row's xmin, a
// 32-bit id, is refused: judged as a 64-bit id it would seem to have ended long ago,
// and a version without the write would be answered as if it held it. The same
// write's pg_current_xact_id() is covered once a version holds it.
func TestThirtyTwoBitXidTokenRefused(t *testing.T) {
	t.Parallel()
	e := start(t)
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	var xid, xmin string
	var epoch int64
	testenv.QueryRow(t, e.DSN, `SELECT pg_current_xact_id()::text::numeric::bigint >> 32`, &epoch)
	if epoch == 0 {
		t.Fatalf("the test cluster's xid epoch is 0: start it with deploy/local/postgres.sh, which sets it past 2^32")
	}
	testenv.QueryRow(t, e.DSN, `UPDATE things SET gen = 32 WHERE id = 'plain' RETURNING pg_current_xact_id()::text, xmin::text`, &xid, &xmin)
	path := docPath("things", "plain")
	if a := e.readAfter(t, e.Base, path, "x:"+xmin, "1"); a.status != http.StatusBadRequest || !strings.HasSuffix(a.problem, "/token-rejected") ||
		!strings.Contains(string(a.body), "pg_current_xact_id") {
		t.Errorf("x: and a row's xmin (%s; the transaction is %s): %d %.300s; want 400 token-rejected naming pg_current_xact_id()", xmin, xid, a.status, a.body)
	}
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if a := e.readCovered(t, path, "x:"+xid); a.status != http.StatusOK || !strings.Contains(string(a.body), `"gen":32`) {
		t.Errorf("x: and pg_current_xact_id(): %d %.300s; want the document with the write", a.status, a.body)
	}
	cur := e.get(t, path).version
	if a := e.readAfter(t, e.Base, path+"?version="+cur, "x:"+xmin, ""); a.status != http.StatusBadRequest || !strings.HasSuffix(a.problem, "/token-rejected") {
		t.Errorf("a named version and x: of a row's xmin: %d %.300s; want 400 token-rejected", a.status, a.body)
	}
}

// TestTokenOfARunningTransactionWaits: an x: token sent while its transaction still
// runs waits for the commit and is then answered with the write. On a primary where
// nothing else completes meanwhile, the running transaction's id is at or above the
// snapshot's xmax (which counts completed transactions only): judged by xmax it would
// be "never issued" and refused with 400 once the syncer had looked on demand.
func TestTokenOfARunningTransactionWaits(t *testing.T) {
	primary, _ := testenv.Replicated(t) // a primary where no other test commits
	e := startOn(t, primary)
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	ctx := context.Background()
	demand0, err := st.ReadDemand(ctx, e.Dataset)
	if err != nil {
		t.Fatal(err)
	}
	writer := testenv.OpenTx(t, primary)
	var xid string
	if err := writer.QueryRow(ctx, `UPDATE things SET gen = 44 WHERE id = 'plain' RETURNING pg_current_xact_id()::text`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	var xmax string
	testenv.QueryRow(t, primary, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`, &xmax)
	if x, _ := strconv.ParseUint(xid, 10, 64); x < mustUint(t, xmax) {
		t.Fatalf("the running transaction %s is below xmax %s: another transaction completed on the quiet primary", xid, xmax)
	}
	path := docPath("things", "plain")
	answer := make(chan tokenAnswer, 1)
	go func() { answer <- e.readAfter(t, e.Base, path, "x:"+xid, "10") }()
	// The read raises demand; a sync then looks at the source on it.
	testenv.Eventually(t, time.Minute, func() error {
		if d, err := st.ReadDemand(ctx, e.Dataset); err != nil || d <= demand0 {
			return fmt.Errorf("demand %d (%v): not raised yet", d, err)
		}
		return nil
	})
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-answer:
		t.Fatalf("x:%s of a running transaction answered before its commit: %d %.300s; want it to wait", xid, a.status, a.body)
	case <-time.After(time.Second):
	}
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	a := <-answer
	if notYetCovered(a) { // its 10 s passed on a loaded machine: ask again
		a = e.readCovered(t, path, "x:"+xid)
	}
	if a.status != http.StatusOK || !strings.Contains(string(a.body), `"gen":44`) {
		t.Errorf("x:%s after its commit: %d %.300s; want the document with the write", xid, a.status, a.body)
	}
}

func mustUint(tb testing.TB, s string) uint64 {
	tb.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestStandbySourceJudgedConservatively: a snapshot taken on a hot standby prints no
// in-progress list, so a transaction still running there (unreplayed, or open on the
// primary) looks committed when it is between xmin and xmax. A version read from the
// standby covers an x: token only below its xmin, and its own Snapshot-Token claims
// no more than that.
func TestStandbySourceJudgedConservatively(t *testing.T) {
	primary, standby := testenv.Replicated(t)
	e := startOn(t, primary)
	e.DSN = standby
	testenv.Replayed(t, primary, standby)
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	writer := testenv.OpenTx(t, primary)
	var x string
	if err := writer.QueryRow(ctx, `UPDATE things SET gen = 51 WHERE id = 'plain' RETURNING pg_current_xact_id()::text`).Scan(&x); err != nil {
		t.Fatal(err)
	}
	var y string
	testenv.QueryRow(t, primary, `UPDATE things SET gen = 52 WHERE id = 'a/b' RETURNING pg_current_xact_id()::text`, &y)
	testenv.Replayed(t, primary, standby)
	var standbySnapshot string
	testenv.QueryRow(t, standby, `SELECT pg_current_snapshot()::text`, &standbySnapshot)
	if sn, err := snapshot.ParsePGSnapshot(standbySnapshot); err != nil || len(sn.Xip) != 0 || !sn.Sees(mustUint(t, x)) {
		t.Fatalf("the standby's snapshot %s (%v) does not print %s as committed: the case is not exercised", standbySnapshot, err, x)
	}
	if _, err := e.sync(t, "--force"); err != nil {
		t.Fatal(err)
	}
	// Both are above the standby's xmin: neither is known to be seen, though y's write
	// is in the version.
	path := docPath("things", "plain")
	for _, tok := range []string{"x:" + x, "x:" + y} {
		if a := e.readAfter(t, e.Base, path, tok, "0.2"); !notYetCovered(a) {
			t.Errorf("%s, above the xmin of a version read on the standby: %d %.300s; want 503 token-not-yet-covered", tok, a.status, a.body)
		}
	}
	tok, err := snapshot.ParseToken(e.readAfter(t, e.Base, path, "", "").token)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Snapshot.Covers(snapshot.Token{Kind: snapshot.TokenXid, Xid: mustUint(t, x)}) {
		t.Errorf("the version's Snapshot-Token %s claims the running transaction %s", tok, x)
	}
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Replayed(t, primary, standby)
	// The standby's xmin passes x once x's commit is replayed.
	if _, err := e.sync(t, "--force"); err != nil {
		t.Fatal(err)
	}
	if a := e.readCovered(t, path, "x:"+x); a.status != http.StatusOK || !strings.Contains(string(a.body), `"gen":51`) {
		t.Errorf("x:%s after its commit was replayed: %d %.300s; want the document with the write", x, a.status, a.body)
	}
	if a := e.readCovered(t, docPath("things", "a/b"), "x:"+y); a.status != http.StatusOK || !strings.Contains(string(a.body), `"gen":52`) {
		t.Errorf("x:%s once x:%s ended: %d %.300s; want the document with the write", y, x, a.status, a.body)
	}
}

// TestRepublishAtTheSamePosition: a collection added while the source is idle is
// published in a version read at its parent's very position. A replica whose cached
// pointer still names the parent, handed the new version's token, answers from the
// new version, never from the parent, where the collection does not exist.
func TestRepublishAtTheSamePosition(t *testing.T) {
	primary, _ := testenv.Replicated(t) // nothing commits there meanwhile
	e := startOn(t, primary)
	fast := e.Base
	v1 := stack.PublishedVersion(t, mustSync(t, e))
	e.startAPI(t, cli.EnvRefresh, "1h") // reads the pointer once, at its start
	slow := e.Base
	for _, base := range []string{fast, slow} {
		testenv.Eventually(t, time.Minute, func() error {
			if a := e.readAfter(t, base, docPath("flags", "on"), "", ""); a.status != http.StatusOK || a.version != v1 {
				return fmt.Errorf("%s before the republish: %d %s from %s; want 200 from %s", base, a.status, a.body, a.version, v1)
			}
			return nil
		})
	}
	more := config + "  - name: more\n    query: \"SELECT key, value FROM flags\"\n    key: key\n"
	if err := os.WriteFile(e.ConfigPath, []byte(more), 0o600); err != nil {
		t.Fatal(err)
	}
	v2 := stack.PublishedVersion(t, mustSync(t, e))
	path := docPath("more", "on")
	var tok string
	testenv.Eventually(t, time.Minute, func() error {
		a := e.readAfter(t, fast, path, "", "")
		if a.status != http.StatusOK || a.version != v2 {
			return fmt.Errorf("the fast replica: %d from %s; want 200 from %s", a.status, a.version, v2)
		}
		tok = a.token
		return nil
	})
	old := e.readAfter(t, fast, docPath("flags", "on")+"?version="+v1, "", "").token
	if same := func(s string) string { return strings.SplitN(s, "~", 2)[0] }; same(old) != same(tok) {
		t.Fatalf("v1's token %s and v2's %s name two positions: the case is not exercised", old, tok)
	}
	if a := e.readAfter(t, slow, path, tok, "5"); a.status != http.StatusOK || a.version != v2 {
		t.Errorf("the slow replica, handed v2's token: %d %.200s from %s; want 200 from %s", a.status, a.body, a.version, v2)
	}
}

func mustSync(t *testing.T, e *env) string {
	t.Helper()
	out, err := e.sync(t)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTokenFilterPagesAcrossAFlip: the first page of a filter read with a token that
// its version covers only by the coverage a sync recorded (a write no collection
// reads) is answered; the pointer then moves on; the next page, sent with the same
// token as clients send it, is answered from the first page's version, not 412.
func TestTokenFilterPagesAcrossAFlip(t *testing.T) {
	t.Parallel()
	e := start(t)
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	testenv.Exec(t, e.DSN, `CREATE TABLE unrelated (x int)`)
	var tok string
	testenv.QueryRow(t, e.DSN, `INSERT INTO unrelated VALUES (1) RETURNING 'x:' || pg_current_xact_id()`, &tok)
	if out := mustSync(t, e); strings.HasPrefix(out, "published") {
		t.Fatalf("a sync after a write no collection reads published: %q", out)
	}
	first := e.readCovered(t, "/v1/data/things?gen=eq.0&limit=3", tok)
	var page listPage
	if first.status != http.StatusOK || json.Unmarshal(first.body, &page) != nil || page.NextPageToken == "" {
		t.Fatalf("the first filter page with the token: %d %.300s; want 200 with a next page", first.status, first.body)
	}
	testenv.Exec(t, e.DSN, `UPDATE flags SET gen = gen + 1`)
	next := stack.PublishedVersion(t, mustSync(t, e))
	testenv.Eventually(t, time.Minute, func() error {
		if v := e.get(t, docPath("flags", "on")).version; v != next {
			return fmt.Errorf("the API serves %s, not yet %s", v, next)
		}
		return nil
	})
	a := e.readAfter(t, e.Base, "/v1/data/things?gen=eq.0&limit=3&page_token="+url.QueryEscape(page.NextPageToken), tok, "1")
	if a.status != http.StatusOK || a.version != first.version {
		t.Errorf("the next filter page, the pointer moved on: %d %.300s from %s; want 200 from %s", a.status, a.body, a.version, first.version)
	}
}
