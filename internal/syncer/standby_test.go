package syncer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/snapflip/snapflip/internal/memstore"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// TestStandbyStaysReady: a change-driven sync that cannot have the publish lease
// within its wait, because another replica holds it, is no failure of this replica:
// /readyz stays as it was, and the metrics count it as held, not failed.
func TestStandbyStaysReady(t *testing.T) {
	st := memstore.New()
	lease := func(holder string) *store.Lease {
		l, err := st.NewLease("publish/ds", store.LeaseConfig{Holder: holder, Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	hold, err := lease("a").TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Release(context.Background())
	standby := &snapshot.Ticker{Lease: lease("b"), Holder: "b"}
	res, _, err := standby.PublishLeasedWithin(t.Context(), 100*time.Millisecond, snapshot.PublishOptions{})
	if !errors.Is(err, snapshot.ErrHeld) {
		t.Fatalf("a publish while another replica holds the lease = %v; want ErrHeld", err)
	}
	h := NewHealth(time.Minute, func(context.Context) error { return nil })
	h.begin()
	h.end(err)
	if r := h.ready(t.Context()); r != nil {
		t.Errorf("after a sync another replica held the lease for: not ready: %v", r)
	}
	m := NewMetrics("ds")
	m.observe(res, err, time.Millisecond)
	if held, failed := testutil.ToFloat64(m.syncs.WithLabelValues("held")), testutil.ToFloat64(m.syncs.WithLabelValues("failed")); held != 1 || failed != 0 {
		t.Errorf("syncs_total held %v, failed %v; want 1, 0", held, failed)
	}
	// A replica whose own sync failed stays unready through a held one.
	h.begin()
	h.end(errors.New("connection refused"))
	h.begin()
	h.end(err)
	if r := h.ready(t.Context()); r == nil {
		t.Error("a held sync after a failed one made the replica ready")
	}
}
