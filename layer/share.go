package layer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// Sharing a base read from the source among the syncer replicas (docs/design.md,
// "Bases shared by the replicas"). The base's builder, the replica that holds the
// dataset's lease, cuts the collection into parts of its id order
// (snapshot.PartedSnapshot) and records the cuts with the base's position. Every
// other replica (PartReader) claims parts from the last one down, each with a lease
// of its own, reads it from the source as the base read at that position
// (snapshot.BaseSharer), writes it into a layer of its own, and marks the part read
// by its claim's fencing token. The builder goes through the parts in order: it
// claims each in turn (waiting while a replica reads it, taking over a lapsed
// claim), and takes a part from storage when the mark is the last claim's before
// its own, else reads the part itself. Each claim raises the part's fence before it
// is given, and a mark behind the fence is refused, so a late or fenced reader's
// layer is never taken: its cells expire.

// DefaultPartRows is about how many ids a part of a shared base holds.
const DefaultPartRows = 250_000

// DefaultPartEvery is how often a PartReader looks for bases to read parts of.
const DefaultPartEvery = time.Second

// Parts is how bases read from the source are shared among a dataset's syncer
// replicas.
type Parts struct {
	// Lease returns the lease named name, held as this process, that calls
	// beforeAcquire before the write that would give it a token (a part's claim:
	// store.LeaseConfig's BeforeAcquire).
	Lease func(name string, beforeAcquire func(ctx context.Context, token uint64) error) (snapshot.Lease, error)
	// Marks keeps each part's mark (store.Store.Cells).
	Marks Cells
	// Rows is about how many ids a part holds; zero: DefaultPartRows.
	Rows int64

	mu     sync.Mutex
	leases map[snapshot.Version]map[int]snapshot.Lease // by plan and part: a lease watches a held claim lapse
	read   map[snapshot.Version]map[int]bool           // by plan: the parts seen marked read (a mark stays)
}

// markedRead reports whether plan's part i was seen marked read.
func (ps *Parts) markedRead(plan partPlan, i int) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.read[plan.plan][i]
}

// sawRead remembers that plan's part i is marked read.
func (ps *Parts) sawRead(plan partPlan, i int) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.read == nil {
		ps.read = map[snapshot.Version]map[int]bool{}
	}
	if ps.read[plan.plan] == nil {
		ps.read[plan.plan] = map[int]bool{}
	}
	ps.read[plan.plan][i] = true
}

// isRead reports whether plan's part i is marked read: remembered, or read from its
// mark now (and remembered).
func (ps *Parts) isRead(ctx context.Context, plan partPlan, i int) (bool, error) {
	if ps.markedRead(plan, i) {
		return true, nil
	}
	m, _, err := ps.readMark(ctx, plan.mark(i))
	if err != nil || !taken(m) {
		return false, err
	}
	ps.sawRead(plan, i)
	return true, nil
}

// lease returns the claim of plan's part i, the same each time, so that a claim
// whose holder stopped is taken over once it has lapsed.
func (ps *Parts) lease(plan partPlan, i int) (snapshot.Lease, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if l := ps.leases[plan.plan][i]; l != nil {
		return l, nil
	}
	mark := plan.mark(i)
	l, err := ps.Lease(plan.claim(i), func(ctx context.Context, token uint64) error { return ps.fence(ctx, mark, token) })
	if err != nil {
		return nil, err
	}
	if ps.leases == nil {
		ps.leases = map[snapshot.Version]map[int]snapshot.Lease{}
	}
	if ps.leases[plan.plan] == nil {
		ps.leases[plan.plan] = map[int]snapshot.Lease{}
	}
	ps.leases[plan.plan][i] = l
	return l, nil
}

// retain forgets the claims of every plan but those keep names.
func (ps *Parts) retain(keep func(snapshot.Version) bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for plan := range ps.leases {
		if !keep(plan) {
			delete(ps.leases, plan)
		}
	}
	for plan := range ps.read {
		if !keep(plan) {
			delete(ps.read, plan)
		}
	}
}

