package snapshot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ManifestStore keeps manifests.
type ManifestStore interface {
	// CreateManifest stores a new manifest; ErrConflict if the version exists.
	CreateManifest(ctx context.Context, m Manifest) error
	// UpdateManifest replaces the stored manifest with m only if its stored state is
	// from; ErrConflict when it is not, ErrNotFound when there is no such manifest.
	UpdateManifest(ctx context.Context, m Manifest, from State) error
	// ReadManifest returns a manifest, or ErrNotFound.
	ReadManifest(ctx context.Context, dataset string, v Version) (Manifest, error)
	// ManifestsInState returns the dataset's manifests in state st whose versions
	// were made at or after since (the zero time for all), oldest first.
	ManifestsInState(ctx context.Context, dataset string, st State, since time.Time) ([]Manifest, error)
}

// PublishStore is what the publisher needs from storage.
type PublishStore interface {
	PointerStore
	ManifestStore
	// RefreshVersion rewrites every cell of the given chains' layers (collection →
	// chain) with a fresh timestamp, so TTL GC does not collect a version still
	// served. It returns the number of documents and tombstones rewritten.
	RefreshVersion(ctx context.Context, dataset string, chains map[string][]Version) (int64, error)
}

// Publisher copies the source into storage under a fresh version and flips the pointer.
type Publisher struct {
	Dataset  string
	Store    PublishStore
	Source   Source
	Versions *VersionGen
	// Writer names this process in manifests and pointer flips.
	Writer string
	// TTL is the documents' time to live in storage (family d MaxAge). The current
	// version is republished, or refreshed in place when pinned, once its data is
	// older than half of it. Zero turns the keep-alive off.
	TTL time.Duration
	// Audit, when set, records every flip.
	Audit AuditStore
	// Crash, when set, is called at each CrashPoint (tests kill the process there).
	Crash func(at CrashPoint, rows int64)
	// Gates are checked per collection before the flip; a collection without an entry
	// gets DefaultGate unless DefaultGate is set here.
	Gates       map[string]Gate
	DefaultGate *Gate
	// Incremental writes layered versions: per collection a delta against the
	// parent, or a base (package layer). It needs a source that implements DeltaSnapshot;
	// otherwise every version is a full copy.
	Incremental bool
	Now         func() time.Time
	// Observer receives what the publisher does besides its result (a sync started,
	// a version published, bookkeeping that failed); nil discards it.
	Observer Observer
	// Data writes each version's documents: layers, or a full copy (package layer).
	Data VersionWriter
	// Bases, when set, builds bases beside the stream of versions (package layer's
	// Compactor): a chain that grew long or old is compacted from storage while
	// versions keep being published, and a later version takes the base. Nil writes
	// such bases in the version that needs them.
	Bases Bases
}

// Bases builds collections' bases beside the stream of versions. A base is written
// under a layer version of its own from what a published version's chain holds, so
// that chain and the base hold the same documents; a later version whose chain still
// ends with that chain takes the base in its place.
type Bases interface {
	// Want asks for a base of collection, built from version m's chain; why says why.
	// It returns at once. A base wanted already, built, or failed a moment ago is not
	// started again.
	Want(m Manifest, collection, why string)
	// Swap returns m with every chain a built base can replace replaced (the chain's
	// layers the base was built from give way to the base), and the collections it
	// swapped, in name order. m itself is not changed. A base read from the source
	// (a held or new collection's) stands in m for the collection whole, its Held
	// naming the position it was read at: the version catches it up from there.
	// A base read from the source of a collection held (from Holding, when the
	// version's snapshot was opened) is left for a later version: the snapshot did
	// not count the collection's changes.
	Swap(m Manifest, held []string) (Manifest, []string)
	// Holding returns, in name order, the collections held in m (Held set) that a
	// version over m holds still: no base read from the source waits to join it.
	Holding(m Manifest) []string
	// Ready reports whether a base built for m's collections waits to join a
	// version: a publish then runs even when the source has not changed.
	Ready(m Manifest) bool
}

