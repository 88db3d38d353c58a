package pgsource

import (
	"context"

	"github.com/snapflip/snapflip/snapshot"
)

// What Watch and Stream do that an operator may want to know (a retry, a slot created
// or lost, a version compared in full) they report as a snapshot.Event, of the kinds
// snapshot.EventWatchFailed through snapshot.EventRecordFailed, to the Observer in
// their config, rather than log: the binaries decide how to log it.

// observe reports an event of kind, with attrs, to o when there is one.
func observe(ctx context.Context, o snapshot.Observer, kind snapshot.EventKind, attrs ...any) {
	if o != nil {
		o.Observe(ctx, snapshot.Event{Kind: kind, Attrs: attrs})
	}
}

// lsnText is how an event names a WAL position.
func lsnText(lsn uint64) string { return snapshot.Position{LSN: lsn}.String() }
