package pgsource_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
)

// startWatch runs src.Watch with cfg until the test ends and returns its log, once it
// has reported its first baseline.
func startWatch(t *testing.T, src *pgsource.Source, cfg pgsource.WatchConfig) *changeLog {
	t.Helper()
	l := &changeLog{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Watch(ctx, cfg, l.add, l.polled) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch = %v; want context.Canceled", err)
		}
	})
	l.await(t, "the first baseline", 30*time.Second, func(c pgsource.Change) bool { return c.Reason == pgsource.ReasonWatchStarted })
	return l
}

// await waits until a change matching match is seen, forgets the changes up to it and
// returns it; the test fails after limit.
func (l *changeLog) await(t *testing.T, what string, limit time.Duration, match func(pgsource.Change) bool) pgsource.Change {
	t.Helper()
	var c pgsource.Change
	err := testenv.Poll(limit, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		i := slices.IndexFunc(l.changes, match)
		if i < 0 {
			return errors.New(what + ": not seen")
		}
		c = l.changes[i]
		l.changes = l.changes[i+1:]
		return nil
	})
	if err != nil {
		t.Fatalf("%v (changes: %+v)", err, l.take())
	}
	return c
}

// awaitNotified waits until notify changes have named every one of the tables (one
// change may name several, or each its own) and returns the last of them; a change
// naming another table fails the test.
func (l *changeLog) awaitNotified(t *testing.T, what string, tables ...string) pgsource.Change {
	t.Helper()
	seen := map[string]bool{}
	for {
		c := l.await(t, what, 10*time.Second, func(c pgsource.Change) bool { return c.Reason == pgsource.ReasonNotify })
		for _, name := range c.Tables {
			if !slices.Contains(tables, name) {
				t.Errorf("%s: reported %+v; want only %q", what, c, tables)
			}
			seen[name] = true
		}
		if len(seen) >= len(tables) {
			return c
		}
	}
}

// commitTx runs the statements in one transaction on a session of their own and
// returns the transaction's id.
func commitTx(t *testing.T, dsn string, stmts ...string) uint64 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var xid uint64
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&xid)
	})
	if err != nil {
		t.Fatal(err)
	}
	return xid
}

// notifySchema is the schema the tests of the notify mode read from.
var notifySchema = []string{
	`CREATE TABLE nums (id int PRIMARY KEY, v text)`, `INSERT INTO nums SELECT g, 'x' FROM generate_series(1, 10) g`,
	`CREATE TABLE base (id int PRIMARY KEY, v text)`, `CREATE VIEW odd AS SELECT * FROM base WHERE id % 2 = 1`,
	`CREATE TABLE parts (id int, r text) PARTITION BY LIST (r)`,
	`CREATE TABLE parts_a PARTITION OF parts FOR VALUES IN ('a')`, `CREATE TABLE parts_b PARTITION OF parts FOR VALUES IN ('b')`,
	`CREATE TABLE other (id int)`, `CREATE TABLE marker (id int)`,
}

var notifyCollections = []pgsource.Collection{
	{Name: "nums", Table: "nums"},
	{Name: "odd", Table: "odd", Key: "id"},
	{Name: "parts", Table: "parts", Key: "id"},
	{Name: "marker", Query: "SELECT id FROM marker", Key: "id"},
}

