package layer

import (
	"context"
	"fmt"

	"github.com/snapflip/snapflip/snapshot"
)

// DiffStore is what Diff needs from storage.
type DiffStore interface {
	ReadManifest(ctx context.Context, dataset string, v snapshot.Version) (snapshot.Manifest, error)
	// ScanDocuments calls fn with every document of a collection through a chain, in
	// id order, until fn returns false.
	ScanDocuments(ctx context.Context, in snapshot.ChainRef, fn func(snapshot.Document) bool) error
	snapshot.DocumentGetter
	RunReader
}

// CollectionDiff counts what changes in one collection from version A to version B.
type CollectionDiff struct {
	Added   int64    `json:"added"`
	Removed int64    `json:"removed"`
	Changed int64    `json:"changed"`
	Same    bool     `json:"same"` // equal digests: nothing was scanned
	Sample  []string `json:"sample,omitempty"`
}

// DiffRequest names what Diff compares.
type DiffRequest struct {
	Dataset string
	// From and To are the versions compared: what changes from From to To.
	From, To snapshot.Version
	// Collection limits the comparison to one collection; "" compares every one.
	Collection string
	// Sample is how many ids to list per collection (0: none).
	Sample int
}

// Diff compares two versions collection by collection (one, when req.Collection is
// set). A collection whose count and digest are equal in both is reported the same
// without reading it. When both chains share their older layers, only the layers that
// differ are read: the ids their fingerprint runs name are looked up through both
// chains. Otherwise both versions are read in id order at once and merged.
func Diff(ctx context.Context, st DiffStore, req DiffRequest) (map[string]CollectionDiff, error) {
	dataset, a, b, only, sample := req.Dataset, req.From, req.To, req.Collection, req.Sample
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
			return nil, fmt.Errorf("collection %q is in neither version: %w", only, snapshot.ErrNotFound)
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
		var d CollectionDiff
		cd := collectionDiffer{st: st, dataset: dataset, name: name, a: ma.Chain(name), b: mb.Chain(name), sample: sample}
		if ua, ub, ok := uniqueLayers(ca.Layers, cb.Layers); okA && okB && ok {
			d, err = cd.layers(ctx, ua, ub)
		} else {
			d, err = cd.scans(ctx)
		}
		if err != nil {
			return nil, err
		}
		out[name] = d
	}
	return out, nil
}

// uniqueLayers returns the layers of chains a and b above their common suffix, and
// whether they share one (a base, at least).
func uniqueLayers(a, b []snapshot.LayerRef) ([]snapshot.LayerRef, []snapshot.LayerRef, bool) {
	n := 0
	for n < len(a) && n < len(b) && a[len(a)-1-n].Version == b[len(b)-1-n].Version {
		n++
	}
	return a[:len(a)-n], b[:len(b)-n], n > 0
}

// collectionDiffer compares one collection of two versions, whose chains are a and b.
type collectionDiffer struct {
	st            DiffStore
	dataset, name string
	a, b          []snapshot.Version
	sample        int // how many ids to list
}

// layers compares two chains that share their older layers: an id can differ only if
// a layer above the shared ones (ua in a, ub in b) names it, so only those layers'
// fingerprint runs are read, and the ids they name are looked up through both chains,
// 1,000 at a time.
func (c collectionDiffer) layers(ctx context.Context, ua, ub []snapshot.LayerRef) (CollectionDiff, error) {
	st, dataset, name, a, b, sample := c.st, c.dataset, c.name, c.a, c.b, c.sample
	var d CollectionDiff
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The union of the ids the unique layers name, tombstones included, in order.
	run := openChainRun(ctx, chainSource{st: st, dataset: dataset}, append(append([]snapshot.LayerRef{}, ua...), ub...), name)
	run.keepDeleted = true
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		da, err := st.GetDocuments(ctx, snapshot.ChainRef{Dataset: dataset, Chain: a, Collection: name}, batch)
		if err != nil {
			return err
		}
		db, err := st.GetDocuments(ctx, snapshot.ChainRef{Dataset: dataset, Chain: b, Collection: name}, batch)
		if err != nil {
			return err
		}
		for _, id := range batch {
			x, inA := da[id]
			y, inB := db[id]
			switch {
			case inA && !inB:
				d.Removed++
				d.note(sample, "-", id)
			case !inA && inB:
				d.Added++
				d.note(sample, "+", id)
			case inA && inB && string(x) != string(y):
				d.Changed++
				d.note(sample, "~", id)
			}
		}
		batch = batch[:0]
		return nil
	}
	for {
		e, ok, err := run.next()
		if err != nil {
			return d, err
		}
		if !ok {
			break
		}
		if batch = append(batch, e.ID); len(batch) == 1000 {
			if err := flush(); err != nil {
				return d, err
			}
		}
	}
	return d, flush()
}

func (d *CollectionDiff) note(sample int, kind, id string) {
	if len(d.Sample) < sample {
		d.Sample = append(d.Sample, kind+" "+id)
	}
}

// scans merges the two versions' id-ordered scans.
func (c collectionDiffer) scans(ctx context.Context) (CollectionDiff, error) {
	st, dataset, name, a, b, sample := c.st, c.dataset, c.name, c.a, c.b, c.sample
	var d CollectionDiff
	note := func(kind, id string) { d.note(sample, kind, id) }
	// Read B into a channel while A is scanned: both come in id order.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bdocs := make(chan snapshot.Document, 256)
	berr := make(chan error, 1)
	go func() {
		defer close(bdocs)
		berr <- st.ScanDocuments(ctx, snapshot.ChainRef{Dataset: dataset, Chain: b, Collection: name}, func(doc snapshot.Document) bool {
			select {
			case bdocs <- doc:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	next, more := <-bdocs
	err := st.ScanDocuments(ctx, snapshot.ChainRef{Dataset: dataset, Chain: a, Collection: name}, func(doc snapshot.Document) bool {
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
