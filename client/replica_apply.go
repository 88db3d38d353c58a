package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/snapflip/snapflip/internal/retry"
)

// run is the replica's life: its follower learns of flips in one goroutine while this
// one catches up to the newest, until ctx ends.
func (r *Replica) run(ctx context.Context) {
	following := make(chan struct{})
	go func() {
		defer close(following)
		(&follower{c: r.c, cfg: r.cfg, news: r}).run(ctx)
	}()
	defer func() {
		r.stop()
		<-following
		close(r.done)
	}()
	r.keepUp(ctx)
}

// keepUp moves the version held to the newest pointer seen, as plan says, retrying a
// failed catch-up with backoff, until ctx ends.
func (r *Replica) keepUp(ctx context.Context) {
	wait := retry.Backoff{Initial: 50 * time.Millisecond, Max: 5 * time.Second, Jitter: retry.EqualJitter}
	for failures := 0; ; {
		held, t := r.goal()
		steps := plan(held, t)
		if steps[0].kind == stepWait {
			failures = 0
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
			}
			continue
		}
		err := r.catchUp(ctx, held, t, steps)
		if ctx.Err() != nil {
			return
		}
		r.caught(t.to, err)
		if err == nil {
			failures = 0
			continue
		}
		if errors.Is(err, ErrGone) {
			// The version expired or was never whole: the pointer has moved on.
			if cur, perr := r.c.current(ctx, consistency{}); perr == nil {
				r.observe(cur)
			}
		}
		failures++
		if retry.Sleep(ctx, wait.Delay(failures-1)) != nil {
			return
		}
	}
}

// catchUp makes the target the version the replica holds, from held, by the plan
// steps: it reads the changes the plan asks for until the plan is made, then the
// documents it says, and swaps all collections in at once.
func (r *Replica) catchUp(ctx context.Context, held holding, t target, steps []step) error {
	for {
		for _, s := range steps {
			if s.kind == stepFail {
				return s.err
			}
		}
		if !slices.ContainsFunc(steps, func(s step) bool { return s.kind == stepLearn }) {
			break
		}
		r.learn(ctx, t, steps)
		steps = plan(held, t)
	}
	reads, err := r.read(ctx, t.to.Version, steps)
	if err != nil {
		return err
	}
	r.swapIn(t.to, reads)
	r.count(held.version.IsZero(), reads)
	if held.version.IsZero() {
		close(r.ready)
	}
	if r.cfg.OnFlip != nil {
		r.cfg.OnFlip(t.to.Version.String())
	}
	return nil
}

// learn reads the changes the plan's stepLearn steps ask for into t's links. It stops
// at the first it cannot read: the next plan says what that means.
func (r *Replica) learn(ctx context.Context, t target, steps []step) {
	for _, s := range steps {
		if s.kind != stepLearn {
			continue
		}
		l := r.changesOf(ctx, s.version, s.collection)
		t.links[s.collection] = append(t.links[s.collection], l)
		if l.err != nil {
			return
		}
	}
}

// fetched is what a step of a plan read of a collection.
type fetched struct {
	collection string
	kind       stepKind                   // stepChanges or stepReload
	docs       map[string]json.RawMessage // by id: the changes (nil: deleted), or the collection whole
}

