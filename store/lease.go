package store

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/snapflip/snapflip/internal/retry"
	"github.com/snapflip/snapflip/snapshot"
)

// A lease is the row l#<name> with one cell c:state = token | seq | holder: token and
// seq are 8-byte big-endian numbers, holder the holder's id ("" once released). The
// token grows by exactly one with every acquire and never restarts; seq grows with every
// write, so a renewal changes the state even though the holder does not.
//
// Every write is a CheckAndMutateRow whose predicate is the exact state the writer
// last read. A contender takes a held lease over only after it has watched the state
// stay the same for the lease duration on its own monotonic clock; no machine's clock is
// compared with another's.
const colLeaseState = "state"

// leaseState is the decoded c:state cell.
type leaseState struct {
	token, seq uint64
	holder     string
}

func (s leaseState) encode() []byte {
	b := make([]byte, 16+len(s.holder))
	binary.BigEndian.PutUint64(b, s.token)
	binary.BigEndian.PutUint64(b[8:], s.seq)
	copy(b[16:], s.holder)
	return b
}

func decodeLeaseState(b []byte) (leaseState, error) {
	if len(b) < 16 {
		return leaseState{}, fmt.Errorf("lease state of %d bytes", len(b))
	}
	return leaseState{binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:]), string(b[16:])}, nil
}

// waitReportEvery is how often Acquire reports that it still waits for the same
// holder.
const waitReportEvery = 5 * time.Second

// LeaseConfig tunes a lease.
type LeaseConfig struct {
	// Holder identifies this contender; it must be unique per process. Required.
	Holder string
	// Duration is how long a holder's state must stay unchanged before a contender
	// takes over; default 15s.
	Duration time.Duration
	// RenewEvery is how often a holder renews, shorter than Duration; default
	// Duration/3.
	RenewEvery time.Duration
	// RetryMax caps Acquire's full-jitter backoff; default 1s.
	RetryMax time.Duration
	// BeforeAcquire, if set, runs before the write that would give this contender
	// the lease with the given token. The syncer advances the pointer's fence here,
	// so that a deposed holder is refused before the new one holds the lease.
	BeforeAcquire func(ctx context.Context, token uint64) error
	// Observer, if set, is told of acquires, takeovers, releases, losses and waits
	// (snapshot.EventLeaseAcquired through EventLeaseWaiting).
	Observer snapshot.Observer
}

// LeaseCell is where a Lease keeps its state: one cell, read whole and written only
// when it still holds the state the writer last read. A Bigtable row is one
// (Store.NewLease); another store (an in-memory one, for tests) brings its own to
// NewLeaseOn, and the lease's protocol is the same on both.
type LeaseCell interface {
	// ReadLease returns the named lease's state, nil when it was never taken.
	ReadLease(ctx context.Context, name string) ([]byte, error)
	// SwapLease writes next if the stored state is exactly prev (absent when prev is
	// nil) and reports whether it did. An error means the outcome is unknown: the
	// write may have applied.
	SwapLease(ctx context.Context, name string, prev, next []byte) (bool, error)
}

// Lease is a lock on a LeaseCell (a Bigtable row) with fencing tokens.
type Lease struct {
	cell LeaseCell
	name string
	cfg  LeaseConfig
	// reread bounds the re-read that decides a write whose reply was lost.
	reread func(ctx context.Context) (context.Context, context.CancelFunc)

	mu       sync.Mutex
	seen     []byte    // the held state last read
	seenAt   time.Time // when it was first read unchanged (monotonic)
	seenNext time.Time // when it may be taken over
}

var _ snapshot.Lease = (*Lease)(nil)

// DefaultLeaseConfig returns the defaults a zero field of LeaseConfig takes (but
// the Holder, which has none).
func DefaultLeaseConfig() LeaseConfig {
	return LeaseConfig{Duration: 15 * time.Second, RenewEvery: 5 * time.Second, RetryMax: time.Second}
}

