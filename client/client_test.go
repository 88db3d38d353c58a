package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
)

// TestDocuments: Get, BatchGet and List of every awkward id answer what Postgres makes
// of the row, byte for byte, from the version the sync published; BatchGet splits by
// count and by bytes; List follows page tokens to the end.
func TestDocuments(t *testing.T) {
	e := start(t, config)
	v := e.sync(t)
	e.await(t, v)
	ctx := context.Background()
	want := stack.SourceDocs(t, e.DSN, `SELECT id, to_json(t)::text FROM docs t`)
	wantListed := want // batchGet and list carry the bytes Get serves
	rec := newRecorder(nil)
	c := newClient(t, e.Base, func(c *Config) { c.HTTPClient = &http.Client{Transport: rec} })

	for _, id := range append(append([]string{}, awkwardIDs...), "item-000") {
		d, err := c.Get(ctx, "docs", id)
		if err != nil {
			t.Errorf("Get(%q): %v", id, err)
			continue
		}
		if string(d.JSON) != want[id] || d.ID != id || d.Version != v || d.ETag == "" {
			t.Errorf("Get(%q) = {ID %q, Version %q, ETag %q, %s}; want %s from %s with an ETag", id, d.ID, d.Version, d.ETag, d.JSON, want[id], v)
		}
	}
	// Each id went as one path segment; dot segments were escaped.
	for _, x := range rec.exchanges() {
		if segs := strings.Split(strings.TrimPrefix(x.path, "/v1/data/"), "/"); len(segs) != 2 || segs[1] == "." || segs[1] == ".." {
			t.Errorf("GET %s: want /v1/data/docs/<one segment, no dot segment>", x.path)
		}
	}

	t.Run("BatchGet", func(t *testing.T) {
		ids := append(slices.Sorted(maps.Keys(want)), "nope", "plain", "a/b") // duplicates are asked for once
		docs, missing, got, err := c.BatchGet(ctx, "docs", ids)
		if err != nil {
			t.Fatal(err)
		}
		if got != v || !slices.Equal(missing, []string{"nope"}) {
			t.Errorf("BatchGet: version %s, missing %q; want %s, [nope]", got, missing, v)
		}
		if diff := cmp.Diff(wantListed, bodies(t, docs, v)); diff != "" {
			t.Errorf("BatchGet documents (-want +got):\n%s", diff)
		}
		if xs := rec.exchanges(); len(xs) != 1 || xs[0].method != http.MethodPost || xs[0].path != "/v1/data/docs:batchGet" {
			t.Errorf("BatchGet of %d ids sent %+v; want one POST /v1/data/docs:batchGet", len(ids), xs)
		}
	})

	t.Run("BatchGet split by count", func(t *testing.T) {
		small := newClient(t, e.Base, func(c *Config) { c.HTTPClient = &http.Client{Transport: rec}; c.BatchLimit = 4 })
		ids := slices.Sorted(maps.Keys(want))
		docs, missing, got, err := small.BatchGet(ctx, "docs", ids)
		if err != nil || got != v || len(missing) != 0 {
			t.Fatalf("BatchGet = version %s, missing %q, %v; want %s", got, missing, err, v)
		}
		if diff := cmp.Diff(wantListed, bodies(t, docs, v)); diff != "" {
			t.Errorf("BatchGet documents (-want +got):\n%s", diff)
		}
		xs := rec.exchanges()
		if wantN := (len(ids) + 3) / 4; len(xs) != wantN {
			t.Errorf("BatchGet of %d ids with a limit of 4 sent %d requests; want %d", len(ids), len(xs), wantN)
		}
		for i, x := range xs[1:] {
			if x.rawQuery != "version="+v {
				t.Errorf("part %d: query %q; want the first part's version pinned", i+2, x.rawQuery)
			}
		}
	})

	t.Run("BatchGet split by bytes", func(t *testing.T) {
		// Each of these ids is about 6 KB of JSON (a control character is escaped as
		// \u0001), so 600 of them, under the count limit, are over the 2 MiB a body may
		// hold.
		var ids []string
		for i := range 600 {
			ids = append(ids, strings.Repeat("\x01", 1000)+fmt.Sprint(i))
		}
		docs, missing, got, err := c.BatchGet(ctx, "docs", ids)
		if err != nil || got != v || len(docs) != 0 || len(missing) != len(ids) {
			t.Fatalf("BatchGet = %d docs, %d missing, version %s, %v; want all %d missing from %s", len(docs), len(missing), got, err, len(ids), v)
		}
		xs := rec.exchanges()
		if len(xs) != 2 {
			t.Errorf("BatchGet of %d ids of 6 KB sent %d requests; want 2", len(ids), len(xs))
		}
		for _, x := range xs {
			if len(x.body) > 2<<20 || x.status != http.StatusOK {
				t.Errorf("a part of %d bytes answered %d; want at most 2 MiB and 200", len(x.body), x.status)
			}
		}
	})

	t.Run("List", func(t *testing.T) {
		var ids []string
		for d, err := range c.List(ctx, "docs", ListOptions{PageSize: 7}) {
			if err != nil {
				t.Fatal(err)
			}
			if d.Version != v || string(d.JSON) != wantListed[d.ID] {
				t.Errorf("listed %q = %s from %s; want %s from %s", d.ID, d.JSON, d.Version, wantListed[d.ID], v)
			}
			ids = append(ids, d.ID)
		}
		wantIDs := slices.Sorted(maps.Keys(want)) // id order is the ids' byte order
		if diff := cmp.Diff(wantIDs, ids); diff != "" {
			t.Errorf("listed ids (-want +got):\n%s", diff)
		}
		xs := rec.exchanges()
		if wantN := (len(wantIDs) + 6) / 7; len(xs) != wantN {
			t.Errorf("List of %d documents by 7 took %d pages; want %d", len(wantIDs), len(xs), wantN)
		}
		for _, x := range xs[1:] {
			if !strings.Contains(x.rawQuery, "page_token=") {
				t.Errorf("a page after the first asked %q; want a page token", x.rawQuery)
			}
		}
	})

	t.Run("List stops when the loop does", func(t *testing.T) {
		n := 0
		for _, err := range c.List(ctx, "docs", ListOptions{PageSize: 5}) {
			if err != nil {
				t.Fatal(err)
			}
			if n++; n == 6 {
				break
			}
		}
		if xs := rec.exchanges(); len(xs) != 2 {
			t.Errorf("reading 6 documents by pages of 5 sent %d requests; want 2", len(xs))
		}
	})
}

