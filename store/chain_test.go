package store_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/snapflip/snapflip/snapshot"
)

// Reads through a chain of hand-written layers answer what a model of newest-wins
// with tombstones answers: GET, batch GET (one RowList), every page at several limits
// (pages crossing long runs of tombstones and shadowed rows), and whole scans.
func TestChainReadsMatchAModel(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 8))
	model := map[string]string{}
	var chain []snapshot.Version // newest first
	id := func(i int) string { return fmt.Sprintf("id-%04d", i) }
	for layer := range 4 {
		v := version(t)
		w := st.NewWriter(ctx, "ds", v)
		for i := range 1500 {
			var body string
			switch {
			case layer == 0 && r.IntN(2) == 0:
				body = fmt.Sprintf(`{"i":%d,"layer":0}`, i)
			case layer > 0 && i >= 200 && i < 1400 && model[id(i)] != "":
				body = "" // a long run of tombstones in the middle
				if layer == 2 {
					continue
				}
			case layer > 0 && r.IntN(10) == 0:
				body = fmt.Sprintf(`{"i":%d,"layer":%d}`, i, layer)
			default:
				continue
			}
			if err := w.Write(ctx, "c", snapshot.Document{ID: id(i), Body: []byte(body)}); err != nil {
				t.Fatal(err)
			}
			if body == "" {
				delete(model, id(i))
			} else {
				model[id(i)] = body
			}
		}
		if _, err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		chain = append([]snapshot.Version{v}, chain...)
	}
	ids := slices.Sorted(maps.Keys(model))
	if len(ids) < 50 {
		t.Fatalf("the model holds only %d ids", len(ids))
	}

	for i := range 1500 {
		want, ok := model[id(i)]
		got, err := st.GetDocument(ctx, snapshot.ChainRef{Dataset: "ds", Chain: chain, Collection: "c"}, id(i))
		if ok != (err == nil) || (ok && string(got) != want) {
			t.Fatalf("GetDocument(%s) = %s, %v; want %q (present %v)", id(i), got, err, want, ok)
		}
	}
	var all []string
	for i := range 1500 {
		all = append(all, id(i))
	}
	got, err := st.GetDocuments(ctx, snapshot.ChainRef{Dataset: "ds", Chain: chain, Collection: "c"}, all)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(model) {
		t.Fatalf("GetDocuments found %d ids, the model has %d", len(got), len(model))
	}
	for k, v := range got {
		if model[k] != string(v) {
			t.Fatalf("GetDocuments[%s] = %s; want %s", k, v, model[k])
		}
	}
	for _, limit := range []int{1, 7, 100, 5000} {
		var listed []string
		after := ""
		for pages := 0; ; pages++ {
			docs, more, err := st.ScanPage(ctx, snapshot.ChainRef{Dataset: "ds", Chain: chain, Collection: "c"}, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(docs) > limit || (more && len(docs) != limit) {
				t.Fatalf("limit %d: a page of %d, more %v", limit, len(docs), more)
			}
			for _, d := range docs {
				if model[d.ID] != string(d.Body) {
					t.Fatalf("limit %d: page has %s = %s; want %q", limit, d.ID, d.Body, model[d.ID])
				}
				listed = append(listed, d.ID)
			}
			if !more {
				break
			}
			after = docs[len(docs)-1].ID
		}
		if !slices.Equal(listed, ids) {
			t.Fatalf("limit %d: listed %d ids, want %d", limit, len(listed), len(ids))
		}
	}
	// Spans: every page of ids in [From, To) (or (From, To)) at several limits lists
	// exactly the model's ids there; bounds fall on ids, between them, and outside.
	for range 40 {
		sp := snapshot.Span{From: id(r.IntN(1600) - 50), Inclusive: r.IntN(2) == 0, To: id(r.IntN(1600))}
		if r.IntN(4) == 0 {
			sp.To = "" // unbounded
		}
		if r.IntN(5) == 0 {
			sp.From += "\x00$#" // between two ids
		}
		var want []string
		for _, k := range ids {
			if (k > sp.From || sp.Inclusive && k == sp.From) && (sp.To == "" || k < sp.To) {
				want = append(want, k)
			}
		}
		limit := 1 + r.IntN(300)
		var listed []string
		for next := sp; ; {
			docs, more, err := st.ScanSpan(ctx, snapshot.ChainRef{Dataset: "ds", Chain: chain, Collection: "c"}, next, limit)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range docs {
				listed = append(listed, d.ID)
			}
			if !more {
				break
			}
			next = snapshot.Span{From: docs[len(docs)-1].ID, To: sp.To}
		}
		if !slices.Equal(listed, want) {
			t.Fatalf("span %+v, limit %d: listed %d ids, want %d", sp, limit, len(listed), len(want))
		}
	}
	var scanned []string
	err = st.ScanDocuments(ctx, snapshot.ChainRef{Dataset: "ds", Chain: chain, Collection: "c"}, func(d snapshot.Document) bool {
		if model[d.ID] != string(d.Body) {
			t.Errorf("scan: %s = %s; want %s", d.ID, d.Body, model[d.ID])
		}
		scanned = append(scanned, d.ID)
		return true
	})
	if err != nil || !slices.Equal(scanned, ids) {
		t.Fatalf("ScanDocuments: %d ids, %v; want %d", len(scanned), err, len(ids))
	}
	// A one-layer chain is listed by one direct read; a layer that holds tombstones is
	// still listed without them.
	docs, _, err := st.ScanPage(ctx, snapshot.ChainRef{Dataset: "ds", Chain: chain[:1], Collection: "c"}, "", 5000)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		if len(d.Body) == 0 {
			t.Fatalf("a one-layer page lists the tombstone of %s", d.ID)
		}
	}
	// Only the layers hold rows: a chain without the newest layer reads the older state.
	if _, err := st.GetDocuments(ctx, snapshot.ChainRef{Dataset: "ds", Chain: chain[1:], Collection: "c"}, all); err != nil {
		t.Fatal(err)
	}
}

