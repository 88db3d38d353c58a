package syncer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// A sync refused by a gate, pinned, fenced or cancelled leaves the replica ready; a
// failed one makes it unready until a sync succeeds; a sync running past maxSync
// makes it not live, until it ends.
func TestHealthStates(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	h := NewHealth(time.Minute, func(context.Context) error { return nil })
	h.now = func() time.Time { return now }
	ctx := context.Background()
	for _, err := range []error{nil, fmt.Errorf("gate: %w", snapshot.ErrRefused), snapshot.ErrPinned, snapshot.ErrFenced, context.Canceled} {
		h.begin()
		h.end(err)
		if r := h.ready(ctx); r != nil {
			t.Errorf("after a sync that ended with %v: not ready: %v", err, r)
		}
	}
	h.begin()
	h.end(errors.New("connection refused"))
	if r := h.ready(ctx); r == nil || !strings.Contains(r.Error(), "connection refused") {
		t.Errorf("after a failed sync: ready = %v; want the failure", r)
	}
	h.begin()
	now = now.Add(59 * time.Second)
	if err := h.live(); err != nil {
		t.Errorf("a sync running for 59s of 1m: %v", err)
	}
	now = now.Add(2 * time.Second)
	if err := h.live(); err == nil || !strings.Contains(err.Error(), "wedged") {
		t.Errorf("a sync running for 61s of 1m: live = %v; want wedged", err)
	}
	h.end(nil)
	if err := h.live(); err != nil {
		t.Errorf("after the sync ended: %v", err)
	}
	if r := h.ready(ctx); r != nil {
		t.Errorf("after a sync succeeded: %v", r)
	}
	down := NewHealth(time.Minute, func(context.Context) error { return errors.New("bigtable: unreachable") })
	if r := down.ready(ctx); r == nil || !strings.Contains(r.Error(), "bigtable") {
		t.Errorf("Bigtable down: ready = %v", r)
	}
}
