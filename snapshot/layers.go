package snapshot

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Layered versions (docs/design.md, "Layered versions"). In incremental mode a
// publish writes, per collection, one layer under its own version: a delta holding
// only what differs from the parent (the version current when the sync began) plus
// tombstones for deleted ids, or a base holding every row. The manifest lists each
// collection's chain, newest first, down to a base. Every layer also writes its
// fingerprint run, the entries a later delta is computed against, so finding what
// changed reads neither the parent's documents nor unchanged rows as JSON.

// Layering defaults.
const (
	DefaultMaxLayers   = 8
	DefaultRebaseRatio = 0.5
)

// errDeltaInconsistent reports a source row the parent should hold but does not,
// or a parent run that disagrees with the parent's counts: the delta cannot be
// trusted, so the publish is redone as bases.
var errDeltaInconsistent = errors.New("delta inconsistent with its parent")

// nextKind returns the kind of collection name's next layer: LayerDelta, or
// LayerBase with why a delta will not do.
func (p *Publisher) nextKind(cur *Manifest, pos Position, name string, forced bool) (kind, why string) {
	if forced {
		return LayerBase, "the last delta was inconsistent with its parent"
	}
	if cur == nil {
		return LayerBase, "first version"
	}
	pc, ok := cur.Collections[name]
	switch {
	case !ok:
		return LayerBase, "new collection"
	case len(pc.Layers) == 0:
		return LayerBase, "the parent is a full copy, without fingerprints"
	case cur.Source.Config != pos.Config:
		return LayerBase, "the collection definitions changed"
	case p.maxLayers() < 2:
		return LayerBase, fmt.Sprintf("max_layers is %d", p.maxLayers())
	}
	var deltaRows, baseRows int64
	for _, l := range pc.Layers {
		if l.Kind == LayerBase {
			baseRows = l.Docs
		} else {
			deltaRows += l.Docs + l.Tombstones
		}
	}
	if float64(deltaRows) > p.rebaseRatio()*float64(max(baseRows, 1)) {
		return LayerBase, fmt.Sprintf("the deltas hold %d rows against the base's %d (rebase_ratio %g)", deltaRows, baseRows, p.rebaseRatio())
	}
	if p.TTL > 0 {
		oldest := layersDataTime(cur, pc.Layers)
		if age := p.now().Sub(oldest); age >= p.TTL/2 {
			return LayerBase, fmt.Sprintf("the chain's oldest layer is %s old, past half the TTL", age.Round(time.Second))
		}
	}
	return LayerDelta, ""
}

// layersDataTime returns the oldest data time of the layers as version m records
// them (a refresh of m rewrote them all).
func layersDataTime(m *Manifest, layers []LayerRef) time.Time {
	var t time.Time
	for _, l := range layers {
		lt := l.DataTime
		if m.RefreshedAt.After(lt) {
			lt = m.RefreshedAt
		}
		if t.IsZero() || lt.Before(t) {
			t = lt
		}
	}
	return t
}

func (p *Publisher) maxLayers() int {
	if p.MaxLayers > 0 {
		return p.MaxLayers
	}
	return DefaultMaxLayers
}

func (p *Publisher) rebaseRatio() float64 {
	if p.RebaseRatio > 0 {
		return p.RebaseRatio
	}
	return DefaultRebaseRatio
}

// writeLayers writes each collection's own layer for version m against the parent
// cur (nil for none), filling m's stats with the version's totals (exactly what a
// full copy would record) and its chains.
func (p *Publisher) writeLayers(ctx context.Context, snap DeltaSnapshot, m *Manifest, cur *Manifest, forceBase bool) error {
	w := p.Store.NewWriter(ctx, p.Dataset, m.Version)
	for _, name := range p.Source.Collections() {
		if err := p.writeLayer(ctx, snap, w, m, cur, name, forceBase); err != nil {
			_, _ = w.Close(ctx)
			return fmt.Errorf("collection %s: %w", name, err)
		}
	}
	written, err := w.Close(ctx)
	m.BytesWritten = w.BytesWritten()
	if err != nil {
		return fmt.Errorf("write documents: %w", err)
	}
	chunks := w.ChunksWritten()
	for name, st := range m.Collections {
		if st.Own != nil {
			own := *st.Own
			own.Written, own.ChunksWritten = written[name], chunks[name]
			st.Own = &own
			if own.Written == own.Emitted && own.ChunksWritten == own.Chunks {
				st.Written = st.Rows
			}
		}
		m.Collections[name] = st
	}
	return nil
}

