package store

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"cloud.google.com/go/bigtable"

	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/snapshot"
)

// An index's entries are rows of the collection index.Collection names, read
// through a chain as documents are; a packed base holds them in blocks, found
// through the layer's directory.

// ScanEntries is ScanSpan over an index's entries (index.Collection), whose base
// layer packs them in blocks (index.IsBlock): up to limit entries in span, in order,
// each with index.EntryBody, and whether more of the span's follow.
func (s *Store) ScanEntries(ctx context.Context, in snapshot.ChainRef, span snapshot.Span, limit int) ([]snapshot.Document, bool, error) {
	if len(in.Chain) == 0 {
		return nil, false, nil // no layer holds an entry
	}
	base := in.Chain[len(in.Chain)-1]
	return s.scanSpan(ctx, in, span, limit, func(ctx context.Context, l layerColl, span snapshot.Span, n int) ([]snapshot.Document, error) {
		return s.readEntries(ctx, l, span, n, l.v == base)
	})
}

// ScanIndex calls fn with every entry of an index through a chain, in order, until fn
// returns false. Like ScanDocuments it reads each layer in one scan, merged, and is
// bounded by its progress; a packed layer's blocks are read as their entries.
func (s *Store) ScanIndex(ctx context.Context, in snapshot.ChainRef, fn func(entry string) bool) error {
	return s.scanChain(ctx, in, s.scanLayerEntries, func(d snapshot.Document) bool { return fn(d.ID) })
}

// scanLayerEntries is scanLayer over an index's layer, each block read as its entries.
func (s *Store) scanLayerEntries(ctx context.Context, dataset string, v snapshot.Version, collection string, fn func(snapshot.Document) bool) error {
	what := layerColl{dataset, v, collection}.what()
	var derr error
	err := s.scanLayer(ctx, dataset, v, collection, func(d snapshot.Document) bool {
		var more bool
		more, derr = eachEntry(d, what, fn)
		return more
	})
	if err == nil {
		err = derr
	}
	return err
}

// eachEntry calls fn with an index's row d, or with each entry (index.EntryBody) of
// d when it is a block, until fn returns false; it reports whether fn wants more. A
// block that does not decode is an error naming it.
func eachEntry(d snapshot.Document, what string, fn func(snapshot.Document) bool) (bool, error) {
	if !index.IsBlock(d.Body) {
		return fn(d), nil
	}
	entries, err := index.BlockEntriesOf(d.Body)
	if err != nil {
		return false, fmt.Errorf("%s: block %q: %w", what, snapshot.Truncate(d.ID, 200), err)
	}
	for _, e := range entries {
		if !fn(snapshot.Document{ID: e, Body: index.EntryBody}) {
			return false, nil
		}
	}
	return true, nil
}

// entryPage gathers up to n entries of a span, in order, from rows read past its
// start: done once it holds n or meets an entry at or past the span's end.
type entryPage struct {
	span snapshot.Span
	n    int
	out  []snapshot.Document
	done bool
}

// keep takes one entry read; false when the page is done.
func (p *entryPage) keep(d snapshot.Document) bool {
	if p.span.To != "" && d.ID >= p.span.To {
		p.done = true
	} else if p.span.Contains(d.ID) {
		p.out = append(p.out, d)
		p.done = len(p.out) == p.n
	}
	return !p.done
}

