package cli

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// An event is logged as the line the code logged before events existed: same level,
// message and attributes, in the same order.
func TestLogObserverLine(t *testing.T) {
	strip := func(b *bytes.Buffer) string { return string(bytes.TrimSpace(b.Bytes())) }
	noTime := &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	err := errors.New("boom")
	for _, tc := range []struct {
		e   snapshot.Event
		old func(*slog.Logger)
	}{
		{snapshot.Event{Kind: snapshot.EventSyncStarted, Dataset: "ds", Version: "v1", Attrs: []any{"source_lsn", "0/1", "forced", false}},
			func(l *slog.Logger) {
				l.With("dataset", "ds", "version", snapshot.Version("v1")).Info("sync started", "source_lsn", "0/1", "forced", false)
			}},
		{snapshot.Event{Kind: snapshot.EventLayerWritten, Dataset: "ds", Version: "v1", Collection: "items", Attrs: []any{"kind", "delta"}},
			func(l *slog.Logger) {
				l.With("dataset", "ds", "version", snapshot.Version("v1"), "collection", "items").Info("layer written", "kind", "delta")
			}},
		{snapshot.Event{Kind: snapshot.EventReleaseLeaseFailed, Attrs: []any{"fence", 3, "err", err}},
			func(l *slog.Logger) { l.Warn("release lease", "fence", 3, "err", err) }},
		{snapshot.Event{Kind: snapshot.EventKeyedTooLarge, Dataset: "ds", Collection: "items", Attrs: []any{"bytes_over", 10}},
			func(l *slog.Logger) {
				l.Info("the changed documents are too large to hold: every id is compared", "dataset", "ds", "collection", "items", "bytes_over", 10)
			}},
	} {
		var got, want bytes.Buffer
		logObserver{slog.New(slog.NewTextHandler(&got, noTime))}.Observe(context.Background(), tc.e)
		tc.old(slog.New(slog.NewTextHandler(&want, noTime)))
		if got, want := strip(&got), strip(&want); got != want {
			t.Errorf("event %q logged\n%s\nwant\n%s", tc.e.Kind, got, want)
		}
	}
}

// The source's events are logged with the words, level and attributes the syncer
// logged them with when pgsource logged them itself.
func TestSourceEventsLog(t *testing.T) {
	for _, tt := range []struct {
		e    snapshot.Event
		want string
	}{
		{snapshot.Event{Kind: snapshot.EventWatchFailed, Attrs: []any{"err", errors.New("boom")}},
			`level=WARN msg="watching the source failed; retrying (the schedule still runs)" err=boom`},
		{snapshot.Event{Kind: snapshot.EventWatching, Attrs: []any{"tables", 2, "relations", 3, "interval", "200ms", "mode", pgsource.WatchModeStats}},
			`level=INFO msg="watching for changes" tables=2 relations=3 interval=200ms mode=stats`},
		{snapshot.Event{Kind: snapshot.EventStreamStarted, Attrs: []any{"slot", "s", "from", "1/FF", "reading", "r"}},
			`level=INFO msg="reading the replication stream" slot=s from=1/FF reading=r`},
		{snapshot.Event{Kind: snapshot.EventSlotLost, Attrs: []any{"slot", "s"}},
			`level=ERROR msg="the replication slot was invalidated (max_slot_wal_keep_size): its changes are lost;`},
		{snapshot.Event{Kind: snapshot.EventStreamNoDelta, Attrs: []any{"slot", "s", "why", "no parent"}},
			`level=INFO msg="the stream cannot say what changed since the parent: this version is compared in full" slot=s why="no parent"`},
		{snapshot.Event{Kind: snapshot.EventStreamOtherSystem, Attrs: []any{"slot", "s", "why", "other"}},
			`level=ERROR msg="the stream cannot say what changed since the parent`},
		{snapshot.Event{Kind: snapshot.EventSlotRetains, Attrs: []any{"slot", "s", "retained_bytes", 5, "threshold", 4}},
			`level=WARN msg="the replication slot retains much WAL on the source: are versions failing to publish?" slot=s retained_bytes=5 threshold=4`},
	} {
		var b bytes.Buffer
		logObserver{slog.New(slog.NewTextHandler(&b, nil))}.Observe(context.Background(), tt.e)
		if got := b.String(); !strings.Contains(got, tt.want) {
			t.Errorf("%v logged\n%s\nwant it to hold\n%s", tt.e.Kind, got, tt.want)
		}
	}
}
