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
	// Fence is the fencing token of this hold: strictly greater than every token
	// issued before for the lease.
	Fence() uint64
	// Lost is closed when the hold ends without Release: a renewal found the lease
	// taken, or the holder's own deadline passed without a successful renewal.
	Lost() <-chan struct{}
	// Context returns a context that ends when the hold is lost or released.
	Context() context.Context
	// Release gives the lease up (keeping its token, which never restarts). Releasing
	// a lost hold returns ErrLeaseLost.
	Release(ctx context.Context) error
}

// FenceStore raises a dataset's fence, the pointer's: a flip or coverage with a
// smaller token is refused from then on.
type FenceStore interface {
	// AdvanceFence raises the dataset's fence to token, never lowering it.
	AdvanceFence(ctx context.Context, dataset string, token uint64) error
}

// RaiseFence returns what a lease of the dataset's publishing runs before it gives
// a hold (the store's LeaseConfig.BeforeAcquire): it raises the dataset's fence to
// the hold's token, so that a deposed holder is refused before the new one holds
// the lease.
func RaiseFence(st FenceStore, dataset string) func(ctx context.Context, token uint64) error {
	return func(ctx context.Context, token uint64) error { return st.AdvanceFence(ctx, dataset, token) }
}
