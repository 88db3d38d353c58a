package store

import (
	"context"
	"fmt"

	"cloud.google.com/go/bigtable"

	"github.com/snapflip/snapflip/snapshot"
)

// colDoc is the column d:v holding a document's JSON.
const colDoc = "v"

// GetDocument returns one document of a version, or ErrNotFound.
func (s *Store) GetDocument(ctx context.Context, dataset string, v snapshot.Version, collection, id string) ([]byte, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	// A document row holds only d:v, newest cell first: no filter is needed, and
	// none makes the read cheaper for Bigtable.
	row, err := s.tbl.ReadRow(ctx, docKey(dataset, v, collection, id))
	if err != nil {
		return nil, s.wrap(err, "read %s/%q at %s", collection, id, v)
	}
	cells := row[famDocs]
	if len(cells) == 0 {
		return nil, fmt.Errorf("collection %s id %q at %s: %w", collection, id, v, snapshot.ErrNotFound)
	}
	return cells[0].Value, nil
}

// ScanDocuments calls fn with every document of one collection of a version, in id
// order, until fn returns false. A whole collection takes as long as it takes, so the
// scan is bounded by its progress instead: it fails when no row arrives for OpTimeout
// (the client would otherwise retry an unreachable Bigtable until ctx ends).
func (s *Store) ScanDocuments(ctx context.Context, dataset string, v snapshot.Version, collection string, fn func(snapshot.Document) bool) error {
	prefix := docPrefix(dataset, v, collection)
	what := fmt.Sprintf("scan %s at %s", collection, v)
	g := s.guardStall(ctx)
	err := s.readDocs(g.ctx, prefix, bigtable.PrefixRange(prefix), func(d snapshot.Document) bool {
		g.pause()
		defer g.resume()
		return fn(d)
	}, what, bigtable.RowFilter(column(famDocs, colDoc)))
	if stalled := g.stop(); stalled != nil && err != nil {
		return s.wrap(stalled, "%s", what)
	}
	return err
}

// readDocs reads the document rows of rows, all under prefix, in key order, calling fn
// with each document until it returns false. A read error is wrapped with what; a row
// key that does not decode stops the read with its own error.
func (s *Store) readDocs(ctx context.Context, prefix string, rows bigtable.RowSet, fn func(snapshot.Document) bool,
	what string, opts ...bigtable.ReadOption) error {
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
		return s.wrap(err, "%s", what)
	}
	return derr
}

// RefreshVersion rewrites every document of the version's collections with a fresh
// cell timestamp, through the same batched writer as a sync, so that TTL GC does not
// collect a version that is still served (a pinned one). Reads see the same bytes
// throughout: each row's new cell replaces its old one in one mutation.
func (s *Store) RefreshVersion(ctx context.Context, dataset string, v snapshot.Version, collections []string) (int64, error) {
	w := s.NewWriter(ctx, dataset, v)
	var werr error
	for _, c := range collections {
		err := s.ScanDocuments(ctx, dataset, v, c, func(d snapshot.Document) bool {
			werr = w.Write(ctx, c, d)
			return werr == nil
		})
		if err == nil {
			err = werr
		}
		if err != nil {
			_, _ = w.Close(ctx)
			return 0, err
		}
	}
	counts, err := w.Close(ctx)
	var n int64
	for _, c := range counts {
		n += c
	}
	return n, err
}

// GetDocuments returns the documents of the given ids at a version, in one read; ids
// that have no document are absent from the map.
func (s *Store) GetDocuments(ctx context.Context, dataset string, v snapshot.Version, collection string, ids []string) (map[string][]byte, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	prefix := docPrefix(dataset, v, collection)
	keys := make(bigtable.RowList, len(ids))
	for i, id := range ids {
		keys[i] = prefix + escapeComponent(id)
	}
	out := make(map[string][]byte, len(ids))
	err := s.readDocs(ctx, prefix, keys, func(d snapshot.Document) bool {
		out[d.ID] = d.Body
		return true
	}, fmt.Sprintf("read %d documents of %s at %s", len(ids), collection, v))
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ScanPage returns up to limit documents of a collection at a version whose ids sort
// after after ("" for the first page), in id order, and whether more follow.
func (s *Store) ScanPage(ctx context.Context, dataset string, v snapshot.Version, collection, after string, limit int) ([]snapshot.Document, bool, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	prefix := docPrefix(dataset, v, collection)
	rng := bigtable.PrefixRange(prefix)
	if after != "" {
		// The smallest key greater than every key of after: escaped ids never hold
		// 0x00, so after's key plus 0x00 sorts between it and the next id.
		rng = bigtable.NewRange(prefix+escapeComponent(after)+"\x00", prefixEnd(prefix))
	}
	var docs []snapshot.Document
	err := s.readDocs(ctx, prefix, rng, func(d snapshot.Document) bool {
		docs = append(docs, d)
		return true
	}, fmt.Sprintf("scan %s at %s", collection, v), bigtable.RowFilter(column(famDocs, colDoc)), bigtable.LimitRows(int64(limit+1)))
	if err != nil {
		return nil, false, err
	}
	more := len(docs) > limit
	if more {
		docs = docs[:limit]
	}
	return docs, more, nil
}

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