// writeLayer merges the parent's fingerprints with the source's rows, both in id byte
// order, writing what differs: per id, absent from the parent → insert; present with
// another content → change; unrendered (nil body) or the same content → nothing;
// absent from the source → tombstone.
func (p *Publisher) writeLayer(ctx context.Context, snap DeltaSnapshot, w DocumentWriter, m *Manifest, cur *Manifest, name string, forceBase bool) error {
	log := p.log().With("dataset", p.Dataset, "version", m.Version, "collection", name)
	kind, why := p.nextKind(cur, m.Source, name, forceBase)
	var parent CollectionStats
	var since *Position
	if kind == LayerDelta {
		parent = cur.Collections[name]
		since = &cur.Source
		if fp := m.Source.Fingerprints[name]; fp != "" && fp == cur.Source.Fingerprints[name] &&
			m.Source.Definitions[name] == cur.Source.Definitions[name] {
			// The table's row versions and definitions are the parent's: nothing to read.
			st := parent
			st.Layers = carryLayers(cur, parent.Layers)
			st.Own = &OwnLayer{Mode: ModeSameFingerprint}
			st.Written = st.Rows
			m.Collections[name] = st
			return nil
		}
	} else {
		log.InfoContext(ctx, "writing a base layer", "why", why)
	}

	// A chain at max_layers gets a merged delta: this version's changes plus every
	// id the parent's deltas name, over the parent's base (mergeDeltas).
	merge := 0
	if kind == LayerDelta && len(parent.Layers) >= p.maxLayers() {
		merge = mergeCount(parent.Layers)
		log.InfoContext(ctx, "merging the chain's newest deltas into this version's layer", "deltas", merge)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var pr *chainRun
	if kind == LayerDelta {
		pr = openChainRun(ctx, p.Store, p.Runs, p.Dataset, parent.Layers, name)
		pr.keepDeleted = merge > 0
	}
	digest, err := ParseDigest(parent.Digest)
	if err != nil {
		return err
	}
	rows, bytes := parent.Rows, parent.Bytes
	own := &OwnLayer{Kind: kind}
	layer := LayerRef{Version: m.Version, Kind: kind, DataTime: m.StartedAt, Merged: merge}
	var chunk, parentSeen, sourceRows int64
	enc := newRunEncoder(0, func(ctx context.Context, data []byte) error {
		n := chunk
		chunk++
		return w.WriteChunk(ctx, name, n, data)
	})
	prog := newProgress(p.log(), p.Dataset, m.Version, name, parent.Rows, p.progressEvery(), p.now)
	put := func(ctx context.Context, id string, body []byte, sum Digest) error {
		own.Emitted++
		if len(body) == 0 {
			layer.Tombstones++
			if err := enc.add(ctx, RunEntry{ID: id, Deleted: true}); err != nil {
				return err
			}
		} else {
			layer.Docs++
			layer.Bytes += int64(len(body))
			if err := enc.add(ctx, RunEntry{ID: id, Len: int64(len(body)), Sum: sum}); err != nil {
				return err
			}
		}
		if p.Crash != nil {
			crash(p.Crash, CrashMidWrite, own.Emitted)
		}
		return w.Write(ctx, name, Document{ID: id, Body: body})
	}
	// A delta from a source that can send only the changed rows reads those alone
	// when no row was deleted (changedOnly); the parent entries they replace are then
	// all the join needs, and, for a merge, the merged deltas' entries (sparseMerge).
	var changed []Document
	var matched []fromEntry
	sparse := false
	if cs, ok := snap.(ChangedScanner); ok && kind == LayerDelta {
		var consumed bool
		if sparse, consumed, err = p.changedOnly(ctx, cs, pr, parent, name, since, &changed, &matched, &sourceRows, &parentSeen); err != nil {
			return err
		}
		if consumed && !sparse { // the parent's run was read (its readers end with ctx): again, for the whole join
			pr = openChainRun(ctx, p.Store, p.Runs, p.Dataset, parent.Layers, name)
			pr.keepDeleted = merge > 0
			changed, matched, sourceRows, parentSeen = nil, nil, 0, 0
		}
		if sparse && merge > 0 {
			if changed, matched, err = p.sparseMerge(ctx, parent, name, merge, changed, matched, &sourceRows); err != nil {
				return err
			}
		}
	}

	// head is the parent's next entry not yet merged: a live one, or, when merging,
	// a tombstone of a merged delta. headFrom is its layer's index in the chain.
	var head RunEntry
	var hasHead bool
	var headFrom int
	advance := func() error {
		if sparse {
			hasHead = len(matched) > 0
			if hasHead {
				head, headFrom, matched = matched[0].RunEntry, matched[0].from, matched[1:]
			}
			return nil
		}
		if pr == nil {
			return nil
		}
		var err error
		head, hasHead, err = pr.next()
		headFrom = pr.from
		if hasHead && !head.Deleted {
			parentSeen++
		}
		return err
	}
	if err := advance(); err != nil {
		return err
	}
	var copies *copier
	if merge > 0 {
		// A copied entry's newest layer is one of the merged deltas: read those alone.
		copies = &copier{st: p.Store, dataset: p.Dataset, chain: cur.Chain(name)[:merge], collection: name, w: w}
	}
	// keep copies an unchanged entry of a merged delta into this layer.
	keep := func(ctx context.Context, e RunEntry) error {
		own.Copied++
		own.Emitted++
		layer.Docs++
		layer.Bytes += e.Len
		if err := enc.add(ctx, e); err != nil {
			return err
		}
		return copies.add(ctx, e)
	}
	deleteHead := func(ctx context.Context) error {
		own.Deleted++
		rows--
		bytes -= head.Len
		digest.Sub(head.Sum)
		if err := put(ctx, head.ID, []byte{}, Digest{}); err != nil {
			return err
		}
		return advance()
	}
	// dropHead handles a parent entry the source does not have: a live one is
	// deleted; a merged delta's tombstone is kept.
	dropHead := func(ctx context.Context) error {
		if !head.Deleted {
			return deleteHead(ctx)
		}
		own.Copied++
		if err := put(ctx, head.ID, []byte{}, Digest{}); err != nil {
			return err
		}
		return advance()
	}
	onDoc := func(doc Document) error {
		sourceRows++
		prog.add(ctx, len(doc.Body))
		for hasHead && head.ID < doc.ID {
			if err := dropHead(ctx); err != nil {
				return err
			}
		}
		matched := hasHead && head.ID == doc.ID
		inParent := matched && !head.Deleted
		old, merged := head, headFrom < merge
		if matched {
			if err := advance(); err != nil {
				return err
			}
		}
		if doc.Body == nil {
			if !inParent {
				return fmt.Errorf("%w: id %q is unchanged since the parent %s but not in it", errDeltaInconsistent, truncate(doc.ID, 200), cur.Version)
			}
			if merged {
				return keep(ctx, old)
			}
			return nil
		}
		own.Rendered++
		if p.MaxDocumentBytes > 0 && len(doc.Body) > p.MaxDocumentBytes {
			return fmt.Errorf("%w: collection %s key %q: document is %d bytes, over the limit of %d",
				ErrSource, name, truncate(doc.ID, 200), len(doc.Body), p.MaxDocumentBytes)
		}
		sum := Contribution(doc.ID, doc.Body)
		if inParent {
			if sum == old.Sum && int64(len(doc.Body)) == old.Len {
				if merged {
					return keep(ctx, old)
				}
				return nil
			}
			own.Changed++
			digest.Sub(old.Sum)
			bytes -= old.Len
		} else {
			own.Inserted++
			rows++
		}
		digest.Add(sum)
		bytes += int64(len(doc.Body))
		return put(ctx, doc.ID, doc.Body, sum)
	}
	var mode LayerMode
	if sparse {
		mode = ModeChangedOnly
		for _, doc := range changed {
			if err = onDoc(doc); err != nil {
				break
			}
		}
	} else {
		var scanned string
		scanned, err = snap.ScanSince(ctx, name, since, onDoc)
		mode = LayerMode(scanned)
	}
	own.Mode = mode
	if err != nil {
		return err
	}
	for hasHead {
		if err := dropHead(ctx); err != nil {
			return err
		}
	}
	if err := copies.flush(ctx); err != nil {
		return err
	}
	if kind == LayerDelta && parentSeen != parent.Rows {
		return fmt.Errorf("%w: the parent %s's fingerprints hold %d ids, its manifest %d", errDeltaInconsistent, cur.Version, parentSeen, parent.Rows)
	}
	if rows != sourceRows {
		return fmt.Errorf("%w: counted %d rows from the source, %d through the parent", errDeltaInconsistent, sourceRows, rows)
	}
	if err := enc.flush(ctx); err != nil {
		return err
	}
	own.Chunks = chunk
	st := CollectionStats{Rows: rows, Bytes: bytes, Digest: digest.String(), Own: own}
	switch {
	case kind == LayerBase:
		st.Layers = []LayerRef{layer}
	case own.Emitted == 0 && merge == 0:
		own.Kind = "" // nothing changed: no layer, the parent's chain as it is
		st.Layers = carryLayers(cur, parent.Layers)
	default:
		st.Layers = append([]LayerRef{layer}, carryLayers(cur, parent.Layers[merge:])...)
	}
	m.Collections[name] = st
	prog.done(ctx)
	log.InfoContext(ctx, "layer written", "kind", own.Kind, "mode", mode, "inserted", own.Inserted, "changed", own.Changed,
		"deleted", own.Deleted, "rendered", own.Rendered, "copied", own.Copied, "chain", len(st.Layers))
	return nil
}

// mergeCount returns how many of a full chain's newest layers (newest first, a base
// last) the next delta merges, size-tiered: the fewest, at least two, after which the
// next older delta holds more entries than they do together; or every delta. Layers so
// grow older and larger in tiers, and a row is copied again only when its tier merges
// into a larger one (a logarithmic number of times), not at every merge: under a
// steady stream of changes a merge costs about what the newest tiers hold, not all the
// deltas since the base.
func mergeCount(layers []LayerRef) int {
	deltas := len(layers) - 1
	var sum int64
	for k := range deltas {
		sum += layers[k].Docs + layers[k].Tombstones
		if k+1 >= 2 && k+1 < deltas && layers[k+1].Docs+layers[k+1].Tombstones > sum {
			return k + 1
		}
	}
	return deltas
}

// carryLayers copies the parent's layers into a new chain; a refresh of the parent
// rewrote them all, so their data time is at least its.
func carryLayers(parent *Manifest, layers []LayerRef) []LayerRef {
	out := make([]LayerRef, len(layers))
	for i, l := range layers {
		if parent.RefreshedAt.After(l.DataTime) {
			l.DataTime = parent.RefreshedAt
		}
		out[i] = l
	}
	return out
}

// copier copies a merged delta's unchanged documents from the parent's chain into
// the new layer, in batches of point reads, checking each against its run entry.
type copier struct {
	st         PublishStore
	dataset    string
	chain      []Version
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
		if !ok || int64(len(body)) != e.Len || Contribution(e.ID, body) != e.Sum {
			return fmt.Errorf("%w: the parent's document %q does not match its fingerprint", errDeltaInconsistent, truncate(e.ID, 200))
		}
		if err := c.w.Write(ctx, c.collection, Document{ID: e.ID, Body: body}); err != nil {
			return err
		}
	}
	c.batch = c.batch[:0]
	return nil
}