// readEntries reads up to n entries (and tombstones) of one layer of an index whose
// ids are in span. A packed layer's block is keyed by its last entry, so the blocks
// holding the span's entries are the rows from its start up to the first whose key
// reaches its end: the read is not bounded by the span's end but stops there. packed
// says the layer is likely packed, which sizes the reads; either kind reads right.
func (s *Store) readEntries(ctx context.Context, l layerColl, span snapshot.Span, n int, packed bool) ([]snapshot.Document, error) {
	prefix := l.prefix()
	rows, pg := n, &entryPage{span: span, n: n}
	if packed {
		dir, err := s.directory(ctx, l)
		if err != nil {
			return nil, err
		}
		if dir != nil {
			return s.readBlocks(ctx, l, dir, span, n)
		}
		rows = n/index.BlockEntries + 2
		span.To = "" // the block holding the end's entries is keyed past it
	}
	what := l.what()
	for {
		read, blocks, last := 0, 0, ""
		var derr error
		err := s.readDocs(ctx, l, rowRange(span, prefix), int64(rows), func(d snapshot.Document) bool {
			read, last = read+1, d.ID
			if index.IsBlock(d.Body) {
				blocks++
			}
			var more bool
			more, derr = eachEntry(d, what, pg.keep)
			return more
		})
		if err == nil {
			err = derr
		}
		if err != nil || pg.done || read < rows {
			return pg.out, err
		}
		span = span.After(last)
		if rows = n - len(pg.out); blocks > 0 {
			rows = rows/index.BlockEntries + 2
		}
	}
}

// readBlocks reads up to n entries of a packed layer whose ids are in span: the blocks
// its directory (dir, the blocks' keys in order) says hold them, by key, as many as n
// entries need at a time.
func (s *Store) readBlocks(ctx context.Context, l layerColl, dir []string, span snapshot.Span, n int) ([]snapshot.Document, error) {
	prefix, what := l.prefix(), l.what()
	pg := &entryPage{span: span, n: n}
	// The first block that may hold an entry of the span: the first keyed at or past
	// its start (a block keyed by the start itself holds nothing after it).
	i := sort.SearchStrings(dir, span.From)
	for i < len(dir) && !pg.done {
		// As many blocks as the entries still needed fill, up to the first keyed at or
		// past the span's end, which holds its last entries.
		j := min(i+(n-len(pg.out))/index.BlockEntries+2, len(dir))
		if span.To != "" {
			j = min(j, sort.SearchStrings(dir, span.To)+1)
		}
		keys := make(bigtable.RowList, 0, j-i)
		for _, k := range dir[i:j] {
			keys = append(keys, prefix+escapeComponent(k))
		}
		var derr error
		err := s.readDocs(ctx, l, keys, 0, func(d snapshot.Document) bool {
			var more bool
			more, derr = eachEntry(d, what, pg.keep)
			return more
		})
		if err == nil {
			err = derr
		}
		if err != nil {
			return pg.out, err
		}
		i = j
	}
	return pg.out, nil
}

// directory returns the block keys of a packed layer of an index, in order, or nil
// for a layer without a directory (entries a row each). A layer never changes, so
// directories are kept (dirCache).
func (s *Store) directory(ctx context.Context, l layerColl) ([]string, error) {
	if dir, ok := s.dirs.get(l); ok {
		return dir, nil
	}
	var dir []string
	var derr error
	err := s.ScanRun(ctx, l.dataset, l.v, l.collection, func(chunk []byte) bool {
		dir, derr = index.DirectoryKeys(dir, chunk)
		return derr == nil
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, fmt.Errorf("read the directory of %s at %s: %w", l.collection, l.v, err)
	}
	s.dirs.put(l, dir)
	return dir, nil
}

// dirCache keeps directories read, up to maxDirKeys keys in all; past that it starts
// again empty.
type dirCache struct {
	mu   sync.Mutex
	dirs map[layerColl][]string
	keys int
}

// maxDirKeys bounds the keys a store keeps in directories: about 30 MB, the
// directories of 250,000,000 documents' entries.
const maxDirKeys = 1 << 20

func (c *dirCache) get(k layerColl) ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	dir, ok := c.dirs[k]
	return dir, ok
}

func (c *dirCache) put(k layerColl, dir []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dirs == nil || c.keys+len(dir) > maxDirKeys {
		c.dirs, c.keys = map[layerColl][]string{}, 0
	}
	c.dirs[k] = dir
	c.keys += len(dir)
}
