package cli

import (
	"context"
	"log/slog"

	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// sourceEvents logs the events of the source's watch and replication stream to log:
// the kind's sentence at its level, with its fields as attributes.
func sourceEvents(log *slog.Logger) pgsource.Observer {
	return pgsource.ObserverFunc(func(ctx context.Context, e pgsource.Event) {
		log.Log(ctx, eventLevel(e), e.Kind.String(), eventAttrs(e)...)
	})
}

// eventLevel is how loudly an event is logged: a lost slot, or a parent read from
// another cluster, is an error; what costs a full comparison or retries is a warning.
func eventLevel(e pgsource.Event) slog.Level {
	switch e.Kind {
	case pgsource.EventWatching, pgsource.EventStreamStarted:
		return slog.LevelInfo
	case pgsource.EventSlotLost:
		return slog.LevelError
	case pgsource.EventStreamNoDelta:
		if e.OtherSystem {
			return slog.LevelError
		}
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

// eventAttrs are the attributes of an event's log line.
func eventAttrs(e pgsource.Event) []any {
	var attrs []any
	if e.Slot != "" {
		attrs = append(attrs, "slot", e.Slot)
	}
	lsn := snapshot.Position{LSN: e.LSN}.String()
	switch e.Kind {
	case pgsource.EventWatchFailed, pgsource.EventNudgeFailed, pgsource.EventRecordFailed:
		attrs = append(attrs, "err", e.Err)
	case pgsource.EventWatching:
		attrs = append(attrs, "tables", e.Tables, "relations", e.Relations, "interval", e.Interval.String(), "mode", e.Mode)
	case pgsource.EventStreamStarted:
		attrs = append(attrs, "from", lsn, "reading", e.Reading)
	case pgsource.EventSlotCreated:
		attrs = append(attrs, "at", lsn)
	case pgsource.EventSlotTaken:
		attrs = append(attrs, "pid", e.PID)
	case pgsource.EventStreamBehind:
		attrs = append(attrs, "snapshot_lsn", lsn, "wait", e.Wait.String())
	case pgsource.EventStreamNoDelta:
		attrs = append(attrs, "why", e.Why)
	case pgsource.EventSlotRetains:
		attrs = append(attrs, "retained_bytes", e.Retained, "threshold", e.Threshold)
	}
	return attrs
}
