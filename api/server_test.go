package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/resolver"
	"github.com/snapflip/snapflip/snapshot"
)

// newServer returns a server over r with the default config as set changes it.
func newServer(t testing.TB, r api.Reader, set func(*api.Config)) *api.Server {
	t.Helper()
	cfg := api.DefaultConfig()
	if set != nil {
		set(&cfg)
	}
	s, err := api.NewServer(r, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fakeReader is a pure-logic stand-in for resolver.Resolver; the real one is tested
// end to end in package e2e.
type fakeReader struct {
	versionsAsked int               // the limits Versions was called with, summed
	docs          map[string]string // collection + "\x00" + id → document
	noVer         bool
	panicOn       string
	gotIDs        []string
	// manifests are the versions, newest first; the one named ver, if any, is the
	// current view's manifest.
	manifests []snapshot.Manifest
	// readable are the versions other than ver that View reads; the others are gone.
	readable map[snapshot.Version]snapshot.Manifest
	// changes are what ChangedIDs pages over, in id order.
	changes []snapshot.Change
}

const ver = snapshot.Version("7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1763737200000")

func (f *fakeReader) Current(context.Context) (snapshot.View, error) {
	if f.noVer {
		return snapshot.View{}, snapshot.ErrNoVersion
	}
	for _, m := range f.manifests {
		if m.Version == ver {
			return snapshot.View{Version: ver, Manifest: m}, nil
		}
	}
	return snapshot.View{Version: ver, Manifest: snapshot.Manifest{Collections: map[string]snapshot.CollectionStats{"c": {}}}}, nil
}

func (f *fakeReader) Get(_ context.Context, v snapshot.View, collection, id string) (resolver.Doc, error) {
	f.gotIDs = append(f.gotIDs, id)
	if id == f.panicOn {
		panic("boom")
	}
	if !v.HasCollection(collection) {
		return resolver.Doc{}, snapshot.ErrNotFound
	}
	d, ok := f.docs[collection+"\x00"+id]
	if !ok {
		return resolver.Doc{}, snapshot.ErrNotFound
	}
	return resolver.Doc{Body: []byte(d), ETag: `"e"`}, nil
}

func (f *fakeReader) View(ctx context.Context, v snapshot.Version) (snapshot.View, error) {
	if v == ver {
		return f.Current(ctx)
	}
	if m, ok := f.readable[v]; ok {
		return snapshot.View{Version: v, Manifest: m}, nil
	}
	return snapshot.View{}, snapshot.ErrGone
}

func (f *fakeReader) GetMany(ctx context.Context, v snapshot.View, collection string, ids []string) (map[string]resolver.Doc, []string, error) {
	out := map[string]resolver.Doc{}
	var missing []string
	for _, id := range ids {
		if d, err := f.Get(ctx, v, collection, id); err == nil {
			out[id] = d
		} else {
			missing = append(missing, id)
		}
	}
	return out, missing, nil
}

// Page pages over the collection's docs in id order.
// Filter answers a filter from the fake's documents: those whose entry (their key
// in the index, then their id) falls in a range of the scan, in entry order.
func (f *fakeReader) Filter(_ context.Context, v snapshot.View, q resolver.FilterQuery) (resolver.FilterPage, error) {
	collection, scan, after, limit := q.Collection, q.Scan, q.After, q.Limit
	if !v.HasCollection(collection) {
		return resolver.FilterPage{}, snapshot.ErrNotFound
	}
	type entry struct {
		id string
		d  snapshot.Document
	}
	var entries []entry
	for key, body := range f.docs {
		c, id, _ := strings.Cut(key, "\x00")
		if c != collection {
			continue
		}
		k, err := index.Key(scan.Index, []byte(body))
		if err != nil {
			return resolver.FilterPage{}, err
		}
		e := index.EntryID(k, id)
		for _, rg := range scan.Ranges {
			sp := index.EntrySpan(rg)
			if e >= sp.From && (sp.To == "" || e < sp.To) && e > after {
				entries = append(entries, entry{e, snapshot.Document{ID: id, Body: []byte(body)}})
				break
			}
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.id, b.id) })
	var out resolver.FilterPage
	for i, e := range entries {
		if i == limit {
			out.Next = entries[i-1].id
			break
		}
		out.Docs = append(out.Docs, e.d)
	}
	return out, nil
}

func (f *fakeReader) Page(_ context.Context, v snapshot.View, collection, after string, limit int) ([]snapshot.Document, bool, error) {
	if !v.HasCollection(collection) {
		return nil, false, snapshot.ErrNotFound
	}
	var out []snapshot.Document
	for _, key := range slices.Sorted(maps.Keys(f.docs)) {
		c, id, _ := strings.Cut(key, "\x00")
		if c != collection || id <= after {
			continue
		}
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, snapshot.Document{ID: id, Body: []byte(f.docs[key])})
	}
	return out, false, nil
}