// Cells are conditional cells: a store.LeaseCell.
type Cells interface {
	ReadLease(ctx context.Context, name string) ([]byte, error)
	SwapLease(ctx context.Context, name string, prev, next []byte) (bool, error)
}

// partMark is a part's mark: the claim that read it (its fencing token), the layer
// it wrote ("" when the builder read it into the base itself), and its documents.
// Fence is the latest claim's token, raised before that claim is given: a mark of
// an earlier claim is refused from then on.
type partMark struct {
	Fence  uint64           `json:"fence"`
	Claim  uint64           `json:"token"`
	Layer  snapshot.Version `json:"layer,omitempty"`
	Rows   int64            `json:"rows"`
	Syncer string           `json:"syncer,omitempty"`
}

// partPlan is how a shared base is cut: its parts are the ids after cuts[i-1]
// through cuts[i], the last one those after the last cut.
type partPlan struct {
	dataset, collection string
	plan                snapshot.Version // names the parts' claims
	at                  snapshot.Position
	cuts                []string
}

func (p partPlan) parts() int { return len(p.cuts) + 1 }

// bounds returns part i's ids: after after ("": from the first) through through
// ("": to the last).
func (p partPlan) bounds(i int) (after, through string) {
	if i > 0 {
		after = p.cuts[i-1]
	}
	if i < len(p.cuts) {
		through = p.cuts[i]
	}
	return after, through
}

// claim and mark name part i's lease and mark cell.
func (p partPlan) claim(i int) string { return p.name("base-part", i) }
func (p partPlan) mark(i int) string  { return p.name("base-part-mark", i) }
func (p partPlan) name(kind string, i int) string {
	return kind + "/" + p.dataset + "/" + p.collection + "/" + string(p.plan) + "/" + strconv.Itoa(i)
}

func (ps *Parts) rows() int64 {
	if ps.Rows > 0 {
		return ps.Rows
	}
	return DefaultPartRows
}

// readMark returns the mark named name (nil when none) and its stored bytes.
func (ps *Parts) readMark(ctx context.Context, name string) (*partMark, []byte, error) {
	raw, err := ps.Marks.ReadLease(ctx, name)
	if err != nil || raw == nil {
		return nil, raw, err
	}
	var m partMark
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, fmt.Errorf("the mark %s: %w", name, err)
	}
	return &m, raw, nil
}

// writeMark writes m as the mark named name, its fence kept, unless a later claim
// has been given (the fence is past m's token) or a claim as late or later marked
// it; it reports whether it did.
func (ps *Parts) writeMark(ctx context.Context, name string, m partMark) (bool, error) {
	return ps.swapMark(ctx, name, func(cur partMark) (partMark, bool) {
		if cur.Fence > m.Claim || cur.Claim >= m.Claim {
			return cur, false
		}
		m.Fence = max(cur.Fence, m.Claim)
		return m, true
	})
}

// fence raises the mark named name's fence to token, before the claim with that
// token is given: from then on no earlier claim's mark is written.
func (ps *Parts) fence(ctx context.Context, name string, token uint64) error {
	_, err := ps.swapMark(ctx, name, func(cur partMark) (partMark, bool) {
		if cur.Fence >= token {
			return cur, false
		}
		cur.Fence = token
		return cur, true
	})
	return err
}

// swapMark replaces the mark named name (zero when none) by what change makes of it,
// when change says to, and reports whether it did.
func (ps *Parts) swapMark(ctx context.Context, name string, change func(partMark) (partMark, bool)) (bool, error) {
	for range 10 {
		cur, raw, err := ps.readMark(ctx, name)
		if err != nil {
			return false, err
		}
		if cur == nil {
			cur = &partMark{}
		}
		m, ok := change(*cur)
		if !ok {
			return false, nil
		}
		next, err := json.Marshal(m)
		if err != nil {
			return false, err
		}
		if ok, err := ps.Marks.SwapLease(ctx, name, raw, next); ok || err != nil {
			return ok, err
		}
	}
	return false, fmt.Errorf("the mark %s: changed under every write", name)
}