// ChangedScanner is a DeltaSnapshot that can send only the rows changed since a
// parent, when it can tell them by row version.
type ChangedScanner interface {
	// ScanChanged calls fn with the collection's rows changed since the snapshot at
	// since, with their JSON, in strictly increasing id byte order, and returns the
	// collection's row count in this snapshot. ok is false, and fn never called, when
	// the rows changed cannot be told apart (ScanSince's content modes) or more than
	// max changed.
	ScanChanged(ctx context.Context, collection string, since *Position, max int64, fn func(Document) error) (total int64, ok bool, err error)
}

// LayerMode says how a publish found a collection's changed rows (OwnLayer.Mode).
type LayerMode string

// Layer modes of the publisher's own; a source's ScanSince names the others.
const (
	// ModeChangedOnly: a delta read from the changed rows alone.
	ModeChangedOnly LayerMode = "row-version, changed rows only"
	// ModeSameFingerprint: nothing read, the table's row versions and definitions
	// being the parent's.
	ModeSameFingerprint LayerMode = "unchanged: same fingerprint"
)

// maxChangedOnly bounds the changed rows held in memory to be read that way.
const maxChangedOnly = 20_000

// changedOnly reads the collection's changed rows alone and matches them with the
// parent's chain: looked up in the run cache's decoded runs when every run of the
// chain is there, otherwise by reading pr to its end. The parent's entries for the
// changed ids go to matched, in order. It reports whether they are the whole change:
// with I of them not in the parent, no row was deleted exactly when the parent's
// count plus I is the source's count (the source's other rows are, by row version,
// the parent's).
// Otherwise (a row deleted, too many changed, no row versions) the caller reads every
// id, reading pr again if consumed; sourceRows and parentSeen are set for the join's
// checks.
func (p *Publisher) changedOnly(ctx context.Context, cs ChangedScanner, pr *chainRun, parent CollectionStats, name string,
	since *Position, changed *[]Document, matched *[]fromEntry, sourceRows, parentSeen *int64) (ok, consumed bool, err error) {
	total, ok, err := cs.ScanChanged(ctx, name, since, maxChangedOnly, func(d Document) error {
		*changed = append(*changed, d)
		return nil
	})
	if err != nil || !ok {
		return false, false, err
	}
	var seen, inParent int64
	if runs, err := p.cachedRuns(ctx, parent, name); err != nil || runs != nil {
		if err != nil {
			return false, false, err
		}
		// Each changed id's parent entry is its newest layer's: looked up, not merged.
		for _, d := range *changed {
			for i, r := range runs {
				if e, ok := r.find(d.ID); ok {
					if !e.Deleted {
						*matched = append(*matched, fromEntry{e, i})
						inParent++
					}
					break
				}
			}
		}
		return wholeChange(parent, total, *changed, inParent, parent.Rows, sourceRows, parentSeen), false, nil
	}
	i := 0
	for {
		e, more, err := pr.next()
		if err != nil {
			return false, true, err
		}
		if !more {
			break
		}
		if e.Deleted { // a merge's chain run names tombstones too
			continue
		}
		seen++
		for i < len(*changed) && (*changed)[i].ID < e.ID {
			i++
		}
		if i < len(*changed) && (*changed)[i].ID == e.ID {
			*matched = append(*matched, fromEntry{e, pr.from})
			inParent++
			i++
		}
	}
	if seen != parent.Rows {
		return false, true, fmt.Errorf("%w: the parent's fingerprints hold %d ids, its manifest %d", errDeltaInconsistent, seen, parent.Rows)
	}
	return wholeChange(parent, total, *changed, inParent, seen, sourceRows, parentSeen), true, nil
}

