package layer

import (
	"cmp"
	"context"
	"slices"

	"github.com/snapflip/snapflip/snapshot"
)

// Held collections (docs/design.md, "Held collections"). A collection whose
// definition changed (its config, its table's columns or types, its indexes), or a
// new one, needs a base read from the source. With a Compactor that reads the source
// (definition_changes: hold), that base is read beside the stream of versions, and
// meanwhile each version holds the collection whole at its last state before the
// change, in its old shape (a new collection is left out), so that the other
// collections keep flowing. A later version takes the base and catches it up from
// the position it was read at (Compactor.Swap).

// splitHolds returns the collections the version holds, with their stats, and
// those it writes; a held collection new to the dataset is in neither.
func (vw *versionWrite) splitHolds(ctx context.Context) (held map[string]snapshot.CollectionStats, write []string) {
	cur := vw.req.Parent
	if cur == nil || vw.req.Base || vw.req.Manifest.Format != snapshot.FormatLayered || !vw.Compactor.readsSource() {
		return nil, vw.req.Collections
	}
	pos := vw.req.Manifest.Source
	held = map[string]snapshot.CollectionStats{}
	for _, name := range vw.req.Collections {
		why, ok := sourceBaseWhy(cur, pos, name)
		if pc, in := cur.Collections[name]; !ok && in && !sameIndexes(pc.Indexes, vw.declared[name]) {
			why, ok = "an index was added or changed", true
		}
		pc, in := cur.Collections[name]
		small := in && pc.Rows < cmp.Or(vw.BesideMinRows, DefaultBesideMinRows)
		if !ok || small || !vw.Compactor.wantSource(*cur, name, why, pos) {
			// A small collection's base costs the version less than a hold would.
			write = append(write, name)
			continue
		}
		if !in {
			vw.event(ctx, snapshot.EventCollectionWaits, name, "why", why)
			continue
		}
		if pc.Held == nil {
			pc.Held = &snapshot.Held{Source: cur.Source, Why: why, Since: vw.now()}
		}
		pc.Layers = carryLayers(cur, pc.Layers)
		pc.Own = &snapshot.OwnLayer{Kind: snapshot.LayerNone, Mode: snapshot.ModeHeld}
		pc.Written = pc.Rows
		held[name] = pc
		vw.event(ctx, snapshot.EventCollectionHeld, name, "why", pc.Held.Why, "held_at", pc.Held.Source.String())
	}
	return held, write
}

// writing returns the collections the version writes: all of the request's but
// those it holds.
func (vw *versionWrite) writing() []string {
	if vw.skip == nil {
		return vw.req.Collections
	}
	return slices.DeleteFunc(slices.Clone(vw.req.Collections), func(name string) bool { return vw.skip[name] })
}
