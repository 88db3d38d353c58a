package api_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/auth"
	"github.com/snapflip/snapflip/auth/authtest"
	"github.com/snapflip/snapflip/snapshot"
)

// authServer is a server with authentication over f: a reader of c, a tenant app
// scoped by tenant on c, whose current version indexes tenant; its log, at debug
// level, goes to log.
func authServer(t *testing.T, f *fakeReader, log *bytes.Buffer) (*api.Server, *authtest.Issuer) {
	t.Helper()
	is := authtest.NewIssuer(t)
	cfg := auth.Config{Issuers: []auth.Issuer{{Issuer: is.URL(), Audience: "snapflip"}}, KeyRefresh: time.Minute, Leeway: time.Second,
		Grants: []auth.Grant{{Subject: "reader", Collections: []string{"c"}},
			{Claim: &auth.ClaimMatch{Name: "role", Value: "app"}, Collections: []string{"c"}, Rows: &auth.RowRule{Field: "tenant", Claim: "tenant"}}}}
	v, err := auth.NewVerifier(context.Background(), cfg, auth.VerifierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.manifests = []snapshot.Manifest{{Version: ver, Collections: map[string]snapshot.CollectionStats{
		"c": {Rows: 2, Indexes: []snapshot.IndexDef{{Name: "tenant", Fields: []string{"tenant"}, Types: []string{"text"}}}},
		"d": {Rows: 5},
	}}}
	sc := api.DefaultConfig()
	sc.Auth = &api.Auth{Verifier: v, Policy: auth.NewPolicy(cfg)}
	sc.Registry = prometheus.NewRegistry()
	s, err := api.NewServer(f, sc, slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	return s, is
}

func call(t *testing.T, h http.Handler, target, token string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	body, _ := io.ReadAll(w.Result().Body)
	return w.Result(), string(body)
}

// A scoped caller's select reads only its own documents; a 403 names no grant and no
// other collection; tokens, good or bad, never reach the log or the metrics.
func TestAuthScopeSelectAndSecrecy(t *testing.T) {
	var log bytes.Buffer
	f := &fakeReader{docs: map[string]string{"c\x00mine": `{"tenant":"t1","x":1}`, "c\x00theirs": `{"tenant":"t2","x":2}`}}
	h, is := authServer(t, f, &log)
	app := is.Token(authtest.Claims{"sub": "app", "aud": "snapflip", "role": "app", "tenant": "t1"})
	reader := is.Token(authtest.Claims{"sub": "reader", "aud": "snapflip"})
	if res, body := call(t, h, "/v1/data/c/mine?select=x", app); res.StatusCode != 200 || body != `{"x":1}` {
		t.Errorf("select in the scope: %d %s", res.StatusCode, body)
	}
	if res, body := call(t, h, "/v1/data/c/theirs?select=x", app); res.StatusCode != 404 || strings.Contains(body, "t2") {
		t.Errorf("select outside the scope: %d %s; want 404", res.StatusCode, body)
	}
	if res, body := call(t, h, "/v1/data/c/theirs", reader); res.StatusCode != 200 {
		t.Errorf("an unscoped reader: %d %s", res.StatusCode, body)
	}
	res, body := call(t, h, "/v1/data/d/x", reader)
	if res.StatusCode != 403 || strings.Contains(body, `"c"`) || strings.Contains(body, "reader") || strings.Contains(body, "app") {
		t.Errorf("a collection not granted: %d %s; want 403 naming no grant nor other collection", res.StatusCode, body)
	}
	if res, _ := call(t, h, "/", reader); res.StatusCode != 403 {
		t.Errorf("the status page for a reader of one collection: %d; want 403", res.StatusCode)
	}
	if res, body := call(t, h, "/v1/versions/current", app); res.StatusCode != 200 || strings.Contains(body, `"d":`) || strings.Contains(body, `"c":`) {
		t.Errorf("versions for a scoped caller: %d %s; want no counts", res.StatusCode, body)
	}
	if res, _ := call(t, h, "/healthz", ""); res.StatusCode != 200 {
		t.Errorf("/healthz without a token: %d", res.StatusCode)
	}
	bad := is.Token(authtest.Claims{"sub": "reader", "aud": "other"})
	for _, tok := range []string{bad, "garbage-token-123456789"} {
		if res, _ := call(t, h, "/v1/data/c/mine", tok); res.StatusCode != 401 {
			t.Errorf("a bad token: %d; want 401", res.StatusCode)
		}
	}
	_, metrics := call(t, h, "/metrics", "")
	for _, tok := range []string{app, reader, bad, "garbage-token-123456789"} {
		sig := tok[len(tok)-16:]
		if strings.Contains(log.String(), sig) || strings.Contains(metrics, sig) {
			t.Errorf("a token reached the log or the metrics:\n%s", log.String())
		}
	}
	if !strings.Contains(log.String(), "/v1/data/c/mine") {
		t.Errorf("the debug log shows no request; the check above proves nothing:\n%s", log.String())
	}
}
