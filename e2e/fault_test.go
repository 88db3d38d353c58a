package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/cli"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
	"github.com/snapflip/snapflip/snapshot"
)

// TestFaultEmulatorStopsMidSync: the Bigtable emulator dies while a sync copies. The
// sync fails within its batch timeout instead of hanging; the API keeps answering
// cached reads from the last good version until max-stale, then reports not ready;
// after Bigtable comes back (empty: the emulator keeps nothing) the next sync publishes
// and the API is ready again.
func TestFaultEmulatorStopsMidSync(t *testing.T) {
	t.Parallel()
	dsn := testenv.Postgres(t)
	addr, emu := testenv.StartEmulator(t)
	e := newEnv(dsn, addr)
	testenv.Exec(t, dsn, schema, `INSERT INTO things (id) SELECT 'bulk-' || g FROM generate_series(1, 30000) g`,
		`INSERT INTO things (id) VALUES ('plain')`)
	e.ConfigPath = t.TempDir() + "/snapflip.yaml"
	writeConfig(t, e, config)
	e.startAPI(t, cli.EnvMaxStale, "2s")

	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	good := e.awaitVersion(t, docPath("things", "plain"), "")
	// The sync that Bigtable dies under gives up quickly; the first one, above, had the
	// default timeouts, which a loaded machine needs.
	writeConfig(t, e, config+"bigtable:\n  batch_timeout: 5s\n  op_timeout: 5s\n")

	testenv.Exec(t, dsn, `UPDATE things SET gen = 1`)
	errc := make(chan error, 1)
	go func() { _, err := e.sync(t); errc <- err }()
	// Wait until the copy is under way (a manifest in state writing), then stop Bigtable.
	st := testenv.Store(t, testenv.StoreConfig(addr))
	testenv.Eventually(t, time.Minute, func() error {
		if ms, _ := st.ListManifests(context.Background(), "e2e"); len(ms) == 0 || ms[len(ms)-1].State != "writing" {
			return errors.New("the second sync never started writing")
		}
		return nil
	})
	_ = emu.Process.Kill()
	_ = emu.Wait()
	stopped := time.Now()
	// The cached document still answers, from the last good version, while the last
	// good pointer is younger than max-stale.
	if r := e.get(t, docPath("things", "plain")); r.status != http.StatusOK || r.version != good.version {
		t.Errorf("cached read while Bigtable is down = %d from %s; want 200 from %s", r.status, r.version, good.version)
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("a sync whose Bigtable died succeeded")
		}
		t.Logf("sync failed %s after Bigtable stopped: %v", time.Since(stopped).Round(time.Millisecond), err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the sync still hangs 2 minutes after Bigtable stopped")
	}

	// Past max-stale, reads answer 503 (never 500) and the API reports not ready.
	testenv.Eventually(t, time.Minute, func() error {
		if r := e.get(t, "/readyz"); r.status != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz = %d after Bigtable stopped (max-stale 2s); want 503", r.status)
		}
		return nil
	})
	// Answers come at once: nobody waits for a doomed pointer read, and the status
	// page an operator opens now renders within its bound.
	for _, path := range []string{docPath("things", "nope"), docPath("things", "plain"), "/readyz", "/"} {
		asked := time.Now()
		r := e.get(t, path)
		took := time.Since(asked)
		// Bounds a loaded machine keeps, far below the waits that were the fault
		// (a pointer read of its full timeout and retries).
		want, bound := http.StatusServiceUnavailable, 5*time.Second
		if path == "/" {
			want, bound = http.StatusOK, 7*time.Second // statusTimeout (2s) and room
		}
		if r.status != want || took > bound {
			t.Errorf("GET %s with Bigtable down past max-stale = %d after %s; want %d within %s",
				path, r.status, took.Round(time.Millisecond), want, bound)
		}
	}

	// Bigtable comes back, empty, on the same address; the next sync publishes.
	writeConfig(t, e, config)
	host, port, _ := strings.Cut(addr, ":")
	restarted := exec.Command(testenv.EmulatorBinary(t), "-host", host, "-port", port)
	if err := restarted.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = restarted.Process.Kill(); _ = restarted.Wait() })
	var out string
	testenv.Eventually(t, time.Minute, func() error {
		var err error
		if out, err = e.sync(t); err != nil {
			return fmt.Errorf("sync after Bigtable came back: %v", err)
		}
		return nil
	})
	if !strings.HasPrefix(out, "published") {
		t.Fatalf("sync after Bigtable came back = %q", out)
	}
	// Recovery is bounded whatever the outage's length: gRPC's reconnect backoff,
	// which grows during an outage, once kept the API unready for 10 s and more.
	published := time.Now()
	e.awaitVersion(t, "/readyz", "")
	if took := time.Since(published); took > 8*time.Second {
		t.Errorf("the API was ready %s after Bigtable answered again and a sync published; want within 8s", took.Round(time.Millisecond))
	}
	if r := e.awaitVersion(t, docPath("things", "plain"), stack.PublishedVersion(t, out)); !strings.Contains(string(r.body), `"gen":1`) {
		t.Errorf("after recovery: %s", r.body)
	}
}

