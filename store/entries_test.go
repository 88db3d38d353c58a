package store_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/snapshot"
)

// An index's entries read through a chain whose base packs them in blocks and whose
// deltas add entries and tombstones one row each answer what a model answers: every
// span (bounds on entries, between them, inside a block, past the end), every page
// at several limits, and the whole index. The blocks are found through the base's
// directory (in several chunks) or, without one, by scanning; a base of entries one
// row each reads the same.
func TestEntriesThroughPackedBlocks(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	entry := func(i int) string { return fmt.Sprintf("v%05d\x00id", i) }
	for _, layout := range []string{"directory", "blocks", "entries"} {
		model := map[string]bool{}
		var chain []snapshot.Version
		for layer := range 3 {
			v := version(t)
			w := st.NewWriter(ctx, "ds", v)
			var pk index.Packer
			var dir []byte
			var chunks int64
			block := func(key string, body []byte) {
				t.Helper()
				if err := w.Write(ctx, "c/i", snapshot.Document{ID: key, Body: slices.Clone(body)}); err != nil {
					t.Fatal(err)
				}
				if layout != "directory" {
					return
				}
				if dir = index.AppendDirectory(dir, key); len(dir) > 40 { // a chunk of two or three keys
					if err := w.WriteChunk(ctx, "c/i", chunks, slices.Clone(dir)); err != nil {
						t.Fatal(err)
					}
					dir, chunks = dir[:0], chunks+1
				}
			}
			for i := range 3000 {
				e := entry(i)
				switch {
				case layer == 0 && r.IntN(3) > 0:
					model[e] = true
					if layout == "entries" {
						if err := w.Write(ctx, "c/i", snapshot.Document{ID: e, Body: index.EntryBody}); err != nil {
							t.Fatal(err)
						}
					} else if key, body, full := pk.Add(e); full {
						block(key, body)
					}
				case layer > 0 && r.IntN(8) == 0:
					body := index.EntryBody
					if model[e] {
						body = nil // a tombstone
						delete(model, e)
					} else {
						model[e] = true
					}
					if err := w.Write(ctx, "c/i", snapshot.Document{ID: e, Body: body}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if key, body, ok := pk.Flush(); ok {
				block(key, body)
			}
			if len(dir) > 0 {
				if err := w.WriteChunk(ctx, "c/i", chunks, dir); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			chain = append([]snapshot.Version{v}, chain...)
			checkEntries(t, st, chain, slices.Sorted(maps.Keys(model)), r, fmt.Sprintf("base of %s, %d layers", layout, len(chain)))
		}
	}
}

// checkEntries checks spans and pages of an index through chain against want.
func checkEntries(t *testing.T, st interface {
	ScanEntries(context.Context, snapshot.ChainRef, snapshot.Span, int) ([]snapshot.Document, bool, error)
	ScanIndex(context.Context, snapshot.ChainRef, func(string) bool) error
}, chain []snapshot.Version, want []string, r *rand.Rand, what string) {
	t.Helper()
	ctx := context.Background()
	var scanned []string
	if err := st.ScanIndex(ctx, snapshot.ChainRef{Dataset: "ds", Chain: chain, Collection: "c/i"}, func(e string) bool { scanned = append(scanned, e); return true }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(scanned, want) {
		t.Fatalf("%s: ScanIndex listed %d entries, want %d", what, len(scanned), len(want))
	}
	for range 30 {
		bound := func() string {
			s := fmt.Sprintf("v%05d", r.IntN(3100)-50)
			switch r.IntN(3) {
			case 0:
				return s + "\x00id" // on an entry
			case 1:
				return s + "\x00" // before one
			}
			return s + "\x00iz" // after one
		}
		sp := snapshot.Span{From: bound(), Inclusive: r.IntN(2) == 0, To: bound()}
		if r.IntN(4) == 0 {
			sp.To = ""
		}
		var in []string
		for _, e := range want {
			if sp.Contains(e) {
				in = append(in, e)
			}
		}
		limit := 1 + r.IntN(400)
		var listed []string
		for next := sp; ; {
			page, more, err := st.ScanEntries(ctx, snapshot.ChainRef{Dataset: "ds", Chain: chain, Collection: "c/i"}, next, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > limit || (more && len(page) != limit) {
				t.Fatalf("%s: span %q..%q, limit %d: a page of %d, more %v", what, sp.From, sp.To, limit, len(page), more)
			}
			for _, d := range page {
				if string(d.Body) != string(index.EntryBody) {
					t.Fatalf("%s: entry %q has body %q", what, d.ID, d.Body)
				}
				listed = append(listed, d.ID)
			}
			if !more {
				break
			}
			next = sp.After(page[len(page)-1].ID)
		}
		if !slices.Equal(listed, in) {
			t.Fatalf("%s: span %q..%q, limit %d: listed %d entries, want %d", what, sp.From, sp.To, limit, len(listed), len(in))
		}
	}
}

// A packed base's pages go through its directory: a block the directory does not
// name is not read. (A whole scan, ScanIndex, reads every row of each layer.)
func TestEntriesReadThroughTheDirectory(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	v := version(t)
	w := st.NewWriter(ctx, "ds", v)
	var pk index.Packer
	var dir []byte
	var keys []string
	for i := range 3 * index.BlockEntries {
		if key, body, full := pk.Add(fmt.Sprintf("v%05d\x00id", i)); full {
			if err := w.Write(ctx, "c/i", snapshot.Document{ID: key, Body: slices.Clone(body)}); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, key)
		}
	}
	for i, k := range keys {
		if i != 1 { // the middle block left out
			dir = index.AppendDirectory(dir, k)
		}
	}
	if err := w.WriteChunk(ctx, "c/i", 0, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	page, _, err := st.ScanEntries(ctx, snapshot.ChainRef{Dataset: "ds", Chain: []snapshot.Version{v}, Collection: "c/i"}, snapshot.Span{Inclusive: true}, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(page); n != 2*index.BlockEntries {
		t.Errorf("read %d entries; want the %d of the two blocks the directory names", n, 2*index.BlockEntries)
	}
}

// An empty chain holds no entries: ScanEntries and ScanIndex say so, as ScanSpan and
// ScanDocuments do, rather than fail.
func TestEntriesOfAnEmptyChain(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	page, more, err := st.ScanEntries(ctx, snapshot.ChainRef{Dataset: "ds", Chain: nil, Collection: "c/i"}, snapshot.Span{Inclusive: true}, 10)
	if err != nil || more || len(page) != 0 {
		t.Errorf("ScanEntries over no layer = %v, %v, %v; want nothing", page, more, err)
	}
	if err := st.ScanIndex(ctx, snapshot.ChainRef{Dataset: "ds", Chain: nil, Collection: "c/i"}, func(string) bool { t.Error("an entry"); return true }); err != nil {
		t.Errorf("ScanIndex over no layer = %v", err)
	}
}
