package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Replica holds whole versions of some collections in the process and follows the
// pointer: it loads the current version, then learns of each flip from the API's flip
// stream (GET /v1/watch; while the stream is refused, by polling the current
// version), fetches only the documents the new version changed (pinned to it), and
// swaps every collection at once. Reads never wait on the network and never see two
// versions mixed. A flip it cannot follow by changes (a new base, a full copy, a
// rollback farther than MaxChain versions, an expired version) is followed by
// reloading what changed whole; while it cannot catch up at all it keeps serving the
// last whole version it holds, and Lag and Err say so.
//
// A Replica is safe for concurrent use. Close it (or end the context it was made
// with) to stop following.
type Replica struct {
	c     *Client
	cfg   ReplicaConfig
	state atomic.Pointer[replicaState]
	ready chan struct{}

	stop context.CancelFunc
	done chan struct{}
	wake chan struct{} // capacity 1: the newest pointer seen changed

	// swap serialises changes of state: a flip's swap, an index's addition.
	swap   sync.Mutex
	fields map[string][]string // collection → indexed fields; under swap

	mu          sync.Mutex
	newest      pointer       // the newest pointer seen, with the newest covers seen of its version
	changed     chan struct{} // closed, and replaced, when the version held or newest changes
	behindSince time.Time     // since when newest is not the version held; zero when it is
	downSince   time.Time     // since when the API has not answered; zero when it does
	catchErr    error         // why the last catch-up failed; nil after one succeeded
	linkErr     error         // why the API did not answer; nil once it did
	born        time.Time
	stats       ReplicaStats
}

// ReplicaStats counts what a replica did to follow the pointer.
type ReplicaStats struct {
	// Flips counts the versions swapped in after the first.
	Flips int64
	// Changed counts the collections those flips brought up to date by their changed
	// documents alone; Reloaded, the collections read whole (the first load's too).
	Changed, Reloaded int64
	// Documents counts the documents read, whole collections and changed ones.
	Documents int64
}

// Stats returns what the replica did so far.
func (r *Replica) Stats() ReplicaStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// NewReplica starts a replica of the collections cfg names, read through c. It
// returns at once; the replica loads the current version in the background (Ready
// says when) and follows the pointer until ctx ends or Close is called. A cfg that
// does not Validate is an error matching ErrBadRequest.
func NewReplica(ctx context.Context, c *Client, cfg ReplicaConfig) (*Replica, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Collections = slices.Clone(cfg.Collections) // the caller's slice may change
	ctx, stop := context.WithCancel(ctx)
	r := &Replica{c: c, cfg: cfg, ready: make(chan struct{}), stop: stop, done: make(chan struct{}),
		wake: make(chan struct{}, 1), fields: map[string][]string{}, born: c.now(), changed: make(chan struct{})}
	go r.run(ctx)
	return r, nil
}

// Close stops following and waits for the replica's goroutines to end. The replica
// keeps serving the version it holds.
func (r *Replica) Close() {
	r.stop()
	<-r.done
}

// Ready returns a channel closed once the replica holds a version.
func (r *Replica) Ready() <-chan struct{} { return r.ready }

// Version returns the version the replica holds; "" before it is ready.
func (r *Replica) Version() string {
	if st := r.state.Load(); st != nil {
		return st.version
	}
	return ""
}

// Get returns a document of the version the replica holds, without I/O or allocation.
// The Document's JSON is shared with the replica and with other readers: do not
// modify it. Its ETag is empty.
func (r *Replica) Get(collection, id string) (Document, bool) {
	return r.state.Load().get(collection, id)
}

// View pins the version the replica holds now, for several reads that must agree;
// flips go on meanwhile and the View keeps its version for as long as it is held.
func (r *Replica) View() View { return View{r.state.Load()} }

// Lag returns how long the replica has been behind: since it first saw a version
// newer than the one it holds, or since the API stopped answering, whichever is
// earlier; 0 when it holds the newest version it knows of and the API answers.
// Before the first load it is the replica's age.
func (r *Replica) Lag() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state.Load()
	behind := r.behindSince
	if st != nil && st.version == r.newest.Version.String() {
		// It holds the newest version it knows of: behindSince is cleared only once
		// the catch-up returns, after OnFlip, which may ask.
		behind = time.Time{}
	}
	var since time.Time
	switch {
	case st == nil:
		since = r.born
	case behind.IsZero():
		since = r.downSince
	case r.downSince.IsZero() || behind.Before(r.downSince):
		since = behind
	default:
		since = r.downSince
	}
	if since.IsZero() {
		return 0
	}
	return r.c.now().Sub(since)
}

// Err returns why the replica is behind: the last failure to catch up, else the last
// failure to reach the API; nil when Lag is 0.
func (r *Replica) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.catchErr != nil && (!r.behindSince.IsZero() || r.state.Load() == nil) {
		return r.catchErr
	}
	if !r.downSince.IsZero() {
		return r.linkErr
	}
	return nil
}

