package layer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snapflip/snapflip/snapshot"

	"golang.org/x/sync/errgroup"
)

// defaultProgressEvery is how often a long copy reports its progress.
const defaultProgressEvery = 10 * time.Second

// writeFull copies every collection from the snapshot into storage, returning each
// collection's stats. A collection the snapshot can partition is read by one goroutine
// per part, all into the one writer; each part keeps its own count and digest,
// combined at the end. The parent's row counts, when known, give ETAs.
func (vw *versionWrite) writeFull(ctx context.Context) (snapshot.WriteResult, error) {
	vw.fullIndexes = map[string][]snapshot.IndexWrite{}
	out, err := vw.writeEach(ctx, vw.copyCollection)
	if err != nil {
		return out.res, err
	}
	for name, st := range out.res.Collections {
		st.Written = out.docs[name]
		// A full copy packs one entry per document in each index, and storage
		// acknowledged every block.
		for _, iw := range indexesWritten(name, vw.fullIndexes[name], out.docs, out.chunks) {
			if iw.Entries != st.Rows || !iw.Acknowledged() {
				return out.res, fmt.Errorf("%w: collection %s index %s: %d entries for %d documents, %d of %d blocks and %d of %d directory chunks written",
					snapshot.ErrDeltaInconsistent, name, iw.Name, iw.Entries, st.Rows, iw.Written, iw.Cells(), iw.ChunksWritten, iw.Chunks)
			}
		}
		out.res.Collections[name] = st
	}
	return out.res, nil
}

// written is what writeEach wrote.
type written struct {
	// res holds each collection's stats as the write made them, and the version's
	// bytes written.
	res snapshot.WriteResult
	// docs and chunks are the documents (and tombstones) and run chunks the store
	// acknowledged per collection, which complete the stats.
	docs, chunks map[string]int64
}

// writeEach writes every collection of the version with write, all into one writer,
// and closes it.
func (vw *versionWrite) writeEach(ctx context.Context, write func(context.Context, snapshot.DocumentWriter, string) (snapshot.CollectionStats, error)) (written, error) {
	out := written{res: snapshot.WriteResult{Collections: map[string]snapshot.CollectionStats{}}}
	w := vw.Store.NewWriter(ctx, vw.dataset, vw.req.Manifest.Version)
	for _, name := range vw.writing() {
		st, err := write(ctx, w, name)
		if err != nil {
			_, _ = w.Close(ctx)
			return out, fmt.Errorf("collection %s: %w", name, err)
		}
		out.res.Collections[name] = st
	}
	docs, err := w.Close(ctx)
	out.res.BytesWritten = w.BytesWritten()
	if err != nil {
		return out, fmt.Errorf("write documents: %w", err)
	}
	out.docs, out.chunks = docs, w.ChunksWritten()
	return out, nil
}

