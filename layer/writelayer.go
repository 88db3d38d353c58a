package layer

import (
	"context"
	"fmt"
	"slices"

	"github.com/snapflip/snapflip/snapshot"
)

// layerWriter writes one collection's own layer of a version, as its plan says
// (planDelta). A delta merges the parent's entries with the source's rows, both in
// id byte order, writing what differs: per id, absent from the parent → insert;
// present with another content → change; unrendered (nil body) or the same content
// → nothing; absent from the source → tombstone.
type layerWriter struct {
	vw   *versionWrite
	w    snapshot.DocumentWriter
	name string
	cur  *snapshot.Manifest // the parent version; nil for none
	from snapshot.Position  // the source position cur's layers of the collection reflect
	// rebased says cur's chain of the collection is a base read from the source
	// beside the stream, which this version takes (OwnLayer.Rebased).
	rebased bool
	plan    deltaPlan

	join   *mergeJoin        // the parent's entries, joined with the source's rows
	copies *copier           // for a merge: the merged deltas' unchanged documents
	ix     *indexer          // the layer's index entries; nil for no indexes
	enc    *runEncoder       // the layer's fingerprint run
	chunks int64             // run chunks emitted
	prog   *progress         // reports a long read's progress
	own    snapshot.OwnLayer // what this layer did
	layer  snapshot.LayerRef // the layer, as the chain names it
	totals collectionTotals
}

// collectionTotals is the collection as of the version (the parent's, changed by
// the join) and the rows the source has, as the join counts them.
type collectionTotals struct {
	digest      snapshot.Digest
	rows, bytes int64
	sourceRows  int64
}

// newLayerWriter prepares the collection's layer of the version over its parent.
func (vw *versionWrite) newLayerWriter(w snapshot.DocumentWriter, name string) *layerWriter {
	lw := &layerWriter{vw: vw, w: w, name: name, cur: vw.req.Parent}
	if lw.cur != nil {
		lw.from = lw.cur.CollectionSource(name)
		// A swapped chain that names where it stands is a base read from the source.
		lw.rebased = slices.Contains(vw.req.Swapped, name) && lw.cur.Collections[name].Held != nil
	}
	return lw
}

// write plans the layer, writes it, and returns the collection's stats and chain
// as of the version.
func (lw *layerWriter) write(ctx context.Context, snap snapshot.DeltaSnapshot) (snapshot.CollectionStats, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in, err := lw.planInput(ctx, snap)
	if err != nil {
		return snapshot.CollectionStats{}, err
	}
	lw.plan = planDelta(in)
	switch lw.plan.kind {
	case planSameFingerprint:
		return lw.carried(), nil
	case planBase:
		lw.vw.event(ctx, snapshot.EventWritingBase, lw.name, "why", lw.plan.why)
	}
	if lw.plan.merge > 0 {
		lw.vw.event(ctx, snapshot.EventMergingDeltas, lw.name, "deltas", lw.plan.merge)
	}
	from, err := lw.joinFrom(ctx)
	if err != nil {
		return snapshot.CollectionStats{}, err
	}
	if err := lw.start(ctx, from); err != nil {
		return snapshot.CollectionStats{}, err
	}
	mode, err := lw.scan(ctx, snap, from.rows)
	if err == nil {
		// The parent's entries past the last row are gone from the source.
		err = lw.join.end(ctx)
	}
	lw.own.Mode = mode
	if err != nil {
		return snapshot.CollectionStats{}, err
	}
	return lw.finish(ctx)
}

// planInput gathers what the layer's plan is chosen from: the kind of layer the
// parent chain and the config allow and, for a delta of a table whose fingerprint
// moved, the source's answers about the changed rows.
func (lw *layerWriter) planInput(ctx context.Context, snap snapshot.DeltaSnapshot) (planInput, error) {
	vw := lw.vw
	in := planInput{maxLayers: vw.maxLayers()}
	in.mergeLimit, in.limited = vw.mergeLimit(lw.cur, lw.name)
	in.kind, in.why = vw.nextKind(lw.cur, vw.req.Manifest.Source, lw.name, vw.req.Base)
	if in.kind != snapshot.LayerDelta {
		return in, nil
	}
	in.parent = lw.cur.Collections[lw.name]
	if !sameIndexes(in.parent.Indexes, vw.declared[lw.name]) {
		// The chain's layers hold no entries of an index the parent did not have.
		in.kind, in.why = snapshot.LayerBase, "an index was added or changed"
		return in, nil
	}
	if in.sameFingerprint = lw.sameFingerprint(); in.sameFingerprint {
		return in, nil
	}
	var err error
	in.keyed, in.changed, err = lw.askSource(ctx, snap, in.parent)
	return in, err
}

