package layer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/snapflip/snapflip/internal/retry"
	"github.com/snapflip/snapflip/snapshot"
)

// Bases beside the stream (docs/design.md, "Bases beside the stream"). A chain that
// grew long against its base (rebase_ratio) or old (half the TTL) needs a base. The
// chain already holds the collection's documents, so the base is compacted from
// storage, not read from the source: the chain's merge, written as one base layer
// under a layer version of its own, while versions keep being published over the old
// chain. A version whose parent chain still ends with the chain the base was built
// from takes the base in its place: the layers published meanwhile stay on top of
// it, and the version holds exactly what it would have held without the swap. A base
// that disagrees with the chain it was built from (count or digest) is never used.

// DefaultBaseRowsPerSecond bounds how fast a base beside the stream is read and
// written, so that it leaves the commit path Bigtable's and the CPU's share.
const DefaultBaseRowsPerSecond = 100_000

// DefaultBaseRetryAfter is the first wait after a base that failed; each failure
// doubles it, up to 64 times.
const DefaultBaseRetryAfter = 10 * time.Second

// ChainScanner reads what a chain holds of a collection in a span of ids, in id byte
// order (package store's ScanSpan).
type ChainScanner interface {
	ScanSpan(ctx context.Context, in snapshot.ChainRef, span snapshot.Span, limit int) ([]snapshot.Document, bool, error)
}

// A base is read in spans of basePage ids, cut where the chain's fingerprint run
// says: each span is a bounded read of its own, read again up to spanTries times
// when storage is unreachable, and never a scan of the whole collection at once
// (which Bigtable's emulator answers only after gathering every row).
const (
	basePage  = 5_000
	spanTries = 5
)

var spanBackoff = retry.Backoff{Initial: 500 * time.Millisecond, Max: 8 * time.Second, Jitter: retry.EqualJitter}

// Compactor builds one dataset's bases from storage beside the stream of versions
// (snapshot.Bases): at most one per collection at a time, each in a goroutine of its
// own, paced by RowsPerSecond. A failed base leaves nothing any version names (its
// cells expire) and is tried again after a backoff. Start it before use.
type Compactor struct {
	Dataset string
	// Writer writes the bases, with its store, limits and observer.
	Writer *Writer
	// Docs reads the chains the bases are built from.
	Docs ChainScanner
	// Versions names each base's layer.
	Versions *snapshot.VersionGen
	// RowsPerSecond bounds how fast a base compacted from storage is read and
	// written: zero means DefaultBaseRowsPerSecond, a negative value no bound. It
	// does not pace a base read from the source (SourceRowsPerSecond does).
	RowsPerSecond float64
	// SourceRowsPerSecond bounds how fast a base read from the source (a held or
	// new collection's) is read and written: zero, the default, sets no bound, as
	// a full read of the source in a version has none. Either kind of base waits
	// while a version is written.
	SourceRowsPerSecond float64
	// RetryAfter is the first wait after a failed base (zero: DefaultBaseRetryAfter).
	RetryAfter time.Duration
	// Records, when set, keeps each base's record for operators (the status page,
	// `syncer versions`): written when it starts, every RecordEvery while it is
	// built (zero: DefaultBaseRecordEvery), and when it is built, failed, taken or
	// dropped. Syncer names this process in them. A record that cannot be written
	// is reported and does not stop the base.
	Records     snapshot.BaseStore
	RecordEvery time.Duration
	Syncer      string
	// Source, when set, reads the bases of collections whose definition changed and
	// of new ones beside the stream too, each in a source snapshot of its own, while
	// versions hold such a collection at its last state (or leave a new one out)
	// until one takes its base (definition_changes: hold). Nil writes those bases
	// in the version that needs them, every collection waiting (wait).
	Source snapshot.Source
	// Parts, when set, shares the bases read from the source with the dataset's
	// other syncer replicas (PartReader), when the source reads parts
	// (snapshot.BaseSharer) and a base is large enough to cut.
	Parts *Parts
	// Built, when set, is called once a base read from the source is built, so
	// that a version takes it soon; it must not block.
	Built func()
	Now   func() time.Time

	mu          sync.Mutex
	ctx         context.Context
	builds      map[string]*baseBuild // by collection
	pending     map[string]snapshot.BaseStatus
	recording   bool          // a writer writes the pending records
	recordsIdle *sync.Cond    // on mu: broadcast when the writer has written them all
	busy        int           // goroutines building bases or writing records
	committing  int           // versions being written: bases yield to them
	commitDone  chan struct{} // closed when committing falls to zero
	idle        *sync.Cond    // on mu: broadcast when busy falls to zero
}