// VersionWriter writes a version's documents under its prefix: per collection a layer
// over the parent's chain, or a full copy. Package layer implements it.
type VersionWriter interface {
	// WriteVersion writes every collection of req from its source snapshot and returns
	// what the version holds of each. A layer that disagrees with its parent fails
	// with an error wrapping ErrDeltaInconsistent.
	WriteVersion(ctx context.Context, req WriteRequest) (WriteResult, error)
	// Flipped tells the writer that the pointer names m now: what m's layers hold is
	// what the next delta is computed against.
	Flipped(m Manifest)
}

// WriteRequest is one version for a VersionWriter to write.
type WriteRequest struct {
	Snap        SourceSnapshot
	Collections []string
	// Manifest is the version's, as created: layered (Format) or a full copy.
	Manifest Manifest
	// Parent is the current version, which layers are written against; nil for none.
	Parent *Manifest
	// Base writes every layer as a base (a delta was inconsistent).
	Base bool
	// Why, with Base, says why every layer is a base (default: a delta was
	// inconsistent with its parent).
	Why string
	// Swapped names the collections whose chain in Parent took a base built beside
	// the stream (Bases.Swap): their layer merges none of the chain's deltas, so
	// that the version's chain stays its stored parent's plus its own layer.
	Swapped []string
	// Crash, when set, is called at CrashMidWrite.
	Crash func(at CrashPoint, rows int64)
	// ChunkDone, when set, is called as each chunk of a base read in chunks
	// (ChunkedSnapshot) ends, once every document up to its last id is in storage,
	// with that id and the documents written through it.
	ChunkDone func(ctx context.Context, last string, rows int64) error
}

// WriteResult is what a written version holds.
type WriteResult struct {
	Collections  map[string]CollectionStats
	BytesWritten int64
}

// PublishOptions tune one publish.
type PublishOptions struct {
	// Fence is the fencing token to flip with, from a lease. Zero means optimistic:
	// the stored fence plus one, so that of two concurrent flips only one applies.
	Fence uint64
	// Force publishes even when the source has not changed, and skips the
	// validation gates (syncer once --force).
	Force bool
	// Republish publishes even when the source has not changed, gates still applied
	// (the TTL keep-alive: the result's and the audit entry's reason is ReasonTTL).
	Republish bool
	// Tick is the scheduled tick this publish is for, recorded in the manifest.
	Tick int64
	// ChangeXmax, for a publish started by a watched change: the source snapshot's
	// xmax when the change was seen (the change's transaction is below it). When the
	// current version's snapshot has every transaction below it finished (its xmin is
	// at or above it), the change is published already, by another replica, and
	// nothing is read.
	ChangeXmax uint64
	// ChangeSeen is when the change this publish is for was first seen, recorded in
	// the manifest for the commit-to-publish delay.
	ChangeSeen time.Time
}

// publishRun is one publish as the publisher runs it: the caller's options and what
// the publisher adds to them.
type publishRun struct {
	opts    PublishOptions
	current *currentRead // the pointer and its manifest as the tick's keep-alive read them; nil to read them
	base    bool         // write every layer as a base (a delta was inconsistent)
}

// reason is why the publish runs, for the result and the audit trail.
func (r publishRun) reason() PublishReason {
	if r.opts.Republish {
		return ReasonTTL
	}
	return ""
}

// currentRead is the pointer and the manifest of the version it names.
type currentRead struct {
	ptr      Pointer
	manifest Manifest
}

// PublishResult says what a publish did.
type PublishResult struct {
	// Manifest is the new version's manifest (zero when NoOp).
	Manifest Manifest
	// Previous is the version the pointer named before.
	Previous Version
	// NoOp is set when nothing was published: the source had not changed (its
	// position or fingerprints were the current version's and nothing was read, or
	// every collection's digest was, and the copy written is discarded: marked failed,
	// reason "unchanged", left to expire), or the dataset is pinned.
	NoOp bool
	// Pinned is set when the dataset is pinned, so nothing was published.
	Pinned bool
	// Refreshed counts the documents of the pinned version rewritten to keep them
	// from expiring.
	Refreshed int64
	// Reason says why a publish that was not scheduled by a change ran (ReasonTTL),
	// or why a change-driven one did nothing (ReasonPublishedAlready).
	Reason PublishReason
}

// PublishReason says why a publish ran, or did nothing, when neither a change nor
// the schedule explains it (PublishResult.Reason); its text is recorded in the audit
// trail and logs.
type PublishReason string

