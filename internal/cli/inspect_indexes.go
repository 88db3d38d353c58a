package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/snapflip/snapflip/snapshot"
)

// inspection is what `syncer inspect` prints: a version's manifest and, for each of
// its collections with indexes, what each layer of the chain wrote for them. As JSON
// it is the manifest with one more key, index_layers.
type inspection struct {
	snapshot.Manifest
	// IndexLayers maps a collection with indexes to its chain's layers, newest first,
	// each with what it wrote per index.
	IndexLayers map[string][]layerIndexes `json:"index_layers,omitempty"`
}

// layerIndexes is what one layer wrote for the indexes of one collection, as the
// manifest of the version that wrote it records (OwnLayer.Indexes).
type layerIndexes struct {
	// Layer is the version that wrote the layer.
	Layer snapshot.Version `json:"layer"`
	// Kind is the layer's kind: base, delta, or full for a full copy.
	Kind string `json:"kind"`
	// Indexes are what the layer wrote per index, in its manifest's order; empty when
	// it wrote no entries (or its manifest is gone).
	Indexes []snapshot.IndexWrite `json:"indexes"`
	// ManifestGone is true when no manifest of the layer's version is stored (it
	// expired, or the layer is a base built beside the stream of versions, which has
	// none), so what it wrote is unknown.
	ManifestGone bool `json:"manifest_gone,omitempty"`
}

// manifestReader is what inspect reads the layers' manifests with.
type manifestReader interface {
	// ReadManifest returns a version's manifest, or an error wrapping
	// snapshot.ErrNotFound when it is not stored.
	ReadManifest(ctx context.Context, dataset string, v snapshot.Version) (snapshot.Manifest, error)
}

// inspect returns manifest m with what each layer of its collections' chains wrote
// for their indexes, reading each layer's manifest once.
func inspect(ctx context.Context, st manifestReader, m snapshot.Manifest) (inspection, error) {
	out := inspection{Manifest: m}
	read := map[snapshot.Version]*snapshot.Manifest{m.Version: &m}
	for _, name := range m.CollectionNames() {
		c := m.Collections[name]
		if len(c.Indexes) == 0 {
			continue
		}
		chain := c.Layers
		full := len(chain) == 0 // a full copy: the version's own rows
		if full {
			chain = []snapshot.LayerRef{{Version: m.Version}}
		}
		for _, l := range chain {
			lm, seen := read[l.Version]
			if !seen {
				got, err := st.ReadManifest(ctx, m.Dataset, l.Version)
				switch {
				case errors.Is(err, snapshot.ErrNotFound):
				case err != nil:
					return inspection{}, fmt.Errorf("collection %s: layer %s: %w", name, l.Version, err)
				default:
					lm = &got
				}
				read[l.Version] = lm
			}
			li := layerIndexes{Layer: l.Version, Kind: string(l.Kind), Indexes: []snapshot.IndexWrite{}, ManifestGone: lm == nil}
			if full {
				li.Kind = "full"
			}
			if lm != nil {
				if own := lm.Collections[name].Own; own != nil && own.Indexes != nil {
					li.Indexes = own.Indexes
				}
			}
			if out.IndexLayers == nil {
				out.IndexLayers = map[string][]layerIndexes{}
			}
			out.IndexLayers[name] = append(out.IndexLayers[name], li)
		}
	}
	return out, nil
}

// writeIndexes prints a collection's indexes, each field with its type, and a table
// of what each layer of its chain wrote for each of them, newest layer first: its
// entries, tombstones, stored rows (a base's blocks, a delta's entries and
// tombstones) and bytes.
func writeIndexes(w io.Writer, c snapshot.CollectionStats, layers []layerIndexes) error {
	for _, ix := range c.Indexes {
		fields := make([]string, len(ix.Fields))
		for i, f := range ix.Fields {
			fields[i] = f
			if i < len(ix.Types) {
				fields[i] += " " + ix.Types[i]
			}
		}
		fmt.Fprintf(w, "  index %s (%s)\n", ix.Name, strings.Join(fields, ", "))
	}
	if len(c.Indexes) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  INDEX\tLAYER\tENTRIES\tREMOVED\tROWS\tBYTES")
	for _, ix := range c.Indexes {
		for _, l := range layers {
			at := slices.IndexFunc(l.Indexes, func(iw snapshot.IndexWrite) bool { return iw.Name == ix.Name })
			switch {
			case l.ManifestGone:
				fmt.Fprintf(tw, "  %s\t%s\t?\t?\t?\t? (its manifest is gone)\n", ix.Name, l.Layer)
			case at < 0:
				fmt.Fprintf(tw, "  %s\t%s\t0\t0\t0\t0 B\n", ix.Name, l.Layer)
			default:
				iw := l.Indexes[at]
				fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%d\t%s\n", ix.Name, l.Layer, iw.Entries, iw.Removed, iw.Cells(), humanBytes(iw.Bytes))
			}
		}
	}
	return tw.Flush()
}