// bodies returns the documents' JSON by id, checking each names its id and version v.
func bodies(tb testing.TB, docs map[string]Document, v string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	for id, d := range docs {
		if d.ID != id || d.Version != v {
			tb.Errorf("document %q says id %q, version %q; want version %s", id, d.ID, d.Version, v)
		}
		out[id] = string(d.JSON)
	}
	return out
}

// TestErrors: the API's 404, 410 and 400 come back typed, carrying the problem
// document and the version, and are never retried.
func TestErrors(t *testing.T) {
	e := start(t, config)
	v := e.sync(t)
	e.await(t, v)
	ctx := context.Background()
	rec := newRecorder(nil)
	c := newClient(t, e.Base, func(c *Config) { c.HTTPClient = &http.Client{Transport: rec} })
	const never = "7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1700000000000"
	gone, err := c.Pin(never)
	if err != nil {
		t.Fatal(err)
	}
	firstErr := func(seq func(func(Document, error) bool)) error {
		for _, err := range seq {
			if err != nil {
				return err
			}
		}
		return nil
	}
	batchErr := func(_ map[string]Document, _ []string, _ string, err error) error { return err }
	getErr := func(_ Document, err error) error { return err }

	tests := []struct {
		name     string
		err      error
		sentinel error
		status   int
		typ      string
		version  string
	}{
		{"unknown id", getErr(c.Get(ctx, "docs", "nope")), ErrNotFound, 404, "https://snapflip.dev/problems/not-found", v},
		{"unknown collection", getErr(c.Get(ctx, "nope", "plain")), ErrNotFound, 404, "https://snapflip.dev/problems/not-found", v},
		{"unknown collection, batch", batchErr(c.BatchGet(ctx, "nope", []string{"plain"})), ErrNotFound, 404, "https://snapflip.dev/problems/not-found", v},
		{"unknown collection, list", firstErr(c.List(ctx, "nope", ListOptions{})), ErrNotFound, 404, "https://snapflip.dev/problems/not-found", v},
		{"id over 1024 bytes", getErr(c.Get(ctx, "docs", strings.Repeat("x", 1025))), ErrBadRequest, 400, "https://snapflip.dev/problems/bad-request", ""},
		{"page size over 1000", firstErr(c.List(ctx, "docs", ListOptions{PageSize: 1001})), ErrBadRequest, 400, "https://snapflip.dev/problems/bad-request", ""},
		{"a version that never was", getErr(gone.Get(ctx, "docs", "plain")), ErrGone, 410, "https://snapflip.dev/problems/version-gone", never},
		{"a version that never was, batch", batchErr(gone.BatchGet(ctx, "docs", []string{"plain"})), ErrGone, 410, "https://snapflip.dev/problems/version-gone", never},
		{"a version that never was, list", firstErr(gone.List(ctx, "docs", ListOptions{})), ErrGone, 410, "https://snapflip.dev/problems/version-gone", never},
	}
	if xs := rec.exchanges(); len(xs) != len(tests) {
		t.Errorf("%d failing requests took %d exchanges %v; want one each (a 4xx is never retried)", len(tests), len(xs), statuses(xs))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e *Error
			if !errors.Is(tt.err, tt.sentinel) || !errors.As(tt.err, &e) {
				t.Fatalf("err = %v; want an *Error matching %v", tt.err, tt.sentinel)
			}
			for _, other := range []error{ErrNotFound, ErrGone, ErrUnavailable, ErrBadRequest} {
				if other != tt.sentinel && errors.Is(tt.err, other) {
					t.Errorf("err = %v also matches %v", tt.err, other)
				}
			}
			if e.StatusCode != tt.status || e.Type != tt.typ || e.Title == "" || e.Detail == "" || e.Version != tt.version || e.Attempts != 1 {
				t.Errorf("err = %+v; want status %d, type %s, a title and a detail, version %q, 1 attempt", e, tt.status, tt.typ, tt.version)
			}
		})
	}

	// What the client refuses to send (an empty id would be another route).
	for name, err := range map[string]error{
		"empty id":            getErr(c.Get(ctx, "docs", "")),
		"empty collection":    getErr(c.Get(ctx, "", "plain")),
		"empty id in a batch": batchErr(c.BatchGet(ctx, "docs", []string{"plain", ""})),
		"not a version":       func() error { _, err := c.Pin("v1"); return err }(),
	} {
		if !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v; want ErrBadRequest", name, err)
		}
	}
	if xs := rec.exchanges(); len(xs) != 0 {
		t.Errorf("requests the client refuses were sent: %+v", xs)
	}
}

