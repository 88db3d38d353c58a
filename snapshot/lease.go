package snapshot

import "context"

// Lease is a named lock with fencing tokens, shared by every replica.
type Lease interface {
	// TryAcquire takes the lease if it is free, or if this contender has watched the
	// holder's state stay unchanged for the lease duration. It never blocks; it
	// returns ErrHeld when the lease is held by someone else.
	TryAcquire(ctx context.Context) (Hold, error)
	// Acquire retries TryAcquire with full-jitter backoff until it succeeds or ctx
	// ends (returning ctx's error).
	Acquire(ctx context.Context) (Hold, error)
}

// Hold is a held lease. It renews itself until released or lost.
type Hold interface {
	// Token is the fencing token of this hold: strictly greater than every token
	// issued before for the lease.
	Token() uint64
	// Lost is closed when the hold ends without Release: a renewal found the lease
	// taken, or the holder's own deadline passed without a successful renewal.
	Lost() <-chan struct{}
	// Context returns a context that ends when the hold is lost or released.
	Context() context.Context
	// Release gives the lease up (keeping its token, which never restarts). Releasing
	// a lost hold returns ErrLeaseLost.
	Release(ctx context.Context) error
}
