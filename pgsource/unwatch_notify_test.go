package pgsource

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/testenv"
)

// The DDL the notify mode ran: its schema, its function, and its trigger on a table.
const (
	oldNotifySchemaSQL   = `CREATE SCHEMA snapflip`
	oldNotifyFunctionSQL = `CREATE FUNCTION snapflip.notify_change() RETURNS trigger LANGUAGE plpgsql AS $snapflip$
BEGIN
	PERFORM pg_catalog.pg_notify('snapflip_changes', pg_catalog.format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME));
	RETURN NULL;
END
$snapflip$`
)

// oldNotifyTriggerSQL is the DDL of the notify mode's trigger on table.
func oldNotifyTriggerSQL(table string) string {
	return `CREATE TRIGGER snapflip_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON ` + table +
		` FOR EACH STATEMENT EXECUTE FUNCTION snapflip.notify_change()`
}

// oldNotifySQL is all the notify mode installed for the tables.
func oldNotifySQL(tables ...string) []string {
	sql := []string{oldNotifySchemaSQL, oldNotifyFunctionSQL}
	for _, t := range tables {
		sql = append(sql, oldNotifyTriggerSQL(t))
	}
	return sql
}

// partsSchema has a table, a partitioned one with its partitions, and a table the
// notify mode left alone.
var partsSchema = []string{
	`CREATE TABLE nums (id int PRIMARY KEY, v text)`,
	`CREATE TABLE parts (id int, r text) PARTITION BY LIST (r)`,
	`CREATE TABLE parts_a PARTITION OF parts FOR VALUES IN ('a')`, `CREATE TABLE parts_b PARTITION OF parts FOR VALUES IN ('b')`,
	`CREATE TABLE other (id int)`,
}