// Validate reports the first bad value of c as an error naming its field: no
// Holder, a negative duration, or a renewal no sooner than the lease expires. A zero
// duration takes its default.
func (c LeaseConfig) Validate() error {
	switch {
	case c.Holder == "":
		return fmt.Errorf("%w lease config: Holder is required", snapshot.ErrInvalid)
	case c.Duration < 0:
		return fmt.Errorf("%w lease config: Duration %s is negative", snapshot.ErrInvalid, c.Duration)
	case c.RenewEvery < 0:
		return fmt.Errorf("%w lease config: RenewEvery %s is negative", snapshot.ErrInvalid, c.RenewEvery)
	case c.RetryMax < 0:
		return fmt.Errorf("%w lease config: RetryMax %s is negative", snapshot.ErrInvalid, c.RetryMax)
	}
	if d := c.withDefaults(); d.RenewEvery >= d.Duration {
		return fmt.Errorf("%w lease config: RenewEvery %s must be shorter than Duration %s, or a holder loses the lease between renewals",
			snapshot.ErrInvalid, d.RenewEvery, d.Duration)
	}
	return nil
}

// withDefaults fills c's zero fields: RenewEvery from Duration (a third of it).
func (c LeaseConfig) withDefaults() LeaseConfig {
	def := DefaultLeaseConfig()
	c.Duration = cmp.Or(c.Duration, def.Duration)
	c.RenewEvery = cmp.Or(c.RenewEvery, c.Duration/3)
	c.RetryMax = cmp.Or(c.RetryMax, def.RetryMax)
	return c
}

// NewLease returns the lease named name, or cfg.Validate's error.
func (s *Store) NewLease(name string, cfg LeaseConfig) (*Lease, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("lease %s: %w", name, err)
	}
	return &Lease{cell: bigtableCell{s}, name: name, cfg: cfg.withDefaults(), reread: s.reread}, nil
}

// NewLeaseOn returns the lease named name kept in cell, or cfg.Validate's error. A
// write whose reply is lost is decided by a re-read within DefaultConfig's OpTimeout.
func NewLeaseOn(cell LeaseCell, name string, cfg LeaseConfig) (*Lease, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("lease %s: %w", name, err)
	}
	timeout := DefaultConfig().OpTimeout
	return &Lease{cell: cell, name: name, cfg: cfg.withDefaults(), reread: func(ctx context.Context) (context.Context, context.CancelFunc) {
		return snapshot.Detach(ctx, timeout)
	}}, nil
}

// Cells returns the store's conditional cells, the rows l#<name>, where its leases
// are kept: a shared base's parts keep their marks there (package layer's Parts).
func (s *Store) Cells() LeaseCell { return bigtableCell{s} }

// bigtableCell keeps leases in the rows l#<name>, cell c:state.
type bigtableCell struct{ s *Store }

func leaseKey(name string) string { return "l#" + escapeComponent(name) }

func (c bigtableCell) ReadLease(ctx context.Context, name string) ([]byte, error) {
	ctx, cancel := c.s.op(ctx)
	defer cancel()
	row, err := c.s.tbl.ReadRow(ctx, leaseKey(name), bigtable.RowFilter(column(famControl, colLeaseState)))
	if err != nil {
		return nil, c.s.wrap(err, "read lease %s", name)
	}
	if cells := row[famControl]; len(cells) > 0 {
		return cells[0].Value, nil
	}
	return nil, nil
}

func (c bigtableCell) SwapLease(ctx context.Context, name string, prev, next []byte) (bool, error) {
	ctx, cancel := c.s.op(ctx)
	defer cancel()
	mut := bigtable.NewMutation()
	mut.DeleteCellsInColumn(famControl, colLeaseState)
	mut.Set(famControl, colLeaseState, bigtable.Now(), next)
	var cond *bigtable.Mutation
	var matched bool
	if prev == nil {
		cond = bigtable.NewCondMutation(column(famControl, colLeaseState), nil, mut)
	} else {
		cond = bigtable.NewCondMutation(valueEquals(famControl, colLeaseState, prev), mut, nil)
	}
	if err := c.s.tbl.Apply(ctx, leaseKey(name), cond, bigtable.GetCondMutationResult(&matched)); err != nil {
		return false, c.s.wrap(err, "write lease %s", name)
	}
	if prev == nil {
		return !matched, nil
	}
	return matched, nil
}