// read reads what the steps of a plan need, in the version: the changed documents of
// a stepChanges, the whole collection of a stepReload.
func (r *Replica) read(ctx context.Context, version versionID, steps []step) ([]fetched, error) {
	out := make([]fetched, 0, len(steps))
	for _, s := range steps {
		f := fetched{collection: s.collection, kind: s.kind}
		var err error
		switch s.kind {
		case stepChanges:
			f.docs, err = r.readChanged(ctx, version.String(), s.collection, s.ids)
		case stepReload:
			f.docs, err = r.readWhole(ctx, version.String(), s.collection)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// swapIn makes the version p names, of the collections read, the one the replica
// holds: a collection read whole replaces the one held, changes are applied to it.
func (r *Replica) swapIn(p pointer, reads []fetched) {
	r.swap.Lock()
	defer r.swap.Unlock()
	cur := r.state.Load() // the one the plan was made of, or it with an index more
	next := &replicaState{version: p.Version.String(), flippedAt: p.FlippedAt, covers: p.coverage(),
		colls: make(replicaColls, 0, len(reads))}
	for _, f := range reads {
		if tok, ok := p.Held[f.collection]; ok {
			if next.held == nil {
				next.held = map[string]string{}
			}
			next.held[f.collection] = tok
		}
	}
	for _, f := range reads {
		if f.kind == stepReload {
			next.colls = append(next.colls, namedColl{f.collection, newReplicaColl(f.docs, r.fields[f.collection])})
			continue
		}
		c := cur.colls.get(f.collection)
		for _, field := range r.fields[f.collection] {
			if c.indexes[field] == nil { // made while the changes were read
				c = cur.withIndex(f.collection, field).colls.get(f.collection)
			}
		}
		next.colls = append(next.colls, namedColl{f.collection, c.apply(f.docs)})
	}
	r.state.Store(next)
	r.mu.Lock()
	r.signal() // before OnFlip: a WaitFor need not wait for it
	r.mu.Unlock()
}

// count adds a catch-up to the stats: first when it was the first load.
func (r *Replica) count(first bool, reads []fetched) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !first {
		r.stats.Flips++
	}
	for _, f := range reads {
		if f.kind == stepReload {
			r.stats.Reloaded++
		} else {
			r.stats.Changed++
		}
		r.stats.Documents += int64(len(f.docs))
	}
}

// changesOf reads what a version did to a collection, page by page: its kind, its
// parent and the ids it changed; or, in the link's err, why they could not be read.
func (r *Replica) changesOf(ctx context.Context, version versionID, collection string) link {
	l := link{version: version, ids: map[string]bool{}}
	path := "/v1/versions/" + escapeSegment(version.String()) + "/changes/" + escapeSegment(collection)
	after := ""
	for {
		q := url.Values{"limit": {"10000"}}
		if after != "" {
			q.Set("after", after)
		}
		a, err := r.c.send(ctx, request{method: http.MethodGet, path: path, query: q, version: version.String()})
		if err != nil {
			l.err = err
			return l
		}
		var page struct {
			Parent  versionID   `json:"parent"`
			Kind    changesKind `json:"kind"`
			Changes []struct {
				ID string `json:"id"`
			} `json:"changes"`
			Next string `json:"next"`
		}
		if err := json.Unmarshal(a.body, &page); err != nil {
			l.err = fmt.Errorf("snapflip: GET %s: decode the answer: %w", truncate(path, 200), err)
			return l
		}
		for _, c := range page.Changes {
			l.ids[c.ID] = true
		}
		if page.Next == "" {
			l.kind, l.parent = page.Kind, page.Parent
			return l
		}
		after = page.Next
	}
}

// readChanged reads the documents of ids in the version: a document for each id it
// holds, nil for each id it does not.
func (r *Replica) readChanged(ctx context.Context, version, collection string, ids map[string]bool) (map[string]json.RawMessage, error) {
	changes := make(map[string]json.RawMessage, len(ids))
	if len(ids) == 0 {
		return changes, nil
	}
	docs, _, _, err := r.c.batchGet(ctx, version, collection, slices.Collect(maps.Keys(ids)), nil)
	if err != nil {
		return nil, err
	}
	for id := range ids {
		changes[id] = docs[id].JSON // nil when missing: deleted
	}
	return changes, nil
}

// readWhole reads every document of a collection in the version.
func (r *Replica) readWhole(ctx context.Context, version, collection string) (map[string]json.RawMessage, error) {
	docs := map[string]json.RawMessage{}
	for d, err := range r.c.list(ctx, version, collection, ListOptions{PageSize: 1000}, nil) {
		if err != nil {
			return nil, err
		}
		docs[d.ID] = d.JSON
	}
	return docs, nil
}