var _ snapshot.Bases = (*Compactor)(nil)

// baseBuild is one collection's base beside the stream: in flight, built, or failed.
type baseBuild struct {
	from   snapshot.Version   // the version whose chain it is built from
	chain  []snapshot.Version // that chain, which the base replaces; nil for a base read from the source
	source bool               // read from the source: a held or new collection's
	// pos is where a base read from the source was read, and stats what it holds;
	// set once it is built.
	pos      snapshot.Position
	stats    snapshot.CollectionStats
	why      string
	expected int64 // the chain's documents
	started  time.Time
	rows     atomic.Int64 // documents written so far
	replayed atomic.Int64 // of them, read back from storage where an earlier read stood
	shared   atomic.Int64 // of them, taken from parts other replicas read
	bytes    atomic.Int64 // their bytes
	layer    snapshot.Version

	// Set under the Compactor's lock once the build ends, and once a version takes
	// it (it is kept, for Progress, until the next base of the collection starts).
	taken    bool
	done     bool
	base     snapshot.LayerRef
	err      error
	failures int // consecutive failures, this one included
	retryAt  time.Time

	// For a base read from the source: want is the position of the version that
	// asked for it; resume where an earlier read stood, if it goes on from one;
	// and, under the Compactor's lock, where this read stands (standing).
	want   snapshot.Position
	resume *standing
	stands standing
}

// BaseProgress is what one collection's base beside the stream has done.
type BaseProgress struct {
	Collection string
	// From is the version whose chain the base is built from; Why why it is built.
	From snapshot.Version
	Why  string
	// State is "building", "built" (waiting for a version to take it), "taken" (a
	// version's chain holds it; kept until the collection's next base starts) or
	// "failed" (tried again after RetryAt).
	State    string
	Rows     int64 // documents written
	Expected int64 // documents the chain holds
	Bytes    int64 // bytes of the documents written
	Started  time.Time
	Err      error
	RetryAt  time.Time
}

// Start lets the Compactor build bases until ctx ends; Want does nothing before.
func (c *Compactor) Start(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ctx = ctx
}

// Wait returns once no base is being built.
func (c *Compactor) Wait() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.busy > 0 {
		c.idleLocked().Wait()
	}
}

func (c *Compactor) idleLocked() *sync.Cond {
	if c.idle == nil {
		c.idle = sync.NewCond(&c.mu)
	}
	return c.idle
}

// goLocked runs fn in a goroutine that Wait waits for. The Compactor's lock is
// held; a base read again after its backoff starts one while Wait may be waiting.
func (c *Compactor) goLocked(fn func()) {
	c.busy++
	go func() {
		defer func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.busy--; c.busy == 0 {
				c.idleLocked().Broadcast()
			}
		}()
		fn()
	}()
}

// Want starts a base of collection built from m's chain, unless one is being built,
// is built for a chain m's still ends with, or failed less than its backoff ago
// (snapshot.Bases).
func (c *Compactor) Want(m snapshot.Manifest, collection, why string) { c.want(m, collection, why) }

// want is Want, reporting whether a base is in hand: being built, built, or to be
// tried again. It is false when the Compactor is not started, or stopped, or m's
// chain is no chain of layers.
func (c *Compactor) want(m snapshot.Manifest, collection, why string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	pc, ok := m.Collections[collection]
	if c.ctx == nil || c.ctx.Err() != nil || !ok || m.Format != snapshot.FormatLayered || len(pc.Layers) == 0 || m.Dataset != c.Dataset {
		return false
	}
	chain := snapshot.LayerVersions(pc.Layers)
	failures := 0
	if b := c.builds[collection]; b != nil {
		switch {
		case !b.done:
			return true
		case b.err == nil && hasSuffix(chain, b.chain):
			return true
		case b.err != nil && c.now().Before(b.retryAt):
			return true
		case b.err != nil:
			failures = b.failures
		}
	}
	c.startLocked(m, collection, &baseBuild{chain: chain, why: why, failures: failures})
	return true
}

