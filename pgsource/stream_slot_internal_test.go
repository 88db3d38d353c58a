package pgsource

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
)

// logEvents logs each event to log: its kind's sentence, and its attributes.
func logEvents(log *slog.Logger) snapshot.ObserverFunc {
	return func(ctx context.Context, e snapshot.Event) {
		log.InfoContext(ctx, e.Kind.String(), e.Attrs...)
	}
}

// reportTo is a reading's report that logs each event to log.
func reportTo(log *slog.Logger) func(context.Context, snapshot.EventKind, ...any) {
	return func(ctx context.Context, kind snapshot.EventKind, attrs ...any) {
		logEvents(log)(ctx, snapshot.Event{Kind: kind, Attrs: attrs})
	}
}

// nudgeConn returns a nudger over dsn whose log goes to log, and a connection of the
// test's own to dsn.
func nudgeConn(t *testing.T, dsn string, log *testenv.Log) (*nudger, *pgx.Conn) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	n := newNudger(context.Background(), cfg, reportTo(slog.New(slog.NewTextHandler(log, nil))), uuid.NewString())
	t.Cleanup(n.close)
	conn := testenv.Connect(t, context.Background(), dsn)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return n, conn
}

// A request logs a running-transactions record even while a transaction that wrote
// is in flight, which the temporary slot's creation waits for: that wait is cut
// short, the request succeeds, and no slot is left. Both ways are tried: the one the
// server allows (pg_log_standby_snapshot() on Postgres 16 and later, for a
// superuser), and the temporary slot.
func TestNudgeWithWriteInFlight(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE EXTENSION pg_walinspect`, `CREATE TABLE t (id int)`)
	tx := testenv.OpenTx(t, dsn, `INSERT INTO t VALUES (1)`)
	defer tx.Rollback(context.Background())
	for _, tempSlot := range []bool{false, true} {
		t.Run(fmt.Sprintf("temporary slot %v", tempSlot), func(t *testing.T) {
			var log testenv.Log
			n, conn := nudgeConn(t, dsn, &log)
			n.noFunc = tempSlot
			ctx := context.Background()
			var before string
			if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&before); err != nil {
				t.Fatal(err)
			}
			if err := n.request(ctx); err != nil {
				t.Fatalf("request with a write in flight: %v", err)
			}
			// WAL inspection reads only what is flushed, which the WAL writer does
			// within a fraction of a second.
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
		})
	}
}

// close ends a request under way: a server that accepts the connection and never
// answers does not hold the reading's end.
func TestNudgeCloseEndsARequest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	var log testenv.Log
	cfg, err := pgx.ParseConfig("postgres://postgres@" + ln.Addr().String() + "/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	n := newNudger(context.Background(), cfg, reportTo(slog.New(slog.NewTextHandler(&log, nil))), uuid.NewString())
	n.poke(time.Now())
	c := <-accepted // the request waits for the server's answer
	defer c.Close()
	closed := make(chan struct{})
	go func() { n.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("close still waits for a request to a server that never answers")
	}
	if strings.Contains(log.String(), "could not have the server log") {
		t.Errorf("a request ended by close was logged as a failure:\n%s", log.String())
	}
}

// A role that may not use replication slots cannot have the record logged: the
// failure is said once, with its reason, and the next request waits a minute.
func TestNudgeWithoutReplication(t *testing.T) {
	role := testenv.Role(t, "noreplication")
	dsn := testenv.AsRole(t, testenv.Postgres(t), role)
	var log testenv.Log
	n, _ := nudgeConn(t, dsn, &log)
	for range 2 {
		now := time.Now()
		n.poke(now)
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
