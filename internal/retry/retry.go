package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is a capped exponential backoff: the wait before retry n (counting from 0)
// is Initial·2ⁿ, at most Max. With Jitter, the wait is drawn uniformly from zero to
// that ("full jitter"), so that contenders that failed together spread out.
type Backoff struct {
	// Initial is the wait before the first retry (its ceiling, with Jitter).
	Initial time.Duration
	// Max caps the wait (its ceiling, with Jitter).
	Max time.Duration
	// Jitter draws each wait uniformly from [0, the capped wait].
	Jitter bool
}

// Delay returns the wait before retry n (counting from 0): never negative, never
// above Max.
func (b Backoff) Delay(n int) time.Duration {
	d := Doubling(b.Initial, b.Max, n)
	if d <= 0 {
		return 0
	}
	if b.Jitter {
		return time.Duration(rand.Int64N(int64(d) + 1))
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