// fromEntry is a parent entry with the index in the chain of the layer it is from.
type fromEntry struct {
	RunEntry
	from int
}

// sparseMerge adds to a merge read from the changed rows alone (changed, and their
// parent entries matched) every entry of the merged deltas (the chain's newest merge
// layers) whose id did not change: as a parent entry, and, when live, as a document
// unchanged since the parent, so that the join keeps it (copies it, or keeps its
// tombstone) as it does reading every id. sourceRows is lowered by the unchanged
// documents added, which the join counts.
func (p *Publisher) sparseMerge(ctx context.Context, parent CollectionStats, name string, merge int,
	changed []Document, matched []fromEntry, sourceRows *int64) ([]Document, []fromEntry, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mr := openChainRun(ctx, p.Store, p.Runs, p.Dataset, parent.Layers[:merge], name)
	mr.keepDeleted = true
	docs := make([]Document, 0, len(changed))
	heads := make([]fromEntry, 0, len(matched))
	i, j := 0, 0
	for {
		e, ok, err := mr.next()
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			break
		}
		for ; i < len(changed) && changed[i].ID < e.ID; i++ {
			docs = append(docs, changed[i])
		}
		for ; j < len(matched) && matched[j].ID < e.ID; j++ {
			heads = append(heads, matched[j])
		}
		if i < len(changed) && changed[i].ID == e.ID {
			continue // changed: its document and parent entry follow
		}
		heads = append(heads, fromEntry{e, mr.from})
		if !e.Deleted {
			docs = append(docs, Document{ID: e.ID}) // no body: unchanged since the parent
			*sourceRows--
		}
	}
	return append(docs, changed[i:]...), append(heads, matched[j:]...), nil
}

