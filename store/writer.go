package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/snapflip/snapflip/internal/retry"
	"github.com/snapflip/snapflip/snapshot"
)

// batch is the rows of one ApplyBulk call. An applied batch is reused for a later
// one, its slices keeping their capacity, so that a long copy does not grow a new
// set of slices every BatchRows rows.
type batch struct {
	keys  []string
	muts  []*bigtable.Mutation
	runs  []rowRun // the rows' collections, run-length coded
	bytes int
	// keyBuf holds the batch's document row keys, each a slice of what it built:
	// one allocation for the batch's keys, not one per key. A Builder never
	// changes bytes it has handed out, so the keys stay valid as it grows; it is
	// dropped, not reused, with the batch.
	keyBuf strings.Builder
}

// rowRun is n consecutive rows of a batch: documents, or run chunks, of one
// collection.
type rowRun struct {
	collection string
	chunks     bool
	n          int64
}

// add appends a row of bytes bytes.
func (b *batch) add(key string, mut *bigtable.Mutation, collection string, chunk bool, bytes int) {
	b.keys = append(b.keys, key)
	b.muts = append(b.muts, mut)
	if n := len(b.runs); n > 0 && b.runs[n-1].collection == collection && b.runs[n-1].chunks == chunk {
		b.runs[n-1].n++
	} else {
		b.runs = append(b.runs, rowRun{collection: collection, chunks: chunk, n: 1})
	}
	b.bytes += bytes
}

// docKey returns the row key of the document id under prefix, built in keyBuf.
func (b *batch) docKey(prefix, id string) string {
	from := b.keyBuf.Len()
	b.keyBuf.WriteString(prefix)
	writeEscaped(&b.keyBuf, id)
	return b.keyBuf.String()[from:]
}

// reset empties the batch for reuse, dropping its references to the rows.
func (b *batch) reset() {
	clear(b.keys)
	clear(b.muts)
	clear(b.runs)
	b.keys, b.muts, b.runs, b.bytes = b.keys[:0], b.muts[:0], b.runs[:0], 0
	b.keyBuf.Reset()
}

// Writer writes one version's documents with ApplyBulk: rows are gathered into
// batches bounded by rows and bytes, Config.Writers batches are in flight at once, and
// rows that fail inside a batch are retried on their own with backoff. Every cell of
// a version carries the same timestamp, so a retried write is idempotent.
type Writer struct {
	s       *Store
	dataset string
	version snapshot.Version
	ts      bigtable.Timestamp
	ctx     context.Context
	cancel  context.CancelCauseFunc

	bmu     sync.Mutex // guards cur; held while a full batch is handed over
	cur     *batch
	batches chan *batch
	free    chan *batch // applied batches, to reuse
	wg      sync.WaitGroup

	prefixes map[string]string // collection -> docPrefix, under bmu
	keyBytes int               // bytes of keys the last batch sent held, under bmu

	tally snapshot.Tally // what was acknowledged

	// inflight counts the batches sent and not yet applied (or dropped); idle is
	// signalled when it falls to zero. Under mu.
	inflight int
	idle     *sync.Cond

	mu     sync.Mutex
	err    error
	closed bool
}

var _ snapshot.DocumentWriter = (*Writer)(nil)

// NewWriter returns a writer for the documents of version v. Its workers stop when ctx
// ends.
func (s *Store) NewWriter(ctx context.Context, dataset string, v snapshot.Version) snapshot.DocumentWriter {
	wctx, cancel := context.WithCancelCause(ctx)
	w := &Writer{
		s: s, dataset: dataset, version: v,
		ts:      bigtable.Time(time.Now()),
		ctx:     wctx,
		cancel:  cancel,
		batches: make(chan *batch, s.cfg.Writers),
		// At most the current batch, a full channel and one per worker exist.
		free: make(chan *batch, 2*s.cfg.Writers+1),

		prefixes: map[string]string{},
	}
	w.idle = sync.NewCond(&w.mu)
	for range s.cfg.Writers {
		w.wg.Add(1)
		go w.work()
	}
	return w
}

// Write queues a document; it blocks while every worker is busy and the queue is full.
// It is safe to call from several goroutines.
func (w *Writer) Write(ctx context.Context, collection string, doc snapshot.Document) error {
	return w.queue(ctx, rowRef{collection: collection, id: doc.ID}, doc.Body)
}

// WriteChunk queues chunk n of the collection's fingerprint run.
func (w *Writer) WriteChunk(ctx context.Context, collection string, n int64, chunk []byte) error {
	return w.queue(ctx, rowRef{collection: collection, chunk: n, isChunk: true}, chunk)
}

// WriteLive records how many live ids the chain the collection's layer tops holds,
// beside its run (Store.RecordedLive), at once rather than queued: a few bytes
// once a layer.
func (w *Writer) WriteLive(ctx context.Context, collection string, n int64) error {
	ctx, cancel := w.s.op(ctx)
	defer cancel()
	mut := bigtable.NewMutation()
	mut.Set(famDocs, colLive, w.ts, []byte(strconv.FormatInt(n, 10)))
	if err := w.s.tbl.Apply(ctx, runKey(w.dataset, w.version, collection, 0), mut); err != nil {
		return w.s.wrap(err, "record the live ids of %s at %s", collection, w.version)
	}
	return nil
}

// rowRef names a row a writer writes: a document, or a chunk of a run.
type rowRef struct {
	collection string
	id         string
	chunk      int64
	isChunk    bool
}