// sameFingerprint reports whether the table's row versions and definitions are the
// parent's.
func (lw *layerWriter) sameFingerprint() bool {
	src, parent := lw.vw.req.Manifest.Source, *lw.since()
	fp := src.Fingerprints[lw.name]
	return fp != "" && fp == parent.Fingerprints[lw.name] && src.Definitions[lw.name] == parent.Definitions[lw.name]
}

// carried returns the parent's stats and chain, for a table with nothing to read.
func (lw *layerWriter) carried() snapshot.CollectionStats {
	st := lw.plan.parent
	st.Layers = carryLayers(lw.cur, st.Layers)
	st.Own = &snapshot.OwnLayer{Mode: snapshot.ModeSameFingerprint, Rebased: lw.rebased}
	st.Written = st.Rows
	st.Held = nil                        // the source is as the layers reflect it
	st.Indexes = lw.vw.declared[lw.name] // the parent's: planDelta writes a base else
	return st
}

// joinInput is what the join reads besides the source's scan.
type joinInput struct {
	parent parentCursor
	// rows are, for a sparse plan, the source rows joined, in id order; unread
	// the source rows the join does not read.
	rows   []snapshot.Document
	unread int64
}

// joinFrom opens what the plan joins: for a base nothing of a parent; for a full
// join the parent chain's run (a merge's holding the tombstones of the deltas it
// merges too); for a sparse plan the parent's entries of the changed ids, with, for a
// merge, the merged deltas' unchanged entries (sparseMerge).
func (lw *layerWriter) joinFrom(ctx context.Context) (joinInput, error) {
	p := lw.plan
	switch {
	case p.kind == planBase:
		return joinInput{parent: &sliceCursor{}}, nil
	case p.kind == planFullJoin:
		return joinInput{parent: openRunCursor(ctx, lw.vw.chainSource(), p.parent.Layers, lw.name, p.merge > 0)}, nil
	case p.merge > 0:
		m, err := lw.sparseMerge(ctx, p)
		if err != nil {
			return joinInput{}, err
		}
		return joinInput{parent: &sliceCursor{entries: m.entries, liveIDs: p.changed.parent.live},
			rows: m.rows, unread: p.sourceRows - m.unchanged}, nil
	}
	return joinInput{parent: &sliceCursor{entries: p.changed.parent.entries, liveIDs: p.changed.parent.live},
		rows: p.changed.docs, unread: p.sourceRows}, nil
}

// start sets the layer up over the parent's collection, and starts the join.
func (lw *layerWriter) start(ctx context.Context, from joinInput) error {
	p, m := lw.plan, &lw.vw.req.Manifest
	digest, err := snapshot.ParseDigest(p.parent.Digest)
	if err != nil {
		return err
	}
	lw.totals = collectionTotals{digest: digest, rows: p.parent.Rows, bytes: p.parent.Bytes, sourceRows: from.unread}
	lw.own = snapshot.OwnLayer{Kind: p.layerKind()}
	lw.layer = snapshot.LayerRef{Version: m.Version, Kind: p.layerKind(), DataTime: m.StartedAt, Merged: p.merge}
	lw.enc = newRunEncoder(0, lw.writeChunk)
	expected := p.parent.Rows
	if p.kind == planBase && lw.cur != nil {
		// A base reads every row: about as many as the parent holds.
		expected = lw.cur.Collections[lw.name].Rows
	}
	lw.prog = lw.vw.newProgress(lw.name, expected)
	if lw.join, err = startJoin(from.parent, lw); err != nil {
		return err
	}
	var under []snapshot.Version // the chain under the layer: what its index entries change
	if p.kind != planBase {
		under = lw.cur.Chain(lw.name)[p.merge:]
	}
	lw.ix = newIndexer(lw.vw, lw.w, lw.name, under)
	if p.merge > 0 {
		// A copied entry's newest layer is one of the merged deltas: read those alone.
		lw.copies = &copier{st: lw.vw.Store, dataset: lw.vw.dataset, chain: lw.cur.Chain(lw.name)[:p.merge], collection: lw.name, w: lw.w, ix: lw.ix}
	}
	return nil
}

// writeChunk writes the layer run's next chunk.
func (lw *layerWriter) writeChunk(ctx context.Context, data []byte) error {
	n := lw.chunks
	lw.chunks++
	return lw.w.WriteChunk(ctx, lw.name, n, data)
}