// TestSnapshotAcrossFlip: a snapshot handle keeps reading the version it pinned after a
// sync publishes a new one, while the plain client reads the new one.
func TestSnapshotAcrossFlip(t *testing.T) {
	e := start(t, config)
	v1 := e.sync(t)
	e.await(t, v1)
	ctx := context.Background()
	c := newClient(t, e.Base, nil)
	snap, err := c.Snapshot(ctx)
	if err != nil || snap.Version() != v1 {
		t.Fatalf("Snapshot = %v, %v; want %s", snap, err, v1)
	}
	pinned, err := c.Pin(v1)
	if err != nil {
		t.Fatal(err)
	}
	old := stack.SourceDocs(t, e.DSN, `SELECT id, to_json(t)::text FROM docs t`)

	testenv.Exec(t, e.DSN, `UPDATE docs SET gen = 1`, `DELETE FROM docs WHERE id = 'a/b'`, `INSERT INTO docs VALUES ('new', 0, 1, 'new')`)
	v2 := e.sync(t)
	e.await(t, v2)
	cur := stack.SourceDocs(t, e.DSN, `SELECT id, to_json(t)::text FROM docs t`)

	for name, r := range map[string]reader{"Snapshot": snap, "Pin": pinned} {
		t.Run(name, func(t *testing.T) {
			checkReads(t, r, v1, old)
		})
	}
	t.Run("Client", func(t *testing.T) {
		checkReads(t, c, v2, cur)
	})
}

// reader is what a Client and a Snapshot have in common.
type reader interface {
	Get(ctx context.Context, collection, id string, opts ...ReadOption) (Document, error)
	BatchGet(ctx context.Context, collection string, ids []string, opts ...ReadOption) (map[string]Document, []string, string, error)
	List(ctx context.Context, collection string, opts ListOptions, read ...ReadOption) iter.Seq2[Document, error]
}

var (
	_ reader = (*Client)(nil)
	_ reader = (*Snapshot)(nil)
)

