package snapshot

import (
	"context"
)

// ChangesKind says what a version's publish did to one collection (the read side's
// resolver.Resolver.ChangedIDs).
type ChangesKind string

// The kinds of a version's changes to a collection.
const (
	// ChangesDelta: the version wrote a delta; its changes against the parent are listed.
	ChangesDelta ChangesKind = "delta"
	// ChangesBase: the version wrote the collection whole, as a base: read it whole.
	ChangesBase ChangesKind = "base"
	// ChangesFull: the version is a full copy, without layers: read it whole.
	ChangesFull ChangesKind = "full"
	// ChangesUnchanged: the version wrote nothing; the collection is its parent's.
	ChangesUnchanged ChangesKind = "unchanged"
)

// Change is an id whose document a version changed against its parent: inserted or
// rewritten, or, Deleted, gone.
type Change struct {
	ID      string
	Deleted bool
}

// Changes is one page of a version's changes to a collection.
type Changes struct {
	Kind   ChangesKind
	Parent Version // the version the changes are against; "" for none
	// IDs are the changed ids after the page's start, in id byte order: for a delta
	// alone.
	IDs []Change
	// More reports that changes follow the page's last.
	More bool
}

// LayerRuns reads the fingerprint runs of layers for the read side; package layer
// implements it over storage.
type LayerRuns interface {
	// Changes returns up to req.Limit of the ids the own layer of req.View's version
	// changed in req.Collection against its parent, after req.After, in id byte
	// order, and whether more follow.
	Changes(ctx context.Context, req ChangesRequest) ([]Change, bool, error)
	// LayerIDs returns every id the collection's own layer of version v names,
	// tombstones included; false when not all n of them (its manifest's count) can
	// be read.
	LayerIDs(ctx context.Context, v Version, collection string, n int64) (map[string]struct{}, bool)
}

// ChangesRequest asks LayerRuns for one page of a delta's changes.
type ChangesRequest struct {
	View       View
	Parent     *View // the version's parent, when its layer merged some of its deltas
	Collection string
	After      string
	Limit      int
}
