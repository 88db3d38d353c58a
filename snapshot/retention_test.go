package snapshot_test

import (
	"testing"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// TestRetentionNeed: a current version needs its documents kept its TTL (the
// configured one when its manifest has none), and longer when its oldest layer is
// already so old that less than a tenth of the TTL would be left.
func TestRetentionNeed(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	base := snapshot.LayerRef{Version: "base", Kind: snapshot.LayerBase, DataTime: now.Add(-50 * time.Minute)}
	layered := snapshot.Manifest{StartedAt: now.Add(-time.Minute), TTL: time.Hour,
		Collections: map[string]snapshot.CollectionStats{"c": {Layers: []snapshot.LayerRef{{Version: "own", DataTime: now.Add(-time.Minute)}, base}}}}
	for _, tt := range []struct {
		name     string
		m        snapshot.Manifest
		ttl      time.Duration
		wantAge  time.Duration
		wantTTL  time.Duration
		wantKeep time.Duration
	}{
		{"young", snapshot.Manifest{StartedAt: now.Add(-time.Minute), TTL: 2 * time.Hour}, time.Hour, time.Minute, 2 * time.Hour, 2 * time.Hour},
		{"no ttl of its own", snapshot.Manifest{StartedAt: now.Add(-time.Minute)}, 3 * time.Hour, time.Minute, 3 * time.Hour, 3 * time.Hour},
		{"oldest layer counts", layered, 0, 50 * time.Minute, time.Hour, time.Hour},
		{"old past the margin", snapshot.Manifest{StartedAt: now.Add(-55 * time.Minute), TTL: time.Hour}, 0, 55 * time.Minute, time.Hour, 61 * time.Minute},
		{"refreshed", snapshot.Manifest{StartedAt: now.Add(-5 * time.Hour), RefreshedAt: now.Add(-time.Minute), TTL: time.Hour}, 0, time.Minute, time.Hour, time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := snapshot.NeedOf("ds", snapshot.Pointer{Version: "v", Pinned: true}, tt.m, tt.ttl, now)
			if got.Age != tt.wantAge || got.TTL != tt.wantTTL || got.Keep() != tt.wantKeep || !got.Pinned || got.Dataset != "ds" || got.Version != "v" {
				t.Errorf("NeedOf = %+v, keep %s; want age %s, ttl %s, keep %s", got, got.Keep(), tt.wantAge, tt.wantTTL, tt.wantKeep)
			}
		})
	}
}
