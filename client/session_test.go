package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// These are unit tests of read-your-writes tokens against tokenAPI, which speaks the
// API's contract: Snapshot-Token on every answer, Snapshot-After honoured by waiting
// (here: not at all), 412 when no waiting can help, 503 when it could, 400 for a token
// it refuses.

// tokenVersion is one version tokenAPI can serve: its id and its snapshot token.
type tokenVersion struct{ id, token string }

var (
	tv1 = tokenVersion{"00000000-0000-4000-8000-000000000000-1", "s:10:10:"}
	tv2 = tokenVersion{"00000000-0000-4000-8000-000000000000-2", "s:20:20:"}
	tv3 = tokenVersion{"00000000-0000-4000-8000-000000000000-3", "s:30:30:"}
)

// sent is what tokenAPI saw of one request.
type sent struct {
	path, version, after, prefer string
	page                         bool // a list page after the first
}

type tokenAPI struct {
	*httptest.Server
	mu       sync.Mutex
	versions []tokenVersion // every version, for reads that name one
	current  tokenVersion
	pinned   bool
	ignore   bool   // answers as an API that knows no tokens (but names them)
	system   string // the source's system identifier: a token naming another is refused
	sent     []sent
}

func newTokenAPI(t *testing.T, current tokenVersion) *tokenAPI {
	t.Helper()
	a := &tokenAPI{versions: []tokenVersion{tv1, tv2, tv3}, current: current}
	a.Server = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.Close)
	return a
}

// set makes v current, pinned or not.
func (a *tokenAPI) set(v tokenVersion, pinned bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.current, a.pinned = v, pinned
}

// took returns the requests seen since the last call.
func (a *tokenAPI) took() []sent {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.sent
	a.sent = nil
	return out
}

// afters returns the Snapshot-After of each request seen since the last call.
func (a *tokenAPI) afters() []string {
	var out []string
	for _, s := range a.took() {
		out = append(out, s.after)
	}
	return out
}

func (a *tokenAPI) problem(w http.ResponseWriter, status int, kind string) {
	w.Header().Set("Content-Type", "application/problem+json")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":"https://snapflip.dev/problems/%s","title":"%s","status":%d}`, kind, kind, status)
}

func (a *tokenAPI) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	a.mu.Lock()
	a.sent = append(a.sent, sent{path: r.URL.Path, version: q.Get("version"), after: r.Header.Get(headerAfter),
		prefer: r.Header.Get("Prefer"), page: q.Get("page_token") != ""})
	v, pinned, ignore, system := a.current, a.pinned, a.ignore, a.system
	named := q.Get("version")
	if q.Get("page_token") != "" {
		named = q.Get("page_token")
	}
	if named != "" {
		i := slices.IndexFunc(a.versions, func(tv tokenVersion) bool { return tv.id == named })
		v = a.versions[i]
	}
	a.mu.Unlock()
	if after := r.Header.Get(headerAfter); after != "" && !ignore {
		tok, err := parseToken(after)
		if err != nil || system != "" && tok.system != "" && tok.system != system {
			a.problem(w, http.StatusBadRequest, "token-rejected")
			return
		}
		if s, _ := parseToken(v.token); !s.covers(tok) {
			if pinned || named != "" {
				a.problem(w, http.StatusPreconditionFailed, "token-not-covered")
			} else {
				a.problem(w, http.StatusServiceUnavailable, "token-not-yet-covered")
			}
			return
		}
	}
	w.Header().Set(HeaderVersion, v.id)
	w.Header().Set(HeaderToken, v.token)
	w.Header().Set("Content-Type", "application/json")
	var body any
	switch {
	case r.URL.Path == "/v1/versions/current":
		body = map[string]any{"version": v.id, "flipped_at": time.UnixMilli(1), "pinned": pinned, "token": 7,
			"snapshot_token": v.token, "covers": v.token}
	case strings.HasSuffix(r.URL.Path, ":batchGet"):
		body = map[string]any{"version": v.id, "documents": map[string]any{"a": map[string]int{}}, "missing": []string{}}
	case r.URL.Path == "/v1/data/c":
		next := v.id // two pages; the page token names the version
		if q.Get("page_token") != "" {
			next = ""
		}
		body = map[string]any{"version": v.id, "documents": []map[string]any{{"id": "a", "document": map[string]int{}}},
			"next_page_token": next}
	default:
		body = map[string]string{"id": "a"}
	}
	_ = json.NewEncoder(w).Encode(body)
}

