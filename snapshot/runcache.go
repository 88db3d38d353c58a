package snapshot

import (
	"context"
	"sync"
)

// RunCache keeps the fingerprint runs a long-running syncer reads whole, in memory,
// so that a sync per second does not read the parent chain's runs from Bigtable every
// time (at 1M rows a base's run is about 25 MB). A layer never changes once written (a
// version id is never reused; a refresh rewrites the same bytes), so a run cached by
// (dataset, layer, collection) is never stale. The least recently used runs go first
// once the cache holds more than its byte budget; a run larger than the budget is not
// kept.
type RunCache struct {
	st  RunReader
	max int64

	mu    sync.Mutex
	runs  map[runKey]*cachedRun
	size  int64
	clock int64
}

type runKey struct {
	dataset    string
	layer      Version
	collection string
}

type cachedRun struct {
	chunks [][]byte
	size   int64
	used   int64
}

// DefaultRunCacheBytes is the budget syncer run gives its run cache: a 1M-row base's
// run and its deltas' with room to spare.
const DefaultRunCacheBytes = 64 << 20

// NewRunCache returns a RunCache over st holding at most maxBytes of runs.
func NewRunCache(st RunReader, maxBytes int64) *RunCache {
	return &RunCache{st: st, max: maxBytes, runs: map[runKey]*cachedRun{}}
}

// ScanRun calls fn with each chunk of the run, from memory when the run is cached,
// otherwise from the store, keeping the run when it was read to its end.
func (c *RunCache) ScanRun(ctx context.Context, dataset string, layer Version, collection string, fn func(chunk []byte) bool) error {
	k := runKey{dataset, layer, collection}
	c.mu.Lock()
	r, ok := c.runs[k]
	if ok {
		c.clock++
		r.used = c.clock
	}
	c.mu.Unlock()
	if ok {
		for _, chunk := range r.chunks {
			if !fn(chunk) {
				return nil
			}
		}
		return nil
	}
	var chunks [][]byte
	var size int64
	whole := true
	err := c.st.ScanRun(ctx, dataset, layer, collection, func(chunk []byte) bool {
		if size += int64(len(chunk)); size <= c.max {
			chunks = append(chunks, chunk)
		}
		if !fn(chunk) {
			whole = false
			return false
		}
		return true
	})
	if err == nil && whole && size <= c.max {
		c.put(k, &cachedRun{chunks: chunks, size: size})
	}
	return err
}

// Cached returns how many runs and bytes the cache holds.
func (c *RunCache) Cached() (runs int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.runs), c.size
}

func (c *RunCache) put(k runKey, r *cachedRun) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.runs[k]; ok {
		c.size -= old.size
	}
	c.clock++
	r.used = c.clock
	c.runs[k] = r
	c.size += r.size
	for c.size > c.max {
		var oldest runKey
		var at int64 = -1
		for k, r := range c.runs {
			if at < 0 || r.used < at {
				oldest, at = k, r.used
			}
		}
		c.size -= c.runs[oldest].size
		delete(c.runs, oldest)
	}
}