// readState returns the raw state cell, nil when the lease was never taken.
func (l *Lease) readState(ctx context.Context) ([]byte, error) {
	return l.cell.ReadLease(ctx, l.name)
}

// casState writes next if the stored state is exactly prev (absent when prev is nil).
// After an error it re-reads: the write applied if the state is now next.
func (l *Lease) casState(ctx context.Context, prev []byte, next leaseState) (bool, error) {
	ok, err := l.cell.SwapLease(ctx, l.name, prev, next.encode())
	if err != nil {
		// The write's outcome is unknown: re-read. Our state: it applied. The state we
		// expected: it did not, for want of an answer, not because the condition
		// failed, so it is an error the caller may retry (a renewal must not take it
		// for a takeover). Anything else: someone else wrote; the condition failed.
		rctx, cancelRead := l.reread(ctx)
		now, rerr := l.readState(rctx)
		cancelRead()
		switch {
		case rerr != nil:
			return false, fmt.Errorf("lease %s: write outcome unknown (%v) and re-read failed: %w", l.name, err, rerr)
		case bytes.Equal(now, next.encode()):
			return true, nil
		case bytes.Equal(now, prev):
			return false, fmt.Errorf("lease %s: write did not apply: %w", l.name, err)
		}
		return false, nil
	}
	return ok, nil
}

// TryAcquire takes the lease if it is free, released, or held by a holder whose state
// this contender has watched unchanged for Duration. Otherwise it returns ErrHeld.
func (l *Lease) TryAcquire(ctx context.Context) (snapshot.Hold, error) {
	raw, err := l.readState(ctx)
	if err != nil {
		return nil, err
	}
	var cur leaseState
	if raw != nil {
		if cur, err = decodeLeaseState(raw); err != nil {
			return nil, fmt.Errorf("lease %s: %w", l.name, err)
		}
	}
	kind := snapshot.EventLeaseAcquired
	if raw != nil && cur.holder != "" {
		if !l.expired(raw) {
			l.mu.Lock()
			at := time.Now().Add(time.Until(l.seenNext))
			l.mu.Unlock()
			return nil, &heldError{lease: l.name, holder: cur.holder, token: cur.token, takeoverAt: at}
		}
		kind = snapshot.EventLeaseTakeover
	}
	next := leaseState{token: cur.token + 1, seq: cur.seq + 1, holder: l.cfg.Holder}
	if l.cfg.BeforeAcquire != nil {
		if err := l.cfg.BeforeAcquire(ctx, next.token); err != nil {
			return nil, fmt.Errorf("lease %s: before acquire: %w", l.name, err)
		}
	}
	sent := time.Now()
	ok, err := l.casState(ctx, raw, next)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("lease %s: another contender won: %w", l.name, snapshot.ErrHeld)
	}
	l.mu.Lock()
	l.seen = nil
	l.mu.Unlock()
	h := newHold(l, next, sent)
	l.event(ctx, kind, next.token)
	return h, nil
}

// heldError is TryAcquire's ErrHeld: who holds the lease, and when this contender
// takes it over unless the holder renews before.
type heldError struct {
	lease, holder string
	token         uint64
	takeoverAt    time.Time
}

func (e *heldError) Error() string {
	return fmt.Sprintf("lease %s held by %s (token %d); taken over at %s unless renewed: %v",
		e.lease, e.holder, e.token, e.takeoverAt.UTC().Format(time.RFC3339), snapshot.ErrHeld)
}

func (e *heldError) Unwrap() error { return snapshot.ErrHeld }

// expired reports whether the held state raw has been seen unchanged for Duration. The
// first sighting of a state starts the watch.
func (l *Lease) expired(raw []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !bytes.Equal(l.seen, raw) {
		l.seen = append(l.seen[:0], raw...)
		l.seenAt = now
		l.seenNext = now.Add(l.cfg.Duration)
		return false
	}
	return now.Sub(l.seenAt) >= l.cfg.Duration
}