// Versions pages f.manifests, which are newest first, as the store does.
func (f *fakeReader) Versions(_ context.Context, before snapshot.Version, limit int) ([]snapshot.Manifest, error) {
	f.versionsAsked += limit
	ms := f.manifests
	if before != "" {
		i := slices.IndexFunc(ms, func(m snapshot.Manifest) bool { return m.Version == before })
		ms = ms[i+1:] // -1 (unknown): all, as a store lists what sorts before it
	}
	return ms[:min(limit, len(ms))], nil
}

func (f *fakeReader) Manifest(_ context.Context, v snapshot.Version) (snapshot.Manifest, error) {
	for _, m := range f.manifests {
		if m.Version == v {
			return m, nil
		}
	}
	return snapshot.Manifest{}, snapshot.ErrNotFound
}

func (f *fakeReader) Pointer(ctx context.Context) (snapshot.Pointer, error) {
	if f.noVer {
		return snapshot.Pointer{}, snapshot.ErrNoVersion
	}
	return snapshot.Pointer{Version: ver}, nil
}

func (e errReader) Ready(context.Context) error { return e.err }

// Await answers as the pointer of the fake does: its version never covers a token
// but one it saw ("s:1:1:" and older).
func (f *fakeReader) Await(ctx context.Context, tok snapshot.Token) (snapshot.View, error) {
	v, err := f.Current(ctx)
	if err != nil {
		return v, err
	}
	return v, f.CoversNamed(ctx, v, tok)
}

func (f *fakeReader) CoversNamed(_ context.Context, v snapshot.View, tok snapshot.Token) error {
	if sn := (snapshot.PGSnapshot{Xmin: 1, Xmax: 1}); sn.Covers(tok) {
		return nil
	}
	return snapshot.ErrNotCovered
}

func (f *fakeReader) Ready(ctx context.Context) error {
	_, err := f.Current(ctx)
	return err
}

func (f *fakeReader) ChangedIDs(_ context.Context, v snapshot.View, collection, after string, limit int) (snapshot.Changes, error) {
	if !v.HasCollection(collection) {
		return snapshot.Changes{}, fmt.Errorf("collection %q: %w", collection, snapshot.ErrNotFound)
	}
	out := snapshot.Changes{Kind: snapshot.ChangesDelta, Parent: v.Manifest.Parent}
	for _, c := range f.changes {
		if c.ID <= after {
			continue
		}
		if len(out.IDs) == limit {
			out.More = true
			break
		}
		out.IDs = append(out.IDs, c)
	}
	return out, nil
}

func serve(tb testing.TB, h http.Handler, rawPath string) (*http.Response, []byte) {
	tb.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, rawPath, nil))
	res := rec.Result()
	body, _ := io.ReadAll(res.Body)
	return res, body
}

func TestGetDocumentDecodesIDsExactlyOnce(t *testing.T) {
	f := &fakeReader{docs: map[string]string{
		"c\x00a/b":  `{"id":"a/b"}`,
		"c\x00100%": `{"id":"100%"}`,
		"c\x00%2F":  `{"id":"%2F"}`,
		"c\x00a#b":  `{"id":"a#b"}`,
		"c\x00ü x":  `{"id":"ü x"}`,
	}}
	h := newServer(t, f, nil)
	tests := []struct{ path, want string }{
		{"/v1/data/c/a%2Fb", `{"id":"a/b"}`},
		{"/v1/data/c/100%25", `{"id":"100%"}`},
		{"/v1/data/c/%252F", `{"id":"%2F"}`},
		{"/v1/data/c/a%23b", `{"id":"a#b"}`},
		{"/v1/data/c/%C3%BC%20x", `{"id":"ü x"}`},
	}
	for _, tt := range tests {
		res, body := serve(t, h, tt.path)
		if res.StatusCode != 200 || string(body) != tt.want {
			t.Errorf("GET %s = %d %s; want 200 %s", tt.path, res.StatusCode, body, tt.want)
		}
		if got := res.Header.Get(api.HeaderVersion); got != string(ver) {
			t.Errorf("GET %s: %s = %q; want %s", tt.path, api.HeaderVersion, got, ver)
		}
	}
}

