package layer

import (
	"context"
	"fmt"
	"testing"

	"github.com/snapflip/snapflip/snapshot"
)

// countedRuns serves the runs of memRuns and counts the reads per layer.
type countedRuns struct {
	memRuns
	reads map[snapshot.Version]int
}

func (c *countedRuns) ScanRun(ctx context.Context, dataset string, layer snapshot.Version, collection string, fn func([]byte) bool) error {
	c.reads[layer]++
	return c.memRuns.ScanRun(ctx, dataset, layer, collection, fn)
}

// The run cache keeps whole runs decoded within its budget and lets the least
// recently used go first; a run over the budget is not kept, and is not read again
// to find that out.
func TestRunCacheEvictsTheLeastRecentlyUsed(t *testing.T) {
	ctx := context.Background()
	runs := &countedRuns{memRuns: memRuns{}, reads: map[snapshot.Version]int{}}
	entries := func(n int) []RunEntry {
		var es []RunEntry
		for i := range n {
			es = append(es, RunEntry{ID: fmt.Sprintf("id%03d", i), Len: int64(i + 1), Sum: snapshot.Digest{uint64(i), 7}, Deleted: i == 3})
		}
		return es
	}
	for _, v := range []snapshot.Version{"a", "b", "c"} {
		runs.memRuns[v] = encodeRun(t, entries(10), 40)
	}
	runs.memRuns["huge"] = encodeRun(t, entries(30), 40)
	one := int64(10 * (5 + decodedEntryBytes)) // ten entries with 5-byte ids
	c := NewRunCache(runs, 2*one+one/2)        // two runs fit, not three
	// read looks id up in the layer's run; cached is false when the run is over the budget.
	read := func(v snapshot.Version, id string) (e RunEntry, ok, cached bool) {
		t.Helper()
		r, err := c.run(ctx, "ds", v, "c", 0)
		if err != nil {
			t.Fatal(err)
		}
		if r == nil {
			return RunEntry{}, false, false
		}
		e, ok = r.find(id)
		return e, ok, true
	}
	read("a", "id001")
	read("b", "id001")
	read("a", "id001") // a is now the more recently used
	read("c", "id001") // evicts b
	read("a", "id001")
	read("b", "id001")
	if want := map[snapshot.Version]int{"a": 1, "b": 2, "c": 1}; runs.reads["a"] != want["a"] || runs.reads["b"] != want["b"] || runs.reads["c"] != want["c"] {
		t.Errorf("store reads %v; want %v", runs.reads, want)
	}
	if n, bytes := c.Cached(); n != 2 || bytes != 2*one {
		t.Errorf("cached %d runs, %d bytes; want 2, %d", n, bytes, 2*one)
	}
	// Lookups answer what the run holds, tombstones included.
	if e, ok, cached := read("a", "id005"); !ok || !cached || e != (RunEntry{ID: "id005", Len: 6, Sum: snapshot.Digest{5, 7}}) {
		t.Errorf("entry id005: %+v ok %v cached %v", e, ok, cached)
	}
	if e, ok, _ := read("a", "id003"); !ok || !e.Deleted {
		t.Errorf("entry id003: %+v ok %v; want its tombstone", e, ok)
	}
	if _, ok, cached := read("a", "id0055"); ok || !cached {
		t.Errorf("an id the run does not name: ok %v cached %v; want false, true", ok, cached)
	}
	// A run over the budget is not kept, and is known to be over it from then on.
	for range 2 {
		if _, ok, cached := read("huge", "id001"); ok || cached {
			t.Errorf("a run over the budget: ok %v cached %v; want neither", ok, cached)
		}
	}
	if runs.reads["huge"] != 1 {
		t.Errorf("the run over the budget was read %d times; want once", runs.reads["huge"])
	}
	if n, _ := c.Cached(); n != 2 {
		t.Errorf("cached %d runs after one over the budget; want 2", n)
	}
}
