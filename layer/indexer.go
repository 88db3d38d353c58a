package layer

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/snapshot"
)

// indexer writes a layer's index entries beside its documents. A base (or a full
// copy) writes, per index, one entry for each document, sorted and packed in blocks
// once every document is in (packer). A delta writes, for each id
// the layer writes, what its document's values change: a tombstone for each entry
// whose values it no longer holds and an entry for each it now does, its old values
// read from the chain under the layer (what a read sees once the layer is gone). An
// index so costs O(changes) per version, as documents do.
type indexer struct {
	st         Store
	dataset    string
	collection string
	defs       []index.Def
	keys       index.KeySet       // the defs', read once a document
	stored     []string           // where each def's entries are stored (index.Collection)
	under      []snapshot.Version // the chain under the layer; nil for a base
	w          snapshot.DocumentWriter
	pending    []snapshot.Document // written ids and their new bodies (empty: deleted)
	counts     []snapshot.IndexWrite
	// packers hold a base's entries per index, shared by the indexers of its parts
	// (share); nil for a delta.
	packers []*packer
}

// MaxIndexKeyBytes bounds the encoded values of one entry (a row key holds them and
// the id, and Bigtable's row keys hold at most 4 KiB). A document whose indexed values
// take more fails the version, naming it.
const MaxIndexKeyBytes = 2048

// indexBatch is how many ids' old values one read fetches.
const indexBatch = 500

// newIndexer returns an indexer for the collection's indexes, or nil for none.
func newIndexer(vw *versionWrite, w snapshot.DocumentWriter, collection string, under []snapshot.Version) *indexer {
	defs := vw.indexes[collection]
	if len(defs) == 0 {
		return nil
	}
	ix := &indexer{st: vw.Store, dataset: vw.dataset, collection: collection, defs: defs, keys: index.NewKeySet(defs), under: under, w: w}
	for _, d := range defs {
		ix.counts = append(ix.counts, snapshot.IndexWrite{Name: d.Name})
		ix.stored = append(ix.stored, index.Collection(collection, d.Name))
		if len(under) == 0 {
			// The collection's indexes share one budget of memory.
			ix.packers = append(ix.packers, &packer{stored: ix.stored[len(ix.stored)-1], spillAt: spillBytes / len(defs)})
		}
	}
	return ix
}

// share returns an indexer of the same layer for another goroutine: a base's parts
// read in parallel hold their entries in the same packers, which done writes once.
func (ix *indexer) share() *indexer {
	if ix == nil {
		return nil
	}
	c := *ix
	c.counts, c.pending = slices.Clone(ix.counts), nil
	return &c
}

// add records a document, or a tombstone (empty body), the layer writes.
func (ix *indexer) add(ctx context.Context, doc snapshot.Document) error {
	if ix == nil {
		return nil
	}
	if len(ix.under) == 0 {
		return ix.entries(ctx, doc.ID, nil, doc.Body)
	}
	ix.pending = append(ix.pending, doc)
	if len(ix.pending) >= indexBatch {
		return ix.flush(ctx)
	}
	return nil
}

// flush reads the old values of the pending ids and writes what changed.
func (ix *indexer) flush(ctx context.Context) error {
	if ix == nil || len(ix.pending) == 0 {
		return nil
	}
	ids := make([]string, len(ix.pending))
	for i, d := range ix.pending {
		ids[i] = d.ID
	}
	old, err := ix.st.GetDocuments(ctx, snapshot.ChainRef{Dataset: ix.dataset, Chain: ix.under, Collection: ix.collection}, ids)
	if err != nil {
		return fmt.Errorf("read the old values of %s's indexed fields: %w", ix.collection, err)
	}
	for _, d := range ix.pending {
		if err := ix.entries(ctx, d.ID, old[d.ID], d.Body); err != nil {
			return err
		}
	}
	ix.pending = ix.pending[:0]
	return nil
}

