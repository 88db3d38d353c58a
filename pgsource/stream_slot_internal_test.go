package pgsource

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/testenv"
)

// nudgeConn returns a nudger over dsn whose log goes to log, and a connection of the
// test's own to dsn.
func nudgeConn(t *testing.T, dsn string, log *testenv.Log) (*nudger, *pgx.Conn) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	n := newNudger(cfg, slog.New(slog.NewTextHandler(log, nil)), uuid.NewString())
	t.Cleanup(func() { n.close(context.Background()) })
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return n, conn
}

// A request logs a running-transactions record even while a transaction that wrote
// is in flight, which the temporary slot's creation waits for: that wait is cut
// short, the request succeeds, and no slot is left.
func TestNudgeWithWriteInFlight(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE EXTENSION pg_walinspect`, `CREATE TABLE t (id int)`)
	tx := testenv.OpenTx(t, dsn, `INSERT INTO t VALUES (1)`)
	defer tx.Rollback(context.Background())
	var log testenv.Log
	n, conn := nudgeConn(t, dsn, &log)
	ctx := context.Background()
	var before string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if err := n.request(ctx); err != nil {
		t.Fatalf("request with a write in flight: %v", err)
	}
	// WAL inspection reads only what is flushed, which the WAL writer does within a
	// fraction of a second.
	testenv.Eventually(t, 10*time.Second, func() error {
		var records, left int
		err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_get_wal_records_info($1::pg_lsn, pg_current_wal_flush_lsn())
			WHERE resource_manager = 'Standby' AND record_type = 'RUNNING_XACTS'),
			(SELECT count(*) FROM pg_replication_slots WHERE slot_name = $2)`, before, n.slot).Scan(&records, &left)
		if err != nil {
			t.Fatal(err)
		}
		if records == 0 || left != 0 {
			return fmt.Errorf("after a request: %d running-transactions records logged, %d slots named %s left; want at least 1 and 0", records, left, n.slot)
		}
		return nil
	})
	// Its connection is kept for the next request.
	if n.conn == nil {
		t.Error("the request's connection was closed; want it kept")
	}
}

// A role that may not use replication slots cannot have the record logged: the
// failure is said once, with its reason, and the next request waits a minute.
func TestNudgeWithoutReplication(t *testing.T) {
	role := testenv.Role(t, "noreplication")
	dsn := testenv.AsRole(t, testenv.Postgres(t), role)
	var log testenv.Log
	n, _ := nudgeConn(t, dsn, &log)
	ctx := context.Background()
	for range 2 {
		now := time.Now()
		n.poke(ctx, now)
		n.wg.Wait()
		n.mu.Lock()
		next := n.next
		n.next = time.Time{} // try again at once
		n.mu.Unlock()
		if next.Sub(now) < nudgeBackoff/2 {
			t.Fatalf("after a failed request the next may start in %v; want about %v", next.Sub(now), nudgeBackoff)
		}
	}
	if got := strings.Count(log.String(), "could not have the server log a running-transactions record"); got != 1 {
		t.Errorf("the failure was logged %d times; want once:\n%s", got, log.String())
	}
	if !strings.Contains(log.String(), "replication slots") {
		t.Errorf("the log does not give the reason:\n%s", log.String())
	}
}
