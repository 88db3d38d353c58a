package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// flipAPI stands in for the metadata API with what a replica asks for, and the
// tokens of the flip stream: the current pointer, a version's only document, a
// version's changes (always "base": the replica reloads), and the flip stream, which
// sends the current flip, then the events the test pushes.
type flipAPI struct {
	*httptest.Server
	mu      sync.Mutex
	cur     flipVersion
	flips   int // flipped_at of the next flip, in milliseconds
	pending chan string
}

// flipVersion is a pointer of flipAPI: version n, with its tokens.
type flipVersion struct {
	n             int
	token, covers string
	pinned        bool
	flippedAt     int
}

func flipID(n int) string {
	return fmt.Sprintf("00000000-0000-4000-8000-000000000000-%d", 1767225600000+n)
}

func newFlipAPI(t *testing.T, first flipVersion) *flipAPI {
	t.Helper()
	a := &flipAPI{cur: first, flips: 1, pending: make(chan string, 16)}
	a.cur.flippedAt = 1
	a.Server = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.Close)
	return a
}

// event is the data of the version's flip event.
func (v flipVersion) event() string {
	b, _ := json.Marshal(map[string]any{"version": flipID(v.n), "flipped_at": time.UnixMilli(int64(v.flippedAt)),
		"pinned": v.pinned, "token": v.token, "covers": v.covers, "kind": "base"})
	return string(b)
}

// current is the body of GET /v1/versions/current naming the version, where "token"
// is the publish lease's fence, and the snapshot's token is "snapshot_token".
func (v flipVersion) current() string {
	b, _ := json.Marshal(map[string]any{"version": flipID(v.n), "flipped_at": time.UnixMilli(int64(v.flippedAt)),
		"pinned": v.pinned, "token": 7, "snapshot_token": v.token, "covers": v.covers})
	return string(b)
}

// flip makes v current and tells the stream.
func (a *flipAPI) flip(v flipVersion) {
	a.mu.Lock()
	a.flips++
	v.flippedAt = a.flips
	a.cur = v
	a.mu.Unlock()
	a.pending <- "id: " + flipID(v.n) + "\nevent: flip\ndata: " + v.event() + "\n\n"
}

// cover tells the stream that version n covers a snapshot, without a flip.
func (a *flipAPI) cover(n int, covers string) {
	a.pending <- fmt.Sprintf("event: covered\ndata: {\"version\":%q,\"covers\":%q}\n\n", flipID(n), covers)
}

func (a *flipAPI) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	cur := a.cur
	a.mu.Unlock()
	switch {
	case r.URL.Path == "/v1/versions/current":
		fmt.Fprint(w, cur.current())
	case r.URL.Path == "/v1/watch":
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "id: %s\nevent: flip\ndata: %s\n\n", flipID(cur.n), cur.event())
		for {
			w.(http.Flusher).Flush()
			select {
			case ev := <-a.pending:
				fmt.Fprint(w, ev)
			case <-r.Context().Done():
				return
			}
		}
	case r.URL.Path == "/v1/data/t":
		v := r.URL.Query().Get("version")
		fmt.Fprintf(w, `{"version":%q,"documents":[{"id":"a","document":{"v":%q}}]}`, v, v)
	case strings.HasSuffix(r.URL.Path, "/changes/t"):
		fmt.Fprint(w, `{"kind":"base","changes":[]}`)
	default:
		http.NotFound(w, r)
	}
}

// waited is what a WaitFor returned.
type waited struct {
	version string
	err     error
}

// waitFor runs WaitFor in a goroutine; its result comes on the channel.
func waitFor(ctx context.Context, r *Replica, tok string) <-chan waited {
	out := make(chan waited, 1)
	go func() {
		v, err := r.WaitFor(ctx, tok)
		out <- waited{v.Version(), err}
	}()
	return out
}

func receive[T any](tb testing.TB, c <-chan T, what string) T {
	tb.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(30 * time.Second):
		tb.Fatalf("no %s within 30s", what)
		panic("unreachable")
	}
}

