package layer

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/snapflip/snapflip/snapshot"
)

// A fingerprint run is a layer's own entries for one collection, in id byte order:
// per id its document's length and its Contribution to the digest, or a tombstone.
// A delta is computed by merging the parent chain's runs (newest layer wins) with the
// source's rows, so the parent's documents are never read to find what changed. Runs
// are stored in chunks, each of which decodes on its own:
//
//	chunk = 0x01 uvarint(count) entry*
//	entry = uvarint(bytes shared with the previous id) uvarint(len suffix) suffix
//	        flags (bit 0: tombstone)
//	        [uvarint(document length) lane0 lane1 (8 bytes each, big-endian)]  -- not for tombstones
//
// Front coding makes an entry about 20 + (distinct suffix) bytes.

// RunEntry is one id of a fingerprint run.
type RunEntry struct {
	ID      string
	Deleted bool            // a tombstone: the id is gone in this layer
	Len     int64           // the document's length (not for tombstones)
	Sum     snapshot.Digest // Contribution(ID, document) (not for tombstones)
}

// runChunkVersion tags the chunk format.
const runChunkVersion = 0x01

// DefaultRunChunkBytes is about how large a run chunk grows before it is cut.
const DefaultRunChunkBytes = 256 << 10

// runEncoder cuts a run into chunks and hands each to emit.
type runEncoder struct {
	max   int
	emit  func(ctx context.Context, chunk []byte) error
	buf   []byte // entries of the current chunk
	count int
	prev  string
	last  string // the last id added, to check order
	any   bool
}

func newRunEncoder(max int, emit func(ctx context.Context, chunk []byte) error) *runEncoder {
	if max <= 0 {
		max = DefaultRunChunkBytes
	}
	return &runEncoder{max: max, emit: emit}
}

// add appends an entry; ids must come in strictly increasing byte order.
func (e *runEncoder) add(ctx context.Context, r RunEntry) error {
	if e.any && r.ID <= e.last {
		return fmt.Errorf("%w: fingerprint run out of order: %q after %q", snapshot.ErrInvalid, r.ID, e.last)
	}
	e.any, e.last = true, r.ID
	shared := 0
	if e.count > 0 {
		for shared < len(r.ID) && shared < len(e.prev) && r.ID[shared] == e.prev[shared] {
			shared++
		}
	}
	e.buf = binary.AppendUvarint(e.buf, uint64(shared))
	e.buf = binary.AppendUvarint(e.buf, uint64(len(r.ID)-shared))
	e.buf = append(e.buf, r.ID[shared:]...)
	if r.Deleted {
		e.buf = append(e.buf, 1)
	} else {
		e.buf = append(e.buf, 0)
		e.buf = binary.AppendUvarint(e.buf, uint64(r.Len))
		e.buf = binary.BigEndian.AppendUint64(e.buf, r.Sum[0])
		e.buf = binary.BigEndian.AppendUint64(e.buf, r.Sum[1])
	}
	e.count++
	e.prev = r.ID
	if len(e.buf) >= e.max {
		return e.flush(ctx)
	}
	return nil
}

// flush emits the current chunk, if it holds anything.
func (e *runEncoder) flush(ctx context.Context) error {
	if e.count == 0 {
		return nil
	}
	chunk := make([]byte, 0, len(e.buf)+binary.MaxVarintLen64+1)
	chunk = append(chunk, runChunkVersion)
	chunk = binary.AppendUvarint(chunk, uint64(e.count))
	chunk = append(chunk, e.buf...)
	e.buf, e.count, e.prev = e.buf[:0], 0, ""
	return e.emit(ctx, chunk)
}

// DecodeRunChunk decodes one chunk, calling fn with each entry in order.
func DecodeRunChunk(chunk []byte, fn func(RunEntry) error) error {
	// Not ErrInvalid, which says a request was wrong: a chunk is stored data.
	bad := func(what string) error { return fmt.Errorf("corrupt fingerprint chunk: %s", what) }
	if len(chunk) < 1 || chunk[0] != runChunkVersion {
		return bad("unknown format")
	}
	p := chunk[1:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		return v, true
	}
	count, ok := uv()
	if !ok {
		return bad("truncated count")
	}
	var prev []byte
	for i := uint64(0); i < count; i++ {
		shared, ok1 := uv()
		n, ok2 := uv()
		if !ok1 || !ok2 || shared > uint64(len(prev)) || n > uint64(len(p)) {
			return bad("truncated id")
		}
		id := make([]byte, 0, int(shared)+int(n))
		id = append(append(id, prev[:shared]...), p[:n]...)
		p = p[n:]
		if len(p) < 1 {
			return bad("truncated flags")
		}
		flags := p[0]
		p = p[1:]
		e := RunEntry{ID: string(id), Deleted: flags&1 != 0}
		if !e.Deleted {
			l, ok := uv()
			if !ok || len(p) < 16 {
				return bad("truncated entry")
			}
			e.Len = int64(l)
			e.Sum = snapshot.Digest{binary.BigEndian.Uint64(p), binary.BigEndian.Uint64(p[8:])}
			p = p[16:]
		}
		if err := fn(e); err != nil {
			return err
		}
		prev = id
	}
	if len(p) != 0 {
		return bad("trailing bytes")
	}
	return nil
}

// RunReader streams the chunks of one layer's run for a collection, in order.
type RunReader interface {
	// ScanRun calls fn with each chunk of the layer's run, in order, until fn
	// returns false. A layer without a run calls fn never.
	ScanRun(ctx context.Context, dataset string, layer snapshot.Version, collection string, fn func(chunk []byte) bool) error
}

