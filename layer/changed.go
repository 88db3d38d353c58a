package layer

import (
	"context"
	"errors"
	"fmt"

	"github.com/snapflip/snapflip/snapshot"
)

// A delta from a source that can send only the changed rows reads those alone when
// no row was deleted: the parent entries they replace are then all the join needs,
// and, for a merge, the merged deltas' entries (sparseMerge).

// maxChangedOnly bounds the changed rows held in memory to be read that way.
const maxChangedOnly = 20_000

// Keyed reads (the ids a change stream names, looked up by index) stay cheaper than
// reading every row until about a tenth of the rows changed, so their bound grows
// with the parent, from maxChangedOnly to maxKeyed ids; and the documents they hold
// in memory at once stay within maxKeyedBytes.
const (
	maxKeyed      = 200_000
	maxKeyedBytes = 64 << 20
)

// keyedLimit is how many changed ids a delta of a parent of rows reads by id.
func keyedLimit(rows int64) int64 { return min(max(rows/10, maxChangedOnly), maxKeyed) }

// keyedBytes is the bound on the documents a keyed read holds: maxKeyedBytes, unless
// a test set less.
func (p *Writer) keyedBytes() int {
	if p.keyedBytesMax > 0 {
		return p.keyedBytesMax
	}
	return maxKeyedBytes
}

// errKeyedTooLarge stops a keyed read whose documents outgrow keyedBytes.
var errKeyedTooLarge = errors.New("the changed documents outgrow the keyed read's memory")

// fromEntry is a parent entry with the index in the chain of the layer it is from.
type fromEntry struct {
	RunEntry
	from int
}

// changedRows is what changedOnly read.
type changedRows struct {
	docs    []snapshot.Document // the changed rows, in id order
	gone    []string            // the changed ids the source no longer has, in id order
	matched []fromEntry         // the parent's entries of those the parent holds, in id order
	// whole reports that they are the whole change: no row was deleted.
	whole bool
	// consumed reports that the parent's chain run was read to its end.
	consumed bool
	// sourceRows and parentSeen are, when whole, the join's counts of what it does
	// not read: the source's unchanged rows, and the parent's live ids.
	sourceRows, parentSeen int64
}

// readChanged reads the changed rows alone (changedOnly) and, when they are the
// whole change, sets the join up to read only them. Otherwise the join reads every
// row, and the parent's run again if it was read.
func (lw *layerWriter) readChanged(ctx context.Context, snap snapshot.DeltaSnapshot) error {
	var c changedRows
	var err error
	if ks, ok := snap.(snapshot.KeyedScanner); ok {
		c, err = lw.keyedOnly(ctx, ks)
		lw.keyed = c.whole
	}
	if cs, ok := snap.(snapshot.ChangedScanner); ok && err == nil && !c.whole && !c.consumed {
		c, err = lw.changedOnly(ctx, cs)
	}
	if err != nil {
		return err
	}
	if !c.whole {
		// The join reads the parent's run: unread yet, or read to its end (its readers
		// end with ctx) and so again.
		lw.head.run = lw.openParent(ctx)
		return nil
	}
	if lw.merge > 0 {
		if c, err = lw.sparseMerge(ctx, c); err != nil {
			return err
		}
	}
	lw.changed, lw.sourceRows = c.docs, c.sourceRows
	lw.head.sparse, lw.head.matched, lw.head.seen = true, c.matched, c.parentSeen
	return nil
}

// changedOnly reads the collection's changed rows alone and matches them with the
// parent's chain (parentEntries). They are
// the whole change when, with I of them not in the parent, the parent's count plus I
// is the source's count (the source's other rows are, by row version, the parent's).
// Otherwise (a row deleted, too many changed, no row versions) the join reads every
// id.
func (lw *layerWriter) changedOnly(ctx context.Context, cs snapshot.ChangedScanner) (changedRows, error) {
	var c changedRows
	total, ok, err := cs.ScanChanged(ctx, lw.name, lw.since, maxChangedOnly, func(d snapshot.Document) error {
		c.docs = append(c.docs, d)
		return nil
	})
	if err != nil || !ok {
		return changedRows{}, err
	}
	var seen int64
	if c.matched, seen, c.consumed, err = lw.parentEntries(ctx, c.docs); err != nil {
		return c, err
	}
	changed, inParent := int64(len(c.docs)), int64(len(c.matched))
	if lw.parent.Rows+changed-inParent == total {
		c.whole = true
		c.sourceRows = total - changed // the join counts the changed ones
		c.parentSeen = seen
	}
	return c, nil
}