// taken reports whether m marks its part read. A mark is written only while its
// claim is the latest given (each claim raises the fence before it is given, and a
// mark behind the fence is refused), once the part is all in storage: so a part
// marked read holds every id of the part, read by a claim no other took over.
func taken(m *partMark) bool { return m != nil && m.Claim != 0 }

// release gives hold up, however ctx ended.
func release(ctx context.Context, hold snapshot.Hold) {
	rctx, cancel := snapshot.Detach(ctx, 5*time.Second)
	defer cancel()
	_ = hold.Release(rctx)
}

// share returns snap, the source snapshot of b's base, as a base shared by the
// replicas when c shares bases, the source reads parts and snap cuts the collection
// into some (or b goes on with a shared base whose read stopped); snap itself
// otherwise.
func (c *Compactor) share(ctx context.Context, collection string, b *baseBuild, snap snapshot.SourceSnapshot) (snapshot.SourceSnapshot, error) {
	bs, ok := c.Source.(snapshot.BaseSharer)
	if c.Parts == nil || !ok {
		return snap, nil
	}
	lead, resumed := snap, (*resumedSnapshot)(nil)
	if rs, ok := snap.(*resumedSnapshot); ok {
		lead, resumed = rs.DeltaSnapshot, rs
	}
	ps, ok := lead.(snapshot.PartedSnapshot)
	c.mu.Lock()
	st := b.stands
	c.mu.Unlock()
	if !ok || (resumed != nil && st.plan == "") {
		return snap, nil
	}
	cuts, mode, err := ps.BaseParts(ctx, collection, c.Parts.rows())
	if err != nil {
		return nil, err
	}
	plan := partPlan{dataset: c.Dataset, collection: collection, plan: st.plan, at: snap.Position(), cuts: st.cuts}
	if resumed == nil {
		if len(cuts) == 0 {
			return snap, nil
		}
		plan.plan, plan.cuts = b.layer, cuts
	}
	var ix []snapshot.IndexDef
	if is, ok := lead.(snapshot.IndexedSnapshot); ok {
		if ix, err = is.Indexes(ctx, collection); err != nil {
			return nil, err
		}
	}
	_ = lead.Close(ctx) // its source transaction ends: the parts are read on their own
	c.mu.Lock()
	b.stands.plan, b.stands.cuts = plan.plan, plan.cuts
	c.recordLocked(ctx, collection, b, "")
	c.mu.Unlock()
	return &sharedSnapshot{src: bs, parts: c.Parts, plan: plan, mode: mode, indexes: ix, stored: resumed, from: st.through,
		docs: c.Docs, runs: c.Writer.Store, shared: &b.shared, event: c.event}, nil
}

// sharedSnapshot is the source snapshot of a base shared by the replicas: it sends
// what an earlier read of it wrote (stored, through from), then each part after,
// read by another replica (from storage) or by itself (from the source).
type sharedSnapshot struct {
	src     snapshot.BaseSharer
	parts   *Parts
	plan    partPlan
	mode    snapshot.LayerMode
	indexes []snapshot.IndexDef
	stored  *resumedSnapshot // nil for a base read from its start
	from    string           // the last id stored holds
	docs    ChainScanner
	runs    RunReader
	shared  interface{ Add(int64) int64 } // documents taken from other replicas' parts
	event   func(ctx context.Context, kind snapshot.EventKind, collection string, attrs ...any)
	onChunk func(ctx context.Context, last string) error
}

