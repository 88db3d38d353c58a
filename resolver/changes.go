package resolver

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/snapflip/snapflip/snapshot"
)

// changesKind returns what version v's publish did to a collection it holds.
func changesKind(v snapshot.Version, m snapshot.Manifest, c snapshot.CollectionStats) snapshot.ChangesKind {
	switch {
	case m.Format != snapshot.FormatLayered || len(c.Layers) == 0:
		return snapshot.ChangesFull
	case c.Own != nil && c.Own.Rebased:
		return snapshot.ChangesBase // its changes are against a base read beside the stream
	case c.Layers[0].Version != v:
		return snapshot.ChangesUnchanged
	case c.Layers[0].Kind == snapshot.LayerDelta:
		return snapshot.ChangesDelta
	}
	return snapshot.ChangesBase
}

// ChangedIDs returns up to limit of the ids the view's version changed in a
// collection against its parent, after the id after, in id byte order; for a version
// that wrote the collection whole, or nothing, only what it did. It returns an error
// wrapping ErrNotFound for a collection the version does not hold, and ErrGone when a
// merged delta's changes can no longer be told apart, its parent having expired.
func (r *Resolver) ChangedIDs(ctx context.Context, view snapshot.View, collection, after string, limit int) (snapshot.Changes, error) {
	c, ok := view.Manifest.Collections[collection]
	if !ok {
		return snapshot.Changes{}, fmt.Errorf("collection %q: %w", collection, snapshot.ErrNotFound)
	}
	out := snapshot.Changes{Kind: changesKind(view.Version, view.Manifest, c), Parent: view.Manifest.Parent}
	if out.Kind != snapshot.ChangesDelta {
		return out, nil
	}
	if r.cfg.Layers == nil {
		return snapshot.Changes{}, fmt.Errorf("changes of %s in version %s: no layer reader: %w", collection, view.Version, snapshot.ErrUnavailable)
	}
	req := snapshot.ChangesRequest{View: view, Collection: collection, After: after, Limit: limit}
	if c.Layers[0].Merged > 0 {
		parent, err := r.View(ctx, view.Manifest.Parent)
		if errors.Is(err, snapshot.ErrGone) {
			return snapshot.Changes{}, fmt.Errorf("the changes of %s in version %s cannot be told from what it merged: its parent %s is gone: %w",
				collection, view.Version, view.Manifest.Parent, snapshot.ErrGone)
		}
		if err != nil {
			return snapshot.Changes{}, err
		}
		pc, merged := parent.Manifest.Collections[collection], c.Layers[0].Merged
		if merged >= len(pc.Layers) || !slices.Equal(snapshot.LayerVersions(c.Layers[1:]), snapshot.LayerVersions(pc.Layers[merged:])) {
			return snapshot.Changes{}, fmt.Errorf("version %s's chain of %s is not its parent %s's with %d deltas merged", view.Version, collection, view.Manifest.Parent, merged)
		}
		req.Parent = &parent
	}
	ids, more, err := r.cfg.Layers.Changes(ctx, req)
	if err != nil {
		return snapshot.Changes{}, fmt.Errorf("changes of %s in version %s: %w", collection, view.Version, err)
	}
	out.IDs, out.More = ids, more
	return out, nil
}
