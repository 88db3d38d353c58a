package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"

	"github.com/snapflip/snapflip/internal/retry"
)

// flakyProxy stands in front of the real API: it hangs up on the next `drop`
// connections without answering (hijacks and closes them), holds the next `stall`
// requests without answering until the client gives up on them, and proxies the
// rest.
type flakyProxy struct {
	*httptest.Server
	drop, stall atomic.Int64
	dropped     atomic.Int64
}

func newFlakyProxy(tb testing.TB, upstream string) *flakyProxy {
	tb.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		tb.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	p := &flakyProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.drop.Add(-1) >= 0 {
			p.dropped.Add(1)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			_ = conn.Close()
			return
		}
		if p.stall.Add(-1) >= 0 {
			<-r.Context().Done()
			return
		}
		rp.ServeHTTP(w, r)
	}))
	tb.Cleanup(p.Close)
	return p
}

// TestTransportErrorsRetried: connections closed without an answer, and attempts that
// outlive the per-attempt timeout, are retried for every kind of read, POST batchGet
// included; when no attempt gets an answer, the client gives up after its attempts
// with ErrUnavailable and the cause.
func TestTransportErrorsRetried(t *testing.T) {
	e := start(t, config)
	v := e.sync(t)
	e.await(t, v)
	ctx := context.Background()
	p := newFlakyProxy(t, e.Base)
	// No keep-alives: every attempt is a new connection, so http.Transport never
	// retries one on its own and the recorder sees each attempt.
	rec := newRecorder(&http.Transport{DisableKeepAlives: true})
	c := newClient(t, p.URL, func(c *Config) {
		c.HTTPClient = &http.Client{Transport: rec}
		c.Retry.InitialBackoff = time.Millisecond
		c.Retry.MaxBackoff = 10 * time.Millisecond
		c.Timeout = 5 * time.Second // an attempt cut off by it is the stall below alone
	})
	// attempts returns what the recorder saw: errors (status 0) then the last status.
	attempts := func() []int { return statuses(rec.exchanges()) }

	p.drop.Store(3)
	d, err := c.Get(ctx, "docs", "a/b")
	if err != nil || d.Version != v {
		t.Errorf("Get through 3 dropped connections = %v; want the document from %s", err, v)
	}
	if got := attempts(); !slices.Equal(got, []int{0, 0, 0, 200}) {
		t.Errorf("Get through 3 dropped connections: attempts %v; want 3 failures and a 200", got)
	}

	p.drop.Store(2)
	docs, _, got, err := c.BatchGet(ctx, "docs", []string{"plain", "a/b"})
	if err != nil || got != v || len(docs) != 2 {
		t.Errorf("BatchGet through 2 dropped connections = %d docs from %s, %v; want 2 from %s", len(docs), got, err, v)
	}
	if got := attempts(); !slices.Equal(got, []int{0, 0, 200}) {
		t.Errorf("BatchGet through 2 dropped connections: attempts %v; want 2 failures and a 200", got)
	}

	n := 0
	for d, err := range c.List(ctx, "docs", ListOptions{PageSize: 20}) {
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if n++; n == 20 {
			p.drop.Store(1) // the second page's first attempt
		}
		if d.Version != v {
			t.Errorf("listed %q from %s; want %s", d.ID, d.Version, v)
		}
	}
	if got := attempts(); !slices.Equal(got[:3], []int{200, 0, 200}) {
		t.Errorf("List with the second page's connection dropped: attempts %v; want 200, a failure, 200...", got)
	}

	p.stall.Store(1)
	if d, err := c.Get(ctx, "docs", "plain"); err != nil || d.Version != v {
		t.Errorf("Get whose first attempt times out = %v; want the document", err)
	}
	if got := attempts(); !slices.Equal(got, []int{0, 200}) {
		t.Errorf("Get whose first attempt times out: attempts %v; want a failure and a 200", got)
	}

	p.drop.Store(100)
	p.dropped.Store(0)
	_, err = c.Get(ctx, "docs", "plain")
	var ae *Error
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ae) || ae.StatusCode != 0 || ae.Attempts != 4 || ae.Err == nil {
		t.Errorf("Get when every connection is dropped = %v; want ErrUnavailable without a status after 4 attempts, with the cause", err)
	}
	if got := p.dropped.Load(); got != 4 {
		t.Errorf("Get when every connection is dropped made %d connections; want 4 (the policy's attempts)", got)
	}
	rec.exchanges()

	// The context ends the retries.
	cctx, cancel := context.WithCancel(ctx)
	c.sleep = func(ctx context.Context, d time.Duration) error { cancel(); return retry.Sleep(ctx, d) }
	_, err = c.Get(cctx, "docs", "plain")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Get cancelled while waiting to retry = %v; want context.Canceled", err)
	}
	if got := attempts(); len(got) != 1 {
		t.Errorf("Get cancelled while waiting to retry: %d attempts; want 1", len(got))
	}
}

