package layer

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/snapflip/snapflip/snapshot"
)

// planDelta chooses a layer's plan from the parent, the config and the source's
// answers alone.
func TestPlanDelta(t *testing.T) {
	doc := func(id string) snapshot.Document { return snapshot.Document{ID: id, Body: []byte(`{}`)} }
	entry := func(id string) fromEntry { return fromEntry{RunEntry: RunEntry{ID: id, Len: 2}} }
	delta := func(n int64) snapshot.LayerRef { return snapshot.LayerRef{Kind: snapshot.LayerDelta, Docs: n} }
	base := snapshot.LayerRef{Kind: snapshot.LayerBase, Docs: 100}
	parent := snapshot.CollectionStats{Rows: 100, Layers: []snapshot.LayerRef{delta(1), base}}
	full := snapshot.CollectionStats{Rows: 100, Layers: []snapshot.LayerRef{delta(1), delta(1), base}}
	// Two changed rows, one of them new: the parent's 100 rows plus one is 101.
	changed := sourceAnswer{given: true, docs: []snapshot.Document{doc("a"), doc("b")}, total: 101,
		parent: parentMatch{entries: []fromEntry{entry("a")}, live: 100}}
	changed.named = changed.docs
	deleted := changed
	deleted.total = 100 // a row was deleted besides
	keyed := sourceAnswer{given: true, docs: []snapshot.Document{doc("a")},
		named:  []snapshot.Document{doc("a"), {ID: "c"}},
		parent: parentMatch{entries: []fromEntry{entry("a"), entry("c")}, live: 100}}
	for _, tt := range []struct {
		name          string
		in            planInput
		kind          planKind
		why           string
		merge         int
		sourceRows    int64
		changedAnswer bool
	}{
		{name: "base", in: planInput{kind: snapshot.LayerBase, why: "first version", maxLayers: 8}, kind: planBase, why: "first version"},
		{name: "same fingerprint", in: planInput{kind: snapshot.LayerDelta, sameFingerprint: true, parent: parent, keyed: keyed, maxLayers: 8},
			kind: planSameFingerprint},
		{name: "no answer", in: planInput{kind: snapshot.LayerDelta, parent: parent, maxLayers: 8}, kind: planFullJoin},
		{name: "keyed", in: planInput{kind: snapshot.LayerDelta, parent: parent, keyed: keyed, maxLayers: 8},
			kind: planKeyed, sourceRows: 98, changedAnswer: true},
		{name: "changed only", in: planInput{kind: snapshot.LayerDelta, parent: parent, changed: changed, maxLayers: 8},
			kind: planChangedOnly, sourceRows: 99, changedAnswer: true},
		{name: "changed, a row deleted", in: planInput{kind: snapshot.LayerDelta, parent: parent, changed: deleted, maxLayers: 8},
			kind: planFullJoin},
		{name: "full join merge", in: planInput{kind: snapshot.LayerDelta, parent: full, maxLayers: 3},
			kind: planFullJoin, merge: 2},
		{name: "sparse merge", in: planInput{kind: snapshot.LayerDelta, parent: full, changed: changed, maxLayers: 3},
			kind: planChangedOnly, merge: 2, sourceRows: 99, changedAnswer: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := planDelta(tt.in)
			got := planSummary{p.kind, p.why, p.merge, p.sourceRows, p.changed.given}
			want := planSummary{tt.kind, tt.why, tt.merge, tt.sourceRows, tt.changedAnswer}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("planDelta (-want +got):\n%s", diff)
			}
		})
	}
}

// planSummary is what TestPlanDelta compares of a plan.
type planSummary struct {
	Kind       planKind
	Why        string
	Merge      int
	SourceRows int64
	Changed    bool // the plan holds the source's changed rows
}

// mergeJoin pairs each source row with the parent's entry of its id, and hands on
// the parent's other entries, in id order.
func TestMergeJoin(t *testing.T) {
	var got []string
	sink := recordSink{&got}
	parent := &sliceCursor{entries: []fromEntry{{RunEntry: RunEntry{ID: "a"}}, {RunEntry: RunEntry{ID: "c"}}, {RunEntry: RunEntry{ID: "d"}}, {RunEntry: RunEntry{ID: "f"}}}}
	docs := []snapshot.Document{{ID: "b"}, {ID: "c"}, {ID: "e"}}
	if err := joinAll(t.Context(), parent, sink, docs); err != nil {
		t.Fatal(err)
	}
	want := []string{"parent a", "row b", "both c", "parent d", "row e", "parent f"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("join (-want +got):\n%s", diff)
	}
}

type recordSink struct{ got *[]string }

func (r recordSink) row(_ context.Context, d snapshot.Document, e fromEntry, found bool) error {
	if found {
		if e.ID != d.ID {
			return fmt.Errorf("row %q joined with entry %q", d.ID, e.ID)
		}
		*r.got = append(*r.got, "both "+d.ID)
	} else {
		*r.got = append(*r.got, "row "+d.ID)
	}
	return nil
}

func (r recordSink) parentOnly(_ context.Context, e fromEntry) error {
	*r.got = append(*r.got, "parent "+e.ID)
	return nil
}

// A sparse merge of a keyed read joins, besides the changed rows, every entry of the
// merged deltas the source did not name: a live one as a row unchanged since the
// parent, a tombstone as a parent entry alone. A named id the source no longer has
// keeps its parent entry (the join writes its tombstone), or, already a tombstone in
// the merged deltas, that tombstone.
func TestMergeSinkKeyed(t *testing.T) {
	live := func(id string, from int) fromEntry { return fromEntry{RunEntry{ID: id, Len: 2}, from} }
	tomb := func(id string) fromEntry { return fromEntry{RunEntry{ID: id, Deleted: true}, 0} }
	body := []byte(`{}`)
	named := []snapshot.Document{{ID: "a", Body: body}, {ID: "c"}, {ID: "e", Body: body}, {ID: "g"}}
	merged := &sliceCursor{entries: []fromEntry{live("b", 1), live("c", 0), tomb("d"), tomb("e"), tomb("g"), live("h", 1)}}
	m := mergeSink{matched: []fromEntry{live("a", 3), live("c", 0)}, keyed: true}
	if err := joinAll(t.Context(), merged, &m, named); err != nil {
		t.Fatal(err)
	}
	var rows, entries []string
	for _, d := range m.rows {
		rows = append(rows, fmt.Sprintf("%s body %v", d.ID, d.Body != nil))
	}
	for _, e := range m.entries {
		entries = append(entries, fmt.Sprintf("%s deleted %v from %d", e.ID, e.Deleted, e.from))
	}
	got := []any{rows, entries, m.unchanged}
	want := []any{
		[]string{"a body true", "b body false", "e body true", "h body false"},
		[]string{"a deleted false from 3", "b deleted false from 1", "c deleted false from 0", "d deleted true from 0", "g deleted true from 0", "h deleted false from 1"},
		int64(2),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sparse merge (-want +got):\n%s", diff)
	}
}