// copyCollection copies one collection into w.
func (vw *versionWrite) copyCollection(ctx context.Context, w snapshot.DocumentWriter, name string) (snapshot.CollectionStats, error) {
	snap := vw.req.Snap
	var expected int64
	if vw.req.Parent != nil {
		expected = vw.req.Parent.Collections[name].Rows
	}
	parts := 1
	ps, partitioned := snap.(snapshot.PartitionedSnapshot)
	if partitioned {
		parts = max(ps.Partitions(name), 1)
		if n, ok := ps.Rows(name); ok {
			expected = n
		}
	}
	prog := vw.newProgress(name, expected)
	stats := make([]snapshot.CollectionStats, parts)
	ixs := make([]*indexer, parts)
	digests := make([]snapshot.Digest, parts)
	g, gctx := errgroup.WithContext(ctx)
	ixs[0] = newIndexer(vw, w, name, nil)
	for part := range parts {
		if part > 0 {
			ixs[part] = ixs[0].share()
		}
		g.Go(func() error {
			fn := func(doc snapshot.Document) error {
				if vw.MaxDocumentBytes > 0 && len(doc.Body) > vw.MaxDocumentBytes {
					return fmt.Errorf("%w: collection %s key %q: document is %d bytes, over the limit of %d",
						snapshot.ErrSource, name, truncate(doc.ID, 200), len(doc.Body), vw.MaxDocumentBytes)
				}
				stats[part].Rows++
				stats[part].Bytes += int64(len(doc.Body))
				digests[part].AddDocument(doc.ID, doc.Body)
				prog.add(gctx, len(doc.Body))
				if vw.req.Crash != nil {
					vw.req.Crash(snapshot.CrashMidWrite, prog.rows.Load())
				}
				if err := w.Write(gctx, name, doc); err != nil {
					return err
				}
				return ixs[part].add(gctx, doc)
			}
			if parts == 1 {
				return snap.Scan(gctx, name, fn)
			}
			return ps.ScanPartition(gctx, name, part, parts, fn)
		})
	}
	if err := g.Wait(); err != nil {
		return snapshot.CollectionStats{}, err
	}
	iws, err := ixs[0].done(ctx)
	if err != nil {
		return snapshot.CollectionStats{}, err
	}
	vw.fullIndexes[name] = iws
	var st snapshot.CollectionStats
	var d snapshot.Digest
	for i := range parts {
		st.Rows += stats[i].Rows
		st.Bytes += stats[i].Bytes
		d.Add(digests[i])
	}
	st.Digest, st.Indexes = d.String(), vw.declared[name]
	prog.done(ctx)
	return st, nil
}

func (w *Writer) progressEvery() time.Duration {
	if w.ProgressEvery > 0 {
		return w.ProgressEvery
	}
	return defaultProgressEvery
}

// progress reports a collection's copy every interval: rows, bytes, rows/s and, when the
// expected count is known, the percentage and an ETA.
type progress struct {
	vw         *versionWrite
	collection string
	every      time.Duration
	expected   int64
	now        func() time.Time
	start      time.Time

	rows, bytes atomic.Int64
	mu          sync.Mutex
	next        time.Time
}

// newProgress returns the progress of the version's collection, expected rows long
// (0: unknown).
func (vw *versionWrite) newProgress(collection string, expected int64) *progress {
	t := vw.now()
	return &progress{
		vw: vw, collection: collection,
		every: vw.progressEvery(), expected: expected, now: vw.now, start: t, next: t.Add(vw.progressEvery()),
	}
}

// add counts one document; every 1024 documents it checks whether to log.
func (pr *progress) add(ctx context.Context, bytes int) {
	pr.bytes.Add(int64(bytes))
	if pr.rows.Add(1)%1024 != 0 {
		return
	}
	t := pr.now()
	pr.mu.Lock()
	if t.Before(pr.next) {
		pr.mu.Unlock()
		return
	}
	pr.next = t.Add(pr.every)
	pr.mu.Unlock()
	pr.report(ctx, t, snapshot.EventCopying)
}

func (pr *progress) done(ctx context.Context) {
	pr.report(ctx, pr.now(), snapshot.EventCollectionCopied)
}

func (pr *progress) report(ctx context.Context, t time.Time, kind snapshot.EventKind) {
	rows := pr.rows.Load()
	secs := t.Sub(pr.start).Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(rows) / secs
	}
	attrs := []any{"rows", rows, "bytes", pr.bytes.Load(), "rows_per_sec", int64(rate), "elapsed", t.Sub(pr.start).Round(time.Millisecond).String()}
	if pr.expected > 0 && kind == snapshot.EventCopying {
		left := max(pr.expected-rows, 0)
		eta := "unknown"
		if rate > 0 {
			eta = time.Duration(float64(left) / rate * float64(time.Second)).Round(time.Second).String()
		}
		attrs = append(attrs, "expected", pr.expected, "percent", min(100, 100*rows/pr.expected), "eta", eta)
	}
	pr.vw.event(ctx, kind, pr.collection, attrs...)
}
