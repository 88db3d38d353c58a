package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
)

// TestCheckAndUnwatchLogical: in watch.mode logical, `syncer check` reports the
// publication and slot and creates neither, and exits 1 naming a table without a
// replica identity; `syncer unwatch` drops the slot and snapflip's publication and
// says so.
func TestCheckAndUnwatchLogical(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE things (id int PRIMARY KEY)`, `CREATE TABLE loose (k int NOT NULL, v text)`)
	getenv := env(map[string]string{EnvPostgresDSN: dsn, EnvEmulatorHost: testenv.Bigtable(t)})
	write := func(yaml string) string {
		p := filepath.Join(t.TempDir(), "snapflip.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("watch: {mode: logical, publication: snapflip, slot: snapflip}\ncollections: [{name: things, table: things}]\n")
	out, _, err := run(t, false, getenv, "check", "--config", good)
	if err != nil {
		t.Fatalf("check = %v\n%s", err, out)
	}
	for _, want := range []string{"watch.mode logical", "publication snapflip: does not exist yet", "tables      public.things",
		"slot snapflip: does not exist yet", "ok: a sync could succeed"} {
		if !strings.Contains(out, want) {
			t.Errorf("check's report lacks %q:\n%s", want, out)
		}
	}
	var exists bool
	if err := testenv.OpenTx(t, dsn).QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_publication)`).Scan(&exists); err != nil || exists {
		t.Errorf("after check, a publication exists = %v, %v; want none", exists, err)
	}

	bad := write("watch: {mode: logical, publication: snapflip, slot: snapflip}\ncollections: [{name: things, table: things}, {name: loose, table: loose, key: k}]\n")
	out, _, err = run(t, false, getenv, "check", "--config", bad)
	if !errors.Is(err, ErrCheckFailed) || !strings.Contains(out, "table public.loose has no replica identity") {
		t.Errorf("check with a table without a replica identity = %v; want ErrCheckFailed naming it:\n%s", err, out)
	}

	ctx := context.Background()
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "things", Table: "things"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := pgsource.LogicalConfig{Publication: "snapflip", Slot: "snapflip"}
	if _, err := src.PrepareLogical(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	testenv.Exec(t, dsn, `SELECT pg_create_logical_replication_slot('snapflip', 'pgoutput')`)
	t.Cleanup(func() {
		testenv.Exec(t, dsn, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'snapflip'`)
	})
	out, _, err = run(t, false, getenv, "check", "--config", good)
	if err != nil || !strings.Contains(out, "publication snapflip: exists, created by snapflip") || !strings.Contains(out, "slot snapflip: inactive, wal_status reserved") {
		t.Errorf("check after prepare = %v; want the publication and the slot reported:\n%s", err, out)
	}
	out, _, err = run(t, false, getenv, "unwatch", "--config", good, "--log-level", "warn")
	if err != nil {
		t.Fatalf("unwatch = %v\n%s", err, out)
	}
	for _, want := range []string{"dropped replication slot snapflip", "dropped publication snapflip", "still says watch.mode: logical"} {
		if !strings.Contains(out, want) {
			t.Errorf("unwatch printed %q; want %q", out, want)
		}
	}
	out, _, err = run(t, false, getenv, "unwatch", "--config", good, "--log-level", "warn")
	if err != nil || !strings.Contains(out, "no replication slot snapflip to drop") {
		t.Errorf("unwatch again = %v, %q; want nothing dropped", err, out)
	}
}
