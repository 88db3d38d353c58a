package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		// Bigtable is never reached; the config only has to be valid.
		out, _, err := run(t, false, env(map[string]string{EnvPostgresDSN: dsn, EnvEmulatorHost: "127.0.0.1:1"}),
			"unwatch", "--config", config, "--log-level", "warn")
		if err != nil {
			t.Fatalf("syncer unwatch: %v", err)
		}
		return out
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

// TestRunRefusesNotifyWithoutPrivileges: `syncer run` in notify mode, as a role that
// may not create triggers on the watched table, exits at once with the error that
// names the table and the grant, instead of running on the poll alone.
func TestRunRefusesNotifyWithoutPrivileges(t *testing.T) {
	role := testenv.Role(t, "snapflip_run")
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE things (id int PRIMARY KEY)`, `INSERT INTO things VALUES (1)`,
		`GRANT SELECT ON things TO `+role)
	config := filepath.Join(t.TempDir(), "snapflip.yaml")
	if err := os.WriteFile(config, []byte("dataset: notify\nwatch: {mode: notify}\ncollections: [{name: things, table: things}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, _, err := run(t, false, env(map[string]string{EnvPostgresDSN: testenv.AsRole(t, dsn, role), EnvEmulatorHost: testenv.Bigtable(t)}),
			"run", "--config", config, "--log-level", "error")
		errc <- err
	}()
	select {
	case err := <-errc:
		for _, want := range []string{"public.things", "GRANT TRIGGER ON", "watch.mode: stats needs no privilege"} {
			if !errors.Is(err, pgsource.ErrNotifySetup) || !strings.Contains(fmt.Sprint(err), want) {
				t.Errorf("syncer run = %v; want ErrNotifySetup naming %q", err, want)
			}
		}
	case <-ctx.Done():
		t.Fatal("syncer run in notify mode without the TRIGGER privilege kept running")
	}
}

// TestCheckNamesNotifyProblems: `syncer check` with watch.mode notify names what would
// keep `syncer run` from installing its triggers (the TRIGGER privilege, CREATE for
// the function's schema), and passes once a DBA granted them; it installs nothing.
func TestCheckNamesNotifyProblems(t *testing.T) {
	role := testenv.Role(t, "snapflip_check")
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE things (id int PRIMARY KEY)`, `GRANT SELECT ON things TO `+role)
	config := filepath.Join(t.TempDir(), "snapflip.yaml")
	if err := os.WriteFile(config, []byte("dataset: notifycheck\nwatch: {mode: notify}\ncollections: [{name: things, table: things}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := env(map[string]string{EnvPostgresDSN: testenv.AsRole(t, dsn, role), EnvEmulatorHost: testenv.Bigtable(t)})
	out, _, err := run(t, false, getenv, "check", "--config", config)
	if !errors.Is(err, ErrCheckFailed) {
		t.Fatalf("syncer check without the privileges = %v; want ErrCheckFailed\n%s", err, out)
	}
	for _, want := range []string{"lacks the TRIGGER privilege on it", "GRANT TRIGGER ON public.things", "CREATE on the database"} {
		if !strings.Contains(out, want) {
			t.Errorf("syncer check printed no %q:\n%s", want, out)
		}
	}
	testenv.Exec(t, dsn, `GRANT TRIGGER ON things TO `+role,
		`GRANT CREATE ON DATABASE `+pgx.Identifier{testenv.Database(t, dsn)}.Sanitize()+` TO `+role)
	if out, _, err := run(t, false, getenv, "check", "--config", config); err != nil {
		t.Errorf("syncer check with the privileges = %v; want ok\n%s", err, out)
	}
	var triggers int
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_trigger WHERE tgname = $1`, pgsource.NotifyTrigger).Scan(&triggers); err != nil || triggers != 0 {
		t.Errorf("syncer check left %d triggers (%v); want none", triggers, err)
	}
}
