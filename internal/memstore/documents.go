package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// layerKey names one collection of a dataset in one layer.
type layerKey struct {
	dataset    string
	v          snapshot.Version
	collection string
}

// layerRows is what a layer holds of a collection: documents (an empty body is a
// tombstone), the chunks of its fingerprint run, and the live count recorded beside
// them.
type layerRows struct {
	docs map[string][]byte
	run  map[int64][]byte
	live *int64
}

// rows returns the layer's rows of a collection, made when absent; the caller holds
// mu.
func (s *Store) rows(k layerKey) *layerRows {
	l := s.layers[k]
	if l == nil {
		l = &layerRows{docs: map[string][]byte{}, run: map[int64][]byte{}}
		s.layers[k] = l
	}
	return l
}

// merged returns the documents of a collection through a chain (newest layer first),
// in id order: per id the newest layer's row, tombstones dropped, merged by the
// layer engine's ChainMerge as Bigtable's store merges them. entries reads an
// index's rows, each block as its entries.
func (s *Store) merged(ctx context.Context, in snapshot.ChainRef, entries bool) ([]snapshot.Document, error) {
	dataset, chain, collection := in.Dataset, in.Chain, in.Collection
	unlock, err := s.read(ctx)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", collection, err)
	}
	defer unlock()
	layers := make([]snapshot.LayerReader[snapshot.Document], len(chain))
	for i, v := range chain {
		var docs snapshot.LayerSlice[snapshot.Document]
		if l := s.layers[layerKey{dataset, v, collection}]; l != nil {
			for id, body := range l.docs {
				rows, err := expand(id, body, entries)
				if err != nil {
					return nil, fmt.Errorf("scan %s: %w", collection, err)
				}
				docs = append(docs, rows...)
			}
			slices.SortFunc(docs, func(a, b snapshot.Document) int { return strings.Compare(a.ID, b.ID) })
		}
		layers[i] = &docs
	}
	merge := snapshot.NewChainMerge(layers, func(d snapshot.Document) string { return d.ID },
		func(d snapshot.Document) bool { return len(d.Body) == 0 })
	var out []snapshot.Document
	for {
		d, ok, err := merge.Next()
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", collection, err)
		}
		if !ok {
			return out, nil
		}
		out = append(out, snapshot.Document{ID: d.ID, Body: clone(d.Body)})
	}
}

// expand returns a row as documents: itself, or an index block's entries; a block
// that does not decode is an error, as in Bigtable's store.
func expand(id string, body []byte, entries bool) ([]snapshot.Document, error) {
	if !entries || !index.IsBlock(body) {
		return []snapshot.Document{{ID: id, Body: body}}, nil
	}
	es, err := index.BlockEntriesOf(body)
	if err != nil {
		return nil, fmt.Errorf("block %q: %w", snapshot.Truncate(id, 200), err)
	}
	out := make([]snapshot.Document, len(es))
	for i, e := range es {
		out[i] = snapshot.Document{ID: e, Body: index.EntryBody}
	}
	return out, nil
}

// GetDocument returns one document through a chain, or ErrNotFound.
func (s *Store) GetDocument(ctx context.Context, in snapshot.ChainRef, id string) ([]byte, error) {
	chain, collection := in.Chain, in.Collection
	got, err := s.GetDocuments(ctx, in, []string{id})
	if err != nil {
		return nil, err
	}
	body, ok := got[id]
	if !ok {
		return nil, fmt.Errorf("collection %s id %q at %v: %w", collection, id, chain, snapshot.ErrNotFound)
	}
	return body, nil
}

// GetDocuments returns the documents of ids found through a chain; missing ids are
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
	unlock, err := s.read(ctx)
	if err != nil {
		return nil, fmt.Errorf("read %d documents of %s: %w", len(ids), collection, err)
	}
	defer unlock()
	found := make(map[string]snapshot.Located, len(ids))
	for _, id := range ids {
		for rank, v := range chain {
			l := s.layers[layerKey{dataset, v, collection}]
			if body, ok := l.doc(id); ok {
				if len(body) > 0 {
					found[id] = snapshot.Located{Body: clone(body), Layer: rank}
				}
				break
			}
		}
	}
	return found, nil
}

func (l *layerRows) doc(id string) ([]byte, bool) {
	if l == nil {
		return nil, false
	}
	body, ok := l.docs[id]
	return body, ok
}

// ScanDocuments calls fn with every document of a collection through a chain, in id
// order, until fn returns false.
func (s *Store) ScanDocuments(ctx context.Context, in snapshot.ChainRef, fn func(snapshot.Document) bool) error {
	docs, err := s.merged(ctx, in, false)
	for _, d := range docs {
		if !fn(d) {
			break
		}
	}
	return err
}

