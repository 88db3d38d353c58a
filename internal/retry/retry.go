package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is a capped exponential backoff: the wait before retry n (counting from 0)
// is Initial·2ⁿ, at most Max. With Jitter, the wait is drawn at random below that, so
// that contenders that failed together spread out.
type Backoff struct {
	// Initial is the wait before the first retry (its ceiling, with Jitter).
	Initial time.Duration
	// Max caps the wait (its ceiling, with Jitter).
	Max time.Duration
	// Jitter is how the wait is drawn below the capped step; default none.
	Jitter Jitter
}

// Jitter is how a Backoff draws a wait below its capped step.
type Jitter int

const (
	// NoJitter waits the whole step.
	NoJitter Jitter = iota
	// FullJitter draws the wait uniformly from [0, step].
	FullJitter
	// EqualJitter draws the wait uniformly from [step/2, step]: spread out, yet never
	// much sooner than the step.
	EqualJitter
)

// Delay returns the wait before retry n (counting from 0): never negative, never
// above Max.
func (b Backoff) Delay(n int) time.Duration {
	d := Doubling(b.Initial, b.Max, n)
	if d <= 0 {
		return 0
	}
	switch b.Jitter {
	case FullJitter:
		return time.Duration(rand.Uint64N(uint64(d) + 1))
	case EqualJitter:
		half := d / 2
		return half + time.Duration(rand.Uint64N(uint64(d-half)+1))
	}
	return d
}

// Doubling returns initial doubled n times, at most limit; it does not overflow, however
// large n is. It serves a backoff counted in something other than time.
func Doubling[T ~int | ~int64](initial, limit T, n int) T {
	for ; n > 0 && initial > 0; n-- {
		if initial > limit/2 {
			return limit
		}
		initial *= 2
	}
	return min(initial, limit)
}

// Sleep waits d, or until ctx ends; it returns nil after the full wait and
// context.Cause(ctx) when ctx ended first.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
