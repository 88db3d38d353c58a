package snapshot

import (
	"context"
	"fmt"
)

// DiffStore is what Diff needs from storage.
type DiffStore interface {
	ReadManifest(ctx context.Context, dataset string, v Version) (Manifest, error)
	// ScanDocuments calls fn with every document of a collection through a chain, in
	// id order, until fn returns false.
	ScanDocuments(ctx context.Context, dataset string, chain []Version, collection string, fn func(Document) bool) error
}

// CollectionDiff counts what changes in one collection from version A to version B.
type CollectionDiff struct {
	Added   int64    `json:"added"`
	Removed int64    `json:"removed"`
	Changed int64    `json:"changed"`
	Same    bool     `json:"same"` // equal digests: nothing was scanned
	Sample  []string `json:"sample,omitempty"`
}

// Diff compares two versions collection by collection (one, when only is set). A
// collection whose count and digest are equal in both is reported the same without
// reading it; the others are read in id order from both versions at once and merged.
// sample bounds the ids listed per collection.
func Diff(ctx context.Context, st DiffStore, dataset string, a, b Version, only string, sample int) (map[string]CollectionDiff, error) {
	ma, err := st.ReadManifest(ctx, dataset, a)
	if err != nil {
		return nil, fmt.Errorf("version %s: %w", a, err)
	}
	mb, err := st.ReadManifest(ctx, dataset, b)
	if err != nil {
		return nil, fmt.Errorf("version %s: %w", b, err)
	}
	names := map[string]bool{}
	for n := range ma.Collections {
		names[n] = true
	}
	for n := range mb.Collections {
		names[n] = true
	}
	if only != "" {
		if !names[only] {
			return nil, fmt.Errorf("collection %q is in neither version: %w", only, ErrNotFound)
		}
		names = map[string]bool{only: true}
	}
	out := map[string]CollectionDiff{}
	for name := range names {
		ca, okA := ma.Collections[name]
		cb, okB := mb.Collections[name]
		if okA && okB && ca.Rows == cb.Rows && ca.Digest == cb.Digest {
			out[name] = CollectionDiff{Same: true}
			continue
		}
		d, err := diffCollection(ctx, st, dataset, ma.Chain(name), mb.Chain(name), name, sample)
		if err != nil {
			return nil, err
		}
		out[name] = d
	}
	return out, nil
}

// diffCollection merges the two versions' id-ordered scans.
func diffCollection(ctx context.Context, st DiffStore, dataset string, a, b []Version, name string, sample int) (CollectionDiff, error) {
	var d CollectionDiff
	note := func(kind, id string) {
		if len(d.Sample) < sample {
			d.Sample = append(d.Sample, kind+" "+id)
		}
	}
	// Read B into a channel while A is scanned: both come in id order.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bdocs := make(chan Document, 256)
	berr := make(chan error, 1)
	go func() {
		defer close(bdocs)
		berr <- st.ScanDocuments(ctx, dataset, b, name, func(doc Document) bool {
			select {
			case bdocs <- doc:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	next, more := <-bdocs
	err := st.ScanDocuments(ctx, dataset, a, name, func(doc Document) bool {
		for more && next.ID < doc.ID {
			d.Added++
			note("+", next.ID)
			next, more = <-bdocs
		}
		if more && next.ID == doc.ID {
			if string(next.Body) != string(doc.Body) {
				d.Changed++
				note("~", doc.ID)
			}
			next, more = <-bdocs
			return true
		}
		d.Removed++
		note("-", doc.ID)
		return true
	})
	for more {
		d.Added++
		note("+", next.ID)
		next, more = <-bdocs
	}
	if err != nil {
		return d, err
	}
	return d, <-berr
}
