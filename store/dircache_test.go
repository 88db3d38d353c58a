package store

import (
	"fmt"
	"testing"
)

// The store keeps the directories it read, up to maxDirKeys keys in all, and starts
// again empty past that: one big directory never stays beside a full cache.
func TestDirectoryCacheIsBounded(t *testing.T) {
	var c dirCache
	a, b := layerColl{"ds", "v1", "c/i"}, layerColl{"ds", "v2", "c/i"}
	if _, ok := c.get(a); ok {
		t.Fatal("an empty cache holds a directory")
	}
	c.put(a, nil) // a layer without a directory is remembered too
	if dir, ok := c.get(a); !ok || dir != nil {
		t.Fatalf("get(a) = %v, %v; want a remembered nil", dir, ok)
	}
	big := make([]string, maxDirKeys-1)
	for i := range big {
		big[i] = fmt.Sprint(i)
	}
	c.put(b, big)
	if _, ok := c.get(a); !ok || c.keys != maxDirKeys-1 {
		t.Fatalf("after b: a kept %v, %d keys held", ok, c.keys)
	}
	c.put(a, []string{"x", "y"}) // past the bound: the cache starts again
	if _, ok := c.get(b); ok || c.keys != 2 {
		t.Errorf("past %d keys the cache still holds b (%d keys held)", maxDirKeys, c.keys)
	}
	if dir, ok := c.get(a); !ok || len(dir) != 2 {
		t.Errorf("get(a) = %v, %v; want the new directory", dir, ok)
	}
}
