package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/auth"
	"github.com/snapflip/snapflip/auth/authtest"
)

// BenchmarkHotGetAuth is one cached document's GET in process, without auth and with
// a verified, cached token: the handler's own cost of authentication.
func BenchmarkHotGetAuth(b *testing.B) {
	is := authtest.NewIssuer(b)
	cfg := auth.Config{Issuers: []auth.Issuer{{Issuer: is.URL(), Audience: "snapflip"}}, AllowHTTP: true,
		Grants: []auth.Grant{{Subject: "reader", Collections: []string{"*"}}}, KeyRefresh: time.Minute, Leeway: time.Second}
	v, err := auth.NewVerifier(context.Background(), cfg, auth.VerifierOptions{})
	if err != nil {
		b.Fatal(err)
	}
	token := is.Token(authtest.Claims{"sub": "reader", "aud": "snapflip"})
	f := &fakeReader{docs: map[string]string{"c\x00a": `{"id":"a"}`}}
	for _, c := range []struct {
		name string
		set  func(*api.Config)
	}{
		{"none", nil},
		{"token", func(c *api.Config) { c.Auth = &api.Auth{Verifier: v, Policy: auth.NewPolicy(cfg)} }},
	} {
		h := newServer(b, f, c.set)
		b.Run(c.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/v1/data/c/a", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("%d %s", w.Code, w.Body)
				}
			}
		})
	}
}
