package cli

import (
	"context"
	"log/slog"

	"github.com/snapflip/snapflip/snapshot"
)

// logObserver writes events (of the publisher, the ticker, the admin, the layer
// writer, the source's watch and stream, and the leases) as log lines: the kind's text is the message, at the kind's level, with the
// event's dataset, version and collection (when set) before its own attributes.
type logObserver struct{ log *slog.Logger }

var _ snapshot.Observer = logObserver{}

// Observe logs e.
func (o logObserver) Observe(ctx context.Context, e snapshot.Event) {
	level := slog.Level(e.Kind.Level())
	if !o.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]any, 0, 6+len(e.Attrs))
	if e.Dataset != "" {
		attrs = append(attrs, "dataset", e.Dataset)
	}
	if e.Version != "" {
		attrs = append(attrs, "version", e.Version)
	}
	if e.Collection != "" {
		attrs = append(attrs, "collection", e.Collection)
	}
	o.log.Log(ctx, level, e.Kind.String(), append(attrs, e.Attrs...)...)
}
