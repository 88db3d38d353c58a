package resolver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/snapshot"
)

// FilterPage is one page of a filter: its documents in index order, and the entry to
// read on after, "" when none follow.
type FilterPage struct {
	Docs []snapshot.Document
	Next string
}

// filterKey names one page of one filter, whatever its version.
type filterKey struct {
	collection string
	query      string // the index, its ranges and the page's start
	limit      int
}

// filterEntry is a cached filter page's ids and a version they are known to hold at
// (a pointer, so concurrent readers move it without a lock).
type filterEntry struct {
	page filterIDs
	at   atomic.Pointer[snapshot.Version]
}

// FilterQuery is one page of a filter: the collection, the scan of one of its
// indexes that serves the filter, the entry the page starts after ("" for the first
// page), and how many documents it holds at most.
type FilterQuery struct {
	Collection string
	Scan       index.Scan
	After      string
	Limit      int
}

// Filter returns up to q.Limit documents of the view's collection whose entries in
// the scan's index fall in its ranges, in index order (the fields' values, then the
// id), after the entry q.After. Every page of one filter comes from the view's
// version alone. It returns an error wrapping ErrNotFound for a collection the
// version does not hold, and ErrInvalid for an index it does not hold.
func (r *Resolver) Filter(ctx context.Context, view snapshot.View, q FilterQuery) (FilterPage, error) {
	collection, scan, after, limit := q.Collection, q.Scan, q.After, q.Limit
	c, ok := view.Manifest.Collections[collection]
	if !ok {
		return FilterPage{}, fmt.Errorf("collection %q: %w", collection, snapshot.ErrNotFound)
	}
	if !hasIndex(c.Indexes, scan.Index.Name) {
		return FilterPage{}, fmt.Errorf("%w collection %s has no index %s in version %s", snapshot.ErrInvalid, collection, scan.Index.Name, view.Version)
	}
	key := filterKey{collection, scanKey(scan, after), limit}
	if e, ok := r.filters.Get(key); ok && r.filterHoldsAt(ctx, e, view.Version, collection, scan.Index.Name) {
		r.filterHits.Add(1)
		return r.filterDocs(ctx, view, collection, e.page)
	}
	ids, err := r.filterIDs(ctx, view, q)
	if err != nil {
		return FilterPage{}, err
	}
	e := &filterEntry{page: ids}
	v := view.Version
	e.at.Store(&v)
	r.filters.Add(key, e)
	return r.filterDocs(ctx, view, collection, ids)
}

// filterIDs reads up to q.Limit+1 entries of the scan after the entry q.After and
// returns the page's: the ids of its documents and, last, the entry that ends it when
// more follow ("" else).
func (r *Resolver) filterIDs(ctx context.Context, view snapshot.View, q FilterQuery) (filterIDs, error) {
	collection, scan, after, limit := q.Collection, q.Scan, q.After, q.Limit
	chain, entries := view.Manifest.Chain(collection), index.Collection(collection, scan.Index.Name)
	var got []snapshot.Document
	for _, rg := range scan.Ranges {
		span := index.EntrySpan(rg)
		if after != "" && span.From <= after {
			span = span.After(after)
		}
		if span.Empty() {
			continue
		}
		page, _, err := r.store.ScanEntries(ctx, snapshot.ChainRef{Dataset: r.dataset, Chain: chain, Collection: entries}, span, limit+1-len(got))
		if err != nil {
			return filterIDs{}, err
		}
		if got = append(got, page...); len(got) > limit {
			break
		}
	}
	out := filterIDs{}
	for i, e := range got {
		if i == limit {
			out.next = got[limit-1].ID
			break
		}
		_, id, err := index.ParseEntryID(e.ID)
		if err != nil {
			return filterIDs{}, fmt.Errorf("index %s of %s at %s: %w", scan.Index.Name, collection, view.Version, err)
		}
		out.ids = append(out.ids, id)
	}
	return out, nil
}

// filterIDs is one filter page's entries: the ids in order and the entry it ends at.
type filterIDs struct {
	ids  []string
	next string
}

