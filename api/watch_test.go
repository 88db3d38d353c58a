package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/snapshot"
)

// serveWatch serves h until the test ends and returns its URL.
func serveWatch(tb testing.TB, h http.Handler) string {
	tb.Helper()
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return srv.URL
}

// watchBlocks opens GET /v1/watch at url with Last-Event-ID last (when not empty) and
// returns its first n blocks, each as its lines. The end-to-end suite runs the stream
// against real flips; this checks what an event says of a manifest.
func watchBlocks(tb testing.TB, url, last string, n int) [][]string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/watch", nil)
	if err != nil {
		tb.Fatal(err)
	}
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); res.StatusCode != 200 || ct != "text/event-stream" {
		tb.Fatalf("GET /v1/watch = %d %s; want 200 text/event-stream", res.StatusCode, ct)
	}
	var blocks [][]string
	var block []string
	sc := bufio.NewScanner(res.Body)
	for len(blocks) < n && sc.Scan() {
		if sc.Text() != "" {
			block = append(block, sc.Text())
			continue
		}
		blocks = append(blocks, block)
		block = nil
	}
	if len(blocks) < n {
		tb.Fatalf("the stream ended after %d blocks (%v); want %d", len(blocks), sc.Err(), n)
	}
	return blocks
}

// TestWatchDescribesTheManifest: the first event is the current version, with its
// parent, and per collection its rows and the ids its own layer changed; its kind is
// child only against its parent, and base against anything else, a Last-Event-ID
// that is no version included; a Last-Event-ID naming it sends nothing.
func TestWatchDescribesTheManifest(t *testing.T) {
	f := &fakeReader{manifests: layeredManifests(time.Now())}
	s := serveWatch(t, newServer(t, f, func(c *api.Config) { c.WatchInterval = time.Millisecond }))
	type own struct {
		Layer                           string
		IDs, Inserted, Changed, Deleted int64
	}
	type event struct {
		Version, Parent string
		Kind            api.FlipKind
		Collections     map[string]struct {
			Rows int64
			Own  *own
		}
	}
	for _, tc := range []struct {
		last string
		kind api.FlipKind
	}{
		{"", api.FlipBase},
		{string(verDelta), api.FlipChild},
		{string(verBase), api.FlipBase},
		// Not a version: as if it named none.
		{"not-a-version", api.FlipBase},
		{string(verDelta) + "0", api.FlipBase},
		{strings.Repeat("x", 8<<10), api.FlipBase},
	} {
		blocks := watchBlocks(t, s, tc.last, 2)
		if diff := cmp.Diff([]string{"retry: 2000"}, blocks[0]); diff != "" {
			t.Errorf("first block (-want +got):\n%s", diff)
		}
		b := blocks[1]
		if len(b) != 3 || b[0] != "id: "+string(ver) || b[1] != "event: flip" || !strings.HasPrefix(b[2], "data: ") {
			t.Fatalf("Last-Event-ID %q: event %q; want id, event flip and data", tc.last, b)
		}
		var got event
		if err := json.Unmarshal([]byte(strings.TrimPrefix(b[2], "data: ")), &got); err != nil {
			t.Fatal(err)
		}
		if got.Version != string(ver) || got.Parent != string(verDelta) || got.Kind != tc.kind {
			t.Errorf("Last-Event-ID %q: version %s, parent %s, kind %q; want %s, %s, %q", tc.last, got.Version, got.Parent, got.Kind, ver, verDelta, tc.kind)
		}
		want := map[string]own{
			"orders": {Layer: "delta", IDs: 6, Inserted: 3, Changed: 2, Deleted: 1},
			"users":  {Layer: "base", IDs: 40, Inserted: 40},
			"tags":   {Layer: "none"},
		}
		for name, w := range want {
			if c := got.Collections[name]; c.Own == nil || !reflect.DeepEqual(*c.Own, w) {
				t.Errorf("collection %s: %+v; want own %+v", name, c.Own, w)
			}
		}
	}
	// Naming the current version: heartbeats, no event.
	beats := serveWatch(t, newServer(t, f, func(c *api.Config) { c.WatchInterval = time.Millisecond; c.WatchHeartbeat = 10 * time.Millisecond }))
	blocks := watchBlocks(t, beats, string(ver), 3)
	if diff := cmp.Diff([][]string{{"retry: 2000"}, {": ping"}, {": ping"}}, blocks); diff != "" {
		t.Errorf("Last-Event-ID the current version (-want +got):\n%s", diff)
	}
}

// TestWatchPinnedIsRollback: a flip to a pinned pointer is a rollback unless it is a
// child of the version the stream last named.
func TestWatchPinnedIsRollback(t *testing.T) {
	f := &pinnedReader{fakeReader{manifests: layeredManifests(time.Now())}}
	s := serveWatch(t, newServer(t, f, func(c *api.Config) { c.WatchInterval = time.Millisecond }))
	for _, tc := range []struct {
		last string
		kind api.FlipKind
	}{
		{"", api.FlipRollback},
		{string(verBase), api.FlipRollback},
		{string(verDelta), api.FlipChild},
	} {
		var got struct {
			Kind      api.FlipKind
			Pinned    bool
			PinReason string `json:"pin_reason"`
		}
		data := strings.TrimPrefix(watchBlocks(t, s, tc.last, 2)[1][2], "data: ")
		if err := json.Unmarshal([]byte(data), &got); err != nil {
			t.Fatal(err)
		}
		if got.Kind != tc.kind || !got.Pinned || got.PinReason != "bad import" {
			t.Errorf("Last-Event-ID %q: %s; want kind %q, pinned for \"bad import\"", tc.last, data, tc.kind)
		}
	}
}

// pinnedReader's pointer was rolled back.
type pinnedReader struct{ fakeReader }

func (p *pinnedReader) Pointer(context.Context) (snapshot.Pointer, error) {
	return snapshot.Pointer{Version: ver, Pinned: true, Reason: "bad import"}, nil
}

// TestWatchOutlivesWriteTimeout: a stream keeps going past the server's write timeout,
// which would otherwise cut it off at its first write after it.
func TestWatchOutlivesWriteTimeout(t *testing.T) {
	h := newServer(t, &fakeReader{}, func(c *api.Config) { c.WatchInterval = time.Millisecond; c.WatchHeartbeat = 20 * time.Millisecond })
	srv := httptest.NewUnstartedServer(h)
	srv.Config.WriteTimeout = 100 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	start := time.Now()
	blocks := watchBlocks(t, srv.URL, "", 22) // the retry hint, the event, 20 heartbeats: 400 ms at least
	if took := time.Since(start); took < 4*srv.Config.WriteTimeout {
		t.Fatalf("%d blocks within %s; want the stream to run past the write timeout of %s", len(blocks), took, srv.Config.WriteTimeout)
	}
	if last := blocks[len(blocks)-1]; len(last) != 1 || last[0] != ": ping" {
		t.Errorf("last block %q; want a heartbeat", last)
	}
}
