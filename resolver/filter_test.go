package resolver

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/snapshot"
)

// entryStore serves the entries of one index of collection c from a sorted list,
// counting the scans; documents are countingStore's.
type entryStore struct {
	countingStore
	entries []string // entry ids, sorted
	scans   atomic.Int64
}

func (s *entryStore) ScanEntries(_ context.Context, _ snapshot.ChainRef, sp snapshot.Span, limit int) ([]snapshot.Document, bool, error) {
	s.scans.Add(1)
	var out []snapshot.Document
	for _, e := range s.entries {
		if (e > sp.From || sp.Inclusive && e == sp.From) && (sp.To == "" || e < sp.To) {
			if len(out) == limit {
				return out, true, nil
			}
			out = append(out, snapshot.Document{ID: e, Body: index.EntryBody})
		}
	}
	return out, false, nil
}

// A filter's pages list the ids of the entries in its ranges, in entry order, each
// page continuing after the last; a page read again is answered from the filter
// cache without a scan; an index the version does not hold is refused.
func TestFilterPagesAndCachesThem(t *testing.T) {
	def := index.NewDef([]string{"n"}, []index.Type{index.TypeNumber})
	st := &entryStore{}
	var ids []string
	for i, n := range []string{"1", "2", "2", "3", "5"} {
		k, err := index.Key(def, []byte(`{"n":`+n+`}`))
		if err != nil {
			t.Fatal(err)
		}
		id := string(rune('a' + i))
		st.entries = append(st.entries, index.EntryID(k, id))
		ids = append(ids, id)
	}
	slices.Sort(st.entries)
	r := mustNew(t, "ds", st, Config{}, nil)
	view := snapshot.View{Version: "v1", Manifest: snapshot.Manifest{Collections: map[string]snapshot.CollectionStats{
		"c": {Indexes: []snapshot.IndexDef{{Name: "n", Fields: []string{"n"}, Types: []string{"int4"}}}}}}}
	scan, err := index.Plan([]index.Def{def}, []index.Cond{{Field: "n", Op: index.OpGte, Values: []string{"2"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var got []string
	after := ""
	for range 5 {
		page, err := r.Filter(ctx, view, FilterQuery{Collection: "c", Scan: scan, After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page.Docs {
			got = append(got, d.ID)
		}
		if after = page.Next; after == "" {
			break
		}
	}
	if want := ids[1:]; !slices.Equal(got, want) {
		t.Fatalf("filter n >= 2 listed %v; want %v", got, want)
	}
	scans := st.scans.Load()
	if _, err := r.Filter(ctx, view, FilterQuery{Collection: "c", Scan: scan, Limit: 2}); err != nil {
		t.Fatal(err)
	}
	if st.scans.Load() != scans || r.FilterHits() != 1 {
		t.Errorf("the first page again scanned %d times, %d filter hits; want none and 1", st.scans.Load()-scans, r.FilterHits())
	}
	other := scan
	other.Index.Name = "m"
	if _, err := r.Filter(ctx, view, FilterQuery{Collection: "c", Scan: other, Limit: 2}); !errors.Is(err, snapshot.ErrInvalid) {
		t.Errorf("a filter on an index the version lacks = %v; want ErrInvalid", err)
	}
	if _, err := r.Filter(ctx, view, FilterQuery{Collection: "nope", Scan: scan, Limit: 2}); !errors.Is(err, snapshot.ErrNotFound) {
		t.Errorf("a filter on a collection the version lacks = %v; want ErrNotFound", err)
	}
}
