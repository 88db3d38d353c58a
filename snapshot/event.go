package snapshot

import "context"

// Level is how much an event matters to an operator. The values are those of the
// standard library's structured logger, so a binary converts by a type conversion.
type Level int

// The levels of events.
const (
	LevelDebug Level = -4
	LevelInfo  Level = 0
	LevelWarn  Level = 4
	LevelError Level = 8
)

// EventKind names something a part of snapflip did or failed to do on the side of its
// result: progress, a choice made, a retry, bookkeeping that failed best effort. Its
// String is the message a binary logs; its Level is fixed per kind. Every reporter
// uses these kinds and Observer, so that one observer hears them all.
type EventKind int

// The kinds of events. Publisher, Ticker and Admin report the first group; package
// layer's Writer the second; a source's change watch and replication stream (package
// pgsource) the third, with the attributes each names; leases (package store) the
// fourth, each with the attributes lease, holder and token.
const (
	_ EventKind = iota

	EventSyncStarted         // a publish created its manifest and starts writing
	EventSourceUnchanged     // the source is at the current version's position
	EventSameDigests         // the written version equals the current one
	EventPublishRefused      // a gate refused the flip
	EventPublished           // the pointer moved to the new version
	EventDeltaInconsistent   // a delta disagreed with its parent; publishing with bases
	EventMarkPublishedFailed // the new version stayed sealed after its flip
	EventAuditFlipFailed     // the flip is missing from the audit trail
	EventReadReplacedFailed  // the replaced version's manifest could not be read
	EventRetireFailed        // the replaced version stayed published
	EventMarkFailedFailed    // a failed version could not be marked failed
	EventMarkCurrentFailed   // the current version stayed marked sealed
	EventMarkedCurrent       // the current version, still sealed, was marked published
	EventMarkedAbandoned     // a version abandoned by an earlier lease holder was failed
	EventMarkAbandonedFailed // looking for abandoned versions failed
	EventPinnedRefresh       // the pinned version's cells are refreshed in place
	EventPinned              // the dataset is pinned: nothing is published
	EventRepublish           // the current version is past half its TTL
	EventReleaseLeaseFailed  // the publish lease was not released (it expires)
	EventRollback            // an operator rolled the pointer back, and pinned it
	EventUnpin               // an operator resumed scheduled publishing
	EventMarkVersionFailed   // a rollback's bookkeeping could not move a manifest's state
	EventAuditFailed         // an operator's change is missing from the audit trail
	EventKeyedTooLarge       // the changed documents outgrew memory: every id is compared
	EventWritingBase         // a collection is written as a base layer
	EventMergingDeltas       // a collection's newest deltas are merged into its layer
	EventLayerWritten        // a collection's layer is written
	EventCopying             // a long copy's progress
	EventCollectionCopied    // a collection's copy is done
	EventCoverageFailed      // an unchanged source's snapshot was not recorded as covered

	EventWatchFailed       // the watch's connection failed; it retries in a few seconds (err)
	EventWatching          // the watch found a new set of tables (tables, relations, interval, mode)
	EventStreamStarted     // the reading of the replication stream began (slot, from, reading)
	EventSlotCreated       // the slot was missing and was created: a full comparison (slot, at)
	EventSlotLost          // the slot was invalidated; it is dropped and created again (slot)
	EventSlotTaken         // another process read the slot, and is ended (slot, pid)
	EventStreamBehind      // the stream did not reach a snapshot in time (slot, snapshot_lsn, wait)
	EventStreamNoDelta     // the stream cannot say what changed since the parent (slot, why)
	EventStreamOtherSystem // the parent was read from another cluster, timeline or database (slot, why)
	EventNudgeFailed       // a snapshot could not nudge the stream past its position (slot, err)
	EventSlotRetains       // the slot retains much WAL (slot, retained_bytes, threshold)
	EventRecordFailed      // no running-transactions record could be logged (slot, err)

	EventLeaseAcquired // the lease was free, expired or released, and is now held
	EventLeaseTakeover // the lease was taken over from a holder that stopped renewing
	EventLeaseReleased // the holder gave the lease up
	EventLeaseLost     // a renewal found the lease taken over or unreadable past its term (err)
	EventLeaseWaiting  // the lease is held by another (held_by), taken over at takeover_at unless renewed

	EventStreamLetGo // the stream let its held transactions' keys go (slot, why, transactions, collections)

	EventBaseWanted       // a collection's base is built beside the stream of versions (from, why)
	EventBaseBuilt        // a base built beside the stream is ready to join a version (from, rows, duration)
	EventBaseFailed       // a base built beside the stream failed; tried again later (from, err, retry_in)
	EventSourceBaseWanted // a held or new collection's base is read from the source beside the stream of versions (from, why)
	EventCollectionHeld   // a collection is held at its last state while its new base is built beside the stream (why, held_at)
	EventCollectionWaits  // a new collection joins a later version, once its base is built beside the stream (why)
	EventBaseRecordFailed // a base's record for operators could not be written (state, err)
	EventBaseDropped      // a built base can no longer join a version: the chain it replaces is gone (from)
	EventBaseSwapped      // a version's chain takes a base built beside the stream (base, replaced)
	EventBaseResumed      // a base read from the source goes on where an earlier read stood (layer, through, rows)
	EventBaseReadAgain    // a base read from the source that stood unfinished is read from the start (layer, why)
	EventBasePartRead     // a replica read a part of a base another builds (part, layer, rows)
	EventBasePartTaken    // a base took a part another replica read, from storage (part, layer, rows, by)
	numEventKinds
)

