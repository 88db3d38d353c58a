package snapshot

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

type detachKey struct{}

// TestDetachOutlivesCancellationNotItsDeadline: a detached context keeps its parent's
// values, survives its cancellation and deadline, and always has a deadline of its own.
func TestDetachOutlivesCancellationNotItsDeadline(t *testing.T) {
	parent, cancel := context.WithTimeout(context.WithValue(context.Background(), detachKey{}, "v"), time.Millisecond)
	cancel()
	for _, d := range []time.Duration{50 * time.Millisecond, 0, -time.Second} {
		ctx, stop := Detach(parent, d)
		if ctx.Err() != nil {
			t.Fatalf("Detach(%s) of an ended context ended at once: %v", d, ctx.Err())
		}
		if got := ctx.Value(detachKey{}); got != "v" {
			t.Errorf("Detach(%s) value = %v; want the parent's", d, got)
		}
		deadline, ok := ctx.Deadline()
		want := d
		if d <= 0 {
			want = cleanupTimeout
		}
		if !ok || time.Until(deadline) > want {
			t.Errorf("Detach(%s) deadline %v, %v; want one within %s", d, deadline, ok, want)
		}
		if d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("Detach(%s) still running 10s on", d)
			}
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Errorf("Detach(%s) ended with %v; want its own deadline", d, ctx.Err())
			}
		}
		stop()
	}
}

// TestShutdownGraceCutsDetachedWork: once the context given to WithShutdownGrace ends,
// detached work under it ends within the grace, whatever its own timeout, and says why;
// before that it is left alone.
func TestShutdownGraceCutsDetachedWork(t *testing.T) {
	root, shutdown := context.WithCancel(context.Background())
	defer shutdown()
	ctx := WithShutdownGrace(root, 50*time.Millisecond)
	early, stopEarly := Detach(ctx, time.Hour)
	defer stopEarly()
	shutdown()
	late, stopLate := Detach(ctx, time.Hour) // detached after the shutdown began
	defer stopLate()
	for name, d := range map[string]context.Context{"detached before": early, "detached after": late} {
		select {
		case <-d.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s the shutdown: still running 10s after it, with a grace of 50ms", name)
		}
		if cause := context.Cause(d); cause == nil || !strings.Contains(cause.Error(), "grace") {
			t.Errorf("%s the shutdown: cause %v; want one naming the grace", name, cause)
		}
	}
	// A detached context whose shutdown has not come runs its own course.
	calm := WithShutdownGrace(context.Background(), time.Millisecond)
	d, stop := Detach(calm, 30*time.Millisecond)
	defer stop()
	<-d.Done()
	if !errors.Is(context.Cause(d), context.DeadlineExceeded) {
		t.Errorf("without a shutdown the detached context ended with %v; want its own deadline", context.Cause(d))
	}
}
