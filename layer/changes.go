package layer

import (
	"context"
	"fmt"

	"github.com/snapflip/snapflip/snapshot"
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

// Reader reads layers' fingerprint runs for the read side: a delta's changes
// (resolver.Resolver.ChangedIDs) and the ids a layer names (what a flip changed, for
// the Resolver's document cache).
type Reader struct {
	st      ReadStore
	dataset string
	runs    *RunCache // the own layers' runs ChangedIDs pages over
}

// ReadStore is what a Reader needs from storage.
type ReadStore interface {
	snapshot.DocumentGetter
	RunReader
}

var _ snapshot.LayerRuns = (*Reader)(nil)

// NewReader returns a Reader of the dataset's layers in st.
func NewReader(st ReadStore, dataset string) *Reader {
	return &Reader{st: st, dataset: dataset, runs: NewRunCache(st, changesRunCacheBytes)}
}

// Changes returns a page of a delta's changes (snapshot.LayerRuns).
func (r *Reader) Changes(ctx context.Context, req snapshot.ChangesRequest) ([]snapshot.Change, bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := req.View.Manifest.Collections[req.Collection]
	w := &changeWalk{r: r, collection: req.Collection, after: req.After}
	w.own = openChainRunAfter(ctx, r.chainSource(), c.Layers[:1], req.Collection, req.After)
	w.own.keepDeleted = true
	if req.Parent != nil {
		if err := w.openMerged(ctx, *req.Parent, c.Layers[0].Merged); err != nil {
			return nil, false, err
		}
	}
	return w.page(ctx, req.After, req.Limit)
}

// LayerIDs returns the ids the collection's own layer of v names (snapshot.LayerRuns).
func (r *Reader) LayerIDs(ctx context.Context, v snapshot.Version, collection string, n int64) (map[string]struct{}, bool) {
	ids := make(map[string]struct{}, n)
	var derr error
	err := r.st.ScanRun(ctx, r.dataset, v, collection, func(chunk []byte) bool {
		derr = DecodeRunChunk(chunk, func(e RunEntry) error { ids[e.ID] = struct{}{}; return nil })
		return derr == nil
	})
	return ids, err == nil && derr == nil && int64(len(ids)) == n
}

// changeWalk reads one version's own layer of a collection and tells its changes
// from what a merge copied.
type changeWalk struct {
	r          *Reader
	collection string
	after      string    // the page's start: no entry at or before it is needed
	own        *chainRun // the version's own layer, tombstones included
	// merged seeks the own layer's ids in the run of the parent's deltas the layer
	// merged (their newest entry per id, tombstones included); nil for a plain delta.
	merged *mergeJoin
	// parentChain is the parent's chain, for tombstones of ids merged does not name.
	parentChain []snapshot.Version
}

// openMerged starts reading the parent's deltas that the version's layer merged.
func (w *changeWalk) openMerged(ctx context.Context, parent snapshot.View, merged int) error {
	pc := parent.Manifest.Collections[w.collection]
	run := openChainRunAfter(ctx, w.r.chainSource(), pc.Layers[:merged], w.collection, w.after)
	run.keepDeleted = true
	w.parentChain = parent.Manifest.Chain(w.collection)
	var err error
	w.merged, err = startJoin(&runCursor{run: run}, skipSink{})
	return err
}

// chainSource is where the Reader's chain runs are read from.
func (r *Reader) chainSource() chainSource {
	return chainSource{st: r.st, cache: r.runs, dataset: r.dataset}
}

// verdict is what one entry of the version's layer is.
type verdict int

const (
	entryChanged verdict = iota // the id's document differs from the parent's, or is gone
	entryCopied                 // a merge copied the parent's entry: unchanged
	entryLookUp                 // a tombstone of an id merged does not name: the parent's chain says
)

// classify tells what entry e of the version's layer is.
func (w *changeWalk) classify(ctx context.Context, e RunEntry) (verdict, error) {
	if w.merged == nil {
		return entryChanged, nil // a plain delta holds its changes alone
	}
	p, named, err := w.merged.seek(ctx, e.ID)
	if err != nil {
		return entryChanged, err
	}
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
	snapshot.Change
	lookUp bool // a tombstone, a change only if the parent holds the id
}

// page returns up to limit changes after the id after, and whether more follow.
func (w *changeWalk) page(ctx context.Context, after string, limit int) ([]snapshot.Change, bool, error) {
	var out []snapshot.Change
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
			v, err := w.classify(ctx, e)
			if err != nil {
				return nil, false, err
			}
			if v != entryCopied {
				cands = append(cands, candidate{snapshot.Change{ID: e.ID, Deleted: e.Deleted}, v == entryLookUp})
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
	err := inBatches(ids, func(id string) string { return id }, func(_, batch []string) error {
		got, err := w.r.st.GetDocuments(ctx, snapshot.ChainRef{Dataset: w.r.dataset, Chain: w.parentChain, Collection: w.collection}, batch)
		if err != nil {
			return fmt.Errorf("read the parent's documents of deleted ids: %w", err)
		}
		for id := range got {
			held[id] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return held, nil
}