// scan adds the source's rows: for a sparse plan its rows alone, otherwise every
// row as the source sends it. It returns how the changed rows were found.
func (lw *layerWriter) scan(ctx context.Context, snap snapshot.DeltaSnapshot, rows []snapshot.Document) (snapshot.LayerMode, error) {
	add := func(doc snapshot.Document) error { return lw.add(ctx, doc) }
	switch lw.plan.kind {
	case planKeyed, planChangedOnly:
		mode := snapshot.ModeChangedOnly
		if lw.plan.kind == planKeyed {
			mode = snapshot.ModeStream
		}
		for _, doc := range rows {
			if err := add(doc); err != nil {
				return mode, err
			}
		}
		return mode, nil
	case planBase:
		if cs, ok := snap.(snapshot.ChunkedSnapshot); ok && lw.vw.req.ChunkDone != nil {
			cs.OnChunk(func(ctx context.Context, last string) error {
				if err := lw.w.Flush(ctx); err != nil {
					return err
				}
				return lw.vw.req.ChunkDone(ctx, last, lw.totals.sourceRows)
			})
		}
		return snap.ScanSince(ctx, lw.name, nil, add)
	}
	return snap.ScanSince(ctx, lw.name, lw.since(), add)
}

// since returns the source position the parent's layers of the collection reflect:
// the parent's, or where a held collection, or a base read beside the stream, stands.
// It is the same pointer at every call, which a source may key what it decided by.
func (lw *layerWriter) since() *snapshot.Position { return &lw.from }

// add counts one source row and joins it with the parent's entries.
func (lw *layerWriter) add(ctx context.Context, doc snapshot.Document) error {
	lw.totals.sourceRows++
	lw.prog.add(ctx, len(doc.Body))
	return lw.join.row(ctx, doc)
}

// row compares a source row with its parent entry old, if found (joinSink).
func (lw *layerWriter) row(ctx context.Context, doc snapshot.Document, old fromEntry, found bool) error {
	inParent := found && !old.Deleted
	merged := found && old.from < lw.plan.merge
	t := &lw.totals
	if doc.Body == nil {
		if !inParent {
			return fmt.Errorf("%w: id %q is unchanged since the parent %s but not in it", snapshot.ErrDeltaInconsistent, truncate(doc.ID, 200), lw.cur.Version)
		}
		if merged {
			return lw.keep(ctx, old.RunEntry)
		}
		return nil
	}
	lw.own.Rendered++
	if limit := lw.vw.MaxDocumentBytes; limit > 0 && len(doc.Body) > limit {
		return fmt.Errorf("%w: collection %s key %q: document is %d bytes, over the limit of %d",
			snapshot.ErrSource, lw.name, truncate(doc.ID, 200), len(doc.Body), limit)
	}
	sum := snapshot.Contribution(doc.ID, doc.Body)
	if inParent {
		if sum == old.Sum && int64(len(doc.Body)) == old.Len {
			if merged {
				return lw.keep(ctx, old.RunEntry)
			}
			return nil
		}
		lw.own.Changed++
		t.digest.Sub(old.Sum)
		t.bytes -= old.Len
	} else {
		lw.own.Inserted++
		t.rows++
	}
	t.digest.Add(sum)
	t.bytes += int64(len(doc.Body))
	return lw.put(ctx, doc.ID, doc.Body, sum)
}

// put writes a document, or a tombstone when body is empty, and its run entry.
func (lw *layerWriter) put(ctx context.Context, id string, body []byte, sum snapshot.Digest) error {
	lw.own.Emitted++
	if len(body) == 0 {
		lw.layer.Tombstones++
		if err := lw.enc.add(ctx, RunEntry{ID: id, Deleted: true}); err != nil {
			return err
		}
	} else {
		lw.layer.Docs++
		lw.layer.Bytes += int64(len(body))
		if err := lw.enc.add(ctx, RunEntry{ID: id, Len: int64(len(body)), Sum: sum}); err != nil {
			return err
		}
	}
	if lw.vw.req.Crash != nil {
		lw.vw.req.Crash(snapshot.CrashMidWrite, lw.own.Emitted)
	}
	doc := snapshot.Document{ID: id, Body: body}
	if err := lw.w.Write(ctx, lw.name, doc); err != nil {
		return err
	}
	return lw.ix.add(ctx, doc)
}

// keep copies an unchanged entry of a merged delta into this layer.
func (lw *layerWriter) keep(ctx context.Context, e RunEntry) error {
	lw.own.Copied++
	lw.own.Emitted++
	lw.layer.Docs++
	lw.layer.Bytes += e.Len
	if err := lw.enc.add(ctx, e); err != nil {
		return err
	}
	return lw.copies.add(ctx, e)
}

// parentOnly handles a parent entry the source does not have (joinSink): a live one
// is deleted; a merged delta's tombstone is kept.
func (lw *layerWriter) parentOnly(ctx context.Context, h fromEntry) error {
	if h.Deleted {
		lw.own.Copied++
	} else {
		lw.own.Deleted++
		lw.totals.rows--
		lw.totals.bytes -= h.Len
		lw.totals.digest.Sub(h.Sum)
	}
	return lw.put(ctx, h.ID, []byte{}, snapshot.Digest{})
}

