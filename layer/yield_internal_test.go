package layer

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A base's pace waits while a version is written, and goes on once it is: a base
// beside the stream leaves the commit path the machine.
func TestABaseYieldsToAVersion(t *testing.T) {
	defer func(d time.Duration) { maxYield = d }(maxYield)
	maxYield = time.Hour // the version's end, not the cap, lets the base go on
	c := &Compactor{}
	pace := &basePace{yield: c.yield}
	ctx := context.Background()
	if err := pace.WaitN(ctx, 10); err != nil {
		t.Fatal(err)
	}
	c.commitStarted()
	// While the version is written the base waits: a wait given up at once ends
	// with its context, not with the base going on.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if err := pace.WaitN(gone, 10); !errors.Is(err, context.Canceled) {
		t.Fatalf("the base went on while a version was written (%v)", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- pace.WaitN(ctx, 10) }()
	c.commitEnded()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the base still waits after the version was written")
	}
}

// A base read from the source has no rate by default, a base from storage has
// DefaultBaseRowsPerSecond's; both yield to a version being written.
func TestBasePacesByKind(t *testing.T) {
	c := &Compactor{}
	if p := c.sourceLimiter(); p.rate != nil || p.yield == nil {
		t.Errorf("a source base's pace by default: rate %v, yields %v; want no rate, yielding", p.rate, p.yield != nil)
	}
	if p := c.limiter(); p.rate == nil || float64(p.rate.Limit()) != DefaultBaseRowsPerSecond || p.yield == nil {
		t.Errorf("a storage base's pace by default: rate %v, yields %v; want %d rows/s, yielding", p.rate, p.yield != nil, DefaultBaseRowsPerSecond)
	}
	c.SourceRowsPerSecond = 500
	if p := c.sourceLimiter(); p.rate == nil || p.rate.Limit() != 500 {
		t.Errorf("SourceRowsPerSecond 500 paces a source base at %v", p.rate)
	}
}