// startLocked starts b, the build of collection's base from (or for) m's chain, in
// a goroutine of its own. The Compactor's lock is held.
func (c *Compactor) startLocked(m snapshot.Manifest, collection string, b *baseBuild) {
	b.from, b.expected, b.started, b.layer = m.Version, m.Collections[collection].Rows, c.now(), c.Versions.Next()
	if c.builds == nil {
		c.builds = map[string]*baseBuild{}
	}
	c.builds[collection] = b
	ctx := c.ctx
	c.goLocked(func() { c.run(ctx, m, collection, b) })
}

// run builds b and records how it ended.
func (c *Compactor) run(ctx context.Context, m snapshot.Manifest, collection string, b *baseBuild) {
	wanted := snapshot.EventBaseWanted
	if b.source {
		wanted = snapshot.EventSourceBaseWanted
	}
	c.event(ctx, wanted, collection, "from", m.Version, "why", b.why, "rows", b.expected)
	if b.source {
		c.standFrom(ctx, collection, b)
	}
	stopRecords := c.recordWhileBuilt(ctx, collection, b)
	build := c.build
	if b.source {
		build = c.buildSource
	}
	ref, err := build(ctx, m, collection, b)
	stopRecords()
	c.mu.Lock()
	defer c.mu.Unlock()
	b.done, b.base, b.err = true, ref, err
	defer c.recordLocked(ctx, collection, b, "")
	if err != nil {
		b.failures++
		wait := c.retryAfter() << min(b.failures-1, 6)
		b.retryAt = c.now().Add(wait)
		if ctx.Err() == nil { // a syncer that stops ends its base quietly
			c.event(ctx, snapshot.EventBaseFailed, collection, "from", m.Version, "err", err, "retry_in", wait.String())
			if b.source {
				// A held collection waits for its base: read it again after the
				// backoff, whether or not a version asks for it by then (none
				// does while the source does not change).
				time.AfterFunc(wait, func() { c.readAgain(m, collection, b) })
			}
		}
		return
	}
	b.failures = 0
	if b.source && c.Built != nil {
		c.Built()
	}
	c.event(ctx, snapshot.EventBaseBuilt, collection, "from", m.Version, "base", ref.Version, "rows", ref.Docs,
		"duration", c.now().Sub(b.started).Round(time.Millisecond).String())
}

// readAgain starts the read of collection's base from the source again, going on
// where b, which failed, stood, unless another build replaced b or the Compactor
// stopped.
func (c *Compactor) readAgain(m snapshot.Manifest, collection string, b *baseBuild) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.builds[collection] != b || c.ctx == nil || c.ctx.Err() != nil {
		return
	}
	c.startLocked(m, collection, &baseBuild{why: b.why, source: true, failures: b.failures, want: b.want, resume: b.standingLocked()})
}

// build writes the merge of m's chain of collection as one base layer, and checks
// that it holds what the chain holds: the same count and digest.
func (c *Compactor) build(ctx context.Context, m snapshot.Manifest, collection string, b *baseBuild) (snapshot.LayerRef, error) {
	pc := m.Collections[collection]
	snap := &chainSnapshot{docs: c.Docs, runs: chainSource{st: c.Writer.Store, dataset: c.Dataset}, m: m, pace: c.limiter(),
		rows: &b.rows, bytes: &b.bytes}
	st, err := c.writeBase(ctx, snap, m, collection, b, &m, "built beside the stream from version "+string(m.Version)+": "+b.why)
	if err != nil {
		return snapshot.LayerRef{}, err
	}
	if st.Rows != pc.Rows || st.Digest != pc.Digest {
		return snapshot.LayerRef{}, fmt.Errorf("base of %s from %s: %d documents with digest %s, where the chain holds %d with %s",
			collection, m.Version, st.Rows, st.Digest, pc.Rows, pc.Digest)
	}
	return st.Layers[0], nil
}

