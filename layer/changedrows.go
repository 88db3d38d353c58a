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

// sourceAnswer is what the source said of the rows changed since the parent, and
// what the parent holds of them.
type sourceAnswer struct {
	// given reports that the source answered: it can tell the changed rows apart,
	// and they are within the read's bounds.
	given bool
	docs  []snapshot.Document // the changed rows the source has, in id order
	// named is every id the source named, in id order: docs, and for a keyed read
	// the ids the source no longer has, without a body.
	named []snapshot.Document
	total int64 // for a changed-rows read, the source's row count
	// parent is the parent's entries of the named ids.
	parent parentMatch
}

// parentMatch is what the parent holds of a set of ids.
type parentMatch struct {
	entries  []fromEntry // the parent's live entries of the ids, in id order
	live     int64       // how many live ids the parent holds
	consumed bool        // the parent chain's run was read to its end
}

// askSource asks the source for the rows changed since the parent: the ids its
// change stream names (keyedOnly) and, when it gives none, the changed rows
// (changedOnly). It returns the answers, each matched with the parent's entries.
func (lw *layerWriter) askSource(ctx context.Context, snap snapshot.DeltaSnapshot, parent snapshot.CollectionStats) (keyed, changed sourceAnswer, err error) {
	if ks, ok := snap.(snapshot.KeyedScanner); ok {
		if keyed, err = lw.keyedOnly(ctx, ks, parent); err != nil || keyed.given {
			return keyed, sourceAnswer{}, err
		}
	}
	if cs, ok := snap.(snapshot.ChangedScanner); ok {
		changed, err = lw.changedOnly(ctx, cs, parent)
	}
	return sourceAnswer{}, changed, err
}

// changedOnly reads the collection's changed rows alone, up to maxChangedOnly, and
// matches them with the parent's chain (parentEntries); planDelta tells whether they
// are the whole change.
func (lw *layerWriter) changedOnly(ctx context.Context, cs snapshot.ChangedScanner, parent snapshot.CollectionStats) (sourceAnswer, error) {
	var c sourceAnswer
	total, ok, err := cs.ScanChanged(ctx, lw.name, lw.since(), maxChangedOnly, func(d snapshot.Document) error {
		c.docs = append(c.docs, d)
		return nil
	})
	if err != nil || !ok {
		return sourceAnswer{}, err
	}
	c.given, c.named, c.total = true, c.docs, total
	c.parent, err = lw.parentEntries(ctx, parent, c.docs)
	return c, err
}

// keyedOnly reads the ids the source's change stream names, and matches them with
// the parent's chain as changedOnly does. They are the whole change, deletions
// included: an id the source no longer has is looked up in the parent like the
// others, and the join, not finding it among the documents, writes its tombstone.
func (lw *layerWriter) keyedOnly(ctx context.Context, ks snapshot.KeyedScanner, parent snapshot.CollectionStats) (sourceAnswer, error) {
	var c sourceAnswer
	var size int
	limit := lw.vw.keyedBytes()
	ok, err := ks.ScanKeyed(ctx, lw.name, lw.since(), keyedLimit(parent.Rows), func(d snapshot.Document) error {
		if size += len(d.ID) + len(d.Body); size > limit {
			return errKeyedTooLarge
		}
		c.named = append(c.named, d)
		if d.Body != nil {
			c.docs = append(c.docs, d)
		}
		return nil
	})
	if errors.Is(err, errKeyedTooLarge) {
		lw.vw.observe(ctx, snapshot.Event{Kind: snapshot.EventKeyedTooLarge, Dataset: lw.vw.dataset, Collection: lw.name,
			Attrs: []any{"bytes_over", limit}})
		return sourceAnswer{}, nil
	}
	if err != nil || !ok {
		return sourceAnswer{}, err
	}
	if c.parent, err = lw.parentEntries(ctx, parent, c.named); err != nil {
		return sourceAnswer{}, err
	}
	c.given = true
	return c, nil
}

