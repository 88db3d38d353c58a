package layer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/snapflip/snapflip/resolver"
	"github.com/snapflip/snapflip/snapshot"

	"github.com/google/go-cmp/cmp"
)

// changesStore is a pure-logic ReadStore of hand-built manifests and runs that counts
// the run chunks read. The real store is tested end to end (e2e.TestChangesAreTheDiff).
type changesStore struct {
	manifests map[snapshot.Version]snapshot.Manifest
	runs      memRuns
	chunks    atomic.Int64
}

func (s *changesStore) ReadPointer(context.Context, string) (snapshot.Pointer, error) {
	return snapshot.Pointer{}, snapshot.ErrNoVersion
}

func (s *changesStore) GetDocument(context.Context, snapshot.ChainRef, string) ([]byte, error) {
	return []byte(`{}`), nil
}

func (s *changesStore) GetDocuments(_ context.Context, _ snapshot.ChainRef, ids []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, id := range ids {
		out[id] = []byte(`{}`)
	}
	return out, nil
}

func (s *changesStore) ScanPage(context.Context, snapshot.ChainRef, string, int) ([]snapshot.Document, bool, error) {
	return nil, false, nil
}

func (s *changesStore) ScanEntries(context.Context, snapshot.ChainRef, snapshot.Span, int) ([]snapshot.Document, bool, error) {
	return nil, false, nil
}

func (s *changesStore) RecentManifests(context.Context, string, snapshot.Version, int) ([]snapshot.Manifest, error) {
	return nil, nil
}

func (s *changesStore) ReadManifest(_ context.Context, _ string, v snapshot.Version) (snapshot.Manifest, error) {
	m, ok := s.manifests[v]
	if !ok {
		return snapshot.Manifest{}, fmt.Errorf("manifest %s: %w", v, snapshot.ErrNotFound)
	}
	return m, nil
}

func (s *changesStore) ScanRun(ctx context.Context, dataset string, layer snapshot.Version, collection string, fn func([]byte) bool) error {
	return s.runs.ScanRun(ctx, dataset, layer, collection, func(c []byte) bool { s.chunks.Add(1); return fn(c) })
}

func (s *changesStore) ScanRunFrom(ctx context.Context, ref snapshot.RunRef, from int64, fn func([]byte) bool) error {
	return s.runs.ScanRunFrom(ctx, ref, from, func(c []byte) bool { s.chunks.Add(1); return fn(c) })
}

// layeredOf returns a published layered manifest of v over parent holding collection
// c with the layers given, newest first.
func layeredOf(v, parent snapshot.Version, layers ...snapshot.LayerRef) snapshot.Manifest {
	return snapshot.Manifest{Version: v, Parent: parent, State: snapshot.StatePublished, Format: snapshot.FormatLayered,
		Collections: map[string]snapshot.CollectionStats{"c": {Layers: layers}}}
}

