package auth_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/snapflip/snapflip/auth"
	"github.com/snapflip/snapflip/auth/authtest"
	"github.com/snapflip/snapflip/internal/testenv"
)

func newVerifier(t *testing.T, issuers ...auth.Issuer) *auth.Verifier {
	t.Helper()
	cfg := auth.Config{Issuers: issuers, Grants: []auth.Grant{{Subject: "x", Collections: []string{"*"}}},
		KeyRefresh: time.Hour, Leeway: 30 * time.Second, AllowHTTP: true}
	v, err := auth.NewVerifier(context.Background(), cfg, auth.VerifierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVerifyAlgorithms(t *testing.T) {
	is := authtest.NewIssuer(t)
	v := newVerifier(t, auth.Issuer{Issuer: is.URL(), Audience: "snapflip"})
	var tokens []string
	for _, alg := range []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.EdDSA} {
		if err := is.AddKey(alg); err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, is.Token(authtest.Claims{"sub": "svc-" + string(alg), "aud": "snapflip"}))
	}
	for i, alg := range []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.EdDSA} {
		id, err := v.Verify(context.Background(), tokens[i])
		if err != nil || id.Subject != "svc-"+string(alg) || id.Issuer != is.URL() {
			t.Fatalf("%s: %+v, %v", alg, id, err)
		}
	}
	// An aud array holding the audience is as good.
	if _, err := v.Verify(context.Background(), is.Token(authtest.Claims{"sub": "a", "aud": []string{"other", "snapflip"}})); err != nil {
		t.Fatal(err)
	}
}

// Every bad token is refused with an error wrapping ErrUnauthenticated that does not
// hold the token.
func TestVerifyRefuses(t *testing.T) {
	is := authtest.NewIssuer(t)
	other := authtest.NewIssuer(t)
	v := newVerifier(t, auth.Issuer{Issuer: is.URL(), Audience: "snapflip"})
	good := authtest.Claims{"sub": "a", "aud": "snapflip"}
	with := func(k string, val any) authtest.Claims {
		c := authtest.Claims{}
		for kk, vv := range good {
			c[kk] = vv
		}
		c[k] = val
		return c
	}
	valid := is.Token(good)
	parts := strings.Split(valid, ".")
	is.AddKey(jose.RS256)
	is.RemoveOldest()
	for _, c := range []struct{ name, token, want string }{
		{"empty", "", "no token"},
		{"garbage", "not-a-jwt", "not a JWT"},
		{"alg none", parts[0][:0] + "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + parts[1] + ".", "not a JWT"},
		{"HS256 keyed with the RSA public key", authtest.SignWith(is.PublicPEM(), jose.HS256, "", good), "not a JWT"},
		{"expired", is.Token(with("exp", time.Now().Add(-time.Hour).Unix())), "expired"},
		{"nbf in the future", is.Token(with("nbf", time.Now().Add(time.Hour).Unix())), "before"},
		{"another issuer", other.Token(good), "not trusted"},
		{"iss claims ours, signed by another", other.Token(with("iss", is.URL())), "no key"},
		{"wrong audience", is.Token(with("aud", "someone-else")), "audience"},
		{"no exp", is.Token(with("exp", nil)), ""},
		{"a key never published", is.Unpublished(good), "no key"},
		{"a key removed from the set", is.TokenWithRemoved(good), "no key"},
		{"truncated", valid[:len(valid)-10], ""},
		{"signature of another token", parts[0] + "." + strings.Split(is.Token(with("sub", "b")), ".")[1] + "." + parts[2], ""},
		{"16 KiB", strings.Repeat("a", 16<<10), "over the limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := v.Verify(context.Background(), c.token)
			if !errors.Is(err, auth.ErrUnauthenticated) {
				t.Fatalf("err = %v; want ErrUnauthenticated", err)
			}
			var ue *auth.UnauthenticatedError
			if !errors.As(err, &ue) || err.Error() != "unauthenticated: "+ue.Reason.Error() {
				t.Errorf("err = %v; want an UnauthenticatedError saying why", err)
			}
			if c.want != "" && !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v; want it to say %q", err, c.want)
			}
			if len(c.token) > 20 && strings.Contains(err.Error(), c.token[len(c.token)-20:]) {
				t.Errorf("err holds the token: %v", err)
			}
		})
	}
}

