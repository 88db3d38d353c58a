package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// Every Bigtable call ends: a call made without a deadline gets OpTimeout (op), a
// long scan that cannot be bounded as a whole ends when no row arrives for OpTimeout
// (stallGuard), and a re-read after a lost reply gets OpTimeout of its own (reread).
// The client retries reads on Unavailable until its context ends, so a call without
// any of these hangs for as long as Bigtable is away.

// reread returns the context of the re-read that decides the outcome of a conditional
// write whose reply was lost. It outlives ctx, whose deadline or cancellation may be
// what lost the reply, but has OpTimeout of its own (or less, in a shutdown: see
// snapshot.WithShutdownGrace).
func (s *Store) reread(ctx context.Context) (context.Context, context.CancelFunc) {
	return snapshot.Detach(ctx, s.cfg.OpTimeout)
}

// rereadWhileWanted is reread for a caller that has no use for the outcome once it has
// given up: the re-read outlives ctx's deadline, which may be what lost the reply, but
// not its cancellation.
func (s *Store) rereadWhileWanted(ctx context.Context) (context.Context, context.CancelFunc) {
	rctx, cancel := s.reread(ctx)
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			cancel()
		}
	})
	return rctx, func() {
		stop()
		cancel()
	}
}

// errStalled ends a scan that received no row for OpTimeout.
var errStalled = errors.New("no row received")

// stallGuard bounds a scan by its progress instead of its total time: its context ends
// when OpTimeout passes without a row, not counting the time the caller spends on a
// row (between pause and resume).
type stallGuard struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
	d      time.Duration
}

func (s *Store) guardStall(ctx context.Context) *stallGuard {
	g := &stallGuard{d: s.cfg.OpTimeout}
	g.ctx, g.cancel = context.WithCancelCause(ctx)
	g.timer = time.AfterFunc(g.d, func() {
		g.cancel(fmt.Errorf("%w for %s: %w", errStalled, g.d, context.DeadlineExceeded))
	})
	return g
}

// pause stops the clock while the caller handles a row; resume restarts it.
func (g *stallGuard) pause()  { g.timer.Stop() }
func (g *stallGuard) resume() { g.timer.Reset(g.d) }

// stop releases the guard. It returns the stall when the guard ended the scan, else nil.
func (g *stallGuard) stop() error {
	g.timer.Stop()
	cause := context.Cause(g.ctx)
	g.cancel(nil)
	if errors.Is(cause, errStalled) {
		return cause
	}
	return nil
}
