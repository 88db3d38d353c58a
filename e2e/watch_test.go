package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/resolver"
)

// watchEvent is the data of a /v1/watch flip event.
type watchEvent struct {
	Version     string       `json:"version"`
	Parent      string       `json:"parent"`
	Previous    string       `json:"previous"`
	Kind        api.FlipKind `json:"kind"`
	Pinned      bool         `json:"pinned"`
	PinReason   string       `json:"pin_reason"`
	Collections map[string]struct {
		Rows int64 `json:"rows"`
		Own  *struct {
			Layer                           string
			IDs, Inserted, Changed, Deleted int64
		} `json:"own"`
	} `json:"collections"`
}

// watchStream is an open GET /v1/watch, its body read block by block on a goroutine of
// its own.
type watchStream struct {
	req    *http.Request
	resp   *http.Response
	cancel context.CancelFunc
	blocks chan sseEvent // every block, in order; closed when the body ends
	once   sync.Once

	mu  sync.Mutex
	raw []byte // the body read so far, for the OpenAPI check
}

// openWatch opens GET /v1/watch at base, sending Last-Event-ID when lastID is not
// empty, and fails the test unless it answers 200. The stream is closed, and checked
// against the OpenAPI document, when the test ends if not before.
func openWatch(tb testing.TB, base, lastID string) *watchStream {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/watch", nil)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		tb.Fatalf("GET /v1/watch: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		tb.Fatalf("GET /v1/watch = %d %s; want 200", resp.StatusCode, body)
	}
	ws := &watchStream{req: req, resp: resp, cancel: cancel, blocks: make(chan sseEvent, 10_000)}
	go ws.read()
	tb.Cleanup(func() { ws.close(tb) })
	return ws
}

func (ws *watchStream) read() {
	defer close(ws.blocks)
	var pending []byte
	buf := make([]byte, 4096)
	for {
		n, err := ws.resp.Body.Read(buf)
		ws.mu.Lock()
		ws.raw = append(ws.raw, buf[:n]...)
		ws.mu.Unlock()
		var blocks []sseEvent
		blocks, pending = splitEvents(append(pending, buf[:n]...))
		for _, b := range blocks {
			ws.blocks <- b
		}
		if err != nil {
			return
		}
	}
}

// close hangs up, as a client that goes away, and checks what was read against the
// OpenAPI document.
func (ws *watchStream) close(tb testing.TB) {
	tb.Helper()
	ws.once.Do(func() {
		ws.cancel()
		for range ws.blocks {
		}
		ws.resp.Body.Close()
		ws.mu.Lock()
		raw := ws.raw
		ws.mu.Unlock()
		checkOpenAPI(tb, ws.req, nil, ws.resp, raw)
	})
}

// block returns the next block, failing the test after timeout or when the stream ends
// first.
func (ws *watchStream) block(tb testing.TB, timeout time.Duration) sseEvent {
	tb.Helper()
	select {
	case b, ok := <-ws.blocks:
		if !ok {
			tb.Fatal("the watch stream ended")
		}
		return b
	case <-time.After(timeout):
		tb.Fatalf("nothing on the watch stream within %s", timeout)
	}
	return sseEvent{}
}

// next returns the next event (skipping the retry hint and heartbeats).
func (ws *watchStream) next(tb testing.TB) sseEvent {
	tb.Helper()
	for {
		if b := ws.block(tb, 10*time.Second); b.hasData {
			return b
		}
	}
}

// flip returns the next event, decoded, after checking its framing.
func (ws *watchStream) flip(tb testing.TB) watchEvent {
	tb.Helper()
	return decodeFlip(tb, ws.next(tb))
}

func decodeFlip(tb testing.TB, b sseEvent) watchEvent {
	tb.Helper()
	var ev watchEvent
	if err := json.Unmarshal([]byte(b.data), &ev); err != nil {
		tb.Fatalf("event data %q: %v", b.data, err)
	}
	if b.event != "flip" || b.id != ev.Version {
		tb.Errorf("event %q with id %q for version %s; want a flip event whose id is its version", b.event, b.id, ev.Version)
	}
	return ev
}

// awaitEnd waits for the server to end the stream.
func (ws *watchStream) awaitEnd(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case _, ok := <-ws.blocks:
			if !ok {
				return
			}
		case <-deadline:
			tb.Fatalf("the watch stream still runs after %s", timeout)
		}
	}
}

// checkFlip compares an event's lineage with what is wanted.
func checkFlip(tb testing.TB, what string, got watchEvent, version string, kind api.FlipKind, parent, previous string) {
	tb.Helper()
	if got.Version != version || got.Kind != kind || got.Parent != parent || got.Previous != previous {
		tb.Errorf("%s: event for %s, kind %q, parent %q, previous %q; want %s, %q, %q, %q",
			what, got.Version, got.Kind, got.Parent, got.Previous, version, kind, parent, previous)
	}
}

