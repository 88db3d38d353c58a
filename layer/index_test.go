package layer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// entriesThrough returns the live entries of a collection's index through a
// version's chain.
func entriesThrough(tb testing.TB, st *store.Store, m snapshot.Manifest, collection, name string) []string {
	tb.Helper()
	var out []string
	err := st.ScanIndex(context.Background(), snapshot.ChainRef{Dataset: m.Dataset, Chain: m.Chain(collection), Collection: index.Collection(collection, name)}, func(e string) bool {
		out = append(out, e)
		return true
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// entriesOf returns the entries a version's documents make in each of its indexes:
// what its index must hold.
func entriesOf(tb testing.TB, st *store.Store, m snapshot.Manifest, collection string) map[string][]string {
	tb.Helper()
	c := m.Collections[collection]
	out := map[string][]string{}
	err := st.ScanDocuments(context.Background(), snapshot.ChainRef{Dataset: m.Dataset, Chain: m.Chain(collection), Collection: collection}, func(d snapshot.Document) bool {
		for _, decl := range c.Indexes {
			def, err := index.Typed(decl)
			if err != nil {
				tb.Fatal(err)
			}
			k, err := index.Key(def, d.Body)
			if err != nil {
				tb.Fatal(err)
			}
			out[decl.Name] = append(out[decl.Name], index.EntryID(k, d.ID))
		}
		return true
	})
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range out {
		slices.Sort(e)
	}
	return out
}

// checkIndexes fails tb unless every index of m holds exactly the entries its
// documents make, and the layer wrote no more than its changed ids cause.
func checkIndexes(tb testing.TB, st *store.Store, m snapshot.Manifest, collection string, indexes int) {
	tb.Helper()
	c := m.Collections[collection]
	if len(c.Indexes) != indexes {
		tb.Fatalf("version %s: %d indexes %+v; want %d", m.Version, len(c.Indexes), c.Indexes, indexes)
	}
	want := entriesOf(tb, st, m, collection)
	for _, d := range c.Indexes {
		// Each document makes one entry in each index: a check that read nothing
		// (another dataset's rows) would prove nothing.
		if int64(len(want[d.Name])) != c.Rows {
			tb.Fatalf("version %s index %s: %d documents read for %d rows", m.Version, d.Name, len(want[d.Name]), c.Rows)
		}
		got := entriesThrough(tb, st, m, collection, d.Name)
		if !slices.Equal(got, want[d.Name]) {
			tb.Fatalf("version %s index %s: %d entries through the chain %v, %d from the documents", m.Version, d.Name, len(got), m.Chain(collection), len(want[d.Name]))
		}
	}
	if own := c.Own; own != nil && own.Kind == snapshot.LayerDelta {
		ids := own.Inserted + own.Changed + own.Deleted + own.Copied
		for _, iw := range own.Indexes {
			if iw.Entries > ids || iw.Removed > ids {
				tb.Errorf("version %s index %s: a delta naming %d ids wrote %d entries and %d tombstones", m.Version, iw.Name, ids, iw.Entries, iw.Removed)
			}
		}
	}
}

// Every version's index entries, read through its chain, are exactly those its
// documents make, over a random history of inserts, deletes, key changes and value
// changes into and out of NULL, through deltas, merged deltas and rebases; a full
// copy's are too. An index added to the config makes the next version a base that
// carries it; one removed leaves the next version without it.
//
// It mutates a shared history step by step; each check covers the whole version.
func TestIndexEntriesMatchTheDocuments(t *testing.T) {
	schema := []string{
		`CREATE TABLE t (id int PRIMARY KEY, n int, s text, at timestamptz)`,
		`INSERT INTO t SELECT g, g % 7, CASE WHEN g % 5 = 0 THEN NULL ELSE 's' || (g % 11) END,
			'2024-01-01'::timestamptz + g * interval '1 hour' FROM generate_series(1, 300) g`,
	}
	two := []pgsource.Collection{{Name: "t", Table: "t", Indexes: []pgsource.Columns{{"n"}, {"s", "at"}}}}
	r := rig.New(t, two, schema...)
	r.Pub.Incremental, r.Writer.MaxLayers, r.Writer.RebaseRatio = true, 3, 0.3
	full := r.Twin()
	rnd := rand.New(rand.NewPCG(3, 4))
	checkIndexes(t, r.Store, r.Publish(t, r.Pub), "t", 2)
	kinds := map[snapshot.LayerKind]int{}
	for step := range 14 {
		id := func() int { return 1 + rnd.IntN(330) }
		var sql []string
		for range 1 + rnd.IntN(12) {
			switch rnd.IntN(6) {
			case 0:
				sql = append(sql, fmt.Sprintf(`UPDATE t SET n = %d WHERE id = %d`, rnd.IntN(9), id()))
			case 1:
				sql = append(sql, fmt.Sprintf(`UPDATE t SET s = CASE WHEN s IS NULL THEN 'back' ELSE NULL END WHERE id = %d`, id()))
			case 2:
				sql = append(sql, fmt.Sprintf(`DELETE FROM t WHERE id = %d`, id()))
			case 3:
				sql = append(sql, fmt.Sprintf(`INSERT INTO t VALUES (%d, 1, 'new', now()) ON CONFLICT (id) DO NOTHING`, 330+id()))
			case 4:
				sql = append(sql, fmt.Sprintf(`UPDATE t SET id = id + 1000 WHERE id = %d`, id()))
			default:
				sql = append(sql, fmt.Sprintf(`UPDATE t SET at = at + interval '1 day' WHERE n = %d`, rnd.IntN(7)))
			}
		}
		r.Exec(t, sql...)
		m := r.Publish(t, r.Pub)
		checkIndexes(t, r.Store, m, "t", 2)
		switch c := m.Collections["t"]; {
		case c.Own.Kind == snapshot.LayerDelta && c.Layers[0].Merged > 0:
			kinds["merged"]++
		default:
			kinds[c.Own.Kind]++
		}
		if step%5 == 0 {
			checkIndexes(t, r.Store, r.Publish(t, full), "t", 2)
		}
	}

	if kinds["merged"] == 0 || kinds[snapshot.LayerDelta] == 0 || kinds[snapshot.LayerBase] == 0 {
		t.Errorf("the history wrote %v; want deltas, merged deltas and rebases", kinds)
	}

	// One index more: the next version is a base holding all three.
	three := []pgsource.Collection{{Name: "t", Table: "t", Indexes: []pgsource.Columns{{"n"}, {"s", "at"}, {"at"}}}}
	src, err := pgsource.New(r.DSN, three)
	if err != nil {
		t.Fatal(err)
	}
	r.Pub.Source = src
	m := r.Publish(t, r.Pub)
	if c := m.Collections["t"]; c.Own == nil || c.Own.Kind != snapshot.LayerBase {
		t.Fatalf("a version with an index added: own %+v; want a base", c.Own)
	}
	checkIndexes(t, r.Store, m, "t", 3)
	r.Exec(t, `UPDATE t SET n = 100 WHERE id IN (SELECT id FROM t ORDER BY id LIMIT 3)`)
	checkIndexes(t, r.Store, r.Publish(t, r.Pub), "t", 3)

	// None: the next version has no index. (Any change to a collection's definition,
	// its indexes included, makes the next version a base.)
	src, err = pgsource.New(r.DSN, []pgsource.Collection{{Name: "t", Table: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	r.Pub.Source = src
	r.Exec(t, `UPDATE t SET n = 101 WHERE id IN (SELECT id FROM t ORDER BY id LIMIT 3)`)
	m = r.Publish(t, r.Pub)
	if c := m.Collections["t"]; len(c.Indexes) != 0 || len(c.Own.Indexes) != 0 {
		t.Errorf("a version without indexes: indexes %+v, own %+v; want none", c.Indexes, c.Own)
	}
}

// A field whose type no index orders, and a value too long to index, fail the
// version with an error naming them; nothing is published.
func TestUnindexableFieldsFailTheVersion(t *testing.T) {
	for _, tc := range []struct {
		name, schema, want string
		indexes            []pgsource.Columns
	}{
		{"jsonb", `CREATE TABLE t (id int PRIMARY KEY, j jsonb); INSERT INTO t VALUES (1, '{}')`, `index j field "j"`, []pgsource.Columns{{"j"}}},
		{"long", `CREATE TABLE t (id int PRIMARY KEY, s text); INSERT INTO t VALUES (1, repeat('x', 5000))`, "over the limit of 2048", []pgsource.Columns{{"s"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rig.New(t, []pgsource.Collection{{Name: "t", Table: "t", Indexes: tc.indexes}}, tc.schema)
			r.Pub.Incremental = true
			_, err := r.Pub.Publish(context.Background(), snapshot.PublishOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Publish = %v; want an error saying %q", err, tc.want)
			}
			if _, err := r.Store.ReadPointer(context.Background(), "ds"); err == nil {
				t.Error("a version was published")
			}
		})
	}
}

// lossyStore is a store whose writers lose the acknowledgement of an index's last
// cell (a base's last block, a delta's last entry or tombstone), or with chunks of
// the last chunk of a base's directory: as if the process died, or storage failed,
// between a layer's documents and its index entries.
type lossyStore struct {
	layer.Store
	chunks bool
}

func (s lossyStore) NewWriter(ctx context.Context, dataset string, v snapshot.Version) snapshot.DocumentWriter {
	return &lossyWriter{DocumentWriter: s.Store.NewWriter(ctx, dataset, v), chunks: s.chunks}
}

type lossyWriter struct {
	snapshot.DocumentWriter
	chunks bool
}

func (w *lossyWriter) Close(ctx context.Context) (map[string]int64, error) {
	n, err := w.DocumentWriter.Close(ctx)
	if !w.chunks {
		loseOne(n)
	}
	return n, err
}

func (w *lossyWriter) ChunksWritten() map[string]int64 {
	n := w.DocumentWriter.ChunksWritten()
	if w.chunks {
		loseOne(n)
	}
	return n
}

// loseOne takes one acknowledgement from each index's count.
func loseOne(n map[string]int64) {
	for c, k := range n {
		if strings.Contains(c, "/") && k > 0 {
			n[c] = k - 1
		}
	}
}

// A layer whose index cells were not all acknowledged is never sealed nor
// published, for a base as for a delta: the pointer stays where it was.
func TestAPartialIndexIsNeverPublished(t *testing.T) {
	r := rig.New(t, []pgsource.Collection{{Name: "t", Table: "t", Indexes: []pgsource.Columns{{"n"}}}},
		`CREATE TABLE t (id int PRIMARY KEY, n int)`, `INSERT INTO t SELECT g, g FROM generate_series(1, 100) g`)
	r.Pub.Incremental = true
	ctx := context.Background()
	for _, step := range []string{"base directory", "base", "delta"} {
		lossy := withWriter(r.Pub, r.Writer, func(w *layer.Writer) { w.Store = lossyStore{Store: r.Store, chunks: step == "base directory"} })
		if step == "delta" {
			r.Publish(t, r.Pub)
			r.Exec(t, `UPDATE t SET n = n + 1000 WHERE id <= 20`)
		}
		before, _ := r.Store.ReadPointer(ctx, "ds")
		_, err := lossy.Publish(ctx, snapshot.PublishOptions{})
		want := map[string]string{"base directory": "index n: wrote 1 of 1 cells (100 entries, 0 tombstones, 1 blocks) and 0 of 1 directory chunks",
			"base": "index n: wrote 0 of 1 cells", "delta": "index n: wrote 39 of 40 cells"}[step]
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: Publish with index cells lost = %v; want an error naming the index", step, err)
		}
		if after, _ := r.Store.ReadPointer(ctx, "ds"); after.Version != before.Version {
			t.Fatalf("%s: the pointer moved to %s", step, after.Version)
		}
	}
}

// A pinned version's refresh rewrites its indexes' cells with its documents': the
// base's blocks and the delta's entries and tombstones, so TTL collects neither.
func TestPinnedRefreshCoversTheIndexes(t *testing.T) {
	r := rig.New(t, []pgsource.Collection{{Name: "t", Table: "t", Indexes: []pgsource.Columns{{"n"}}}},
		`CREATE TABLE t (id int PRIMARY KEY, n int)`, `INSERT INTO t SELECT g, g FROM generate_series(1, 600) g`)
	r.Pub.Incremental = true
	ctx := context.Background()
	tk := r.Ticker(t, "admin")
	for i, stmts := range [][]string{nil, {`UPDATE t SET n = -n WHERE id <= 5`}, {`UPDATE t SET n = 0 WHERE id = 600`}} {
		r.Exec(t, stmts...)
		if res, err := tk.Tick(ctx, int64(i+1), snapshot.PublishOptions{}); err != nil || res.Publish.NoOp {
			t.Fatalf("tick %d: %+v, %v", i, res, err)
		}
	}
	res, _ := pinPreviousAndRefresh(t, r, tk)
	// The base's 600 documents and 3 blocks of entries; the delta's 5 documents, and 5
	// tombstones and 5 entries of the index.
	if want := int64(600 + 3 + 5 + 10); res.Refreshed != want {
		t.Errorf("refreshed %d rows; want %d (the index's cells with the documents)", res.Refreshed, want)
	}
}

// A full copy read by several readers in parallel packs each index once: the parts'
// indexers share their packers, and the blocks and the directory written hold every
// document's entry exactly once, read through the directory as by a whole scan.
func TestFullCopyInPartsPacksEachIndexOnce(t *testing.T) {
	r := rig.New(t, []pgsource.Collection{{Name: "t", Table: "t", Indexes: []pgsource.Columns{{"n"}, {"s", "id"}}}},
		`CREATE TABLE t (id int PRIMARY KEY, n int, s text)`,
		`INSERT INTO t SELECT g, g % 13, CASE WHEN g % 4 = 0 THEN NULL ELSE md5(g::text) END FROM generate_series(1, 1500) g`)
	src := r.Pub.Source.(*pgsource.Source)
	src.Readers, src.PartitionMinRows = 4, 1
	m := r.Publish(t, r.Twin())
	if m.Format == snapshot.FormatLayered || m.Rows() != 1500 {
		t.Fatalf("the twin wrote %+v; want a full copy of 1,500 rows", m.Collections["t"])
	}
	checkIndexes(t, r.Store, m, "t", 2)
	for _, d := range m.Collections["t"].Indexes {
		page, more, err := r.Store.ScanEntries(context.Background(), snapshot.ChainRef{Dataset: m.Dataset, Chain: m.Chain("t"), Collection: index.Collection("t", d.Name)}, snapshot.Span{Inclusive: true}, 10_000)
		if err != nil || more || len(page) != 1500 {
			t.Errorf("index %s through its directory: %d entries, more %v, %v; want 1,500", d.Name, len(page), more, err)
		}
	}
}