// checkReads checks that r's Get, BatchGet and List answer want, from version v.
func checkReads(t *testing.T, r reader, v string, want map[string]string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range []string{"plain", "a/b", "new", "..", "emoji 🎉"} {
		d, err := r.Get(ctx, "docs", id)
		if w, ok := want[id]; !ok {
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("Get(%q) = %s, %v; want ErrNotFound in %s", id, d.JSON, err, v)
			}
		} else if err != nil || string(d.JSON) != w || d.Version != v {
			t.Errorf("Get(%q) = %s from %s, %v; want %s from %s", id, d.JSON, d.Version, err, w, v)
		}
	}
	wantListed := want
	ids := []string{"plain", "a/b", "new", "item-007", "<html>"}
	docs, missing, got, err := r.BatchGet(ctx, "docs", ids)
	if err != nil || got != v {
		t.Fatalf("BatchGet = version %s, %v; want %s", got, err, v)
	}
	wantDocs := map[string]string{}
	var wantMissing []string
	for _, id := range ids {
		if w, ok := wantListed[id]; ok {
			wantDocs[id] = w
		} else {
			wantMissing = append(wantMissing, id)
		}
	}
	if diff := cmp.Diff(wantDocs, bodies(t, docs, v)); diff != "" {
		t.Errorf("BatchGet (-want +got):\n%s", diff)
	}
	if !slices.Equal(missing, wantMissing) {
		t.Errorf("BatchGet missing %q; want %q", missing, wantMissing)
	}
	listed := map[string]string{}
	for d, err := range r.List(ctx, "docs", ListOptions{PageSize: 10}) {
		if err != nil {
			t.Fatal(err)
		}
		if d.Version != v {
			t.Errorf("listed %q from %s; want %s", d.ID, d.Version, v)
		}
		listed[d.ID] = string(d.JSON)
	}
	if diff := cmp.Diff(wantListed, listed); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

// TestOneVersionAcrossAFlipMidway: a BatchGet split into parts and a List of several
// pages, both through the plain client, stay in the version of their first request
// though a sync publishes a new one right after it (before the client has even read
// the first answer).
func TestOneVersionAcrossAFlipMidway(t *testing.T) {
	e := start(t, config)
	v1 := e.sync(t)
	e.await(t, v1)
	ctx := context.Background()
	old := stack.SourceDocs(t, e.DSN, `SELECT id, to_json(t)::text FROM docs t`)

	rec, arm, flipped := flipAfterFirst(t, e)
	c := newClient(t, e.Base, func(c *Config) {
		c.HTTPClient = &http.Client{Transport: rec}
		c.BatchLimit = 5
		c.Timeout = time.Minute // the first answer waits for a whole sync
	})

	arm(http.MethodPost)
	ids := slices.Sorted(maps.Keys(old))
	docs, missing, got, err := c.BatchGet(ctx, "docs", ids)
	if err != nil || got != v1 || len(missing) != 0 {
		t.Fatalf("BatchGet = version %s, missing %q, %v; want %s", got, missing, err, v1)
	}
	if f := flipped(); f == "" || f == v1 {
		t.Fatalf("no flip happened during the BatchGet (%q): the test proves nothing", f)
	}
	if diff := cmp.Diff(old, bodies(t, docs, v1)); diff != "" {
		t.Errorf("BatchGet across a flip (-want +got):\n%s", diff)
	}
	if xs := rec.exchanges(); len(xs) < 3 {
		t.Errorf("BatchGet of %d ids by 5 sent %d requests; want them split", len(ids), len(xs))
	}

	v2 := flipped()
	old = stack.SourceDocs(t, e.DSN, `SELECT id, to_json(t)::text FROM docs t`) // v2's documents (the next flip bumps gen again)
	arm(http.MethodGet)
	listed := map[string]string{}
	for d, err := range c.List(ctx, "docs", ListOptions{PageSize: 10}) {
		if err != nil {
			t.Fatal(err)
		}
		if d.Version != v2 {
			t.Errorf("listed %q from %s; want every page from %s", d.ID, d.Version, v2)
		}
		listed[d.ID] = string(d.JSON)
	}
	if f := flipped(); f == "" || f == v2 {
		t.Fatalf("no flip happened during the List (%q): the test proves nothing", f)
	}
	if diff := cmp.Diff(old, listed); diff != "" {
		t.Errorf("List across a flip (-want +got):\n%s", diff)
	}
	if d, err := c.Get(ctx, "docs", "plain"); err != nil || d.Version != flipped() {
		t.Errorf("after the listing, Get answers from %s (%v); want the new version %s", d.Version, err, flipped())
	}
}