// A layer's fingerprint chunks are read back in order, a recorded live count beside
// them is not a chunk, and refreshing a chain rewrites documents, tombstones, chunks
// and the record alike.
func TestRunChunksAndRefresh(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	base, delta := version(t), version(t)
	for _, v := range []snapshot.Version{base, delta} {
		w := st.NewWriter(ctx, "ds", v)
		body := []byte(`{"x":1}`)
		if v == delta {
			body = []byte{}
		}
		if err := w.Write(ctx, "c", snapshot.Document{ID: "a", Body: body}); err != nil {
			t.Fatal(err)
		}
		for n := range int64(12) {
			if err := w.WriteChunk(ctx, "c", n, []byte{byte(n)}); err != nil {
				t.Fatal(err)
			}
		}
		if v == delta {
			if err := w.WriteLive(ctx, "c", 7); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if got := w.ChunksWritten()["c"]; got != 12 {
			t.Fatalf("ChunksWritten = %d; want 12", got)
		}
	}
	var chunks []byte
	if err := st.ScanRun(ctx, "ds", delta, "c", func(c []byte) bool { chunks = append(chunks, c...); return true }); err != nil {
		t.Fatal(err)
	}
	if want := []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}; !slices.Equal(chunks, want) {
		t.Fatalf("chunks read back as %v; want %v", chunks, want)
	}
	chain := []snapshot.Version{delta, base}
	n, err := st.RefreshVersion(ctx, "ds", map[string][]snapshot.Version{"c": chain})
	if err != nil || n != 2 {
		t.Fatalf("RefreshVersion = %d, %v; want 2 rows (a document and a tombstone)", n, err)
	}
	if _, err := st.GetDocument(ctx, snapshot.ChainRef{Dataset: "ds", Chain: chain, Collection: "c"}, "a"); err == nil {
		t.Error("the tombstone did not survive the refresh: a deleted id is served")
	}
	if got, err := st.GetDocument(ctx, snapshot.ChainRef{Dataset: "ds", Chain: chain[1:], Collection: "c"}, "a"); err != nil || string(got) != `{"x":1}` {
		t.Errorf("the base after refresh: %s, %v", got, err)
	}
	for _, tc := range []struct {
		v    snapshot.Version
		n    int64
		want bool
	}{{delta, 7, true}, {base, 0, false}} {
		if n, ok, err := st.RecordedLive(ctx, "ds", tc.v, "c"); err != nil || ok != tc.want || n != tc.n {
			t.Errorf("after refresh, the live count recorded at %s: %d, %v, %v; want %d, %v", tc.v, n, ok, err, tc.n, tc.want)
		}
	}
}

