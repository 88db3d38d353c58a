package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
)

// syncer check --auth names each scoped collection without an index that starts with
// the scope's field, and only those.
func TestCheckScopes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth.yaml")
	file := `issuers: [{issuer: https://i.example, audience: a}]
grants:
  - {claim: {name: role, value: app}, collections: [served, unserved], rows: {field: tenant, claim: t}}
  - {claim: {name: role, value: all}, collections: ["*"], rows: {field: org, claim: o}}
`
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	coll := func(name string, indexes ...pgsource.Columns) CollectionConfig {
		return CollectionConfig{Collection: pgsource.Collection{Name: name, Indexes: indexes}}
	}
	cfg := SyncerConfig{Collections: []CollectionConfig{
		coll("served", pgsource.Columns{"tenant", "n"}, pgsource.Columns{"org"}),
		coll("unserved", pgsource.Columns{"n", "tenant"}, pgsource.Columns{"org", "x"}),
		coll("other"),
	}}
	got := strings.Join(checkScopes(path, cfg), "\n")
	for _, want := range []string{"collection other is read through a row scope on org", "collection unserved is read through a row scope on tenant"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems:\n%s\nwant one saying %q", got, want)
		}
	}
	if n := len(checkScopes(path, cfg)); n != 2 {
		t.Errorf("%d problems; want 2:\n%s", n, got)
	}
	if p := checkScopes(filepath.Join(t.TempDir(), "none.yaml"), cfg); len(p) != 1 || !strings.Contains(p[0], "auth:") {
		t.Errorf("a missing auth file: %v", p)
	}
}

// syncer check --auth refuses an auth file that auth.Load refuses, naming what is
// wrong: here a grant that names no issuer in a file trusting two.
func TestCheckAuthFileOfTwoIssuers(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE docs (id text PRIMARY KEY, tenant text)`)
	getenv := env(map[string]string{EnvPostgresDSN: dsn, EnvEmulatorHost: testenv.Bigtable(t)})
	dir := t.TempDir()
	config, authFile := filepath.Join(dir, "snapflip.yaml"), filepath.Join(dir, "auth.yaml")
	if err := os.WriteFile(config, []byte("dataset: two\ncollections:\n  - {name: docs, table: docs, indexes: [[tenant]]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(authFile, []byte(`issuers:
  - {issuer: https://a.example, audience: snapflip}
  - {issuer: https://b.example, audience: snapflip}
grants:
  - {issuer: https://a.example, subject: reader, collections: [docs]}
  - {subject: app, collections: [docs], rows: {field: tenant, claim: tenant}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, false, getenv, "check", "--config", config, "--auth", authFile)
	want := "grants[1]: the file trusts 2 issuers, so every grant must name its issuer"
	if !errors.Is(err, ErrCheckFailed) || !strings.Contains(err.Error(), want) {
		t.Errorf("check --auth of a grant without its issuer = %v\n%s; want ErrCheckFailed saying %q", err, out, want)
	}
}