var (
	_ snapshot.DeltaSnapshot   = (*sharedSnapshot)(nil)
	_ snapshot.ChunkedSnapshot = (*sharedSnapshot)(nil)
	_ snapshot.IndexedSnapshot = (*sharedSnapshot)(nil)
)

func (s *sharedSnapshot) Position() snapshot.Position { return s.plan.at }
func (s *sharedSnapshot) Close(context.Context) error { return nil }

// Indexes returns the collection's indexes as the base's first snapshot read them.
func (s *sharedSnapshot) Indexes(context.Context, string) ([]snapshot.IndexDef, error) {
	return s.indexes, nil
}

// OnChunk sets fn, called as each part but the last ends, and as each chunk of a
// part read from the source does.
func (s *sharedSnapshot) OnChunk(fn func(ctx context.Context, last string) error) { s.onChunk = fn }

func (s *sharedSnapshot) Scan(ctx context.Context, collection string, fn func(snapshot.Document) error) error {
	_, err := s.ScanSince(ctx, collection, nil, fn)
	return err
}

// ScanSince sends the base's documents in id byte order; it reads nothing since an
// earlier position.
func (s *sharedSnapshot) ScanSince(ctx context.Context, collection string, since *snapshot.Position, fn func(snapshot.Document) error) (snapshot.LayerMode, error) {
	if since != nil || collection != s.plan.collection {
		return snapshot.LayerMode{}, fmt.Errorf("%w: a shared base of %s reads only that collection, whole", snapshot.ErrInvalid, s.plan.collection)
	}
	if s.stored != nil && s.from != "" {
		if err := s.stored.sendStored(ctx, fn); err != nil {
			return snapshot.LayerMode{}, err
		}
	}
	for i := range s.plan.parts() {
		after, through := s.plan.bounds(i)
		if through != "" && through <= s.from {
			continue
		}
		if err := s.part(ctx, i, max(after, s.from), fn); err != nil {
			return snapshot.LayerMode{}, fmt.Errorf("part %d of %d of the base of %s: %w", i+1, s.plan.parts(), collection, err)
		}
		if through != "" && s.onChunk != nil {
			if err := s.onChunk(ctx, through); err != nil {
				return snapshot.LayerMode{}, err
			}
		}
	}
	s.parts.retain(func(plan snapshot.Version) bool { return plan != s.plan.plan })
	return s.mode, nil
}

// part sends part i's ids after after: taken from the layer another replica wrote,
// when the mark says that the claim before this one read it; else read from the
// source.
func (s *sharedSnapshot) part(ctx context.Context, i int, after string, fn func(snapshot.Document) error) error {
	l, err := s.parts.lease(s.plan, i)
	if err != nil {
		return err
	}
	hold, err := l.Acquire(ctx) // waits while a replica reads it; takes a lapsed claim over
	if err != nil {
		return fmt.Errorf("claim it: %w", err)
	}
	defer release(ctx, hold)
	m, _, err := s.parts.readMark(ctx, s.plan.mark(i))
	if err != nil {
		return err
	}
	if taken(m) && m.Layer != "" {
		return s.take(ctx, i, m, after, fn)
	}
	_, through := s.plan.bounds(i)
	snap, err := s.src.ReadBasePart(ctx, s.plan.collection, s.plan.at, after, through)
	if err != nil {
		return err
	}
	ds, closeSnap, err := streamOf(ctx, snap)
	if err != nil {
		return err
	}
	defer closeSnap()
	if cs, ok := ds.(snapshot.ChunkedSnapshot); ok && s.onChunk != nil {
		cs.OnChunk(s.onChunk)
	}
	var rows int64
	if _, err := ds.ScanSince(ctx, s.plan.collection, nil, func(d snapshot.Document) error {
		rows++
		return fn(d)
	}); err != nil {
		return err
	}
	// Marked read, so that no replica reads it again; what the mark says of rows
	// and layer is for a replica's part alone.
	_, err = s.parts.writeMark(ctx, s.plan.mark(i), partMark{Claim: hold.Fence(), Rows: rows})
	return err
}

