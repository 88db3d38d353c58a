package layer

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/snapflip/snapflip/snapshot"
)

// RunCache keeps the fingerprint runs a long-running syncer reads, decoded, in
// memory, so that a sync per second neither reads the parent chain's runs from
// Bigtable nor decodes them again (at 1M rows a base's run is about 25 MB stored and
// 36 MB decoded). A decoded run also answers point lookups, so a delta of a few
// changed rows looks their parent entries up instead of merging the whole chain
// (changedOnly). A layer never changes once written (a version id is never reused; a
// refresh rewrites the same bytes), so a run cached by (dataset, layer, collection)
// is never stale. The least recently used runs go first once the cache holds more
// than its byte budget; a run larger than the budget is not kept, and is streamed
// from the store instead.
type RunCache struct {
	st  RunReader
	max int64

	mu   sync.Mutex
	runs map[runKey]*decodedRun
	big  map[runKey]bool  // runs found over the budget, streamed from now on
	live map[string]int64 // ids a chain holds live, by dataset, collection and chain
	// firsts holds, for runs streamed, the first id of each chunk seen, from chunk 0
	// on, so that a reader after an id can start at its chunk (chunkAt).
	firsts map[runKey][]string
	size   int64
	clock  int64
}

type runKey struct {
	dataset    string
	layer      snapshot.Version
	collection string
}

// decodedRun is one layer's run, decoded: entry i's id is ids[ends[i-1]:ends[i]].
type decodedRun struct {
	ids        string
	ends       []uint32
	lens       []int64
	sums       []snapshot.Digest
	dead       []bool
	docs, tomb int64 // live entries and tombstones
	size       int64 // bytes held
	used       int64 // the cache's clock when last used
}

// decodedEntryBytes is what an entry costs decoded, besides its id.
const decodedEntryBytes = 4 + 8 + 16 + 1

func (r *decodedRun) len() int { return len(r.ends) }

func (r *decodedRun) id(i int) string {
	start := uint32(0)
	if i > 0 {
		start = r.ends[i-1]
	}
	return r.ids[start:r.ends[i]]
}

func (r *decodedRun) at(i int) RunEntry {
	return RunEntry{ID: r.id(i), Deleted: r.dead[i], Len: r.lens[i], Sum: r.sums[i]}
}

// find returns the layer's own entry for id, a tombstone included.
func (r *decodedRun) find(id string) (RunEntry, bool) {
	i := sort.Search(r.len(), func(i int) bool { return r.id(i) >= id })
	if i < r.len() && r.id(i) == id {
		return r.at(i), true
	}
	return RunEntry{}, false
}

// DefaultRunCacheBytes is the budget syncer run gives its run cache: a 1M-row base's
// run and its deltas' with room to spare.
const DefaultRunCacheBytes = 64 << 20

// NewRunCache returns a RunCache over st holding at most maxBytes of decoded runs.
func NewRunCache(st RunReader, maxBytes int64) *RunCache {
	return &RunCache{st: st, max: maxBytes, runs: map[runKey]*decodedRun{}, big: map[runKey]bool{}, live: map[string]int64{}}
}

// run returns the layer's run decoded, from memory or read and decoded whole from
// the store and kept; nil when it is over the budget. entries, when known (the
// layer's documents and tombstones), sizes the arrays up front, so that decoding a
// large run leaves no garbage of grown copies behind.
func (c *RunCache) run(ctx context.Context, dataset string, layer snapshot.Version, collection string, entries int64) (*decodedRun, error) {
	k := runKey{dataset, layer, collection}
	c.mu.Lock()
	r, ok := c.runs[k]
	big := c.big[k]
	if ok {
		c.clock++
		r.used = c.clock
	}
	c.mu.Unlock()
	if ok || big {
		return r, nil
	}
	if entries*decodedEntryBytes > c.max {
		c.markBig(k) // over the budget by its entries alone: not read to find that out
		return nil, nil
	}
	r = &decodedRun{}
	if n := int(entries); n > 0 && int64(n)*decodedEntryBytes <= c.max {
		r.ends, r.lens, r.sums, r.dead = make([]uint32, 0, n), make([]int64, 0, n), make([]snapshot.Digest, 0, n), make([]bool, 0, n)
	}
	var ids strings.Builder
	var derr error
	over := false
	err := c.st.ScanRun(ctx, dataset, layer, collection, func(chunk []byte) bool {
		derr = DecodeRunChunk(chunk, func(e RunEntry) error {
			if r.size += int64(len(e.ID)) + decodedEntryBytes; r.size > c.max || int64(ids.Len()+len(e.ID)) > 1<<32-1 {
				over = true
				return errRunOverBudget
			}
			ids.WriteString(e.ID)
			r.ends = append(r.ends, uint32(ids.Len()))
			r.lens = append(r.lens, e.Len)
			r.sums = append(r.sums, e.Sum)
			r.dead = append(r.dead, e.Deleted)
			if e.Deleted {
				r.tomb++
			} else {
				r.docs++
			}
			return nil
		})
		return derr == nil
	})
	if over {
		c.markBig(k)
		return nil, nil
	}
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, fmt.Errorf("fingerprints of %s at layer %s: %w", collection, layer, err)
	}
	r.ids = ids.String()
	c.put(k, r)
	return r, nil
}