// Publish reasons.
const (
	// ReasonTTL: the current version's data was past half the TTL (KeepAlive).
	ReasonTTL PublishReason = "ttl"
	// ReasonPublishedAlready: the change was published already, by another replica
	// (PublishOptions.ChangeXmax); nothing was read.
	ReasonPublishedAlready PublishReason = "published already"
)

// cleanupTimeout bounds the bookkeeping done after a failure.
const cleanupTimeout = 10 * time.Second

// Publish runs one sync: open a consistent source snapshot, write every document under
// a fresh version, seal the manifest once the written counts equal the counts read,
// and flip the pointer with a fenced conditional write. Whatever fails, the pointer is
// left as it was and the half-written version is marked failed and left to expire.
func (p *Publisher) Publish(ctx context.Context, opts PublishOptions) (PublishResult, error) {
	if err := p.Validate(); err != nil {
		return PublishResult{}, err
	}
	return p.publish(ctx, publishRun{opts: opts})
}

// Validate reports the first field the Publisher cannot publish with, naming it, in
// an error wrapping ErrInvalid: a missing dataset, store, source, version generator
// or writer, a negative TTL, or a gate with a negative or NaN bound. Publish,
// KeepAlive and a Ticker's publishes call it first.
func (p *Publisher) Validate() error {
	bad := func(format string, args ...any) error { return invalid("publisher", format, args...) }
	switch {
	case p == nil:
		return bad("nil")
	case p.Dataset == "":
		return bad("Dataset is required")
	case p.Store == nil:
		return bad("Store is required")
	case p.Source == nil:
		return bad("Source is required")
	case p.Versions == nil:
		return bad("Versions is required")
	case p.Data == nil:
		return bad("Data is required")
	case p.TTL < 0:
		return bad("TTL %s must not be negative (0 turns the keep-alive off)", p.TTL)
	}
	if p.DefaultGate != nil {
		if err := p.DefaultGate.validate(); err != nil {
			return bad("DefaultGate: %v", err)
		}
	}
	var wrong []string // the gates that fail, in name order once found (rarely)
	for name, g := range p.Gates {
		if g.validate() != nil {
			wrong = append(wrong, name)
		}
	}
	if len(wrong) > 0 {
		slices.Sort(wrong)
		return bad("gate of %s: %v", wrong[0], p.Gates[wrong[0]].validate())
	}
	return nil
}

// publish runs Publish's attempt, and once more with every layer a base when a delta
// was inconsistent with its parent (the attempt has marked its version failed).
func (p *Publisher) publish(ctx context.Context, run publishRun) (PublishResult, error) {
	for {
		a := &attempt{p: p, run: run, started: p.now()}
		res, err := a.publish(ctx)
		if run.base || !errors.Is(err, ErrDeltaInconsistent) {
			return res, err
		}
		a.event(ctx, EventDeltaInconsistent, "err", err)
		run.base = true
	}
}

// attempt is one try at a publish: the state it starts from and the version it writes.
type attempt struct {
	p       *Publisher
	run     publishRun
	started time.Time
	cur     Pointer   // the pointer as read; zero when nothing is published
	current *Manifest // the manifest of the version it names; nil when none
	m       Manifest  // the new version
	held    []string  // the collections the snapshot was opened holding (Bases.Holding)
}

// event reports an event about the attempt's version.
func (a *attempt) event(ctx context.Context, kind EventKind, attrs ...any) {
	observe(ctx, a.p.Observer, Event{Kind: kind, Dataset: a.p.Dataset, Version: a.m.Version, Attrs: attrs})
}

