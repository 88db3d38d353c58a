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
	cfg := auth.Config{Issuers: []auth.Issuer{{Issuer: is.URL(), Audience: "snapflip"}}, AllowHTTP: true, KeyRefresh: time.Minute, Leeway: time.Second,
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
	// A version without the scope's index (the config changed after the start): a 500
	// that says why, on every scoped route, and nothing of the documents.
	f.manifests[0].Collections["c"] = snapshot.CollectionStats{Rows: 2}
	// An id that does not exist is answered the same (the scope is settled before any
	// read), and so is the current version named.
	for _, path := range []string{"/v1/data/c/mine", "/v1/data/c/absent", "/v1/data/c", "/v1/data/c?x=eq.1", "/v1/data/c/mine?version=" + string(ver)} {
		if res, body := call(t, h, path, app); res.StatusCode != 500 || !strings.Contains(body, "no index whose first field is tenant") {
			t.Errorf("%s through a scope no index serves: %d %s; want 500 naming the missing index", path, res.StatusCode, body)
		}
	}
	if !strings.Contains(log.String(), "/v1/data/c/mine") {
		t.Errorf("the debug log shows no request; the check above proves nothing:\n%s", log.String())
	}
	// A version the caller names that was made before the index: not the server's
	// fault but the caller's choice, a 403 that says why (not a 5xx to retry).
	f.manifests[0].Collections["c"] = snapshot.CollectionStats{Rows: 2, Indexes: []snapshot.IndexDef{{Name: "tenant", Fields: []string{"tenant"}, Types: []string{"text"}}}}
	const older = snapshot.Version("7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1763737100000")
	f.readable = map[snapshot.Version]snapshot.Manifest{older: {Version: older, Collections: map[string]snapshot.CollectionStats{"c": {Rows: 2}}}}
	for _, path := range []string{"/v1/data/c/mine?version=" + string(older), "/v1/data/c/absent?version=" + string(older), "/v1/data/c?version=" + string(older),
		"/v1/data/c?x=eq.1&version=" + string(older), "/v1/versions/" + string(older) + "/changes/c"} {
		if res, body := call(t, h, path, app); res.StatusCode != 403 || !strings.Contains(body, "cannot apply: it has no index whose first field is tenant") {
			t.Errorf("%s, a named version no index of the scope serves: %d %s; want 403 naming the missing index", path, res.StatusCode, body)
		}
	}
	if res, body := call(t, h, "/v1/data/c/mine", app); res.StatusCode != 200 {
		t.Errorf("the current version, which has the index: %d %s; want 200", res.StatusCode, body)
	}
}

// recordingAdmin records who each rollback was asked by.
type recordingAdmin struct{ by *[]string }

func (a recordingAdmin) Rollback(_ context.Context, req snapshot.RollbackRequest) (snapshot.RollbackResult, error) {
	*a.by = append(*a.by, req.By)
	return snapshot.RollbackResult{}, nil
}

func (a recordingAdmin) Unpin(_ context.Context, _, by string) (snapshot.RollbackResult, error) {
	*a.by = append(*a.by, by)
	return snapshot.RollbackResult{}, nil
}

// The admin endpoints take the admin token or an identity granted admin: true, and
// the audit trail names the identity's subject; any other identity gets 403.
func TestAdminByIdentity(t *testing.T) {
	is := authtest.NewIssuer(t)
	cfg := auth.Config{Issuers: []auth.Issuer{{Issuer: is.URL(), Audience: "snapflip"}}, AllowHTTP: true, KeyRefresh: time.Minute, Leeway: time.Second,
		Grants: []auth.Grant{{Subject: "ops", Collections: []string{"*"}, Admin: true}, {Subject: "reader", Collections: []string{"*"}}}}
	v, err := auth.NewVerifier(context.Background(), cfg, auth.VerifierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var by []string
	h := newServer(t, &fakeReader{}, func(c *api.Config) {
		c.Auth = &api.Auth{Verifier: v, Policy: auth.NewPolicy(cfg)}
		c.AdminToken, c.Admin = "admin-secret", recordingAdmin{by: &by}
	})
	post := func(auth string) int {
		req := httptest.NewRequest(http.MethodPost, "/v1/admin/rollback", strings.NewReader(`{"previous": true, "reason": "r"}`))
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	for _, c := range []struct {
		who   string
		token string
		want  int
	}{
		{"the admin token", "admin-secret", 200},
		{"an identity granted admin", is.Token(authtest.Claims{"sub": "ops", "aud": "snapflip"}), 200},
		{"an identity without admin", is.Token(authtest.Claims{"sub": "reader", "aud": "snapflip"}), 403},
		{"a bad token", "not-a-token", 401},
		{"no token", "", 401},
	} {
		if got := post(c.token); got != c.want {
			t.Errorf("%s: %d; want %d", c.who, got, c.want)
		}
	}
	if len(by) != 2 || !strings.HasPrefix(by[0], "api-admin@") || !strings.HasPrefix(by[1], "api-admin:ops@") {
		t.Errorf("the audit trail's callers = %q; want the admin token's address, then the identity's subject", by)
	}
}

// TestWatchEndsWhenTheTokenExpires: a watch stream ends at its token's expiry.
func TestWatchEndsWhenTheTokenExpires(t *testing.T) {
	var log bytes.Buffer
	f := &fakeReader{}
	s, is := authServer(t, f, &log)
	url := serveWatch(t, s)
	exp := time.Now().Add(2 * time.Second)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/v1/watch", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+is.Token(authtest.Claims{"sub": "reader", "aud": "snapflip", "exp": exp.Unix() + 1}))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET /v1/watch = %d; want 200", res.StatusCode)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, res.Body)
		ended <- err
	}()
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("the stream ended with %v; want its end", err)
		}
		if time.Now().Before(exp.Add(time.Second)) { // authServer's leeway
			t.Errorf("the stream ended before the verifier stopped accepting its token")
		}
	case <-time.After(time.Minute):
		t.Fatal("the stream outlived its token by a minute")
	}
}
