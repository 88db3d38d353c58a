package snapshot_test

import (
	"encoding/json"
	"testing"

	"github.com/snapflip/snapflip/snapshot"
)

// A layered version that holds a collection, or whose chain of one took a base read
// from the source, is stored as format 3, which a release that does not know held
// collections refuses as gone (its resolver serves formats 0 and 2 alone) rather
// than judge a write's token by the version, or tell a rebased collection's changes
// against the wrong parent; this release reads it back as format 2, holds intact.
// Any other layered version stays format 2, which every release reads.
func TestHeldVersionsAreStoredAsFormat3(t *testing.T) {
	plain := snapshot.Manifest{Dataset: "ds", Version: "v", Format: snapshot.FormatLayered, Collections: map[string]snapshot.CollectionStats{
		"users": {Rows: 1, Own: &snapshot.OwnLayer{Kind: snapshot.LayerDelta}}}}
	held := plain
	held.Collections = map[string]snapshot.CollectionStats{"users": {Rows: 1, Held: &snapshot.Held{Why: "test"}}}
	rebased := plain
	rebased.Collections = map[string]snapshot.CollectionStats{"users": {Rows: 1, Own: &snapshot.OwnLayer{Kind: snapshot.LayerDelta, Rebased: true}}}
	for name, tc := range map[string]struct {
		m      snapshot.Manifest
		stored int
	}{"plain": {plain, 2}, "held": {held, 3}, "rebased": {rebased, 3}} {
		b, err := snapshot.EncodeManifest(tc.m)
		if err != nil {
			t.Fatal(err)
		}
		var previous struct { // what a release that does not know held collections decodes
			Format int `json:"format"`
		}
		if err := json.Unmarshal(b, &previous); err != nil || previous.Format != tc.stored {
			t.Errorf("%s: stored as format %d, %v; want %d", name, previous.Format, err, tc.stored)
		}
		back, err := snapshot.DecodeManifest(b)
		if err != nil || back.Format != snapshot.FormatLayered ||
			(back.Collections["users"].Held != nil) != (tc.m.Collections["users"].Held != nil) {
			t.Errorf("%s: read back as format %d, %+v, %v; want format 2 as written", name, back.Format, back.Collections["users"], err)
		}
	}
}
