package snapshot_test

import (
	"maps"
	"sync"
	"testing"

	"github.com/snapflip/snapflip/snapshot"
)

// A Tally adds what concurrent writers count, and what it returns is a copy.
func TestTallyCountsConcurrentWrites(t *testing.T) {
	var tl snapshot.Tally
	if got := tl.Written(); got == nil || len(got) != 0 {
		t.Fatalf("an empty tally's Written = %#v; want an empty map", got)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				tl.CountDocs("a", 2)
				tl.CountChunks("b", 1)
				tl.CountBytes(3)
			}
		})
	}
	wg.Wait()
	docs := tl.Written()
	if want := map[string]int64{"a": 1600}; !maps.Equal(docs, want) {
		t.Errorf("Written = %v; want %v", docs, want)
	}
	if got, want := tl.ChunksWritten(), map[string]int64{"b": 800}; !maps.Equal(got, want) {
		t.Errorf("ChunksWritten = %v; want %v", got, want)
	}
	if got := tl.BytesWritten(); got != 2400 {
		t.Errorf("BytesWritten = %d; want 2400", got)
	}
	docs["a"] = 0
	if got := tl.Written()["a"]; got != 1600 {
		t.Errorf("changing Written's map changed the tally: %d", got)
	}
}
