package memstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/snapflip/snapflip/snapshot"
)

// writer writes one version's rows into the store as they come: each is
// acknowledged at once.
type writer struct {
	s       *Store
	ctx     context.Context
	dataset string
	v       snapshot.Version

	snapshot.Tally // what was written

	mu     sync.Mutex
	err    error
	closed bool
}

var _ snapshot.DocumentWriter = (*writer)(nil)

// NewWriter returns a writer for the documents of version v; it fails once ctx ends.
func (s *Store) NewWriter(ctx context.Context, dataset string, v snapshot.Version) snapshot.DocumentWriter {
	return &writer{s: s, ctx: ctx, dataset: dataset, v: v}
}

// counted is what one row adds to the tally.
type counted struct {
	doc, chunk bool
	bytes      int64
}

// put applies one row, or returns the writer's first error; set writes it into the
// collection's rows with the store's lock held, and the row counts as c.
func (w *writer) put(ctx context.Context, collection string, c counted, set func(l *layerRows)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = context.Cause(w.ctx)
	}
	if w.err == nil {
		w.err = ctx.Err()
	}
	if w.err == nil && w.closed {
		w.err = fmt.Errorf("write %s at %s: the writer is closed", collection, w.v)
	}
	if w.err != nil {
		return w.err
	}
	w.s.mu.Lock()
	f := w.s.fault(OpWrite)
	if f != Refused {
		set(w.s.rows(layerKey{w.dataset, w.v, collection}))
	}
	w.s.mu.Unlock()
	if f != 0 {
		w.err = fmt.Errorf("write %s at %s: %w", collection, w.v, errInjected)
		return w.err
	}
	if c.chunk {
		w.CountChunks(collection, 1)
	} else if c.doc {
		w.CountDocs(collection, 1)
	}
	w.CountBytes(c.bytes)
	return nil
}

// Write writes a document (an empty body: a tombstone).
func (w *writer) Write(ctx context.Context, collection string, doc snapshot.Document) error {
	return w.put(ctx, collection, counted{doc: true, bytes: int64(len(doc.ID) + len(doc.Body))}, func(l *layerRows) { l.docs[doc.ID] = clone(doc.Body) })
}

// WriteChunk writes chunk n of the collection's fingerprint run.
func (w *writer) WriteChunk(ctx context.Context, collection string, n int64, chunk []byte) error {
	return w.put(ctx, collection, counted{chunk: true, bytes: int64(len(chunk))}, func(l *layerRows) { l.run[n] = clone(chunk) })
}

// WriteLive records how many live ids the chain the collection's layer tops holds.
func (w *writer) WriteLive(ctx context.Context, collection string, n int64) error {
	return w.put(ctx, collection, counted{bytes: 8}, func(l *layerRows) { l.live = &n })
}

// Flush returns the writer's first error: every row is acknowledged as written.
func (w *writer) Flush(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close returns the documents and tombstones written per collection, or the first
// error.
func (w *writer) Close(context.Context) (map[string]int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return w.Written(), w.err
}