// ScanIndex calls fn with every entry of an index through a chain, in order, until
// fn returns false.
func (s *Store) ScanIndex(ctx context.Context, in snapshot.ChainRef, fn func(entry string) bool) error {
	docs, err := s.merged(ctx, in, true)
	for _, d := range docs {
		if !fn(d.ID) {
			break
		}
	}
	return err
}

// ScanPage returns up to limit documents through a chain whose ids sort after after
// ("" for the first page), in id order, and whether more follow.
func (s *Store) ScanPage(ctx context.Context, in snapshot.ChainRef, after string, limit int) ([]snapshot.Document, bool, error) {
	return s.ScanSpan(ctx, in, snapshot.Span{From: after, Inclusive: after == ""}, limit)
}

// ScanSpan returns up to limit documents whose ids are in span, in id order, and
// whether more of the span's follow.
func (s *Store) ScanSpan(ctx context.Context, in snapshot.ChainRef, span snapshot.Span, limit int) ([]snapshot.Document, bool, error) {
	return s.scan(ctx, in, span, limit, false)
}

// ScanEntries is ScanSpan over an index's entries, each with index.EntryBody.
func (s *Store) ScanEntries(ctx context.Context, in snapshot.ChainRef, span snapshot.Span, limit int) ([]snapshot.Document, bool, error) {
	return s.scan(ctx, in, span, limit, true)
}

// scan is ScanSpan, of the entries when entries is set.
func (s *Store) scan(ctx context.Context, in snapshot.ChainRef, span snapshot.Span, limit int, entries bool) ([]snapshot.Document, bool, error) {
	if err := store.CheckScanLimit(in.Collection, limit); err != nil {
		return nil, false, err
	}
	docs, err := s.merged(ctx, in, entries)
	if err != nil {
		return nil, false, err
	}
	docs = inSpan(docs, span)
	if len(docs) > limit {
		return docs[:limit], true, nil
	}
	return docs, false, nil
}

// inSpan returns the documents of docs (in id order) whose ids are in span.
func inSpan(docs []snapshot.Document, span snapshot.Span) []snapshot.Document {
	if span.Empty() {
		return nil
	}
	i := sort.Search(len(docs), func(i int) bool {
		id := docs[i].ID
		return id > span.From || (span.Inclusive && id == span.From)
	})
	j := i
	for j < len(docs) && span.Contains(docs[j].ID) {
		j++
	}
	return docs[i:j]
}

// RecordedLive returns how many live ids the chain the layer tops holds, as the
// publish that wrote it recorded; false when none did.
func (s *Store) RecordedLive(ctx context.Context, dataset string, v snapshot.Version, collection string) (int64, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.layers[layerKey{dataset, v, collection}]; l != nil && l.live != nil {
		return *l.live, true, nil
	}
	return 0, false, nil
}

// ScanRun calls fn with each chunk of a layer's fingerprint run, in order, until fn
// returns false.
func (s *Store) ScanRun(ctx context.Context, dataset string, v snapshot.Version, collection string, fn func(chunk []byte) bool) error {
	return s.ScanRunFrom(ctx, snapshot.RunRef{Dataset: dataset, Layer: v, Collection: collection}, 0, fn)
}

// ScanRunFrom is ScanRun from the run's chunk from on.
func (s *Store) ScanRunFrom(ctx context.Context, ref snapshot.RunRef, from int64, fn func(chunk []byte) bool) error {
	dataset, v, collection := ref.Dataset, ref.Layer, ref.Collection
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	var chunks [][]byte
	if l := s.layers[layerKey{dataset, v, collection}]; l != nil {
		ns := slices.Sorted(maps.Keys(l.run))
		for _, n := range ns {
			if n >= from {
				chunks = append(chunks, clone(l.run[n]))
			}
		}
	}
	s.mu.Unlock()
	for _, c := range chunks {
		if !fn(c) {
			break
		}
	}
	return nil
}

// RefreshVersion counts the documents and tombstones of the given chains' layers, as
// Bigtable's store rewrites them with a fresh timestamp: memory never ages out.
func (s *Store) RefreshVersion(ctx context.Context, dataset string, chains map[string][]snapshot.Version) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	done := map[layerKey]bool{}
	var n int64
	for c, chain := range chains {
		for _, v := range chain {
			k := layerKey{dataset, v, c}
			if l := s.layers[k]; l != nil && !done[k] {
				done[k] = true
				n += int64(len(l.docs))
			}
		}
	}
	return n, nil
}
