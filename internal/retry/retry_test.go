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
	// With jitter every wait stays within [0, the ceiling], and the waits vary.
	b.Jitter = true
	for n := range 10 {
		ceil := min(b.Max, b.Initial<<n)
		seen := map[time.Duration]bool{}
		for range 200 {
			got := b.Delay(n)
			if got < 0 || got > ceil {
				t.Fatalf("jittered Delay(%d) = %v, want within [0, %v]", n, got, ceil)
			}
			seen[got] = true
		}
		if len(seen) < 2 {
			t.Errorf("jittered Delay(%d) gave one value in 200 draws: %v", n, seen)
		}
	}
	if got := (Backoff{Jitter: true}).Delay(3); got != 0 {
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
