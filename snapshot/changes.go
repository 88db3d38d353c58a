package snapshot

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// ChangesKind says what a version's publish did to one collection (Resolver.ChangedIDs).
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

// changesKind returns what version v's publish did to a collection it holds.
func changesKind(v Version, m Manifest, c CollectionStats) ChangesKind {
	switch {
	case m.Format != FormatLayered || len(c.Layers) == 0:
		return ChangesFull
	case c.Layers[0].Version != v:
		return ChangesUnchanged
	case c.Layers[0].Kind == LayerDelta:
		return ChangesDelta
	}
	return ChangesBase
}

// ChangedIDs returns up to limit of the ids the view's version changed in a
// collection against its parent, after the id after, in id byte order; for a version
// that wrote the collection whole, or nothing, only what it did. It returns an error
// wrapping ErrNotFound for a collection the version does not hold, and ErrGone when a
// merged delta's changes can no longer be told apart, its parent having expired.
func (r *Resolver) ChangedIDs(ctx context.Context, view View, collection, after string, limit int) (Changes, error) {
	c, ok := view.Manifest.Collections[collection]
	if !ok {
		return Changes{}, fmt.Errorf("collection %q: %w", collection, ErrNotFound)
	}
	out := Changes{Kind: changesKind(view.Version, view.Manifest, c), Parent: view.Manifest.Parent}
	if out.Kind != ChangesDelta {
		return out, nil
	}
	if r.cfg.Layers == nil {
		return Changes{}, fmt.Errorf("changes of %s in version %s: no layer reader: %w", collection, view.Version, ErrUnavailable)
	}
	req := ChangesRequest{View: view, Collection: collection, After: after, Limit: limit}
	if c.Layers[0].Merged > 0 {
		parent, err := r.View(ctx, view.Manifest.Parent)
		if errors.Is(err, ErrGone) {
			return Changes{}, fmt.Errorf("the changes of %s in version %s cannot be told from what it merged: its parent %s is gone: %w",
				collection, view.Version, view.Manifest.Parent, ErrGone)
		}
		if err != nil {
			return Changes{}, err
		}
		pc, merged := parent.Manifest.Collections[collection], c.Layers[0].Merged
		if merged >= len(pc.Layers) || !slices.Equal(layerVersions(c.Layers[1:]), layerVersions(pc.Layers[merged:])) {
			return Changes{}, fmt.Errorf("version %s's chain of %s is not its parent %s's with %d deltas merged", view.Version, collection, view.Manifest.Parent, merged)
		}
		req.Parent = &parent
	}
	ids, more, err := r.cfg.Layers.Changes(ctx, req)
	if err != nil {
		return Changes{}, fmt.Errorf("changes of %s in version %s: %w", collection, view.Version, err)
	}
	out.IDs, out.More = ids, more
	return out, nil
}
