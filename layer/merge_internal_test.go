package layer

import (
	"testing"

	"github.com/snapflip/snapflip/snapshot"
)

// mergeCount merges the newest tier: at least two layers, stopping where the next
// older delta outweighs them, or every delta.
func TestMergeCountIsSizeTiered(t *testing.T) {
	for _, tt := range []struct {
		sizes []int64 // deltas' entries, newest first; a base follows
		want  int
	}{
		{[]int64{1}, 1},
		{[]int64{1, 1}, 2},
		{[]int64{1, 1, 1, 1, 1, 1, 1}, 7},
		{[]int64{1, 1, 1, 1, 1, 1, 7}, 6},
		{[]int64{1, 1, 5}, 2},
		{[]int64{3, 1, 5}, 2},
		{[]int64{3, 2, 5, 100}, 3},
		{[]int64{50, 1, 1}, 3},
	} {
		layers := make([]snapshot.LayerRef, 0, len(tt.sizes)+1)
		for _, n := range tt.sizes {
			layers = append(layers, snapshot.LayerRef{Kind: snapshot.LayerDelta, Docs: n - n/3, Tombstones: n / 3})
		}
		layers = append(layers, snapshot.LayerRef{Kind: snapshot.LayerBase, Docs: 1000})
		if got := mergeCount(layers); got != tt.want {
			t.Errorf("mergeCount(%v) = %d; want %d", tt.sizes, got, tt.want)
		}
	}
}