// take sends the ids after after of part i, which a replica read into m.Layer, read
// back from storage; they must be as many as m says.
func (s *sharedSnapshot) take(ctx context.Context, i int, m *partMark, after string, fn func(snapshot.Document) error) error {
	r := &resumedSnapshot{docs: s.docs, runs: s.runs, collection: s.plan.collection, replayed: s.shared,
		stored: snapshot.ChainRef{Dataset: s.plan.dataset, Chain: []snapshot.Version{m.Layer}, Collection: s.plan.collection},
		after:  after, want: m.Rows, lost: func() {}}
	if err := r.sendStored(ctx, fn); err != nil {
		return err
	}
	s.event(ctx, snapshot.EventBasePartTaken, s.plan.collection, "part", i, "layer", m.Layer, "rows", m.Rows, "by", m.Syncer)
	return nil
}

// PartReader reads parts of the bases that other replicas of a dataset's syncer
// build from the source and share (Compactor.Parts): each part it claims, from the
// last of a base down, into a layer of its own that the base's builder takes from
// storage. Run it in every replica; it reads no part of a base its own process
// builds.
type PartReader struct {
	Dataset  string
	Source   snapshot.BaseSharer
	Writer   *Writer
	Versions *snapshot.VersionGen
	Records  snapshot.BaseStore
	Parts    *Parts
	// Syncer names this process, as the Compactor's records do.
	Syncer string
	// TTL is the dataset's: a part's layer lives as long as a version's.
	TTL time.Duration
	// Every is how often Run looks for bases to read parts of; zero:
	// DefaultPartEvery.
	Every time.Duration
	// RowsPerSecond paces the parts' reads and writes, as the Compactor's
	// SourceRowsPerSecond: zero, the default, sets no pace.
	RowsPerSecond float64

	mu    sync.Mutex
	read  int   // parts read
	rows  int64 // their documents
	noted error // the last error Run reported
}

// PartsRead returns how many parts this reader has read, and their documents.
func (p *PartReader) PartsRead() (parts int, rows int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.read, p.rows
}

