package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
)

// TestUnwatch: `syncer unwatch` removes the notify mode's function and the trigger on
// every table that has it (a partitioned table and its partitions too), says which,
// and says so when there is nothing to remove; on a config still in notify mode it
// adds that a syncer would install them again.
func TestUnwatch(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE things (id int PRIMARY KEY)`,
		`CREATE TABLE parts (id int, r text) PARTITION BY LIST (r)`, `CREATE TABLE parts_a PARTITION OF parts FOR VALUES IN ('a')`)
	config := filepath.Join(t.TempDir(), "snapflip.yaml")
	if err := os.WriteFile(config, []byte(`watch: {mode: notify}
collections: [{name: things, table: things}, {name: parts, table: parts, key: id}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "things", Table: "things"}, {Name: "parts", Table: "parts", Key: "id"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.InstallNotify(ctx); err != nil {
		t.Fatal(err)
	}
	unwatch := func() string {
		t.Helper()
		var out bytes.Buffer
		// Bigtable is never reached; the config only has to be valid.
		m := &Syncer{Getenv: env(map[string]string{EnvPostgresDSN: dsn, EnvEmulatorHost: "127.0.0.1:1"}), Stdout: &out, Stderr: io.Discard}
		c := m.unwatchCommand(&syncerFlags{config: config, logFormat: "text", logLevel: "warn"})
		c.SetArgs([]string{})
		c.SilenceUsage, c.SilenceErrors = true, true
		if err := c.ExecuteContext(ctx); err != nil {
			t.Fatalf("syncer unwatch: %v", err)
		}
		return out.String()
	}

	out := unwatch()
	for _, want := range []string{"removed snapflip.notify_change() and its trigger on 3 table(s): public.parts, public.parts_a, public.things",
		"still says watch.mode: notify"} {
		if !strings.Contains(out, want) {
			t.Errorf("syncer unwatch printed %q; want %q", out, want)
		}
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var triggers int
	var function bool
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_trigger WHERE tgname = $1), to_regprocedure($2) IS NOT NULL`,
		pgsource.NotifyTrigger, pgsource.NotifyFunction).Scan(&triggers, &function); err != nil {
		t.Fatal(err)
	}
	if triggers != 0 || function {
		t.Errorf("after syncer unwatch: %d triggers, function %v; want none", triggers, function)
	}
	if out := unwatch(); !strings.Contains(out, "nothing to remove") {
		t.Errorf("syncer unwatch again printed %q; want nothing to remove", out)
	}
}
