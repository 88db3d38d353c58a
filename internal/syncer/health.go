package syncer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// Health is the syncer's health, served on its metrics address.
//
//   - GET /healthz (liveness) fails only when a sync has run for longer than
//     --max-sync-duration: the process is wedged (a dead connection no timeout
//     ends, a stuck write). Restarting it cancels the sync, which leaves the pointer
//     alone and releases the lease.
//   - GET /readyz (readiness) fails while Bigtable or Postgres does not answer
//     within 2 s, and while the last sync this replica ran failed (until one
//     succeeds). A replica standing by (another claims the ticks) is ready while both
//     answer. A refused, pinned or fenced sync is not a failure of the syncer.
type Health struct {
	now     func() time.Time
	maxSync time.Duration
	ping    func(context.Context) error // Bigtable and Postgres answer

	mu        sync.Mutex
	busySince time.Time // when the running sync started; zero when none runs
	failed    error     // the last sync's error, nil once one succeeds
	failedAt  time.Time
}

// healthPingTimeout bounds each of /readyz's round trips.
const healthPingTimeout = 2 * time.Second

// DefaultMaxSyncDuration is --max-sync-duration's default.
const DefaultMaxSyncDuration = time.Hour

// NewHealth returns the health of a syncer whose syncs should take at most maxSync
// and which ping says can reach Bigtable and Postgres.
func NewHealth(maxSync time.Duration, ping func(context.Context) error) *Health {
	return &Health{now: time.Now, maxSync: maxSync, ping: ping}
}

// begin records that a sync started.
func (h *Health) begin() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.busySince = h.now()
	h.mu.Unlock()
}

// end records how the sync begin started ended.
func (h *Health) end(err error) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.busySince = time.Time{}
	switch {
	case errors.Is(err, snapshot.ErrHeld):
		// Another replica held the lease: this one ran nothing, and stands by as it
		// was.
	case err == nil, errors.Is(err, snapshot.ErrRefused), errors.Is(err, snapshot.ErrPinned),
		errors.Is(err, snapshot.ErrFenced), errors.Is(err, snapshot.ErrConflict), errors.Is(err, context.Canceled):
		h.failed = nil
	default:
		h.failed, h.failedAt = err, h.now()
	}
}

// live returns why the process is wedged, or nil.
func (h *Health) live() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.busySince.IsZero() {
		if ran := h.now().Sub(h.busySince); ran > h.maxSync {
			return fmt.Errorf("a sync has run for %s (since %s), longer than --max-sync-duration %s: the syncer is wedged",
				ran.Round(time.Second), h.busySince.UTC().Format(time.RFC3339), h.maxSync)
		}
	}
	return nil
}

// ready returns why this replica cannot do its work now, or nil.
func (h *Health) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, healthPingTimeout)
	defer cancel()
	if err := h.ping(ctx); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failed != nil {
		return fmt.Errorf("the last sync failed at %s: %w", h.failedAt.UTC().Format(time.RFC3339), h.failed)
	}
	return nil
}

// handle adds /healthz and /readyz to mux.
func (h *Health) handle(mux *http.ServeMux) {
	answer := func(w http.ResponseWriter, err error) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { answer(w, h.live()) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { answer(w, h.ready(r.Context())) })
}