// observe records a pointer the stream or a poll told of. A pointer older than the
// newest seen (a replica of the API that has not refreshed yet) is ignored but for
// what it says the newest version covers: versions move backwards only by a rollback,
// which flips the pointer anew.
func (r *Replica) observe(p pointer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.newest.Version.IsZero() && !p.FlippedAt.After(r.newest.FlippedAt) {
		r.cover(p)
		return
	}
	r.newest = p
	r.signal()
	if st := r.state.Load(); (st == nil || st.version != p.Version.String()) && r.behindSince.IsZero() {
		r.behindSince = r.c.now()
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// linked records whether the API answered (err == nil) or not.
func (r *Replica) linked(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.linkErr = err
	switch {
	case err == nil:
		r.downSince = time.Time{}
	case r.downSince.IsZero():
		r.downSince = r.c.now()
	}
}

// goal returns what the replica holds and where it goes: the newest pointer seen, by
// the collections it holds.
func (r *Replica) goal() (holding, target) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := target{to: r.newest, collections: r.cfg.Collections, maxChain: r.cfg.MaxChain, links: map[string][]link{}}
	return holdingOf(r.state.Load()), t
}

// caught records the outcome of a catch-up to p.
func (r *Replica) caught(p pointer, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.catchErr = err
	if err == nil && r.newest.Version == p.Version {
		r.behindSince = time.Time{}
	}
}

// View is one version of a replica's collections, for reads that must agree. The
// zero View (of a replica not yet ready) holds nothing.
type View struct{ st *replicaState }

// Version returns the view's version; "" for a replica that was not ready.
func (v View) Version() string {
	if v.st == nil {
		return ""
	}
	return v.st.version
}

// Held reports whether the view's version holds a collection at an earlier
// position than its own (its definition changed, and its new base is built beside
// the stream of versions), and the token of that position.
func (v View) Held(collection string) (token string, held bool) {
	if v.st == nil {
		return "", false
	}
	token, held = v.st.held[collection]
	return token, held
}

// Get returns a document of the view's version, as Replica.Get does.
func (v View) Get(collection, id string) (Document, bool) { return v.st.get(collection, id) }

// Len returns how many documents a collection holds in the view's version.
func (v View) Len(collection string) int {
	if v.st == nil || v.st.colls.get(collection) == nil {
		return 0
	}
	return v.st.colls.get(collection).n
}

// Range calls fn for every document of a collection in the view's version, in no
// particular order, until fn returns false.
func (v View) Range(collection string, fn func(Document) bool) {
	c := v.st.colls.get(collection)
	if c == nil {
		return
	}
	c.each(func(id string, body []byte) bool {
		return fn(Document{ID: id, JSON: body, Version: v.st.version})
	})
}

// Index is a hash index on one top-level field of a collection's documents, kept by
// the replica from flip to flip by the changed documents alone.
type Index struct {
	r                 *Replica
	collection, field string
}

// Index returns the index of a top-level field of a collection the replica holds,
// building it on the version held the first time it is asked for; from then on every
// version the replica swaps in carries it.
func (r *Replica) Index(collection, field string) (*Index, error) {
	if !slices.Contains(r.cfg.Collections, collection) {
		return nil, invalid("index: the replica does not hold collection %q", truncate(collection, 128))
	}
	if field == "" {
		return nil, invalid("index: empty field name")
	}
	r.swap.Lock()
	defer r.swap.Unlock()
	if !slices.Contains(r.fields[collection], field) {
		r.fields[collection] = append(r.fields[collection], field)
		if st := r.state.Load(); st != nil {
			r.state.Store(st.withIndex(collection, field))
		}
	}
	return &Index{r: r, collection: collection, field: field}, nil
}

// Lookup returns the documents of the version the replica holds whose field equals
// value, in id order; see View.Lookup.
func (ix *Index) Lookup(value any) ([]Document, error) {
	return ix.r.View().Lookup(ix, value)
}

// Lookup returns the documents of the view's version whose indexed field equals value,
// in id order. Values compare as JSON values: a string only to a string, numbers by
// their value (1 equals 1.0), nil to null; a document without the field is in no
// entry. A value that does not encode as JSON is an error.
func (v View) Lookup(ix *Index, value any) ([]Document, error) {
	key, err := lookupKey(value)
	if err != nil {
		return nil, fmt.Errorf("snapflip: index %s.%s: %w", ix.collection, ix.field, err)
	}
	if v.st == nil {
		return nil, nil
	}
	c := v.st.colls.get(ix.collection)
	if c == nil {
		return nil, nil
	}
	fi := c.indexes[ix.field]
	if fi == nil {
		// The view is older than the index.
		return nil, fmt.Errorf("snapflip: index %s.%s: version %s was swapped in before the index was made", ix.collection, ix.field, v.st.version)
	}
	ids := fi.ids(key)
	out := make([]Document, 0, len(ids))
	for _, id := range ids {
		if body, ok := c.get(id); ok {
			out = append(out, Document{ID: id, JSON: body, Version: v.st.version})
		}
	}
	return out, nil
}
