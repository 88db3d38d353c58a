package snapshot

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// TickStore records which replica claimed each scheduled tick.
type TickStore interface {
	// ClaimTick claims the tick numbered n for holder if nobody has; it reports
	// whether holder won and who owns the tick.
	ClaimTick(ctx context.Context, dataset string, n int64, holder string) (won bool, owner string, err error)
}

// Validate reports the first field the Ticker cannot tick with, naming it, in an
// error wrapping ErrInvalid: its Publisher's, a missing lease, tick store or holder,
// or a negative AcquireTimeout.
func (t *Ticker) Validate() error {
	if err := t.validateLease(); err != nil {
		return err
	}
	switch {
	case t.Ticks == nil:
		return invalid("ticker", "Ticks is required")
	case t.Holder == "":
		return invalid("ticker", "Holder is required")
	}
	return t.Publisher.Validate()
}

// validateLease is what a publish under the lease checks before it asks for the
// lease (a standby asks with no publisher to run): the lease and its timeout. It
// validates the publisher once it holds the lease.
func (t *Ticker) validateLease() error {
	bad := func(format string, args ...any) error { return invalid("ticker", format, args...) }
	switch {
	case t == nil:
		return bad("nil")
	case t.Lease == nil:
		return bad("Lease is required")
	case t.AcquireTimeout < 0:
		return bad("AcquireTimeout %s must not be negative (0 takes 1 minute)", t.AcquireTimeout)
	}
	return nil
}

// Ticker runs scheduled cycles on one replica. Every replica runs the schedule; for
// each tick, the replica that claims the tick takes the lease and publishes.
// The tick's number is computed from its scheduled time, never from the clock, so
// every replica names the same tick alike.
type Ticker struct {
	Publisher *Publisher
	Lease     Lease
	Ticks     TickStore
	// Holder identifies this replica in tick claims.
	Holder string
	// AcquireTimeout bounds the wait for the lease; default 1 minute.
	AcquireTimeout time.Duration
	// Observer receives what the ticker does besides its result; nil discards it.
	Observer Observer

	mu sync.Mutex
	// abandonChecked is when this replica last looked for abandoned versions.
	abandonChecked time.Time
}

// AbandonCheckEvery is how often a replica's cycles look for versions abandoned by
// earlier lease holders: its first cycle does, and then one a minute. A version
// abandoned meanwhile can never be flipped (its writer's token is fenced out), it only
// shows as writing until then. The first check reads the manifests of every version
// still writing; later ones only those made since AbandonLookback before the last
// check (a version is made on its writer's clock, a moment before its manifest is
// written), so a sync every 250 ms does not make each check read more.
const (
	AbandonCheckEvery = time.Minute
	AbandonLookback   = time.Hour
)

// TickResult says what one tick did.
type TickResult struct {
	Tick int64
	// Claimed is set when this replica won the tick; Owner names who did.
	Claimed bool
	Owner   string
	// Fence is the lease token the publish ran under.
	Fence   uint64
	Publish PublishResult
}

// Tick runs the cycle for one scheduled tick: claim the tick, take the lease, mark
// versions abandoned by earlier holders failed, publish under the lease's token, and
// release the lease. The publish is cancelled if the lease is lost.
func (t *Ticker) Tick(ctx context.Context, n int64, opts PublishOptions) (TickResult, error) {
	res := TickResult{Tick: n}
	if err := t.Validate(); err != nil {
		return res, err
	}
	won, owner, err := t.Ticks.ClaimTick(ctx, t.Publisher.Dataset, n, t.Holder)
	if err != nil {
		return res, fmt.Errorf("claim tick %d: %w", n, err)
	}
	res.Owner = owner
	if !won {
		return res, nil
	}
	res.Claimed = true
	opts.Tick = n
	pub, token, err := t.publishLeased(ctx, t.AcquireTimeout, opts)
	res.Publish, res.Fence = pub, token
	return res, err
}

// PublishLeased takes the lease and publishes once under its token (syncer once).
func (t *Ticker) PublishLeased(ctx context.Context, opts PublishOptions) (PublishResult, uint64, error) {
	return t.publishLeased(ctx, t.AcquireTimeout, opts)
}

// PublishLeasedWithin is PublishLeased waiting at most wait for the lease, rather than
// AcquireTimeout.
func (t *Ticker) PublishLeasedWithin(ctx context.Context, wait time.Duration, opts PublishOptions) (PublishResult, uint64, error) {
	return t.publishLeased(ctx, wait, opts)
}

func (t *Ticker) publishLeased(ctx context.Context, timeout time.Duration, opts PublishOptions) (PublishResult, uint64, error) {
	if err := t.validateLease(); err != nil {
		return PublishResult{}, 0, err
	}
	if timeout <= 0 {
		timeout = time.Minute
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	hold, err := t.Lease.Acquire(actx)
	cancel()
	if err != nil {
		return PublishResult{}, 0, fmt.Errorf("acquire lease: %w", err)
	}
	defer func() {
		rctx, cancel := Detach(ctx, cleanupTimeout)
		defer cancel()
		if err := hold.Release(rctx); err != nil && !errors.Is(err, ErrLeaseLost) {
			observe(ctx, t.Observer, Event{Kind: EventReleaseLeaseFailed, Attrs: []any{"fence", hold.Fence(), "err", err}})
		}
	}()
	pctx, cancelPub := context.WithCancelCause(ctx)
	defer cancelPub(nil)
	stop := context.AfterFunc(hold.Context(), func() {
		select {
		case <-hold.Lost():
			cancelPub(ErrLeaseLost)
		default:
		}
	})
	defer stop()

	if err := t.Publisher.Validate(); err != nil {
		return PublishResult{}, hold.Fence(), err
	}
	t.failAbandoned(pctx, hold.Fence())
	run, kept, done, err := t.Publisher.keepAlive(pctx, opts)
	if err != nil || done {
		return kept, hold.Fence(), err
	}
	run.opts.Fence = hold.Fence()
	res, err := t.Publisher.publish(pctx, run)
	if err != nil && context.Cause(pctx) == ErrLeaseLost {
		err = fmt.Errorf("%w (token %d): %v", ErrLeaseLost, hold.Fence(), err)
	}
	return res, hold.Fence(), err
}

// failAbandoned marks abandoned versions failed, at most every AbandonCheckEvery.
func (t *Ticker) failAbandoned(ctx context.Context, token uint64) {
	now := t.Publisher.now()
	t.mu.Lock()
	last := t.abandonChecked
	t.mu.Unlock()
	if !last.IsZero() && now.Sub(last) < AbandonCheckEvery {
		return
	}
	var since time.Time
	if !last.IsZero() {
		since = last.Add(-AbandonLookback)
	}
	if _, err := t.Publisher.FailAbandoned(ctx, token, since); err != nil {
		observe(ctx, t.Observer, Event{Kind: EventMarkAbandonedFailed, Attrs: []any{"err", err}})
		return
	}
	t.mu.Lock()
	t.abandonChecked = now
	t.mu.Unlock()
}