// TestETagRevalidation: with the cache on, a second Get of a document revalidates it
// with If-None-Match and is answered 304, served from the cache with the version the
// 304 names, also across a flip that left the document unchanged; a changed document
// is read again.
func TestETagRevalidation(t *testing.T) {
	e := start(t, config)
	v1 := e.sync(t)
	e.await(t, v1)
	ctx := context.Background()
	rec := newRecorder(nil)
	c := newClient(t, e.Base, func(c *Config) { c.HTTPClient = &http.Client{Transport: rec}; c.CacheBytes = 1 << 20 })

	get := func(r reader, id string, wantStatus int, wantVersion string) Document {
		t.Helper()
		d, err := r.Get(ctx, "docs", id)
		if err != nil || d.Version != wantVersion {
			t.Fatalf("Get(%q) = %s from %s, %v; want %s", id, d.JSON, d.Version, err, wantVersion)
		}
		xs := rec.exchanges()
		if len(xs) != 1 || xs[0].status != wantStatus {
			t.Fatalf("Get(%q): exchanges %+v; want one answered %d", id, xs, wantStatus)
		}
		if wantStatus == http.StatusNotModified && xs[0].ifNoneMatch != d.ETag {
			t.Errorf("Get(%q) sent If-None-Match %q; want the ETag %q", id, xs[0].ifNoneMatch, d.ETag)
		}
		return d
	}
	d1 := get(c, "a/b", 200, v1)
	d2 := get(c, "a/b", 304, v1)
	if string(d2.JSON) != string(d1.JSON) || d2.ETag != d1.ETag || d2.ID != "a/b" {
		t.Errorf("revalidated Get = %+v; want %+v", d2, d1)
	}
	d2.JSON[0] = 'X' // the caller's copy, not the cache's
	if d := get(c, "a/b", 304, v1); string(d.JSON) != string(d1.JSON) {
		t.Errorf("after the caller modified its copy, Get = %s; want %s", d.JSON, d1.JSON)
	}

	// A flip that leaves a/b as it was: still a 304, now from the new version.
	testenv.Exec(t, e.DSN, `UPDATE docs SET gen = 1 WHERE id = 'plain'`)
	v2 := e.sync(t)
	e.await(t, v2)
	if d := get(c, "a/b", 304, v2); string(d.JSON) != string(d1.JSON) {
		t.Errorf("unchanged document after a flip = %s; want %s", d.JSON, d1.JSON)
	}

	// A flip that changes it: read again, then revalidated again.
	testenv.Exec(t, e.DSN, `UPDATE docs SET gen = 2 WHERE id = 'a/b'`)
	v3 := e.sync(t)
	e.await(t, v3)
	d3 := get(c, "a/b", 200, v3)
	if string(d3.JSON) == string(d1.JSON) || d3.ETag == d1.ETag {
		t.Errorf("changed document = %s, ETag %s; want new bytes and a new ETag", d3.JSON, d3.ETag)
	}
	get(c, "a/b", 304, v3)

	// A pinned read is cached under its own URL, and revalidated too.
	snap, err := c.Pin(v1)
	if err != nil {
		t.Fatal(err)
	}
	if d := get(snap, "a/b", 200, v1); string(d.JSON) != string(d1.JSON) {
		t.Errorf("pinned Get = %s; want %s", d.JSON, d1.JSON)
	}
	get(snap, "a/b", 304, v1)

	// Without the cache, no If-None-Match is sent.
	plain := newClient(t, e.Base, func(c *Config) { c.HTTPClient = &http.Client{Transport: rec} })
	get(plain, "a/b", 200, v3)
	get(plain, "a/b", 200, v3)
}
