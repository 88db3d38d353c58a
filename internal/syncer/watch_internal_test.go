package syncer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/snapflip/snapflip/pgsource"
)

// TestPendingXmax: coalesced changes keep the latest xmax they were seen at, so that a
// sync can skip what another replica published already; but one change seen without
// an xmax (the replication stream's) makes the whole lot unknown, since a current
// version past the others' xmax may still lack it.
func TestPendingXmax(t *testing.T) {
	at := time.Unix(100, 0)
	tests := []struct {
		name  string
		xmaxs []uint64
		want  uint64
	}{
		{"one", []uint64{7}, 7},
		{"latest wins", []uint64{7, 9, 8}, 9},
		{"stream change first", []uint64{0, 9}, 0},
		{"stream change last", []uint64{9, 0}, 0},
		{"stream changes only", []uint64{0, 0}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPending()
			for i, x := range tt.xmaxs {
				p.add(pgsource.Change{Xmax: x, At: at.Add(time.Duration(i) * time.Second)})
			}
			ok, first, got, _ := p.take()
			if !ok || !first.Equal(at) || got != tt.want {
				t.Errorf("take() = %v, %v, xmax %d; want true, %v, xmax %d", ok, first, got, at, tt.want)
			}
			if ok, _, _, _ := p.take(); ok {
				t.Error("a second take found changes pending")
			}
		})
	}
}

// A base read beside the stream that is built wakes the change watch: a change,
// reason "base built", is pending, so that a version takes the base without waiting
// for a change of the source or the schedule; and counted.
func TestBaseBuiltWakesTheWatch(t *testing.T) {
	built := make(chan struct{}, 1)
	r := &Runner{Dataset: "ds", Metrics: NewMetrics("ds"), BaseBuilt: built}
	pend := newPending()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.watchBases(ctx, pend) }()
	built <- struct{}{}
	<-pend.wake
	ok, _, xmax, reason := pend.take()
	if !ok || xmax != 0 || reason != pgsource.ReasonBaseBuilt {
		t.Errorf("pending after a base was built = %t, xmax %d, %s; want a change, no xmax, base built", ok, xmax, reason)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("watchBases = %v; want it ended by its context", err)
	}
	if n := testutil.ToFloat64(r.Metrics.watch.changes.WithLabelValues("base built")); n != 1 {
		t.Errorf("changes counted with reason base built = %g; want 1", n)
	}
}