func TestHostileRequestsGet4xx(t *testing.T) {
	f := &fakeReader{docs: map[string]string{}}
	h := newServer(t, f, nil)
	tests := []struct {
		path string
		want int
	}{
		{"/v1/data/c/..", 404},
		{"/v1/data/c/%2E%2E", 404},
		{"/v1/data/c/%00", 400},
		{"/v1/data/c/%ff%fe", 400},
		{"/v1/data/c/" + strings.Repeat("x", 10<<10), 400},
		{"/v1/data/nope/x", 404},
		{"/v1/data/c/a/b", 404},
		{"/nothing", 404},
	}
	for _, tt := range tests {
		res, body := serve(t, h, tt.path)
		if res.StatusCode != tt.want {
			t.Errorf("GET %.60s = %d; want %d", tt.path, res.StatusCode, tt.want)
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("GET %.60s: content type %q; want application/problem+json", tt.path, ct)
		}
		var p api.Problem
		if err := json.Unmarshal(body, &p); err != nil || p.Status != tt.want || p.Type == "" || p.Title == "" {
			t.Errorf("GET %.60s: problem %s (%v)", tt.path, body, err)
		}
	}
}

func TestNoVersionIs503AndNotReady(t *testing.T) {
	h := newServer(t, &fakeReader{noVer: true}, nil)
	for _, path := range []string{"/v1/data/c/x", "/readyz"} {
		res, _ := serve(t, h, path)
		if res.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("GET %s with nothing published = %d; want 503", path, res.StatusCode)
		}
	}
	if res, _ := serve(t, h, "/healthz"); res.StatusCode != 200 {
		t.Errorf("healthz = %d; want 200", res.StatusCode)
	}
}

func TestPanicBecomesProblem(t *testing.T) {
	h := newServer(t, &fakeReader{panicOn: "bad"}, nil)
	res, body := serve(t, h, "/v1/data/c/bad")
	if res.StatusCode != 500 || !strings.Contains(string(body), "internal") || strings.Contains(string(body), "boom") {
		t.Errorf("panic answered %d %s; want a 500 problem that hides the panic", res.StatusCode, body)
	}
}

func TestStorageErrorsHideInternals(t *testing.T) {
	h := newServer(t, errReader{fakeReader: &fakeReader{}, err: errors.New("rpc error: secret-host:443 exploded")}, nil)
	res, body := serve(t, h, "/v1/data/c/x")
	if res.StatusCode != 500 || strings.Contains(string(body), "secret-host") {
		t.Errorf("storage error answered %d %s; want 500 without internals", res.StatusCode, body)
	}
}

type errReader struct {
	*fakeReader
	err error
}

func (e errReader) Current(context.Context) (snapshot.View, error) { return snapshot.View{}, e.err }

func FuzzGetDocumentPath(f *testing.F) {
	for _, s := range []string{"a", "a%2Fb", "%00", "..", "%ff", "100%25", "%", "a/b"} {
		f.Add(s)
	}
	h := newServer(f, &fakeReader{docs: map[string]string{"c\x00a": `{}`}}, nil)
	f.Fuzz(func(t *testing.T, id string) {
		// (the handler is built above, once)
		req, err := http.NewRequest(http.MethodGet, "http://x/v1/data/c/"+id, nil)
		if err != nil {
			return // not a URL a client could send
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("GET /v1/data/c/%q = %d; bad input must never get a 5xx", id, rec.Code)
		}
	})
}

// FuzzListPageToken: whatever a client passes as page_token and limit, listing a
// collection answers 200 or a 4xx problem, never a 5xx.
func FuzzListPageToken(f *testing.F) {
	f.Add("", "10")
	f.Add("eyJ2IjoiNmE3In0", "1")
	f.Add("%%%", "-1")
	f.Add("e30", "99999999999999999999")
	h := newServer(f, &fakeReader{}, nil)
	f.Fuzz(func(t *testing.T, token, limit string) {
		target := "/v1/data/c?page_token=" + url.QueryEscape(token) + "&limit=" + url.QueryEscape(limit)
		res, body := do(t, h, http.MethodGet, target, "")
		if res.StatusCode >= 500 || (res.StatusCode != 200 && res.Header.Get("Content-Type") != "application/problem+json") {
			t.Fatalf("GET %s = %d %s; want 200 or a 4xx problem", target, res.StatusCode, body)
		}
	})
}