// publish runs the attempt's steps (see Publish), each of which may end it.
func (a *attempt) publish(ctx context.Context) (PublishResult, error) {
	p, opts := a.p, a.run.opts
	if res, err := a.begin(ctx); err != nil || res.NoOp {
		return res, err
	}
	snap, err := a.open(ctx)
	if err != nil {
		return PublishResult{}, fmt.Errorf("open source: %w", err)
	}
	defer func() {
		cctx, cancel := Detach(ctx, cleanupTimeout)
		defer cancel()
		_ = snap.Close(cctx)
	}()
	pos := snap.Position()
	crash(p.Crash, CrashAfterOpen, 0)

	if a.current != nil && !opts.Force && !opts.Republish && a.current.Source.SameContents(pos, p.Source.Collections()) && !a.basesReady() {
		observe(ctx, p.Observer, Event{Kind: EventSourceUnchanged, Dataset: p.Dataset, Version: a.cur.Version,
			Attrs: []any{"source_lsn", pos.String()}})
		a.holds(ctx, pos, a.current.Source)
		a.cover(ctx, pos)
		return PublishResult{Previous: a.cur.Version, NoOp: true}, nil
	}
	if err := a.write(ctx, snap); err != nil {
		return PublishResult{}, err
	}
	// The snapshot is no longer needed; end the transaction before the flip.
	_ = snap.Close(ctx)

	if res, err := a.vet(ctx); err != nil || res.NoOp {
		if err == nil {
			a.holds(ctx, pos, a.current.Source)
			a.cover(ctx, pos)
		}
		return res, err
	}
	if err := a.seal(ctx); err != nil {
		return PublishResult{}, err
	}
	flip, err := a.flip(ctx)
	if err != nil {
		return PublishResult{}, err
	}
	a.holds(ctx, pos, pos)
	return a.published(ctx, flip), nil
}

// open opens the source's snapshot, telling a SinceOpener the parent's position
// (none for a publish with base layers, which compares with nothing), and a
// HoldingOpener the collections the version holds still.
func (a *attempt) open(ctx context.Context) (SourceSnapshot, error) {
	if so, ok := a.p.Source.(SinceOpener); ok {
		var since *Position
		if a.current != nil && !a.run.base {
			since = &a.current.Source
			ho, ok := a.p.Source.(HoldingOpener)
			if ok && a.p.Bases != nil && a.current.Format == FormatLayered {
				if a.held = a.p.Bases.Holding(*a.current); len(a.held) > 0 {
					return ho.OpenHolding(ctx, since, a.held)
				}
			}
		}
		return so.OpenSince(ctx, since)
	}
	return a.p.Source.Open(ctx)
}

// holds tells a Follower source that the pointer's version, read at ptr, holds what
// the snapshot at pos read.
func (a *attempt) holds(ctx context.Context, pos, ptr Position) {
	if f, ok := a.p.Source.(Follower); ok {
		f.Holds(ctx, pos, ptr)
	}
}

// cover records beside the pointer that its version holds everything the snapshot at
// pos saw (the source had not changed), so that a read-your-writes token of a commit
// that changed nothing served is covered without a flip. Failing to record delays
// such tokens and nothing else: it is reported, not returned.
func (a *attempt) cover(ctx context.Context, pos Position) {
	token := a.run.opts.Fence
	if token == 0 {
		token = a.cur.Fence
	}
	c := Coverage{Version: a.cur.Version, PgSnapshot: pos.PgSnapshot, LSN: pos.LSN, Recovery: pos.Recovery,
		NextXid: pos.NextXid, Demand: a.cur.Demand, At: a.p.now()}
	if err := a.p.Store.RecordCoverage(ctx, a.p.Dataset, token, c); err != nil {
		observe(ctx, a.p.Observer, Event{Kind: EventCoverageFailed, Dataset: a.p.Dataset, Version: a.cur.Version,
			Attrs: []any{"err", err}})
	}
}

// begin reads the current state. A result that is a no-op, or an error, is the
// publish's: the dataset is pinned, or the change was published already.
func (a *attempt) begin(ctx context.Context) (PublishResult, error) {
	p, opts := a.p, a.run.opts
	cur, cm, err := p.readCurrent(ctx, a.run.current)
	if err != nil {
		return PublishResult{}, err
	}
	a.cur, a.current = cur, cm
	if cm == nil {
		return PublishResult{}, nil
	}
	if cur.Pinned {
		return PublishResult{Previous: cur.Version}, fmt.Errorf("dataset %s is pinned to %s (%s): unpin it to publish: %w",
			p.Dataset, cur.Version, cur.Reason, ErrPinned)
	}
	if cm.State == StateSealed {
		confirmed := p.confirmFlip(ctx, *cm, cur)
		a.current = &confirmed
	}
	if opts.ChangeXmax > 0 && !opts.Force && !opts.Republish && a.current.Source.SnapshotXmin() >= opts.ChangeXmax {
		return PublishResult{Previous: cur.Version, NoOp: true, Reason: ReasonPublishedAlready}, nil
	}
	return PublishResult{}, nil
}

