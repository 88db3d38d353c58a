package layer

import "github.com/snapflip/snapflip/snapshot"

// A collection's layer is planned, then applied. planDelta chooses how to write it
// from what the parent chain, the config and the source say; the layer writer then
// does what the plan says, and nothing it meets along the way changes the choice.

// planKind is how a layer is written.
type planKind int

const (
	// planBase writes every row the source has, with no parent to compare with.
	planBase planKind = iota
	// planSameFingerprint writes nothing: the table's row versions and definitions
	// are the parent's, whose chain the version keeps.
	planSameFingerprint
	// planFullJoin joins every row the source has with the parent chain's run.
	planFullJoin
	// planKeyed joins the ids the source's change stream names (deletions
	// included) with the parent's entries of them.
	planKeyed
	// planChangedOnly joins the changed rows alone, no row deleted, with the
	// parent's entries of them.
	planChangedOnly
)

// String returns the kind's name, for test failures.
func (k planKind) String() string {
	switch k {
	case planBase:
		return "base"
	case planSameFingerprint:
		return "same fingerprint"
	case planFullJoin:
		return "full join"
	case planKeyed:
		return "keyed"
	case planChangedOnly:
		return "changed only"
	}
	return "unknown"
}

// deltaPlan is how one collection's layer is written, and what it is written from.
type deltaPlan struct {
	kind planKind
	why  string // for planBase: why a delta will not do
	// parent is the parent's collection, for every kind but planBase.
	parent snapshot.CollectionStats
	// merge is how many of the parent chain's newest deltas the layer merges (0:
	// none). With planKeyed or planChangedOnly it is a sparse merge: the merged
	// deltas' unchanged entries join the changed rows (sparseMerge).
	merge int
	// changed is, for planKeyed and planChangedOnly, what the source named and the
	// parent's entries of those ids.
	changed sourceAnswer
	// sourceRows is, for planKeyed and planChangedOnly, the source rows the join
	// does not read: those unchanged since the parent.
	sourceRows int64
}

// layerKind is the kind of layer the plan writes (nothing, for planSameFingerprint).
func (p deltaPlan) layerKind() snapshot.LayerKind {
	switch p.kind {
	case planBase:
		return snapshot.LayerBase
	case planSameFingerprint:
		return snapshot.LayerNone
	}
	return snapshot.LayerDelta
}

// planInput is what a layer's plan is chosen from.
type planInput struct {
	// kind and why are nextKind's: LayerBase with why a delta will not do, or
	// LayerDelta.
	kind snapshot.LayerKind
	why  string
	// sameFingerprint reports that the source says the table's row versions and
	// definitions are the parent's.
	sameFingerprint bool
	parent          snapshot.CollectionStats // the parent's collection, for a delta
	maxLayers       int                      // the chain's bound (Writer.MaxLayers)
	// mergeLimit, when limited, bounds how many of the chain's newest layers a
	// delta merges (a base beside the stream replaces the rest).
	mergeLimit int
	limited    bool
	// keyed and changed are the source's answers to the keyed and the
	// changed-rows reads; zero when not asked or not given.
	keyed, changed sourceAnswer
}

// planDelta returns how to write a collection's layer. A delta over a chain at
// maxLayers merges its newest deltas (mergeCount). A keyed answer is the whole
// change; a changed-rows answer is when, with I of its rows not in the parent, the
// parent's count plus I is the source's count (the source's other rows are, by row
// version, the parent's): no row was deleted. Otherwise every row is read.
func planDelta(in planInput) deltaPlan {
	if in.kind == snapshot.LayerBase {
		return deltaPlan{kind: planBase, why: in.why}
	}
	if in.sameFingerprint {
		return deltaPlan{kind: planSameFingerprint, parent: in.parent}
	}
	p := deltaPlan{kind: planFullJoin, parent: in.parent}
	if len(in.parent.Layers) >= in.maxLayers {
		p.merge = mergeCount(in.parent.Layers)
		if in.limited {
			p.merge = min(p.merge, in.mergeLimit)
		}
	}
	k, c := in.keyed, in.changed
	switch {
	case k.given:
		p.kind, p.changed = planKeyed, k
		p.sourceRows = in.parent.Rows - int64(len(k.parent.entries)) // the join counts the documents
	case c.given && in.parent.Rows+int64(len(c.docs))-int64(len(c.parent.entries)) == c.total:
		p.kind, p.changed = planChangedOnly, c
		p.sourceRows = c.total - int64(len(c.docs)) // the join counts the changed ones
	}
	return p
}
