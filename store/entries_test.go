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
// at several limits, and the whole index; a base of entries one row each (as an
// older release wrote) reads the same.
func TestEntriesThroughPackedBlocks(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	entry := func(i int) string { return fmt.Sprintf("v%05d\x00id", i) }
	for _, packed := range []bool{true, false} {
		model := map[string]bool{}
		var chain []snapshot.Version
		for layer := range 3 {
			v := version(t)
			w := st.NewWriter(ctx, "ds", v)
			var pk index.Packer
			for i := range 3000 {
				e := entry(i)
				switch {
				case layer == 0 && r.IntN(3) > 0:
					model[e] = true
					if !packed {
						if err := w.Write(ctx, "c/i", snapshot.Document{ID: e, Body: index.EntryBody}); err != nil {
							t.Fatal(err)
						}
					} else if key, body, full := pk.Add(e); full {
						if err := w.Write(ctx, "c/i", snapshot.Document{ID: key, Body: slices.Clone(body)}); err != nil {
							t.Fatal(err)
						}
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
				if err := w.Write(ctx, "c/i", snapshot.Document{ID: key, Body: slices.Clone(body)}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			chain = append([]snapshot.Version{v}, chain...)
			checkEntries(t, st, chain, slices.Sorted(maps.Keys(model)), r, fmt.Sprintf("packed %v, %d layers", packed, len(chain)))
		}
	}
}

// checkEntries checks spans and pages of an index through chain against want.
func checkEntries(t *testing.T, st interface {
	ScanEntries(context.Context, string, []snapshot.Version, string, snapshot.Span, int) ([]snapshot.Document, bool, error)
	ScanIndex(context.Context, string, []snapshot.Version, string, func(string) bool) error
}, chain []snapshot.Version, want []string, r *rand.Rand, what string) {
	t.Helper()
	ctx := context.Background()
	var scanned []string
	if err := st.ScanIndex(ctx, "ds", chain, "c/i", func(e string) bool { scanned = append(scanned, e); return true }); err != nil {
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
			page, more, err := st.ScanEntries(ctx, "ds", chain, "c/i", next, limit)
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
