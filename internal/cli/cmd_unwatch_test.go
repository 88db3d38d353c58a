package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
)

// oldNotifySQL is the DDL the retired notify watch mode ran on a source watching
// the tables: its schema, its function, and its trigger on each table.
func oldNotifySQL(tables ...string) []string {
	sql := []string{`CREATE SCHEMA snapflip`,
		`CREATE FUNCTION snapflip.notify_change() RETURNS trigger LANGUAGE plpgsql AS $snapflip$
BEGIN
	PERFORM pg_catalog.pg_notify('snapflip_changes', pg_catalog.format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME));
	RETURN NULL;
END
$snapflip$`}
	for _, t := range tables {
		sql = append(sql, `CREATE TRIGGER snapflip_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON `+t+
			` FOR EACH STATEMENT EXECUTE FUNCTION snapflip.notify_change()`)
	}
	return sql
}

// TestUnwatch: `syncer unwatch` removes the notify mode's function, its schema and
// the trigger on every table that has it (a partitioned table and its partitions too),
// says which, and says so when there is nothing to remove.
func TestUnwatch(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE things (id int PRIMARY KEY)`,
		`CREATE TABLE parts (id int, r text) PARTITION BY LIST (r)`, `CREATE TABLE parts_a PARTITION OF parts FOR VALUES IN ('a')`)
	testenv.Exec(t, dsn, oldNotifySQL("things", "parts", "parts_a")...)
	config := filepath.Join(t.TempDir(), "snapflip.yaml")
	if err := os.WriteFile(config, []byte(`collections: [{name: things, table: things}, {name: parts, table: parts, key: id}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	unwatch := func() string {
		t.Helper()
		// Bigtable is never reached; the config only has to be valid.
		out, _, err := run(t, false, env(map[string]string{EnvPostgresDSN: dsn, EnvEmulatorHost: "127.0.0.1:1"}),
			"unwatch", "--config", config, "--log-level", "warn")
		if err != nil {
			t.Fatalf("syncer unwatch: %v", err)
		}
		return out
	}

	out := unwatch()
	if want := "removed snapflip.notify_change() and its trigger on 3 table(s): public.parts, public.parts_a, public.things"; !strings.Contains(out, want) {
		t.Errorf("syncer unwatch printed %q; want %q", out, want)
	}
	conn := testenv.Connect(t, ctx, dsn)
	defer conn.Close(ctx)
	var triggers int
	var function, schema bool
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_trigger WHERE tgname = $1), to_regprocedure($2) IS NOT NULL,
			to_regnamespace($3) IS NOT NULL`,
		pgsource.NotifyTrigger, pgsource.NotifyFunction, pgsource.NotifySchema).Scan(&triggers, &function, &schema); err != nil {
		t.Fatal(err)
	}
	if triggers != 0 || function || schema {
		t.Errorf("after syncer unwatch: %d triggers, function %v, schema %v; want none", triggers, function, schema)
	}
	if out := unwatch(); !strings.Contains(out, "nothing to remove") {
		t.Errorf("syncer unwatch again printed %q; want nothing to remove", out)
	}
}
