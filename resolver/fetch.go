package resolver

import (
	"context"
	"sync"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// fetcher coalesces concurrent document misses into batched reads. A miss joins a
// queue; up to maxDrainers goroutines drain it, each taking everything queued (up to
// maxBatch) and reading it in one multi-row read per (version, collection). Under
// light load a miss finds a free drainer and is read alone, at once; under heavy load
// the misses that arrive while reads are in flight ride together in the next one, so
// storage sees a few large reads instead of many small ones. No miss ever waits for a
// timer.
type fetcher struct {
	store   ReadStore
	dataset string
	timeout time.Duration

	mu      sync.Mutex
	queue   []*fetchReq
	running int
}

const (
	maxDrainers = 4
	maxBatch    = 256
)

type fetchReq struct {
	key   docKey
	chain []snapshot.Version // the layers holding key's collection at key's version
	done  chan fetchResult
}

type fetchResult struct {
	body  []byte
	found bool
	err   error
}

// get reads one document through the queue. It returns found = false for a miss.
func (f *fetcher) get(ctx context.Context, k docKey, chain []snapshot.Version) ([]byte, bool, error) {
	req := &fetchReq{key: k, chain: chain, done: make(chan fetchResult, 1)}
	f.mu.Lock()
	f.queue = append(f.queue, req)
	if f.running < maxDrainers {
		f.running++
		go f.drain()
	}
	f.mu.Unlock()
	select {
	case res := <-req.done:
		return res.body, res.found, res.err
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// drain reads queued misses in batches until the queue is empty.
func (f *fetcher) drain() {
	for {
		f.mu.Lock()
		n := min(len(f.queue), maxBatch)
		if n == 0 {
			f.running--
			f.mu.Unlock()
			return
		}
		batch := f.queue[:n:n]
		f.queue = f.queue[n:]
		f.mu.Unlock()
		f.read(batch)
	}
}

// read serves one batch: one read per (version, collection) it holds.
func (f *fetcher) read(batch []*fetchReq) {
	type group struct {
		v          snapshot.Version
		collection string
	}
	groups := map[group][]*fetchReq{}
	for _, r := range batch {
		g := group{r.key.v, r.key.collection}
		groups[g] = append(groups[g], r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	for g, reqs := range groups {
		ids := make([]string, 0, len(reqs))
		seen := make(map[string]bool, len(reqs))
		for _, r := range reqs {
			if !seen[r.key.id] {
				seen[r.key.id] = true
				ids = append(ids, r.key.id)
			}
		}
		var got map[string][]byte
		var err error
		if len(ids) == 1 {
			var body []byte
			body, err = f.store.GetDocument(ctx, snapshot.ChainRef{Dataset: f.dataset, Chain: reqs[0].chain, Collection: g.collection}, ids[0])
			got = map[string][]byte{}
			if err == nil {
				got[ids[0]] = body
			} else if isNotFound(err) {
				err = nil
			}
		} else {
			got, err = f.store.GetDocuments(ctx, snapshot.ChainRef{Dataset: f.dataset, Chain: reqs[0].chain, Collection: g.collection}, ids)
		}
		for _, r := range reqs {
			body, found := got[r.key.id]
			r.done <- fetchResult{body: body, found: found, err: err}
		}
	}
}
