package snapshot_test

import (
	"testing"

	"github.com/snapflip/snapflip/snapshot"
)

// Every kind has its message and a level, and the last kind is the last lease's; the messages are what operators and the
// end-to-end tests grep, so a few are pinned here.
func TestEventKindText(t *testing.T) {
	seen := map[string]snapshot.EventKind{}
	for k := snapshot.EventSyncStarted; k.String() != ""; k++ {
		if prev, ok := seen[k.String()]; ok {
			t.Errorf("kinds %d and %d both say %q", prev, k, k)
		}
		seen[k.String()] = k
	}
	for _, tc := range []struct {
		kind  snapshot.EventKind
		text  string
		level snapshot.Level
	}{
		{snapshot.EventSyncStarted, "sync started", snapshot.LevelInfo},
		{snapshot.EventPublished, "published", snapshot.LevelInfo},
		{snapshot.EventSourceUnchanged, "source unchanged; nothing to publish", snapshot.LevelInfo},
		{snapshot.EventPublishRefused, "publish refused", snapshot.LevelWarn},
		{snapshot.EventRollback, "rollback", snapshot.LevelInfo},
		{snapshot.EventUnpin, "unpin", snapshot.LevelInfo},
		{snapshot.EventLayerWritten, "layer written", snapshot.LevelInfo},
		{snapshot.EventCopying, "copying", snapshot.LevelInfo},
		{snapshot.EventCollectionCopied, "collection copied", snapshot.LevelInfo},
		{snapshot.EventCoverageFailed, "record that the current version covers the source's snapshot", snapshot.LevelWarn},
		{snapshot.EventSlotLost, "the replication slot was invalidated (max_slot_wal_keep_size): its changes are lost; dropping it " +
			"and starting a new one, and the next version is compared in full", snapshot.LevelError},
		{snapshot.EventLeaseReleased, "lease released", snapshot.LevelDebug},
		{snapshot.EventLeaseWaiting, "waiting for the lease: another holder has it; it is taken over at takeover_at unless that holder renews it", snapshot.LevelInfo},
		{snapshot.EventStreamLetGo, "the replication stream held too much for the next version: it keeps only which collections changed, " +
			"lets the slot advance, and the next version compares those in full", snapshot.LevelWarn},
		{snapshot.EventBaseFailed, "building a base beside the stream failed; nothing is published from it, and it is tried again", snapshot.LevelWarn},
		{snapshot.EventKind(0), "", snapshot.LevelInfo},
	} {
		if got, want := tc.kind.String(), tc.text; got != want {
			t.Errorf("kind %d says %q; want %q", tc.kind, got, want)
		}
		if got, want := tc.kind.Level(), tc.level; got != want {
			t.Errorf("kind %q: level %d; want %d", tc.kind, got, want)
		}
	}
	if got, want := len(seen), int(snapshot.EventBasePartTaken); got != want {
		t.Errorf("%d kinds with a message; want %d", got, want)
	}
}