// finish checks the join's counts, flushes what is queued, and returns the
// collection's stats and chain.
func (lw *layerWriter) finish(ctx context.Context) (snapshot.CollectionStats, error) {
	p, t := lw.plan, lw.totals
	if err := lw.copies.flush(ctx); err != nil {
		return snapshot.CollectionStats{}, err
	}
	indexes, err := lw.ix.done(ctx)
	if err != nil {
		return snapshot.CollectionStats{}, err
	}
	if live := lw.join.parent.live(); p.kind != planBase && live != p.parent.Rows {
		return snapshot.CollectionStats{}, fmt.Errorf("%w: the parent %s's fingerprints hold %d ids, its manifest %d", snapshot.ErrDeltaInconsistent, lw.cur.Version, live, p.parent.Rows)
	}
	if t.rows != t.sourceRows {
		return snapshot.CollectionStats{}, fmt.Errorf("%w: counted %d rows from the source, %d through the parent", snapshot.ErrDeltaInconsistent, t.sourceRows, t.rows)
	}
	if err := lw.enc.flush(ctx); err != nil {
		return snapshot.CollectionStats{}, err
	}
	own := lw.own
	own.Chunks, own.Indexes, own.Rebased = lw.chunks, indexes, lw.rebased
	st := snapshot.CollectionStats{Rows: t.rows, Bytes: t.bytes, Digest: t.digest.String(), Own: &own, Indexes: lw.vw.declared[lw.name]}
	switch {
	case p.kind == planBase:
		st.Layers = []snapshot.LayerRef{lw.layer}
	case own.Emitted == 0 && p.merge == 0:
		own.Kind = snapshot.LayerNone // nothing changed: no layer, the parent's chain as it is
		st.Layers = carryLayers(lw.cur, p.parent.Layers)
	default:
		st.Layers = append([]snapshot.LayerRef{lw.layer}, carryLayers(lw.cur, p.parent.Layers[p.merge:])...)
	}
	if own.Kind != snapshot.LayerNone {
		// What this layer's chain holds, counted over a parent checked: the next
		// delta's parent count, by another process too (parentEntries).
		if err := lw.w.WriteLive(ctx, lw.name, t.rows); err != nil {
			return snapshot.CollectionStats{}, err
		}
	}
	lw.prog.done(ctx)
	lw.vw.event(ctx, snapshot.EventLayerWritten, lw.name, "kind", own.Kind, "mode", own.Mode, "inserted", own.Inserted, "changed", own.Changed,
		"deleted", own.Deleted, "rendered", own.Rendered, "copied", own.Copied, "chain", len(st.Layers))
	return st, nil
}

// copier copies a merged delta's unchanged documents from the parent's chain into
// the new layer, in batches of point reads, checking each against its run entry.
type copier struct {
	st         Store
	dataset    string
	chain      []snapshot.Version
	collection string
	w          snapshot.DocumentWriter
	ix         *indexer // the layer's index entries, which copies change too
	batch      []RunEntry
}

// copyBatch is how many documents one read fetches.
const copyBatch = 500

// add queues a document to copy.
func (c *copier) add(ctx context.Context, e RunEntry) error {
	c.batch = append(c.batch, e)
	if len(c.batch) >= copyBatch {
		return c.flush(ctx)
	}
	return nil
}

// flush reads the queued documents through the parent's chain and writes them; a
// nil copier has none.
func (c *copier) flush(ctx context.Context) error {
	if c == nil || len(c.batch) == 0 {
		return nil
	}
	err := inBatches(c.batch, runEntryID, func(batch []RunEntry, ids []string) error {
		got, err := c.st.GetDocuments(ctx, snapshot.ChainRef{Dataset: c.dataset, Chain: c.chain, Collection: c.collection}, ids)
		if err != nil {
			return fmt.Errorf("read the parent's documents to merge: %w", err)
		}
		for _, e := range batch {
			body, ok := got[e.ID]
			if !ok || int64(len(body)) != e.Len || snapshot.Contribution(e.ID, body) != e.Sum {
				return fmt.Errorf("%w: the parent's document %q does not match its fingerprint", snapshot.ErrDeltaInconsistent, truncate(e.ID, 200))
			}
			doc := snapshot.Document{ID: e.ID, Body: body}
			if err := c.w.Write(ctx, c.collection, doc); err != nil {
				return err
			}
			if err := c.ix.add(ctx, doc); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.batch = c.batch[:0]
	return nil
}
