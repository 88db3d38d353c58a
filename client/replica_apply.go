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

// keepUp moves the version held to the newest pointer seen, retrying a failed
// catch-up with backoff, until ctx ends.
func (r *Replica) keepUp(ctx context.Context) {
	wait := retry.Backoff{Initial: 50 * time.Millisecond, Max: 5 * time.Second, Jitter: retry.EqualJitter}
	for failures := 0; ; {
		p, held := r.target()
		if held {
			failures = 0
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
			}
			continue
		}
		err := r.catchUp(ctx, p)
		if ctx.Err() != nil {
			return
		}
		r.caught(p, err)
		if err == nil {
			failures = 0
			continue
		}
		if errors.Is(err, ErrGone) {
			// The version expired or was never whole: the pointer has moved on.
			if cur, perr := r.c.current(ctx); perr == nil {
				r.observe(cur)
			}
		}
		failures++
		if retry.Sleep(ctx, wait.Delay(failures-1)) != nil {
			return
		}
	}
}

// catchUp makes the version p names the one the replica holds: each collection by the
// changes between the version held and p where they can be told, else by reading it
// whole, then all collections at once.
func (r *Replica) catchUp(ctx context.Context, p pointer) error {
	held := r.state.Load()
	type step struct {
		changes map[string]json.RawMessage // applied to the held collection
		whole   map[string]json.RawMessage // or: the collection read whole
	}
	steps := make(map[string]step, len(r.cfg.Collections))
	for _, name := range r.cfg.Collections {
		var ids map[string]bool
		if held != nil {
			var err error
			if ids, err = r.changedBetween(ctx, parseVersion(held.version), p.Version, name); err != nil {
				return err
			}
		}
		if ids == nil || len(ids) > max(held.colls.get(name).n/2, 100) {
			docs, err := r.readWhole(ctx, p.Version.String(), name)
			if err != nil {
				return err
			}
			steps[name] = step{whole: docs}
			continue
		}
		changes, err := r.readChanged(ctx, p.Version.String(), name, ids)
		if err != nil {
			return err
		}
		steps[name] = step{changes: changes}
	}

	r.swap.Lock()
	cur := r.state.Load() // held, or held with an index more
	next := &replicaState{version: p.Version.String(), flippedAt: p.FlippedAt, colls: make(replicaColls, 0, len(steps))}
	for _, name := range r.cfg.Collections {
		s := steps[name]
		if s.whole != nil {
			next.colls = append(next.colls, namedColl{name, newReplicaColl(s.whole, r.fields[name])})
			continue
		}
		c := cur.colls.get(name)
		for _, f := range r.fields[name] {
			if c.indexes[f] == nil { // made while the changes were read
				c = cur.withIndex(name, f).colls.get(name)
			}
		}
		next.colls = append(next.colls, namedColl{name, c.apply(s.changes)})
	}
	r.state.Store(next)
	r.swap.Unlock()

	r.mu.Lock()
	if held != nil {
		r.stats.Flips++
	}
	for _, s := range steps {
		if s.whole != nil {
			r.stats.Reloaded++
			r.stats.Documents += int64(len(s.whole))
		} else {
			r.stats.Changed++
			r.stats.Documents += int64(len(s.changes))
		}
	}
	r.mu.Unlock()

	if held == nil {
		close(r.ready)
	}
	if r.cfg.OnFlip != nil {
		r.cfg.OnFlip(p.Version.String())
	}
	return nil
}

// changedBetween returns the ids of a collection whose documents may differ between
// versions from and to, from the changes of the versions between them on one line of
// parents: to's ancestors up to from (a flip forward, one or several), or from's up to
// to (a rollback to an ancestor). It returns nil when no such line of at most MaxChain
// versions, each with its changes listed, joins them: the collection is read whole.
func (r *Replica) changedBetween(ctx context.Context, from, to versionID, collection string) (map[string]bool, error) {
	if from == to {
		return map[string]bool{}, nil
	}
	young, old := to, from
	if to.Less(from) {
		young, old = from, to
	}
	ids := map[string]bool{}
	v := young
	for range r.cfg.MaxChain {
		kind, parent, err := r.changesOf(ctx, v, collection, ids)
		switch {
		case errors.Is(err, ErrGone):
			return nil, nil
		case errors.Is(err, ErrNotFound) && v != to:
			return nil, nil // a version between does not hold the collection
		case err != nil:
			return nil, err
		case !kind.follows():
			return nil, nil
		case parent == old:
			return ids, nil
		case parent.IsZero() || parent.Less(old):
			return nil, nil
		}
		v = parent
	}
	return nil, nil
}

// changesOf adds the ids a version changed in a collection to ids, and returns what
// the version did to the collection and against which parent.
func (r *Replica) changesOf(ctx context.Context, version versionID, collection string, ids map[string]bool) (kind changesKind, parent versionID, err error) {
	path := "/v1/versions/" + escapeSegment(version.String()) + "/changes/" + escapeSegment(collection)
	after := ""
	for {
		q := url.Values{"limit": {"10000"}}
		if after != "" {
			q.Set("after", after)
		}
		a, err := r.c.send(ctx, request{method: http.MethodGet, path: path, query: q, version: version.String()})
		if err != nil {
			return 0, versionID{}, err
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
			return 0, versionID{}, fmt.Errorf("snapflip: GET %s: decode the answer: %w", truncate(path, 200), err)
		}
		for _, c := range page.Changes {
			ids[c.ID] = true
		}
		if page.Next == "" {
			return page.Kind, page.Parent, nil
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
	docs, _, _, err := r.c.batchGet(ctx, version, collection, slices.Collect(maps.Keys(ids)))
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
	for d, err := range r.c.list(ctx, version, collection, ListOptions{PageSize: 1000}) {
		if err != nil {
			return nil, err
		}
		docs[d.ID] = d.JSON
	}
	return docs, nil
}