// writeBase writes collection, as snap holds it, as one base layer under b's layer
// version (parent is what the writer compares it with; nil for nothing), and checks
// that it is complete and one base.
func (c *Compactor) writeBase(ctx context.Context, snap snapshot.SourceSnapshot, m snapshot.Manifest, collection string, b *baseBuild, parent *snapshot.Manifest, why string) (snapshot.CollectionStats, error) {
	bm := snapshot.Manifest{Dataset: c.Dataset, Version: b.layer, State: snapshot.StateWriting, Format: snapshot.FormatLayered,
		Source: snap.Position(), TTL: m.TTL, StartedAt: c.now(), Collections: map[string]snapshot.CollectionStats{}}
	req := snapshot.WriteRequest{Snap: snap, Collections: []string{collection}, Manifest: bm, Parent: parent, Base: true, Why: why}
	if b.source {
		req.ChunkDone = c.chunkDone(collection, b)
	}
	res, err := c.Writer.WriteVersion(ctx, req)
	if err != nil {
		return snapshot.CollectionStats{}, err
	}
	st := res.Collections[collection]
	bm.Collections[collection] = st
	if err := bm.CheckComplete(); err != nil {
		return snapshot.CollectionStats{}, err
	}
	if len(st.Layers) != 1 || st.Layers[0].Kind != snapshot.LayerBase {
		return snapshot.CollectionStats{}, fmt.Errorf("base of %s: wrote the chain %v, not one base", collection, st.Layers)
	}
	return st, nil
}

// Swap replaces, in a copy of m, each chain that ends with the chain a built base
// was built from by the layers above that chain and the base (snapshot.Bases). A
// built base whose chain m's no longer ends with (a rollback, a new base, a merge
// that reached into it) is dropped; one m's chain already ends with is done with.
// A base read from the source of a collection held (not counted by the version's
// snapshot) joins a later version; a base from storage changes no document, and
// joins this one.
func (c *Compactor) Swap(m snapshot.Manifest, held []string) (snapshot.Manifest, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var swapped []string
	for _, name := range slices.Sorted(maps.Keys(c.builds)) {
		b := c.builds[name]
		if !b.done || b.err != nil || b.taken || m.Dataset != c.Dataset || (b.source && slices.Contains(held, name)) {
			continue
		}
		pc, ok := m.Collections[name]
		chain := snapshot.LayerVersions(pc.Layers)
		if b.source {
			if c.joinsLocked(m, name, b) {
				if swapped == nil {
					m.Collections = maps.Clone(m.Collections)
				}
				st := b.stats
				st.Held = &snapshot.Held{Source: b.pos, Why: "its base read beside the stream catches up from here", Since: b.started}
				m.Collections[name] = st
				swapped = append(swapped, name)
			} else {
				delete(c.builds, name)
				c.event(context.Background(), snapshot.EventBaseDropped, name, "from", b.from, "base", b.base.Version)
				c.recordLocked(c.ctx, name, b, "dropped")
			}
			continue
		}
		switch {
		case ok && len(chain) > 0 && chain[len(chain)-1] == b.base.Version:
			b.taken = true
			c.recordLocked(c.ctx, name, b, "")
			continue
		case !ok || m.Format != snapshot.FormatLayered || !hasSuffix(chain, b.chain):
			delete(c.builds, name)
			c.event(context.Background(), snapshot.EventBaseDropped, name, "from", b.from, "base", b.base.Version)
			c.recordLocked(c.ctx, name, b, "dropped")
			continue
		}
		if swapped == nil {
			m.Collections = maps.Clone(m.Collections)
		}
		keep := len(chain) - len(b.chain)
		pc.Layers = append(slices.Clone(pc.Layers[:keep]), b.base)
		m.Collections[name] = pc
		swapped = append(swapped, name)
	}
	return m, swapped
}

// flipped marks taken each built base the chains of m, now current, hold.
func (c *Compactor) flipped(m snapshot.Manifest) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, b := range c.builds {
		chain := m.Chain(name)
		if b.done && b.err == nil && !b.taken && m.Dataset == c.Dataset && len(chain) > 0 && chain[len(chain)-1] == b.base.Version {
			b.taken = true
			c.recordLocked(c.ctx, name, b, "")
		}
	}
}