// write creates the new version's manifest and writes its documents: layers against
// the current version, or a full copy. A version that fails is marked failed.
func (a *attempt) write(ctx context.Context, snap SourceSnapshot) error {
	p, opts := a.p, a.run.opts
	pos := snap.Position()
	a.m = Manifest{
		Dataset:     p.Dataset,
		Version:     p.Versions.Next(),
		State:       StateWriting,
		Collections: map[string]CollectionStats{},
		Source:      pos,
		Writer:      p.Writer,
		StartedAt:   a.started,
		Fence:       opts.Fence,
		Tick:        opts.Tick,
		TTL:         p.TTL,
		ChangeSeen:  opts.ChangeSeen,
	}
	if _, ok := snap.(DeltaSnapshot); ok && p.Incremental {
		a.m.Format = FormatLayered
		if a.current != nil {
			a.m.Parent = a.cur.Version
		}
	}
	if err := p.Store.CreateManifest(ctx, a.m); err != nil {
		return fmt.Errorf("create manifest %s: %w", a.m.Version, err)
	}
	a.event(ctx, EventSyncStarted, "source_lsn", pos.String(), "forced", opts.Force)

	parent, swapped := a.swap(ctx)
	res, err := p.Data.WriteVersion(ctx, WriteRequest{Snap: snap, Collections: p.Source.Collections(),
		Manifest: a.m, Parent: parent, Base: a.run.base, Swapped: swapped, Crash: p.Crash})
	for name, st := range res.Collections {
		a.m.Collections[name] = st
	}
	a.m.BytesWritten = res.BytesWritten
	if err != nil {
		p.fail(ctx, a.m, StateWriting, err)
		return err
	}
	if err := a.m.CheckComplete(); err != nil {
		p.fail(ctx, a.m, StateWriting, err)
		return err
	}
	return nil
}

// basesReady reports whether a base built beside the stream waits to join the
// current version's collections.
func (a *attempt) basesReady() bool {
	return a.p.Bases != nil && a.current != nil && a.current.Format == FormatLayered && a.p.Bases.Ready(*a.current)
}

// swap returns the parent the version's layers are written over: the current
// version, with the chains a base built beside the stream replaces replaced (same
// documents, a shorter or younger chain), and the collections swapped.
func (a *attempt) swap(ctx context.Context) (*Manifest, []string) {
	if a.p.Bases == nil || a.current == nil || a.run.base || a.m.Format != FormatLayered {
		return a.current, nil
	}
	sw, names := a.p.Bases.Swap(*a.current, a.held)
	for _, name := range names {
		observe(ctx, a.p.Observer, Event{Kind: EventBaseSwapped, Dataset: a.p.Dataset, Version: a.m.Version, Collection: name,
			Attrs: swapAttrs(a.current.Collections[name].Layers, sw.Collections[name].Layers)})
	}
	if len(names) == 0 {
		return a.current, nil
	}
	return &sw, names
}

// swapAttrs names the base a chain took and the layers it replaced, for an event.
func swapAttrs(old, swapped []LayerRef) []any {
	kept := len(swapped) - 1
	return []any{"base", swapped[kept].Version, "replaced", LayerVersions(old[kept:])}
}

// vet checks the written version before it is sealed. A result that is a no-op (the
// same digests as the current version; the version is then marked unchanged), or an
// error (a gate refused it; marked failed), is the publish's.
func (a *attempt) vet(ctx context.Context) (PublishResult, error) {
	p, opts := a.p, a.run.opts
	if a.current != nil && !opts.Force && !opts.Republish && sameCollections(*a.current, a.m) {
		a.event(ctx, EventSameDigests, "current", a.cur.Version)
		p.settle(ctx, a.m, StateWriting, StateUnchanged, "identical to "+string(a.cur.Version))
		return PublishResult{Previous: a.cur.Version, NoOp: true}, nil
	}
	if !opts.Force {
		if err := p.checkGates(a.current, a.m); err != nil {
			a.event(ctx, EventPublishRefused, "err", err)
			p.fail(ctx, a.m, StateWriting, err)
			return PublishResult{Previous: a.cur.Version}, err
		}
	}
	return PublishResult{}, nil
}

