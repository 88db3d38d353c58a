package layer_test

import (
	"slices"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// TestDefinitionChangeRebasesThatCollectionOnly: a collection added, an index added to
// one, a collection removed: each rebases only the collection whose definition
// changed; the others keep writing deltas, and every collection reads exactly as a
// full copy of the same source does.
func TestDefinitionChangeRebasesThatCollectionOnly(t *testing.T) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	r.Pub.Incremental = true
	full := r.Twin()
	r.Publish(t, r.Pub)
	steps := []struct {
		name        string
		collections []pgsource.Collection
		sql         string
		bases       []string // the collections whose layer must be a base
	}{
		{"a collection added", append(slices.Clone(rig.TwoCollections), pgsource.Collection{Name: "names", Query: "SELECT id, name FROM users", Key: "id"}),
			`UPDATE users SET name = 'one' WHERE id = 'u1'`, []string{"names"}},
		{"an index added to orders", []pgsource.Collection{rig.TwoCollections[0], {Name: "orders", Table: "orders", Key: "id", Indexes: []pgsource.Columns{{"user_id"}}},
			{Name: "names", Query: "SELECT id, name FROM users", Key: "id"}},
			`UPDATE users SET name = 'two' WHERE id = 'u2'; UPDATE orders SET user_id = 'u9' WHERE id = 3`, []string{"orders"}},
		{"a collection removed", []pgsource.Collection{rig.TwoCollections[0], {Name: "orders", Table: "orders", Key: "id", Indexes: []pgsource.Columns{{"user_id"}}}},
			`UPDATE users SET name = 'three' WHERE id = 'u3'; UPDATE orders SET user_id = 'u8' WHERE id = 4`, nil},
	}
	for _, step := range steps {
		src, err := pgsource.New(r.DSN, step.collections)
		if err != nil {
			t.Fatal(err)
		}
		r.Pub.Source, full.Source = src, src
		r.Exec(t, step.sql)
		m := r.Publish(t, r.Pub)
		f := r.Publish(t, full)
		for _, c := range step.collections {
			own := m.Collections[c.Name].Own
			wantBase := slices.Contains(step.bases, c.Name)
			if own == nil || (own.Kind == snapshot.LayerBase) != wantBase || own.Kind == "" && wantBase {
				t.Errorf("%s: %s's own layer %+v; want a base: %t", step.name, c.Name, own, wantBase)
			}
			got := scanCollection(t, r.Store, "ds", m.Chain(c.Name), c.Name)
			want := scanCollection(t, r.Store, "full", f.Chain(c.Name), c.Name)
			if !slices.Equal(got, want) {
				t.Errorf("%s: %s reads %d documents through its chain; a full copy holds %d, other ones", step.name, c.Name, len(got), len(want))
			}
		}
		if len(m.Collections) != len(step.collections) {
			t.Errorf("%s: the version holds %d collections; want %d", step.name, len(m.Collections), len(step.collections))
		}
	}
}