// filterDocs reads the page's documents, in its order. An entry whose document the
// version does not hold is an index that disagrees with its documents: an error.
func (r *Resolver) filterDocs(ctx context.Context, view snapshot.View, collection string, page filterIDs) (FilterPage, error) {
	docs, missing, err := r.GetMany(ctx, view, collection, page.ids)
	if err != nil {
		return FilterPage{}, err
	}
	if len(missing) > 0 {
		return FilterPage{}, fmt.Errorf("%w: an index of %s at %s names %d ids without a document, such as %q",
			snapshot.ErrDeltaInconsistent, collection, view.Version, len(missing), snapshot.Truncate(missing[0], 200))
	}
	out := FilterPage{Docs: make([]snapshot.Document, len(page.ids)), Next: page.next}
	for i, id := range page.ids {
		out.Docs[i] = snapshot.Document{ID: id, Body: docs[id].Body}
	}
	return out, nil
}

// FilterHits returns how many filter pages were answered from the filter cache.
func (r *Resolver) FilterHits() int64 { return r.filterHits.Load() }

// CarriedFilterHits returns how many of those were cached at an earlier version and
// carried across flips that left the index alone.
func (r *Resolver) CarriedFilterHits() int64 { return r.carriedFilterHits.Load() }

// hasIndex reports whether defs name the index.
func hasIndex(defs []snapshot.IndexDef, name string) bool {
	for _, d := range defs {
		if d.Name == name {
			return true
		}
	}
	return false
}

// scanKey is a scan and a page start as one string, for the filter cache.
func scanKey(scan index.Scan, after string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q %q", scan.Index.Name, after)
	for _, rg := range scan.Ranges {
		fmt.Fprintf(&b, " %q %q", rg.Start, rg.End)
	}
	return b.String()
}

// A cached filter page survives flips, as cached documents do (carry.go): its ids hold
// at a version V when every version between the page's version and V (along parent
// links, either way, up to maxCarrySteps) left the index's entries alone. The page's
// documents are then read at V, so a changed document is served changed. A version
// leaves an index alone when the collection's chain is its parent's (the collection
// wrote no layer), or when the collection's own layer is a plain delta over the
// parent's chain that wrote no entry and removed none for the index: it changed no
// indexed value. Anything else, a base, a merged delta or an index defined anew,
// starts the filter cold.

// filterHoldsAt reports whether e's page is the page at version v of the index of a
// collection; an entry found to hold moves to v.
func (r *Resolver) filterHoldsAt(ctx context.Context, e *filterEntry, v snapshot.Version, collection, idx string) bool {
	at := *e.at.Load()
	if at == v {
		return true
	}
	left := func(v snapshot.Version) (snapshot.Version, bool) {
		return r.indexStepUnchanged(ctx, v, collection, idx)
	}
	if !unchangedAlong(v, at, left) {
		return false
	}
	e.at.Store(&v)
	r.carriedFilterHits.Add(1)
	return true
}

// indexStepUnchanged returns version v's parent and whether v left the collection's
// index as the parent held it.
func (r *Resolver) indexStepUnchanged(ctx context.Context, v snapshot.Version, collection, idx string) (snapshot.Version, bool) {
	m, err := r.manifest(ctx, v)
	if err != nil || m.Format != snapshot.FormatLayered || m.Parent == "" {
		return "", false
	}
	p, err := r.manifest(ctx, m.Parent)
	if err != nil {
		return "", false
	}
	c, pc := m.Collections[collection], p.Collections[collection]
	if len(c.Layers) == 0 || len(pc.Layers) == 0 || !sameIndexDef(c.Indexes, pc.Indexes, idx) {
		return "", false
	}
	own, parent := snapshot.LayerVersions(c.Layers), snapshot.LayerVersions(pc.Layers)
	if slices.Equal(own, parent) {
		return m.Parent, true
	}
	top := c.Layers[0]
	if own[0] != v || top.Kind != snapshot.LayerDelta || top.Merged != 0 || !slices.Equal(own[1:], parent) || c.Own == nil {
		return "", false
	}
	for _, iw := range c.Own.Indexes {
		if iw.Name == idx {
			return m.Parent, iw.Entries == 0 && iw.Removed == 0
		}
	}
	return "", false
}

// sameIndexDef reports whether both definitions name the index alike.
func sameIndexDef(a, b []snapshot.IndexDef, name string) bool {
	named := func(d snapshot.IndexDef) bool { return d.Name == name }
	i, j := slices.IndexFunc(a, named), slices.IndexFunc(b, named)
	return i >= 0 && j >= 0 && slices.Equal(a[i].Fields, b[j].Fields) && slices.Equal(a[i].Types, b[j].Types)
}