// TestFaultStatementTimeout: a Postgres statement timeout fails the sync with
// Postgres's own message and publishes nothing.
func TestFaultStatementTimeout(t *testing.T) {
	t.Parallel()
	e := start(t)
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	before, _ := st.ReadPointer(context.Background(), "e2e")
	testenv.Exec(t, e.DSN, `UPDATE things SET gen = 5`)
	e.DSN += "&options=-c%20statement_timeout%3D1"
	testenv.Exec(t, strings.Split(e.DSN, "&options")[0], `CREATE OR REPLACE VIEW slow AS SELECT t.*, (SELECT count(*) FROM generate_series(1, 200000 + length(t.id))) AS z FROM things t`)
	writeConfig(t, e, strings.Replace(config, "table: public.things", "table: public.slow", 1))
	_, err := e.sync(t)
	if err == nil || !strings.Contains(err.Error(), "statement timeout") {
		t.Fatalf("sync under a 1ms statement timeout = %v; want Postgres's statement timeout error", err)
	}
	if p, _ := st.ReadPointer(context.Background(), "e2e"); p.Version != before.Version {
		t.Errorf("pointer moved to %s after a timed-out sync", p.Version)
	}
}

// TestFaultPostgresRestartsMidSync: the Postgres server restarts (a fast shutdown,
// which terminates the syncer's session) while a sync reads from it. The sync fails
// and publishes nothing, its half-written version is marked failed, and the API keeps
// serving the last version; once Postgres is back the next sync publishes.
func TestFaultPostgresRestartsMidSync(t *testing.T) {
	t.Parallel()
	dsn, restart := testenv.PostgresServer(t)
	e := newEnv(dsn, testenv.Bigtable(t))
	// pause() holds every row of the view for knobs.delay seconds, so that a sync can be
	// caught reading; with sorts off, the rows stream in key order from the index
	// instead of arriving all at once after a sort.
	testenv.Exec(t, dsn, schema, `INSERT INTO things (id) SELECT 'bulk-' || g FROM generate_series(1, 20000) g`,
		`INSERT INTO things (id) VALUES ('plain')`,
		`CREATE TABLE knobs (delay float8 NOT NULL); INSERT INTO knobs VALUES (0)`,
		`CREATE FUNCTION pause() RETURNS boolean LANGUAGE plpgsql AS $$
		 DECLARE d float8;
		 BEGIN SELECT delay INTO d FROM knobs; IF d > 0 THEN PERFORM pg_sleep(d); END IF; RETURN true; END $$`,
		`CREATE VIEW slow_things AS SELECT * FROM things WHERE pause()`,
		`ALTER DATABASE postgres SET enable_sort = off`)
	e.ConfigPath = t.TempDir() + "/snapflip.yaml"
	// Full copies: a delta of a view reads it sorted by id bytes, which no index
	// streams, so nothing would be written until the whole view was read.
	writeConfig(t, e, "versions: full\n"+strings.Replace(config, "table: public.things", "table: public.slow_things", 1))
	e.startAPI(t)
	out, err := e.sync(t)
	if err != nil {
		t.Fatal(err)
	}
	v1 := stack.PublishedVersion(t, out)
	e.awaitVersion(t, docPath("things", "plain"), v1)

	testenv.Exec(t, dsn, `UPDATE things SET gen = 1`, `UPDATE knobs SET delay = 0.0005`)
	errc := make(chan error, 1)
	go func() { _, err := e.sync(t); errc <- err }()
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	var writing snapshot.Version
	testenv.Eventually(t, time.Minute, func() error {
		ms, _ := st.ListManifests(context.Background(), "e2e")
		if len(ms) == 0 || ms[len(ms)-1].State != "writing" {
			return errors.New("the second sync never started writing")
		}
		writing = ms[len(ms)-1].Version
		return nil
	})
	// Let it write some documents of the new version first, so the restart lands with
	// the copy half done.
	testenv.Eventually(t, time.Minute, func() error {
		if docs, _, _ := st.ScanPage(context.Background(), snapshot.ChainRef{Dataset: "e2e", Chain: []snapshot.Version{writing}, Collection: "things"}, "", 1); len(docs) == 0 {
			return errors.New("the second sync wrote no document")
		}
		return nil
	})
	restart()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("a sync whose Postgres restarted under it succeeded")
		}
		t.Logf("sync failed: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the sync still runs 60s after Postgres restarted")
	}
	if p, err := st.ReadPointer(context.Background(), "e2e"); err != nil || string(p.Version) != v1 {
		t.Errorf("pointer after the failed sync = %v, %v; want %s", p.Version, err, v1)
	}
	if m, err := st.ReadManifest(context.Background(), "e2e", writing); err != nil || m.State != "failed" {
		t.Errorf("the interrupted version %s is %q (%v); want failed", writing, m.State, err)
	}
	if r := e.get(t, docPath("things", "plain")); r.status != http.StatusOK || r.version != v1 {
		t.Errorf("read after the failed sync = %d from %s; want 200 from %s", r.status, r.version, v1)
	}

	testenv.Exec(t, dsn, `UPDATE knobs SET delay = 0`)
	out, err = e.sync(t)
	if err != nil || !strings.HasPrefix(out, "published") {
		t.Fatalf("sync after Postgres came back = %q, %v", out, err)
	}
	if r := e.awaitVersion(t, docPath("things", "plain"), stack.PublishedVersion(t, out)); gen(t, r.body) != 1 {
		t.Errorf("after recovery: %s", r.body)
	}
}
