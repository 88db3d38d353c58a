package snapshot_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// TestRollbackTargetExpiresByRetention: a target written with a long TTL on storage
// whose GC rule keeps documents shorter expires by the rule: the rollback's expiry
// check counts with it and refuses a target the rule is about to collect, which the
// TTL alone would have let through.
func TestRollbackTargetExpiresByRetention(t *testing.T) {
	r := newMemRig(t, 4)
	r.pub.TTL = 10 * time.Hour
	ctx := context.Background()
	tk := r.ticker(t, "admin")
	tick := func(slot int64) {
		t.Helper()
		if res, err := tk.Tick(ctx, slot, snapshot.PublishOptions{}); err != nil || res.Publish.NoOp {
			t.Fatalf("tick %d: %+v, %v", slot, res, err)
		}
	}
	tick(1)
	r.src.Put("users", "u01", `{"name":"x"}`)
	tick(2)
	later := time.Now().Add(2 * time.Hour)
	admin := &snapshot.Admin{Dataset: "ds", Store: r.st, Lease: tk.Lease, TTL: 10 * time.Hour,
		Retention: 2*time.Hour + 30*time.Minute, Now: func() time.Time { return later }}
	_, err := admin.Rollback(ctx, snapshot.RollbackRequest{Previous: true, Reason: "test", By: "test"})
	if !errors.Is(err, snapshot.ErrTargetRefused) || !strings.Contains(err.Error(), "expires in") {
		t.Fatalf("rollback to a target storage collects within the margin = %v; want refused, expiring", err)
	}
	admin.Retention = 0 // its 10h TTL alone leaves it 8h
	if _, err := admin.Rollback(ctx, snapshot.RollbackRequest{Previous: true, Reason: "test", By: "test"}); err != nil {
		t.Fatalf("rollback by the TTL alone = %v; want done", err)
	}
}