// mergeLimit returns how many of the newest layers of m's chain of collection a
// delta may merge: those above the chain a base in flight or built replaces (a merge
// reaching into it would leave that base no chain to replace); limited is false for
// no bound.
func (c *Compactor) mergeLimit(m *snapshot.Manifest, collection string) (n int, limited bool) {
	if c == nil || m == nil {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.builds[collection]
	chain := m.Chain(collection)
	if b == nil || b.err != nil || !hasSuffix(chain, b.chain) {
		return 0, false
	}
	return len(chain) - len(b.chain), true
}

// Progress returns each collection's base beside the stream, by collection name.
func (c *Compactor) Progress() []BaseProgress {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]BaseProgress, 0, len(c.builds))
	for _, name := range slices.Sorted(maps.Keys(c.builds)) {
		out = append(out, c.builds[name].progress(name))
	}
	return out
}

// progress is what b has done.
func (b *baseBuild) progress(collection string) BaseProgress {
	p := BaseProgress{Collection: collection, From: b.from, Why: b.why, State: "building", Rows: b.rows.Load(),
		Bytes: b.bytes.Load(), Expected: b.expected, Started: b.started}
	switch {
	case b.done && b.err != nil:
		p.State, p.Err, p.RetryAt = "failed", b.err, b.retryAt
	case b.taken:
		p.State = "taken"
	case b.done:
		p.State = "built"
	}
	return p
}

// DefaultBaseRecordEvery is how often a base's record is written while it is built.
const DefaultBaseRecordEvery = 10 * time.Second

// recordWhileBuilt writes b's record now and every RecordEvery until the returned
// stop is called.
func (c *Compactor) recordWhileBuilt(ctx context.Context, collection string, b *baseBuild) (stop func()) {
	if c.Records == nil {
		return func() {}
	}
	c.mu.Lock()
	c.recordLocked(ctx, collection, b, "")
	c.mu.Unlock()
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(cmp.Or(c.RecordEvery, DefaultBaseRecordEvery))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				c.mu.Lock()
				c.recordLocked(ctx, collection, b, "")
				c.mu.Unlock()
			}
		}
	}()
	return func() { close(done); <-ended }
}

// awaitRecordsLocked waits until every queued record is written (or failed). The
// Compactor's lock is held.
func (c *Compactor) awaitRecordsLocked() {
	if c.recordsIdle == nil {
		c.recordsIdle = sync.NewCond(&c.mu)
	}
	for c.recording {
		c.recordsIdle.Wait()
	}
}

// recordLocked queues b's record, in state state ("" for the build's own), unless
// the Compactor keeps none; one writer at a time writes the queue, the newest record
// of each collection, so they land in order. The Compactor's lock is held.
func (c *Compactor) recordLocked(ctx context.Context, collection string, b *baseBuild, state string) {
	if c.Records == nil || ctx == nil || ctx.Err() != nil {
		return
	}
	p := b.progress(collection)
	rec := snapshot.BaseStatus{Collection: collection, Layer: b.layer, From: p.From, Why: p.Why, State: cmp.Or(state, p.State),
		Rows: p.Rows, Expected: p.Expected, Bytes: p.Bytes, Started: p.Started, Updated: c.now(), Writer: c.Syncer, RetryAt: p.RetryAt}
	if st := b.stands; (st.through != "" || st.plan != "") && !b.taken {
		rec.Layer, rec.Position, rec.Through, rec.ThroughRows = cmp.Or(st.layer, rec.Layer), &st.at, st.through, st.rows
		rec.Plan, rec.Cuts = st.plan, st.cuts
	}
	if p.Err != nil {
		rec.Err = snapshot.Truncate(p.Err.Error(), 1000)
	}
	if c.pending == nil {
		c.pending = map[string]snapshot.BaseStatus{}
	}
	c.pending[collection] = rec
	if c.recording {
		return
	}
	c.recording = true
	c.goLocked(func() { c.writeRecords(ctx) })
}