// Acquire retries TryAcquire until it succeeds or ctx ends. While the lease is held it
// waits a full-jitter backoff, but never past the moment the watched state would count
// as expired, so a dead holder is replaced within Duration plus one retry.
// It reports each holder it waits for (a "waiting" event), and again every
// waitReportEvery while it still waits, so a wait is never silent.
func (l *Lease) Acquire(ctx context.Context) (snapshot.Hold, error) {
	var reportedHolder string
	var reportedAt time.Time
	for attempt := 0; ; attempt++ {
		h, err := l.TryAcquire(ctx)
		if err == nil {
			return h, nil
		}
		if ctx.Err() != nil {
			return nil, giveUp(ctx, err)
		}
		var held *heldError
		if errors.As(err, &held) && (held.holder != reportedHolder || time.Since(reportedAt) >= waitReportEvery) {
			reportedHolder, reportedAt = held.holder, time.Now()
			l.event(ctx, snapshot.EventLeaseWaiting, held.token, "held_by", held.holder, "takeover_at", held.takeoverAt.UTC())
		}
		wait := retry.Backoff{Initial: 20 * time.Millisecond, Max: l.cfg.RetryMax, Jitter: retry.FullJitter}.Delay(attempt)
		l.mu.Lock()
		if l.seen != nil {
			if until := time.Until(l.seenNext); until >= 0 && until < wait {
				wait = until
			}
		}
		l.mu.Unlock()
		if retry.Sleep(ctx, wait) != nil {
			return nil, giveUp(ctx, err)
		}
	}
}

// giveUp is Acquire's error when ctx ends: ctx's, wrapping why the last attempt
// failed too (ErrHeld for a lease another holder keeps, an unreachable Bigtable).
func giveUp(ctx context.Context, last error) error {
	return fmt.Errorf("%w (last attempt: %w)", ctx.Err(), last)
}

// event reports an event of kind about token's hold to the config's Observer, with
// the lease, holder and token before attrs.
func (l *Lease) event(ctx context.Context, kind snapshot.EventKind, token uint64, attrs ...any) {
	if l.cfg.Observer != nil {
		l.cfg.Observer.Observe(ctx, snapshot.Event{Kind: kind,
			Attrs: append([]any{"lease", l.name, "holder", l.cfg.Holder, "fence", token}, attrs...)})
	}
}

// hold is a held lease, renewed in the background.
type hold struct {
	l      *Lease
	token  uint64
	ctx    context.Context
	cancel context.CancelCauseFunc
	lost   chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	state    leaseState
	deadline time.Time // monotonic: when this holder must consider the lease gone
	ended    bool
	wasLost  bool
}

func newHold(l *Lease, st leaseState, sent time.Time) *hold {
	ctx, cancel := context.WithCancelCause(context.Background())
	h := &hold{l: l, token: st.token, ctx: ctx, cancel: cancel, lost: make(chan struct{}), done: make(chan struct{}),
		state: st, deadline: sent.Add(l.cfg.Duration)}
	go h.renew()
	return h
}

func (h *hold) Fence() uint64            { return h.token }
func (h *hold) Lost() <-chan struct{}    { return h.lost }
func (h *hold) Context() context.Context { return h.ctx }
func (h *hold) String() string           { return fmt.Sprintf("lease %s token %d", h.l.name, h.token) }
func (h *hold) deadlineLeft() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.Until(h.deadline)
}

