package cli

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

const (
	thingsCollection = "collections: [{name: things, table: public.things, key: id}]\n"
	rule1h           = "(age() > 1h || versions() > 1)"
	rule2h           = "(age() > 2h || versions() > 1)"
)

// thingsSource makes a Postgres database with a table to sync and returns its DSN.
func thingsSource(tb testing.TB) string {
	tb.Helper()
	dsn := testenv.Postgres(tb)
	testenv.Exec(tb, dsn, `CREATE TABLE things (id text PRIMARY KEY, n int)`, `INSERT INTO things VALUES ('a', 1), ('b', 2)`)
	return dsn
}

// mustContain fails tb unless s holds every one of want.
func mustContain(tb testing.TB, what, s string, want ...string) {
	tb.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			tb.Errorf("%s = %q; want it to hold %q", what, s, w)
		}
	}
}

// TestSyncerRefusesShortRetention: a syncer whose ttl needs documents kept longer than
// the table's GC rule keeps them refuses to start, naming its ttl, the table's rule and
// the command that changes it, and changes no rule.
func TestSyncerRefusesShortRetention(t *testing.T) {
	dsn := thingsSource(t)
	addr := testenv.Bigtable(t)
	getenv := env(map[string]string{EnvPostgresDSN: dsn, EnvEmulatorHost: addr})
	publish(t, getenv, writeFile(t, "hour.yaml", "dataset: hour\nttl: 1h\n"+thingsCollection))
	_, admin := bigtableClients(t, addr)
	table := store.DefaultConfig().Table
	before := gcRules(t, admin, table)

	week := writeFile(t, "week.yaml", "dataset: week\nttl: 168h\n"+thingsCollection)
	for _, cmd := range []string{"run", "once"} {
		_, _, err := run(t, false, getenv, cmd, "--config", week, "--log-level", "warn")
		if !errors.Is(err, snapshot.ErrRetention) {
			t.Fatalf("syncer %s with ttl 168h on a table that keeps documents 1h = %v; want refused", cmd, err)
		}
		mustContain(t, "syncer "+cmd+"'s error", err.Error(), "ttl 168h", "documents 1h", rule1h, "manifests 25h", "age() > 25h",
			"syncer retention --apply --config "+week, "not starting")
	}
	if diff := cmp.Diff(before, gcRules(t, admin, table)); diff != "" {
		t.Errorf("a refused syncer changed GC rules (-before +after):\n%s", diff)
	}
	st := testenv.Store(t, testenv.StoreConfig(addr))
	if _, err := st.ReadPointer(context.Background(), "week"); err == nil {
		t.Error("the refused syncer published")
	}
}

