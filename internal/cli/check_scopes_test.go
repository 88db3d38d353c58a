package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
