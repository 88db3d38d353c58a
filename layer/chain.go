package layer

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// Layered versions (docs/design.md, "Layered versions"). In incremental mode a
// publish writes, per collection, one layer under its own version: a delta holding
// only what differs from the parent (the version current when the sync began) plus
// tombstones for deleted ids, or a base holding every row. The manifest lists each
// collection's chain, newest first, down to a base. Every layer also writes its
// fingerprint run, the entries a later delta is computed against, so finding what
// changed reads neither the parent's documents nor unchanged rows as JSON.

// Layering defaults.
const (
	DefaultMaxLayers   = 8
	DefaultRebaseRatio = 0.5
)

// nextKind returns the kind of collection name's next layer: LayerDelta, or
// LayerBase with why a delta will not do. A base the chain's size or age calls for
// is built beside the stream when the Writer has a Compactor, and the layer stays a
// delta meanwhile, until the deltas hold twice rebase_ratio or the chain's age
// reaches snapshot.BaseBesideLimit.
func (p *versionWrite) nextKind(cur *snapshot.Manifest, pos snapshot.Position, name string, forced bool) (kind snapshot.LayerKind, why string) {
	if forced {
		if p.req.Why != "" {
			return snapshot.LayerBase, p.req.Why
		}
		return snapshot.LayerBase, "the last delta was inconsistent with its parent"
	}
	if cur == nil {
		return snapshot.LayerBase, "first version"
	}
	if why, ok := sourceBaseWhy(cur, pos, name); ok {
		return snapshot.LayerBase, why
	}
	pc := cur.Collections[name]
	switch {
	case len(pc.Layers) == 0:
		return snapshot.LayerBase, "the parent is a full copy, without fingerprints"
	case p.maxLayers() < 2:
		return snapshot.LayerBase, fmt.Sprintf("max_layers is %d", p.maxLayers())
	}
	var deltaRows, baseRows int64
	for _, l := range pc.Layers {
		if l.Kind == snapshot.LayerBase {
			baseRows = l.Docs
		} else {
			deltaRows += l.Docs + l.Tombstones
		}
	}
	if ratio := float64(deltaRows) / float64(max(baseRows, 1)); ratio > p.rebaseRatio() {
		why := fmt.Sprintf("the deltas hold %d rows against the base's %d (rebase_ratio %g)", deltaRows, baseRows, p.rebaseRatio())
		if ratio <= 2*p.rebaseRatio() && p.beside(cur, name, baseRows, why) {
			return snapshot.LayerDelta, ""
		}
		return snapshot.LayerBase, why
	}
	if ttl := p.req.Manifest.TTL; ttl > 0 {
		if age := p.now().Sub(cur.CollectionDataTime(name)); age >= ttl/2 {
			why := fmt.Sprintf("the chain's oldest layer is %s old, past half the TTL", age.Round(time.Second))
			if age < snapshot.BaseBesideLimit(ttl) && p.beside(cur, name, baseRows, why) {
				return snapshot.LayerDelta, ""
			}
			return snapshot.LayerBase, why
		}
	}
	return snapshot.LayerDelta, ""
}

// DefaultBesideMinRows is the least base a Compactor builds beside the stream by
// default: a smaller one costs the version that needs it under a tenth of a second.
const DefaultBesideMinRows = 10_000

// beside asks the Writer's Compactor for a base of the collection built from cur's
// chain, and reports whether one is in hand (Compactor.want). A chain whose base
// holds fewer than BesideMinRows documents gets its base in the version.
func (p *versionWrite) beside(cur *snapshot.Manifest, name string, baseRows int64, why string) bool {
	if p.Compactor == nil || baseRows < cmp.Or(p.BesideMinRows, DefaultBesideMinRows) {
		return false
	}
	if slices.Contains(p.req.Swapped, name) {
		// A chain that just took a base is short and young: a call for another
		// comes from the chain it replaced.
		return true
	}
	return p.Compactor.want(*cur, name, why)
}

// mergeLimit bounds how many of cur's newest layers of the collection its next
// delta merges: none when the version takes a base beside the stream for it (its
// chain must stay its stored parent's plus its own layer), only those above the
// chain a base in flight replaces; limited is false for no bound.
func (p *versionWrite) mergeLimit(cur *snapshot.Manifest, name string) (n int, limited bool) {
	if slices.Contains(p.req.Swapped, name) {
		return 0, true
	}
	return p.Compactor.mergeLimit(cur, name)
}

