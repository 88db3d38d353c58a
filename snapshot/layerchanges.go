package snapshot

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// A client that holds a collection as of one version can follow it to the next by
// what the next version's own layer changed, instead of reading it whole. A plain
// delta's run names exactly that: the rows that differ from the parent and tombstones
// of the ids the parent held. A merged delta's run also names every id of the
// parent's deltas it replaces (LayerRef.Merged): their unchanged documents, copied,
// and their tombstones, kept; and, when the join read every id, tombstones of older
// deltas it met on the way. Those are told from the changes by the parent's own
// entry for the id: the merged deltas' newest one (their run, merged), or, for a
// tombstone of an id they do not name, whether the parent's chain holds a document.
// A copy has the parent's length and sum, as the join that wrote it compared.

// changesRunCacheBytes is the budget of the runs a Resolver keeps decoded for
// ChangedIDs: a client pages through a large delta's changes (10,000 ids a page), and
// each page would otherwise read the run again from its start up to the cursor. About
// 350,000 entries of short ids; a larger run is streamed, and a page starts at the
// chunk the cache last saw begin at or before its cursor (RunCache.chunkAt).
const changesRunCacheBytes = 16 << 20

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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &changeWalk{r: r, collection: collection, after: after}
	w.own = openChainRunAfter(ctx, r.store, r.runs, r.dataset, c.Layers[:1], collection, after)
	w.own.keepDeleted = true
	if c.Layers[0].Merged > 0 {
		if err := w.openMerged(ctx, view, c); err != nil {
			return Changes{}, err
		}
	}
	ids, more, err := w.page(ctx, after, limit)
	if err != nil {
		return Changes{}, fmt.Errorf("changes of %s in version %s: %w", collection, view.Version, err)
	}
	out.IDs, out.More = ids, more
	return out, nil
}

// changeWalk reads one version's own layer of a collection and tells its changes
// from what a merge copied.
type changeWalk struct {
	r          *Resolver
	collection string
	after      string    // the page's start: no entry at or before it is needed
	own        *chainRun // the version's own layer, tombstones included
	// merged is the run of the parent's deltas the layer merged (their newest entry
	// per id, tombstones included), nil for a plain delta; head is its next entry.
	merged *chainRun
	head   RunEntry
	headOK bool
	// parentChain is the parent's chain, for tombstones of ids merged does not name.
	parentChain []Version
}

// openMerged starts reading the parent's deltas that the version's layer merged.
func (w *changeWalk) openMerged(ctx context.Context, view View, c CollectionStats) error {
	m, own := view.Manifest, c.Layers[0]
	parent, err := w.r.View(ctx, m.Parent)
	if errors.Is(err, ErrGone) {
		return fmt.Errorf("the changes of %s in version %s cannot be told from what it merged: its parent %s is gone: %w",
			w.collection, view.Version, m.Parent, ErrGone)
	}
	if err != nil {
		return err
	}
	pc := parent.Manifest.Collections[w.collection]
	if own.Merged >= len(pc.Layers) || !slices.Equal(layerVersions(c.Layers[1:]), layerVersions(pc.Layers[own.Merged:])) {
		return fmt.Errorf("version %s's chain of %s is not its parent %s's with %d deltas merged", view.Version, w.collection, m.Parent, own.Merged)
	}
	w.merged = openChainRunAfter(ctx, w.r.store, w.r.runs, w.r.dataset, pc.Layers[:own.Merged], w.collection, w.after)
	w.merged.keepDeleted = true
	w.parentChain = parent.Manifest.Chain(w.collection)
	w.head, w.headOK, err = w.merged.next()
	return err
}

// verdict is what one entry of the version's layer is.
type verdict int

const (
	entryChanged verdict = iota // the id's document differs from the parent's, or is gone
	entryCopied                 // a merge copied the parent's entry: unchanged
	entryLookUp                 // a tombstone of an id merged does not name: the parent's chain says
)

// classify tells what entry e of the version's layer is.
func (w *changeWalk) classify(e RunEntry) (verdict, error) {
	if w.merged == nil {
		return entryChanged, nil // a plain delta holds its changes alone
	}
	for w.headOK && w.head.ID < e.ID {
		var err error
		if w.head, w.headOK, err = w.merged.next(); err != nil {
			return entryChanged, err
		}
	}
	p, named := w.head, w.headOK && w.head.ID == e.ID
	switch {
	case !named && e.Deleted:
		return entryLookUp, nil
	case !named:
		return entryChanged, nil // a merge copies only what the merged deltas name
	case p.Deleted && e.Deleted:
		return entryCopied, nil
	case !p.Deleted && !e.Deleted && p.Len == e.Len && p.Sum == e.Sum:
		return entryCopied, nil
	}
	return entryChanged, nil
}

// candidate is an entry of the version's layer that may be a change.
type candidate struct {
	Change
	lookUp bool // a tombstone, a change only if the parent holds the id
}

// page returns up to limit changes after the id after, and whether more follow.
func (w *changeWalk) page(ctx context.Context, after string, limit int) ([]Change, bool, error) {
	var out []Change
	for done := false; !done && len(out) <= limit; {
		var cands []candidate
		for len(out)+len(cands) <= limit {
			e, ok, err := w.own.next()
			if err != nil {
				return nil, false, err
			}
			if !ok {
				done = true
				break
			}
			if e.ID <= after {
				continue
			}
			v, err := w.classify(e)
			if err != nil {
				return nil, false, err
			}
			if v != entryCopied {
				cands = append(cands, candidate{Change{ID: e.ID, Deleted: e.Deleted}, v == entryLookUp})
			}
		}
		held, err := w.parentHolds(ctx, cands)
		if err != nil {
			return nil, false, err
		}
		for _, c := range cands {
			if !c.lookUp || held[c.ID] {
				out = append(out, c.Change)
			}
		}
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

// parentHolds returns which of the candidates to look up the parent holds a
// document for, read through its chain (none read when there are none).
func (w *changeWalk) parentHolds(ctx context.Context, cands []candidate) (map[string]bool, error) {
	var ids []string
	for _, c := range cands {
		if c.lookUp {
			ids = append(ids, c.ID)
		}
	}
	held := make(map[string]bool, len(ids))
	for start := 0; start < len(ids); start += copyBatch {
		batch := ids[start:min(start+copyBatch, len(ids))]
		got, err := w.r.store.GetDocuments(ctx, w.r.dataset, w.parentChain, w.collection, batch)
		if err != nil {
			return nil, fmt.Errorf("read the parent's documents of deleted ids: %w", err)
		}
		for id := range got {
			held[id] = true
		}
	}
	return held, nil
}