func do(tb testing.TB, h http.Handler, method, target, body string, header ...string) (*http.Response, []byte) {
	tb.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

func TestPinnedReadsAndCaching(t *testing.T) {
	h := newServer(t, &fakeReader{docs: map[string]string{"c\x00a": `{"id":"a"}`}}, nil)
	other := "7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1700000000000"
	tests := []struct {
		name, target string
		header       []string
		want         int
		cache        string
	}{
		{"current", "/v1/data/c/a", nil, 200, "no-cache"},
		{"pinned by query", "/v1/data/c/a?version=" + string(ver), nil, 200, "public, max-age=31536000, immutable"},
		{"pinned by header", "/v1/data/c/a", []string{api.HeaderVersion, string(ver)}, 200, "public, max-age=31536000, immutable"},
		{"gone version", "/v1/data/c/a?version=" + other, nil, 410, "no-store"},
		{"malformed version", "/v1/data/c/a?version=../../x", nil, 400, "no-store"},
		{"query and header disagree", "/v1/data/c/a?version=" + string(ver), []string{api.HeaderVersion, other}, 400, "no-store"},
		{"revalidation", "/v1/data/c/a", []string{"If-None-Match", `"e"`}, 304, "no-cache"},
	}
	for _, tt := range tests {
		res, body := do(t, h, http.MethodGet, tt.target, "", tt.header...)
		if res.StatusCode != tt.want || res.Header.Get("Cache-Control") != tt.cache {
			t.Errorf("%s: %d, Cache-Control %q (%s); want %d, %q", tt.name, res.StatusCode, res.Header.Get("Cache-Control"), body, tt.want, tt.cache)
		}
	}
}

func TestBatchGetValidation(t *testing.T) {
	h := newServer(t, &fakeReader{docs: map[string]string{"c\x00a": `{"id":"a"}`}}, func(c *api.Config) { c.BatchLimit = 3; c.MaxBodyBytes = 1024 })
	tests := []struct {
		body string
		want int
	}{
		{`{"ids": ["a", "b"]}`, 200},
		{`{"ids": []}`, 400},
		{`{"ids": ["a", "b", "c", "d"]}`, 400},
		{`{"ids": ["a"], "extra": 1}`, 400},
		{`{"ids": "a"}`, 400},
		{`not json`, 400},
		{`{"ids": ["a\u0000b"]}`, 400},
		{`{"ids": ["` + strings.Repeat("x", 2000) + `"]}`, 413},
	}
	for _, tt := range tests {
		res, body := do(t, h, http.MethodPost, "/v1/data/c:batchGet", tt.body)
		if res.StatusCode != tt.want {
			t.Errorf("batchGet %.40s = %d %s; want %d", tt.body, res.StatusCode, body, tt.want)
		}
	}
	_, body := do(t, h, http.MethodPost, "/v1/data/c:batchGet", `{"ids": ["a", "b"]}`)
	if want := `{"version":"` + string(ver) + `","documents":{"a":{"id":"a"}},"missing":["b"]}` + "\n"; string(body) != want {
		t.Errorf("batchGet body = %s; want %s", body, want)
	}
}

func TestPageTokenValidation(t *testing.T) {
	h := newServer(t, &fakeReader{}, nil)
	for _, target := range []string{
		"/v1/data/c?page_token=%%%", "/v1/data/c?page_token=bm90LWpzb24", "/v1/data/c?limit=0", "/v1/data/c?limit=1001",
		"/v1/data/c?limit=abc", "/v1/versions?page_token=!!",
		"/v1/versions?page_token=eyJhZnRlciI6Ii4uL3AjZGVtbyJ9", // {"after":"../p#demo"}: not a version
	} {
		if res, body := do(t, h, http.MethodGet, target, ""); res.StatusCode != 400 {
			t.Errorf("GET %s = %d %s; want 400", target, res.StatusCode, body)
		}
	}
}

// A bad config value is an error naming its field, never replaced by a default; a
// zero one takes its default.
func TestNewServerRefusesBadConfig(t *testing.T) {
	for field, set := range map[string]func(*api.Config){
		"BatchLimit":     func(c *api.Config) { c.BatchLimit = -1 },
		"PageLimit":      func(c *api.Config) { c.PageLimit = -1 },
		"MaxBodyBytes":   func(c *api.Config) { c.MaxBodyBytes = -1 },
		"MaxWatchers":    func(c *api.Config) { c.MaxWatchers = -1 },
		"WatchHeartbeat": func(c *api.Config) { c.WatchHeartbeat = -time.Second },
		"WatchInterval":  func(c *api.Config) { c.WatchInterval = -time.Second },
		"AdminToken":     func(c *api.Config) { c.AdminToken = "t" },
	} {
		cfg := api.DefaultConfig()
		set(&cfg)
		if s, err := api.NewServer(&fakeReader{}, cfg, nil); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s bad: NewServer = %v, %v; want an error naming %s", field, s, err, field)
		}
	}
	if _, err := api.NewServer(&fakeReader{}, api.DefaultConfig(), nil); err != nil {
		t.Errorf("the default config: %v", err)
	}
	if _, err := api.NewServer(&fakeReader{}, api.Config{}, nil); err != nil {
		t.Errorf("the zero config: %v; want every field at its default", err)
	}
}
