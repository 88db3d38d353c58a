package pgsource

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/testenv"
)

// numsSource returns a database with the table nums (id int PRIMARY KEY, v text),
// after sql, and a Source serving it as the collection nums.
func numsSource(t *testing.T, sql ...string) (string, *Source) {
	t.Helper()
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, append([]string{`CREATE TABLE nums (id int PRIMARY KEY, v text)`}, sql...)...)
	src, err := New(dsn, []Collection{{Name: "nums", Table: "nums"}})
	if err != nil {
		t.Fatal(err)
	}
	return dsn, src
}

// TestListenerKeepAlive: after each silence of listenKeepAlive the listener checks
// its connection with a round trip, and the timeout before it leaves the connection
// listening: a commit after a few of them is still notified.
func TestListenerKeepAlive(t *testing.T) {
	dsn, src := numsSource(t, `INSERT INTO nums VALUES (1, 'x')`)
	defer func(d time.Duration) { listenKeepAlive = d }(listenKeepAlive)
	listenKeepAlive = 20 * time.Millisecond // set before the watch starts and restored after it ends

	var (
		mu      sync.Mutex
		reasons []string
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- src.Watch(ctx, WatchConfig{Mode: WatchModeNotify, Interval: time.Hour}, func(c Change) {
			mu.Lock()
			reasons = append(reasons, string(c.Reason))
			mu.Unlock()
		}, nil)
	}()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch = %v", err)
		}
	}()
	count := func(reason string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range reasons {
			if r == reason {
				n++
			}
		}
		return n
	}
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// A keep-alive's statement shows as the listener's last query; wait for three.
	pings := map[time.Time]bool{}
	testenv.Eventually(t, 30*time.Second, func() error {
		var at *time.Time
		if err := conn.QueryRow(context.Background(), `SELECT max(query_start) FROM pg_stat_activity
			WHERE datname = current_database() AND query = '-- ping'`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		if at != nil {
			pings[*at] = true
		}
		if len(pings) < 3 {
			return fmt.Errorf("%d keep-alive round trips seen; want 3", len(pings))
		}
		return nil
	})
	if n := count("notify"); n > 0 {
		t.Fatalf("%d notifications before any commit", n)
	}
	testenv.Exec(t, dsn, `UPDATE nums SET v = 'y'`)
	testenv.Eventually(t, 10*time.Second, func() error {
		if count("notify") == 0 {
			return errors.New("the commit was not notified after the keep-alives")
		}
		return nil
	})
	if n := count("watch started"); n != 1 {
		t.Errorf("%d baselines; want one (no reconnect)", n)
	}
}

// TestNotifyLockTimeoutSparesTheAdvisoryLock: a replica waiting longer than
// notifyLockTimeout for another one's advisory lock still installs its trigger: the
// timeout is for the table's writers only.
func TestNotifyLockTimeoutSparesTheAdvisoryLock(t *testing.T) {
	dsn, src := numsSource(t)
	ctx := context.Background()
	if _, err := src.InstallNotify(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Exec(t, dsn, `DROP TRIGGER `+NotifyTrigger+` ON nums`)
	other, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := other.Exec(ctx, "SELECT pg_advisory_lock($1)", notifyLockKey); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := src.InstallNotify(ctx); errc <- err }()
	testenv.Eventually(t, 30*time.Second, func() error {
		var waiting bool
		if err := other.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if !waiting {
			return errors.New("the install never waited for the advisory lock")
		}
		return nil
	})
	// Held past notifyLockTimeout (1s): a wait, not a condition to await.
	time.Sleep(1500 * time.Millisecond)
	if _, err := other.Exec(ctx, "SELECT pg_advisory_unlock($1)", notifyLockKey); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Errorf("install after waiting 1.5s for another's advisory lock = %v; want it installed", err)
	}
}

// TestRemoveNotifyGivesUpAfterItsStatementTimeout: a drop that takes longer than
// removeStatementTimeout in all (here: a table's lock held by a long transaction,
// each lock wait still under removeLockTimeout) gives up with an error that says so,
// removes nothing, and succeeds once the table is free.
func TestRemoveNotifyGivesUpAfterItsStatementTimeout(t *testing.T) {
	dsn, src := numsSource(t)
	ctx := context.Background()
	if _, err := src.InstallNotify(ctx); err != nil {
		t.Fatal(err)
	}
	defer func(d string) { removeStatementTimeout = d }(removeStatementTimeout)
	removeStatementTimeout = "300ms" // under the 1s lock timeout: the statement's gives out first

	tx := testenv.OpenTx(t, dsn, `SELECT count(*) FROM nums`) // a reader's ACCESS SHARE lock, held
	holder := tx.Conn()
	_, _, err := src.RemoveNotify(ctx)
	if err == nil || !strings.Contains(err.Error(), "took over 300ms") || !strings.Contains(err.Error(), "nothing was removed") {
		t.Fatalf("RemoveNotify with the table's lock held past the statement timeout = %v; want it to give up, saying so", err)
	}
	var triggers int
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := holder.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname = $1`, NotifyTrigger).Scan(&triggers); err != nil || triggers != 1 {
		t.Fatalf("after the drop gave up: %d triggers named %s (%v); want the one, untouched", triggers, NotifyTrigger, err)
	}
	tables, found, err := src.RemoveNotify(ctx)
	if err != nil || !found || len(tables) != 1 {
		t.Fatalf("RemoveNotify once the table is free = %v, %v, %v; want the one table", tables, found, err)
	}
}