// Run reads parts until ctx ends, looking for bases every Every; an error is
// reported (once until it changes) and the reader goes on.
func (p *PartReader) Run(ctx context.Context) {
	every := p.Every
	if every <= 0 {
		every = DefaultPartEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := p.Once(ctx); err != nil && ctx.Err() == nil {
			p.report(ctx, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// report tells the writer's observer of err, unless it told of the same last.
func (p *PartReader) report(ctx context.Context, err error) {
	p.mu.Lock()
	same := p.noted != nil && p.noted.Error() == err.Error()
	p.noted = err
	p.mu.Unlock()
	if !same {
		p.Writer.observe(ctx, snapshot.Event{Kind: snapshot.EventBaseFailed, Dataset: p.Dataset, Attrs: []any{"part_reader", p.Syncer, "err", err}})
	}
}

// Once reads every part it can claim of the bases being built by other processes,
// one at a time, and returns how many it read.
func (p *PartReader) Once(ctx context.Context) (int, error) {
	n := 0
	for {
		read, err := p.onePart(ctx)
		if err != nil || !read {
			return n, err
		}
		n++
	}
}

// onePart reads one part it can claim, the last of its base that no claim holds
// and the base's builder has not gone past, and reports whether it read one.
func (p *PartReader) onePart(ctx context.Context) (bool, error) {
	recs, err := p.Records.ListBases(ctx, p.Dataset)
	if err != nil {
		return false, err
	}
	p.Parts.retain(func(plan snapshot.Version) bool {
		return slices.ContainsFunc(recs, func(rec snapshot.BaseStatus) bool { return rec.Plan == plan && rec.State == "building" })
	})
	for _, rec := range recs {
		if rec.State != "building" || rec.Plan == "" || rec.Position == nil || rec.Writer == p.Syncer {
			continue
		}
		plan := partPlan{dataset: p.Dataset, collection: rec.Collection, plan: rec.Plan, at: *rec.Position, cuts: rec.Cuts}
		for i := plan.parts() - 1; i >= 0; i-- {
			if _, through := plan.bounds(i); through != "" && rec.Through != "" && through <= rec.Through {
				break // the builder has read it
			}
			read, err := p.readPart(ctx, plan, i)
			if read || err != nil {
				return read, err
			}
		}
	}
	return false, nil
}

// readPart reads part i of plan into a layer of its own and marks it read, if it
// can claim it and no claim read it yet.
func (p *PartReader) readPart(ctx context.Context, plan partPlan, i int) (bool, error) {
	// A part read is seen so once, with no claim taken: a claim writes, and Run
	// looks at every part of a base each second.
	if read, err := p.Parts.isRead(ctx, plan, i); read || err != nil {
		return false, err
	}
	l, err := p.Parts.lease(plan, i)
	if err != nil {
		return false, err
	}
	hold, err := l.TryAcquire(ctx)
	if errors.Is(err, snapshot.ErrHeld) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer release(ctx, hold)
	if read, err := p.Parts.isRead(ctx, plan, i); read || err != nil {
		return false, err // read by the claim before this one
	}
	// The claim's context ends when the claim is lost: the read stops, and its
	// layer is never marked.
	hctx, cancel := context.WithCancel(hold.Context())
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	after, through := plan.bounds(i)
	snap, err := p.Source.ReadBasePart(hctx, plan.collection, plan.at, after, through)
	if err != nil {
		return false, fmt.Errorf("part %d of the base of %s: %w", i+1, plan.collection, err)
	}
	ds, closeSnap, err := streamOf(ctx, snap)
	if err != nil {
		return false, err
	}
	defer closeSnap()
	layer := p.Versions.Next()
	bm := snapshot.Manifest{Dataset: p.Dataset, Version: layer, State: snapshot.StateWriting, Format: snapshot.FormatLayered,
		Source: plan.at, TTL: p.TTL, StartedAt: time.Now(), Collections: map[string]snapshot.CollectionStats{}}
	var rows, bytes atomic.Int64
	pace := &basePace{rate: sourceRate(p.RowsPerSecond)}
	if c := p.Writer.Compactor; c != nil {
		pace.yield = c.yield // the commit path of this process first
	}
	paced := &pacedSnapshot{DeltaSnapshot: ds, pace: pace, rows: &rows, bytes: &bytes}
	res, err := p.Writer.WriteVersion(hctx, snapshot.WriteRequest{Snap: partSnapshot{paced}, Collections: []string{plan.collection},
		Manifest: bm, Base: true, Why: fmt.Sprintf("part %d of %d of a base shared by the replicas", i+1, plan.parts())})
	if err == nil {
		err = hctx.Err()
	}
	if err != nil {
		return false, fmt.Errorf("part %d of the base of %s: %w", i+1, plan.collection, err)
	}
	docs := res.Collections[plan.collection].Rows
	if ok, err := p.Parts.writeMark(hctx, plan.mark(i), partMark{Claim: hold.Fence(), Layer: layer, Rows: docs, Syncer: p.Syncer}); !ok || err != nil {
		return false, err
	}
	p.Parts.sawRead(plan, i)
	p.mu.Lock()
	p.read++
	p.rows += docs
	p.mu.Unlock()
	p.Writer.observe(ctx, snapshot.Event{Kind: snapshot.EventBasePartRead, Dataset: p.Dataset, Collection: plan.collection,
		Attrs: []any{"part", i, "of", plan.parts(), "layer", layer, "rows", docs}})
	return true, nil
}

// partSnapshot is a part's source snapshot with no indexes: a part's layer is read
// back by its documents alone.
type partSnapshot struct{ snapshot.DeltaSnapshot }