// keyedOnly reads the ids the source's change stream names, and matches them with
// the parent's chain as changedOnly does. They are the whole change, deletions
// included: an id the source no longer has is looked up in the parent like the
// others, and the join, not finding it among the documents, writes its tombstone.
func (lw *layerWriter) keyedOnly(ctx context.Context, ks snapshot.KeyedScanner) (changedRows, error) {
	var c changedRows
	var all []snapshot.Document
	var size int
	limit := lw.vw.keyedBytes()
	ok, err := ks.ScanKeyed(ctx, lw.name, lw.since, keyedLimit(lw.parent.Rows), func(d snapshot.Document) error {
		if size += len(d.ID) + len(d.Body); size > limit {
			return errKeyedTooLarge
		}
		all = append(all, d)
		if d.Body == nil {
			c.gone = append(c.gone, d.ID)
		} else {
			c.docs = append(c.docs, d)
		}
		return nil
	})
	if errors.Is(err, errKeyedTooLarge) {
		lw.vw.observe(ctx, snapshot.Event{Kind: snapshot.EventKeyedTooLarge, Dataset: lw.vw.dataset, Collection: lw.name,
			Attrs: []any{"bytes_over", limit}})
		return changedRows{}, nil
	}
	if err != nil || !ok {
		return changedRows{}, err
	}
	if c.matched, c.parentSeen, c.consumed, err = lw.parentEntries(ctx, all); err != nil {
		return c, err
	}
	c.whole = true
	c.sourceRows = lw.parent.Rows - int64(len(c.matched)) // the join counts the documents
	return c, nil
}

// parentEntries returns the parent's live entries of the ids of docs (in id order)
// and how many live ids the parent holds. A parent chain too large for the run cache
// is read to its end, which checks its live ids against the parent's count, unless
// that count is known for the chain: remembered by the cache (read so, or written by
// this process) or recorded beside its newest layer's run by the publish that wrote
// it. Then the changed ids' parent documents are read by id instead: what a delta
// reads of its parent follows the change, not the parent's size.
func (lw *layerWriter) parentEntries(ctx context.Context, docs []snapshot.Document) (matched []fromEntry, seen int64, consumed bool, err error) {
	runs, layers := lw.vw.Runs, lw.parent.Layers
	if !lw.vw.runsCached(lw.parent, lw.name) {
		n, ok := runs.knownLive(lw.vw.dataset, lw.name, layers)
		if !ok && len(layers) > 0 {
			if n, ok, err = lw.vw.Store.RecordedLive(ctx, lw.vw.dataset, layers[0].Version, lw.name); err != nil {
				return nil, 0, false, err
			}
			if ok && n == lw.parent.Rows {
				runs.rememberLive(lw.vw.dataset, lw.name, layers, n)
			}
		}
		if ok && n == lw.parent.Rows {
			matched, err = lw.readParent(ctx, docs)
			return matched, lw.parent.Rows, false, err
		}
	}
	matched, seen, consumed, err = lw.matchParent(ctx, docs)
	if err == nil && consumed {
		runs.rememberLive(lw.vw.dataset, lw.name, layers, seen)
	}
	return matched, seen, consumed, err
}

// matchParent returns the parent's live entries of the ids of docs (in id order) and
// how many live ids the parent holds: looked up in the run cache's decoded runs when
// every run of the chain is there, otherwise by reading the parent's chain run to its
// end (consumed).
func (lw *layerWriter) matchParent(ctx context.Context, docs []snapshot.Document) (matched []fromEntry, seen int64, consumed bool, err error) {
	runs, err := lw.vw.cachedRuns(ctx, lw.parent, lw.name)
	if err != nil {
		return nil, 0, false, err
	}
	if runs != nil {
		return lookUp(runs, docs), lw.parent.Rows, false, nil
	}
	lw.head.run = lw.openParent(ctx)
	if matched, seen, err = matchRun(lw.head.run, docs); err != nil {
		return matched, seen, true, err
	}
	if seen != lw.parent.Rows {
		return matched, seen, true, fmt.Errorf("%w: the parent's fingerprints hold %d ids, its manifest %d", snapshot.ErrDeltaInconsistent, seen, lw.parent.Rows)
	}
	return matched, seen, true, nil
}

// readParent returns the parent's entries of the ids of docs (in id order) that it
// holds, made from its documents read through its chain by id, each with the layer
// it is from (as a merge needs).
func (lw *layerWriter) readParent(ctx context.Context, docs []snapshot.Document) ([]fromEntry, error) {
	chain := lw.cur.Chain(lw.name)
	var matched []fromEntry
	for start := 0; start < len(docs); start += copyBatch {
		batch := docs[start:min(start+copyBatch, len(docs))]
		ids := make([]string, len(batch))
		for i, d := range batch {
			ids[i] = d.ID
		}
		got, err := lw.vw.Store.LocateDocuments(ctx, lw.vw.dataset, chain, lw.name, ids)
		if err != nil {
			return nil, fmt.Errorf("read the parent's documents of the changed ids: %w", err)
		}
		for _, id := range ids {
			if d, ok := got[id]; ok {
				matched = append(matched, fromEntry{RunEntry{ID: id, Len: int64(len(d.Body)), Sum: snapshot.Contribution(id, d.Body)}, d.Layer})
			}
		}
	}
	return matched, nil
}