// queue adds one row to the current batch and sends the batch when full.
func (w *Writer) queue(ctx context.Context, r rowRef, value []byte) error {
	if err := w.failed(); err != nil {
		return err
	}
	w.bmu.Lock()
	defer w.bmu.Unlock()
	if w.cur == nil {
		w.cur = w.newBatch()
		w.cur.keyBuf.Grow(w.keyBytes)
	}
	b := w.cur
	mut := bigtable.NewMutation()
	var k string
	if r.isChunk {
		mut.Set(famDocs, colRun, w.ts, value)
		k = runKey(w.dataset, w.version, r.collection, r.chunk)
	} else {
		mut.Set(famDocs, colDoc, w.ts, value)
		prefix, ok := w.prefixes[r.collection]
		if !ok {
			prefix = docPrefix(w.dataset, w.version, r.collection)
			w.prefixes[r.collection] = prefix
		}
		k = b.docKey(prefix, r.id)
	}
	b.add(k, mut, r.collection, r.isChunk, len(value)+len(k))
	if len(b.keys) >= w.s.cfg.BatchRows || b.bytes >= w.s.cfg.BatchBytes {
		return w.send(ctx)
	}
	return nil
}

// ChunksWritten returns the fingerprint run chunks acknowledged per collection.
func (w *Writer) ChunksWritten() map[string]int64 { return w.tally.ChunksWritten() }

// BytesWritten returns the bytes of row keys and values acknowledged so far.
func (w *Writer) BytesWritten() int64 { return w.tally.BytesWritten() }

// newBatch returns an empty batch, an applied one when there is one.
func (w *Writer) newBatch() *batch {
	select {
	case b := <-w.free:
		return b
	default:
		return &batch{}
	}
}

// send hands the current batch to the workers; the caller holds bmu.
func (w *Writer) send(ctx context.Context) error {
	b := w.cur
	w.cur = nil
	if b == nil || len(b.keys) == 0 {
		return nil
	}
	w.keyBytes = b.keyBuf.Len()
	w.mu.Lock()
	w.inflight++
	w.mu.Unlock()
	select {
	case w.batches <- b:
		return nil
	case <-ctx.Done():
		w.applied()
		return ctx.Err()
	case <-w.ctx.Done():
		w.applied()
		return w.failed()
	}
}

// applied counts a batch sent as applied or dropped.
func (w *Writer) applied() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inflight--; w.inflight == 0 {
		w.idle.Broadcast()
	}
}

// Flush sends the current batch and waits until every batch sent is applied, or
// returns the first error a worker met.
func (w *Writer) Flush(ctx context.Context) error {
	w.bmu.Lock()
	err := w.send(ctx)
	w.bmu.Unlock()
	if err != nil {
		return err
	}
	w.mu.Lock()
	for w.inflight > 0 && w.err == nil {
		w.idle.Wait()
	}
	w.mu.Unlock()
	return w.failed()
}

// Close flushes, waits for the workers, and returns the counts written per collection.
func (w *Writer) Close(ctx context.Context) (map[string]int64, error) {
	w.mu.Lock()
	if w.closed {
		err := w.err
		w.mu.Unlock()
		return w.tally.Written(), err
	}
	w.closed = true
	w.mu.Unlock()
	w.bmu.Lock()
	err := w.send(ctx)
	w.bmu.Unlock()
	close(w.batches)
	w.wg.Wait()
	if ferr := w.failed(); ferr != nil {
		err = ferr
	}
	if err != nil {
		w.fail(err)
	}
	w.cancel(nil)
	return w.tally.Written(), err
}

// failed returns the first error a worker met, or the context's error.
func (w *Writer) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if err := context.Cause(w.ctx); err != nil {
		return err
	}
	return nil
}

func (w *Writer) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.idle.Broadcast()
	w.mu.Unlock()
	w.cancel(err)
}

func (w *Writer) work() {
	defer w.wg.Done()
	for b := range w.batches {
		if w.ctx.Err() != nil {
			w.applied()
			continue // drain so that senders never block
		}
		if err := w.apply(b); err != nil {
			w.fail(err)
			w.applied()
			continue
		}
		for _, r := range b.runs {
			if r.chunks {
				w.tally.CountChunks(r.collection, r.n)
			} else {
				w.tally.CountDocs(r.collection, r.n)
			}
		}
		w.tally.CountBytes(int64(b.bytes))
		w.applied()
		b.reset()
		select {
		case w.free <- b:
		default:
		}
	}
}

// apply writes one batch, retrying the rows that failed, up to RowRetries times.
func (w *Writer) apply(b *batch) error {
	keys, muts := b.keys, b.muts
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(w.ctx, w.s.cfg.BatchTimeout)
		errs, err := w.s.tbl.ApplyBulk(actx, keys, muts)
		cancel()
		if err == nil && errs == nil {
			return nil
		}
		if attempt >= w.s.cfg.RowRetries || w.ctx.Err() != nil {
			if err == nil {
				err = firstRowError(keys, errs)
			}
			return w.s.wrap(err, "write %d documents of %s after %d attempts", len(keys), w.version, attempt+1)
		}
		if err == nil {
			// Keep only the rows that failed.
			var k2 []string
			var m2 []*bigtable.Mutation
			for i, e := range errs {
				if e != nil {
					k2, m2 = append(k2, keys[i]), append(m2, muts[i])
				}
			}
			keys, muts = k2, m2
		}
		if err := retry.Sleep(w.ctx, rowBackoff.Delay(attempt)); err != nil {
			return fmt.Errorf("write documents of %s: %w", w.version, err)
		}
	}
}

func firstRowError(keys []string, errs []error) error {
	for i, e := range errs {
		if e != nil {
			return fmt.Errorf("row %q: %w", keys[i], e)
		}
	}
	return errors.New("ApplyBulk reported failures without a row error")
}

// rowBackoff spaces out a batch's retries of its failed rows: retry n waits uniformly
// in [0, min(2s, 50ms·2ⁿ)].
var rowBackoff = retry.Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second, Jitter: retry.FullJitter}