// In notify mode a commit to a watched table (a table, a view's base table, a
// partition written directly or through its parent) is reported by its notification,
// with an xmax above the committing transaction; a write to an unwatched table, a
// rolled-back write and one not yet committed are not. The statistics poll runs once
// only (an hour's interval), so the notifications alone report these.
func TestNotifyWatchReportsCommitsToWatchedTables(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, notifySchema...)
	src, err := pgsource.New(dsn, notifyCollections)
	if err != nil {
		t.Fatal(err)
	}
	l := startWatch(t, src, pgsource.WatchConfig{Mode: pgsource.WatchModeNotify, Interval: time.Hour})

	for _, tt := range []struct {
		what  string
		stmts []string
		want  []string
	}{
		{"an update of a table", []string{`UPDATE nums SET v = 'y' WHERE id = 2`}, []string{"public.nums"}},
		{"an insert into a view's base table", []string{`INSERT INTO base VALUES (1, 'a')`}, []string{"public.base"}},
		{"an insert into a partition, directly", []string{`INSERT INTO parts_a VALUES (1, 'a')`}, []string{"public.parts_a"}},
		{"an insert through the partitioned parent", []string{`INSERT INTO parts VALUES (2, 'b')`}, []string{"public.parts"}},
		{"a delete that matches no row", []string{`DELETE FROM nums WHERE id < 0`}, []string{"public.nums"}},
		{"a truncate", []string{`TRUNCATE base`}, []string{"public.base"}},
		{"two tables in one transaction", []string{`UPDATE nums SET v = 'z'`, `INSERT INTO base VALUES (3, 'c')`, `UPDATE nums SET v = 'w'`},
			[]string{"public.base", "public.nums"}},
	} {
		xid := commitTx(t, dsn, tt.stmts...)
		c := l.awaitNotified(t, tt.what, tt.want...)
		if c.Xmax <= xid || c.LSN == 0 {
			t.Errorf("%s: reported %+v; want an LSN and an xmax above the transaction's id %d", tt.what, c, xid)
		}
	}

	// Nothing else is reported before the marker's commit, which comes after: the
	// listener receives notifications in commit order.
	none := func(what string) {
		t.Helper()
		commitTx(t, dsn, `INSERT INTO marker VALUES (1)`)
		l.awaitNotified(t, what+": only the marker", "public.marker")
	}
	commitTx(t, dsn, `INSERT INTO other VALUES (1)`)
	none("a write to an unwatched table")
	testenv.Exec(t, dsn, `BEGIN`, `UPDATE nums SET v = 'rolled back'`, `ROLLBACK`)
	none("a rolled-back write")

	ctx := context.Background()
	tx := testenv.OpenTx(t, dsn)
	open := tx.Conn()
	var xid uint64
	if err := tx.QueryRow(ctx, `UPDATE nums SET v = 'later' WHERE id = 1 RETURNING pg_current_xact_id()::text::bigint`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	none("a write not committed yet")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if c := l.awaitNotified(t, "the write once committed", "public.nums"); c.Xmax <= xid {
		t.Errorf("the write once committed: reported %+v; want an xmax above %d", c, xid)
	}
	// The trigger went on every partition, and on the parent, once.
	var triggers []string
	rows, err := open.Query(ctx, `SELECT tgrelid::regclass::text FROM pg_trigger WHERE tgname = $1 ORDER BY 1`, pgsource.NotifyTrigger)
	if err != nil {
		t.Fatal(err)
	}
	if triggers, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"base", "marker", "nums", "parts", "parts_a", "parts_b"}, triggers); diff != "" {
		t.Errorf("tables with the trigger (-want +got):\n%s", diff)
	}
}