// lookUp returns the parent's entries of the changed ids, each its newest layer's
// (runs are the chain's, newest first): looked up, not merged.
func lookUp(runs []*decodedRun, docs []snapshot.Document) []fromEntry {
	var matched []fromEntry
	for _, d := range docs {
		for i, r := range runs {
			if e, ok := r.find(d.ID); ok {
				if !e.Deleted {
					matched = append(matched, fromEntry{e, i})
				}
				break
			}
		}
	}
	return matched
}

// matchRun reads the parent's chain run to its end and returns its entries for the
// changed ids, and how many live ids it holds.
func matchRun(pr *chainRun, docs []snapshot.Document) (matched []fromEntry, seen int64, err error) {
	i := 0
	for {
		e, more, err := pr.next()
		if err != nil {
			return matched, seen, err
		}
		if !more {
			return matched, seen, nil
		}
		if e.Deleted { // a merge's chain run names tombstones too
			continue
		}
		seen++
		for i < len(docs) && docs[i].ID < e.ID {
			i++
		}
		if i < len(docs) && docs[i].ID == e.ID {
			matched = append(matched, fromEntry{e, pr.from})
			i++
		}
	}
}

// sparseMerge adds to a merge read from the changed rows alone every entry of the
// merged deltas (the chain's newest merge layers) whose id did not change: as a
// parent entry, and, when live, as a document unchanged since the parent, so that the
// join keeps it (copies it, or keeps its tombstone) as it does reading every id. The
// source rows the join does not read go down by the unchanged documents added, which
// it counts.
func (lw *layerWriter) sparseMerge(ctx context.Context, c changedRows) (changedRows, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mr := openChainRun(ctx, lw.vw.chainSource(), lw.parent.Layers[:lw.merge], lw.name)
	mr.keepDeleted = true
	docs := make([]snapshot.Document, 0, len(c.docs))
	heads := make([]fromEntry, 0, len(c.matched))
	i, j, k := 0, 0, 0
	for {
		e, ok, err := mr.next()
		if err != nil {
			return changedRows{}, err
		}
		if !ok {
			break
		}
		for ; i < len(c.docs) && c.docs[i].ID < e.ID; i++ {
			docs = append(docs, c.docs[i])
		}
		for ; j < len(c.matched) && c.matched[j].ID < e.ID; j++ {
			heads = append(heads, c.matched[j])
		}
		for ; k < len(c.gone) && c.gone[k] < e.ID; k++ {
		}
		if i < len(c.docs) && c.docs[i].ID == e.ID {
			continue // changed: its document and parent entry follow
		}
		if k < len(c.gone) && c.gone[k] == e.ID && !e.Deleted {
			continue // deleted: its parent entry follows, and the join writes its tombstone
		}
		heads = append(heads, fromEntry{e, mr.from})
		if !e.Deleted {
			docs = append(docs, snapshot.Document{ID: e.ID}) // no body: unchanged since the parent
			c.sourceRows--
		}
	}
	c.docs, c.matched = append(docs, c.docs[i:]...), append(heads, c.matched[j:]...)
	return c, nil
}

// cachedRuns returns the parent chain's runs (newest first) decoded from the run
// cache, for lookups; nil when there is no cache or a run is over its budget. It
// checks what the whole-chain merge checks: each run's live entries and tombstones
// against its layer's counts, and the ids the chain holds live against the parent's
// row count (RunCache.liveCount).
func (p *versionWrite) cachedRuns(ctx context.Context, parent snapshot.CollectionStats, name string) ([]*decodedRun, error) {
	if p.Runs == nil {
		return nil, nil
	}
	runs := make([]*decodedRun, len(parent.Layers))
	for i, l := range parent.Layers {
		r, err := p.Runs.run(ctx, p.dataset, l.Version, name, l.Docs+l.Tombstones)
		if err != nil || r == nil {
			return nil, err
		}
		if r.docs != l.Docs || r.tomb != l.Tombstones {
			return nil, fmt.Errorf("%w: layer %s's fingerprints of %s hold %d documents and %d tombstones, its manifest %d and %d",
				snapshot.ErrDeltaInconsistent, l.Version, name, r.docs, r.tomb, l.Docs, l.Tombstones)
		}
		runs[i] = r
	}
	if live := p.Runs.liveCount(p.dataset, name, parent.Layers, runs); live != parent.Rows {
		return nil, fmt.Errorf("%w: the parent's fingerprints hold %d ids, its manifest %d", snapshot.ErrDeltaInconsistent, live, parent.Rows)
	}
	return runs, nil
}
