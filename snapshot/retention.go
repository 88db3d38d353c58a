package snapshot

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Retention: MaxAge GC counts from each cell's timestamp, so a version that stays
// current longer than the TTL would be collected while it is served. KeepAlive, run
// by the lease holder before each scheduled publish, prevents that: once the current
// version's data is older than half the TTL it asks for a republish (a fresh copy with
// fresh timestamps), or, when the dataset is pinned and must not move, rewrites the
// pinned version's cells in place.

// KeepAlive checks the current version's age against the TTL. For an unpinned dataset
// it returns opts with Republish set when a republish is due. For a pinned dataset it
// refreshes the pinned version in place when due and returns done = true with what it
// did: nothing is to be published while pinned.
func (p *Publisher) KeepAlive(ctx context.Context, opts PublishOptions) (PublishOptions, PublishResult, bool, error) {
	if err := p.Validate(); err != nil {
		return opts, PublishResult{}, false, err
	}
	run, res, done, err := p.keepAlive(ctx, opts)
	return run.opts, res, done, err
}

// keepAlive is KeepAlive returning the publish to run, which shares its read of the
// pointer and the current manifest (a Ticker's cycle).
func (p *Publisher) keepAlive(ctx context.Context, opts PublishOptions) (publishRun, PublishResult, bool, error) {
	run := publishRun{opts: opts}
	cur, cm, err := p.readCurrent(ctx, nil)
	if err != nil || cm == nil {
		return run, PublishResult{}, false, err
	}
	m := *cm
	run.current = &currentRead{ptr: cur, manifest: m} // the publish need not read them again
	res := PublishResult{Previous: cur.Version, NoOp: true, Pinned: cur.Pinned}
	if p.TTL <= 0 {
		return run, res, cur.Pinned, nil
	}
	age := p.now().Sub(m.DataTime())
	due := age >= p.TTL/2
	event := func(kind EventKind, attrs ...any) {
		attrs = append([]any{"age", age.Round(time.Millisecond).String(), "ttl", p.TTL.String()}, attrs...)
		observe(ctx, p.Observer, Event{Kind: kind, Dataset: p.Dataset, Version: cur.Version, Attrs: attrs})
	}
	switch {
	case cur.Pinned && due:
		event(EventPinnedRefresh)
		n, err := p.refresh(ctx, m)
		res.Refreshed = n
		return run, res, true, err
	case cur.Pinned:
		event(EventPinned, "reason", cur.Reason)
		return run, res, true, nil
	case due && !p.basesReady(ctx, m, age):
		// Bases for the old chains are built beside the stream; the version that
		// takes them is published once they are.
	case due:
		event(EventRepublish)
		run.opts.Republish = true
	}
	return run, res, false, nil
}

// BaseBesideLimit is how long past its data time a chain may wait for a base built
// beside the stream of versions (Publisher.Bases): three quarters of the TTL. Past
// it, the version that needs the base writes it, as it does without Bases.
func BaseBesideLimit(ttl time.Duration) time.Duration { return ttl / 4 * 3 }

// basesReady reports whether a republish of the layered version m, age past half
// the TTL, is to run now. With Bases, each chain past half the TTL gets a base built
// from storage beside the stream, and the republish waits until every one is built
// (it then takes them, reading no source row) or until the age reaches
// BaseBesideLimit.
func (p *Publisher) basesReady(ctx context.Context, m Manifest, age time.Duration) bool {
	if p.Bases == nil || m.Format != FormatLayered || age >= BaseBesideLimit(p.TTL) {
		return true
	}
	now := p.now()
	var old []string
	for _, name := range m.CollectionNames() {
		if a := now.Sub(m.CollectionDataTime(name)); a >= p.TTL/2 {
			old = append(old, name)
			p.Bases.Want(m, name, fmt.Sprintf("keep-alive: the chain's oldest layer is %s old, past half the TTL", a.Round(time.Second)))
		}
	}
	_, swapped := p.Bases.Swap(m, nil)
	for _, name := range old {
		if !slices.Contains(swapped, name) {
			return false
		}
	}
	return true
}

// refresh rewrites a version's cells with fresh timestamps, then records when.
func (p *Publisher) refresh(ctx context.Context, m Manifest) (int64, error) {
	at := p.now()
	n, err := p.Store.RefreshVersion(ctx, p.Dataset, m.Chains())
	if err != nil {
		return n, fmt.Errorf("refresh version %s: %w", m.Version, err)
	}
	m.RefreshedAt = at
	if err := p.Store.UpdateManifest(ctx, m, m.State); err != nil {
		return n, fmt.Errorf("record refresh of %s: %w", m.Version, err)
	}
	return n, nil
}

// RetentionNeed is what a dataset's current version asks of storage's GC rule for
// documents: to keep its cells its whole TTL, and to keep the oldest layer its chains
// read for more than a margin from now. Datasets sharing a table each have theirs; a
// rule must meet every one.
type RetentionNeed struct {
	Dataset string
	// Version is the dataset's current version; Pinned says a rollback pinned it.
	Version Version
	Pinned  bool
	// TTL is the version's TTL: its manifest's, or the configured one for a manifest
	// without its own.
	TTL time.Duration
	// Age is how old the oldest layer its chains read is: now less its data time.
	Age time.Duration
}

// NeedOf returns what the version ptr names, whose manifest is m, needs at now; ttl
// stands in for a manifest without a TTL of its own.
func NeedOf(dataset string, ptr Pointer, m Manifest, ttl time.Duration, now time.Time) RetentionNeed {
	if m.TTL > 0 {
		ttl = m.TTL
	}
	return RetentionNeed{Dataset: dataset, Version: ptr.Version, Pinned: ptr.Pinned, TTL: ttl, Age: max(now.Sub(m.DataTime()), 0)}
}

// Margin is the life the oldest layer must have left under a rule: a tenth of the
// TTL, as a rollback target needs.
func (n RetentionNeed) Margin() time.Duration { return n.TTL / 10 }

// Keep returns the least life a GC rule must guarantee a document cell: the TTL, and
// at least the oldest layer's age plus the margin.
func (n RetentionNeed) Keep() time.Duration { return max(n.TTL, n.Age+n.Margin()) }