// flipAfterFirst returns a transport that publishes a new version once, after the
// first answer of the kind (method) the test arms it for, and waits until the API
// serves it; and what the last flip published ("" before it).
func flipAfterFirst(t *testing.T, e *env) (rec *recorder, arm func(method string), flipped func() string) {
	var (
		mu      sync.Mutex
		armed   string // the method whose next answer triggers a flip
		version string // the version the flip published
	)
	rec = newRecorder(nil)
	rec.after = func(x exchange) {
		mu.Lock()
		defer mu.Unlock()
		if x.method != armed || x.status != http.StatusOK {
			return
		}
		armed = ""
		testenv.Exec(t, e.DSN, `UPDATE docs SET gen = gen + 1`)
		version = e.sync(t)
		e.await(t, version)
	}
	arm = func(method string) { mu.Lock(); armed, version = method, ""; mu.Unlock() }
	flipped = func() string { mu.Lock(); defer mu.Unlock(); return version }
	return rec, arm, flipped
}

// TestTokenReadAcrossAFlipMidway: a BatchGet split into parts and a List of several
// pages with After(token), whose first request's version covers the token only by
// the coverage recorded for it (a sync found nothing new since), are answered whole
// from that version though the pointer moves on before the next request.
func TestTokenReadAcrossAFlipMidway(t *testing.T) {
	e := start(t, config)
	e.await(t, e.sync(t))
	ctx := context.Background()
	rec, arm, flipped := flipAfterFirst(t, e)
	c := newClient(t, e.Base, func(c *Config) {
		c.HTTPClient = &http.Client{Transport: rec}
		c.BatchLimit = 5
		c.Timeout = time.Minute
	})
	ids := slices.Sorted(maps.Keys(stack.SourceDocs(t, e.DSN, `SELECT id, to_json(t)::text FROM docs t`)))
	testenv.Exec(t, e.DSN, `CREATE TABLE unrelated (x int)`)
	// coveredOnly commits a write no collection reads and returns a token of it,
	// covered by the current version once a sync found nothing new.
	coveredOnly := func() string {
		var tok string
		testenv.QueryRow(t, e.DSN, `INSERT INTO unrelated VALUES (1) RETURNING 'x:' || pg_current_xact_id()`, &tok)
		if out := e.syncOnce(t); strings.HasPrefix(out, "published") {
			t.Fatalf("a sync after a write no collection reads published: %q", out)
		}
		return tok
	}

	tok := coveredOnly()
	arm(http.MethodPost)
	docs, _, v, err := c.BatchGet(ctx, "docs", ids, After(tok))
	if err != nil {
		t.Fatalf("BatchGet After a token covered by coverage, split across a flip: %v", err)
	}
	if f := flipped(); f == "" || f == v {
		t.Fatalf("no flip happened during the BatchGet (%q): the test proves nothing", f)
	}
	if len(docs) != len(ids) {
		t.Errorf("BatchGet across a flip: %d documents; want %d", len(docs), len(ids))
	}

	tok = coveredOnly()
	arm(http.MethodGet)
	n := 0
	for _, err := range c.List(ctx, "docs", ListOptions{PageSize: 3}, After(tok)) {
		if err != nil {
			t.Fatalf("List After a token covered by coverage, across a flip, after %d documents: %v", n, err)
		}
		n++
	}
	if f := flipped(); f == "" || n != len(ids) {
		t.Errorf("List across a flip (%q): %d documents; want %d", f, n, len(ids))
	}
}