var eventKinds = [numEventKinds]struct {
	text  string
	level Level
}{
	EventSyncStarted:         {"sync started", LevelInfo},
	EventSourceUnchanged:     {"source unchanged; nothing to publish", LevelInfo},
	EventSameDigests:         {"source unchanged (same digests); not flipping", LevelInfo},
	EventPublishRefused:      {"publish refused", LevelWarn},
	EventPublished:           {"published", LevelInfo},
	EventDeltaInconsistent:   {"the delta disagrees with its parent: publishing again with base layers", LevelWarn},
	EventMarkPublishedFailed: {"mark version published", LevelWarn},
	EventAuditFlipFailed:     {"record flip in the audit trail", LevelWarn},
	EventReadReplacedFailed:  {"read replaced manifest", LevelWarn},
	EventRetireFailed:        {"retire replaced version", LevelWarn},
	EventMarkFailedFailed:    {"mark version failed", LevelWarn},
	EventMarkCurrentFailed:   {"mark the current version published", LevelWarn},
	EventMarkedCurrent: {"the current version was still marked sealed (a flip of unknown outcome that applied, or failed bookkeeping): marked it published",
		LevelInfo},
	EventMarkedAbandoned:     {"marked abandoned version failed", LevelInfo},
	EventMarkAbandonedFailed: {"mark abandoned versions", LevelWarn},
	EventPinnedRefresh:       {"pinned version past half its TTL: refreshing its cells in place", LevelInfo},
	EventPinned:              {"dataset pinned: not publishing (syncer unpin resumes)", LevelInfo},
	EventRepublish:           {"current version past half its TTL: republishing", LevelInfo},
	EventReleaseLeaseFailed:  {"release lease", LevelWarn},
	EventRollback:            {string(ActionRollback), LevelInfo},
	EventUnpin:               {string(ActionUnpin), LevelInfo},
	EventMarkVersionFailed:   {"mark version", LevelWarn},
	EventAuditFailed:         {"record audit entry", LevelWarn},
	EventKeyedTooLarge:       {"the changed documents are too large to hold: every id is compared", LevelInfo},
	EventWritingBase:         {"writing a base layer", LevelInfo},
	EventMergingDeltas:       {"merging the chain's newest deltas into this version's layer", LevelInfo},
	EventLayerWritten:        {"layer written", LevelInfo},
	EventCopying:             {"copying", LevelInfo},
	EventCollectionCopied:    {"collection copied", LevelInfo},
	EventCoverageFailed:      {"record that the current version covers the source's snapshot", LevelWarn},

	EventWatchFailed:   {"watching the source failed; retrying (the schedule still runs)", LevelWarn},
	EventWatching:      {"watching for changes", LevelInfo},
	EventStreamStarted: {"reading the replication stream", LevelInfo},
	EventSlotCreated:   {"created the replication slot: the next version is compared in full with its parent", LevelWarn},
	EventSlotLost: {"the replication slot was invalidated (max_slot_wal_keep_size): its changes are lost; dropping it " +
		"and starting a new one, and the next version is compared in full", LevelError},
	EventSlotTaken:         {"the replication slot is read by another process; ending it", LevelWarn},
	EventStreamBehind:      {"the replication stream did not reach the snapshot in time: this version is compared in full", LevelWarn},
	EventStreamNoDelta:     {"the stream cannot say what changed since the parent: this version is compared in full", LevelInfo},
	EventStreamOtherSystem: {"the stream cannot say what changed since the parent, read from another cluster, timeline or database: this version is compared in full", LevelError},
	EventNudgeFailed:       {"could not nudge the replication stream past a snapshot", LevelWarn},
	EventSlotRetains:       {"the replication slot retains much WAL on the source: are versions failing to publish?", LevelWarn},
	EventRecordFailed: {"could not have the server log a running-transactions record: the slot's restart position " +
		"then moves only every 15 s, and the slot retains that much more WAL; tried again each minute", LevelWarn},

	EventLeaseAcquired: {"lease acquired", LevelInfo},
	EventLeaseTakeover: {"lease taken over", LevelInfo},
	EventLeaseReleased: {"lease released", LevelDebug},
	EventLeaseLost:     {"lease lost", LevelWarn},
	EventLeaseWaiting:  {"waiting for the lease: another holder has it; it is taken over at takeover_at unless that holder renews it", LevelInfo},

	EventStreamLetGo: {"the replication stream held too much for the next version: it keeps only which collections changed, " +
		"lets the slot advance, and the next version compares those in full", LevelWarn},

	EventBaseWanted:       {"building a base from storage beside the stream of versions", LevelInfo},
	EventBaseBuilt:        {"base built beside the stream: the next version takes it", LevelInfo},
	EventBaseFailed:       {"building a base beside the stream failed; nothing is published from it, and it is tried again", LevelWarn},
	EventSourceBaseWanted: {"reading a base from the source beside the stream of versions", LevelInfo},
	EventCollectionHeld:   {"the collection is held at its last state before its definition changed while its new base is read beside the stream", LevelInfo},
	EventCollectionWaits:  {"the new collection joins a later version, once its base is read beside the stream", LevelInfo},
	EventBaseRecordFailed: {"the record of a base beside the stream could not be written; the base goes on", LevelWarn},
	EventBaseDropped:      {"a base built beside the stream was dropped: the chain it replaces is no longer the current one's", LevelInfo},
	EventBaseSwapped:      {"the version's chain takes a base built beside the stream", LevelInfo},
	EventBaseResumed:      {"a base read from the source beside the stream goes on where it stood: what was written is read back from storage", LevelInfo},
	EventBaseReadAgain:    {"a base read from the source beside the stream that stood unfinished cannot go on: it is read from the start", LevelWarn},
	EventBasePartRead:     {"read a part of a base another replica builds", LevelInfo},
	EventBasePartTaken:    {"a base takes a part another replica read, from storage", LevelInfo},
}