// parentEntries returns the parent's live entries of the ids of docs (in id order)
// and how many live ids the parent holds. A parent chain too large for the run cache
// is read to its end, which checks its live ids against the parent's count, unless
// that count is known for the chain: remembered by the cache (read so, or written by
// this process) or recorded beside its newest layer's run by the publish that wrote
// it. Then the changed ids' parent documents are read by id instead: what a delta
// reads of its parent follows the change, not the parent's size.
func (lw *layerWriter) parentEntries(ctx context.Context, parent snapshot.CollectionStats, docs []snapshot.Document) (parentMatch, error) {
	runs, layers := lw.vw.Runs, parent.Layers
	if !lw.vw.runsCached(parent, lw.name) {
		n, ok := runs.knownLive(lw.vw.dataset, lw.name, layers)
		if !ok && len(layers) > 0 {
			var err error
			if n, ok, err = lw.vw.Store.RecordedLive(ctx, lw.vw.dataset, layers[0].Version, lw.name); err != nil {
				return parentMatch{}, err
			}
			if ok && n == parent.Rows {
				runs.rememberLive(lw.vw.dataset, lw.name, layers, n)
			}
		}
		if ok && n == parent.Rows {
			entries, err := lw.readParent(ctx, docs)
			return parentMatch{entries: entries, live: parent.Rows}, err
		}
	}
	m, err := lw.matchParent(ctx, parent, docs)
	if err == nil && m.consumed {
		runs.rememberLive(lw.vw.dataset, lw.name, layers, m.live)
	}
	return m, err
}

// matchParent returns the parent's live entries of the ids of docs (in id order) and
// how many live ids the parent holds: looked up in the run cache's decoded runs when
// every run of the chain is there, otherwise by reading the parent's chain run to its
// end (consumed).
func (lw *layerWriter) matchParent(ctx context.Context, parent snapshot.CollectionStats, docs []snapshot.Document) (parentMatch, error) {
	runs, err := lw.vw.cachedRuns(ctx, parent, lw.name)
	if err != nil {
		return parentMatch{}, err
	}
	if runs != nil {
		return parentMatch{entries: lookUp(runs, docs), live: parent.Rows}, nil
	}
	m, err := matchRun(ctx, openRunCursor(ctx, lw.vw.chainSource(), parent.Layers, lw.name, false), docs)
	if err != nil {
		return m, err
	}
	if m.live != parent.Rows {
		return m, fmt.Errorf("%w: the parent's fingerprints hold %d ids, its manifest %d", snapshot.ErrDeltaInconsistent, m.live, parent.Rows)
	}
	return m, nil
}

// readParent returns the parent's entries of the ids of docs (in id order) that it
// holds, made from its documents read through its chain by id, each with the layer
// it is from (as a merge needs).
func (lw *layerWriter) readParent(ctx context.Context, docs []snapshot.Document) ([]fromEntry, error) {
	chain := lw.cur.Chain(lw.name)
	var matched []fromEntry
	err := inBatches(docs, func(d snapshot.Document) string { return d.ID }, func(_ []snapshot.Document, ids []string) error {
		got, err := lw.vw.Store.LocateDocuments(ctx, snapshot.ChainRef{Dataset: lw.vw.dataset, Chain: chain, Collection: lw.name}, ids)
		if err != nil {
			return fmt.Errorf("read the parent's documents of the changed ids: %w", err)
		}
		for _, id := range ids {
			if d, ok := got[id]; ok {
				matched = append(matched, fromEntry{RunEntry{ID: id, Len: int64(len(d.Body)), Sum: snapshot.Contribution(id, d.Body)}, d.Layer})
			}
		}
		return nil
	})
	return matched, err
}

