package pgsource

import (
	"context"
	"fmt"
	"time"
)

// What Watch and Stream do that an operator may want to know (a retry, a slot created
// or lost, a version compared in full) they report as an Event to the Observer in
// their config, rather than log: the binaries decide how to log it.

// Observer hears the events of Watch and Stream. Observe is called from their
// goroutines and should return quickly.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc is an Observer that is a function.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// observe reports e to o, when there is one.
func observe(ctx context.Context, o Observer, e Event) {
	if o != nil {
		o.Observe(ctx, e)
	}
}

// EventKind says what an Event reports. Its String is a sentence for a log.
type EventKind int

// The kinds of Event. The fields each sets are named with it.
const (
	// EventWatchFailed: the watch's connection failed, and it retries in a few
	// seconds (Err).
	EventWatchFailed EventKind = iota + 1
	// EventWatching: the watch found a new set of tables to watch (Tables,
	// Relations, Interval, Mode).
	EventWatching
	// EventStreamStarted: the reading of the replication stream began (Slot, LSN
	// where it starts, Reading).
	EventStreamStarted
	// EventSlotCreated: the replication slot was missing and was created, so the
	// next version is compared in full (Slot, LSN its consistent point).
	EventSlotCreated
	// EventSlotLost: the slot was invalidated; it is dropped and created again (Slot).
	EventSlotLost
	// EventSlotTaken: another process read the slot, and is ended (Slot, PID).
	EventSlotTaken
	// EventStreamBehind: the stream did not reach a snapshot within CatchUp, so its
	// version is compared in full (Slot, LSN the snapshot's, Wait).
	EventStreamBehind
	// EventStreamNoDelta: the stream cannot say what changed since a version's parent,
	// so the version is compared in full (Slot, Why, OtherSystem).
	EventStreamNoDelta
	// EventNudgeFailed: a snapshot could not nudge the stream past its position
	// (Slot, Err).
	EventNudgeFailed
	// EventSlotRetains: the slot retains more WAL than StreamConfig.WarnRetained
	// (Slot, Retained, Threshold).
	EventSlotRetains
	// EventRecordFailed: the server could not be made to log a running-transactions
	// record; said once a reading, and tried again each minute (Slot, Err).
	EventRecordFailed
)

var eventText = map[EventKind]string{
	EventWatchFailed:   "watching the source failed; retrying (the schedule still runs)",
	EventWatching:      "watching for changes",
	EventStreamStarted: "reading the replication stream",
	EventSlotCreated:   "created the replication slot: the next version is compared in full with its parent",
	EventSlotLost: "the replication slot was invalidated (max_slot_wal_keep_size): its changes are lost; dropping it " +
		"and starting a new one, and the next version is compared in full",
	EventSlotTaken:     "the replication slot is read by another process; ending it",
	EventStreamBehind:  "the replication stream did not reach the snapshot in time: this version is compared in full",
	EventStreamNoDelta: "the stream cannot say what changed since the parent: this version is compared in full",
	EventNudgeFailed:   "could not nudge the replication stream past a snapshot",
	EventSlotRetains:   "the replication slot retains much WAL on the source: are versions failing to publish?",
	EventRecordFailed: "could not have the server log a running-transactions record: the slot's restart position " +
		"then moves only every 15 s, and the slot retains that much more WAL; tried again each minute",
}

// String returns the kind's sentence, as logs print it.
func (k EventKind) String() string {
	if t, ok := eventText[k]; ok {
		return t
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is something Watch or Stream reports to its Observer. Kind says which of the
// other fields are set.
type Event struct {
	Kind EventKind
	// Slot is the replication slot, for the stream's events.
	Slot string
	// Err is the failure.
	Err error
	// LSN is a WAL position (see Kind).
	LSN uint64
	// Reading names the stream's reading.
	Reading string
	// PID is the process the slot was read by.
	PID int
	// Wait is how long a snapshot waited for the stream.
	Wait time.Duration
	// Why says why the stream cannot say what changed; OtherSystem that the parent
	// was read from another cluster, timeline or database.
	Why         string
	OtherSystem bool
	// Tables and Relations count what the watch watches; Interval and Mode are its
	// configuration.
	Tables, Relations int
	Interval          time.Duration
	Mode              WatchMode
	// Retained is the WAL the slot retains, Threshold the warning's, in bytes.
	Retained, Threshold int64
}
