package syncer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/snapflip/snapflip/internal/memstore"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// TestLeaseEventsShowWhoHoldsWhat: a real lease's events set lease_held and
// lease_token, count by kind, and go on to the next observer.
func TestLeaseEventsShowWhoHoldsWhat(t *testing.T) {
	m := NewMetrics("ds")
	var heard []snapshot.EventKind // what the observer after the metrics heard
	mem := memstore.New()
	ctx := context.Background()
	// The second holder waits until it has said whom it waits for, however long its
	// first attempt takes.
	wctx, stopWaiting := context.WithTimeout(ctx, time.Minute)
	defer stopWaiting()
	lease := func(holder string) *store.Lease {
		l, err := mem.NewLease("publish/ds", store.LeaseConfig{Holder: holder, Duration: time.Minute,
			Observer: m.LeaseEvents(snapshot.ObserverFunc(func(_ context.Context, e snapshot.Event) {
				heard = append(heard, e.Kind)
				if e.Kind == snapshot.EventLeaseWaiting {
					stopWaiting()
				}
			}))})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	h, err := lease("host/1/abc").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.leaseHeld); got != 1 {
		t.Errorf("lease_held = %v; want 1", got)
	}
	if got := testutil.ToFloat64(m.leaseToken); got != float64(h.Fence()) || got == 0 {
		t.Errorf("lease_token = %v; want the hold's %d", got, h.Fence())
	}
	if _, err := lease("host-b/42/xyz").Acquire(wctx); err == nil {
		t.Fatal("a second holder acquired a held lease")
	}
	if !errors.Is(wctx.Err(), context.Canceled) {
		t.Fatalf("the second holder gave up (%v) without saying whom it waits for", wctx.Err())
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.leaseHeld); got != 0 {
		t.Errorf("lease_held after release = %v; want 0", got)
	}
	for kind, want := range map[string]float64{"acquired": 1, "waiting": 1, "released": 1, "lost": 0} {
		if got := testutil.ToFloat64(m.leaseEventsTotal.WithLabelValues(kind)); got != want {
			t.Errorf("lease events{%s} = %v; want %v", kind, got, want)
		}
	}
	if want := []snapshot.EventKind{snapshot.EventLeaseAcquired, snapshot.EventLeaseWaiting, snapshot.EventLeaseReleased}; !slices.Equal(heard, want) {
		t.Errorf("events passed on: %v; want %v", heard, want)
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

// TestLeaseEventsOfATakeover: a holder that stops renewing is taken over; the
// takeover is counted and names the lease, the new holder and its token, and
// LeaseEvents passes nothing on when next is nil.
func TestLeaseEventsOfATakeover(t *testing.T) {
	m := NewMetrics("ds")
	mem := memstore.New()
	ctx := context.Background()
	events := make(chan snapshot.Event, 16)
	lease := func(holder string, d time.Duration) *store.Lease {
		l, err := mem.NewLease("publish/ds", store.LeaseConfig{Holder: holder, Duration: d, RenewEvery: d - d/10,
			RetryMax: 10 * time.Millisecond,
			Observer: m.LeaseEvents(snapshot.ObserverFunc(func(_ context.Context, e snapshot.Event) { events <- e }))})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	old, err := lease("old", time.Hour).Acquire(ctx) // it renews after 54 minutes
	if err != nil {
		t.Fatal(err)
	}
	hctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	taker, err := lease("new", 200*time.Millisecond).Acquire(hctx)
	if err != nil {
		t.Fatalf("taking over a lease not renewed for its duration: %v", err)
	}
	defer taker.Release(ctx)
	if err := old.Release(ctx); !errors.Is(err, snapshot.ErrLeaseLost) {
		t.Errorf("release by the holder taken over = %v; want ErrLeaseLost", err)
	}
	var e snapshot.Event
	for e.Kind != snapshot.EventLeaseTakeover {
		select {
		case e = <-events:
		case <-hctx.Done():
			t.Fatal("no takeover event")
		}
	}
	if e.Attr("lease") != "publish/ds" || e.Attr("holder") != "new" || e.Attr("fence") != taker.Fence() || taker.Fence() != old.Fence()+1 {
		t.Errorf("takeover event %v; want lease publish/ds, holder new, token %d", e.Attrs, old.Fence()+1)
	}
	if got := testutil.ToFloat64(m.leaseEventsTotal.WithLabelValues("takeover")); got != 1 {
		t.Errorf("lease events{takeover} = %v; want 1", got)
	}
	if got := testutil.ToFloat64(m.leaseToken); got != float64(taker.Fence()) {
		t.Errorf("lease_token = %v; want the new hold's %d", got, taker.Fence())
	}
	m.LeaseEvents(nil).Observe(ctx, snapshot.Event{Kind: snapshot.EventLeaseReleased})
	if got := testutil.ToFloat64(m.leaseEventsTotal.WithLabelValues("released")); got != 1 {
		t.Errorf("lease events{released} after an event with no next observer = %v; want 1", got)
	}
}

// TestPublishMetricsCountLayers: a published version counts the bytes its publish
// wrote, the rows it rendered and wrote (documents and tombstones) and its layers by
// kind, and sets each collection's chain length; a full copy counts every row as
// rendered and written and has chains of 1; the current version read back after a
// rollback sets the chains again, dropping collections it lacks.
func TestPublishMetricsCountLayers(t *testing.T) {
	now := time.Now()
	ms := testenv.LayeredManifests(now)
	m := NewMetrics("ds")
	m.observe(snapshot.PublishResult{Manifest: ms[3]}, nil, time.Second) // vCur: orders delta, users base, tags nothing
	for name, tt := range map[string]struct {
		got, want float64
	}{
		"bytes_written":            {testutil.ToFloat64(m.bytesWritten), 1536},
		"rows_rendered":            {testutil.ToFloat64(m.rendered), 5 + 40},
		"rows_written{doc}":        {testutil.ToFloat64(m.rowsWritten.WithLabelValues("doc")), 3 + 2 + 40},
		"rows_written{tombstone}":  {testutil.ToFloat64(m.rowsWritten.WithLabelValues("tombstone")), 1},
		"layers{base}":             {testutil.ToFloat64(m.layers.WithLabelValues("base")), 1},
		"layers{delta}":            {testutil.ToFloat64(m.layers.WithLabelValues("delta")), 1},
		"chain_length{orders}":     {testutil.ToFloat64(m.chainLength.WithLabelValues("orders")), 3},
		"chain_length{users}":      {testutil.ToFloat64(m.chainLength.WithLabelValues("users")), 1},
		"chain_length{tags}":       {testutil.ToFloat64(m.chainLength.WithLabelValues("tags")), 1},
		"rows_copied_total{users}": {testutil.ToFloat64(m.rows.WithLabelValues("users")), 40},
	} {
		if tt.got != tt.want {
			t.Errorf("after a layered publish, %s = %v; want %v", name, tt.got, tt.want)
		}
	}

	m.observe(snapshot.PublishResult{Manifest: ms[1]}, nil, time.Second) // vFull: a full copy of orders
	if got := testutil.ToFloat64(m.bytesWritten); got != 1536+70<<10 {
		t.Errorf("after a full copy, bytes_written = %v; want %v", got, 1536+70<<10)
	}
	if got := testutil.ToFloat64(m.rendered); got != 45+1000 {
		t.Errorf("after a full copy, rows_rendered = %v; want %v", got, 45+1000)
	}
	if got := testutil.ToFloat64(m.rowsWritten.WithLabelValues("doc")); got != 45+1000 {
		t.Errorf("after a full copy, rows_written{doc} = %v; want %v", got, 45+1000)
	}
	if got := testutil.ToFloat64(m.layers.WithLabelValues("base")) + testutil.ToFloat64(m.layers.WithLabelValues("delta")); got != 2 {
		t.Errorf("after a full copy, layers = %v; want still 2 (a full copy writes no layer)", got)
	}
	if n := testutil.CollectAndCount(m.chainLength); n != 1 || testutil.ToFloat64(m.chainLength.WithLabelValues("orders")) != 1 {
		t.Errorf("after a full copy, %d chain_length series, orders %v; want orders alone, 1", n, testutil.ToFloat64(m.chainLength.WithLabelValues("orders")))
	}

	// The pointer names vDelta (a rollback, say): observeCurrent reads its chains.
	m.observeCurrent(t.Context(), fakeCurrent{ms[2]}, "ds", time.Hour)
	if got := testutil.ToFloat64(m.chainLength.WithLabelValues("orders")); got != 2 {
		t.Errorf("with vDelta current, chain_length{orders} = %v; want 2", got)
	}

	// Failed, refused and unchanged syncs count nothing written.
	before := testutil.ToFloat64(m.bytesWritten)
	m.observe(snapshot.PublishResult{Manifest: ms[3]}, io.EOF, 0)
	m.observe(snapshot.PublishResult{NoOp: true}, nil, 0)
	if got := testutil.ToFloat64(m.bytesWritten); got != before {
		t.Errorf("a failed or unchanged sync counted %v bytes written", got-before)
	}

	// A merged delta counts as merged, and what it copied as copied.
	merged := ms[3]
	merged.Collections = map[string]snapshot.CollectionStats{}
	for name, c := range ms[3].Collections {
		if name == "orders" {
			c.Layers = append([]snapshot.LayerRef(nil), c.Layers...)
			c.Layers[0].Merged = 2
			own := *c.Own
			own.Copied = 7
			c.Own = &own
		}
		merged.Collections[name] = c
	}
	deltas, bases := testutil.ToFloat64(m.layers.WithLabelValues("delta")), testutil.ToFloat64(m.layers.WithLabelValues("base"))
	m.observe(snapshot.PublishResult{Manifest: merged}, nil, time.Second)
	if got := testutil.ToFloat64(m.layers.WithLabelValues("merged")); got != 1 {
		t.Errorf("after a merged delta, layers{merged} = %v; want 1", got)
	}
	if got := testutil.ToFloat64(m.layers.WithLabelValues("delta")); got != deltas {
		t.Errorf("a merged delta counted as a delta too (%v, was %v)", got, deltas)
	}
	if got := testutil.ToFloat64(m.layers.WithLabelValues("base")); got != bases+1 {
		t.Errorf("after a merged delta with a base beside it, layers{base} = %v; want %v", got, bases+1)
	}
	if got := testutil.ToFloat64(m.rowsWritten.WithLabelValues("copied")); got != 7 {
		t.Errorf("after a merged delta, rows_written{copied} = %v; want 7", got)
	}

	// The series are exposed under their names.
	n, err := testutil.GatherAndCount(m.reg, "snapflip_sync_bytes_written_total", "snapflip_sync_rows_rendered_total",
		"snapflip_sync_rows_written_total", "snapflip_version_chain_length", "snapflip_sync_layers_total")
	if err != nil || n != 1+1+3+3+3 {
		t.Errorf("gathered %d series, %v; want 11", n, err)
	}
	if problems, err := testutil.GatherAndLint(m.reg, "snapflip_sync_bytes_written_total", "snapflip_sync_rows_rendered_total",
		"snapflip_sync_rows_written_total", "snapflip_version_chain_length", "snapflip_sync_layers_total"); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

// fakeCurrent is a store whose pointer names its manifest.
type fakeCurrent struct{ m snapshot.Manifest }

func (f fakeCurrent) ReadPointer(context.Context, string) (snapshot.Pointer, error) {
	return snapshot.Pointer{Version: f.m.Version}, nil
}

func (f fakeCurrent) ReadManifest(context.Context, string, snapshot.Version) (snapshot.Manifest, error) {
	return f.m, nil
}

// The metrics address serves the registry at /metrics and Go's profiles under
// /debug/pprof/, as docs/operations.md says; a busy address is an error naming it.
func TestMetricsAddrServesMetricsAndProfiles(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	m := NewMetrics("ds")
	if _, err := Serve(context.Background(), addr, m, nil, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("serving on a busy address: %v; want an error naming %s", err, addr)
	}
	ln.Close()
	stop, err := Serve(context.Background(), addr, m, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for path, want := range map[string][]byte{
		"/metrics":                       []byte(`snapflip_ttl_seconds{dataset="ds"} 0`),
		"/debug/pprof/":                  []byte("goroutine"),
		"/debug/pprof/profile?seconds=1": {0x1f, 0x8b}, // a gzipped profile
		"/debug/pprof/goroutine?debug=1": []byte("goroutine profile"),
	} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, want) {
			t.Errorf("GET %s = %d, %d bytes; want 200 with %q", path, resp.StatusCode, len(body), want)
		}
	}

	// Serving ends with the context too, and "" serves nothing.
	ctx, cancel := context.WithCancel(context.Background())
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr2 := ln2.Addr().String()
	ln2.Close()
	if _, err := Serve(ctx, addr2, m, nil, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	cancel()
	testenv.Eventually(t, time.Minute, func() error {
		if resp, err := http.Get("http://" + addr2 + "/metrics"); err == nil {
			resp.Body.Close()
			return fmt.Errorf("%s still serves after its context ended", addr2)
		}
		return nil
	})
	if stop, err := Serve(context.Background(), "", nil, nil, nil); err != nil || stop == nil {
		t.Errorf(`Serve on "" = %v; want nothing served and no error`, err)
	}
}
