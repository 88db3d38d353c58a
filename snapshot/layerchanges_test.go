package snapshot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// changesStore is a pure-logic ReadStore of hand-built manifests and runs that counts
// the run chunks read. The real store is tested end to end (e2e.TestChangesAreTheDiff).
type changesStore struct {
	*countingStore
	manifests map[Version]Manifest
	runs      memRuns
	chunks    atomic.Int64
}

func (s *changesStore) ReadManifest(_ context.Context, _ string, v Version) (Manifest, error) {
	m, ok := s.manifests[v]
	if !ok {
		return Manifest{}, fmt.Errorf("manifest %s: %w", v, ErrNotFound)
	}
	return m, nil
}

func (s *changesStore) ScanRun(ctx context.Context, dataset string, layer Version, collection string, fn func([]byte) bool) error {
	return s.runs.ScanRun(ctx, dataset, layer, collection, func(c []byte) bool { s.chunks.Add(1); return fn(c) })
}

func (s *changesStore) ScanRunFrom(ctx context.Context, dataset string, layer Version, collection string, from int64, fn func([]byte) bool) error {
	return s.runs.ScanRunFrom(ctx, dataset, layer, collection, from, func(c []byte) bool { s.chunks.Add(1); return fn(c) })
}

// layeredOf returns a published layered manifest of v over parent holding collection
// c with the layers given, newest first.
func layeredOf(v, parent Version, layers ...LayerRef) Manifest {
	return Manifest{Version: v, Parent: parent, State: StatePublished, Format: FormatLayered,
		Collections: map[string]CollectionStats{"c": {Layers: layers}}}
}

