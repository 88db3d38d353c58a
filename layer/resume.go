package layer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// Resuming a base read from the source (docs/design.md, "Bases in chunks"). A base
// read in chunks records, as each chunk ends and what it wrote is in storage, where
// it stands: the position it is read at, the last id, the documents written through
// it, and the layer that holds them (snapshot.BaseStatus). A read that stops (the
// syncer killed or stopped, a chunk failed) goes on from there: the documents
// written are read back from storage into a new layer, and the source is read from
// the id after, so that no more than a chunk is read from the source again.

// standing is where a base read from the source in chunks stands: its documents up
// to the id through, rows of them, are in storage under layer, read at at.
type standing struct {
	layer   snapshot.Version
	at      snapshot.Position
	through string
	rows    int64
	started time.Time
	// plan and cuts, for a base shared by the replicas, name its parts.
	plan snapshot.Version
	cuts []string
}

// standingLocked returns where b stands, if it is a base read in chunks that wrote
// a chunk; nil otherwise. The Compactor's lock is held.
func (b *baseBuild) standingLocked() *standing {
	if b.stands.through == "" && b.stands.plan == "" {
		return nil
	}
	st := b.stands
	return &st
}

// standFrom takes, for b, where an unfinished read of the collection's base stands
// when b has no such place yet: from its record in storage, read before b's own
// records replace it, which carry that place on until b goes past it.
func (c *Compactor) standFrom(ctx context.Context, collection string, b *baseBuild) {
	r := b.resume
	if r == nil {
		r = c.recorded(ctx, collection)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b.resume = r; r != nil {
		b.stands = *r
	}
}

// chunkDone records that b's documents through last, rows of them, are in storage:
// b stands there. It returns once the record is written, so that a syncer killed
// right after reads no more than from there again.
func (c *Compactor) chunkDone(collection string, b *baseBuild) func(ctx context.Context, last string, rows int64) error {
	return func(ctx context.Context, last string, rows int64) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		b.stands.layer, b.stands.through, b.stands.rows = b.layer, last, rows
		c.recordLocked(ctx, collection, b, "")
		c.awaitRecordsLocked()
		return nil
	}
}

// openBase opens the source for b, a base read from the source: going on where an
// unfinished read of the collection stands (b.resume, or the collection's record in
// storage) when it can, else from the start.
func (c *Compactor) openBase(ctx context.Context, m snapshot.Manifest, collection string, b *baseBuild) (snapshot.SourceSnapshot, error) {
	if r := c.resumable(ctx, m, collection, b); r != nil {
		snap, err := c.resumeBase(ctx, collection, b, r)
		if err == nil {
			return c.shareOrClose(ctx, collection, b, snap)
		}
		if !errors.Is(err, snapshot.ErrCannotResume) {
			return nil, err
		}
		c.event(ctx, snapshot.EventBaseReadAgain, collection, "layer", r.layer, "through", r.through, "why", err)
	}
	var snap snapshot.SourceSnapshot
	var err error
	if bo, ok := c.Source.(snapshot.BaseOpener); ok {
		snap, err = bo.OpenBase(ctx, collection)
	} else {
		snap, err = c.Source.Open(ctx)
	}
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	b.stands = standing{at: snap.Position(), started: b.started}
	c.mu.Unlock()
	return c.shareOrClose(ctx, collection, b, snap)
}

// shareOrClose returns snap shared by the replicas (share), closing it when it
// fails.
func (c *Compactor) shareOrClose(ctx context.Context, collection string, b *baseBuild, snap snapshot.SourceSnapshot) (snapshot.SourceSnapshot, error) {
	shared, err := c.share(ctx, collection, b, snap)
	if err != nil {
		cctx, cancel := snapshot.Detach(ctx, 0)
		defer cancel()
		_ = snap.Close(cctx)
		return nil, err
	}
	return shared, nil
}