// TestDatasetsShareATable: two datasets with different ttls share one table. The
// shorter one creates it; the longer one refuses to start until `syncer retention
// --apply` from its config raises the rules, and then publishes; the shorter one
// starts on the longer rules, saying so; neither current version can be collected
// before it expires; and `syncer retention --apply` from the shorter one's config is
// refused, naming the other dataset, and changes nothing.
func TestDatasetsShareATable(t *testing.T) {
	dsn := thingsSource(t)
	addr := testenv.Bigtable(t)
	getenv := env(map[string]string{EnvPostgresDSN: dsn, EnvEmulatorHost: addr})
	short := writeFile(t, "short.yaml", "dataset: short\nttl: 1h\n"+thingsCollection)
	long := writeFile(t, "long.yaml", "dataset: long\nttl: 2h\n"+thingsCollection)
	_, admin := bigtableClients(t, addr)
	table := store.DefaultConfig().Table
	rules := func() (docs, manifests string) {
		t.Helper()
		r := gcRules(t, admin, table)
		return r["d"], r["m"]
	}

	publish(t, getenv, short)
	if d, m := rules(); d != rule1h || m != "age() > 25h" {
		t.Fatalf("the table made by the 1h dataset: d %s, m %s; want %s, age() > 25h", d, m, rule1h)
	}
	_, _, err := run(t, false, getenv, "once", "--config", long, "--log-level", "warn")
	if !errors.Is(err, snapshot.ErrRetention) {
		t.Fatalf("the 2h dataset on a table that keeps documents 1h = %v; want refused", err)
	}
	mustContain(t, "the refusal", err.Error(), "ttl 2h", rule1h, "syncer retention --apply --config "+long)
	out, _, err := run(t, false, getenv, "check", "--config", long)
	if err == nil {
		t.Error("syncer check of the 2h config on the 1h table found no problem")
	}
	mustContain(t, "syncer check", out, "family d (documents): "+rule1h+" keeps cells 1h", "syncer retention --apply")

	out, _, err = run(t, false, getenv, "retention", "--config", long)
	if err != nil {
		t.Fatalf("syncer retention = %v", err)
	}
	mustContain(t, "syncer retention", out, "table snapflip", rule1h, "datasets sharing the table: 1", "short",
		"--apply would set the GC rule of family d (documents) from "+rule1h+" to "+rule2h)
	if d, _ := rules(); d != rule1h {
		t.Fatalf("syncer retention without --apply changed family d to %s", d)
	}
	out, _, err = run(t, false, getenv, "retention", "--apply", "--config", long)
	if err != nil {
		t.Fatalf("syncer retention --apply from the 2h config = %v\n%s", err, out)
	}
	mustContain(t, "syncer retention --apply", out, "set the GC rule of family d (documents) from "+rule1h+" to "+rule2h,
		"set the GC rule of family m (manifests) from age() > 25h to age() > 26h")
	if d, m := rules(); d != rule2h || m != "age() > 26h" {
		t.Fatalf("after --apply: d %s, m %s; want %s, age() > 26h", d, m, rule2h)
	}

	publish(t, getenv, long)
	testenv.Exec(t, dsn, `UPDATE things SET n = 5 WHERE id = 'a'`)
	out, log, err := run(t, false, getenv, "once", "--config", short, "--log-level", "info")
	if err != nil || !strings.Contains(out, "published") {
		t.Fatalf("the 1h dataset on the 2h table: %q, %v", out, err)
	}
	mustContain(t, "the 1h dataset's log", log, "level=INFO", "keeps cells longer than this dataset's ttl needs",
		"family=d", "keeps=2h", "ttl=1h")

	// Neither current version expires later than the table keeps its documents.
	st := testenv.Store(t, testenv.StoreConfig(addr))
	ctx := context.Background()
	ret, err := st.Retention(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for ds, ttl := range map[string]time.Duration{"short": time.Hour, "long": 2 * time.Hour} {
		p, err := st.ReadPointer(ctx, ds)
		if err != nil {
			t.Fatalf("dataset %s: %v", ds, err)
		}
		m, err := st.ReadManifest(ctx, ds, p.Version)
		if err != nil {
			t.Fatal(err)
		}
		if exp, kept := m.ExpiresAt(ttl), m.DataTime().Add(ret.Docs.Keep); m.TTL != ttl || exp.After(kept) {
			t.Errorf("dataset %s: current version %s (ttl %s) expires at %s, but the table keeps its documents until %s",
				ds, p.Version, m.TTL, exp, kept)
		}
	}

	out, _, err = run(t, false, getenv, "retention", "--apply", "--config", short)
	if !errors.Is(err, snapshot.ErrRetention) {
		t.Fatalf("syncer retention --apply from the 1h config = %v; want refused:\n%s", err, out)
	}
	mustContain(t, "the refusal of --apply", err.Error(), "dataset long", "kept 2h", "(nothing changed)")
	mustContain(t, "the report refused", out, "refused: dataset long needs documents kept 2h")
	if d, m := rules(); d != rule2h || m != "age() > 26h" {
		t.Errorf("after a refused --apply: d %s, m %s; want them as they were", d, m)
	}
}
