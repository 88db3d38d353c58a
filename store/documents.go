package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"cloud.google.com/go/bigtable"
	"golang.org/x/sync/errgroup"

	"github.com/snapflip/snapflip/snapshot"
)

// colDoc is the column d:v holding a document's JSON. An empty value is a tombstone:
// the id is deleted in that layer (every document is a JSON object, never empty).
// Tombstones share the column so that every read that filters on it still sees them
// and never resurrects a deleted row from an older layer.
const colDoc = "v"

// Reads take a chain: the versions (layers) whose rows hold the collection, newest
// first; a full copy's chain is the version alone. For each id the newest layer that
// has a row wins, and a tombstone there means the id is absent.

// GetDocument returns one document through a chain, or ErrNotFound.
func (s *Store) GetDocument(ctx context.Context, in snapshot.ChainRef, id string) ([]byte, error) {
	dataset, chain, collection := in.Dataset, in.Chain, in.Collection
	if len(chain) != 1 {
		got, err := s.GetDocuments(ctx, in, []string{id})
		if err != nil {
			return nil, err
		}
		body, ok := got[id]
		if !ok {
			return nil, fmt.Errorf("collection %s id %q at %s: %w", collection, id, chainName(chain), snapshot.ErrNotFound)
		}
		return body, nil
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	v := chain[0]
	// A document row holds only d:v, newest cell first: no filter is needed, and
	// none makes the read cheaper for Bigtable.
	row, err := s.tbl.ReadRow(ctx, docKey(dataset, v, collection, id))
	if err != nil {
		return nil, s.wrap(err, "read %s/%q at %s", collection, id, v)
	}
	cells := row[famDocs]
	if len(cells) == 0 || len(cells[0].Value) == 0 {
		return nil, fmt.Errorf("collection %s id %q at %s: %w", collection, id, v, snapshot.ErrNotFound)
	}
	return cells[0].Value, nil
}

// GetDocuments returns the documents of the given ids through a chain, in one read
// (every layer's key of every id in one row list); ids that have no document are
// absent from the map.
func (s *Store) GetDocuments(ctx context.Context, in snapshot.ChainRef, ids []string) (map[string][]byte, error) {
	found, err := s.LocateDocuments(ctx, in, ids)
	if err != nil {
		return nil, err
	}
	return snapshot.Bodies(found), nil
}

// LocateDocuments is GetDocuments that also says which layer of the chain (its index,
// newest first) each document was read from.
func (s *Store) LocateDocuments(ctx context.Context, in snapshot.ChainRef, ids []string) (map[string]snapshot.Located, error) {
	dataset, chain, collection := in.Dataset, in.Chain, in.Collection
	ctx, cancel := s.op(ctx)
	defer cancel()
	prefixes := make([]string, len(chain))
	for i, v := range chain {
		prefixes[i] = docPrefix(dataset, v, collection)
	}
	keys := make(bigtable.RowList, 0, len(ids)*len(chain))
	for _, id := range ids {
		e := escapeComponent(id)
		for _, p := range prefixes {
			keys = append(keys, p+e)
		}
	}
	found := make(map[string]snapshot.Located, len(ids))
	var derr error
	err := s.tbl.ReadRows(ctx, keys, func(r bigtable.Row) bool {
		rank, id, err := layerOf(prefixes, r.Key())
		if err != nil {
			derr = err
			return false
		}
		cells := r[famDocs]
		if len(cells) == 0 {
			return true
		}
		if h, ok := found[id]; !ok || rank < h.Layer {
			found[id] = snapshot.Located{Body: cells[0].Value, Layer: rank}
		}
		return true
	})
	if err != nil {
		return nil, s.wrap(err, "read %d documents of %s at %s", len(ids), collection, chainName(chain))
	}
	if derr != nil {
		return nil, derr
	}
	maps.DeleteFunc(found, func(_ string, d snapshot.Located) bool { return len(d.Body) == 0 }) // tombstones
	return found, nil
}

// layerOf returns which prefix a row key is under (its rank in the chain) and the id.
func layerOf(prefixes []string, key string) (int, string, error) {
	for i, p := range prefixes {
		if strings.HasPrefix(key, p) {
			id, err := unescapeComponent(key[len(p):])
			return i, id, err
		}
	}
	return 0, "", fmt.Errorf("%w row key %q is under none of the chain's layers", snapshot.ErrInvalid, key)
}

func chainName(chain []snapshot.Version) string {
	switch len(chain) {
	case 0:
		return "no layer"
	case 1:
		return string(chain[0])
	}
	return fmt.Sprintf("%s (a chain of %d layers)", chain[0], len(chain))
}

// ScanDocuments calls fn with every document of one collection through a chain, in
// id order, until fn returns false. A whole collection takes as long as it takes, so
// the scan is bounded by its progress instead: it fails when no row arrives for
// OpTimeout (the client would otherwise retry an unreachable Bigtable until ctx ends).
// A chain of several layers is read with one scan per layer, merged.
func (s *Store) ScanDocuments(ctx context.Context, in snapshot.ChainRef, fn func(snapshot.Document) bool) error {
	return s.scanChain(ctx, in, s.scanLayer, fn)
}

// layerScan scans one layer of a collection whole (scanLayer, scanLayerEntries).
type layerScan func(ctx context.Context, dataset string, v snapshot.Version, collection string, fn func(snapshot.Document) bool) error

// scanChain is ScanDocuments with each layer scanned by scan.
func (s *Store) scanChain(ctx context.Context, c snapshot.ChainRef, scan layerScan, fn func(snapshot.Document) bool) error {
	dataset, chain, collection := c.Dataset, c.Chain, c.Collection
	if len(chain) == 1 {
		return scan(ctx, dataset, chain[0], collection, func(d snapshot.Document) bool {
			if isTombstone(d) {
				return true
			}
			return fn(d)
		})
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	var failed atomic.Bool
	layers := make([]snapshot.LayerReader[snapshot.Document], len(chain))
	for i, v := range chain {
		l := &layerStream{ch: make(chan snapshot.Document, 256)}
		layers[i] = l
		g.Go(func() error {
			err := scan(gctx, dataset, v, collection, func(d snapshot.Document) bool {
				select {
				case l.ch <- d:
					return true
				case <-gctx.Done():
					return false
				}
			})
			if err != nil {
				l.err = err
				failed.Store(true) // before close: the merge sees it when it sees the end
			}
			close(l.ch)
			return err
		})
	}
	merge := snapshot.NewChainMerge(layers, docID, isTombstone)
	for {
		d, ok, err := merge.Next()
		if err != nil && !failed.Load() { // ids out of order, though every layer read
			cancel()
			_ = g.Wait()
			return fmt.Errorf("scan %s at %s: %w", collection, chainName(chain), err)
		}
		if err != nil || !ok || failed.Load() || gctx.Err() != nil {
			break // the end, or a layer failed: what is merged from here on is wrong
		}
		if !fn(d) {
			cancel() // the caller has what it wanted; the layers' reads end cancelled
			_ = g.Wait()
			return nil
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	// A layer whose send ended with ctx stops its read without an error: say why the
	// scan is short.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("scan %s at %s: %w", collection, chainName(chain), context.Cause(ctx))
	}
	return nil
}

// layerStream is one layer's rows as its scan sends them, for a chain's merge.
type layerStream struct {
	ch   chan snapshot.Document
	err  error // why the scan ended early, set before ch is closed
	head snapshot.Document
	has  bool // head holds the next row
	done bool // ch is closed
}

// Peek returns the layer's next row, waiting for it; at the end, the scan's error.
func (l *layerStream) Peek() (snapshot.Document, bool, error) {
	if !l.has && !l.done {
		l.head, l.has = <-l.ch
		l.done = !l.has
	}
	if l.done {
		return snapshot.Document{}, false, l.err
	}
	return l.head, true, nil
}

// Pop consumes the row Peek returned.
func (l *layerStream) Pop() { l.has = false }

// docID and isTombstone are what a chain's merge needs of a row: an empty body is a
// tombstone (colDoc).
func docID(d snapshot.Document) string     { return d.ID }
func isTombstone(d snapshot.Document) bool { return len(d.Body) == 0 }

// scanLayer reads one layer's rows of a collection, tombstones included.
func (s *Store) scanLayer(ctx context.Context, dataset string, v snapshot.Version, collection string, fn func(snapshot.Document) bool) error {
	l := layerColl{dataset, v, collection}
	g := s.guardStall(ctx)
	err := s.readDocs(g.ctx, l, bigtable.PrefixRange(l.prefix()), 0, func(d snapshot.Document) bool {
		g.pause()
		defer g.resume()
		return fn(d)
	})
	if stalled := g.stop(); stalled != nil && err != nil {
		return s.wrap(stalled, "%s", l.what())
	}
	return err
}

// readDocs reads the document rows of rows, all of layer l, in key order, up to limit
// of them (0: all), calling fn with each document (an empty body for a tombstone)
// until it returns false. A read error says what was read; a row key that does not
// decode stops the read with its own error.
func (s *Store) readDocs(ctx context.Context, l layerColl, rows bigtable.RowSet, limit int64, fn func(snapshot.Document) bool) error {
	prefix := l.prefix()
	opts := []bigtable.ReadOption{bigtable.RowFilter(column(famDocs, colDoc))}
	if limit > 0 {
		opts = append(opts, bigtable.LimitRows(limit))
	}
	var derr error
	err := s.tbl.ReadRows(ctx, rows, func(r bigtable.Row) bool {
		id, err := idFromDocKey(prefix, r.Key())
		if err != nil {
			derr = err
			return false
		}
		if cells := r[famDocs]; len(cells) > 0 {
			return fn(snapshot.Document{ID: id, Body: cells[0].Value})
		}
		return true
	}, opts...)
	if err != nil {
		return s.wrap(err, "%s", l.what())
	}
	return derr
}

// RefreshVersion rewrites every row of the given layers (documents, tombstones and
// fingerprint runs of each collection in its chain) with a fresh cell timestamp,
// through the same batched writer as a sync, so that TTL GC does not collect a version
// that is still served (a pinned one). Reads see the same bytes throughout: each
// row's new cell replaces its old one in one mutation. A layer shared by several
// collections' chains is rewritten once per collection it holds. It returns the
// number of documents and tombstones rewritten.
func (s *Store) RefreshVersion(ctx context.Context, dataset string, chains map[string][]snapshot.Version) (int64, error) {
	byLayer := map[snapshot.Version][]string{}
	var order []snapshot.Version
	for c, chain := range chains {
		for _, v := range chain {
			if _, ok := byLayer[v]; !ok {
				order = append(order, v)
			}
			byLayer[v] = append(byLayer[v], c)
		}
	}
	var n int64
	for _, v := range order {
		w := s.NewWriter(ctx, dataset, v)
		var werr error
		for _, c := range byLayer[v] {
			err := s.scanLayer(ctx, dataset, v, c, func(d snapshot.Document) bool {
				werr = w.Write(ctx, c, d)
				return werr == nil
			})
			if err == nil {
				err = werr
			}
			var chunk int64
			if err == nil {
				err = s.ScanRun(ctx, dataset, v, c, func(data []byte) bool {
					werr = w.WriteChunk(ctx, c, chunk, data)
					chunk++
					return werr == nil
				})
			}
			if err == nil {
				err = werr
			}
			if err == nil {
				var live int64
				var ok bool
				if live, ok, err = s.RecordedLive(ctx, dataset, v, c); err == nil && ok {
					err = w.WriteLive(ctx, c, live)
				}
			}
			if err != nil {
				_, _ = w.Close(ctx)
				return n, err
			}
		}
		counts, err := w.Close(ctx)
		for _, c := range counts {
			n += c
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// ScanPage returns up to limit documents of a collection through a chain whose ids
// sort after after ("" for the first page), in id order, and whether more follow. A
// chain of several layers is read in rounds: each layer's next rows in parallel, as
// many as the page still needs, merged; an id is final once every layer that may
// hold more rows has been read past it, and a round that ends short (tombstones,
// shadowed rows) reads on from there with a larger limit.
func (s *Store) ScanPage(ctx context.Context, in snapshot.ChainRef, after string, limit int) ([]snapshot.Document, bool, error) {
	return s.ScanSpan(ctx, in, snapshot.Span{From: after, Inclusive: after == ""}, limit)
}

// rowRange returns the row keys of the span's ids under a collection's prefix. Escaping
// keeps id order, and an id's key is the prefix and its escaped id alone, so a key
// sorts at or after prefix+escape(From) exactly when its id sorts at or after From.
func rowRange(sp snapshot.Span, prefix string) bigtable.RowRange {
	lo, hi := prefix+escapeComponent(sp.From), prefixEnd(prefix)
	if !sp.Inclusive {
		// The smallest key greater than every key of From: escaped ids never hold
		// 0x00, so From's key plus 0x00 sorts between it and the next id.
		lo += "\x00"
	}
	if sp.To != "" {
		hi = prefix + escapeComponent(sp.To)
	}
	return bigtable.NewRange(lo, hi)
}

// ScanSpan is ScanPage over the ids of span: up to limit documents whose ids are in
// it, in id order, and whether more of the span's follow.
func (s *Store) ScanSpan(ctx context.Context, in snapshot.ChainRef, span snapshot.Span, limit int) ([]snapshot.Document, bool, error) {
	return s.scanSpan(ctx, in, span, limit, s.readRange)
}

// layerColl is a collection of a dataset in one layer.
type layerColl struct {
	dataset    string
	v          snapshot.Version
	collection string
}

func (l layerColl) prefix() string { return docPrefix(l.dataset, l.v, l.collection) }
func (l layerColl) what() string   { return fmt.Sprintf("scan %s at %s", l.collection, l.v) }

// layerRange reads up to n rows of one layer whose ids are in span, tombstones
// included.
type layerRange func(ctx context.Context, l layerColl, span snapshot.Span, n int) ([]snapshot.Document, error)

// scanSpan is ScanSpan with each layer's rows read by read.
func (s *Store) scanSpan(ctx context.Context, c snapshot.ChainRef, span snapshot.Span, limit int, read layerRange) ([]snapshot.Document, bool, error) {
	dataset, chain, collection := c.Dataset, c.Chain, c.Collection
	if err := CheckScanLimit(collection, limit); err != nil {
		return nil, false, err
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	if span.Empty() {
		return nil, false, nil
	}
	if len(chain) == 1 && limit < maxDirectPage {
		// One layer (a full copy or a base): one read, no merge.
		// Tombstones are not expected there; one would only shorten the page, so the
		// merged rounds below handle it.
		got, err := read(ctx, layerColl{dataset, chain[0], collection}, span, limit+1)
		if err != nil {
			return nil, false, err
		}
		if !slices.ContainsFunc(got, isTombstone) {
			if len(got) > limit {
				return got[:limit], true, nil
			}
			return got, false, nil
		}
	}
	var docs []snapshot.Document
	n := limit + 1
	for {
		type layerRead struct {
			docs  []snapshot.Document
			short bool // the layer has no more rows after these
		}
		reads := make([]layerRead, len(chain))
		g, gctx := errgroup.WithContext(ctx)
		for i, v := range chain {
			g.Go(func() error {
				got, err := read(gctx, layerColl{dataset, v, collection}, span, n)
				reads[i] = layerRead{got, len(got) < n}
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return nil, false, err
		}
		// Every id up to bound is final: each layer still holding rows was read past it.
		bound, bounded := "", false
		for _, r := range reads {
			if !r.short {
				last := r.docs[len(r.docs)-1].ID
				if !bounded || last < bound {
					bound, bounded = last, true
				}
			}
		}
		layers := make([]snapshot.LayerReader[snapshot.Document], len(chain))
		for i, r := range reads {
			l := snapshot.LayerSlice[snapshot.Document](r.docs)
			if bounded {
				l = l[:sort.Search(len(l), func(j int) bool { return l[j].ID > bound })]
			}
			layers[i] = &l
		}
		merge := snapshot.NewChainMerge(layers, docID, isTombstone)
		for len(docs) <= limit {
			d, ok, err := merge.Next()
			if err != nil {
				return nil, false, fmt.Errorf("scan %s at %s: %w", collection, chainName(chain), err)
			}
			if !ok {
				break
			}
			docs = append(docs, d)
		}
		if len(docs) > limit {
			return docs[:limit], true, nil
		}
		if !bounded {
			return docs, false, nil
		}
		span = span.After(bound)
		n = min(n*4, 10_000)
	}
}

// readRange reads up to n rows of one layer whose ids are in span, tombstones
// included.
func (s *Store) readRange(ctx context.Context, l layerColl, span snapshot.Span, n int) ([]snapshot.Document, error) {
	prefix := l.prefix()
	rng := rowRange(span, prefix)
	var docs []snapshot.Document
	err := s.readDocs(ctx, l, rng, int64(n), func(d snapshot.Document) bool {
		docs = append(docs, d)
		return true
	})
	return docs, err
}

// MaxScanLimit is the most rows one scan of a span may ask for: far above any page,
// and low enough that the reads' arithmetic on it (a row more, reads that grow
// fourfold) cannot overflow.
const MaxScanLimit = 1 << 24

// CheckScanLimit refuses a scan limit that is negative or over MaxScanLimit, with
// ErrInvalid naming the collection (the in-memory store refuses the same).
func CheckScanLimit(collection string, limit int) error {
	if limit < 0 || limit > MaxScanLimit {
		return fmt.Errorf("%w scan of %s: limit %d must be within 0..%d", snapshot.ErrInvalid, collection, limit, MaxScanLimit)
	}
	return nil
}

// maxDirectPage bounds the pages read directly from a one-layer chain (limit+1 rows
// must fit in one read).
const maxDirectPage = 10_000

// prefixEnd returns the first key after every key with the prefix.
func prefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return ""
}