// renew writes a new seq every RenewEvery. Its deadline is counted from when each
// successful renewal was sent: a contender's watch of that state starts later still,
// so the holder gives up before any contender may take over.
func (h *hold) renew() {
	defer close(h.done)
	t := time.NewTicker(h.l.cfg.RenewEvery)
	defer t.Stop()
	// unsure is the state of the renewals whose outcome is unknown (a timed-out call
	// may land later), first sent at unsureSent; retries from the same state write the
	// same bytes.
	var unsure leaseState
	var unsureSent time.Time
	for {
		left := h.deadlineLeft()
		if left <= 0 {
			h.markLost(fmt.Errorf("%w: no successful renewal within %s", snapshot.ErrLeaseLost, h.l.cfg.Duration))
			return
		}
		deadline := time.NewTimer(left)
		select {
		case <-h.ctx.Done():
			deadline.Stop()
			return
		case <-deadline.C:
			continue
		case <-t.C:
			deadline.Stop()
		}
		h.mu.Lock()
		prev, next := h.state, h.state
		h.mu.Unlock()
		next.seq++
		sent := time.Now()
		rctx, cancel := context.WithTimeout(h.ctx, h.l.cfg.RenewEvery)
		ok, err := h.l.casState(rctx, prev.encode(), next)
		cancel()
		if err == nil && ok {
			h.mu.Lock()
			h.state = next
			h.deadline = sent.Add(h.l.cfg.Duration)
			h.mu.Unlock()
		}
		switch {
		case h.ctx.Err() != nil:
			return
		case err != nil:
			if next != unsure {
				unsure, unsureSent = next, sent
			}
			continue // try again next tick; the deadline decides
		case !ok:
			if ours, err := h.adoptOwnState(h.ctx, unsure, unsureSent); err != nil || ours {
				continue // an earlier renewal landed late (or the re-read failed): try again next tick
			}
			h.markLost(fmt.Errorf("%w: taken over", snapshot.ErrLeaseLost))
			return
		}
	}
}

// adoptOwnState re-reads the lease after a renewal found another state than it
// expected. A renewal whose call timed out may still land afterwards, leaving a state
// with this holder's token and name but a later seq: only this holder writes those (a
// takeover raises the token, a release clears the name), so the lease is still ours,
// and the next renewal starts from that state. When it is the state of the renewal
// first sent at unsureSent, the deadline counts from then, as for any renewal: a
// contender's watch of that state starts after it landed. (Release passes no unsure
// state: the deadline no longer matters.)
func (h *hold) adoptOwnState(ctx context.Context, unsure leaseState, unsureSent time.Time) (bool, error) {
	raw, err := h.l.readState(ctx)
	if err != nil {
		return false, err
	}
	cur, err := decodeLeaseState(raw)
	if raw == nil || err != nil || cur.token != h.token || cur.holder != h.l.cfg.Holder {
		return false, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state = cur
	if cur == unsure && unsureSent.Add(h.l.cfg.Duration).After(h.deadline) {
		h.deadline = unsureSent.Add(h.l.cfg.Duration)
	}
	return true, nil
}

func (h *hold) markLost(err error) {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended, h.wasLost = true, true
	h.mu.Unlock()
	close(h.lost)
	h.cancel(err)
	h.l.event(context.Background(), snapshot.EventLeaseLost, h.token, "err", err)
}

// Release stops renewing and frees the lease, keeping its token.
func (h *hold) Release(ctx context.Context) error {
	h.mu.Lock()
	if h.ended {
		lost := h.wasLost
		h.mu.Unlock()
		if lost {
			return fmt.Errorf("lease %s token %d: %w", h.l.name, h.token, snapshot.ErrLeaseLost)
		}
		return nil
	}
	h.ended = true
	h.mu.Unlock()
	h.cancel(fmt.Errorf("lease %s released", h.l.name))
	// A renewal in flight ends within OpTimeout (its re-read included); a caller that
	// cannot wait that long (a shutdown) leaves the lease to expire instead.
	select {
	case <-h.done:
	case <-ctx.Done():
		return fmt.Errorf("release lease %s token %d: stopping its renewals: %w", h.l.name, h.token, context.Cause(ctx))
	}
	for retried := false; ; retried = true {
		h.mu.Lock()
		cur := h.state
		h.mu.Unlock()
		ok, err := h.l.casState(ctx, cur.encode(), leaseState{token: cur.token, seq: cur.seq + 1})
		if err != nil {
			return err
		}
		if ok {
			h.l.event(ctx, snapshot.EventLeaseReleased, h.token)
			return nil
		}
		if ours, err := h.adoptOwnState(ctx, leaseState{}, time.Time{}); retried || err != nil || !ours {
			return fmt.Errorf("lease %s token %d: already taken over: %w", h.l.name, h.token, snapshot.ErrLeaseLost)
		}
	}
}