// seal marks the written version sealed: complete, and servable once flipped to.
func (a *attempt) seal(ctx context.Context) error {
	p := a.p
	sealed := a.m
	sealed.State = StateSealed
	sealed.SealedAt = p.now()
	if err := p.Store.UpdateManifest(ctx, sealed, StateWriting); err != nil {
		err = fmt.Errorf("seal version %s: %w", a.m.Version, err)
		p.fail(ctx, a.m, StateWriting, err)
		return err
	}
	a.m = sealed
	crash(p.Crash, CrashAfterSeal, a.m.Rows())
	return nil
}

// flip points the dataset at the sealed version, fenced by the options' token or,
// optimistically, the stored fence plus one.
func (a *attempt) flip(ctx context.Context) (Flip, error) {
	p, m := a.p, a.m
	flip := Flip{Version: m.Version, Fence: a.run.opts.Fence, Source: m.Source, By: p.Writer, At: p.now(), Demand: a.cur.Demand}
	if a.current != nil {
		flip.Expected = a.cur.Version
		if flip.Fence == 0 {
			flip.Fence = a.cur.Fence + 1
		}
	} else if flip.Fence == 0 {
		flip.Fence = 1
	}
	if _, err := p.Store.FlipPointer(ctx, p.Dataset, flip); err != nil {
		err = fmt.Errorf("flip pointer to %s: %w", m.Version, err)
		if !errors.Is(err, ErrOutcomeUnknown) {
			p.fail(ctx, m, StateSealed, err)
		}
		// Unknown: the pointer may name the version, so it stays sealed (servable);
		// the next run sees which.
		return flip, err
	}
	crash(p.Crash, CrashAfterFlip, m.Rows())
	return flip, nil
}

// published does the bookkeeping after the flip: the version marked published, the
// replaced one retired, the flip audited. The pointer already names the version, so
// failures here are reported as events, not returned: the publish has happened.
func (a *attempt) published(ctx context.Context, flip Flip) PublishResult {
	p := a.p
	published := a.m
	published.State = StatePublished
	published.PublishedAt = flip.At
	published.Fence = flip.Fence
	bg, cancel := Detach(ctx, cleanupTimeout)
	defer cancel()
	if err := p.Store.UpdateManifest(bg, published, StateSealed); err != nil {
		a.event(ctx, EventMarkPublishedFailed, "err", err)
	}
	if a.current != nil {
		a.retire(bg)
	}
	p.Data.Flipped(published)
	if p.Audit != nil {
		e := AuditEntry{Dataset: p.Dataset, At: flip.At, Action: ActionFlip, From: a.cur.Version, To: published.Version,
			Fence: flip.Fence, By: p.Writer, Reason: string(a.run.reason())}
		if err := p.Audit.AppendAudit(bg, e); err != nil {
			a.event(ctx, EventAuditFlipFailed, "err", err)
		}
	}
	a.event(ctx, EventPublished, "previous", a.cur.Version, "fence", flip.Fence,
		"rows", published.Rows(), "duration", p.now().Sub(a.started).String())
	return PublishResult{Manifest: published, Previous: a.cur.Version, Reason: a.run.reason()}
}

// FailAbandoned marks failed every version made at or after since (the zero time for
// all) and still writing under a fencing token older than token: its writer no longer
// holds the lease, so it can never be sealed. Only the current lease holder should
// call it. It returns how many it marked.
func (p *Publisher) FailAbandoned(ctx context.Context, token uint64, since time.Time) (int, error) {
	ms, err := p.Store.ManifestsInState(ctx, p.Dataset, StateWriting, since)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range ms {
		if m.State != StateWriting || m.Fence >= token {
			continue
		}
		failed := m
		failed.State = StateFailed
		failed.Reason = fmt.Sprintf("abandoned: its writer (token %d) lost the lease to token %d", m.Fence, token)
		if err := p.Store.UpdateManifest(ctx, failed, StateWriting); err != nil && !errors.Is(err, ErrConflict) {
			return n, err
		}
		n++
		observe(ctx, p.Observer, Event{Kind: EventMarkedAbandoned, Dataset: p.Dataset, Version: m.Version, Attrs: []any{"writer", m.Writer}})
	}
	return n, nil
}

