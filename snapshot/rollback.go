package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// AcquireTimeout bounds the wait for the lease; default 30s.
	AcquireTimeout time.Duration
	// Crash, when set, is called at CrashRollbackFlip (tests kill the process there).
	Crash func(at CrashPoint, rows int64)
	Now   func() time.Time
	Log   *slog.Logger
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
	Token   uint64    `json:"token"`
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
	start := a.now()
	if strings.TrimSpace(req.Reason) == "" {
		return RollbackResult{}, fmt.Errorf("%w rollback: a reason is required", ErrInvalid)
	}
	if (req.To == "") == !req.Previous {
		return RollbackResult{}, fmt.Errorf("%w rollback: name a target version or ask for the previous one, not both", ErrInvalid)
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
	target := req.To
	if req.Previous {
		if cur.Previous == "" {
			return RollbackResult{}, fmt.Errorf("%w: %s has no previous version", ErrTargetRefused, cur.Version)
		}
		target = cur.Previous
	}
	m, err := a.checkTarget(ctx, cur, target, req.Force)
	if err != nil {
		return RollbackResult{}, err
	}
	at := a.now()
	flip := Flip{Version: target, Expected: cur.Version, Token: hold.Token(), Source: m.Source,
		Rollback: true, Pin: true, By: req.By, Reason: req.Reason, At: at}
	if _, err := a.Store.FlipPointer(ctx, a.Dataset, flip); err != nil {
		return RollbackResult{}, fmt.Errorf("flip pointer back to %s: %w", target, err)
	}
	crash(a.Crash, CrashRollbackFlip, 0)
	// The pointer has moved: what follows is bookkeeping, logged if it fails.
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	a.mark(bg, cur.Version, StatePublished, StateRolledBack, "rolled back: "+req.Reason)
	a.mark(bg, target, m.State, StatePublished, "")
	a.audit(bg, AuditEntry{Dataset: a.Dataset, At: at, Action: ActionRollback, From: cur.Version, To: target,
		Token: hold.Token(), Pinned: true, By: req.By, Reason: req.Reason})
	res := RollbackResult{From: cur.Version, To: target, Token: hold.Token(), Pinned: true, At: at, Reason: req.Reason,
		Took:    a.now().Sub(start).Round(time.Millisecond).String(),
		Message: fmt.Sprintf("rolled back from %s to %s and pinned the dataset; scheduled syncs will not publish until unpinned", cur.Version, target)}
	a.log().InfoContext(ctx, "rolled back", "dataset", a.Dataset, "from", cur.Version, "to", target, "token", hold.Token(), "by", req.By, "reason", req.Reason)
	return res, nil
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
	ttl := m.TTL
	if ttl <= 0 {
		ttl = a.TTL
	}
	if ttl > 0 {
		left := m.DataTime().Add(ttl).Sub(a.now())
		if margin := a.margin(ttl); left <= margin {
			return Manifest{}, fmt.Errorf("%w: version %s expires in %s, within the safety margin of %s",
				ErrTargetRefused, target, left.Round(time.Second), margin)
		}
	}
	return m, nil
}

// Unpin resumes scheduled publishing; the pointer stays where it is.
func (a *Admin) Unpin(ctx context.Context, reason, by string) (RollbackResult, error) {
	if strings.TrimSpace(reason) == "" {
		return RollbackResult{}, fmt.Errorf("%w unpin: a reason is required", ErrInvalid)
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
	if !cur.Pinned {
		return RollbackResult{}, fmt.Errorf("%w: dataset %s is not pinned", ErrTargetRefused, a.Dataset)
	}
	at := a.now()
	flip := Flip{Version: cur.Version, Expected: cur.Version, Token: hold.Token(), Source: cur.Source,
		Rollback: true, Pin: false, By: by, Reason: reason, At: at}
	if _, err := a.Store.FlipPointer(ctx, a.Dataset, flip); err != nil {
		return RollbackResult{}, fmt.Errorf("unpin: %w", err)
	}
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	a.audit(bg, AuditEntry{Dataset: a.Dataset, At: at, Action: ActionUnpin, From: cur.Version, To: cur.Version,
		Token: hold.Token(), By: by, Reason: reason})
	a.log().InfoContext(ctx, "unpinned", "dataset", a.Dataset, "version", cur.Version, "by", by, "reason", reason)
	return RollbackResult{From: cur.Version, To: cur.Version, Token: hold.Token(), At: at, Reason: reason,
		Message: fmt.Sprintf("unpinned: scheduled syncs publish again; %s stays current until the next one", cur.Version)}, nil
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
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := h.Release(rctx); err != nil && !errors.Is(err, ErrLeaseLost) {
		a.log().WarnContext(ctx, "release lease", "err", err)
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
		a.log().WarnContext(ctx, "mark version", "version", v, "state", to, "err", err)
	}
}

func (a *Admin) audit(ctx context.Context, e AuditEntry) {
	if err := a.Store.AppendAudit(ctx, e); err != nil {
		a.log().WarnContext(ctx, "record audit entry", "action", e.Action, "err", err)
	}
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

func (a *Admin) log() *slog.Logger {
	if a.Log != nil {
		return a.Log
	}
	return slog.Default()
}
