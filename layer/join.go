package layer

import (
	"context"

	"github.com/snapflip/snapflip/snapshot"
)

// A delta is a merge-join of the parent's entries with the source's rows, both in id
// byte order. The same join, written once here, also finds the parent's entries of
// the changed ids (matchRun) and adds a merge's unchanged entries to the changed rows
// (sparseMerge), and, read side, tells a merged delta's copies from its changes
// (changeWalk); what each does with the pairs it meets is a joinSink.

// fromEntry is a parent entry with the index in the chain of the layer it is from.
type fromEntry struct {
	RunEntry
	from int
}

// parentCursor yields a parent's entries in strictly increasing id byte order.
type parentCursor interface {
	// next returns the next entry; ok is false at the end, and err is not nil when
	// the parent cannot be read further.
	next() (e fromEntry, ok bool, err error)
	// live returns how many live ids the parent holds: counted so far, for a cursor
	// that reads them all, or known beforehand.
	live() int64
}

// runCursor is a parentCursor over a chain's fingerprint run: every entry the chain
// holds (with the tombstones of a run that keeps them), counting the live ones.
type runCursor struct {
	run  *chainRun
	seen int64
}

// openRunCursor starts reading the layers' run of the collection; keepDeleted yields
// their tombstones too. Cancel ctx to stop early.
func openRunCursor(ctx context.Context, src chainSource, layers []snapshot.LayerRef, collection string, keepDeleted bool) *runCursor {
	run := openChainRun(ctx, src, layers, collection)
	run.keepDeleted = keepDeleted
	return &runCursor{run: run}
}

func (c *runCursor) next() (fromEntry, bool, error) {
	e, ok, err := c.run.next()
	if ok && !e.Deleted {
		c.seen++
	}
	return fromEntry{e, c.run.from}, ok, err
}

func (c *runCursor) live() int64 { return c.seen }

// sliceCursor is a parentCursor over entries already read (the parent's entries of
// the changed ids), of a parent known to hold liveIDs live ids.
type sliceCursor struct {
	entries []fromEntry
	liveIDs int64
}

func (c *sliceCursor) next() (fromEntry, bool, error) {
	if len(c.entries) == 0 {
		return fromEntry{}, false, nil
	}
	e := c.entries[0]
	c.entries = c.entries[1:]
	return e, true, nil
}

func (c *sliceCursor) live() int64 { return c.liveIDs }

// joinSink is what a mergeJoin tells of each id it meets.
type joinSink interface {
	// row receives a source row and, when found, the parent's entry of its id.
	row(ctx context.Context, doc snapshot.Document, e fromEntry, found bool) error
	// parentOnly receives a parent entry whose id the source sent no row for.
	parentOnly(ctx context.Context, e fromEntry) error
}

// skipSink is a joinSink for a join that only seeks the parent's entries of ids.
type skipSink struct{}

func (skipSink) row(context.Context, snapshot.Document, fromEntry, bool) error { return nil }
func (skipSink) parentOnly(context.Context, fromEntry) error                   { return nil }

// mergeJoin joins source rows, pushed in strictly increasing id byte order, with a
// parent cursor's entries.
type mergeJoin struct {
	parent parentCursor
	to     joinSink
	head   fromEntry // the parent's next entry not yet joined, when ok
	ok     bool
}

// startJoin reads the parent's first entry.
func startJoin(parent parentCursor, to joinSink) (*mergeJoin, error) {
	j := &mergeJoin{parent: parent, to: to}
	return j, j.advance()
}

func (j *mergeJoin) advance() error {
	var err error
	j.head, j.ok, err = j.parent.next()
	return err
}

// row joins the source's next row: the parent's entries before it go to parentOnly,
// then the row, with its entry if the parent has one.
func (j *mergeJoin) row(ctx context.Context, doc snapshot.Document) error {
	e, found, err := j.seek(ctx, doc.ID)
	if err != nil {
		return err
	}
	return j.to.row(ctx, doc, e, found)
}

// seek moves the join to id, which is after every id sought or joined before: the
// parent's entries before it go to parentOnly, and its own entry, if the parent has
// one, is returned and consumed.
func (j *mergeJoin) seek(ctx context.Context, id string) (fromEntry, bool, error) {
	if err := j.dropBefore(ctx, id, true); err != nil {
		return fromEntry{}, false, err
	}
	e, found := j.head, j.ok && j.head.ID == id
	if found {
		if err := j.advance(); err != nil {
			return fromEntry{}, false, err
		}
	}
	return e, found, nil
}

// end hands the parent's entries past the last row to parentOnly.
func (j *mergeJoin) end(ctx context.Context) error {
	return j.dropBefore(ctx, "", false)
}

// dropBefore hands the parent's entries before id (every one, unless bounded) to
// parentOnly.
func (j *mergeJoin) dropBefore(ctx context.Context, id string, bounded bool) error {
	for j.ok && (!bounded || j.head.ID < id) {
		if err := j.to.parentOnly(ctx, j.head); err != nil {
			return err
		}
		if err := j.advance(); err != nil {
			return err
		}
	}
	return nil
}
