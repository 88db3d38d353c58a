package snapshot

import (
	"context"
	"maps"
	"sync"
)

// What storage gives the layer engine and takes from it: a version's documents
// written in batches (DocumentWriter), and documents read through a chain with the
// layer each came from (Located).

// DocumentWriter writes one version's documents, batched and in parallel.
type DocumentWriter interface {
	// Write queues a document. It blocks while the writer's buffers are full and
	// returns the first error any earlier batch met, after which the writer is done.
	Write(ctx context.Context, collection string, doc Document) error
	// WriteChunk queues chunk n of the collection's fingerprint run (fprun.go).
	WriteChunk(ctx context.Context, collection string, n int64, chunk []byte) error
	// WriteLive records, beside the collection's run, how many live ids the chain
	// its layer tops holds (the store's RecordedLive).
	WriteLive(ctx context.Context, collection string, n int64) error
	// Flush sends what is queued and waits until storage has acknowledged every row
	// written so far, or returns the first error; the writer goes on.
	Flush(ctx context.Context) error
	// Close flushes what is queued, waits for it, and returns the number of documents
	// (and tombstones) written per collection, or the first error.
	Close(ctx context.Context) (map[string]int64, error)
	// ChunksWritten returns the run chunks acknowledged per collection.
	ChunksWritten() map[string]int64
	// BytesWritten returns the bytes of keys and values acknowledged.
	BytesWritten() int64
}

// Tally counts what storage acknowledged of one version's writes: documents (and
// tombstones) and run chunks per collection, and bytes of keys and values. It is
// safe for concurrent use; a DocumentWriter embeds it to answer ChunksWritten and
// BytesWritten.
type Tally struct {
	mu     sync.Mutex
	docs   map[string]int64
	chunks map[string]int64
	bytes  int64
}

// CountDocs counts n documents or tombstones of collection as acknowledged.
func (t *Tally) CountDocs(collection string, n int64) { t.count(&t.docs, collection, n) }

// CountChunks counts n run chunks of collection as acknowledged.
func (t *Tally) CountChunks(collection string, n int64) { t.count(&t.chunks, collection, n) }

// CountBytes counts n bytes of keys and values as acknowledged.
func (t *Tally) CountBytes(n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.bytes += n
}

func (t *Tally) count(m *map[string]int64, collection string, n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if *m == nil {
		*m = map[string]int64{}
	}
	(*m)[collection] += n
}

// Written returns the documents and tombstones acknowledged per collection.
func (t *Tally) Written() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return cloneCounts(t.docs)
}

// ChunksWritten returns the run chunks acknowledged per collection.
func (t *Tally) ChunksWritten() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return cloneCounts(t.chunks)
}

// BytesWritten returns the bytes of keys and values acknowledged.
func (t *Tally) BytesWritten() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bytes
}

// cloneCounts returns a copy of m, empty rather than nil.
func cloneCounts(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	maps.Copy(out, m)
	return out
}

// Located is a document read through a chain, and the index in the chain (newest
// first) of the layer that holds it.
type Located struct {
	Body  []byte
	Layer int
}

// Bodies returns the documents of found, by id: GetDocuments from LocateDocuments.
func Bodies(found map[string]Located) map[string][]byte {
	out := make(map[string][]byte, len(found))
	for id, d := range found {
		out[id] = d.Body
	}
	return out
}