// TestChangedIDsKinds: a version that wrote a collection whole, as a base or a full
// copy, or wrote nothing, says so and lists nothing, without reading a run; a
// collection the version does not hold is ErrNotFound; a merged delta whose parent is
// gone is ErrGone, its changes no longer to be told from what it merged.
func TestChangedIDsKinds(t *testing.T) {
	base := snapshot.LayerRef{Version: "base", Kind: snapshot.LayerBase, Docs: 3}
	delta := snapshot.LayerRef{Version: "delta", Kind: snapshot.LayerDelta, Docs: 1}
	st := &changesStore{runs: memRuns{}, manifests: map[snapshot.Version]snapshot.Manifest{
		"base":  layeredOf("base", "", base),
		"delta": layeredOf("delta", "base", delta, base),
		"same":  layeredOf("same", "delta", delta, base),
		"full":  {Version: "full", State: snapshot.StatePublished, Format: snapshot.FormatFull, Parent: "delta", Collections: map[string]snapshot.CollectionStats{"c": {Rows: 3}}},
		"merge": layeredOf("merge", "expired", snapshot.LayerRef{Version: "merge", Kind: snapshot.LayerDelta, Docs: 1, Merged: 1}, base),
	}}
	st.runs["delta"] = encodeRun(t, []RunEntry{{ID: "a", Len: 1}}, 0)
	st.runs["merge"] = encodeRun(t, []RunEntry{{ID: "a", Len: 1}}, 0)
	r, err := resolver.New("ds", st, resolver.Config{Layers: NewReader(st, "ds")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		v      snapshot.Version
		want   snapshot.Changes
		chunks int64
	}{
		{"base", snapshot.Changes{Kind: snapshot.ChangesBase}, 0},
		{"full", snapshot.Changes{Kind: snapshot.ChangesFull, Parent: "delta"}, 0},
		{"same", snapshot.Changes{Kind: snapshot.ChangesUnchanged, Parent: "delta"}, 0},
		{"delta", snapshot.Changes{Kind: snapshot.ChangesDelta, Parent: "base", IDs: []snapshot.Change{{ID: "a"}}}, 1},
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
		if _, err := r.ChangedIDs(ctx, view, "nope", "", 10); !errors.Is(err, snapshot.ErrNotFound) {
			t.Errorf("%s: an unknown collection: %v; want ErrNotFound", tc.v, err)
		}
	}
	view, err := r.View(ctx, "merge")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ChangedIDs(ctx, view, "c", "", 10); !errors.Is(err, snapshot.ErrGone) {
		t.Errorf("a merged delta whose parent expired: %v; want ErrGone", err)
	}
}

// TestChangedIDsPages: a plain delta's changes, paged by any limit from any cursor,
// are its run's entries after the cursor, in id order, More set on every page but the
// last; the run is read from the store once, however many pages.
func TestChangedIDsPages(t *testing.T) {
	var entries []RunEntry
	var want []snapshot.Change
	for i := range 50 {
		e := RunEntry{ID: fmt.Sprintf("id%03d", i), Deleted: i%7 == 0, Len: int64(i + 1)}
		entries = append(entries, e)
		want = append(want, snapshot.Change{ID: e.ID, Deleted: e.Deleted})
	}
	delta := snapshot.LayerRef{Version: "delta", Kind: snapshot.LayerDelta, Docs: 43, Tombstones: 7}
	st := &changesStore{runs: memRuns{"delta": encodeRun(t, entries, 64)},
		manifests: map[snapshot.Version]snapshot.Manifest{"delta": layeredOf("delta", "base", delta, snapshot.LayerRef{Version: "base", Kind: snapshot.LayerBase})}}
	if len(st.runs["delta"]) < 5 {
		t.Fatalf("%d chunks; want several", len(st.runs["delta"]))
	}
	r, err := resolver.New("ds", st, resolver.Config{Layers: NewReader(st, "ds")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	view, err := r.View(ctx, "delta")
	if err != nil {
		t.Fatal(err)
	}
	st.chunks.Store(0)
	for _, limit := range []int{1, 2, 7, 49, 50, 51, 1000} {
		var got []snapshot.Change
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
		want  []snapshot.Change
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
	delta := snapshot.LayerRef{Version: "delta", Kind: snapshot.LayerDelta, Docs: 1}
	st := &changesStore{runs: memRuns{"delta": {{runChunkVersion, 1, 0, 9, 'a'}}},
		manifests: map[snapshot.Version]snapshot.Manifest{"delta": layeredOf("delta", "base", delta, snapshot.LayerRef{Version: "base", Kind: snapshot.LayerBase})}}
	r, err := resolver.New("ds", st, resolver.Config{Layers: NewReader(st, "ds")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	view, err := r.View(context.Background(), "delta")
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.ChangedIDs(context.Background(), view, "c", "", 10)
	if err == nil || errors.Is(err, snapshot.ErrInvalid) || errors.Is(err, snapshot.ErrNotFound) || errors.Is(err, snapshot.ErrGone) {
		t.Errorf("a corrupt run: %v; want an error of the store's", err)
	}
}

// A run over the run cache's budget is streamed for each page, from the chunk the
// cache last saw begin at or before the page's cursor: paging through it reads each
// chunk a few times at most, not the run up to the cursor again for every page; a
// merged delta's merged run too. The changes are the same as when the run is cached.
func TestChangedIDsPagesSeek(t *testing.T) {
	var entries, merged []RunEntry
	want := map[snapshot.Version][]snapshot.Change{}
	for i := range 600 {
		e := RunEntry{ID: fmt.Sprintf("id%04d", i), Deleted: i%7 == 0, Len: int64(i + 1)}
		entries = append(entries, e)
		want["delta"] = append(want["delta"], snapshot.Change{ID: e.ID, Deleted: e.Deleted})
		if i%3 == 0 { // in the merge: the parent's delta's, copied unchanged
			merged = append(merged, e)
			continue
		}
		want["merge"] = append(want["merge"], snapshot.Change{ID: e.ID, Deleted: e.Deleted})
	}
	for i := range 50 { // tombstones the parent's delta names, with no entry in the merge
		merged = append(merged, RunEntry{ID: fmt.Sprintf("zz%04d", i), Deleted: true})
	}
	plain := snapshot.LayerRef{Version: "delta", Kind: snapshot.LayerDelta, Docs: 514, Tombstones: 86}
	merge := snapshot.LayerRef{Version: "merge", Kind: snapshot.LayerDelta, Docs: 514, Tombstones: 86, Merged: 1}
	old := snapshot.LayerRef{Version: "old", Kind: snapshot.LayerDelta, Docs: 171, Tombstones: 79}
	base := snapshot.LayerRef{Version: "base", Kind: snapshot.LayerBase}
	st := &changesStore{runs: memRuns{"delta": encodeRun(t, entries, 64), "merge": encodeRun(t, entries, 64), "old": encodeRun(t, merged, 64)},
		manifests: map[snapshot.Version]snapshot.Manifest{
			"delta":  layeredOf("delta", "base", plain, base),
			"merge":  layeredOf("merge", "parent", merge, base),
			"parent": layeredOf("parent", "base", old, base),
		}}
	chunks := len(st.runs["delta"])
	if chunks < 50 {
		t.Fatalf("%d chunks; want many", chunks)
	}
	ctx := context.Background()
	for _, v := range []snapshot.Version{"delta", "merge"} {
		lr := NewReader(st, "ds")
		lr.runs = NewRunCache(st, 16) // every run over the budget: streamed
		r, err := resolver.New("ds", st, resolver.Config{Layers: lr}, nil)
		if err != nil {
			t.Fatal(err)
		}
		view, err := r.View(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		st.chunks.Store(0)
		var got []snapshot.Change
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