// String returns the kind's log message; "" for a kind this version does not know.
func (k EventKind) String() string {
	if k <= 0 || k >= numEventKinds {
		return ""
	}
	return eventKinds[k].text
}

// Level returns how much an event of the kind matters; LevelInfo for a kind this
// version does not know.
func (k EventKind) Level() Level {
	if k <= 0 || k >= numEventKinds {
		return LevelInfo
	}
	return eventKinds[k].level
}

// Event is one thing worth telling an operator. Dataset, Version and Collection are
// empty when the event is not about one; Attrs holds the rest as alternating keys and
// values (the structured logger's convention), keys stable across releases.
type Event struct {
	Kind       EventKind
	Dataset    string
	Version    Version
	Collection string
	Attrs      []any
}

// Attr returns the value of the attribute key, nil when the event has none.
func (e Event) Attr(key string) any {
	for i := 0; i+1 < len(e.Attrs); i += 2 {
		if e.Attrs[i] == key {
			return e.Attrs[i+1]
		}
	}
	return nil
}

// Observer receives events. It is called synchronously from the goroutine that
// reported the event, so it must be quick and safe for concurrent use. A nil Observer
// (in a Publisher, Ticker, Admin, layer.Writer, a source's watch or stream, a lease)
// discards events.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// observe reports e to o, unless o is nil.
func observe(ctx context.Context, o Observer, e Event) {
	if o != nil {
		o.Observe(ctx, e)
	}
}
