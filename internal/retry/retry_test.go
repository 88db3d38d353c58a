package retry

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func TestDoubling(t *testing.T) {
	for _, tc := range []struct {
		initial, limit int64
		n              int
		want           int64
	}{
		{1, 16, 0, 1},
		{1, 16, 3, 8},
		{1, 16, 4, 16},
		{1, 16, 5, 16},
		{1, 16, 1 << 20, 16},
		{3, 16, 2, 12},
		{3, 16, 3, 16},
		{5, 4, 0, 4},
		{1, math.MaxInt64, 62, 1 << 62},
		{1, math.MaxInt64, 63, math.MaxInt64},
		{1, math.MaxInt64, 1000, math.MaxInt64},
		{0, 16, 10, 0},
	} {
		if got := Doubling(tc.initial, tc.limit, tc.n); got != tc.want {
			t.Errorf("Doubling(%d, %d, %d) = %d, want %d", tc.initial, tc.limit, tc.n, got, tc.want)
		}
	}
}

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second}
	for n, want := range []time.Duration{50, 100, 200, 400, 800, 1600, 2000, 2000} {
		if got := b.Delay(n); got != want*time.Millisecond {
			t.Errorf("Delay(%d) = %v, want %v", n, got, want*time.Millisecond)
		}
	}
	// With jitter every wait stays within its range below the ceiling, and the waits
	// vary.
	for _, tc := range []struct {
		jitter Jitter
		floor  func(ceil time.Duration) time.Duration
	}{
		{FullJitter, func(time.Duration) time.Duration { return 0 }},
		{EqualJitter, func(ceil time.Duration) time.Duration { return ceil / 2 }},
	} {
		b.Jitter = tc.jitter
		for n := range 10 {
			ceil := min(b.Max, b.Initial<<n)
			lo, hi := ceil, time.Duration(0)
			for range 500 {
				got := b.Delay(n)
				if got < tc.floor(ceil) || got > ceil {
					t.Fatalf("jitter %d: Delay(%d) = %v, want within [%v, %v]", tc.jitter, n, got, tc.floor(ceil), ceil)
				}
				lo, hi = min(lo, got), max(hi, got)
			}
			if hi-lo < (ceil-tc.floor(ceil))/2 {
				t.Errorf("jitter %d: Delay(%d) ranged over %v..%v in 500 draws; want it spread over [%v, %v]", tc.jitter, n, lo, hi, tc.floor(ceil), ceil)
			}
		}
	}
	// A cap as large as a Duration goes does not overflow the draw.
	for _, j := range []Jitter{FullJitter, EqualJitter} {
		if got := (Backoff{Initial: time.Second, Max: math.MaxInt64, Jitter: j}).Delay(100); got < 0 {
			t.Errorf("jitter %d with the largest cap: Delay = %v, want non-negative", j, got)
		}
	}
	if got := (Backoff{Jitter: FullJitter}).Delay(3); got != 0 {
		t.Errorf("zero Backoff: Delay = %v, want 0", got)
	}
}

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep with a live context = %v, want nil", err)
	}
	cause := errors.New("shutting down")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	if err := Sleep(ctx, time.Hour); !errors.Is(err, cause) {
		t.Errorf("Sleep with an ended context = %v, want %v", err, cause)
	}
}
