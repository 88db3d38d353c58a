package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/cli"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
)

// TestNotifyModeServesReadThenWriteCommits: with watch.mode notify, `syncer run`
// serves a commit made by a session that read less than a second before and then went
// idle (which the stats mode sees ~10 s late), to a table collection and to the table a
// query collection reads, each reported by its table's notification. The statistics
// poll runs once an hour here, so only the notifications can start these syncs. The
// delays are logged, not asserted (STYLE.md: speed is for benchmarks). Once `syncer
// run` returns, its watch has ended and its listening connection is gone.
func TestNotifyModeServesReadThenWriteCommits(t *testing.T) {
	// Not parallel: it measures latency, and looks for the watch's goroutines after.
	e := start(t)
	e.stopAPI()
	e.startAPI(t, cli.EnvRefresh, "") // the default refresh
	var log testenv.Log
	stop := e.runSyncerTo(t, config+"watch: {mode: notify, interval: 1h}\n", &log, "--log-level", "debug")
	defer stop()
	e.awaitServed(t, docPath("things", "plain"), `"id":"plain"`, time.Now(), 10*time.Second)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The watch starts after the first sync; it has installed its triggers when its
	// listener connects.
	listener := "snapflip-syncer" + pgsource.ListenSuffix
	listening := func() int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND application_name = $1`, listener).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if listening() == 0 {
			return fmt.Errorf("no connection named %s after the first sync", listener)
		}
		return nil
	})
	notified := map[string]int{}
	for i := range 6 {
		table, read, write, path := "public.things", `SELECT note FROM things WHERE id = 'plain'`,
			`UPDATE things SET note = 'notified-%d' WHERE id = 'plain'`, docPath("things", "plain")
		if i%2 == 1 { // the query collection: SELECT key, value, gen FROM flags WHERE enabled
			table, read, write, path = "public.flags", `SELECT value FROM flags WHERE key = 'on'`,
				`UPDATE flags SET value = 'notified-%d' WHERE key = 'on'`, docPath("flags", "on")
		}
		if _, err := conn.Exec(ctx, read); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf(write, i)); err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		d := e.awaitServed(t, path, fmt.Sprintf("notified-%d", i), at, 30*time.Second)
		notified[table]++
		log.Await(t, fmt.Sprintf("commit %d's notification", i), notified[table], `msg="change notified"`, table)
		t.Logf("read, then commit %d to %s: notified, served after %s", i, table, d.Round(time.Millisecond))
	}

	stop()
	buf := make([]byte, 1<<22)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "pgsource.(*Source).Watch(") {
		t.Errorf("the watch still runs after syncer run returned:\n%s", stacks)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if listening() > 0 {
			return fmt.Errorf("%s still connected after syncer run returned", listener)
		}
		return nil
	})
}

// runSyncerTo starts `syncer run` in-process with cfg, as runSyncer does, but with its
// log written to stderr and args after "run". The function returned stops it and
// waits for it to return, once.
func (e *env) runSyncerTo(tb testing.TB, cfg string, stderr io.Writer, args ...string) func() {
	tb.Helper()
	if err := os.WriteFile(e.configPath, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	s := &cli.Syncer{Getenv: e.getenv, Stdout: io.Discard, Stderr: stderr}
	go func() { done <- s.Run(ctx, append([]string{"run"}, args...)) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("syncer run: %v", err)
			}
		})
	}
}
