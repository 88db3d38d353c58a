package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
)

// The tests run the client against the real thing: a Postgres database, a Bigtable
// emulator process, the metadata API in-process and `syncer once` in-process, in the
// stack the e2e suite starts too.

// env is a running deployment.
type env struct{ *stack.Env }

// config is the syncer's: one collection, docs, from the table below.
const config = `dataset: client
schedule: "@every 1h"
ttl: 1h
collections:
  - name: docs
    table: public.docs
    key: id
`

// awkwardIDs need escaping in URLs (and in row keys): reserved and unreserved
// punctuation, dot segments, percent signs that look like escapes, whitespace and
// control characters, non-ASCII, an id that looks like a route, and the longest id.
var awkwardIDs = []string{"plain", "a/b", "/leading", "trailing/", "a//b", "a#b", "#", "100%", "%", "%2F", "%zz",
	"with space", " ", "tab\tid", "new\nline", "\x01ctl", "ünïcødé", "日本語", "emoji 🎉", "$dollar", "..", ".", "...",
	"a?b=c&d", "?", "semi;colon", "comma,", "quote\"d", "apos'", "back\\slash", "plus+sign", "~tilde", "a:batchGet",
	"<html>", strings.Repeat("L", 1024), strings.Repeat("é", 512)}

// items are plain ids, enough for several pages.
func items(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("item-%03d", i)
	}
	return out
}

// start creates the database with every id in awkwardIDs and items(25), a Bigtable
// emulator, the syncer's config file (cfg), and starts the metadata API.
func start(tb testing.TB, cfg string) *env {
	tb.Helper()
	e := &env{stack.New(tb, testenv.Postgres(tb), testenv.Bigtable(tb), "client", cfg)}
	testenv.Exec(tb, e.DSN, `CREATE TABLE docs (id text PRIMARY KEY, n int NOT NULL, gen int NOT NULL DEFAULT 0, note text)`)
	var values []string
	for i, id := range append(append([]string{}, awkwardIDs...), items(25)...) {
		values = append(values, fmt.Sprintf("(%s, %d, 0, %s)", stack.Quote(id), i, stack.Quote("note "+id)))
	}
	testenv.Exec(tb, e.DSN, "INSERT INTO docs (id, n, gen, note) VALUES "+strings.Join(values, ", "))
	e.startAPI(tb)
	return e
}

// startAPI starts the metadata API in-process on a free port with the command-line
// arguments args, sets e.Base, and stops the API when the test ends.
func (e *env) startAPI(tb testing.TB, args ...string) {
	tb.Helper()
	e.StartAPI(tb, args)
}

// sync runs `syncer once` in-process and returns the version it published.
func (e *env) sync(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := e.Sync(args...)
	if err != nil {
		tb.Fatalf("syncer once: %v", err)
	}
	return stack.PublishedVersion(tb, out)
}

// await polls until the API answers reads of the current version from v (the pointer
// refresh is 20ms), failing after a minute.
func (e *env) await(tb testing.TB, v string) {
	tb.Helper()
	c := newClient(tb, e.Base, nil)
	testenv.Eventually(tb, time.Minute, func() error {
		if d, err := c.Get(context.Background(), "docs", "plain"); err != nil || d.Version != v {
			return fmt.Errorf("the API still answers from %q (%v); want %s", d.Version, err, v)
		}
		return nil
	})
}

// newClient returns a client of base with the default config, changed by edit.
func newClient(tb testing.TB, base string, edit func(*Config)) *Client {
	tb.Helper()
	cfg := DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	c, err := New(base, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// exchange is one round trip a recorder saw.
type exchange struct {
	method, path, rawQuery string // path escaped, as sent
	ifNoneMatch            string
	body                   []byte
	status                 int // 0: no answer
	err                    error
}

// recorder is an http.RoundTripper that records every exchange and can run a hook
// after an answer, before the client sees it.
type recorder struct {
	next  http.RoundTripper
	after func(exchange) // when set, runs after each exchange

	mu  sync.Mutex
	log []exchange
}

func newRecorder(next http.RoundTripper) *recorder {
	if next == nil {
		next = http.DefaultTransport
	}
	return &recorder{next: next}
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	x := exchange{method: req.Method, path: req.URL.EscapedPath(), rawQuery: req.URL.RawQuery,
		ifNoneMatch: req.Header.Get("If-None-Match")}
	if req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			x.body, _ = io.ReadAll(b)
		}
	}
	resp, err := r.next.RoundTrip(req)
	x.err = err
	if resp != nil {
		x.status = resp.StatusCode
	}
	r.mu.Lock()
	r.log = append(r.log, x)
	r.mu.Unlock()
	if r.after != nil {
		r.after(x)
	}
	return resp, err
}

// exchanges returns what was recorded since the last call, and forgets it.
func (r *recorder) exchanges() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.log
	r.log = nil
	return out
}

// statuses lists the exchanges' statuses.
func statuses(xs []exchange) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = x.status
	}
	return out
}
