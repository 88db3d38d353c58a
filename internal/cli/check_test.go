package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/store"
)

// TestCheck: `syncer check` passes a good config, reporting each collection's key,
// rows and size and the Bigtable schema, and writes nothing; with a bad config it
// exits 1 naming every problem, Postgres' and Bigtable's alike.
func TestCheck(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn,
		`CREATE TABLE customers (id text PRIMARY KEY, name text)`,
		`CREATE TABLE payments (payment_date date, payment_id int, amount numeric, PRIMARY KEY (payment_date, payment_id))`,
		`CREATE TABLE loose (k text, v int)`,
		`CREATE VIEW named AS SELECT * FROM customers`,
		`INSERT INTO customers SELECT 'c' || g, 'n' FROM generate_series(1, 50) g`, `ANALYZE customers`)
	bt := testenv.Bigtable(t)
	getenv := env(map[string]string{EnvPostgresDSN: dsn, EnvEmulatorHost: bt})
	write := func(yaml string) string {
		p := filepath.Join(t.TempDir(), "snapflip.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	good := write(`dataset: chk
collections:
  - {name: customers, table: customers}
  - {name: payments, table: payments}
  - {name: loose, table: loose, key: k}
  - {name: active, query: "SELECT id, name FROM customers WHERE name <> ''; -- pasted from psql", key: id}
`)
	out, _, err := run(t, false, getenv, "check", "--config", good)
	if err != nil {
		t.Fatalf("check of a good config = %v\n%s", err, out)
	}
	for _, want := range []string{
		"collection customers (table", "key       id (inferred); primary key",
		"key       payment_date, payment_id (inferred)", "rows      about 50",
		"collection loose", "will be checked during the sync",
		"collection active (query)", "rows      unknown",
		"bigtable table snapflip: does not exist yet", "family d (documents)", "app profile routing: not checked (emulator)",
		"ok: a sync could succeed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check's report lacks %q:\n%s", want, out)
		}
	}
	st, err := store.Open(context.Background(), testenv.StoreConfig(bt))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if r, err := st.CheckSchema(context.Background()); err != nil || r.Exists {
		t.Errorf("after check, the table exists = %+v, %v; check must write nothing", r, err)
	}

	bad := write(`dataset: chk
bigtable: {op_timeout: 1s}
collections:
  - {name: gone, table: no_such_table}
  - {name: view, table: named}
  - {name: wrongkey, table: customers, key: nope}
  - {name: broken, query: "SELECT id FROM customers WHERE", key: id}
`)
	out, _, err = run(t, false, getenv, "check", "--config", bad)
	if !errors.Is(err, ErrCheckFailed) || errors.Is(err, ErrUsage) {
		t.Fatalf("check of a bad config = %v; want ErrCheckFailed (exit 1)", err)
	}
	for _, want := range []string{"collection gone", "no_such_table", "collection view", "view", "collection wrongkey", "nope",
		"collection broken", "4 problem(s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("check's report of a bad config lacks %q:\n%s", want, out)
		}
	}

	// An unreachable Bigtable and Postgres are problems named in the report, not a
	// crash, and the rest is still checked.
	unreachable := env(map[string]string{EnvPostgresDSN: "postgres://postgres@127.0.0.1:1/x?connect_timeout=1", EnvEmulatorHost: "127.0.0.1:1"})
	out, _, err = run(t, false, unreachable, "check", "--config", write("bigtable: {op_timeout: 1s}\ncollections: [{name: a, table: t, key: k}]\n"))
	if !errors.Is(err, ErrCheckFailed) || !strings.Contains(out, "postgres:") || !strings.Contains(out, "bigtable:") || !strings.Contains(out, "127.0.0.1:1") {
		t.Errorf("check with nothing reachable = %v\n%s; want both named", err, out)
	}
}