// liveCount returns how many ids the chain holds live (layers newest first, with
// their decoded runs): the oldest layer's documents, then for each newer layer, its
// live entries over ids not live below it, less its tombstones over ids live below
// it. Counts are remembered per chain, so a chain one delta longer than one seen
// costs lookups of that delta's entries alone.
func (c *RunCache) liveCount(dataset, collection string, layers []snapshot.LayerRef, runs []*decodedRun) int64 {
	if n, ok := c.knownLive(dataset, collection, layers); ok {
		return n
	}
	last := len(runs) - 1
	if last < 0 {
		return 0
	}
	var n int64
	if last == 0 {
		n = runs[0].docs
	} else {
		n = c.liveCount(dataset, collection, layers[1:], runs[1:])
		top, below := runs[0], runs[1:]
		for i := range top.len() {
			liveBelow := false
			for _, r := range below {
				if e, ok := r.find(top.id(i)); ok {
					liveBelow = !e.Deleted
					break
				}
			}
			switch {
			case !top.dead[i] && !liveBelow:
				n++
			case top.dead[i] && liveBelow:
				n--
			}
		}
	}
	c.rememberLive(dataset, collection, layers, n)
	return n
}

// chainKey names a collection's chain of layers in the remembered counts.
func chainKey(dataset, collection string, layers []snapshot.LayerRef) string {
	var b strings.Builder
	b.WriteString(dataset + "\x00" + collection)
	for _, l := range layers {
		b.WriteString("\x00" + string(l.Version))
	}
	return b.String()
}

// knownLive returns the count of live ids remembered for the chain: found by reading
// its runs, or written by this process. A nil cache remembers nothing.
func (c *RunCache) knownLive(dataset, collection string, layers []snapshot.LayerRef) (int64, bool) {
	if c == nil {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.live[chainKey(dataset, collection, layers)]
	return n, ok
}

// rememberLive remembers that the chain holds n live ids.
func (c *RunCache) rememberLive(dataset, collection string, layers []snapshot.LayerRef, n int64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.live) >= 1024 { // old chains' counts are of no more use
		clear(c.live)
	}
	c.live[chainKey(dataset, collection, layers)] = n
}

// sawChunk remembers that chunk n of a streamed run begins with the id first, when
// every chunk before it was seen.
func (c *RunCache) sawChunk(k runKey, n int64, first string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.firsts == nil || len(c.firsts) >= 1024 && c.firsts[k] == nil { // old runs' are of no more use
		c.firsts = map[runKey][]string{}
	}
	if ids := c.firsts[k]; int64(len(ids)) == n {
		c.firsts[k] = append(ids, first)
	}
}

// chunkAt returns the last chunk of a streamed run seen to begin at or before the id
// after: the entries after it are there or in later chunks. 0 when none is known.
func (c *RunCache) chunkAt(k runKey, after string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := c.firsts[k]
	i := sort.SearchStrings(ids, after) // the first chunk beginning at or after after
	if i < len(ids) && ids[i] == after {
		return int64(i)
	}
	return int64(max(i-1, 0))
}

// markBig remembers that the run is over the budget.
func (c *RunCache) markBig(k runKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.big) >= 1024 { // old layers' keys are of no more use
		clear(c.big)
	}
	c.big[k] = true
}

var errRunOverBudget = fmt.Errorf("fingerprint run over the cache's budget")

// Cached returns how many runs and bytes the cache holds.
func (c *RunCache) Cached() (runs int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.runs), c.size
}

func (c *RunCache) put(k runKey, r *decodedRun) {
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

// runsCached reports whether the run cache holds, or can hold, every run of the
// parent's chain of collection name: none over its budget.
func (p *versionWrite) runsCached(parent snapshot.CollectionStats, name string) bool {
	c := p.Runs
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range parent.Layers {
		if (l.Docs+l.Tombstones)*decodedEntryBytes > c.max || c.big[runKey{p.dataset, l.Version, name}] {
			return false
		}
	}
	return true
}