// The gap the notify mode closes: a session that read something less than a second
// before it commits a write, and then goes idle, reports its statistics only ~10 s
// later (PGSTAT_IDLE_INTERVAL), so the stats mode (its "hot" window off here) sees the
// commit that late; the notify mode reports it by its notification, before the
// statistics. The delays are measured and logged, not asserted (STYLE.md: speed is
// for benchmarks); the stats mode's is Postgres'.
func TestNotifyReportsReadThenWriteByNotification(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, notifySchema...)
	src, err := pgsource.New(dsn, notifyCollections)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	// The setup's statistics reach the counters first, so that they are not taken for
	// the timed commit.
	testenv.Eventually(t, 30*time.Second, func() error {
		var n int64
		if err := admin.QueryRow(ctx, `SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables WHERE relname = 'nums'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 10 {
			return fmt.Errorf("the setup's statistics never arrived: %d inserts counted; want 10", n)
		}
		return nil
	})
	for _, mode := range []string{pgsource.WatchModeNotify, pgsource.WatchModeStats} {
		t.Run(mode, func(t *testing.T) {
			l := startWatch(t, src, pgsource.WatchConfig{Mode: mode, Hot: time.Nanosecond})
			l.awaitPolls(t, 2)
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			// Both in the simple protocol, one round trip each: the read's session then
			// goes idle and reports; the write follows within the second.
			if _, err := conn.Exec(ctx, `SELECT v FROM nums WHERE id = 3`); err != nil {
				t.Fatal(err)
			}
			var xid uint64
			if err := conn.QueryRow(ctx, `UPDATE nums SET v = 'read then written' WHERE id = 3 RETURNING pg_current_xact_id()::text::bigint`,
				pgx.QueryExecModeSimpleProtocol).Scan(&xid); err != nil {
				t.Fatal(err)
			}
			committed := time.Now()
			c := l.await(t, mode+": the commit", 30*time.Second, func(c pgsource.Change) bool { return c.Reason != "watch started" && c.Xmax > xid })
			t.Logf("%s mode: the read-then-write commit was reported %s after it returned (reason %q)",
				mode, c.At.Sub(committed).Round(time.Millisecond), c.Reason)
			if mode == pgsource.WatchModeNotify && (c.Reason != "notify" || !slices.Equal(c.Tables, []string{"public.nums"})) {
				t.Errorf("notify mode: the commit was first reported by %+v; want a notification naming public.nums", c)
			}
		})
	}
}

// A dropped listening connection is replaced at once, with a new baseline, while the
// poll carries on; a commit made meanwhile is reported (by the baseline's xmax, or by
// a notification once listening again), and notifications then flow again.
func TestNotifyWatchReconnectsWithABaseline(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, notifySchema...)
	src, err := pgsource.New(dsn, notifyCollections)
	if err != nil {
		t.Fatal(err)
	}
	l := startWatch(t, src, pgsource.WatchConfig{Mode: pgsource.WatchModeNotify, Interval: time.Hour})
	var killed bool
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Waiting (up to 10 s) until it has gone: the commit below comes after.
	if err := conn.QueryRow(ctx, `SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'snapflip-syncer`+pgsource.ListenSuffix+`'`).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listener: %v, %v", killed, err)
	}
	xid := commitTx(t, dsn, `UPDATE nums SET v = 'during the outage' WHERE id = 1`)
	c := l.await(t, "a new baseline", 30*time.Second, func(c pgsource.Change) bool { return c.Reason == pgsource.ReasonWatchStarted })
	if c.Xmax <= xid {
		// Listening again before the commit: then it is notified.
		if c := l.awaitNotified(t, "the commit made while the listener was replaced", "public.nums"); c.Xmax <= xid {
			t.Errorf("the commit made while the listener was replaced: reported %+v; want an xmax above %d", c, xid)
		}
	}
	commitTx(t, dsn, `UPDATE nums SET v = 'after' WHERE id = 1`)
	l.awaitNotified(t, "a commit after reconnecting", "public.nums")
}

// After start-up, notify trouble never stops the poll: a partition added later on
// which the role may not create the trigger, and a table newly read whose lock a
// writer holds past the install's lock timeout, are logged (an error, a warning) and
// left to the poll, which still reports a commit to a watched table without the
// trigger; notifications still flow; and once the lock is released, the trigger is
// installed at a later resolve.
func TestNotifyTroubleAfterStartLeavesThePollRunning(t *testing.T) {
	role := testenv.Role(t, "snapflip_later")
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, notifySchema...)
	testenv.Exec(t, dsn, `CREATE TABLE extra (id int, v text)`)
	testenv.Exec(t, dsn, `GRANT SELECT, TRIGGER ON ALL TABLES IN SCHEMA public TO `+role,
		`GRANT CREATE ON DATABASE `+pgx.Identifier{testenv.Database(t, dsn)}.Sanitize()+` TO `+role)
	src, err := pgsource.New(testenv.AsRole(t, dsn, role), notifyCollections)
	if err != nil {
		t.Fatal(err)
	}
	var log testenv.Log
	l := startWatch(t, src, pgsource.WatchConfig{Mode: pgsource.WatchModeNotify, Interval: 50 * time.Millisecond,
		Resolve: 200 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&log, nil))})

	// A partition the role may not put the trigger on.
	testenv.Exec(t, dsn, `CREATE TABLE parts_c PARTITION OF parts FOR VALUES IN ('c')`)
	line := log.Await(t, "the new partition without the grant", 1, "level=ERROR", "public.parts_c", "lacks the TRIGGER privilege")
	t.Logf("logged: %s", line)
	pollReports := func(what string) {
		t.Helper()
		xid := commitTx(t, dsn, `INSERT INTO parts_c VALUES (1, 'c')`) // fires no trigger: only the poll sees it
		c := l.await(t, what, 30*time.Second, func(c pgsource.Change) bool { return c.Reason != "notify" && c.Xmax > xid })
		t.Logf("%s: reported by %q", what, c.Reason)
	}
	pollReports("a commit to the partition without the trigger")
	commitTx(t, dsn, `UPDATE nums SET v = 'still notified' WHERE id = 1`)
	l.awaitNotified(t, "a commit to a table with the trigger", "public.nums")

	// A table a writer holds, newly read by a view: its trigger waits for the lock
	// and gives up.
	ctx := context.Background()
	tx := testenv.OpenTx(t, dsn, `INSERT INTO extra VALUES (1, 'held')`) // ROW EXCLUSIVE until it ends
	writer := tx.Conn()
	testenv.Exec(t, dsn, `CREATE OR REPLACE VIEW odd AS SELECT * FROM base WHERE id % 2 = 1 UNION ALL SELECT id, v FROM extra`)
	line = log.Await(t, "the table whose lock a writer holds", 1, "level=WARN", "public.extra", "SQLSTATE 55P03")
	t.Logf("logged: %s", line)
	pollReports("a commit to the partition without the trigger, while the lock is held")
	commitTx(t, dsn, `UPDATE nums SET v = 'still notified' WHERE id = 2`)
	l.awaitNotified(t, "a commit to a table with the trigger, while the lock is held", "public.nums")

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	err = testenv.Poll(30*time.Second, func() error {
		var ok bool
		if err := writer.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = 'extra'::regclass AND tgname = $1)`,
			pgsource.NotifyTrigger).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if !ok {
			return errors.New("the trigger on extra was not installed after the lock's release")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v; the log:\n%s", err, log.String())
	}
	commitTx(t, dsn, `INSERT INTO extra VALUES (2, 'notified')`)
	l.awaitNotified(t, "a commit to the table once it has the trigger", "public.extra")
}

// Installing twice (or four times at once) is the same as once, and skips what cannot
// have a trigger (a materialized view); removing takes away the function, every
// trigger calling it and the schema, and is a no-op once done.
func TestNotifyInstallIsIdempotentAndRemovable(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, notifySchema...)
	testenv.Exec(t, dsn, `CREATE MATERIALIZED VIEW mv AS SELECT * FROM nums`)
	src, err := pgsource.New(dsn, append(slices.Clone(notifyCollections), pgsource.Collection{Name: "mv", Table: "mv", Key: "id"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	installed := func() (triggers int, function, schema bool) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_trigger WHERE tgname = $1),
			to_regprocedure($2) IS NOT NULL, EXISTS (SELECT FROM pg_namespace WHERE nspname = $3)`,
			pgsource.NotifyTrigger, pgsource.NotifyFunction, pgsource.NotifySchema).Scan(&triggers, &function, &schema); err != nil {
			t.Fatal(err)
		}
		return
	}
	want := []string{"public.base", "public.marker", "public.nums", "public.parts", "public.parts_a", "public.parts_b"}
	// Replicas starting together install at once.
	errs := make(chan error, 4)
	for range cap(errs) {
		go func() { _, err := src.InstallNotify(ctx); errs <- err }()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Errorf("installing 4 at once: %v", err)
		}
	}
	for i := range 2 {
		got, err := src.InstallNotify(ctx)
		if err != nil {
			t.Fatalf("install #%d: %v", i+1, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("install #%d: tables (-want +got):\n%s", i+1, diff)
		}
		if n, fn, schema := installed(); n != len(want) || !fn || !schema {
			t.Errorf("after install #%d: %d triggers, function %v, schema %v; want %d, true, true", i+1, n, fn, schema, len(want))
		}
	}
	got, found, err := src.RemoveNotify(ctx)
	if err != nil || !found {
		t.Fatalf("remove = %v, %v; want the function found", found, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("removed from (-want +got):\n%s", diff)
	}
	if n, fn, schema := installed(); n != 0 || fn || schema {
		t.Errorf("after removing: %d triggers, function %v, schema %v; want none", n, fn, schema)
	}
	if got, found, err := src.RemoveNotify(ctx); err != nil || found || len(got) != 0 {
		t.Errorf("removing again = %v, %v, %v; want nothing found, no error", got, found, err)
	}
}

// Without the TRIGGER privilege on a watched table the notify mode fails, naming the
// table, the privilege and the stats mode, and Watch returns that error rather than
// retry or fall back; without CREATE for the function's schema, it names that. A
// function another role owns, or a SECURITY DEFINER one, is not used; with a function
// a DBA installed and gave the role, TRIGGER is enough; only the function's owner
// removes it.
func TestNotifyNeedsPrivileges(t *testing.T) {
	role := testenv.Role(t, "snapflip_watcher")
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, notifySchema...)
	testenv.Exec(t, dsn, `GRANT SELECT ON ALL TABLES IN SCHEMA public TO `+role)
	src, err := pgsource.New(testenv.AsRole(t, dsn, role), notifyCollections)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	_, err = src.InstallNotify(ctx)
	t.Logf("without TRIGGER: %v", err)
	for _, want := range []string{"public.base, public.marker, public.nums, public.parts, public.parts_a, public.parts_b",
		"lacks the TRIGGER privilege", "GRANT TRIGGER ON", "watch.mode: stats needs no privilege"} {
		if !errors.Is(err, pgsource.ErrNotifySetup) || !strings.Contains(fmt.Sprint(err), want) {
			t.Errorf("install without TRIGGER = %v; want ErrNotifySetup naming %q", err, want)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var l changeLog
	if err := src.Watch(wctx, pgsource.WatchConfig{Mode: pgsource.WatchModeNotify}, l.add, l.polled); !errors.Is(err, pgsource.ErrNotifySetup) {
		t.Errorf("Watch without TRIGGER = %v; want it to return ErrNotifySetup", err)
	}
	if got := l.take(); len(got) > 0 {
		t.Errorf("Watch without TRIGGER reported %+v; want nothing", got)
	}

	testenv.Exec(t, dsn, `GRANT TRIGGER ON ALL TABLES IN SCHEMA public TO `+role)
	_, err = src.InstallNotify(ctx)
	t.Logf("without CREATE: %v", err)
	if !errors.Is(err, pgsource.ErrNotifySetup) || !strings.Contains(fmt.Sprint(err), "CREATE on the database") {
		t.Errorf("install without CREATE = %v; want ErrNotifySetup naming CREATE on the database", err)
	}

	// A DBA installs the function instead, with docs/freshness.md's SQL. Until it is the role's,
	// the role does not trust it (its body runs in every writer's transaction), nor
	// may it remove it.
	testenv.Exec(t, dsn, readmeFunctionSQL, `GRANT USAGE ON SCHEMA snapflip TO `+role)
	_, err = src.InstallNotify(ctx)
	t.Logf("with another role's function: %v", err)
	for _, want := range []string{"owned by role postgres", "ALTER FUNCTION snapflip.notify_change() OWNER TO"} {
		if !errors.Is(err, pgsource.ErrNotifySetup) || !strings.Contains(fmt.Sprint(err), want) {
			t.Errorf("install with another role's function = %v; want ErrNotifySetup naming %q", err, want)
		}
	}
	if _, _, err := src.RemoveNotify(ctx); err == nil || !strings.Contains(err.Error(), "as the role that installed it") {
		t.Errorf("remove by a role that does not own the function = %v; want an error saying who can", err)
	}
	// Given to the role, as docs/freshness.md says, it is used and left as it is (the role needs
	// no CREATE); SECURITY DEFINER, it is not.
	testenv.Exec(t, dsn, `ALTER FUNCTION snapflip.notify_change() OWNER TO `+role, `ALTER FUNCTION snapflip.notify_change() SECURITY DEFINER`)
	if _, err := src.InstallNotify(ctx); !errors.Is(err, pgsource.ErrNotifySetup) || !strings.Contains(fmt.Sprint(err), "SECURITY DEFINER") {
		t.Errorf("install with a SECURITY DEFINER function = %v; want ErrNotifySetup naming SECURITY DEFINER", err)
	}
	testenv.Exec(t, dsn, `ALTER FUNCTION snapflip.notify_change() SECURITY INVOKER`)
	if got, err := src.InstallNotify(ctx); err != nil || len(got) != 6 {
		t.Errorf("install with the documented function, the role's = %v, %v; want 6 tables", got, err)
	}
	if got, _, err := src.RemoveNotify(ctx); err != nil || len(got) != 6 {
		t.Errorf("remove by the function's owner = %v, %v; want 6 tables", got, err)
	}
	testenv.Exec(t, dsn, `DROP SCHEMA snapflip`) // the DBA's: the role leaves it

	testenv.Exec(t, dsn, `GRANT CREATE ON DATABASE `+pgx.Identifier{testenv.Database(t, dsn)}.Sanitize()+` TO `+role)
	if got, err := src.InstallNotify(ctx); err != nil || len(got) != 6 {
		t.Errorf("install with the privileges = %v, %v; want 6 tables", got, err)
	}
	// The role removes what it installed, though it owns none of the tables.
	if got, _, err := src.RemoveNotify(ctx); err != nil || len(got) != 6 {
		t.Errorf("remove = %v, %v; want 6 tables", got, err)
	}
}

// readmeFunctionSQL is docs/freshness.md's SQL for a DBA who installs the function for the
// syncer (white space may differ from the syncer's own), up to its ALTER FUNCTION ...
// OWNER TO and GRANT, which the test runs itself.
const readmeFunctionSQL = `CREATE SCHEMA snapflip;
CREATE FUNCTION snapflip.notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_catalog.pg_notify('snapflip_changes', pg_catalog.format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME));
  RETURN NULL;
END
$$;`

// A role whose default_transaction_read_only is on installs all the same (the install
// begins its transactions READ WRITE); a source that refuses the DDL as a read-only
// transaction (SQLSTATE 25006, as a standby does; here an event trigger raises it) is
// ErrNotifySetup, naming the primary and the stats mode.
func TestNotifyInstallsAsARoleReadOnlyByDefault(t *testing.T) {
	admin := os.Getenv(testenv.EnvPostgres)
	role := testenv.Role(t, "snapflip_ro")
	testenv.Exec(t, admin, `ALTER ROLE `+role+` SET default_transaction_read_only = on`)
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, notifySchema...)
	testenv.Exec(t, dsn, `GRANT SELECT, TRIGGER ON ALL TABLES IN SCHEMA public TO `+role,
		`GRANT CREATE ON DATABASE `+pgx.Identifier{testenv.Database(t, dsn)}.Sanitize()+` TO `+role)
	src, err := pgsource.New(testenv.AsRole(t, dsn, role), notifyCollections)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if got, err := src.InstallNotify(ctx); err != nil || len(got) != 6 {
		t.Fatalf("install as a role read-only by default = %v, %v; want 6 tables", got, err)
	}
	if _, _, err := src.RemoveNotify(ctx); err != nil {
		t.Fatalf("remove as a role read-only by default: %v", err)
	}

	testenv.Exec(t, dsn, `CREATE FUNCTION refuse() RETURNS event_trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'cannot execute CREATE TRIGGER in a read-only transaction' USING ERRCODE = 'read_only_sql_transaction'; END $$`,
		`CREATE EVENT TRIGGER refuse ON ddl_command_start WHEN TAG IN ('CREATE TRIGGER') EXECUTE FUNCTION refuse()`)
	_, err = src.InstallNotify(ctx)
	t.Logf("refused as read-only: %v", err)
	for _, want := range []string{"refuses writes", "primary", "watch.mode: stats"} {
		if !errors.Is(err, pgsource.ErrNotifySetup) || !strings.Contains(fmt.Sprint(err), want) {
			t.Errorf("install refused as a read-only transaction = %v; want ErrNotifySetup naming %q", err, want)
		}
	}
}

// Removing gives up when a table with the trigger is in use by a long transaction
// (rather than hold up its readers and writers behind the ACCESS EXCLUSIVE lock it
// queues for), says to try again at a quiet time, and removes nothing; once the
// transaction ends, it removes.
func TestNotifyRemoveGivesUpOnABusyTable(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, notifySchema...)
	src, err := pgsource.New(dsn, notifyCollections)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := src.InstallNotify(ctx); err != nil {
		t.Fatal(err)
	}
	tx := testenv.OpenTx(t, dsn, `SELECT count(*) FROM parts_b`) // holds ACCESS SHARE until it ends
	reader := tx.Conn()
	start := time.Now()
	_, _, err = src.RemoveNotify(ctx)
	t.Logf("remove while parts_b is read: %v (after %s)", err, time.Since(start).Round(time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "try again at a quiet time") {
		t.Errorf("remove while a transaction reads a table = %v; want an error saying to try again at a quiet time", err)
	}
	var triggers int
	if err := reader.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname = $1`, pgsource.NotifyTrigger).Scan(&triggers); err != nil {
		t.Fatal(err)
	}
	if triggers != 6 {
		t.Errorf("after the remove gave up: %d triggers; want all 6 still there", triggers)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got, found, err := src.RemoveNotify(ctx); err != nil || !found || len(got) != 6 {
		t.Errorf("remove once the transaction ended = %v, %v, %v; want 6 tables", got, found, err)
	}
}

// A listener that cannot come back (here: the role's connection limit reached) leaves
// the statistics poll reporting commits to watched tables, and the trouble logged; it
// listens again, with a baseline, once it can.
func TestNotifyListenerDownLeavesThePollRunning(t *testing.T) {
	admin := os.Getenv(testenv.EnvPostgres)
	role := testenv.Role(t, "snapflip_down")
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, notifySchema...)
	testenv.Exec(t, dsn, `GRANT SELECT, TRIGGER ON ALL TABLES IN SCHEMA public TO `+role,
		`GRANT CREATE ON DATABASE `+pgx.Identifier{testenv.Database(t, dsn)}.Sanitize()+` TO `+role)
	src, err := pgsource.New(testenv.AsRole(t, dsn, role), notifyCollections)
	if err != nil {
		t.Fatal(err)
	}
	var log testenv.Log
	l := startWatch(t, src, pgsource.WatchConfig{Mode: pgsource.WatchModeNotify, Interval: 50 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&log, nil))})

	// The poll's connection stays; no other may open.
	testenv.Exec(t, admin, `ALTER ROLE `+role+` CONNECTION LIMIT 1`)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var killed bool
	if err := conn.QueryRow(ctx, `SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'snapflip-syncer`+pgsource.ListenSuffix+`'`).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listener: %v, %v", killed, err)
	}
	line := log.Await(t, "the listener's failure", 1, "too many connections for role")
	t.Logf("logged: %s", line)

	xid := commitTx(t, dsn, `UPDATE nums SET v = 'listener down' WHERE id = 1`)
	c := l.await(t, "a commit while the listener is down", 30*time.Second, func(c pgsource.Change) bool { return c.Xmax > xid })
	if c.Reason == pgsource.ReasonNotify {
		t.Errorf("reported %+v by a notification; the listener was down", c)
	}
	var listeners int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'snapflip-syncer`+pgsource.ListenSuffix+`'`).Scan(&listeners); err != nil || listeners != 0 {
		t.Errorf("%d listeners (%v) while the role may not connect; want none", listeners, err)
	}
	t.Logf("reported by %q while the listener was down", c.Reason)

	// Once it may connect again, it listens again, with a baseline.
	testenv.Exec(t, admin, `ALTER ROLE `+role+` CONNECTION LIMIT -1`)
	l.await(t, "the listener's baseline", 30*time.Second, func(c pgsource.Change) bool { return c.Reason == pgsource.ReasonWatchStarted })
	commitTx(t, dsn, `UPDATE nums SET v = 'listening again' WHERE id = 1`)
	l.awaitNotified(t, "a commit once listening again", "public.nums")
}