// recorded returns where the collection's record in storage says an unfinished
// read of its base stands, if it does: a base still in hand that wrote a chunk.
// It is read before b's own first record replaces it.
func (c *Compactor) recorded(ctx context.Context, collection string) *standing {
	if c.Records == nil {
		return nil
	}
	recs, err := c.Records.ListBases(ctx, c.Dataset)
	if err != nil {
		return nil
	}
	for _, rec := range recs {
		if rec.Collection == collection && rec.Building() && rec.Position != nil && (rec.Through != "" && rec.Layer != "" || rec.Plan != "") {
			return &standing{layer: rec.Layer, at: *rec.Position, through: rec.Through, rows: rec.ThroughRows, started: rec.Started,
				plan: rec.Plan, cuts: rec.Cuts}
		}
	}
	return nil
}

// resumable returns where an unfinished read of collection's base stands (b.resume),
// if b can go on from there: read with the definition b is wanted with, and young
// enough to join a version (joinsLocked). Otherwise nil, saying why when there was
// one.
func (c *Compactor) resumable(ctx context.Context, m snapshot.Manifest, collection string, b *baseBuild) *standing {
	r := b.resume
	if r == nil {
		return nil
	}
	why := ""
	switch {
	case !readWith(r.at, b.want, collection):
		why = "the collection's definition changed since the base's position"
	case m.TTL > 0 && c.now().Sub(r.started) >= m.TTL/2:
		why = "the base began half the TTL ago or more: a version would not take it"
	}
	if why != "" {
		c.event(ctx, snapshot.EventBaseReadAgain, collection, "layer", r.layer, "through", r.through, "why", why)
		return nil
	}
	return r
}

// resumeBase opens the source after r.through, at r's position, behind the
// documents r's layer holds through it, read back from storage.
func (c *Compactor) resumeBase(ctx context.Context, collection string, b *baseBuild, r *standing) (snapshot.SourceSnapshot, error) {
	br, ok := c.Source.(snapshot.BaseResumer)
	if !ok {
		return nil, fmt.Errorf("%w: the source cannot go on with a base", snapshot.ErrCannotResume)
	}
	snap, err := br.ResumeBase(ctx, collection, r.at, r.through)
	if err != nil {
		return nil, err
	}
	ds, ok := snap.(snapshot.DeltaSnapshot)
	if !ok {
		_ = snap.Close(ctx)
		return nil, fmt.Errorf("%w: the source cannot stream a collection in id order", snapshot.ErrCannotResume)
	}
	c.mu.Lock()
	b.started, b.stands = r.started, *r
	c.mu.Unlock()
	c.event(ctx, snapshot.EventBaseResumed, collection, "layer", r.layer, "through", r.through, "rows", r.rows)
	return &resumedSnapshot{DeltaSnapshot: ds, docs: c.Docs, runs: c.Writer.Store, collection: collection, replayed: &b.replayed,
		stored:  snapshot.ChainRef{Dataset: c.Dataset, Chain: []snapshot.Version{r.layer}, Collection: collection},
		through: r.through, want: r.rows, lost: func() {
			c.mu.Lock()
			b.stands = standing{}
			c.mu.Unlock()
		}}, nil
}

// resumedSnapshot is a base's source snapshot that goes on where an earlier read
// stood: it sends the documents the earlier read wrote, read back from storage, then
// what the source sends after them.
type resumedSnapshot struct {
	snapshot.DeltaSnapshot
	docs       ChainScanner
	runs       RunReader
	collection string
	stored     snapshot.ChainRef // the earlier read's layer
	through    string            // its last id written; "" for all it holds
	after      string            // the last id not to send again; "" for none
	want       int64             // its documents through it
	replayed   interface{ Add(int64) int64 }
	lost       func() // called when storage does not hold what the earlier read wrote
}