// However many requests name an unknown key at once, the keys are read once per
// interval; a key added by the issuer is found by that read.
func TestUnknownKeyRefreshesOnce(t *testing.T) {
	is := authtest.NewIssuer(t)
	v := newVerifier(t, auth.Issuer{Issuer: is.URL(), Audience: "snapflip"})
	if _, err := v.Verify(context.Background(), is.Token(authtest.Claims{"sub": "a", "aud": "snapflip"})); err != nil {
		t.Fatal(err)
	}
	before := is.KeyReads.Load()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := v.Verify(context.Background(), is.Unpublished(authtest.Claims{"sub": "x", "aud": "snapflip", "n": i}))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("unpublished key: %v", err)
		}
	}
	// The first unknown key prompted one read; none more within the interval, though
	// the keys were read at start (a read of the keys' age does not count).
	if got := is.KeyReads.Load() - before; got != 1 {
		t.Errorf("%d key reads for 200 tokens naming an unknown key within the interval; want 1 (one per interval)", got)
	}
}

func TestKeyRotationAfterInterval(t *testing.T) {
	is := authtest.NewIssuer(t)
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	cfg := auth.Config{Issuers: []auth.Issuer{{Issuer: is.URL(), Audience: "snapflip"}},
		Grants: []auth.Grant{{Subject: "x", Collections: []string{"*"}}}, KeyRefresh: time.Minute, Leeway: time.Second, AllowHTTP: true}
	v, err := auth.NewVerifier(context.Background(), cfg, auth.VerifierOptions{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	claims := authtest.Claims{"sub": "a", "aud": "snapflip", "exp": time.Now().Add(2 * time.Hour).Unix()}
	if _, err := v.Verify(context.Background(), is.Token(claims)); err != nil {
		t.Fatal(err)
	}
	// A new key is read for at once, though the keys were read at start; a second
	// within the interval is not.
	is.AddKey(jose.ES256)
	if _, err := v.Verify(context.Background(), is.Token(claims)); err != nil {
		t.Fatalf("a new key: %v; want it read for at once", err)
	}
	is.AddKey(jose.RS256)
	if _, err := v.Verify(context.Background(), is.Token(claims)); err == nil {
		t.Fatal("a second new key verified within the interval: the set was read again too soon")
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	reads := is.KeyReads.Load()
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := v.Verify(context.Background(), is.Token(claims)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := is.KeyReads.Load() - reads; got != 1 {
		t.Errorf("%d key reads for 50 tokens of a new key; want 1", got)
	}
}

func TestJWKSFile(t *testing.T) {
	is := authtest.NewIssuer(t)
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := is.WriteJWKS(path); err != nil {
		t.Fatal(err)
	}
	v := newVerifier(t, auth.Issuer{Issuer: is.URL(), Audience: "snapflip", JWKSFile: path})
	if _, err := v.Verify(context.Background(), is.Token(authtest.Claims{"sub": "a", "aud": "snapflip"})); err != nil {
		t.Fatal(err)
	}
	if n := is.KeyReads.Load(); n != 0 {
		t.Errorf("%d reads of the issuer's keys over HTTP; want none with a jwks_file", n)
	}
	cfg := auth.Config{Issuers: []auth.Issuer{{Issuer: is.URL(), Audience: "a", JWKSFile: filepath.Join(t.TempDir(), "none.json")}}, AllowHTTP: true}
	if _, err := auth.NewVerifier(context.Background(), cfg, auth.VerifierOptions{}); !errors.Is(err, auth.ErrConfig) {
		t.Errorf("a missing jwks_file: %v; want ErrConfig", err)
	}
}

// A verified token is answered from memory: a second Verify reads no keys even when
// the issuer has gone.
func TestVerifiedTokensAreCached(t *testing.T) {
	is := authtest.NewIssuer(t)
	v := newVerifier(t, auth.Issuer{Issuer: is.URL(), Audience: "snapflip"})
	tok := is.Token(authtest.Claims{"sub": "a", "aud": "snapflip"})
	first, err := v.Verify(context.Background(), tok)
	if err != nil {
		t.Fatal(err)
	}
	is.AddKey(jose.RS256)
	is.RemoveOldest()
	second, err := v.Verify(context.Background(), tok)
	if err != nil || second != first {
		t.Fatalf("second Verify: %v, %v; want the cached identity", second, err)
	}
}

// A jwks_file is read again when a token names a key it does not hold, once the
// interval passed: a key added to the file (a ConfigMap update) verifies.
func TestJWKSFileReadAgain(t *testing.T) {
	is := authtest.NewIssuer(t)
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := is.WriteJWKS(path); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	cfg := auth.Config{Issuers: []auth.Issuer{{Issuer: is.URL(), Audience: "snapflip", JWKSFile: path}},
		Grants: []auth.Grant{{Subject: "x", Collections: []string{"*"}}}, KeyRefresh: time.Minute, Leeway: time.Second, AllowHTTP: true}
	v, err := auth.NewVerifier(context.Background(), cfg, auth.VerifierOptions{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := is.AddKey(jose.EdDSA); err != nil {
		t.Fatal(err)
	}
	if err := is.WriteJWKS(path); err != nil {
		t.Fatal(err)
	}
	claims := authtest.Claims{"sub": "a", "aud": "snapflip", "exp": now.Add(2 * time.Hour).Unix()}
	if _, err := v.Verify(context.Background(), is.Token(claims)); err != nil {
		t.Fatalf("the new key of the file: %v; want it read for at once", err)
	}
	if err := is.AddKey(jose.RS256); err != nil {
		t.Fatal(err)
	}
	if err := is.WriteJWKS(path); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), is.Token(claims)); err == nil {
		t.Fatal("a second new key of the file verified within the interval: it was read again too soon")
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	if _, err := v.Verify(context.Background(), is.Token(claims)); err != nil {
		t.Fatalf("the new key of the file, once the interval passed: %v", err)
	}
	if n := is.KeyReads.Load(); n != 0 {
		t.Errorf("%d reads over HTTP; want none with a jwks_file", n)
	}
}

// A discovery document naming another issuer is refused: its keys are not this
// issuer's.
func TestDiscoveryOfAnotherIssuer(t *testing.T) {
	is := authtest.NewIssuer(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"issuer": "https://elsewhere.example", "jwks_uri": "` + is.URL() + `/keys"}`))
	}))
	t.Cleanup(srv.Close)
	v := newVerifier(t, auth.Issuer{Issuer: srv.URL, Audience: "snapflip"})
	_, err := v.Verify(context.Background(), is.Token(authtest.Claims{"iss": srv.URL, "sub": "a", "aud": "snapflip"}))
	if !errors.Is(err, auth.ErrUnauthenticated) || !strings.Contains(err.Error(), "elsewhere.example") {
		t.Errorf("err = %v; want a refusal naming the discovery document's issuer", err)
	}
}

// A Config built in code with zero KeyRefresh and Leeway takes their defaults, as
// Parse gives a file: a token expired within the default leeway is accepted, and a
// burst of tokens naming a key the issuer does not publish reads the keys no more
// often than the default interval allows.
func TestZeroKeyRefreshAndLeewayTakeDefaults(t *testing.T) {
	is := authtest.NewIssuer(t)
	cfg := auth.Config{Issuers: []auth.Issuer{{Issuer: is.URL(), Audience: "snapflip"}},
		Grants: []auth.Grant{{Subject: "x", Collections: []string{"*"}}}, AllowHTTP: true}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(context.Background(), cfg, auth.VerifierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expired := is.Token(authtest.Claims{"sub": "a", "aud": "snapflip", "exp": time.Now().Add(-auth.DefaultLeeway / 3).Unix()})
	if id, err := v.Verify(context.Background(), expired); err != nil {
		t.Errorf("a token expired %s ago, zero Leeway (default %s): %v", auth.DefaultLeeway/3, auth.DefaultLeeway, err)
	} else if !id.Until().Equal(id.Expiry.Add(auth.DefaultLeeway)) {
		t.Errorf("Until = %s; want the expiry %s and the leeway", id.Until(), id.Expiry)
	}
	before := is.KeyReads.Load()
	for i := range 20 {
		if _, err := v.Verify(context.Background(), is.Unpublished(authtest.Claims{"sub": "x", "aud": "snapflip", "n": i})); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("unpublished key: %v", err)
		}
	}
	if got := is.KeyReads.Load() - before; got != 1 {
		t.Errorf("%d key reads for 20 tokens naming an unknown key, zero KeyRefresh (default %s); want 1 (one per interval)", got, auth.DefaultKeyRefresh)
	}
}

// A verified token's number claims keep every digit: a tenant of 2^53+1, which a
// float64 rounds to 2^53, scopes to exactly itself.
func TestNumberClaimExact(t *testing.T) {
	is := authtest.NewIssuer(t)
	cfg := auth.Config{Issuers: []auth.Issuer{{Issuer: is.URL(), Audience: "snapflip"}}, Grants: []auth.Grant{
		{Claim: &auth.ClaimMatch{Name: "org", Value: "9007199254740995"}, Collections: []string{"orgs"}},
		{Subject: "app", Collections: []string{"docs"}, Rows: &auth.RowRule{Field: "tenant_id", Claim: "tenant"}},
	}}
	v := newVerifier(t, cfg.Issuers...)
	id, err := v.Verify(context.Background(), is.Token(authtest.Claims{"sub": "app", "aud": "snapflip",
		"tenant": int64(9007199254740993), "org": []int64{9007199254740993, 9007199254740995}}))
	if err != nil {
		t.Fatal(err)
	}
	p := auth.NewPolicy(cfg)
	if got, scope := p.Access(id, "docs"); got != auth.Scoped || scope != (auth.Scope{Field: "tenant_id", Value: "9007199254740993"}) {
		t.Errorf("Access = %v %+v; want Scoped tenant_id = \"9007199254740993\"", got, scope)
	}
	if got, _ := p.Access(id, "orgs"); got != auth.Whole {
		t.Errorf("the grant of org 9007199254740995, an org claim holding it: %v; want Whole", got)
	}
}

// An empty claim is no claim: a token with "tenant": "" is not scoped to the
// documents whose tenant is empty.
func TestEmptyClaimIsNoScope(t *testing.T) {
	is := authtest.NewIssuer(t)
	cfg := auth.Config{Issuers: []auth.Issuer{{Issuer: is.URL(), Audience: "snapflip"}}, Grants: []auth.Grant{
		{Subject: "app", Collections: []string{"docs"}, Rows: &auth.RowRule{Field: "tenant_id", Claim: "tenant"}},
	}}
	v := newVerifier(t, cfg.Issuers...)
	id, err := v.Verify(context.Background(), is.Token(authtest.Claims{"sub": "app", "aud": "snapflip", "tenant": ""}))
	if err != nil {
		t.Fatal(err)
	}
	if got, scope := auth.NewPolicy(cfg).Access(id, "docs"); got != auth.NoClaim {
		t.Errorf("Access = %v %+v; want NoClaim", got, scope)
	}
	// Nor does it match a grant of the empty value, which Validate refuses but a
	// Config built in code may hold.
	cfg.Grants = []auth.Grant{{Claim: &auth.ClaimMatch{Name: "tenant", Value: ""}, Collections: []string{"docs"}}}
	if got, _ := auth.NewPolicy(cfg).Access(id, "docs"); got != auth.Denied {
		t.Errorf("a grant of tenant = \"\": %v; want Denied", got)
	}
}

// Keys are fetched over https only, unless the config allows http for local
// testing: an http issuer's discovery, and an https issuer's discovery document that
// names an http jwks_uri, are refused, and both verify with AllowHTTP.
func TestKeysOverHTTPS(t *testing.T) {
	is := authtest.NewIssuer(t)
	tlsIssuer := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// An https issuer whose keys are is's, served over http.
		_, _ = fmt.Fprintf(w, `{"issuer": %q, "jwks_uri": %q}`, "https://"+r.Host, is.URL()+"/keys")
	}))
	t.Cleanup(tlsIssuer.Close)
	for _, c := range []struct {
		name, issuer, want string
	}{
		{"http issuer", is.URL(), "http://"},
		{"https issuer, http jwks_uri", tlsIssuer.URL, fmt.Sprintf("jwks_uri %q", is.URL()+"/keys")},
	} {
		for _, allow := range []bool{false, true} {
			cfg := auth.Config{Issuers: []auth.Issuer{{Issuer: c.issuer, Audience: "snapflip"}}, AllowHTTP: allow}
			v, err := auth.NewVerifier(context.Background(), cfg, auth.VerifierOptions{Client: tlsIssuer.Client()})
			if err != nil {
				t.Fatal(err)
			}
			_, err = v.Verify(context.Background(), is.Token(authtest.Claims{"iss": c.issuer, "sub": "a", "aud": "snapflip"}))
			switch {
			case allow && err != nil:
				t.Errorf("%s, AllowHTTP: %v", c.name, err)
			case !allow && (!errors.Is(err, auth.ErrUnauthenticated) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "https")):
				t.Errorf("%s: err = %v; want a refusal naming %q and https", c.name, err, c.want)
			}
		}
	}
}

// clock is a test's clock: it stands still until Add moves it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// rotation is an issuer whose keys a verifier reads by discovery or from a jwks_file.
type rotation struct {
	is    *authtest.Issuer
	clock *clock
	v     *auth.Verifier
	path  string // the jwks_file; "" for discovery
}

func newRotation(t *testing.T, jwksFile bool, keyRefresh time.Duration) *rotation {
	t.Helper()
	r := &rotation{is: authtest.NewIssuer(t), clock: newClock()}
	iss := auth.Issuer{Issuer: r.is.URL(), Audience: "snapflip"}
	if jwksFile {
		r.path = filepath.Join(t.TempDir(), "jwks.json")
		iss.JWKSFile = r.path
		r.publish(t)
	}
	cfg := auth.Config{Issuers: []auth.Issuer{iss}, KeyRefresh: keyRefresh, Leeway: time.Second, AllowHTTP: true}
	v, err := auth.NewVerifier(context.Background(), cfg, auth.VerifierOptions{Now: r.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	r.v = v
	return r
}

// publish writes the issuer's keys to the jwks_file (discovery serves them as they
// are).
func (r *rotation) publish(tb testing.TB) {
	tb.Helper()
	if r.path != "" {
		if err := r.is.WriteJWKS(r.path); err != nil {
			tb.Fatal(err)
		}
	}
}

// token is a token of the issuer's newest key, valid for two hours of the clock.
func (r *rotation) token(sub string) string {
	return r.is.Token(authtest.Claims{"sub": sub, "aud": "snapflip", "exp": r.clock.Now().Add(2 * time.Hour).Unix()})
}

// A token verified (and cached) with a key stops verifying within key_refresh of the
// key's removal from the issuer's set: a request once the keys are key_refresh old
// waits for them to be read again, and one from 80% of it has them read in the
// background, which drops the key's cached tokens.
func TestRemovedKeyStopsVerifying(t *testing.T) {
	for _, c := range []struct {
		name     string
		jwksFile bool
		after    time.Duration // of key_refresh (a minute) when the token is asked again
	}{
		{"discovery, key_refresh on", false, time.Minute},
		{"jwks_file, key_refresh on", true, time.Minute},
		{"discovery, read in the background", false, 54 * time.Second},
		{"jwks_file, read in the background", true, 54 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRotation(t, c.jwksFile, time.Minute)
			ctx := context.Background()
			old := r.token("a")
			if _, err := r.v.Verify(ctx, old); err != nil {
				t.Fatal(err)
			}
			if err := r.is.AddKey(jose.ES256); err != nil {
				t.Fatal(err)
			}
			r.is.RemoveOldest()
			r.publish(t)
			r.clock.Add(c.after)
			refused := func() error {
				if _, err := r.v.Verify(ctx, old); err == nil {
					return fmt.Errorf("a token of a key removed from the set still verifies %s on", c.after)
				} else if !errors.Is(err, auth.ErrUnauthenticated) || !strings.Contains(err.Error(), "no key") {
					t.Fatalf("a token of a removed key: %v; want ErrUnauthenticated saying no key verifies it", err)
				}
				return nil
			}
			if c.after == time.Minute {
				if err := refused(); err != nil {
					t.Fatal(err)
				}
			} else {
				// Answered from the cache at once, while the keys are read behind it.
				if _, err := r.v.Verify(ctx, old); err != nil {
					t.Fatalf("within key_refresh, the cached token: %v", err)
				}
				testenv.Eventually(t, 30*time.Second, refused)
			}
			if _, err := r.v.Verify(ctx, r.token("b")); err != nil {
				t.Errorf("a token of the new key: %v", err)
			}
		})
	}
}

// A token naming a key the verifier does not hold has the keys read again once
// min(key_refresh, 30s) passed since the last read, however long key_refresh is: one
// read for many such tokens at once, which it lets verify.
func TestUnknownKeyReadsAfter30s(t *testing.T) {
	for _, jwksFile := range []bool{false, true} {
		r := newRotation(t, jwksFile, time.Hour)
		if _, err := r.v.Verify(context.Background(), r.token("a")); err != nil {
			t.Fatal(err)
		}
		if err := r.is.AddKey(jose.EdDSA); err != nil {
			t.Fatal(err)
		}
		r.publish(t)
		r.clock.Add(30 * time.Second)
		reads := r.v.KeyFetches(r.is.URL())
		var wg sync.WaitGroup
		errs := make([]error, 50)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = r.v.Verify(context.Background(), r.token(fmt.Sprint("new-", i)))
			}()
		}
		wg.Wait()
		if i := slices.IndexFunc(errs, func(err error) bool { return err != nil }); i >= 0 {
			t.Errorf("jwks_file %v: a token of a new key, 30s on: %v", jwksFile, errs[i])
		}
		if got := r.v.KeyFetches(r.is.URL()) - reads; got != 1 {
			t.Errorf("jwks_file %v: %d key reads for 50 tokens of a new key; want 1", jwksFile, got)
		}
	}
}

// When the keys cannot be read, the keys held keep verifying (availability over a
// removal the verifier cannot see), and a failed read is not tried again by every
// request.
func TestKeysKeptWhenReadsFail(t *testing.T) {
	r := newRotation(t, true, time.Minute)
	ctx := context.Background()
	cached := r.token("a")
	if _, err := r.v.Verify(ctx, cached); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.path, []byte("not JSON"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r.clock.Add(time.Minute)
		reads := r.v.KeyFetches(r.is.URL())
		for i := range 20 {
			if _, err := r.v.Verify(ctx, cached); err != nil {
				t.Fatalf("the cached token, its key unreadable: %v", err)
			}
			if _, err := r.v.Verify(ctx, r.token(fmt.Sprint("fresh-", i))); err != nil {
				t.Fatalf("a new token of a held key, the keys unreadable: %v", err)
			}
		}
		if got := r.v.KeyFetches(r.is.URL()) - reads; got != 1 {
			t.Errorf("%d reads of the keys in 40 verifications a key_refresh after the last; want 1", got)
		}
	}
}
