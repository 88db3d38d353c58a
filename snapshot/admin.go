package snapshot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Admin carries out operators' changes of the pointer: rollback and unpin. Each runs
// under the publish lease, so it never interleaves with a sync, and flips with the
// lease's token, so a sync that held an older token can never flip afterwards.
type Admin struct {
	Dataset string
	Store   AdminStore
	Lease   Lease
	// TTL is the documents' time to live; a target must have more than
	// ExpiryMargin of it left.
	TTL time.Duration
	// ExpiryMargin is the least TTL a rollback target must have left; default a tenth
	// of the TTL.
	ExpiryMargin time.Duration
	// Retention is the least time storage keeps a document cell (the GC rule of the
	// documents' family); 0 when not known. A target whose TTL is longer expires by
	// this instead, and the expiry check counts with it.
	Retention time.Duration
	// AcquireTimeout bounds the wait for the lease; default 30s.
	AcquireTimeout time.Duration
	// Crash, when set, is called at CrashRollbackFlip (tests kill the process there).
	Crash func(at CrashPoint, rows int64)
	Now   func() time.Time
	// Observer receives what the admin did (a rollback, an unpin) and bookkeeping
	// that failed; nil discards it.
	Observer Observer
}

// AdminStore is what Admin needs from storage.
type AdminStore interface {
	PointerStore
	ManifestStore
	AuditStore
}

// RollbackRequest asks for a rollback.
type RollbackRequest struct {
	// To names the target; Previous takes the pointer's previous version instead.
	To       Version
	Previous bool
	// Reason is required and recorded.
	Reason string
	// Force allows a target that was itself rolled back away from.
	Force bool
	// By names who asks.
	By string
}

// RollbackResult says what a rollback or unpin did.
type RollbackResult struct {
	From    Version   `json:"from"`
	To      Version   `json:"to"`
	Fence   uint64    `json:"token"`
	Pinned  bool      `json:"pinned"`
	At      time.Time `json:"at"`
	Reason  string    `json:"reason"`
	Took    string    `json:"took"`
	Message string    `json:"message"`
}

// Rollback moves the pointer back to an earlier complete version and pins the dataset,
// so scheduled syncs do not undo it. A target that does not exist, is not complete, is
// about to expire, is current already, or was itself rolled back away from (unless
// Force) is refused with an error wrapping ErrTargetRefused, and nothing changes.
func (a *Admin) Rollback(ctx context.Context, req RollbackRequest) (RollbackResult, error) {
	if (req.To == "") == !req.Previous {
		return RollbackResult{}, fmt.Errorf("%w rollback: name a target version or ask for the previous one, not both", ErrInvalid)
	}
	var target Manifest
	plan := func(ctx context.Context, cur Pointer) (Flip, error) {
		v := req.To
		if req.Previous {
			if cur.Previous == "" {
				return Flip{}, fmt.Errorf("%w: %s has no previous version", ErrTargetRefused, cur.Version)
			}
			v = cur.Previous
		}
		m, err := a.checkTarget(ctx, cur, v, req.Force)
		target = m
		return Flip{Version: v, Source: m.Source, Pin: true}, err
	}
	after := func(ctx context.Context, cur Pointer, f Flip) {
		crash(a.Crash, CrashRollbackFlip, 0)
		a.mark(ctx, cur.Version, StatePublished, StateRolledBack, "rolled back: "+req.Reason)
		a.mark(ctx, f.Version, target.State, StatePublished, "")
	}
	res, err := a.operatorFlip(ctx, operatorOp{action: ActionRollback, by: req.By, reason: req.Reason, plan: plan, after: after})
	if err != nil {
		return res, fmt.Errorf("rollback: %w", err)
	}
	res.Message = fmt.Sprintf("rolled back from %s to %s and pinned the dataset; scheduled syncs will not publish until unpinned", res.From, res.To)
	return res, nil
}

// operatorOp is an operator's change of the pointer: what it is, who asks for it and
// why, how it chooses the flip, and its bookkeeping once the pointer has moved.
type operatorOp struct {
	action     Action
	by, reason string
	// plan chooses the flip from the pointer as read, or refuses, changing nothing.
	plan func(context.Context, Pointer) (Flip, error)
	// after, when set, runs once the pointer has moved.
	after func(context.Context, Pointer, Flip)
}

// operatorFlip runs an operator's change of the pointer under the publish lease: it
// reads the pointer, lets op.plan choose the flip (or refuse, changing nothing), flips
// with the lease's token as a rollback flip, records the audit entry, and runs
// op.after for bookkeeping. Once the pointer has moved, failures are reported to the
// Observer, not returned: the change has happened.
func (a *Admin) operatorFlip(ctx context.Context, op operatorOp) (RollbackResult, error) {
	action, by, reason := op.action, op.by, op.reason
	start := a.now()
	if strings.TrimSpace(reason) == "" {
		return RollbackResult{}, fmt.Errorf("%w %s: a reason is required", ErrInvalid, action)
	}
	hold, err := a.acquire(ctx)
	if err != nil {
		return RollbackResult{}, err
	}
	defer a.release(ctx, hold)
	cur, err := a.Store.ReadPointer(ctx, a.Dataset)
	if err != nil {
		return RollbackResult{}, fmt.Errorf("read pointer: %w", err)
	}
	f, err := op.plan(ctx, cur)
	if err != nil {
		return RollbackResult{}, err
	}
	f.Expected, f.Fence, f.Rollback, f.By, f.Reason, f.At = cur.Version, hold.Fence(), true, by, reason, a.now()
	if _, err := a.Store.FlipPointer(ctx, a.Dataset, f); err != nil {
		return RollbackResult{}, fmt.Errorf("flip pointer to %s: %w", f.Version, err)
	}
	bg, cancel := Detach(ctx, cleanupTimeout)
	defer cancel()
	if op.after != nil {
		op.after(bg, cur, f)
	}
	a.audit(bg, AuditEntry{Dataset: a.Dataset, At: f.At, Action: action, From: cur.Version, To: f.Version,
		Fence: f.Fence, Pinned: f.Pin, By: by, Reason: reason})
	observe(ctx, a.Observer, Event{Kind: actionEvent(action), Dataset: a.Dataset, Attrs: []any{"from", cur.Version, "to", f.Version,
		"fence", f.Fence, "pinned", f.Pin, "by", by, "reason", reason}})
	return RollbackResult{From: cur.Version, To: f.Version, Fence: f.Fence, Pinned: f.Pin, At: f.At, Reason: reason,
		Took: a.now().Sub(start).Round(time.Millisecond).String()}, nil
}

