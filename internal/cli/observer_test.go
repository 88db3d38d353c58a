package cli

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"

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
		{snapshot.Event{Kind: snapshot.EventReleaseLeaseFailed, Attrs: []any{"token", 3, "err", err}},
			func(l *slog.Logger) { l.Warn("release lease", "token", 3, "err", err) }},
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
