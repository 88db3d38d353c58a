package resolver

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/snapflip/snapflip/snapshot"
)

// The document cache survives flips. It is keyed by (collection, id), not by
// version: each entry holds an answer and a version it is known to hold at. A layered
// version's documents are its parent's except for the ids its own layer holds, so an
// entry holds at version V too when every version between its version and V (along
// parent links, either way, up to maxCarrySteps) left the id alone; the entry then
// moves to V, with no copy and no new entry. A flip therefore invalidates only the
// documents it changed, and costs a hit one more lookup (the flip's change set) the
// first time each id is read after it. The ids a layer holds come from its
// fingerprint run, read once per (version, collection), the first time a lookup needs
// them; a layer larger than maxCarryIDs is not read, and its version starts cold.

// maxCarryIDs bounds the ids of one layer kept to carry answers across a flip.
const maxCarryIDs = 200_000

// maxCarrySteps bounds how many versions apart an entry may be from the version read.
const maxCarrySteps = 8

// cacheKey names a cached document, whatever its version.
type cacheKey struct {
	collection string
	id         string
}

// cacheEntry is a cached answer and the version it last held at (a pointer, so
// concurrent readers move it without a lock).
type cacheEntry struct {
	doc Doc
	at  atomic.Pointer[snapshot.Version]
}

// carryKey names one collection of one version.
type carryKey struct {
	v          snapshot.Version
	collection string
}

// changeSet is what one collection of a version changed against its parent.
type changeSet struct {
	once   sync.Once
	ok     bool // the parent's answers hold for every id not in ids
	parent snapshot.Version
	ids    map[string]struct{}
}

// holdsAt reports whether entry e is the answer for k: cached at k's version, or at a
// version from which no flip up to k's changed the id. An entry found to hold moves
// to k's version.
func (r *Resolver) holdsAt(ctx context.Context, e *cacheEntry, k docKey) bool {
	at := *e.at.Load()
	if at == k.v {
		return true
	}
	if r.carry == nil || !r.unchangedBetween(ctx, k.v, at, k.collection, k.id) {
		return false
	}
	v := k.v
	e.at.Store(&v)
	r.carriedHits.Add(1)
	return true
}

// unchangedBetween reports whether one of versions a and b is an ancestor of the other
// within maxCarrySteps and no version between them changed the id.
func (r *Resolver) unchangedBetween(ctx context.Context, a, b snapshot.Version, collection, id string) bool {
	return unchangedAlong(a, b, func(v snapshot.Version) (snapshot.Version, bool) {
		cs := r.changes(ctx, v, collection)
		_, changed := cs.ids[id]
		return cs.parent, cs.ok && !changed
	})
}

// unchangedAlong reports whether one of versions a and b is an ancestor of the other
// within maxCarrySteps and left holds for each version after the ancestor up to the
// descendant: left returns a version's parent and whether the version left what is
// looked at as its parent held it. It walks parent links from the version made later
// (a version is made after its parent, by its writers' clocks: where two disagree, the
// answer is only read again; both ways when they share a millisecond), so a flip to a
// version that changed what is looked at costs one step, not a walk from the other end
// through manifests no reader needs.
func unchangedAlong(a, b snapshot.Version, left func(v snapshot.Version) (parent snapshot.Version, ok bool)) bool {
	switch {
	case a.Millis() > b.Millis():
		return descends(a, b, left)
	case a.Millis() < b.Millis():
		return descends(b, a, left)
	}
	return descends(a, b, left) || descends(b, a, left)
}

// descends reports whether older is an ancestor of newer within maxCarrySteps and
// left holds for each version after it up to newer.
func descends(newer, older snapshot.Version, left func(v snapshot.Version) (parent snapshot.Version, ok bool)) bool {
	v := newer
	for range maxCarrySteps {
		parent, ok := left(v)
		if !ok {
			return false
		}
		if parent == older {
			return true
		}
		v = parent
	}
	return false
}

// changes returns what the collection's layer of version v changed, reading it once.
func (r *Resolver) changes(ctx context.Context, v snapshot.Version, collection string) *changeSet {
	k := carryKey{v, collection}
	cs, ok := r.carry.Get(k)
	if !ok {
		cs = &changeSet{}
		if prev, found, _ := r.carry.PeekOrAdd(k, cs); found {
			cs = prev
		}
	}
	cs.once.Do(func() { r.loadChanges(ctx, cs, v, collection) })
	return cs
}

func (r *Resolver) loadChanges(ctx context.Context, cs *changeSet, v snapshot.Version, collection string) {
	m, err := r.manifest(ctx, v)
	if err != nil || m.Format != snapshot.FormatLayered || m.Parent == "" {
		return
	}
	p, err := r.manifest(ctx, m.Parent)
	if err != nil {
		return
	}
	c, pc := m.Collections[collection], p.Collections[collection]
	if len(c.Layers) == 0 || len(pc.Layers) == 0 {
		return
	}
	own, parent := snapshot.LayerVersions(c.Layers), snapshot.LayerVersions(pc.Layers)
	switch {
	case slices.Equal(own, parent): // nothing changed
		cs.ids = map[string]struct{}{}
	case own[0] == v && c.Layers[0].Kind == snapshot.LayerDelta && c.Layers[0].Merged < len(parent) &&
		slices.Equal(own[1:], parent[c.Layers[0].Merged:]) &&
		c.Layers[0].Docs+c.Layers[0].Tombstones <= maxCarryIDs:
		// A merged delta holds every id of the parent layers it replaces, so an id it
		// does not hold reads the same through both chains.
		ids, ok := r.cfg.Layers.LayerIDs(ctx, v, collection, c.Layers[0].Docs+c.Layers[0].Tombstones)
		if !ok {
			return // a version whose changes cannot be read (all of them) starts cold
		}
		cs.ids = ids
	default:
		return
	}
	cs.ok, cs.parent = true, m.Parent
}

// manifest returns a manifest through the manifest cache, whatever its state.
func (r *Resolver) manifest(ctx context.Context, v snapshot.Version) (snapshot.Manifest, error) {
	if m, ok := r.manifests.Get(v); ok {
		return m, nil
	}
	return r.store.ReadManifest(ctx, r.dataset, v)
}