// TestChangedIDsKinds: a version that wrote a collection whole, as a base or a full
// copy, or wrote nothing, says so and lists nothing, without reading a run; a
// collection the version does not hold is ErrNotFound; a merged delta whose parent is
// gone is ErrGone, its changes no longer to be told from what it merged.
func TestChangedIDsKinds(t *testing.T) {
	base := LayerRef{Version: "base", Kind: LayerBase, Docs: 3}
	delta := LayerRef{Version: "delta", Kind: LayerDelta, Docs: 1}
	st := &changesStore{countingStore: &countingStore{}, runs: memRuns{}, manifests: map[Version]Manifest{
		"base":  layeredOf("base", "", base),
		"delta": layeredOf("delta", "base", delta, base),
		"same":  layeredOf("same", "delta", delta, base),
		"full":  {Version: "full", State: StatePublished, Format: FormatFull, Parent: "delta", Collections: map[string]CollectionStats{"c": {Rows: 3}}},
		"merge": layeredOf("merge", "expired", LayerRef{Version: "merge", Kind: LayerDelta, Docs: 1, Merged: 1}, base),
	}}
	st.runs["delta"] = encodeRun(t, []RunEntry{{ID: "a", Len: 1}}, 0)
	st.runs["merge"] = encodeRun(t, []RunEntry{{ID: "a", Len: 1}}, 0)
	r := NewResolver("ds", st, ResolverConfig{}, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		v      Version
		want   Changes
		chunks int64
	}{
		{"base", Changes{Kind: ChangesBase}, 0},
		{"full", Changes{Kind: ChangesFull, Parent: "delta"}, 0},
		{"same", Changes{Kind: ChangesUnchanged, Parent: "delta"}, 0},
		{"delta", Changes{Kind: ChangesDelta, Parent: "base", IDs: []Change{{ID: "a"}}}, 1},
	} {
		st.chunks.Store(0)
		view, err := r.View(ctx, tc.v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.ChangedIDs(ctx, view, "c", "", 10)
		if err != nil {
			t.Fatalf("%s: %v", tc.v, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: changes (-want +got):\n%s", tc.v, diff)
		}
		if n := st.chunks.Load(); n != tc.chunks {
			t.Errorf("%s: %d run chunks read; want %d", tc.v, n, tc.chunks)
		}
		if _, err := r.ChangedIDs(ctx, view, "nope", "", 10); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: an unknown collection: %v; want ErrNotFound", tc.v, err)
		}
	}
	view, err := r.View(ctx, "merge")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ChangedIDs(ctx, view, "c", "", 10); !errors.Is(err, ErrGone) {
		t.Errorf("a merged delta whose parent expired: %v; want ErrGone", err)
	}
}

// TestChangedIDsPages: a plain delta's changes, paged by any limit from any cursor,
// are its run's entries after the cursor, in id order, More set on every page but the
// last; the run is read from the store once, however many pages.
func TestChangedIDsPages(t *testing.T) {
	var entries []RunEntry
	var want []Change
	for i := range 50 {
		e := RunEntry{ID: fmt.Sprintf("id%03d", i), Deleted: i%7 == 0, Len: int64(i + 1)}
		entries = append(entries, e)
		want = append(want, Change{ID: e.ID, Deleted: e.Deleted})
	}
	delta := LayerRef{Version: "delta", Kind: LayerDelta, Docs: 43, Tombstones: 7}
	st := &changesStore{countingStore: &countingStore{}, runs: memRuns{"delta": encodeRun(t, entries, 64)},
		manifests: map[Version]Manifest{"delta": layeredOf("delta", "base", delta, LayerRef{Version: "base", Kind: LayerBase})}}
	if len(st.runs["delta"]) < 5 {
		t.Fatalf("%d chunks; want several", len(st.runs["delta"]))
	}
	r := NewResolver("ds", st, ResolverConfig{}, nil)
	ctx := context.Background()
	view, err := r.View(ctx, "delta")
	if err != nil {
		t.Fatal(err)
	}
	st.chunks.Store(0)
	for _, limit := range []int{1, 2, 7, 49, 50, 51, 1000} {
		var got []Change
		after := ""
		for pages := 0; ; pages++ {
			page, err := r.ChangedIDs(ctx, view, "c", after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.IDs) > limit || (page.More && len(page.IDs) < limit) || pages > len(want) {
				t.Fatalf("limit %d: page %d of %d ids, more %v", limit, pages, len(page.IDs), page.More)
			}
			got = append(got, page.IDs...)
			if !page.More {
				break
			}
			after = page.IDs[len(page.IDs)-1].ID
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("limit %d: changes (-want +got):\n%s", limit, diff)
		}
	}
	// The run is read once, not again from its start for every page.
	if n, chunks := st.chunks.Load(), len(st.runs["delta"]); n != int64(chunks) {
		t.Errorf("paging the changes 7 times over read %d run chunks; want the run's %d, once", n, chunks)
	}
	// From a cursor between ids, or past the last.
	for _, tc := range []struct {
		after string
		want  []Change
	}{
		{"id0245", want[25:28]},
		{"id049", nil},
		{"zz", nil},
	} {
		page, err := r.ChangedIDs(ctx, view, "c", tc.after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(tc.want, page.IDs) {
			t.Errorf("after %q: %v; want %v", tc.after, page.IDs, tc.want)
		}
	}
}

// TestChangedIDsCorruptRun: a run that does not decode fails the changes as the
// store's fault, never as ErrInvalid, which the API answers as the request's (400).
func TestChangedIDsCorruptRun(t *testing.T) {
	delta := LayerRef{Version: "delta", Kind: LayerDelta, Docs: 1}
	st := &changesStore{countingStore: &countingStore{}, runs: memRuns{"delta": {{runChunkVersion, 1, 0, 9, 'a'}}},
		manifests: map[Version]Manifest{"delta": layeredOf("delta", "base", delta, LayerRef{Version: "base", Kind: LayerBase})}}
	r := NewResolver("ds", st, ResolverConfig{}, nil)
	view, err := r.View(context.Background(), "delta")
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.ChangedIDs(context.Background(), view, "c", "", 10)
	if err == nil || errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrGone) {
		t.Errorf("a corrupt run: %v; want an error of the store's", err)
	}
}

// A run over the run cache's budget is streamed for each page, from the chunk the
// cache last saw begin at or before the page's cursor: paging through it reads each
// chunk a few times at most, not the run up to the cursor again for every page; a
// merged delta's merged run too. The changes are the same as when the run is cached.
func TestChangedIDsPagesSeek(t *testing.T) {
	var entries, merged []RunEntry
	want := map[Version][]Change{}
	for i := range 600 {
		e := RunEntry{ID: fmt.Sprintf("id%04d", i), Deleted: i%7 == 0, Len: int64(i + 1)}
		entries = append(entries, e)
		want["delta"] = append(want["delta"], Change{ID: e.ID, Deleted: e.Deleted})
		if i%3 == 0 { // in the merge: the parent's delta's, copied unchanged
			merged = append(merged, e)
			continue
		}
		want["merge"] = append(want["merge"], Change{ID: e.ID, Deleted: e.Deleted})
	}
	for i := range 50 { // tombstones the parent's delta names, with no entry in the merge
		merged = append(merged, RunEntry{ID: fmt.Sprintf("zz%04d", i), Deleted: true})
	}
	plain := LayerRef{Version: "delta", Kind: LayerDelta, Docs: 514, Tombstones: 86}
	merge := LayerRef{Version: "merge", Kind: LayerDelta, Docs: 514, Tombstones: 86, Merged: 1}
	old := LayerRef{Version: "old", Kind: LayerDelta, Docs: 171, Tombstones: 79}
	base := LayerRef{Version: "base", Kind: LayerBase}
	st := &changesStore{countingStore: &countingStore{},
		runs: memRuns{"delta": encodeRun(t, entries, 64), "merge": encodeRun(t, entries, 64), "old": encodeRun(t, merged, 64)},
		manifests: map[Version]Manifest{
			"delta":  layeredOf("delta", "base", plain, base),
			"merge":  layeredOf("merge", "parent", merge, base),
			"parent": layeredOf("parent", "base", old, base),
		}}
	chunks := len(st.runs["delta"])
	if chunks < 50 {
		t.Fatalf("%d chunks; want many", chunks)
	}
	ctx := context.Background()
	for _, v := range []Version{"delta", "merge"} {
		r := NewResolver("ds", st, ResolverConfig{}, nil)
		r.runs = NewRunCache(st, 16) // every run over the budget: streamed
		view, err := r.View(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		st.chunks.Store(0)
		var got []Change
		after, pages := "", 0
		for ; ; pages++ {
			page, err := r.ChangedIDs(ctx, view, "c", after, 10)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, page.IDs...)
			if !page.More {
				break
			}
			after = page.IDs[len(page.IDs)-1].ID
		}
		if diff := cmp.Diff(want[v], got); diff != "" {
			t.Errorf("%s: changes (-want +got):\n%s", v, diff)
		}
		// Without seeking, page k reads the run up to its cursor: about pages²/2 × 10
		// entries' chunks in all.
		runs := 1
		if v == "merge" {
			runs = 2
		}
		t.Logf("%s: %d pages read %d run chunks", v, pages, st.chunks.Load())
		if n := st.chunks.Load(); n > int64(runs*(chunks+pages*6)) {
			t.Errorf("%s: %d pages read %d run chunks; want at most %d (the runs' %d chunks and a few a page)", v, pages, n, runs*(chunks+pages*6), chunks)
		}
	}
}
