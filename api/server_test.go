package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/snapshot"
)

// fakeReader is a pure-logic stand-in for snapshot.Resolver; the real one is tested
// end to end in package e2e.
type fakeReader struct {
	docs    map[string]string // collection + "\x00" + id → document
	noVer   bool
	panicOn string
	gotIDs  []string
}

const ver = snapshot.Version("7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1763737200000")

func (f *fakeReader) Current(context.Context) (snapshot.View, error) {
	if f.noVer {
		return snapshot.View{}, snapshot.ErrNoVersion
	}
	return snapshot.View{Version: ver, Manifest: snapshot.Manifest{Collections: map[string]snapshot.CollectionStats{"c": {}}}}, nil
}

func (f *fakeReader) Get(_ context.Context, v snapshot.View, collection, id string) ([]byte, error) {
	f.gotIDs = append(f.gotIDs, id)
	if id == f.panicOn {
		panic("boom")
	}
	if !v.HasCollection(collection) {
		return nil, snapshot.ErrNotFound
	}
	d, ok := f.docs[collection+"\x00"+id]
	if !ok {
		return nil, snapshot.ErrNotFound
	}
	return []byte(d), nil
}

func (f *fakeReader) Ready(ctx context.Context) error {
	_, err := f.Current(ctx)
	return err
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
	h := api.NewServer(f, slog.New(slog.DiscardHandler))
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
	h := api.NewServer(f, slog.New(slog.DiscardHandler))
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
		{"/v1/data/c", 404},
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
	h := api.NewServer(&fakeReader{noVer: true}, slog.New(slog.DiscardHandler))
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
	h := api.NewServer(&fakeReader{panicOn: "bad"}, slog.New(slog.DiscardHandler))
	res, body := serve(t, h, "/v1/data/c/bad")
	if res.StatusCode != 500 || !strings.Contains(string(body), "internal") || strings.Contains(string(body), "boom") {
		t.Errorf("panic answered %d %s; want a 500 problem that hides the panic", res.StatusCode, body)
	}
}

func TestStorageErrorsHideInternals(t *testing.T) {
	h := api.NewServer(errReader{errors.New("rpc error: secret-host:443 exploded")}, slog.New(slog.DiscardHandler))
	res, body := serve(t, h, "/v1/data/c/x")
	if res.StatusCode != 500 || strings.Contains(string(body), "secret-host") {
		t.Errorf("storage error answered %d %s; want 500 without internals", res.StatusCode, body)
	}
}

type errReader struct{ err error }

func (e errReader) Current(context.Context) (snapshot.View, error) { return snapshot.View{}, e.err }
func (e errReader) Get(context.Context, snapshot.View, string, string) ([]byte, error) {
	return nil, e.err
}
func (e errReader) Ready(context.Context) error { return e.err }

func FuzzGetDocumentPath(f *testing.F) {
	for _, s := range []string{"a", "a%2Fb", "%00", "..", "%ff", "100%25", "%", "a/b"} {
		f.Add(s)
	}
	h := api.NewServer(&fakeReader{docs: map[string]string{"c\x00a": `{}`}}, slog.New(slog.DiscardHandler))
	f.Fuzz(func(t *testing.T, id string) {
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
