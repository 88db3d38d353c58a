package snapshot

import (
	"context"
	"slices"
	"sync"
)

// The document cache survives flips. A layered version's documents are its parent's
// except for the ids its own layer holds, so on a miss for (version, collection, id)
// whose id the version's own layer does not hold, the parent's cached answer is the
// answer (and the grandparent's, and so on, while each step holds). A flip therefore
// invalidates only the documents it changed. The ids a layer holds come from its
// fingerprint run, read once per (version, collection), the first time a miss needs
// them; a layer larger than maxCarryIDs is not read, and its version starts cold.

// maxCarryIDs bounds the ids of one layer kept to carry answers across a flip.
const maxCarryIDs = 200_000

// maxCarrySteps bounds how many versions back a miss looks for a cached answer.
const maxCarrySteps = 8

// carryKey names one collection of one version.
type carryKey struct {
	v          Version
	collection string
}

// changeSet is what one collection of a version changed against its parent.
type changeSet struct {
	once   sync.Once
	ok     bool // the parent's answers hold for every id not in ids
	parent Version
	ids    map[string]struct{}
}

// carried looks for an answer cached under an ancestor of the view's version that
// the versions in between did not change. Found, it is cached under the version too.
func (r *Resolver) carried(ctx context.Context, m Manifest, collection, id string) (Doc, bool) {
	if r.docs == nil || r.carry == nil {
		return Doc{}, false
	}
	v := m.Version
	for range maxCarrySteps {
		cs := r.changes(ctx, v, collection)
		if cs == nil || !cs.ok {
			return Doc{}, false
		}
		if _, changed := cs.ids[id]; changed {
			return Doc{}, false
		}
		if d, ok := r.docs.Peek(docKey{cs.parent, collection, id}); ok {
			r.docs.Add(docKey{m.Version, collection, id}, d)
			r.carriedHits.Add(1)
			return d, true
		}
		v = cs.parent
	}
	return Doc{}, false
}

// changes returns what the collection's layer of version v changed, reading it once.
func (r *Resolver) changes(ctx context.Context, v Version, collection string) *changeSet {
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

func (r *Resolver) loadChanges(ctx context.Context, cs *changeSet, v Version, collection string) {
	m, err := r.manifest(ctx, v)
	if err != nil || m.Format != FormatLayered || m.Parent == "" {
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
	versions := func(ls []LayerRef) []Version {
		out := make([]Version, len(ls))
		for i, l := range ls {
			out[i] = l.Version
		}
		return out
	}
	own, parent := versions(c.Layers), versions(pc.Layers)
	switch {
	case slices.Equal(own, parent): // nothing changed
		cs.ids = map[string]struct{}{}
	case own[0] == v && c.Layers[0].Kind == LayerDelta && c.Layers[0].Merged < len(parent) &&
		slices.Equal(own[1:], parent[c.Layers[0].Merged:]) &&
		c.Layers[0].Docs+c.Layers[0].Tombstones <= maxCarryIDs:
		// A merged delta holds every id of the parent layers it replaces, so an id it
		// does not hold reads the same through both chains.
		ids := make(map[string]struct{}, c.Layers[0].Docs+c.Layers[0].Tombstones)
		var derr error
		err := r.store.ScanRun(ctx, r.dataset, v, collection, func(chunk []byte) bool {
			derr = DecodeRunChunk(chunk, func(e RunEntry) error { ids[e.ID] = struct{}{}; return nil })
			return derr == nil
		})
		if err != nil || derr != nil || int64(len(ids)) != c.Layers[0].Docs+c.Layers[0].Tombstones {
			return // a version whose changes cannot be read (all of them) starts cold
		}
		cs.ids = ids
	default:
		return
	}
	cs.ok, cs.parent = true, m.Parent
}

// manifest returns a manifest through the manifest cache, whatever its state.
func (r *Resolver) manifest(ctx context.Context, v Version) (Manifest, error) {
	if m, ok := r.manifests.Get(v); ok {
		return m, nil
	}
	return r.store.ReadManifest(ctx, r.dataset, v)
}
