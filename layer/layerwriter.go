package layer

import (
	"context"
	"fmt"

	"github.com/snapflip/snapflip/snapshot"
)

// layerWriter writes one collection's own layer of a version. It merges the parent's
// fingerprints with the source's rows, both in id byte order, writing what differs:
// per id, absent from the parent → insert; present with another content → change;
// unrendered (nil body) or the same content → nothing; absent from the source →
// tombstone.
type layerWriter struct {
	vw   *versionWrite
	w    DocumentWriter
	m    *snapshot.Manifest // the version written
	cur  *snapshot.Manifest // its parent; nil for none
	name string

	kind, why  string                   // LayerBase or LayerDelta, and for a base why
	parent     snapshot.CollectionStats // the parent's, for a delta
	since      *snapshot.Position       // the parent's source position, for a delta
	merge      int                      // how many of the parent chain's newest deltas this layer merges
	head       parentHead               // the parent's entries
	changed    []snapshot.Document      // the changed rows alone, when head.sparse
	keyed      bool                     // changed came from the source's change stream
	copies     *copier                  // for a merge: the merged deltas' unchanged documents
	enc        *runEncoder              // the layer's fingerprint run
	prog       *progress                // logs a long read's progress
	chunks     int64                    // run chunks emitted
	own        *snapshot.OwnLayer       // what this layer did
	layer      snapshot.LayerRef        // the layer, as the chain names it
	sourceRows int64                    // the rows the source has, as counted by the join

	// The collection as of this version: the parent's, changed by the join.
	digest      snapshot.Digest
	rows, bytes int64
}

// newLayerWriter prepares the collection's layer of the version over its parent
// (nil for none); a Base request makes it a base.
func (vw *versionWrite) newLayerWriter(w DocumentWriter, name string) *layerWriter {
	m := &vw.req.Manifest
	lw := &layerWriter{vw: vw, w: w, m: m, cur: vw.req.Parent, name: name}
	lw.kind, lw.why = vw.nextKind(lw.cur, m.Source, name, vw.req.Base)
	if lw.kind == snapshot.LayerDelta {
		lw.parent = lw.cur.Collections[name]
		lw.since = &lw.cur.Source
	}
	return lw
}