// checkTarget refuses a target that may not be rolled back to.
func (a *Admin) checkTarget(ctx context.Context, cur Pointer, target Version, force bool) (Manifest, error) {
	if target == cur.Version {
		return Manifest{}, fmt.Errorf("%w: %s is already the current version", ErrTargetRefused, target)
	}
	m, err := a.Store.ReadManifest(ctx, a.Dataset, target)
	if errors.Is(err, ErrNotFound) {
		return Manifest{}, fmt.Errorf("%w: version %s does not exist (or has expired)", ErrTargetRefused, target)
	}
	if err != nil {
		return Manifest{}, err
	}
	switch m.State {
	case StateSealed, StatePublished, StateRetired:
	case StateRolledBack:
		if !force {
			return Manifest{}, fmt.Errorf("%w: version %s was itself rolled back away from (%s); use force to go back to it anyway",
				ErrTargetRefused, target, m.Reason)
		}
	default:
		return Manifest{}, fmt.Errorf("%w: version %s is %s, not a complete version", ErrTargetRefused, target, m.State)
	}
	if err := m.CheckComplete(); err != nil {
		return Manifest{}, fmt.Errorf("%w: %v", ErrTargetRefused, err)
	}
	if ttl := a.lifeOf(m); ttl > 0 {
		left := m.DataTime().Add(ttl).Sub(a.now())
		if margin := a.margin(max(m.TTL, a.TTL)); left <= margin {
			return Manifest{}, fmt.Errorf("%w: version %s expires in %s, within the safety margin of %s",
				ErrTargetRefused, m.Version, left.Round(time.Second), margin)
		}
	}
	return m, nil
}

// Unpin resumes scheduled publishing; the pointer stays where it is.
func (a *Admin) Unpin(ctx context.Context, reason, by string) (RollbackResult, error) {
	plan := func(_ context.Context, cur Pointer) (Flip, error) {
		if !cur.Pinned {
			return Flip{}, fmt.Errorf("%w: dataset %s is not pinned", ErrTargetRefused, a.Dataset)
		}
		return Flip{Version: cur.Version, Source: cur.Source, Pin: false}, nil
	}
	res, err := a.operatorFlip(ctx, operatorOp{action: ActionUnpin, by: by, reason: reason, plan: plan})
	if err != nil {
		return res, fmt.Errorf("unpin: %w", err)
	}
	res.Message = fmt.Sprintf("unpinned: scheduled syncs publish again; %s stays current until the next one", res.To)
	return res, nil
}

func (a *Admin) acquire(ctx context.Context) (Hold, error) {
	timeout := a.AcquireTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hold, err := a.Lease.Acquire(actx)
	if err != nil {
		return nil, fmt.Errorf("%w: could not take the publish lease within %s (a sync may be running): %v", ErrConflict, timeout, err)
	}
	return hold, nil
}

func (a *Admin) release(ctx context.Context, h Hold) {
	rctx, cancel := Detach(ctx, cleanupTimeout)
	defer cancel()
	if err := h.Release(rctx); err != nil && !errors.Is(err, ErrLeaseLost) {
		observe(ctx, a.Observer, Event{Kind: EventReleaseLeaseFailed, Attrs: []any{"err", err}})
	}
}

// mark moves a manifest between states, best effort.
func (a *Admin) mark(ctx context.Context, v Version, from, to State, reason string) {
	m, err := a.Store.ReadManifest(ctx, a.Dataset, v)
	if err != nil || m.State != from {
		return
	}
	m.State = to
	if reason != "" {
		m.Reason = reason
	}
	if err := a.Store.UpdateManifest(ctx, m, from); err != nil {
		observe(ctx, a.Observer, Event{Kind: EventMarkVersionFailed, Version: v, Attrs: []any{"state", to, "err", err}})
	}
}

func (a *Admin) audit(ctx context.Context, e AuditEntry) {
	if err := a.Store.AppendAudit(ctx, e); err != nil {
		observe(ctx, a.Observer, Event{Kind: EventAuditFailed, Attrs: []any{"action", e.Action, "err", err}})
	}
}

// lifeOf returns how long the cells of a target live from its data time: its TTL
// (the configured one for a manifest without its own), or less when storage keeps
// cells shorter; 0 when no TTL is known.
func (a *Admin) lifeOf(m Manifest) time.Duration {
	ttl := a.TTL
	if m.TTL > 0 {
		ttl = m.TTL
	}
	if a.Retention > 0 && ttl > a.Retention {
		ttl = a.Retention
	}
	return ttl
}

func (a *Admin) margin(ttl time.Duration) time.Duration {
	if a.ExpiryMargin > 0 {
		return a.ExpiryMargin
	}
	return ttl / 10
}

func (a *Admin) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// actionEvent returns the event an operator's action reports.
func actionEvent(action Action) EventKind {
	if action == ActionUnpin {
		return EventUnpin
	}
	return EventRollback
}