// inBatches calls fn with items, copyBatch at a time (what one read of documents by
// id fetches), and their ids.
func inBatches[T any](items []T, id func(T) string, fn func(batch []T, ids []string) error) error {
	for start := 0; start < len(items); start += copyBatch {
		batch := items[start:min(start+copyBatch, len(items))]
		ids := make([]string, len(batch))
		for i, it := range batch {
			ids[i] = id(it)
		}
		if err := fn(batch, ids); err != nil {
			return err
		}
	}
	return nil
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

// matchRun reads the parent's chain run to its end (consumed) and returns its live
// entries for the ids of docs, and how many live ids it holds.
func matchRun(ctx context.Context, parent parentCursor, docs []snapshot.Document) (parentMatch, error) {
	var m matchSink
	err := joinAll(ctx, parent, &m, docs)
	return parentMatch{entries: m.entries, live: parent.live(), consumed: true}, err
}

// matchSink collects the parent's live entries of the ids joined.
type matchSink struct{ entries []fromEntry }

func (m *matchSink) row(_ context.Context, _ snapshot.Document, e fromEntry, found bool) error {
	if found && !e.Deleted { // a merge's chain run names tombstones too
		m.entries = append(m.entries, e)
	}
	return nil
}

func (m *matchSink) parentOnly(context.Context, fromEntry) error { return nil }

// joinAll joins docs, in id order, with every entry of parent.
func joinAll(ctx context.Context, parent parentCursor, to joinSink, docs []snapshot.Document) error {
	j, err := startJoin(parent, to)
	if err != nil {
		return err
	}
	for _, d := range docs {
		if err := j.row(ctx, d); err != nil {
			return err
		}
	}
	return j.end(ctx)
}

// sparseMerge returns the rows and parent entries a merge read from the changed rows
// alone joins: besides the changed ones, every entry of the merged deltas (the
// chain's newest merge layers) whose id did not change, as a parent entry, and, when
// live, as a document unchanged since the parent, so that the join keeps it (copies
// it, or keeps its tombstone) as it does reading every id. It also returns how many
// documents it added, which the join counts as source rows.
func (lw *layerWriter) sparseMerge(ctx context.Context, p deltaPlan) (mergeSink, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	merged := openRunCursor(ctx, lw.vw.chainSource(), p.parent.Layers[:p.merge], lw.name, true)
	m := mergeSink{matched: p.changed.parent.entries, keyed: p.kind == planKeyed}
	m.rows = make([]snapshot.Document, 0, len(p.changed.docs))
	m.entries = make([]fromEntry, 0, len(m.matched))
	err := joinAll(ctx, merged, &m, p.changed.named)
	return m, err
}

// mergeSink is the join of the ids the source named with the merged deltas' entries,
// which sparseMerge makes.
type mergeSink struct {
	matched []fromEntry // the parent's live entries of the named ids, not yet passed
	keyed   bool        // a named id without a body is one the source no longer has

	rows      []snapshot.Document // the rows to join, in id order
	entries   []fromEntry         // their parent entries, in id order
	unchanged int64               // the documents added unchanged since the parent
}

func (m *mergeSink) row(_ context.Context, doc snapshot.Document, e fromEntry, found bool) error {
	if len(m.matched) > 0 && m.matched[0].ID == doc.ID {
		m.entries = append(m.entries, m.matched[0])
		m.matched = m.matched[1:]
	}
	if gone := m.keyed && doc.Body == nil; !gone {
		m.rows = append(m.rows, doc) // changed: its parent entry, if any, is matched's
	} else if found && e.Deleted {
		m.entries = append(m.entries, e) // deleted before: the join keeps its tombstone
	}
	return nil
}

func (m *mergeSink) parentOnly(_ context.Context, e fromEntry) error {
	m.entries = append(m.entries, e)
	if !e.Deleted {
		m.rows = append(m.rows, snapshot.Document{ID: e.ID}) // no body: unchanged since the parent
		m.unchanged++
	}
	return nil
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