// TestWatchFlips: two API replicas on the same store stream every flip, in order, as
// identical events: the first version (base), deltas (child, with the ids each
// collection's layer changed), a rollback, a full copy (base); an unpin, which moves no
// version, sends nothing. A read sent on receipt of an event is served from its
// version. Shutting a replica down ends its stream at once.
func TestWatchFlips(t *testing.T) {
	t.Parallel()
	e := start(t)
	first := e.Base
	e.startAPI(t) // a second replica
	replicas := []*watchStream{openWatch(t, first, ""), openWatch(t, e.Base, "")}
	for i, ws := range replicas {
		if b := ws.block(t, 10*time.Second); b.retry != "2000" {
			t.Errorf("replica %d: the stream starts with %+v; want the retry hint", i, b)
		}
	}
	// await returns the next event, which both replicas must send alike, and only once
	// they serve its version: a read sent to either on receipt is answered from it.
	await := func(what string) watchEvent {
		t.Helper()
		a, b := replicas[0].next(t), replicas[1].next(t)
		if a.id != b.id || a.event != b.event || a.data != b.data {
			t.Fatalf("%s: the replicas disagree:\n%+v\n%+v", what, a, b)
		}
		for i, base := range []string{first, e.Base} {
			req, err := http.NewRequest(http.MethodGet, base+"/v1/data/things/plain", nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp, body := callAPI(t, req); resp.Header.Get(api.HeaderVersion) != a.id {
				t.Errorf("%s: a read from replica %d on receipt of the event for %s = %d from %q %s; want it from that version",
					what, i, a.id, resp.StatusCode, resp.Header.Get(api.HeaderVersion), body)
			}
		}
		return decodeFlip(t, a)
	}
	publish := func() string {
		t.Helper()
		out, err := e.sync(t)
		if err != nil {
			t.Fatal(err)
		}
		return stack.PublishedVersion(t, out)
	}

	v1 := publish()
	ev := await("the first version")
	checkFlip(t, "the first version", ev, v1, api.FlipBase, "", "")
	if own := ev.Collections["things"].Own; own == nil || own.Layer != "base" || own.Inserted != int64(len(awkwardIDs)) {
		t.Errorf("the first version's things: %+v; want a base inserting %d ids", ev.Collections["things"], len(awkwardIDs))
	}

	testenv.Exec(t, e.DSN, `UPDATE things SET note = 'edited' WHERE id = 'plain'`)
	v2 := publish()
	ev = await("a delta")
	checkFlip(t, "a delta", ev, v2, api.FlipChild, v1, v1)
	if own := ev.Collections["things"].Own; own == nil || own.Layer != "delta" || own.IDs != 1 || own.Changed != 1 {
		t.Errorf("a delta changing one row: things %+v; want a delta of 1 changed id", own)
	}
	if own := ev.Collections["flags"].Own; own == nil || own.Layer != "none" || own.IDs != 0 {
		t.Errorf("a delta changing no flag: flags %+v; want no layer", own)
	}

	testenv.Exec(t, e.DSN, `DELETE FROM things WHERE id = 'a#b'`)
	v3 := publish()
	ev = await("a deletion")
	checkFlip(t, "a deletion", ev, v3, api.FlipChild, v2, v2)
	if own := ev.Collections["things"].Own; own == nil || own.IDs != 1 || own.Deleted != 1 {
		t.Errorf("a delta deleting one row: things %+v; want 1 deleted id", own)
	}

	if out, err := e.syncerCmd(t, "rollback", "--previous", "--reason", "bad import"); err != nil {
		t.Fatalf("rollback: %v %s", err, out)
	}
	ev = await("a rollback")
	checkFlip(t, "a rollback", ev, v2, api.FlipRollback, v1, v3)
	if !ev.Pinned || ev.PinReason != "bad import" {
		t.Errorf("a rollback: pinned %v, reason %q; want pinned for \"bad import\"", ev.Pinned, ev.PinReason)
	}

	if out, err := e.syncerCmd(t, "unpin", "--reason", "fixed"); err != nil {
		t.Fatalf("unpin: %v %s", err, out)
	}
	writeConfig(t, e, "versions: full\n"+config)
	testenv.Exec(t, e.DSN, `UPDATE things SET gen = 5`)
	v4 := publish()
	ev = await("a full copy") // the unpin, which kept v2, said nothing
	checkFlip(t, "a full copy", ev, v4, api.FlipBase, "", v2)
	if c := ev.Collections["things"]; ev.Pinned || c.Own != nil || c.Rows != int64(len(awkwardIDs)-1) {
		t.Errorf("a full copy: pinned %v, things %+v; want unpinned, %d rows and no layer", ev.Pinned, c, len(awkwardIDs)-1)
	}

	// Shutdown ends the stream as the drain starts, instead of waiting out the drain.
	began := time.Now()
	e.StopAPI()
	replicas[1].awaitEnd(t, 5*time.Second)
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the replica took %s to shut down with a watch open", took)
	}
}

