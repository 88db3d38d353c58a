package client

import "errors"

// Catching up is planned and applied apart: plan, a pure function of what the replica
// holds and where it goes, says what to do as steps; the replica applies them
// (replica_apply.go). The plan walks a collection's line of parents from the younger of
// the two versions towards the older, one version's changes at a time: each plan that
// cannot decide yet asks for the next version's changes (stepLearn), and is made again
// once they were read.

// stepKind is what one step of a catch-up does.
type stepKind int

const (
	// stepWait: the replica holds the newest version it knows of, or knows of none;
	// nothing to do until it learns of another.
	stepWait stepKind = iota
	// stepLearn: read the changes a version made to the collection, then plan again.
	stepLearn
	// stepChanges: read the documents of the ids in the target version and apply them
	// to the collection held: written when found, deleted when missing.
	stepChanges
	// stepReload: read the collection whole in the target version.
	stepReload
	// stepFail: the catch-up cannot go on now; err says why.
	stepFail
)

// step is one step of a plan.
type step struct {
	kind       stepKind
	collection string          // every kind but stepWait
	version    versionID       // stepLearn: the version whose changes to read
	ids        map[string]bool // stepChanges: the ids whose documents may differ
	err        error           // stepFail
}

// holding is what planning needs of the version a replica holds.
type holding struct {
	version versionID      // zero when nothing is held yet
	docs    map[string]int // documents held, by collection
}

// holdingOf returns what a state holds; st may be nil (nothing loaded yet).
func holdingOf(st *replicaState) holding {
	if st == nil {
		return holding{}
	}
	h := holding{version: parseVersion(st.version), docs: make(map[string]int, len(st.colls))}
	for _, nc := range st.colls {
		h.docs[nc.name] = nc.c.n
	}
	return h
}

// target is where a catch-up goes, and what it learnt of the way there.
type target struct {
	to          pointer // zero when no pointer was seen yet
	collections []string
	// maxChain is how many versions' changes a collection is followed by at most.
	maxChain int
	// links are, by collection, the changes read so far, in the order they were asked
	// for: from the younger version (of the one held and the target) towards the older.
	links map[string][]link
}

// link is what one version did to a collection against its parent, or why that could
// not be read.
type link struct {
	version versionID
	kind    changesKind
	parent  versionID       // zero for none
	ids     map[string]bool // the ids it changed
	err     error           // not nil: the changes could not be read, and say nothing
}

// plan returns the steps that bring what is held to the target: one stepWait when the
// target is held or names nothing, else one step per collection, in the target's
// order. A plan with a stepFail fails; one with a stepLearn is made again once those
// changes were read; one of stepChanges and stepReload alone is applied.
func plan(held holding, t target) []step {
	if t.to.Version.IsZero() || t.to.Version == held.version {
		return []step{{kind: stepWait}}
	}
	steps := make([]step, 0, len(t.collections))
	for _, name := range t.collections {
		steps = append(steps, planCollection(held, t, name))
	}
	return steps
}

// planCollection says how to bring one collection to the target: by the changes of the
// versions on one line of parents joining the version held and the target (the
// target's ancestors up to the held one, for flips forward; the held one's up to the
// target, for a rollback), else by reading it whole. A collection is read whole when
// nothing is held, when a version on the line is gone or does not hold the collection
// (the target excepted: that fails), wrote it whole, has no parent or one older than
// the line's end, when the line is longer than maxChain, or when the changes name more
// than half of it (and more than 100 ids).
func planCollection(held holding, t target, name string) step {
	reload := step{kind: stepReload, collection: name}
	if held.version.IsZero() {
		return reload
	}
	young, old := t.to.Version, held.version
	if young.Less(old) {
		young, old = old, young
	}
	links := t.links[name]
	for i, l := range links {
		switch {
		case errors.Is(l.err, ErrGone):
			return reload
		case errors.Is(l.err, ErrNotFound) && l.version != t.to.Version:
			return reload // a version between does not hold the collection
		case l.err != nil:
			return step{kind: stepFail, collection: name, err: l.err}
		case !l.kind.follows():
			return reload
		case l.parent == old:
			ids := union(links[:i+1])
			if len(ids) > max(held.docs[name]/2, 100) {
				return reload
			}
			return step{kind: stepChanges, collection: name, ids: ids}
		case l.parent.IsZero() || l.parent.Less(old):
			return reload // the line passed the older version without meeting it
		}
	}
	if len(links) >= t.maxChain {
		return reload
	}
	next := young
	if len(links) > 0 {
		next = links[len(links)-1].parent
	}
	return step{kind: stepLearn, collection: name, version: next}
}

// union returns the ids the links changed, all of them.
func union(links []link) map[string]bool {
	if len(links) == 1 {
		return links[0].ids
	}
	ids := map[string]bool{}
	for _, l := range links {
		for id := range l.ids {
			ids[id] = true
		}
	}
	return ids
}
