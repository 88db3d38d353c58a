package snapshot

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// SlotStore records which replica claimed each scheduled tick.
type SlotStore interface {
	// ClaimSlot claims the slot for holder if nobody has; it reports whether holder
	// won and who owns the slot.
	ClaimSlot(ctx context.Context, dataset string, slot int64, holder string) (won bool, owner string, err error)
}

// Ticker runs scheduled cycles on one replica. Every replica runs the schedule; for
// each tick, the replica that claims the tick's slot takes the lease and publishes.
// The slot is computed from the tick's scheduled time, never from the clock, so every
// replica names the same slot for the same tick.
type Ticker struct {
	Publisher *Publisher
	Lease     Lease
	Slots     SlotStore
	// Holder identifies this replica in slot claims.
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
	Slot int64
	// Claimed is set when this replica won the slot; Owner names who did.
	Claimed bool
	Owner   string
	// Token is the lease token the publish ran under.
	Token   uint64
	Publish PublishResult
}

// Tick runs the cycle for one scheduled tick: claim the slot, take the lease, mark
// versions abandoned by earlier holders failed, publish under the lease's token, and
// release the lease. The publish is cancelled if the lease is lost.
func (t *Ticker) Tick(ctx context.Context, slot int64, opts PublishOptions) (TickResult, error) {
	res := TickResult{Slot: slot}
	won, owner, err := t.Slots.ClaimSlot(ctx, t.Publisher.Dataset, slot, t.Holder)
	if err != nil {
		return res, fmt.Errorf("claim slot %d: %w", slot, err)
	}
	res.Owner = owner
	if !won {
		return res, nil
	}
	res.Claimed = true
	opts.Slot = slot
	pub, token, err := t.publishLeased(ctx, t.AcquireTimeout, opts)
	res.Publish, res.Token = pub, token
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
			observe(ctx, t.Observer, Event{Kind: EventReleaseLeaseFailed, Attrs: []any{"token", hold.Token(), "err", err}})
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

	t.failAbandoned(pctx, hold.Token())
	run, kept, done, err := t.Publisher.keepAlive(pctx, opts)
	if err != nil || done {
		return kept, hold.Token(), err
	}
	run.opts.Token = hold.Token()
	res, err := t.Publisher.publish(pctx, run)
	if err != nil && context.Cause(pctx) == ErrLeaseLost {
		err = fmt.Errorf("%w (token %d): %v", ErrLeaseLost, hold.Token(), err)
	}
	return res, hold.Token(), err
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