// TestWatchResume: a client reconnecting with Last-Event-ID gets nothing while it holds
// the current version, and otherwise the current version with a kind that says
// whether it follows from the one it holds.
func TestWatchResume(t *testing.T) {
	t.Parallel()
	e := start(t)
	vs := e.publishGens(t, 1, 2, 3)
	e.awaitVersion(t, "/v1/versions/current", vs[2])
	current := openWatch(t, e.Base, vs[2])
	for _, tc := range []struct {
		what, last string
		kind       api.FlipKind
	}{
		{"the parent", vs[1], api.FlipChild},
		{"an older version", vs[0], api.FlipBase},
		{"nothing", "", api.FlipBase},
		{"not a version", "not-a-version", api.FlipBase},
	} {
		ev := openWatch(t, e.Base, tc.last).flip(t)
		checkFlip(t, "Last-Event-ID "+tc.what, ev, vs[2], tc.kind, vs[1], vs[1])
	}
	// The stream that named the current version said nothing: the next flip is its
	// first event.
	v4 := e.publishGens(t, 4)[0]
	checkFlip(t, "Last-Event-ID the current version", current.flip(t), v4, api.FlipChild, vs[2], vs[2])
}

// watchers returns the snapflip_api_watchers gauge the API serves.
func watchers(tb testing.TB, e *env) string {
	tb.Helper()
	r := e.get(tb, "/metrics")
	for line := range strings.SplitSeq(string(r.body), "\n") {
		if v, ok := strings.CutPrefix(line, "snapflip_api_watchers "); ok {
			return v
		}
	}
	tb.Fatalf("/metrics has no snapflip_api_watchers")
	return ""
}

// TestWatchLimit: past --max-watchers a watch answers 503 with Retry-After; a client
// that goes away frees its slot.
func TestWatchLimit(t *testing.T) {
	t.Parallel()
	e := start(t)
	e.startAPIWith(t, []string{"--max-watchers", "2"})
	a := openWatch(t, e.Base, "")
	openWatch(t, e.Base, "")
	req, err := http.NewRequest(http.MethodGet, e.Base+"/v1/watch", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, body := callAPI(t, req)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("a third watch = %d, Retry-After %q, %s; want a 503 problem with Retry-After",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if got := watchers(t, e); got != "2" {
		t.Errorf("snapflip_api_watchers = %s; want 2", got)
	}
	a.close(t)
	testenv.Eventually(t, time.Minute, func() error {
		if got := watchers(t, e); got != "1" {
			return fmt.Errorf("snapflip_api_watchers = %s after a client went away; want 1", got)
		}
		return nil
	})
	openWatch(t, e.Base, "") // the freed slot
}

// watchGoroutines returns the stacks of goroutines running a watch or its broadcaster.
func watchGoroutines() []string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "api.(*Server).watch(") || strings.Contains(g, "api.(*broadcaster).run(") {
			out = append(out, g)
		}
	}
	return out
}

// TestWatchHeartbeatsCloseAndLeaks: an idle stream gets heartbeats; once its clients go
// away no goroutine of the watch is left; CloseWatches (the shutdown's) ends open
// streams and refuses new ones. Not parallel: it counts goroutines.
func TestWatchHeartbeatsCloseAndLeaks(t *testing.T) {
	e := start(t)
	out, err := e.sync(t)
	if err != nil {
		t.Fatal(err)
	}
	v1 := stack.PublishedVersion(t, out)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	res, err := resolver.New("e2e", st, resolver.Config{Refresh: 20 * time.Millisecond, Layers: layer.NewReader(st, "e2e")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	go res.Run(ctx)
	cfg := api.DefaultConfig()
	cfg.WatchHeartbeat, cfg.WatchInterval, cfg.Registry = 20*time.Millisecond, 10*time.Millisecond, prometheus.NewRegistry()
	s, err := api.NewServer(res, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	var streams []*watchStream
	for range 5 {
		streams = append(streams, openWatch(t, srv.URL, ""))
	}
	for i, ws := range streams {
		if ev := ws.flip(t); ev.Version != v1 {
			t.Errorf("stream %d: first event for %s; want the current version %s", i, ev.Version, v1)
		}
		for b := ws.block(t, 10*time.Second); len(b.comments) == 0 || b.comments[0] != "ping"; b = ws.block(t, 10*time.Second) {
			if b.hasData {
				t.Errorf("stream %d: an event %+v with nothing flipped; want heartbeats only", i, b)
			}
		}
	}
	for _, ws := range streams {
		ws.close(t)
	}
	noWatchGoroutines := func() error {
		if g := watchGoroutines(); len(g) > 0 {
			return fmt.Errorf("%d watch goroutines left after every client went away:\n%s", len(g), strings.Join(g, "\n\n"))
		}
		return nil
	}
	testenv.Eventually(t, time.Minute, noWatchGoroutines)

	ws := openWatch(t, srv.URL, "")
	ws.flip(t)
	s.CloseWatches()
	ws.awaitEnd(t, 5*time.Second)
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/watch", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := callAPI(t, req); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a watch after CloseWatches = %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	testenv.Eventually(t, time.Minute, noWatchGoroutines)
}
