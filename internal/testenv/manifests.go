package testenv

import (
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// The versions of LayeredManifests, oldest first.
const (
	LayeredBase    = snapshot.Version("11111111-3f7e-4c57-9d0c-0a5d2c1f8e21-1763000000000")
	LayeredFull    = snapshot.Version("22222222-3f7e-4c57-9d0c-0a5d2c1f8e21-1763100000000")
	LayeredDelta   = snapshot.Version("33333333-3f7e-4c57-9d0c-0a5d2c1f8e21-1763600000000")
	LayeredCurrent = snapshot.Version("44444444-3f7e-4c57-9d0c-0a5d2c1f8e21-1763700000000")
)

// LayeredManifests returns hand-built manifests as ListManifests does, oldest first:
// LayeredBase, a base 41h old; LayeredFull, a full copy; LayeredDelta, a delta on
// LayeredBase; and LayeredCurrent, whose orders wrote a delta on LayeredDelta (a chain
// of 3), users a base, and tags nothing.
func LayeredManifests(now time.Time) []snapshot.Manifest {
	baseTime := now.Add(-41 * time.Hour)
	baseLayer := snapshot.LayerRef{Version: LayeredBase, Kind: snapshot.LayerBase, Docs: 1000, Bytes: 64 << 10, DataTime: baseTime}
	deltaLayer := snapshot.LayerRef{Version: LayeredDelta, Kind: snapshot.LayerDelta, Docs: 10, Tombstones: 2, Bytes: 700, DataTime: now.Add(-2 * time.Hour)}
	return []snapshot.Manifest{
		{Version: LayeredBase, State: snapshot.StateRetired, Format: snapshot.FormatLayered, BytesWritten: 66 << 10, StartedAt: baseTime,
			TTL: 72 * time.Hour, Collections: map[string]snapshot.CollectionStats{
				"orders": {Rows: 1000, Written: 1000, Layers: []snapshot.LayerRef{baseLayer},
					Own: &snapshot.OwnLayer{Kind: snapshot.LayerBase, Inserted: 1000, Rendered: 1000, Emitted: 1000, Written: 1000}},
			}},
		{Version: LayeredFull, State: snapshot.StateRetired, BytesWritten: 70 << 10, StartedAt: now.Add(-30 * time.Hour),
			Collections: map[string]snapshot.CollectionStats{"orders": {Rows: 1000, Written: 1000, Bytes: 64 << 10}}},
		{Version: LayeredDelta, State: snapshot.StateRetired, Format: snapshot.FormatLayered, Parent: LayeredBase, BytesWritten: 900,
			StartedAt: now.Add(-2 * time.Hour), TTL: 72 * time.Hour, Collections: map[string]snapshot.CollectionStats{
				"orders": {Rows: 1008, Written: 1008, Layers: []snapshot.LayerRef{deltaLayer, baseLayer},
					Own: &snapshot.OwnLayer{Kind: snapshot.LayerDelta, Inserted: 4, Changed: 6, Deleted: 2, Rendered: 10, Emitted: 12, Written: 12}},
			}},
		{Version: LayeredCurrent, State: snapshot.StatePublished, Format: snapshot.FormatLayered, Parent: LayeredDelta, BytesWritten: 1536,
			StartedAt: now.Add(-5 * time.Minute), TTL: 72 * time.Hour, Collections: map[string]snapshot.CollectionStats{
				"orders": {Rows: 1010, Written: 1010, Bytes: 65 << 10, Digest: "abc", Layers: []snapshot.LayerRef{
					{Version: LayeredCurrent, Kind: snapshot.LayerDelta, Docs: 5, Tombstones: 1, Bytes: 1200, DataTime: now.Add(-5 * time.Minute)},
					deltaLayer, baseLayer,
				}, Own: &snapshot.OwnLayer{Kind: snapshot.LayerDelta, Mode: snapshot.ModeRowVersion, Inserted: 3, Changed: 2, Deleted: 1,
					Rendered: 5, Emitted: 6, Written: 6, Chunks: 1, ChunksWritten: 1}},
				"users": {Rows: 40, Written: 40, Bytes: 4 << 10, Layers: []snapshot.LayerRef{
					{Version: LayeredCurrent, Kind: snapshot.LayerBase, Docs: 40, Bytes: 4 << 10, DataTime: now.Add(-5 * time.Minute)},
				}, Own: &snapshot.OwnLayer{Kind: snapshot.LayerBase, Mode: snapshot.ContentMode("new collection"), Inserted: 40, Rendered: 40,
					Emitted: 40, Written: 40, Chunks: 1, ChunksWritten: 1}},
				"tags": {Rows: 7, Written: 7, Bytes: 100, Layers: []snapshot.LayerRef{baseLayer},
					Own: &snapshot.OwnLayer{Mode: snapshot.ModeSameFingerprint}},
			}},
	}
}