// RunSeeker is a RunReader that can start a layer's run at its chunk from (chunks
// are numbered from 0).
type RunSeeker interface {
	ScanRunFrom(ctx context.Context, ref snapshot.RunRef, from int64, fn func(chunk []byte) bool) error
}

// runIter pulls one layer's entries in order: from a decoded run held by a
// RunCache, or reading and decoding its chunks in the background.
type runIter struct {
	run  *decodedRun // the run decoded, when cached; pos is the next entry
	pos  int
	ch   chan []RunEntry
	errc chan error
	buf  []RunEntry
	err  error
	done bool
}

// chainSource is where chain runs are read from: a store, through a run cache when
// cache is not nil.
type chainSource struct {
	st      RunReader
	cache   *RunCache
	dataset string
}

// chainSource is where the version write reads the parent chain's runs.
func (vw *versionWrite) chainSource() chainSource {
	return chainSource{st: vw.Store, cache: vw.Runs, dataset: vw.dataset}
}

// newRunIter reads the layer's run from src's cache when it is not nil (streaming it
// from the cache's store when it is over the budget), otherwise from its store. A
// reader that needs only the entries after the id after may be given fewer before it:
// a run streamed through the cache starts at the chunk the cache last saw begin at or
// before after, when the store can seek.
func newRunIter(ctx context.Context, src chainSource, layer snapshot.LayerRef, collection, after string) *runIter {
	st, cache, dataset := src.st, src.cache, src.dataset
	var from int64
	if cache != nil {
		r, err := cache.run(ctx, dataset, layer.Version, collection, layer.Docs+layer.Tombstones)
		if err != nil {
			return &runIter{done: true, err: err}
		}
		if r != nil {
			return &runIter{run: r}
		}
		st = cache.st
		if _, ok := st.(RunSeeker); ok && after != "" {
			from = cache.chunkAt(runKey{dataset, layer.Version, collection}, after)
		}
	}
	it := &runIter{ch: make(chan []RunEntry, 2), errc: make(chan error, 1)}
	go func() {
		defer close(it.ch)
		var derr error
		n := from
		scan := func(chunk []byte) bool {
			var es []RunEntry
			if derr = DecodeRunChunk(chunk, func(e RunEntry) error { es = append(es, e); return nil }); derr != nil {
				return false
			}
			if cache != nil && len(es) > 0 {
				cache.sawChunk(runKey{dataset, layer.Version, collection}, n, es[0].ID)
			}
			n++
			select {
			case it.ch <- es:
				return true
			case <-ctx.Done():
				derr = ctx.Err()
				return false
			}
		}
		var err error
		if from > 0 {
			err = st.(RunSeeker).ScanRunFrom(ctx, snapshot.RunRef{Dataset: dataset, Layer: layer.Version, Collection: collection}, from, scan)
		} else {
			err = st.ScanRun(ctx, dataset, layer.Version, collection, scan)
		}
		if err == nil {
			err = derr
		}
		if err != nil {
			err = fmt.Errorf("fingerprints of %s at layer %s: %w", collection, layer.Version, err)
		}
		it.errc <- err
	}()
	return it
}

// Peek returns the next entry without consuming it; ok is false at the end.
func (it *runIter) Peek() (RunEntry, bool, error) {
	if it.run != nil {
		if it.pos < it.run.len() {
			return it.run.at(it.pos), true, nil
		}
		return RunEntry{}, false, nil
	}
	for len(it.buf) == 0 {
		if it.done {
			return RunEntry{}, false, it.err
		}
		es, ok := <-it.ch
		if !ok {
			it.done, it.err = true, <-it.errc
			continue
		}
		it.buf = es
	}
	return it.buf[0], true, nil
}

// Pop consumes the entry Peek returned.
func (it *runIter) Pop() {
	if it.run != nil {
		it.pos++
		return
	}
	it.buf = it.buf[1:]
}

// chainRun merges the runs of a chain's layers (newest first) into the live entries
// of the version (a snapshot.ChainMerge of their runs): per id the newest layer's entry,
// tombstones dropped.
type chainRun struct {
	merge *snapshot.ChainMerge[RunEntry]
	// keepDeleted returns tombstones too (the ids a set of layers names).
	keepDeleted bool
	// from is the index in the chain of the layer the last entry came from.
	from int
}

// openChainRun starts reading every layer's run from src; cancel ctx to stop early.
func openChainRun(ctx context.Context, src chainSource, layers []snapshot.LayerRef, collection string) *chainRun {
	return openChainRunAfter(ctx, src, layers, collection, "")
}

// openChainRunAfter is openChainRun for a reader that needs only the entries after
// the id after: it may skip chunks before it (newRunIter), and still gets every
// entry after it, in order.
func openChainRunAfter(ctx context.Context, src chainSource, layers []snapshot.LayerRef, collection, after string) *chainRun {
	its := make([]snapshot.LayerReader[RunEntry], len(layers))
	for i, l := range layers {
		its[i] = newRunIter(ctx, src, l, collection, after)
	}
	return &chainRun{merge: snapshot.NewChainMerge(its, runEntryID, runEntryDeleted)}
}

func runEntryID(e RunEntry) string    { return e.ID }
func runEntryDeleted(e RunEntry) bool { return e.Deleted }

// next returns the next live entry; ok is false at the end.
func (c *chainRun) next() (RunEntry, bool, error) {
	c.merge.Tombstones = c.keepDeleted
	e, ok, err := c.merge.Next()
	c.from = c.merge.From()
	return e, ok, err
}
