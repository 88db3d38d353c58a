package cli

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/pgsource"
)

// The source's events are logged with the words, level and attributes the syncer
// logged them with when pgsource logged them itself.
func TestSourceEventsLog(t *testing.T) {
	for _, tt := range []struct {
		e    pgsource.Event
		want string
	}{
		{pgsource.Event{Kind: pgsource.EventWatchFailed, Err: errors.New("boom")},
			`level=WARN msg="watching the source failed; retrying (the schedule still runs)" err=boom`},
		{pgsource.Event{Kind: pgsource.EventWatching, Tables: 2, Relations: 3, Interval: 200 * time.Millisecond, Mode: pgsource.WatchModeStats},
			`level=INFO msg="watching for changes" tables=2 relations=3 interval=200ms mode=stats`},
		{pgsource.Event{Kind: pgsource.EventStreamStarted, Slot: "s", LSN: 0x1_0000_00ff, Reading: "r"},
			`level=INFO msg="reading the replication stream" slot=s from=1/FF reading=r`},
		{pgsource.Event{Kind: pgsource.EventSlotLost, Slot: "s"},
			`level=ERROR msg="the replication slot was invalidated (max_slot_wal_keep_size): its changes are lost;`},
		{pgsource.Event{Kind: pgsource.EventStreamNoDelta, Slot: "s", Why: "no parent"},
			`level=INFO msg="the stream cannot say what changed since the parent: this version is compared in full" slot=s why="no parent"`},
		{pgsource.Event{Kind: pgsource.EventStreamNoDelta, Slot: "s", Why: "other", OtherSystem: true},
			`level=ERROR msg="the stream cannot say what changed since the parent`},
		{pgsource.Event{Kind: pgsource.EventSlotRetains, Slot: "s", Retained: 5, Threshold: 4},
			`level=WARN msg="the replication slot retains much WAL on the source: are versions failing to publish?" slot=s retained_bytes=5 threshold=4`},
	} {
		var b bytes.Buffer
		sourceEvents(slog.New(slog.NewTextHandler(&b, nil))).Observe(context.Background(), tt.e)
		if got := b.String(); !strings.Contains(got, tt.want) {
			t.Errorf("%v logged\n%s\nwant it to hold\n%s", tt.e.Kind, got, tt.want)
		}
	}
}