// Random chains (1 to 5 layers, awkward ids written into several layers, tombstones
// in any layer, the oldest too) read as the model says: newest layer wins, a tombstone
// hides the id. Whole scans, and listings page by page at random limits.
func TestChainReadsMatchAModelOverRandomChains(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(13, 14))
	stems := []string{"a", "a#", "a$", "a#b", "b", "ü", "x\x00", "%", "#", "$"}
	for trial := range 12 {
		model := map[string]string{}
		var chain []snapshot.Version // newest first
		for layer := range 1 + r.IntN(5) {
			v := version(t)
			w := st.NewWriter(ctx, "ds", v)
			written := map[string]bool{}
			for range r.IntN(80) {
				id := fmt.Sprintf("%s%d", stems[r.IntN(len(stems))], r.IntN(12))
				if written[id] {
					continue
				}
				written[id] = true
				body := fmt.Sprintf(`{"id":%q,"layer":%d}`, id, layer)
				if r.IntN(3) == 0 {
					body = ""
				}
				if err := w.Write(ctx, "c", snapshot.Document{ID: id, Body: []byte(body)}); err != nil {
					t.Fatal(err)
				}
				if body == "" {
					delete(model, id)
				} else {
					model[id] = body
				}
			}
			if _, err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			chain = append([]snapshot.Version{v}, chain...)
		}
		var want []snapshot.Document
		for _, id := range slices.Sorted(maps.Keys(model)) {
			want = append(want, snapshot.Document{ID: id, Body: []byte(model[id])})
		}

		var scanned []snapshot.Document
		if err := st.ScanDocuments(ctx, snapshot.ChainRef{Dataset: "ds", Chain: chain, Collection: "c"}, func(d snapshot.Document) bool {
			scanned = append(scanned, d)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, scanned); diff != "" {
			t.Fatalf("trial %d (%d layers): ScanDocuments differs from the model (-want +got):\n%s", trial, len(chain), diff)
		}
		limit := 1 + r.IntN(10)
		var listed []snapshot.Document
		for after := ""; ; {
			docs, more, err := st.ScanPage(ctx, snapshot.ChainRef{Dataset: "ds", Chain: chain, Collection: "c"}, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			listed = append(listed, docs...)
			if !more {
				break
			}
			after = docs[len(docs)-1].ID
		}
		if diff := cmp.Diff(want, listed); diff != "" {
			t.Fatalf("trial %d (%d layers): pages of %d differ from the model (-want +got):\n%s", trial, len(chain), limit, diff)
		}
	}
}

// A chain's scan whose context ends part-way fails: it never returns nil with only
// part of the collection, whichever layer was blocked at the time.
func TestChainScanCancelledFails(t *testing.T) {
	st := newStore(t)
	bg := context.Background()
	var chain []snapshot.Version // newest first
	for layer := range 3 {
		v := version(t)
		w := st.NewWriter(bg, "ds", v)
		for i := layer; i < 3000; i += 3 {
			doc := snapshot.Document{ID: fmt.Sprintf("id-%05d", i), Body: []byte(fmt.Sprintf(`{"i":%d}`, i))}
			if err := w.Write(bg, "c", doc); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Close(bg); err != nil {
			t.Fatal(err)
		}
		chain = append([]snapshot.Version{v}, chain...)
	}
	for _, tc := range []struct {
		chain []snapshot.Version
		total int
	}{{chain, 3000}, {chain[2:], 1000}} {
		for _, after := range []int{1, 100, 999} {
			ctx, cancel := context.WithCancel(bg)
			n := 0
			err := st.ScanDocuments(ctx, snapshot.ChainRef{Dataset: "ds", Chain: tc.chain, Collection: "c"}, func(snapshot.Document) bool {
				if n++; n == after {
					cancel()
				}
				return true
			})
			cancel()
			if n < tc.total && err == nil {
				t.Errorf("%d layers, cancelled after %d documents: %d of %d read, and no error",
					len(tc.chain), after, n, tc.total)
			}
		}
	}
}