// sameCollections reports whether m holds exactly what cur holds: the same collection
// definitions and, per collection, the same count and digest.
func sameCollections(cur, m Manifest) bool {
	if cur.Source.Config != m.Source.Config || len(cur.Collections) != len(m.Collections) {
		return false
	}
	for name, c := range m.Collections {
		o, ok := cur.Collections[name]
		if !ok || o.Rows != c.Rows || o.Digest != c.Digest || (o.Held == nil) != (c.Held == nil) {
			return false
		}
	}
	return true
}

// checkGates checks every collection of m against its gate and the current version.
func (p *Publisher) checkGates(cur *Manifest, m Manifest) error {
	for _, name := range m.CollectionNames() {
		g, ok := p.Gates[name]
		if !ok {
			g = DefaultGate()
			if p.DefaultGate != nil {
				g = *p.DefaultGate
			}
		}
		before := int64(-1)
		if cur != nil {
			if c, ok := cur.Collections[name]; ok {
				before = c.Rows
			}
		}
		if err := g.Check(name, before, m.Collections[name].Rows); err != nil {
			return err
		}
	}
	return nil
}

// fail marks the version failed, from the state it is in.
func (p *Publisher) fail(ctx context.Context, m Manifest, from State, cause error) {
	p.settle(ctx, m, from, StateFailed, cause.Error())
}

// settle moves the version from state from to its end state to, with reason. It runs
// on a context that outlives the caller's, so that a cancelled sync still records
// its end.
func (p *Publisher) settle(ctx context.Context, m Manifest, from, to State, reason string) {
	bg, cancel := Detach(ctx, cleanupTimeout)
	defer cancel()
	ended := m
	ended.State = to
	ended.Reason = Truncate(reason, 1000)
	if err := p.Store.UpdateManifest(bg, ended, from); err != nil {
		observe(ctx, p.Observer, Event{Kind: EventMarkFailedFailed, Dataset: p.Dataset, Version: m.Version, Attrs: []any{"state", to, "err", err}})
	}
}

// readCurrent returns the pointer and the current version's manifest (nil when none is
// published): read, unless the tick's KeepAlive already read them under the same lease
// (a flip since would be refused by its expected-version check anyway).
func (p *Publisher) readCurrent(ctx context.Context, read *currentRead) (Pointer, *Manifest, error) {
	if read != nil {
		m := read.manifest
		return read.ptr, &m, nil
	}
	cur, err := p.Store.ReadPointer(ctx, p.Dataset)
	if errors.Is(err, ErrNoVersion) {
		return Pointer{}, nil, nil
	}
	if err != nil {
		return Pointer{}, nil, fmt.Errorf("read pointer: %w", err)
	}
	m, err := p.Store.ReadManifest(ctx, p.Dataset, cur.Version)
	if err != nil {
		return Pointer{}, nil, fmt.Errorf("read current manifest: %w", err)
	}
	return cur, &m, nil
}

// confirmFlip marks published a sealed version the pointer names: a flip whose
// outcome was unknown (ErrOutcomeUnknown) that did apply, or one whose bookkeeping
// after the flip failed. Failures are reported as events: the manifest is servable
// either way.
func (p *Publisher) confirmFlip(ctx context.Context, m Manifest, cur Pointer) Manifest {
	published := m
	published.State, published.PublishedAt = StatePublished, cur.FlippedAt
	if err := p.Store.UpdateManifest(ctx, published, StateSealed); err != nil {
		observe(ctx, p.Observer, Event{Kind: EventMarkCurrentFailed, Dataset: p.Dataset, Version: m.Version, Attrs: []any{"err", err}})
		return m
	}
	observe(ctx, p.Observer, Event{Kind: EventMarkedCurrent, Dataset: p.Dataset, Version: m.Version})
	return published
}

// retire moves the replaced version from published to retired.
func (a *attempt) retire(ctx context.Context) {
	p, v := a.p, a.cur.Version
	old, err := p.Store.ReadManifest(ctx, p.Dataset, v)
	if err != nil {
		a.event(ctx, EventReadReplacedFailed, "previous", v, "err", err)
		return
	}
	if old.State != StatePublished {
		return
	}
	old.State = StateRetired
	if err := p.Store.UpdateManifest(ctx, old, StatePublished); err != nil {
		a.event(ctx, EventRetireFailed, "previous", v, "err", err)
	}
}

func (p *Publisher) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}
