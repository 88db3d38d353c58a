package snapshot_test

import (
	"context"
	"testing"

	"github.com/snapflip/snapflip/snapshot"
)

// fixedRuns serves a 100-byte run for every layer and counts the reads per layer.
type fixedRuns struct{ reads map[snapshot.Version]int }

func (f *fixedRuns) ScanRun(_ context.Context, _ string, layer snapshot.Version, _ string, fn func([]byte) bool) error {
	f.reads[layer]++
	for range 2 {
		if !fn(make([]byte, 50)) {
			return nil
		}
	}
	return nil
}

// The run cache keeps whole runs within its budget and lets the least recently used
// go first; a run read only in part is not kept.
func TestRunCacheEvictsTheLeastRecentlyUsed(t *testing.T) {
	ctx := context.Background()
	f := &fixedRuns{reads: map[snapshot.Version]int{}}
	c := snapshot.NewRunCache(f, 250) // two runs of 100 bytes fit, not three
	read := func(v snapshot.Version) {
		t.Helper()
		if err := c.ScanRun(ctx, "ds", v, "c", func([]byte) bool { return true }); err != nil {
			t.Fatal(err)
		}
	}
	read("a")
	read("b")
	read("a") // a is now the more recently used
	read("c") // evicts b
	read("a")
	read("b")
	if want := map[snapshot.Version]int{"a": 1, "b": 2, "c": 1}; f.reads["a"] != want["a"] || f.reads["b"] != want["b"] || f.reads["c"] != want["c"] {
		t.Errorf("store reads %v; want %v", f.reads, want)
	}
	if runs, bytes := c.Cached(); runs != 2 || bytes != 200 {
		t.Errorf("cached %d runs, %d bytes; want 2, 200", runs, bytes)
	}
	// A run the caller stopped reading is not kept.
	if err := c.ScanRun(ctx, "ds", "d", "c", func([]byte) bool { return false }); err != nil {
		t.Fatal(err)
	}
	read("d")
	if f.reads["d"] != 2 {
		t.Errorf("a run read in part was kept: %d store reads of it; want 2", f.reads["d"])
	}
}