// notifyLeft returns how many notify triggers there are, and whether the function
// and the schema exist.
func notifyLeft(t *testing.T, dsn string) (triggers int, function, schema bool) {
	t.Helper()
	ctx := context.Background()
	conn := testenv.Connect(t, ctx, dsn)
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_trigger WHERE tgname = $1),
			to_regprocedure($2) IS NOT NULL, EXISTS (SELECT FROM pg_namespace WHERE nspname = $3)`,
		NotifyTrigger, NotifyFunction, NotifySchema).Scan(&triggers, &function, &schema); err != nil {
		t.Fatal(err)
	}
	return triggers, function, schema
}

// RemoveNotify removes the function, every trigger calling it (partitions and their
// parent included, whatever the source's collections) and the schema, returning the
// tables; removing again finds nothing, and is no error.
func TestRemoveNotifyRemovesTheOldTriggers(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, partsSchema...)
	testenv.Exec(t, dsn, oldNotifySQL("nums", "parts", "parts_a", "parts_b")...)
	src, err := New(dsn, []Collection{{Name: "nums", Table: "nums"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, found, err := src.RemoveNotify(ctx)
	if err != nil || !found {
		t.Fatalf("remove = %v, %v; want the function found", found, err)
	}
	want := []string{"public.nums", "public.parts", "public.parts_a", "public.parts_b"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("removed from (-want +got):\n%s", diff)
	}
	if n, fn, schema := notifyLeft(t, dsn); n != 0 || fn || schema {
		t.Errorf("after removing: %d triggers, function %v, schema %v; want none", n, fn, schema)
	}
	if got, found, err := src.RemoveNotify(ctx); err != nil || found || len(got) != 0 {
		t.Errorf("removing again = %v, %v, %v; want nothing found, no error", got, found, err)
	}
}

// Only the function's owner removes it, and that needs no ownership of the tables; a
// schema that is not the role's stays. A role whose default_transaction_read_only is
// on removes all the same (the removal begins its transactions READ WRITE).
func TestRemoveNotifyAsTheFunctionsOwner(t *testing.T) {
	admin := os.Getenv(testenv.EnvPostgres)
	role := testenv.Role(t, "snapflip_unwatch")
	testenv.Exec(t, admin, `ALTER ROLE `+role+` SET default_transaction_read_only = on`)
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, partsSchema...)
	testenv.Exec(t, dsn, `GRANT SELECT, TRIGGER ON ALL TABLES IN SCHEMA public TO `+role,
		`GRANT CREATE ON DATABASE `+pgx.Identifier{testenv.Database(t, dsn)}.Sanitize()+` TO `+role)
	roleDSN := testenv.AsRole(t, dsn, role)
	src, err := New(roleDSN, []Collection{{Name: "nums", Table: "nums"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// A DBA installed the function: the role may not remove it.
	testenv.Exec(t, dsn, oldNotifySQL("nums", "parts")...)
	testenv.Exec(t, dsn, `GRANT USAGE ON SCHEMA snapflip TO `+role)
	if _, _, err := src.RemoveNotify(ctx); err == nil || !strings.Contains(err.Error(), "as the role that installed it") {
		t.Errorf("remove by a role that does not own the function = %v; want an error saying who can", err)
	}
	if n, fn, _ := notifyLeft(t, dsn); n != 2 || !fn {
		t.Errorf("after the refused remove: %d triggers, function %v; want 2, true", n, fn)
	}
	// Given to the role, the role removes it; the schema, the DBA's, stays.
	testenv.Exec(t, dsn, `ALTER FUNCTION snapflip.notify_change() OWNER TO `+role)
	if got, found, err := src.RemoveNotify(ctx); err != nil || !found || len(got) != 2 {
		t.Errorf("remove by the function's owner = %v, %v, %v; want 2 tables", got, found, err)
	}
	if n, fn, schema := notifyLeft(t, dsn); n != 0 || fn || !schema {
		t.Errorf("after removing the DBA's: %d triggers, function %v, schema %v; want 0, false, true", n, fn, schema)
	}
	testenv.Exec(t, dsn, `DROP SCHEMA snapflip`)

	// The role installed it all itself, on tables it does not own: it removes it all.
	testenv.Exec(t, roleDSN, append([]string{`SET default_transaction_read_only = off`}, oldNotifySQL("nums", "parts", "parts_a")...)...)
	got, found, err := src.RemoveNotify(ctx)
	if err != nil || !found {
		t.Fatalf("remove by the role that installed it = %v, %v; want the function found", found, err)
	}
	if diff := cmp.Diff([]string{"public.nums", "public.parts", "public.parts_a"}, got); diff != "" {
		t.Errorf("removed from (-want +got):\n%s", diff)
	}
	if n, fn, schema := notifyLeft(t, dsn); n != 0 || fn || schema {
		t.Errorf("after removing the role's: %d triggers, function %v, schema %v; want none", n, fn, schema)
	}
}

// Removing gives up when a table with the trigger is in use by a long transaction
// (rather than hold up its readers and writers behind the ACCESS EXCLUSIVE lock it
// queues for), says to try again at a quiet time, and removes nothing; once the
// transaction ends, it removes.
func TestRemoveNotifyGivesUpOnABusyTable(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, partsSchema...)
	testenv.Exec(t, dsn, oldNotifySQL("nums", "parts", "parts_a", "parts_b")...)
	src, err := New(dsn, []Collection{{Name: "nums", Table: "nums"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tx := testenv.OpenTx(t, dsn, `SELECT count(*) FROM parts_b`) // holds ACCESS SHARE until it ends
	start := time.Now()
	_, _, err = src.RemoveNotify(ctx)
	t.Logf("remove while parts_b is read: %v (after %s)", err, time.Since(start).Round(time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "try again at a quiet time") {
		t.Errorf("remove while a transaction reads a table = %v; want an error saying to try again at a quiet time", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, fn, _ := notifyLeft(t, dsn); n != 4 || !fn {
		t.Errorf("after the remove gave up: %d triggers, function %v; want all 4 and the function still there", n, fn)
	}
	if got, found, err := src.RemoveNotify(ctx); err != nil || !found || len(got) != 4 {
		t.Errorf("remove once the transaction ended = %v, %v, %v; want 4 tables", got, found, err)
	}
}

// A drop that takes longer than removeStatementTimeout in all (here: a table's lock
// held by a long transaction, with the statement's timeout under the lock's) gives up,
// says so, and removes nothing.
func TestRemoveNotifyGivesUpAfterItsStatementTimeout(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, partsSchema...)
	testenv.Exec(t, dsn, oldNotifySQL("nums")...)
	src, err := New(dsn, []Collection{{Name: "nums", Table: "nums"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer func(d string) { removeStatementTimeout = d }(removeStatementTimeout)
	removeStatementTimeout = "300ms" // under the 1s lock timeout: the statement's gives out first

	tx := testenv.OpenTx(t, dsn, `SELECT count(*) FROM nums`) // a reader's ACCESS SHARE lock, held
	_, _, err = src.RemoveNotify(ctx)
	if err == nil || !strings.Contains(err.Error(), "took over 300ms") || !strings.Contains(err.Error(), "nothing was removed") {
		t.Fatalf("RemoveNotify with the table's lock held past the statement timeout = %v; want it to give up, saying so", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, fn, _ := notifyLeft(t, dsn); n != 1 || !fn {
		t.Fatalf("after the drop gave up: %d triggers, function %v; want the one, untouched", n, fn)
	}
	tables, found, err := src.RemoveNotify(ctx)
	if err != nil || !found || len(tables) != 1 {
		t.Fatalf("RemoveNotify once the table is free = %v, %v, %v; want the one table", tables, found, err)
	}
}
