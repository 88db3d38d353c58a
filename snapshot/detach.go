package snapshot

import (
	"context"
	"fmt"
	"time"
)

// Some work must run after its caller's context has ended: marking a cancelled sync's
// version failed, releasing the lease, closing the source, and the re-read that learns
// the outcome of a conditional write whose reply was lost. It must still end. A bare
// context.WithoutCancel drops the deadline along with the cancellation, and the
// Bigtable client retries a read on an unreachable server until its context ends: a
// syncer whose Bigtable went away hung in such a re-read for good, deaf to SIGTERM.
// Use Detach for it, never a bare context.WithoutCancel.

// shutdownKey is the context key of the context that ends when a shutdown's grace for
// detached work is over (WithShutdownGrace).
type shutdownKey struct{}

// Detach returns a context with ctx's values but neither its cancellation nor its
// deadline, ending after d of its own (10s when d is not positive), or earlier, when
// the shutdown grace that WithShutdownGrace set on ctx runs out. The caller must call
// the returned cancel function.
func Detach(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		d = cleanupTimeout
	}
	dctx, cancelCause := context.WithCancelCause(context.WithoutCancel(ctx))
	dctx, cancel := context.WithTimeout(dctx, d)
	stop := func() bool { return false }
	if hard, ok := ctx.Value(shutdownKey{}).(context.Context); ok {
		stop = context.AfterFunc(hard, func() { cancelCause(context.Cause(hard)) })
	}
	return dctx, func() {
		stop()
		cancel()
		cancelCause(nil)
	}
}

// WithShutdownGrace returns a context like ctx under which detached work (Detach) ends
// at the latest grace after ctx ends, however many detached steps a cancelled
// operation takes: a shutdown leaves cleanup that long, and no longer.
func WithShutdownGrace(ctx context.Context, grace time.Duration) context.Context {
	hard, cancel := context.WithCancelCause(context.Background())
	context.AfterFunc(ctx, func() {
		time.AfterFunc(grace, func() {
			cancel(fmt.Errorf("shutdown: cleanup cut off after a grace of %s", grace))
		})
	})
	return context.WithValue(ctx, shutdownKey{}, hard)
}
