package layer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// plainSource hides a source's stream from a publisher: the full-copy twin must not
// tell the stream what it published.
type plainSource struct{ snapshot.Source }

// Deltas read from the replication stream's changed ids equal full copies through
// random histories of inserts, updates, deletes, key updates, ids deleted and
// inserted again, deletes of ids inserted in the same transaction, and truncates;
// with chains merged at three layers, with and without a run cache. With the run
// cache, the base is read before the stream begins, and followed from the sync that
// finds a snapshot of the stream holds its contents.
func TestStreamDeltasEqualFullCopies(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("run cache %v", cached), func(t *testing.T) {
			t.Parallel()
			testStreamDeltas(t, cached, uint64(time.Now().UnixNano()))
		})
	}
}

func testStreamDeltas(t *testing.T, cached bool, seed uint64) {
	t.Logf("seed %d", seed)
	r := rig.New(t, []pgsource.Collection{{Name: "items", Table: "items"}, {Name: "pairs", Table: "pairs"}},
		`CREATE TABLE items (id int PRIMARY KEY, v text)`,
		`INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 60) g`,
		`CREATE TABLE pairs (a text, b int, v int, PRIMARY KEY (a, b))`,
		`INSERT INTO pairs SELECT 'k' || (g % 7), g, g FROM generate_series(1, 40) g`)
	r.Pub.Incremental, r.Writer.MaxLayers, r.Writer.RebaseRatio = true, 3, 100
	if cached {
		r.Writer.Runs = layer.NewRunCache(r.Store, 1<<20)
	}
	full := r.Twin()
	full.Source = plainSource{r.Pub.Source}
	baseFirst := cached
	if baseFirst {
		r.Publish(t, r.Pub)
	}
	r.Stream(t, fmt.Sprintf("snapflip_snap_%d", seed%1e12))
	rng := rand.New(rand.NewPCG(seed, 1))
	next := 1000
	steps := []func() string{
		func() string { next++; return fmt.Sprintf(`INSERT INTO items VALUES (%d, 'new')`, next) },
		func() string {
			return fmt.Sprintf(`UPDATE items SET v = 'u%d' WHERE id = %d`, rng.IntN(100), rng.IntN(70))
		},
		func() string { return fmt.Sprintf(`DELETE FROM items WHERE id = %d`, rng.IntN(70)) },
		func() string {
			next++
			return fmt.Sprintf(`UPDATE items SET id = %d WHERE id = (SELECT min(id) FROM items WHERE id > %d)`, next, rng.IntN(70))
		},
		func() string {
			return fmt.Sprintf(`INSERT INTO items VALUES (%d, 'back') ON CONFLICT DO NOTHING`, rng.IntN(70))
		},
		func() string {
			next++
			return fmt.Sprintf(`BEGIN; INSERT INTO items VALUES (%d, 'brief'); DELETE FROM items WHERE id = %d; COMMIT`, next, next)
		},
		func() string { // an id deleted again by a transaction that inserted it first
			id := rng.IntN(70)
			return fmt.Sprintf(`BEGIN; DELETE FROM items WHERE id = %d; INSERT INTO items VALUES (%d, 'x'); DELETE FROM items WHERE id = %d; COMMIT`, id, id, id)
		},
		func() string { return fmt.Sprintf(`UPDATE pairs SET v = v + 1 WHERE a = 'k%d'`, rng.IntN(7)) },
		func() string { return fmt.Sprintf(`DELETE FROM pairs WHERE b = %d`, rng.IntN(45)) },
		func() string {
			return fmt.Sprintf(`UPDATE pairs SET a = 'z,%d' WHERE b = %d`, rng.IntN(5), rng.IntN(45))
		},
		func() string { return `UPDATE items SET v = v WHERE id < 10` }, // rewritten, unchanged
	}
	modes := map[snapshot.LayerMode]int{}
	if baseFirst {
		// The sync the watch starts with: nothing changed since the base.
		if res, err := r.Pub.Publish(context.Background(), snapshot.PublishOptions{}); err != nil || !res.NoOp {
			t.Fatalf("the first sync of the stream: no-op %v, %v; want a no-op", res.NoOp, err)
		}
	} else {
		r.Publish(t, r.Pub)
	}
	r.Publish(t, full)
	// First, the merge of a delta that deleted an id with one whose transaction
	// inserted it and deleted it again: the merged layer keeps the tombstone.
	first := []string{`DELETE FROM items WHERE id = 3`, `UPDATE items SET v = 'a' WHERE id = 4`,
		`BEGIN; INSERT INTO items VALUES (3, 'x'); DELETE FROM items WHERE id = 3; UPDATE items SET v = 'b' WHERE id = 5; COMMIT`}
	for k := range 24 {
		var stmts []string
		for range 1 + rng.IntN(4) {
			stmts = append(stmts, steps[rng.IntN(len(steps))]())
		}
		if k < len(first) {
			stmts = []string{first[k]}
		}
		if k == 17 {
			stmts = append(stmts, `TRUNCATE pairs`, `INSERT INTO pairs SELECT 't', g, g FROM generate_series(1, 40) g`)
		}
		r.Exec(t, stmts...)
		res, err := r.Pub.Publish(context.Background(), snapshot.PublishOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fres, err := full.Publish(context.Background(), snapshot.PublishOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m, f := res.Manifest, fres.Manifest
		if res.NoOp {
			m = r.Published(t, "ds")
		}
		if fres.NoOp {
			f = r.Published(t, "full")
		}
		if own := m.Collections["items"].Own; k == 0 && (own == nil || own.Mode != snapshot.ModeStream) {
			t.Errorf("step 0 (%s): items' layer %+v; want it read by id from the stream", strings.Join(stmts, "; "), own)
		}
		for _, name := range []string{"items", "pairs"} {
			if own := m.Collections[name].Own; own != nil && !res.NoOp {
				modes[own.Mode]++
			}
			got, want := scanCollection(t, r.Store, "ds", m.Chain(name), name), scanCollection(t, r.Store, "full", f.Chain(name), name)
			if !slices.Equal(got, want) {
				t.Fatalf("step %d (%s): %s reads\n%v\nthe full copy\n%v", k, strings.Join(stmts, "; "), name, got, want)
			}
			if d, c := m.Collections[name], f.Collections[name]; d.Digest != c.Digest || d.Rows != c.Rows {
				t.Fatalf("step %d (%s): %s holds %d rows %s; the full copy %d %s", k, strings.Join(stmts, "; "), name, d.Rows, d.Digest, c.Rows, c.Digest)
			}
		}
	}
	t.Logf("layer modes: %v", modes)
	if modes[snapshot.ModeStream] < 10 {
		t.Errorf("%d layers read from the stream's changed ids (modes %v); want most", modes[snapshot.ModeStream], modes)
	}
}

// A keyed read that outgrows its memory bound (64 MiB; here 4,000 bytes) stops, and
// the version is compared in full, equal to a full copy; under the bound the same
// kind of change is read by id, and so is the version after the one compared in full.
func TestStreamDeltaOverKeyedBytesComparesInFull(t *testing.T) {
	r := rig.New(t, []pgsource.Collection{{Name: "items", Table: "items"}},
		`CREATE TABLE items (id int PRIMARY KEY, v text)`,
		`INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 60) g`)
	r.Pub.Incremental = true
	var log testenv.Log
	r.Writer.Observer = snapshot.ObserverFunc(func(_ context.Context, e snapshot.Event) { fmt.Fprintln(&log, e.Kind, e.Attrs) })
	layer.SetKeyedBytes(r.Writer, 4000)
	full := r.Twin()
	full.Source = plainSource{r.Pub.Source}
	r.Stream(t, fmt.Sprintf("snapflip_snap_%d", time.Now().UnixNano()%1e12))
	r.Publish(t, r.Pub)
	r.Publish(t, full)
	for _, step := range []struct {
		stmts []string
		keyed bool
	}{
		// About 1,300 bytes of documents.
		{[]string{`UPDATE items SET v = repeat('a', 100) WHERE id <= 10`, `DELETE FROM items WHERE id = 11`}, true},
		// About 10,500.
		{[]string{`UPDATE items SET v = repeat('b', 500) WHERE id <= 20`, `DELETE FROM items WHERE id = 12`}, false},
		{[]string{`UPDATE items SET v = 'c' WHERE id = 5`, `INSERT INTO items VALUES (100, 'new')`}, true},
	} {
		r.Exec(t, step.stmts...)
		m, f := r.Publish(t, r.Pub), r.Publish(t, full)
		what := strings.Join(step.stmts, "; ")
		if keyed := m.Collections["items"].Own.Mode == snapshot.ModeStream; keyed != step.keyed {
			t.Errorf("after %s: layer mode %q; want read by id %v", what, m.Collections["items"].Own.Mode, step.keyed)
		}
		if got, want := scanCollection(t, r.Store, "ds", m.Chain("items"), "items"), scanCollection(t, r.Store, "full", f.Chain("items"), "items"); !slices.Equal(got, want) {
			t.Fatalf("after %s: items reads\n%v\nthe full copy\n%v", what, got, want)
		}
		if d, c := m.Collections["items"], f.Collections["items"]; d.Digest != c.Digest || d.Rows != c.Rows {
			t.Fatalf("after %s: items holds %d rows %s; the full copy %d %s", what, d.Rows, d.Digest, c.Rows, c.Digest)
		}
	}
	if !strings.Contains(log.String(), "too large to hold") {
		t.Errorf("the fallback was not logged:\n%s", log.String())
	}
}
