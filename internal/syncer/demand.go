package syncer

import (
	"context"
	"time"

	"github.com/snapflip/snapflip/pgsource"
)

// watchDemand reads the dataset's read-your-writes demand counter once per interval
// and makes a change-driven sync look at the source when it grew: an API replica has
// a request waiting for a token the current version does not cover. The sync reads
// the counter again with the pointer, before its snapshot, and records it with what
// it finds (a flip, or the coverage of an unchanged source), which is how a waiter
// learns that the source was looked at after it came. One row read per interval,
// however many requests wait. Reads that fail are tried again at the next interval.
func (r *Runner) watchDemand(ctx context.Context, interval time.Duration, pend *pending) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	var seen uint64 // 0 at the start: demand raised before this replica started counts
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		n, err := r.Store.ReadDemand(ctx, r.Dataset)
		if err != nil {
			continue
		}
		if n > seen {
			r.Metrics.watch.changes.WithLabelValues(pgsource.ReasonDemand.String()).Inc()
			pend.add(pgsource.Change{Reason: pgsource.ReasonDemand, At: time.Now()})
		}
		seen = n
	}
}

// watchBases adds a change to pend each time a base read beside the stream is
// built (BaseBuilt), until ctx ends.
func (r *Runner) watchBases(ctx context.Context, pend *pending) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.BaseBuilt: // nil: never
			r.Metrics.watch.changes.WithLabelValues(pgsource.ReasonBaseBuilt.String()).Inc()
			pend.add(pgsource.Change{Reason: pgsource.ReasonBaseBuilt, At: time.Now()})
		}
	}
}