// writeRecords writes the queued records until none is left.
func (c *Compactor) writeRecords(ctx context.Context) {
	for {
		c.mu.Lock()
		recs := c.pending
		c.pending = nil
		if len(recs) == 0 {
			c.recording = false
			if c.recordsIdle != nil {
				c.recordsIdle.Broadcast()
			}
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		for _, name := range slices.Sorted(maps.Keys(recs)) {
			rec := recs[name]
			if err := c.Records.RecordBase(ctx, c.Dataset, rec); err != nil && ctx.Err() == nil {
				c.event(ctx, snapshot.EventBaseRecordFailed, name, "state", rec.State, "err", err)
			}
		}
	}
}

// limiter returns the pace of one base's reads from storage: its rate, and the
// commit path first.
func (c *Compactor) limiter() *basePace {
	return &basePace{rate: baseLimiter(c.RowsPerSecond), yield: c.yield}
}

// sourceLimiter returns the pace of one base's reads from the source.
func (c *Compactor) sourceLimiter() *basePace {
	return &basePace{rate: sourceRate(c.SourceRowsPerSecond), yield: c.yield}
}

// sourceRate paces a base read from the source at rps rows a second: zero or less
// means no pace (nil).
func sourceRate(rps float64) *rate.Limiter {
	if rps <= 0 {
		return nil
	}
	return baseLimiter(rps)
}

// baseLimiter paces a base at rps rows a second: zero means
// DefaultBaseRowsPerSecond, a negative value no pace (nil).
func baseLimiter(rps float64) *rate.Limiter {
	if rps == 0 {
		rps = DefaultBaseRowsPerSecond
	}
	if rps < 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(rps), max(int(rps/10), basePage))
}

// basePace paces a base beside the stream: it waits while a version is written
// (yield), then for its rate. A nil basePace does not wait.
type basePace struct {
	rate  *rate.Limiter                   // nil: no rate
	yield func(ctx context.Context) error // nil: no yield
}

// WaitN waits until n more rows may be read.
func (p *basePace) WaitN(ctx context.Context, n int) error {
	if p == nil {
		return nil
	}
	if p.yield != nil {
		if err := p.yield(ctx); err != nil {
			return err
		}
	}
	if p.rate == nil {
		return nil
	}
	return p.rate.WaitN(ctx, min(n, p.rate.Burst()))
}

// maxYield is the longest a base waits at once for a version being written: its
// source transaction, if it has one open, stays open meanwhile.
var maxYield = 2 * time.Second

// commitStarted and commitEnded bracket the write of a version: a base beside the
// stream yields to it (yield), so that a commit is served as soon as it would be
// without the base.
func (c *Compactor) commitStarted() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.committing++; c.commitDone == nil {
		c.commitDone = make(chan struct{})
	}
}

func (c *Compactor) commitEnded() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.committing--; c.committing == 0 && c.commitDone != nil {
		close(c.commitDone)
		c.commitDone = nil
	}
}