// write writes the layer and returns the collection's stats and chain as of the
// version.
func (lw *layerWriter) write(ctx context.Context, snap snapshot.DeltaSnapshot) (snapshot.CollectionStats, error) {
	vw, name := lw.vw, lw.name
	if lw.kind == snapshot.LayerBase {
		lw.vw.event(ctx, snapshot.EventWritingBase, lw.name, "why", lw.why)
	} else if lw.sameFingerprint() {
		// The table's row versions and definitions are the parent's: nothing to read.
		st := lw.parent
		st.Layers = carryLayers(lw.cur, lw.parent.Layers)
		st.Own = &snapshot.OwnLayer{Mode: snapshot.ModeSameFingerprint}
		st.Written = st.Rows
		return st, nil
	}
	// A chain at max_layers gets a merged delta: this version's changes plus every
	// id the parent's deltas name, over the parent's base (mergeCount).
	if lw.kind == snapshot.LayerDelta && len(lw.parent.Layers) >= vw.maxLayers() {
		lw.merge = mergeCount(lw.parent.Layers)
		lw.vw.event(ctx, snapshot.EventMergingDeltas, lw.name, "deltas", lw.merge)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	digest, err := snapshot.ParseDigest(lw.parent.Digest)
	if err != nil {
		return snapshot.CollectionStats{}, err
	}
	lw.digest, lw.rows, lw.bytes = digest, lw.parent.Rows, lw.parent.Bytes
	lw.own = &snapshot.OwnLayer{Kind: lw.kind}
	lw.layer = snapshot.LayerRef{Version: lw.m.Version, Kind: lw.kind, DataTime: lw.m.StartedAt, Merged: lw.merge}
	lw.enc = newRunEncoder(0, lw.writeChunk)
	lw.prog = vw.newProgress(name, lw.parent.Rows)
	if lw.kind == snapshot.LayerDelta {
		if err := lw.readChanged(ctx, snap); err != nil {
			return snapshot.CollectionStats{}, err
		}
	}
	if err := lw.head.advance(); err != nil {
		return snapshot.CollectionStats{}, err
	}
	if lw.merge > 0 {
		// A copied entry's newest layer is one of the merged deltas: read those alone.
		lw.copies = &copier{st: vw.Store, dataset: vw.dataset, chain: lw.cur.Chain(name)[:lw.merge], collection: name, w: lw.w}
	}
	mode, err := lw.join(ctx, snap)
	lw.own.Mode = mode
	if err != nil {
		return snapshot.CollectionStats{}, err
	}
	return lw.finish(ctx)
}

// sameFingerprint reports whether the table's row versions and definitions are the
// parent's.
func (lw *layerWriter) sameFingerprint() bool {
	src, parent := lw.m.Source, lw.cur.Source
	fp := src.Fingerprints[lw.name]
	return fp != "" && fp == parent.Fingerprints[lw.name] && src.Definitions[lw.name] == parent.Definitions[lw.name]
}

// openParent starts reading the parent chain's run; a merge's holds the tombstones
// of the deltas it merges too.
func (lw *layerWriter) openParent(ctx context.Context) *chainRun {
	pr := openChainRun(ctx, lw.vw.chainSource(), lw.parent.Layers, lw.name)
	pr.keepDeleted = lw.merge > 0
	return pr
}

// writeChunk writes the layer run's next chunk.
func (lw *layerWriter) writeChunk(ctx context.Context, data []byte) error {
	n := lw.chunks
	lw.chunks++
	return lw.w.WriteChunk(ctx, lw.name, n, data)
}

// join merges the source's rows with the parent's entries, dropping the parent's
// entries past the last row. It returns how the changed rows were found.
func (lw *layerWriter) join(ctx context.Context, snap snapshot.DeltaSnapshot) (snapshot.LayerMode, error) {
	mode, err := lw.scan(ctx, snap)
	if err != nil {
		return mode, err
	}
	for lw.head.ok {
		if err := lw.dropHead(ctx); err != nil {
			return mode, err
		}
	}
	return mode, nil
}

// scan adds the source's rows: the changed rows alone when those are the whole
// change, otherwise every row as the source sends it.
func (lw *layerWriter) scan(ctx context.Context, snap snapshot.DeltaSnapshot) (snapshot.LayerMode, error) {
	if lw.head.sparse {
		mode := snapshot.ModeChangedOnly
		if lw.keyed {
			mode = snapshot.ModeStream
		}
		for _, doc := range lw.changed {
			if err := lw.add(ctx, doc); err != nil {
				return mode, err
			}
		}
		return mode, nil
	}
	return snap.ScanSince(ctx, lw.name, lw.since, func(doc snapshot.Document) error { return lw.add(ctx, doc) })
}

// add joins one source row: the parent's entries before it are dropped, and the row
// is compared with its own entry, if any.
func (lw *layerWriter) add(ctx context.Context, doc snapshot.Document) error {
	lw.sourceRows++
	lw.prog.add(ctx, len(doc.Body))
	for lw.head.ok && lw.head.entry.ID < doc.ID {
		if err := lw.dropHead(ctx); err != nil {
			return err
		}
	}
	matched := lw.head.ok && lw.head.entry.ID == doc.ID
	inParent := matched && !lw.head.entry.Deleted
	old, merged := lw.head.entry, lw.head.from < lw.merge
	if matched {
		if err := lw.head.advance(); err != nil {
			return err
		}
	}
	if doc.Body == nil {
		if !inParent {
			return fmt.Errorf("%w: id %q is unchanged since the parent %s but not in it", snapshot.ErrDeltaInconsistent, truncate(doc.ID, 200), lw.cur.Version)
		}
		if merged {
			return lw.keep(ctx, old)
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
				return lw.keep(ctx, old)
			}
			return nil
		}
		lw.own.Changed++
		lw.digest.Sub(old.Sum)
		lw.bytes -= old.Len
	} else {
		lw.own.Inserted++
		lw.rows++
	}
	lw.digest.Add(sum)
	lw.bytes += int64(len(doc.Body))
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
	return lw.w.Write(ctx, lw.name, snapshot.Document{ID: id, Body: body})
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

// dropHead handles a parent entry the source does not have: a live one is deleted;
// a merged delta's tombstone is kept.
func (lw *layerWriter) dropHead(ctx context.Context) error {
	h := lw.head.entry
	if h.Deleted {
		lw.own.Copied++
	} else {
		lw.own.Deleted++
		lw.rows--
		lw.bytes -= h.Len
		lw.digest.Sub(h.Sum)
	}
	if err := lw.put(ctx, h.ID, []byte{}, snapshot.Digest{}); err != nil {
		return err
	}
	return lw.head.advance()
}

// finish checks the join's counts, flushes what is queued, and returns the
// collection's stats and chain.
func (lw *layerWriter) finish(ctx context.Context) (snapshot.CollectionStats, error) {
	if err := lw.copies.flush(ctx); err != nil {
		return snapshot.CollectionStats{}, err
	}
	if lw.kind == snapshot.LayerDelta && lw.head.seen != lw.parent.Rows {
		return snapshot.CollectionStats{}, fmt.Errorf("%w: the parent %s's fingerprints hold %d ids, its manifest %d", snapshot.ErrDeltaInconsistent, lw.cur.Version, lw.head.seen, lw.parent.Rows)
	}
	if lw.rows != lw.sourceRows {
		return snapshot.CollectionStats{}, fmt.Errorf("%w: counted %d rows from the source, %d through the parent", snapshot.ErrDeltaInconsistent, lw.sourceRows, lw.rows)
	}
	if err := lw.enc.flush(ctx); err != nil {
		return snapshot.CollectionStats{}, err
	}
	own := lw.own
	own.Chunks = lw.chunks
	st := snapshot.CollectionStats{Rows: lw.rows, Bytes: lw.bytes, Digest: lw.digest.String(), Own: own}
	switch {
	case lw.kind == snapshot.LayerBase:
		st.Layers = []snapshot.LayerRef{lw.layer}
	case own.Emitted == 0 && lw.merge == 0:
		own.Kind = "" // nothing changed: no layer, the parent's chain as it is
		st.Layers = carryLayers(lw.cur, lw.parent.Layers)
	default:
		st.Layers = append([]snapshot.LayerRef{lw.layer}, carryLayers(lw.cur, lw.parent.Layers[lw.merge:])...)
	}
	if own.Kind != "" {
		// What this layer's chain holds, counted over a parent checked: the next
		// delta's parent count, by another process too (parentEntries).
		if err := lw.w.WriteLive(ctx, lw.name, lw.rows); err != nil {
			return snapshot.CollectionStats{}, err
		}
	}
	lw.prog.done(ctx)
	lw.vw.event(ctx, snapshot.EventLayerWritten, lw.name, "kind", own.Kind, "mode", own.Mode, "inserted", own.Inserted, "changed", own.Changed,
		"deleted", own.Deleted, "rendered", own.Rendered, "copied", own.Copied, "chain", len(st.Layers))
	return st, nil
}

// parentHead walks the parent's entries in id order: its chain's run or, when only
// the changed rows are read (sparse), the entries matched to them.
type parentHead struct {
	run     *chainRun   // nil for a base
	sparse  bool        // read matched, not run
	matched []fromEntry // when sparse, the entries not yet walked
	// entry is the next entry not yet merged: a live one, or, when merging, a
	// tombstone of a merged delta; ok says there is one, from is its layer's index
	// in the chain.
	entry RunEntry
	ok    bool
	from  int
	// seen counts the live entries: read from run, or, when sparse, the parent's.
	seen int64
}

// advance moves to the next entry.
func (h *parentHead) advance() error {
	if h.sparse {
		h.ok = len(h.matched) > 0
		if h.ok {
			h.entry, h.from, h.matched = h.matched[0].RunEntry, h.matched[0].from, h.matched[1:]
		}
		return nil
	}
	if h.run == nil {
		return nil
	}
	var err error
	h.entry, h.ok, err = h.run.next()
	h.from = h.run.from
	if h.ok && !h.entry.Deleted {
		h.seen++
	}
	return err
}

// copier copies a merged delta's unchanged documents from the parent's chain into
// the new layer, in batches of point reads, checking each against its run entry.
type copier struct {
	st         Store
	dataset    string
	chain      []snapshot.Version
	collection string
	w          DocumentWriter
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
	ids := make([]string, len(c.batch))
	for i, e := range c.batch {
		ids[i] = e.ID
	}
	got, err := c.st.GetDocuments(ctx, c.dataset, c.chain, c.collection, ids)
	if err != nil {
		return fmt.Errorf("read the parent's documents to merge: %w", err)
	}
	for _, e := range c.batch {
		body, ok := got[e.ID]
		if !ok || int64(len(body)) != e.Len || snapshot.Contribution(e.ID, body) != e.Sum {
			return fmt.Errorf("%w: the parent's document %q does not match its fingerprint", snapshot.ErrDeltaInconsistent, truncate(e.ID, 200))
		}
		if err := c.w.Write(ctx, c.collection, snapshot.Document{ID: e.ID, Body: body}); err != nil {
			return err
		}
	}
	c.batch = c.batch[:0]
	return nil
}