// sourceBaseWhy says why collection name needs a base read from the source, when it
// does: it is new, or its definition (config, columns, types) is not the one its
// layers in cur were read with.
func sourceBaseWhy(cur *snapshot.Manifest, pos snapshot.Position, name string) (string, bool) {
	if _, ok := cur.Collections[name]; !ok {
		return "new collection", true
	}
	from := cur.CollectionSource(name)
	switch {
	case !from.SameDefinition(pos, name):
		return "the collection's definition changed", true
	case definitionsChanged(from, pos, name):
		// Every document may change (a column added, renamed, retyped): one base,
		// not a delta of every row that the next version would rebase.
		return "the table's column or type definitions changed", true
	}
	return "", false
}

// definitionsChanged reports whether the table collection name's columns or types
// differ between the parent read at parent and the version read at pos, both known.
func definitionsChanged(parent, pos snapshot.Position, name string) bool {
	a, ok1 := parent.Definitions[name]
	b, ok2 := pos.Definitions[name]
	return ok1 && ok2 && a != b
}

func (p *Writer) maxLayers() int {
	if p.MaxLayers > 0 {
		return p.MaxLayers
	}
	return DefaultMaxLayers
}

func (p *Writer) rebaseRatio() float64 {
	if p.RebaseRatio > 0 {
		return p.RebaseRatio
	}
	return DefaultRebaseRatio
}

// writeLayers writes each collection's own layer against the parent (nil for none),
// returning each collection's stats: the version's totals (exactly what a full copy
// would record) and its chains.
func (vw *versionWrite) writeLayers(ctx context.Context, snap snapshot.DeltaSnapshot) (snapshot.WriteResult, error) {
	held, write := vw.splitHolds(ctx)
	if len(write) < len(vw.req.Collections) {
		vw.skip = map[string]bool{}
		for _, name := range vw.req.Collections {
			vw.skip[name] = !slices.Contains(write, name)
		}
	}
	out, err := vw.writeEach(ctx, func(ctx context.Context, w snapshot.DocumentWriter, name string) (snapshot.CollectionStats, error) {
		return vw.newLayerWriter(w, name).write(ctx, snap)
	})
	if err != nil {
		return out.res, err
	}
	for name, st := range out.res.Collections {
		if st.Own != nil {
			own := *st.Own
			own.Written, own.ChunksWritten = out.docs[name], out.chunks[name]
			own.Indexes = indexesWritten(name, own.Indexes, out.docs, out.chunks)
			st.Own = &own
			if own.Written == own.Emitted && own.ChunksWritten == own.Chunks && indexesSealed(own.Indexes) {
				st.Written = st.Rows
			}
		}
		out.res.Collections[name] = st
	}
	maps.Copy(out.res.Collections, held)
	return out.res, nil
}

// mergeCount returns how many of a full chain's newest layers (newest first, a base
// last) the next delta merges, size-tiered: the fewest, at least two, after which the
// next older delta holds more entries than they do together; or every delta. Layers so
// grow older and larger in tiers, and a row is copied again only when its tier merges
// into a larger one (a logarithmic number of times), not at every merge: under a
// steady stream of changes a merge costs about what the newest tiers hold, not all the
// deltas since the base.
func mergeCount(layers []snapshot.LayerRef) int {
	deltas := len(layers) - 1
	var sum int64
	for k := range deltas {
		sum += layers[k].Docs + layers[k].Tombstones
		if k+1 >= 2 && k+1 < deltas && layers[k+1].Docs+layers[k+1].Tombstones > sum {
			return k + 1
		}
	}
	return deltas
}

// carryLayers copies the parent's layers into a new chain; a refresh of the parent
// rewrote them all, so their data time is at least its.
func carryLayers(parent *snapshot.Manifest, layers []snapshot.LayerRef) []snapshot.LayerRef {
	out := make([]snapshot.LayerRef, len(layers))
	for i, l := range layers {
		if parent.RefreshedAt.After(l.DataTime) {
			l.DataTime = parent.RefreshedAt
		}
		out[i] = l
	}
	return out
}