// yield waits while a version is written, at most maxYield.
func (c *Compactor) yield(ctx context.Context) error {
	c.mu.Lock()
	done := c.commitDone
	c.mu.Unlock()
	if done == nil {
		return nil
	}
	t := time.NewTimer(maxYield)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (c *Compactor) retryAfter() time.Duration {
	if c.RetryAfter > 0 {
		return c.RetryAfter
	}
	return DefaultBaseRetryAfter
}

func (c *Compactor) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// event reports an event about a collection's base.
func (c *Compactor) event(ctx context.Context, kind snapshot.EventKind, collection string, attrs ...any) {
	c.Writer.observe(ctx, snapshot.Event{Kind: kind, Dataset: c.Dataset, Collection: collection, Attrs: attrs})
}

// hasSuffix reports whether chain ends with tail.
func hasSuffix(chain, tail []snapshot.Version) bool {
	return len(tail) > 0 && len(chain) >= len(tail) && slices.Equal(chain[len(chain)-len(tail):], tail)
}

// chainSnapshot is a source snapshot that reads what a version's chains hold from
// storage: the source of a base compacted from a chain. It reports the version's
// position and declared indexes, and reads every document (ScanSince renders all).
type chainSnapshot struct {
	docs  ChainScanner
	runs  chainSource // the chains' fingerprint runs
	m     snapshot.Manifest
	pace  *basePace     // nil for no pace
	rows  *atomic.Int64 // counts the documents read
	bytes *atomic.Int64 // and their bytes
}

func (s *chainSnapshot) Position() snapshot.Position { return s.m.Source }

func (s *chainSnapshot) Close(context.Context) error { return nil }

func (s *chainSnapshot) Indexes(_ context.Context, collection string) ([]snapshot.IndexDef, error) {
	return s.m.Collections[collection].Indexes, nil
}

func (s *chainSnapshot) ScanSince(ctx context.Context, collection string, _ *snapshot.Position, fn func(snapshot.Document) error) (snapshot.LayerMode, error) {
	return snapshot.ContentMode("compacted from storage"), s.Scan(ctx, collection, fn)
}

// Scan sends the chain's documents in id byte order, paced: the chain's merged
// fingerprint run names the ids, and each basePage of them is read as a span, the
// next span read while this one's documents are sent. A span that holds other ids
// than the run names fails the base.
func (s *chainSnapshot) Scan(ctx context.Context, collection string, fn func(snapshot.Document) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	spans := make(chan []snapshot.Document, 2)
	var rerr error
	go func() {
		defer close(spans)
		rerr = s.readSpans(ctx, collection, spans)
	}()
	for docs := range spans {
		if err := s.pace.WaitN(ctx, len(docs)); err != nil {
			return err
		}
		for _, d := range docs {
			s.rows.Add(1)
			s.bytes.Add(int64(len(d.Body)))
			if err := fn(d); err != nil {
				return err
			}
		}
	}
	return rerr
}

// readSpans reads the chain's documents a span at a time into out, until the end or
// an error, which it returns.
func (s *chainSnapshot) readSpans(ctx context.Context, collection string, out chan<- []snapshot.Document) error {
	in := snapshot.ChainRef{Dataset: s.m.Dataset, Chain: s.m.Chain(collection), Collection: collection}
	run := openChainRun(ctx, s.runs, s.m.Collections[collection].Layers, collection)
	ids := make([]string, 0, basePage)
	for {
		e, ok, err := run.next()
		if err != nil {
			return fmt.Errorf("read the fingerprint run of %s at %s: %w", collection, s.m.Version, err)
		}
		if ok && len(ids) < basePage {
			ids = append(ids, e.ID)
			continue
		}
		to := ""
		if ok {
			to = e.ID
		}
		if len(ids) > 0 {
			docs, err := s.span(ctx, in, ids, to)
			if err != nil {
				return err
			}
			select {
			case out <- docs:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if !ok {
			return nil
		}
		ids = append(ids[:0], e.ID)
	}
}

// span reads the documents of ids, the run's ids from ids[0] up to to (exclusive;
// "" for the end), and checks that they are those ids.
func (s *chainSnapshot) span(ctx context.Context, in snapshot.ChainRef, ids []string, to string) ([]snapshot.Document, error) {
	docs, err := s.read(ctx, in, snapshot.Span{From: ids[0], Inclusive: true, To: to}, len(ids)+1)
	if err != nil {
		return nil, err
	}
	if len(docs) != len(ids) {
		return nil, fmt.Errorf("%s at %s: the fingerprint run names %d ids from %q, the documents %d", in.Collection, s.m.Version, len(ids), ids[0], len(docs))
	}
	for i, d := range docs {
		if d.ID != ids[i] {
			return nil, fmt.Errorf("%s at %s: the fingerprint run names %q where the documents hold %q", in.Collection, s.m.Version, ids[i], d.ID)
		}
	}
	return docs, nil
}

// read reads a span, again after a read that found storage unreachable.
func (s *chainSnapshot) read(ctx context.Context, in snapshot.ChainRef, sp snapshot.Span, limit int) ([]snapshot.Document, error) {
	for try := 0; ; try++ {
		docs, _, err := s.docs.ScanSpan(ctx, in, sp, limit)
		if err == nil || !errors.Is(err, snapshot.ErrUnavailable) || try+1 == spanTries || ctx.Err() != nil {
			return docs, err
		}
		if err := retry.Sleep(ctx, spanBackoff.Delay(try)); err != nil {
			return nil, err
		}
	}
}