// wholeChange reports whether the changed rows, inParent of them in the parent, are
// the whole change (see changedOnly): no row was deleted exactly when the parent's
// count plus the new ids is the source's total. If so it sets the join's counts.
func wholeChange(parent CollectionStats, total int64, changed []Document, inParent, seen int64, sourceRows, parentSeen *int64) bool {
	if parent.Rows+int64(len(changed))-inParent != total {
		return false // rows were deleted: every id is needed
	}
	*sourceRows = total - int64(len(changed)) // onDoc counts the changed ones
	*parentSeen = seen
	return true
}

// cachedRuns returns the parent chain's runs (newest first) decoded from the run
// cache, for lookups; nil when there is no cache or a run is over its budget. It
// checks what the whole-chain merge checks: each run's live entries and tombstones
// against its layer's counts, and the ids the chain holds live against the parent's
// row count (RunCache.liveCount).
func (p *Publisher) cachedRuns(ctx context.Context, parent CollectionStats, name string) ([]*decodedRun, error) {
	if p.Runs == nil {
		return nil, nil
	}
	runs := make([]*decodedRun, len(parent.Layers))
	for i, l := range parent.Layers {
		r, err := p.Runs.run(ctx, p.Dataset, l.Version, name, l.Docs+l.Tombstones)
		if err != nil || r == nil {
			return nil, err
		}
		if r.docs != l.Docs || r.tomb != l.Tombstones {
			return nil, fmt.Errorf("%w: layer %s's fingerprints of %s hold %d documents and %d tombstones, its manifest %d and %d",
				errDeltaInconsistent, l.Version, name, r.docs, r.tomb, l.Docs, l.Tombstones)
		}
		runs[i] = r
	}
	if live := p.Runs.liveCount(p.Dataset, name, parent.Layers, runs); live != parent.Rows {
		return nil, fmt.Errorf("%w: the parent's fingerprints hold %d ids, its manifest %d", errDeltaInconsistent, live, parent.Rows)
	}
	return runs, nil
}
