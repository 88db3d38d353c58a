package snapshot_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/snapshot"
)

// TestRollbackTargetExpiresByRetention: a target written with a long TTL on storage
// whose GC rule keeps documents shorter expires by the rule: the rollback's expiry
// check counts with it and refuses a target the rule is about to collect, which the
// TTL alone would have let through.
func TestRollbackTargetExpiresByRetention(t *testing.T) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	r.Pub.TTL = 10 * time.Hour
	ctx := context.Background()
	tk := r.Ticker(t, "admin")
	for i, stmts := range [][]string{nil, {`UPDATE users SET name = 'x' WHERE id = 'u1'`}} {
		r.Exec(t, stmts...)
		if res, err := tk.Tick(ctx, int64(i+1), snapshot.PublishOptions{}); err != nil || res.Publish.NoOp {
			t.Fatalf("tick %d: %+v, %v", i, res, err)
		}
	}
	later := time.Now().Add(2 * time.Hour)
	admin := &snapshot.Admin{Dataset: "ds", Store: r.Store, Lease: tk.Lease, TTL: 10 * time.Hour,
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