func (s *resumedSnapshot) ScanSince(ctx context.Context, collection string, since *snapshot.Position, fn func(snapshot.Document) error) (snapshot.LayerMode, error) {
	if since != nil || collection != s.collection {
		return s.DeltaSnapshot.ScanSince(ctx, collection, since, fn)
	}
	if s.through != "" { // else the earlier read wrote nothing yet
		if err := s.sendStored(ctx, fn); err != nil {
			return snapshot.LayerMode{}, err
		}
	}
	return s.DeltaSnapshot.ScanSince(ctx, collection, nil, fn)
}

// sendStored sends the earlier read's documents, read back from storage, and checks
// that they are as many as it recorded.
func (s *resumedSnapshot) sendStored(ctx context.Context, fn func(snapshot.Document) error) error {
	n, err := s.replay(ctx, fn)
	if err != nil {
		return err
	}
	if n != s.want {
		s.lost()
		return fmt.Errorf("%w: storage holds %d documents of %s through %q under %s, where the base recorded %d",
			snapshot.ErrCannotResume, n, s.collection, s.through, s.stored.Chain[0], s.want)
	}
	return nil
}

// replay sends the earlier read's documents through s.through (all of them for "")
// after s.after, and returns how many there were, those up to s.after too, read in
// spans of about replayPage ids that its layer's fingerprint run
// marks out, each read on its own (a read of the whole range at once would have
// Bigtable's emulator gather every row of it first); the documents after the run's
// last chunk in storage, up to s.through, are one last span.
func (s *resumedSnapshot) replay(ctx context.Context, fn func(snapshot.Document) error) (int64, error) {
	var n int64
	send := func(span snapshot.Span) error {
		for {
			docs, more, err := s.docs.ScanSpan(ctx, s.stored, span, replayPage)
			if err != nil {
				return fmt.Errorf("read back %s's documents written under %s: %w", s.collection, s.stored.Chain[0], err)
			}
			for _, d := range docs {
				if n++; d.ID <= s.after {
					continue
				}
				s.replayed.Add(1)
				if err := fn(d); err != nil {
					return err
				}
			}
			if !more || len(docs) == 0 {
				return nil
			}
			span = span.After(docs[len(docs)-1].ID)
		}
	}
	// The spans tile the ids up to s.through, each ending at a run entry replayPage
	// entries after the last: a document a missing run chunk does not name is
	// still in one.
	var from string // the last span's end; "" before the first
	page := 0
	var err error
	rerr := s.runs.ScanRun(ctx, s.stored.Dataset, s.stored.Chain[0], s.collection, func(chunk []byte) bool {
		err = DecodeRunChunk(chunk, func(e RunEntry) error {
			if s.through != "" && e.ID > s.through {
				return errStop
			}
			if page++; page == replayPage && e.ID > from {
				if err := send(snapshot.Span{From: from, To: e.ID + "\x00"}); err != nil {
					return err
				}
				from, page = e.ID, 0
			}
			return nil
		})
		return err == nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	if err = cmp.Or(err, rerr); err != nil {
		return n, err
	}
	end := snapshot.Span{From: from}
	if s.through != "" {
		end.To = s.through + "\x00"
	}
	return n, send(end)
}

// replayPage is how many documents a span of a replay holds, about.
var replayPage = basePage

// errStop ends a scan early, without an error.
var errStop = errors.New("stop")

// OnChunk passes fn on to the source's chunked read.
func (s *resumedSnapshot) OnChunk(fn func(ctx context.Context, last string) error) {
	if cs, ok := s.DeltaSnapshot.(snapshot.ChunkedSnapshot); ok {
		cs.OnChunk(fn)
	}
}

// Indexes passes on the source's indexes of the collection.
func (s *resumedSnapshot) Indexes(ctx context.Context, collection string) ([]snapshot.IndexDef, error) {
	if ix, ok := s.DeltaSnapshot.(snapshot.IndexedSnapshot); ok {
		return ix.Indexes(ctx, collection)
	}
	return nil, nil
}