// reads runs every kind of read through r, with opts, and returns their errors.
func reads(ctx context.Context, r reader, opts ...ReadOption) []error {
	_, err1 := r.Get(ctx, "c", "a", opts...)
	_, _, _, err2 := r.BatchGet(ctx, "c", []string{"a"}, opts...)
	var err3 error
	for _, err := range r.List(ctx, "c", ListOptions{}, opts...) {
		if err != nil {
			err3 = err
		}
	}
	return []error{err1, err2, err3}
}

// TestSessionToken: a client keeps the newest token it was answered with and sends it
// with every read of the current version (the first page or part of a read alone: the
// others name its version), never with a read that names a version; an older token
// answered never replaces it; After replaces it for one read, on every request of it;
// NoSessionToken sends none.
func TestSessionToken(t *testing.T) {
	ctx := context.Background()
	api := newTokenAPI(t, tv1)
	c := newClient(t, api.URL, nil)

	if _, err := c.Get(ctx, "c", "a"); err != nil {
		t.Fatal(err)
	}
	if got := api.afters(); !slices.Equal(got, []string{""}) || c.SessionToken() != tv1.token {
		t.Fatalf("first Get sent %q, session %q; want no token, then %q", got, c.SessionToken(), tv1.token)
	}
	for _, err := range reads(ctx, c) {
		if err != nil {
			t.Fatal(err)
		}
	}
	want := []sent{
		{path: "/v1/data/c/a", after: tv1.token},
		{path: "/v1/data/c:batchGet", after: tv1.token},
		{path: "/v1/data/c", after: tv1.token},
		{path: "/v1/data/c", page: true},
	}
	if diff := cmp.Diff(want, api.took(), cmp.AllowUnexported(sent{})); diff != "" {
		t.Errorf("reads of the current version sent (-want +got):\n%s", diff)
	}

	api.set(tv2, false)
	if _, err := c.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if got := api.afters(); !slices.Equal(got, []string{tv1.token}) || c.SessionToken() != tv2.token {
		t.Errorf("Snapshot sent %q, session %q; want %q, then %q", got, c.SessionToken(), tv1.token, tv2.token)
	}

	// An API that lags and knows no tokens answers from an older version: the
	// session's token stays.
	api.mu.Lock()
	api.ignore = true
	api.mu.Unlock()
	api.set(tv1, false)
	if _, err := c.Get(ctx, "c", "a"); err != nil {
		t.Fatal(err)
	}
	if got := c.SessionToken(); got != tv2.token {
		t.Errorf("after an answer from an older version, session %q; want %q kept", got, tv2.token)
	}
	api.mu.Lock()
	api.ignore = false
	api.mu.Unlock()
	api.set(tv2, false)
	api.took()

	// A Snapshot's reads name its version: no session token, which the version (the
	// caller's choice) need not cover.
	snap, err := c.Pin(tv1.id)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range reads(ctx, snap) {
		if err != nil {
			t.Errorf("a snapshot's read: %v", err)
		}
	}
	if got := api.afters(); !slices.Equal(got, []string{"", "", "", ""}) {
		t.Errorf("a snapshot's reads sent %q; want no token", got)
	}

	// After replaces the session's token on every request of a read.
	for _, r := range []reader{c, snap} {
		for _, err := range reads(ctx, r, After("x:5")) {
			if err != nil {
				t.Errorf("read After(x:5): %v", err)
			}
		}
		if got := api.afters(); !slices.Equal(got, []string{"x:5", "x:5", "x:5", "x:5"}) {
			t.Errorf("reads After(x:5) sent %q; want it on every request", got)
		}
	}

	off := newClient(t, api.URL, func(c *Config) { c.NoSessionToken = true })
	for range 2 {
		for _, err := range reads(ctx, off) {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := api.afters(); slices.ContainsFunc(got, func(s string) bool { return s != "" }) || off.SessionToken() != "" {
		t.Errorf("with NoSessionToken, reads sent %q, session %q; want nothing", got, off.SessionToken())
	}
}

// TestSessionFollowsRollback: a session token no version will cover (412: an operator
// pinned an older version; 400: the source is another cluster) is dropped, and the
// read sent again without it, once, and answered; a token given with After is not.
func TestSessionFollowsRollback(t *testing.T) {
	ctx := context.Background()
	api := newTokenAPI(t, tv2)
	c := newClient(t, api.URL, nil)
	if _, err := c.Get(ctx, "c", "a"); err != nil || c.SessionToken() != tv2.token {
		t.Fatalf("Get = %v, session %q; want %q", err, c.SessionToken(), tv2.token)
	}
	api.took()

	api.set(tv1, true) // rolled back
	for _, err := range reads(ctx, c) {
		if err != nil {
			t.Errorf("a read after a rollback below the session's token: %v; want it answered", err)
		}
	}
	if got, want := api.afters(), []string{tv2.token, "", tv1.token, tv1.token, ""}; !slices.Equal(got, want) {
		t.Errorf("reads after a rollback sent %q; want %q: dropped once, then the rolled-back version's", got, want)
	}

	_, err := c.Get(ctx, "c", "a", After(tv2.token))
	var e *Error
	if !errors.Is(err, ErrNotCovered) || !errors.As(err, &e) || e.Attempts != 1 || len(api.took()) != 1 {
		t.Errorf("Get After a token the pinned version does not cover = %v; want ErrNotCovered at once", err)
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotYetCovered) || errors.Is(err, ErrBadRequest) {
		t.Errorf("ErrNotCovered %v matches another sentinel", err)
	}
	snap, _ := c.Pin(tv1.id)
	if _, err := snap.Get(ctx, "c", "a", After(tv2.token)); !errors.Is(err, ErrNotCovered) {
		t.Errorf("a snapshot's Get After a token its version does not cover = %v; want ErrNotCovered", err)
	}
	if _, err := c.SnapshotAfter(ctx, tv2.token); !errors.Is(err, ErrNotCovered) {
		t.Errorf("SnapshotAfter a token the pinned version does not cover = %v; want ErrNotCovered", err)
	}
	api.took()

	// The source became another cluster: the session's token is refused.
	api.set(tv2, false)
	c.tokens.forget(c.SessionToken())
	c.tokens.learn(tv1.token + "@1")
	api.mu.Lock()
	api.system = "2"
	api.mu.Unlock()
	if _, err := c.Get(ctx, "c", "a"); err != nil {
		t.Errorf("Get with a session token of another cluster: %v; want it answered", err)
	}
	if got, want := api.afters(), []string{tv1.token + "@1", ""}; !slices.Equal(got, want) || c.SessionToken() != tv2.token {
		t.Errorf("Get with a session token of another cluster sent %q, session %q; want %q, then %q", got, c.SessionToken(), want, tv2.token)
	}
	if _, err := c.Get(ctx, "c", "a", After("x:5@1")); !errors.Is(err, ErrTokenRejected) || !errors.Is(err, ErrBadRequest) {
		t.Errorf("Get After a token of another cluster = %v; want ErrTokenRejected, ErrBadRequest", err)
	}
}

// TestTokenNotYetCovered: a 503 of the token type is ErrNotYetCovered (and
// ErrUnavailable), returned at once, not retried: the API waited already. A session
// token no version covered within the API's wait is dropped and the read sent again
// without it, once: a token cut to fit its size may name a transaction that stays
// open, and sending it again would be refused on every read until that ends.
func TestTokenNotYetCovered(t *testing.T) {
	ctx := context.Background()
	api := newTokenAPI(t, tv2)
	c := newClient(t, api.URL, nil)
	rec := &sleeps{}
	c.sleep = rec.sleep
	for i, err := range reads(ctx, c, After("x:25")) {
		var e *Error
		if !errors.Is(err, ErrNotYetCovered) || !errors.Is(err, ErrUnavailable) || !errors.As(err, &e) || e.Attempts != 1 {
			t.Errorf("read %d After a token no version covers yet = %v; want ErrNotYetCovered after one attempt", i, err)
		}
		if errors.Is(err, ErrNotCovered) || errors.Is(err, ErrBadRequest) {
			t.Errorf("ErrNotYetCovered %v matches another sentinel", err)
		}
	}
	if _, err := c.SnapshotAfter(ctx, "x:25"); !errors.Is(err, ErrNotYetCovered) {
		t.Errorf("SnapshotAfter a token no version covers yet = %v; want ErrNotYetCovered", err)
	}
	if got := api.afters(); len(got) != 4 || len(rec.waits) != 0 {
		t.Errorf("sent %d requests and waited %v for 4 reads; want one request each, no retries", len(got), rec.waits)
	}

	c.tokens.learn(tv3.token) // a token no version covers yet
	if _, err := c.Get(ctx, "c", "a"); err != nil || c.SessionToken() != tv2.token {
		t.Errorf("Get of a session token no version covers = %v, session %q; want it answered, the session %q", err, c.SessionToken(), tv2.token)
	}
	if got, want := api.afters(), []string{tv3.token, ""}; !slices.Equal(got, want) {
		t.Errorf("Get of a session token no version covers sent %q; want %q: refused once, then dropped", got, want)
	}

	api.set(tv3, false)
	s, err := c.SnapshotAfter(ctx, "x:25")
	if err != nil || s.Version() != tv3.id {
		t.Errorf("SnapshotAfter a covered token = %v, %v; want version %s", s, err, tv3.id)
	}
}

// TestTokenRejectedBeforeSending: a token that does not parse fails every read, and
// SnapshotAfter, with ErrTokenRejected and ErrBadRequest, without sending anything.
func TestTokenRejectedBeforeSending(t *testing.T) {
	ctx := context.Background()
	api := newTokenAPI(t, tv1)
	c := newClient(t, api.URL, nil)
	snap, _ := c.Pin(tv1.id)
	for _, bad := range []string{"", "nope", "740:750:", "x:0", "s:10:9:", strings.Repeat("x", 2000)} {
		errs := append(reads(ctx, c, After(bad)), reads(ctx, snap, After(bad))...)
		for _, err := range c.Query(ctx, "c", []Filter{Eq("f", 1)}, ListOptions{}, After(bad)) {
			errs = append(errs, err)
		}
		_, err := c.SnapshotAfter(ctx, bad)
		errs = append(errs, err)
		for i, err := range errs {
			if !errors.Is(err, ErrTokenRejected) || !errors.Is(err, ErrBadRequest) {
				t.Errorf("read %d After(%q) = %v; want ErrTokenRejected, ErrBadRequest", i, truncate(bad, 20), err)
			}
		}
	}
	if got := api.took(); len(got) != 0 {
		t.Errorf("sent %d requests with malformed tokens; want none", len(got))
	}
	for _, err := range c.Query(ctx, "c", []Filter{Eq("after", "x")}, ListOptions{}) {
		if !errors.Is(err, ErrBadRequest) {
			t.Errorf("Query on a field named after = %v; want ErrBadRequest (the API reads ?after= as a token)", err)
		}
	}
}

// TestPreferWait: a read with a token asks the API to wait less than its default when
// the attempt would end sooner, a second short of its end, and a second at least.
func TestPreferWait(t *testing.T) {
	for _, tc := range []struct {
		left time.Duration
		want int
		ask  bool
	}{
		{0, 1, true},
		{-time.Second, 1, true},
		{1500 * time.Millisecond, 1, true},
		{2999 * time.Millisecond, 1, true},
		{3 * time.Second, 2, true},
		{5999 * time.Millisecond, 4, true},
		{6 * time.Second, 0, false},
		{time.Minute, 0, false},
	} {
		if got, ask := preferWait(tc.left); got != tc.want || ask != tc.ask {
			t.Errorf("preferWait(%s) = %d, %v; want %d, %v", tc.left, got, ask, tc.want, tc.ask)
		}
	}

	api := newTokenAPI(t, tv1)
	c := newClient(t, api.URL, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	if _, err := c.Get(ctx, "c", "a", After("x:5")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(context.Background(), "c", "a", After("x:5")); err != nil { // the attempt's 10s
		t.Fatal(err)
	}
	short := newClient(t, api.URL, func(c *Config) { c.Timeout = 2 * time.Second })
	if _, err := short.Get(context.Background(), "c", "a", After("x:5")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range api.took() {
		got = append(got, s.prefer)
	}
	if want := []string{"wait=1", "", "wait=1"}; !slices.Equal(got, want) {
		t.Errorf("Prefer sent %q; want %q", got, want)
	}
}