// TestRetryUntilPublished: before anything is published the API answers 503 with
// Retry-After: the client gives up after its attempts with ErrUnavailable, gives up at
// once when its context's deadline is sooner than the wait, and, patient enough,
// succeeds once a sync publishes while it retries.
func TestRetryUntilPublished(t *testing.T) {
	e := start(t, config)
	ctx := context.Background()
	rec := newRecorder(nil)
	c := newClient(t, e.Base, func(c *Config) { c.HTTPClient = &http.Client{Transport: rec}; c.Retry.MaxAttempts = 2 })

	_, err := c.Get(ctx, "docs", "plain")
	var ae *Error
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ae) || ae.StatusCode != 503 || ae.Attempts != 2 || ae.RetryAfter != time.Second {
		t.Errorf("Get before any sync = %v; want ErrUnavailable, a 503 after 2 attempts asking to retry after 1s", err)
	}
	if got := statuses(rec.exchanges()); !slices.Equal(got, []int{503, 503}) {
		t.Errorf("Get before any sync: exchanges %v; want 2 503s", got)
	}
	once := newClient(t, e.Base, func(c *Config) { c.HTTPClient = &http.Client{Transport: rec}; c.Retry.MaxAttempts = 1 })
	for name, err := range map[string]error{
		"BatchGet": func() error { _, _, _, err := once.BatchGet(ctx, "docs", []string{"plain"}); return err }(),
		"Snapshot": func() error { _, err := once.Snapshot(ctx); return err }(),
		"List": func() error {
			for _, err := range once.List(ctx, "docs", ListOptions{}) {
				return err
			}
			return nil
		}(),
	} {
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s before any sync = %v; want ErrUnavailable", name, err)
		}
	}
	rec.exchanges()

	// A deadline sooner than Retry-After (1s): the client says why now, without
	// waiting. The deadline is as late as that allows, so that the exchange itself,
	// on a busy machine, fits well within it.
	patient := newClient(t, e.Base, func(c *Config) { c.HTTPClient = &http.Client{Transport: rec}; c.Retry.MaxAttempts = 100 })
	dctx, cancel := context.WithTimeout(ctx, 900*time.Millisecond)
	_, err = patient.Get(dctx, "docs", "plain")
	cancel()
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get with a deadline shorter than Retry-After = %v; want the 503, not the deadline", err)
	}
	if got := statuses(rec.exchanges()); !slices.Equal(got, []int{503}) {
		t.Errorf("Get with a deadline shorter than Retry-After: exchanges %v; want one 503", got)
	}

	// Patient: a sync publishes while the client retries.
	first503 := make(chan struct{})
	var first sync.Once
	rec.after = func(x exchange) {
		if x.status == http.StatusServiceUnavailable {
			first.Do(func() { close(first503) })
		}
	}
	type result struct {
		d   Document
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := patient.Get(ctx, "docs", "plain")
		done <- result{d, err}
	}()
	<-first503
	v := e.sync(t)
	r := <-done
	if r.err != nil || r.d.Version != v {
		t.Fatalf("Get while a sync publishes = %s from %s, %v; want a document from %s", r.d.JSON, r.d.Version, r.err, v)
	}
	got := statuses(rec.exchanges())
	if len(got) < 2 || got[len(got)-1] != 200 || slices.ContainsFunc(got[:len(got)-1], func(s int) bool { return s != 503 }) {
		t.Errorf("Get while a sync publishes: exchanges %v; want 503s, then a 200", got)
	}
}

// TestGoneAfterExpiry: a pinned version that expired answers 410 (ErrGone) to the
// handle, while the plain client, whose current version expired too, gets 503. The
// TTL (6s, counted from the sync's start) leaves a loaded machine time to read the
// version before it expires.
func TestGoneAfterExpiry(t *testing.T) {
	e := start(t, strings.Replace(config, "ttl: 1h", "ttl: 6s", 1))
	v := e.sync(t)
	ctx := context.Background()
	c := newClient(t, e.Base, func(c *Config) { c.Retry.MaxAttempts = 1 })
	snap, err := c.Pin(v)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := snap.Get(ctx, "docs", "plain"); err != nil || d.Version != v {
		t.Fatalf("pinned Get before expiry = %s, %v", d.Version, err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		_, err = snap.Get(ctx, "docs", "plain")
		if err != nil && !errors.Is(err, ErrGone) {
			t.Fatalf("pinned Get of a version with a 6s TTL = %v; want ErrGone once it expires", err)
		}
		if err == nil {
			return fmt.Errorf("pinned Get of a version with a 6s TTL still answers; want ErrGone once it expires")
		}
		return nil
	})
	if ae := (*Error)(nil); !errors.As(err, &ae) || ae.Version != v || !strings.Contains(ae.Detail, "expired") {
		t.Errorf("expired: %v; want a 410 naming %s and saying it expired", err, v)
	}
	if _, err := c.Get(ctx, "docs", "plain"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Get of the expired current version = %v; want ErrUnavailable", err)
	}
}
