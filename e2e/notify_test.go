package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/cli"
)

// TestNotifyModeServesCommitsWithinTheBudget: with watch.mode notify, `syncer run`
// serves within 2 s a commit made by a session that read less than a second before and
// then went idle (which the stats mode sees ~10 s late), to a table collection and to
// the table a query collection reads. The statistics poll runs once an hour here, so
// only the triggers' notifications can start these syncs.
func TestNotifyModeServesCommitsWithinTheBudget(t *testing.T) {
	// Not parallel: it measures latency.
	e := start(t)
	e.stopAPI()
	e.startAPI(t, cli.EnvRefresh, "") // the default refresh
	defer e.runSyncer(t, config+"watch: {mode: notify, interval: 1h}\n")()
	e.awaitServed(t, docPath("things", "plain"), `"id":"plain"`, time.Now(), 10*time.Second)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The watch starts after the first sync; it has LISTENed once the triggers exist.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname = 'snapflip_notify'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 2 { // things, and flags (the query's table)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tables have the trigger 10s after the first sync; want 2", n)
		}
	}
	for i := range 6 {
		read, write, path := `SELECT note FROM things WHERE id = 'plain'`, `UPDATE things SET note = 'notified-%d' WHERE id = 'plain'`, docPath("things", "plain")
		if i%2 == 1 { // the query collection: SELECT key, value, gen FROM flags WHERE enabled
			read, write, path = `SELECT value FROM flags WHERE key = 'on'`, `UPDATE flags SET value = 'notified-%d' WHERE key = 'on'`, docPath("flags", "on")
		}
		if _, err := conn.Exec(ctx, read); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf(write, i)); err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		d := e.awaitServed(t, path, fmt.Sprintf("notified-%d", i), at, 20*time.Second)
		t.Logf("read, then commit %d: served after %s", i, d.Round(time.Millisecond))
		if d > freshnessBudget {
			t.Errorf("read, then commit %d: served after %s; the budget is %s", i, d.Round(time.Millisecond), freshnessBudget)
		}
	}
}
