package pgsource

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/testenv"
)

// TestListenerKeepAlive: after each silence of listenKeepAlive the listener checks
// its connection with a round trip, and the timeout before it leaves the connection
// listening: a commit after a few of them is still notified.
func TestListenerKeepAlive(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE nums (id int PRIMARY KEY, v text)`, `INSERT INTO nums VALUES (1, 'x')`)
	src, err := New(dsn, []Collection{{Name: "nums", Table: "nums"}})
	if err != nil {
		t.Fatal(err)
	}
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
			reasons = append(reasons, c.Reason)
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
	for deadline := time.Now().Add(30 * time.Second); len(pings) < 3; time.Sleep(5 * time.Millisecond) {
		var at *time.Time
		if err := conn.QueryRow(context.Background(), `SELECT max(query_start) FROM pg_stat_activity
			WHERE datname = current_database() AND query = '-- ping'`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		if at != nil {
			pings[*at] = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keep-alive round trips seen in 30s; want 3", len(pings))
		}
	}
	if n := count("notify"); n > 0 {
		t.Fatalf("%d notifications before any commit", n)
	}
	testenv.Exec(t, dsn, `UPDATE nums SET v = 'y'`)
	for deadline := time.Now().Add(10 * time.Second); count("notify") == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the commit was not notified after the keep-alives")
		}
	}
	if n := count("watch started"); n != 1 {
		t.Errorf("%d baselines; want one (no reconnect)", n)
	}
}
