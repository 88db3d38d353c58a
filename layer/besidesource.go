package layer

import (
	"context"
	"fmt"
	"slices"

	"github.com/snapflip/snapflip/snapshot"
)

// Bases read from the source beside the stream (docs/design.md, "Held collections"):
// the Compactor's builds of a held or new collection's base.

// readsSource reports whether the Compactor reads the bases of held and new
// collections from the source.
func (c *Compactor) readsSource() bool { return c != nil && c.Source != nil }

// wantSource reports whether collection's base read from the source is in hand for
// the version read at pos, whose parent is cur: being read, read with pos's
// definition and waiting for a version, or failed and to be read again after its
// backoff; otherwise it starts one, and reports true. It is false when the Compactor
// reads no source, is not started or stopped, or cur is no layered version of its
// dataset: the version then writes the base itself.
func (c *Compactor) wantSource(cur snapshot.Manifest, collection, why string, pos snapshot.Position) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.readsSource() || c.ctx == nil || c.ctx.Err() != nil || cur.Format != snapshot.FormatLayered || cur.Dataset != c.Dataset {
		return false
	}
	failures := 0
	var resume *standing
	if b := c.builds[collection]; b != nil {
		switch {
		case !b.done:
			// Being read, or a base from storage of the chain the hold keeps: a
			// version after it ends starts the read.
			return true
		case b.source && b.err == nil && !b.taken && readWith(b.pos, pos, collection):
			return true
		case b.source && b.err != nil && c.now().Before(b.retryAt):
			return true
		case b.source && b.err != nil:
			failures = b.failures
			resume = b.standingLocked()
		}
	}
	c.startLocked(cur, collection, &baseBuild{why: why, source: true, failures: failures, want: pos, resume: resume})
	return true
}

// readWith reports whether a base read at a holds collection as a version read at b
// would: the same definition, columns and types.
func readWith(a, b snapshot.Position, collection string) bool {
	return a.SameDefinition(b, collection) && !definitionsChanged(a, b, collection)
}

// buildSource reads collection in a source snapshot of its own and writes it as one
// base layer, recording where it was read and what it holds.
func (c *Compactor) buildSource(ctx context.Context, m snapshot.Manifest, collection string, b *baseBuild) (snapshot.LayerRef, error) {
	snap, err := c.openBase(ctx, m, collection, b)
	if err != nil {
		return snapshot.LayerRef{}, fmt.Errorf("open the source: %w", err)
	}
	ds, closeSnap, err := streamOf(ctx, snap)
	if err != nil {
		return snapshot.LayerRef{}, err
	}
	defer closeSnap()
	paced := &pacedSnapshot{DeltaSnapshot: ds, pace: c.sourceLimiter(), rows: &b.rows, bytes: &b.bytes}
	st, err := c.writeBase(ctx, paced, m, collection, b, nil, "read beside the stream: "+b.why)
	if err != nil {
		return snapshot.LayerRef{}, err
	}
	c.mu.Lock()
	b.pos, b.stats = snap.Position(), st
	c.mu.Unlock()
	return st.Layers[0], nil
}

// Ready reports whether a base read from the source waits to join m: a held or new
// collection's, built (snapshot.Bases).
func (c *Compactor) Ready(m snapshot.Manifest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, b := range c.builds {
		if c.joinableLocked(m, name, b) {
			return true
		}
	}
	return false
}

// joinableLocked reports whether b, collection's build, is a base read from the
// source, built, and joins a version over m (joinsLocked). The lock is held.
func (c *Compactor) joinableLocked(m snapshot.Manifest, collection string, b *baseBuild) bool {
	return b != nil && b.source && b.done && b.err == nil && !b.taken && c.joinsLocked(m, collection, b)
}

// Holding returns the collections held in m that a version over m holds still: no
// base read from the source waits to join it (snapshot.Bases). A version's snapshot
// need not count their changes.
func (c *Compactor) Holding(m snapshot.Manifest) []string {
	if !c.readsSource() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.DeleteFunc(m.HeldCollections(), func(name string) bool { return c.joinableLocked(m, name, c.builds[name]) })
}

// joinsLocked reports whether b, a built base read from the source, joins a version
// over m: the collection is still read (in the source's collections), held or new
// in m, and the base is younger than half m's TTL. The Compactor's lock is held.
func (c *Compactor) joinsLocked(m snapshot.Manifest, collection string, b *baseBuild) bool {
	if m.Format != snapshot.FormatLayered || !slices.Contains(c.Source.Collections(), collection) {
		return false
	}
	if m.TTL > 0 && c.now().Sub(b.started) >= m.TTL/2 {
		return false
	}
	pc, ok := m.Collections[collection]
	return !ok || pc.Held != nil
}

// pacedSnapshot is a source snapshot whose reads are paced and counted: a base read
// beside the stream leaves the source and the commit path their share.
type pacedSnapshot struct {
	snapshot.DeltaSnapshot
	pace        *basePace // nil for no pace
	rows, bytes interface{ Add(int64) int64 }
}

// OnChunk passes fn on to a source that reads in chunks (snapshot.ChunkedSnapshot).
func (s *pacedSnapshot) OnChunk(fn func(ctx context.Context, last string) error) {
	if cs, ok := s.DeltaSnapshot.(snapshot.ChunkedSnapshot); ok {
		cs.OnChunk(fn)
	}
}

// pacedBatch is how many rows a paced read waits for at once.
const pacedBatch = 1000

func (s *pacedSnapshot) ScanSince(ctx context.Context, collection string, since *snapshot.Position, fn func(snapshot.Document) error) (snapshot.LayerMode, error) {
	n := 0
	return s.DeltaSnapshot.ScanSince(ctx, collection, since, func(d snapshot.Document) error {
		if n++; n%pacedBatch == 0 {
			if err := s.pace.WaitN(ctx, pacedBatch); err != nil {
				return err
			}
		}
		s.rows.Add(1)
		s.bytes.Add(int64(len(d.Body)))
		return fn(d)
	})
}

// Indexes passes on the source's indexes of the collection, when it declares them.
func (s *pacedSnapshot) Indexes(ctx context.Context, collection string) ([]snapshot.IndexDef, error) {
	if ix, ok := s.DeltaSnapshot.(snapshot.IndexedSnapshot); ok {
		return ix.Indexes(ctx, collection)
	}
	return nil, nil
}

// streamOf returns snap as the DeltaSnapshot it must be to stream a collection in
// id order, with a func that closes it however ctx ended; snap is closed when it is
// not one.
func streamOf(ctx context.Context, snap snapshot.SourceSnapshot) (snapshot.DeltaSnapshot, func(), error) {
	closeSnap := func() {
		cctx, cancel := snapshot.Detach(ctx, 0)
		defer cancel()
		_ = snap.Close(cctx)
	}
	ds, ok := snap.(snapshot.DeltaSnapshot)
	if !ok {
		closeSnap()
		return nil, nil, fmt.Errorf("the source cannot stream a collection in id order")
	}
	return ds, closeSnap, nil
}