// TestWaitFor: WaitFor returns a view at once when the version held covers the token,
// by its own snapshot or by what it is known to cover; else when a covered event
// proves the version held covers it, or a flip brings one that does; it fails at
// once when the dataset is pinned below the token, when ctx ends first, for a
// token that does not parse, and once the replica is closed.
func TestWaitFor(t *testing.T) {
	ctx := context.Background()
	api := newFlipAPI(t, flipVersion{n: 1, token: "s:10:10:"})
	flipped := make(chan string, 16)
	cfg := DefaultReplicaConfig()
	cfg.Collections = []string{"t"}
	cfg.OnFlip = func(v string) { flipped <- v }
	c := newClient(t, api.URL, nil)
	r, err := NewReplica(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	receive(t, flipped, "first load")
	// A poll reads the same tokens as the stream, "token" there being the fence.
	if p, err := c.current(ctx, consistency{}); err != nil || p.Token != "s:10:10:" || p.coverage() != "s:10:10:" {
		t.Errorf("current = %+v, %v; want token s:10:10:", p, err)
	}

	for _, tok := range []string{"x:9", "x:5@42", "s:10:10:", "s:5:8:6"} {
		v, err := r.WaitFor(ctx, tok)
		if doc, _ := v.Get("t", "a"); err != nil || v.Version() != flipID(1) || !strings.Contains(string(doc.JSON), flipID(1)) {
			t.Errorf("WaitFor(%s) = %q, %v; want a view of version 1 at once", tok, v.Version(), err)
		}
	}
	for _, tok := range []string{"", "nope", "x:0", "740:750:"} {
		if _, err := r.WaitFor(ctx, tok); !errors.Is(err, ErrTokenRejected) || !errors.Is(err, ErrBadRequest) {
			t.Errorf("WaitFor(%q) = %v; want ErrTokenRejected, ErrBadRequest", tok, err)
		}
	}

	// Not covered: nothing is held meanwhile, and ctx bounds the wait.
	want, _ := parseToken("x:12")
	if w := r.await(want); w.outcome != waitMore || w.view.st != nil {
		t.Errorf("await(x:12) at version 1 = outcome %d, holding %v; want waitMore, holding nothing", w.outcome, w.view.st != nil)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = r.WaitFor(short, "x:12")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitFor(x:12) with a 20ms context = %v; want context.DeadlineExceeded", err)
	}

	// A covered event: the version held covers more, no flip needed.
	wait := waitFor(ctx, r, "x:12")
	api.cover(1, "s:13:13:")
	if got := receive(t, wait, "WaitFor(x:12)"); got.err != nil || got.version != flipID(1) {
		t.Errorf("WaitFor(x:12), then covered 13 = %+v; want version 1", got)
	}
	if n := r.Stats().Flips; n != 0 {
		t.Errorf("%d flips; want none", n)
	}

	// A flip to a version that covers the token.
	wait = waitFor(ctx, r, "x:20")
	api.flip(flipVersion{n: 2, token: "s:21:21:"})
	if got := receive(t, wait, "WaitFor(x:20)"); got.err != nil || got.version != flipID(2) {
		t.Errorf("WaitFor(x:20), then a flip to 2 = %+v; want version 2", got)
	}
	receive(t, flipped, "flip to 2")

	// A flip names what its version covers beyond its own snapshot.
	api.flip(flipVersion{n: 3, token: "s:25:25:", covers: "s:30:30:"})
	receive(t, flipped, "flip to 3")
	if v, err := r.WaitFor(ctx, "x:28"); err != nil || v.Version() != flipID(3) {
		t.Errorf("WaitFor(x:28) at version 3 covering 30 = %q, %v; want version 3 at once", v.Version(), err)
	}

	// An operator rolls back to version 1 and pins it: a token it does not cover
	// fails, also one waited for before; one it covers is served.
	wait = waitFor(ctx, r, "x:40")
	api.flip(flipVersion{n: 1, token: "s:10:10:", covers: "s:13:13:", pinned: true})
	if got := receive(t, wait, "WaitFor(x:40)"); !errors.Is(got.err, ErrPinned) || !errors.Is(got.err, ErrNotCovered) {
		t.Errorf("WaitFor(x:40), then a rollback to 1 = %+v; want ErrPinned, ErrNotCovered", got)
	}
	receive(t, flipped, "rollback to 1")
	if _, err := r.WaitFor(ctx, "x:20"); !errors.Is(err, ErrPinned) {
		t.Errorf("WaitFor(x:20) pinned at version 1 = %v; want ErrPinned", err)
	}
	if v, err := r.WaitFor(ctx, "x:12"); err != nil || v.Version() != flipID(1) {
		t.Errorf("WaitFor(x:12) pinned at version 1 covering 13 = %q, %v; want version 1", v.Version(), err)
	}

	api.flip(flipVersion{n: 4, token: "s:50:50:"}) // the next sync's, unpinned
	receive(t, flipped, "flip to 4")
	wait = waitFor(ctx, r, "x:99")
	r.Close()
	if got := receive(t, wait, "WaitFor(x:99) on a closed replica"); !errors.Is(got.err, errReplicaClosed) {
		t.Errorf("WaitFor(x:99), then Close = %+v; want errReplicaClosed", got)
	}
}

// TestAwaitToken: what WaitFor makes of a token, the version held's coverage and the
// newest pointer.
func TestAwaitToken(t *testing.T) {
	p := func(token, covers string, pinned bool) pointer {
		return pointer{Version: parseVersion(flipID(1)), Token: token, Covers: covers, Pinned: pinned}
	}
	for _, tc := range []struct {
		name   string
		want   string
		held   string
		newest pointer
		out    waitOutcome
	}{
		{"nothing held, nothing known", "x:5", "", pointer{}, waitMore},
		{"held covers", "x:5", "s:10:10:", p("s:10:10:", "", false), waitCovered},
		{"held covers, pinned", "x:5", "s:10:10:", p("s:10:10:", "", true), waitCovered},
		{"held does not, newest not yet held", "x:15", "s:10:10:", p("s:20:20:", "", false), waitMore},
		{"held does not, newest pinned covers", "x:15", "s:10:10:", p("s:20:20:", "", true), waitMore},
		{"held does not, newest pinned covers by its covers", "x:15", "s:10:10:", p("s:12:12:", "s:20:20:", true), waitMore},
		{"pinned below", "x:15", "s:10:10:", p("s:10:10:", "", true), waitPinned},
		{"pinned below, not held yet", "x:15", "", p("s:10:10:", "", true), waitPinned},
		{"pinned, an API without tokens", "x:15", "", p("", "", true), waitMore},
		{"another cluster's token", "x:5@2", "s:10:10:@1", p("s:10:10:@1", "", false), waitForeign},
		{"another cluster's, nothing held", "x:5@2", "", p("s:10:10:@1", "", false), waitForeign},
		{"a 32-bit id past epoch 0", "x:725", "s:4294968000:4294968000:", p("s:4294968000:4294968000:", "", false), waitNarrow},
		{"a 32-bit id past epoch 0, nothing held", "x:725", "", p("s:4294968000:4294968000:", "", false), waitNarrow},
		{"a 64-bit id past epoch 0", "x:4294967900", "s:4294968000:4294968000:", p("s:4294968000:4294968000:", "", false), waitCovered},
		{"a cluster named on one side", "x:5@2", "s:10:10:", p("s:10:10:", "", false), waitCovered},
		// A republish at the same position: the token names the newest version, which
		// the replica has not swapped in; the one held ties with it.
		{"a tie with the newest, not held yet", "s:10:10:~" + flipID(1), "s:10:10:~" + flipID(0), p("s:10:10:~"+flipID(1), "", false), waitMore},
		{"a tie with the version held", "s:10:10:~" + flipID(1), "s:10:10:~" + flipID(1), p("s:10:10:~"+flipID(1), "", false), waitCovered},
		{"a tie with an older version than the held", "s:10:10:~" + flipID(0), "s:10:10:~" + flipID(1), p("s:10:10:~"+flipID(1), "", false), waitCovered},
		{"past the held, another version", "s:9:9:~" + flipID(1), "s:10:10:~" + flipID(0), p("s:10:10:~"+flipID(1), "", false), waitCovered},
	} {
		want, err := parseToken(tc.want)
		if err != nil {
			t.Fatal(err)
		}
		if got := awaitToken(want, tc.held, tc.newest); got != tc.out {
			t.Errorf("%s: awaitToken = %d; want %d", tc.name, got, tc.out)
		}
	}
}
