package cli

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

func TestLeaseEventsShowWhoHoldsWhat(t *testing.T) {
	m := newSyncerMetrics("ds")
	var logs strings.Builder
	on := m.leaseEvent(slog.New(slog.NewTextHandler(&logs, nil)))
	on(store.LeaseEvent{Name: "publish/ds", Holder: "host/1/abc", Token: 7, Kind: "takeover"})
	if got := testutil.ToFloat64(m.leaseHeld); got != 1 {
		t.Errorf("lease_held = %v; want 1", got)
	}
	if got := testutil.ToFloat64(m.leaseToken); got != 7 {
		t.Errorf("lease_token = %v; want 7", got)
	}
	on(store.LeaseEvent{Name: "publish/ds", Holder: "host/1/abc", Token: 7, Kind: "lost", Err: errors.New("taken over")})
	if got := testutil.ToFloat64(m.leaseHeld); got != 0 {
		t.Errorf("lease_held after lost = %v; want 0", got)
	}
	if got := testutil.ToFloat64(m.leaseEvents.WithLabelValues("lost")); got != 1 {
		t.Errorf("lost events = %v; want 1", got)
	}
	for _, want := range []string{"lease takeover", "holder=host/1/abc", "token=7", "lease lost"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
	m.observe(snapshot.PublishResult{}, nil, 0)
	m.observe(snapshot.PublishResult{NoOp: true}, nil, 0)
	m.observe(snapshot.PublishResult{}, io.EOF, 0)
	for result, want := range map[string]float64{"published": 1, "unchanged": 1, "failed": 1} {
		if got := testutil.ToFloat64(m.syncs.WithLabelValues(result)); got != want {
			t.Errorf("syncs{%s} = %v; want %v", result, got, want)
		}
	}
}

// TestLeaseWaitIsLogged: a sync waiting for the publish lease says who holds it and
// when it can be taken over.
func TestLeaseWaitIsLogged(t *testing.T) {
	m := newSyncerMetrics("ds")
	var logs strings.Builder
	on := m.leaseEvent(slog.New(slog.NewTextHandler(&logs, nil)))
	at := time.Now().Add(12 * time.Second)
	on(store.LeaseEvent{Name: "publish/ds", Holder: "me", Kind: "waiting", HeldBy: "host-b/42/xyz", Token: 9, TakeoverAt: at})
	for _, want := range []string{"waiting for the publish lease", "held by host-b/42/xyz", "taken over in 12s", "takeover_at=" + at.UTC().Format(time.RFC3339)} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}