// entries writes, for each index, the change from the values of old to those of
// cur (either empty: no document).
func (ix *indexer) entries(ctx context.Context, id string, old, cur []byte) error {
	was, err := ix.keysOf(id, old)
	if err != nil {
		return err
	}
	now, err := ix.keysOf(id, cur)
	if err != nil {
		return err
	}
	if ix.packers != nil {
		for i, p := range ix.packers {
			if now != nil {
				if err := p.add(index.EntryID(now[i], id)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for i := range ix.defs {
		if was != nil && now != nil && bytes.Equal(was[i], now[i]) {
			continue
		}
		c := &ix.counts[i]
		if was != nil {
			c.Removed++
			if err := ix.w.Write(ctx, ix.stored[i], snapshot.Document{ID: index.EntryID(was[i], id)}); err != nil {
				return err
			}
		}
		if now != nil {
			c.Entries++
			e := index.EntryID(now[i], id)
			c.Bytes += int64(len(e) + len(index.EntryBody))
			if err := ix.w.Write(ctx, ix.stored[i], snapshot.Document{ID: e, Body: index.EntryBody}); err != nil {
				return err
			}
		}
	}
	return nil
}

// keysOf returns the values component of a document's entry in each index, or nil
// for no document. A value the field's type cannot hold, or values over
// MaxIndexKeyBytes, fail the version, naming them.
func (ix *indexer) keysOf(id string, body []byte) ([][]byte, error) {
	if len(body) == 0 {
		return nil, nil
	}
	keys, err := ix.keys.Keys(body)
	if err != nil {
		return nil, fmt.Errorf("%w: collection %s id %q: %v", snapshot.ErrSource, ix.collection, truncate(id, 200), err)
	}
	for i, k := range keys {
		if len(k) > MaxIndexKeyBytes {
			return nil, fmt.Errorf("%w: collection %s id %q: index %s: the indexed values take %d bytes, over the limit of %d",
				snapshot.ErrSource, ix.collection, truncate(id, 200), ix.defs[i].Name, len(k), MaxIndexKeyBytes)
		}
	}
	return keys, nil
}

// done flushes what is pending, or writes a base's blocks, and returns what the
// layer wrote per index. Of the indexers a base shares, one calls it.
func (ix *indexer) done(ctx context.Context) ([]snapshot.IndexWrite, error) {
	if ix == nil {
		return nil, nil
	}
	for i, p := range ix.packers {
		out, err := p.write(ctx, ix.w)
		if err != nil {
			return nil, err
		}
		ix.counts[i] = snapshot.IndexWrite{Name: ix.defs[i].Name, Entries: p.entries, Bytes: out.bytes, Packed: true, Blocks: out.blocks, Chunks: out.chunks}
	}
	if err := ix.flush(ctx); err != nil {
		return nil, err
	}
	return slices.Clone(ix.counts), nil
}

// indexesWritten returns a layer's index writes with the cells and directory chunks
// storage acknowledged for each: written and chunks hold them per collection,
// indexes' included.
func indexesWritten(collection string, iws []snapshot.IndexWrite, written, chunks map[string]int64) []snapshot.IndexWrite {
	out := slices.Clone(iws)
	for i := range out {
		stored := index.Collection(collection, out[i].Name)
		out[i].Written, out[i].ChunksWritten = written[stored], chunks[stored]
	}
	return out
}

// indexesSealed reports whether every cell a layer queued for its indexes (blocks, or
// entries and tombstones) was acknowledged.
func indexesSealed(iws []snapshot.IndexWrite) bool {
	for _, iw := range iws {
		if !iw.Acknowledged() {
			return false
		}
	}
	return true
}

// readIndexes returns the indexes each collection declares in the snapshot, typed
// (index.TypeFor); a field whose type no index can order fails the version, naming
// it.
func readIndexes(ctx context.Context, snap snapshot.SourceSnapshot, collections []string) (map[string][]index.Def, map[string][]snapshot.IndexDef, error) {
	is, ok := snap.(snapshot.IndexedSnapshot)
	if !ok {
		return nil, nil, nil
	}
	defs, declared := map[string][]index.Def{}, map[string][]snapshot.IndexDef{}
	for _, name := range collections {
		ds, err := is.Indexes(ctx, name)
		if err != nil {
			return nil, nil, err
		}
		for _, d := range ds {
			def, err := index.Typed(d)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: collection %s: %v", snapshot.ErrSource, name, err)
			}
			defs[name] = append(defs[name], def)
		}
		declared[name] = ds
	}
	return defs, declared, nil
}

// sameIndexes reports whether a version with indexes now can be a delta over a
// parent with indexes was: every index now was in the parent, with the same types.
func sameIndexes(was, now []snapshot.IndexDef) bool {
	for _, n := range now {
		if !slices.ContainsFunc(was, func(w snapshot.IndexDef) bool {
			return w.Name == n.Name && slices.Equal(w.Fields, n.Fields) && slices.Equal(w.Types, n.Types)
		}) {
			return false
		}
	}
	return true
}
