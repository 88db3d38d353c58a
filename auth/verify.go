package auth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

// ErrUnauthenticated is wrapped by every error of Verify: the token is missing,
// malformed, signed by no key of its issuer, or fails a claim check.
var ErrUnauthenticated = errors.New("unauthenticated")

// MaxTokenBytes bounds a bearer token; a projected service-account token is about
// 1 KiB.
const MaxTokenBytes = 8 << 10

// algorithms are the signature algorithms a token may use: no HMAC (whose key a
// verifier would have to share) and never "none".
var algorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.EdDSA}

// cacheSize bounds the verified tokens kept; past it, expired ones are dropped, and
// if none has expired, all.
const cacheSize = 10_000

// Verifier verifies bearer tokens into identities.
type Verifier struct {
	issuers map[string]*issuer
	leeway  time.Duration
	now     func() time.Time

	mu sync.RWMutex
	// cache holds verified tokens by their text (Go's map hash is far cheaper than a
	// digest, and the tokens are held in memory anyway while requests carry them).
	cache map[string]*Identity
}

type issuer struct {
	verifier *oidc.IDTokenVerifier
	keys     *keySet
}

// VerifierOptions are the verifier's collaborators; a zero field takes its default.
type VerifierOptions struct {
	// Client fetches discovery documents and key sets; default one with a 10s timeout.
	Client *http.Client
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// NewVerifier returns a verifier for c's issuers. It reads every jwks_file now, so a
// missing or malformed one is an error at start; discovered keys are fetched when the
// first token needs them. A zero KeyRefresh or Leeway takes its default.
func NewVerifier(ctx context.Context, c Config, o VerifierOptions) (*Verifier, error) {
	c = c.withDefaults()
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	v := &Verifier{issuers: map[string]*issuer{}, leeway: c.Leeway, now: o.Now, cache: map[string]*Identity{}}
	for _, is := range c.Issuers {
		ks := &keySet{every: c.KeyRefresh, now: o.Now}
		if is.JWKSFile != "" {
			ks.fetch = fileKeys(is.JWKSFile)
			if err := ks.load(ctx); err != nil {
				return nil, fmt.Errorf("%w: issuer %s: %w", ErrConfig, is.Issuer, err)
			}
		} else {
			ks.fetch = discoveredKeys(o.Client, is.Issuer, c.AllowHTTP)
		}
		algs := make([]string, len(algorithms))
		for i, a := range algorithms {
			algs[i] = string(a)
		}
		v.issuers[is.Issuer] = &issuer{keys: ks, verifier: oidc.NewVerifier(is.Issuer, ks, &oidc.Config{
			ClientID: is.Audience, SupportedSigningAlgs: algs,
			// exp gets the leeway this way; go-oidc allows nbf five minutes of its own.
			Now: func() time.Time { return o.Now().Add(-c.Leeway) },
		})}
	}
	return v, nil
}

// Verify returns the identity raw (a compact JWS) proves: signed by a key of the
// issuer it names, for that issuer's audience, and not expired. A token verified
// before is answered from memory until it expires. Errors wrap ErrUnauthenticated and
// never hold the token.
func (v *Verifier) Verify(ctx context.Context, raw string) (*Identity, error) {
	if raw == "" {
		return nil, fmt.Errorf("%w: no token", ErrUnauthenticated)
	}
	if len(raw) > MaxTokenBytes {
		return nil, fmt.Errorf("%w: token of %d bytes, over the limit of %d", ErrUnauthenticated, len(raw), MaxTokenBytes)
	}
	now := v.now()
	v.mu.RLock()
	id, ok := v.cache[raw]
	v.mu.RUnlock()
	if ok && now.Before(id.Until()) {
		return id, nil
	}
	id, err := v.verify(ctx, raw)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.cache) >= cacheSize {
		for k, e := range v.cache {
			if !now.Before(e.Until()) {
				delete(v.cache, k)
			}
		}
		if len(v.cache) >= cacheSize {
			clear(v.cache)
		}
	}
	v.cache[raw] = id
	return id, nil
}

func (v *Verifier) verify(ctx context.Context, raw string) (*Identity, error) {
	jws, err := jose.ParseSigned(raw, algorithms)
	if err != nil {
		return nil, fmt.Errorf("%w: not a JWT signed with %v: %w", ErrUnauthenticated, algorithms, err)
	}
	var unverified struct {
		Issuer string `json:"iss"`
	}
	if err := json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &unverified); err != nil {
		return nil, fmt.Errorf("%w: claims are not a JSON object", ErrUnauthenticated)
	}
	is, ok := v.issuers[unverified.Issuer]
	if !ok {
		return nil, fmt.Errorf("%w: issuer %q is not trusted", ErrUnauthenticated, clip(unverified.Issuer))
	}
	tok, err := is.verifier.Verify(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	var payload json.RawMessage
	if err := tok.Claims(&payload); err != nil {
		return nil, fmt.Errorf("%w: claims: %w", ErrUnauthenticated, err)
	}
	claims, err := decodeClaims(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: claims: %w", ErrUnauthenticated, err)
	}
	return &Identity{Issuer: tok.Issuer, Subject: tok.Subject, Expiry: tok.Expiry, claims: claims, leeway: v.leeway}, nil
}

// decodeClaims decodes a token's claims with every number a json.Number: a float64
// rounds an integer past 2^53, and a claim is compared as its digits.
func decodeClaims(payload []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var claims map[string]any
	if err := dec.Decode(&claims); err != nil {
		return nil, err
	}
	return claims, nil
}

// KeyFetches returns how many times the issuer's keys were read (for tests and
// metrics); 0 for an issuer not configured.
func (v *Verifier) KeyFetches(issuerURL string) int64 {
	is, ok := v.issuers[issuerURL]
	if !ok {
		return 0
	}
	is.keys.mu.Lock()
	defer is.keys.mu.Unlock()
	return is.keys.fetches
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// keySet is an issuer's keys, implementing go-oidc's KeySet: a token naming a key it
// does not hold makes it read the keys again, at most once per interval however many
// such tokens come, all of them waiting for the one read.
type keySet struct {
	fetch func(ctx context.Context) (jose.JSONWebKeySet, error)
	every time.Duration
	now   func() time.Time

	mu       sync.Mutex
	keys     jose.JSONWebKeySet
	last     time.Time     // when the last read began; zero before the first
	inflight chan struct{} // closed when the read in flight ends; nil when none
	fetches  int64
	err      error // the last read's error
}

// VerifySignature returns the payload of a JWS signed by one of the set's keys.
func (k *keySet) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSigned(raw, algorithms)
	if err != nil {
		return nil, err
	}
	kid := jws.Signatures[0].Header.KeyID
	if p, ok := k.verifyWith(jws, kid); ok {
		return p, nil
	}
	if err := k.refresh(ctx); err != nil {
		return nil, err
	}
	if p, ok := k.verifyWith(jws, kid); ok {
		return p, nil
	}
	return nil, fmt.Errorf("no key of the issuer (kid %q) verifies the signature", clip(kid))
}

func (k *keySet) verifyWith(jws *jose.JSONWebSignature, kid string) ([]byte, bool) {
	k.mu.Lock()
	keys := k.keys.Keys
	k.mu.Unlock()
	for i := range keys {
		if kid != "" && keys[i].KeyID != kid {
			continue
		}
		if p, err := jws.Verify(&keys[i]); err == nil {
			return p, true
		}
	}
	return nil, false
}

// refresh reads the keys again unless a read began less than an interval ago; a
// caller that finds a read in flight waits for it.
func (k *keySet) refresh(ctx context.Context) error {
	k.mu.Lock()
	if ch := k.inflight; ch != nil {
		k.mu.Unlock()
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if !k.last.IsZero() && k.now().Sub(k.last) < k.every {
		err := k.err
		k.mu.Unlock()
		if err != nil {
			return fmt.Errorf("keys unavailable: %w", err)
		}
		return nil
	}
	k.mu.Unlock()
	return k.load(ctx)
}

// load reads the keys now, unless another read is in flight, which it waits for.
func (k *keySet) load(ctx context.Context) error {
	k.mu.Lock()
	if ch := k.inflight; ch != nil {
		k.mu.Unlock()
		<-ch
		return nil
	}
	ch := make(chan struct{})
	k.inflight, k.last = ch, k.now()
	k.fetches++
	k.mu.Unlock()
	// The read outlives a request that gives up: others may be waiting for it.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	keys, err := k.fetch(fctx)
	cancel()
	k.mu.Lock()
	if err == nil {
		k.keys = keys
	}
	k.err, k.inflight = err, nil
	k.mu.Unlock()
	close(ch)
	return err
}

// fileKeys reads a JSON Web Key Set from a file.
func fileKeys(path string) func(context.Context) (jose.JSONWebKeySet, error) {
	return func(context.Context) (jose.JSONWebKeySet, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return jose.JSONWebKeySet{}, err
		}
		return parseKeys(b, "jwks_file "+path)
	}
}

func parseKeys(b []byte, from string) (jose.JSONWebKeySet, error) {
	var ks jose.JSONWebKeySet
	if err := json.Unmarshal(b, &ks); err != nil {
		return ks, fmt.Errorf("%s: not a JSON Web Key Set: %w", from, err)
	}
	if len(ks.Keys) == 0 {
		return ks, fmt.Errorf("%s: no keys", from)
	}
	return ks, nil
}

// discoveredKeys reads the issuer's OIDC discovery document for its jwks_uri (once it
// has it), then the key set there; both over https, unless allowHTTP.
func discoveredKeys(client *http.Client, issuerURL string, allowHTTP bool) func(context.Context) (jose.JSONWebKeySet, error) {
	var jwksURI string
	return func(ctx context.Context) (jose.JSONWebKeySet, error) {
		if jwksURI == "" {
			if err := fetchable(issuerURL, allowHTTP); err != nil {
				return jose.JSONWebKeySet{}, fmt.Errorf("issuer %s: %w", issuerURL, err)
			}
			b, err := get(ctx, client, strings.TrimSuffix(issuerURL, "/")+"/.well-known/openid-configuration")
			if err != nil {
				return jose.JSONWebKeySet{}, err
			}
			var d struct {
				Issuer  string `json:"issuer"`
				JWKSURI string `json:"jwks_uri"`
			}
			if err := json.Unmarshal(b, &d); err != nil || d.JWKSURI == "" {
				return jose.JSONWebKeySet{}, fmt.Errorf("issuer %s: discovery document without a jwks_uri", issuerURL)
			}
			if d.Issuer != issuerURL {
				return jose.JSONWebKeySet{}, fmt.Errorf("issuer %s: its discovery document names issuer %q", issuerURL, clip(d.Issuer))
			}
			if err := fetchable(d.JWKSURI, allowHTTP); err != nil {
				return jose.JSONWebKeySet{}, fmt.Errorf("issuer %s: jwks_uri %q: %w", issuerURL, clip(d.JWKSURI), err)
			}
			jwksURI = d.JWKSURI
		}
		b, err := get(ctx, client, jwksURI)
		if err != nil {
			return jose.JSONWebKeySet{}, err
		}
		return parseKeys(b, "issuer "+issuerURL+" jwks_uri "+jwksURI)
	}
}

func get(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err == nil && len(b) > maxDocumentBytes {
		err = fmt.Errorf("GET %s: over %d bytes", url, maxDocumentBytes)
	}
	return b, err
}

// maxDocumentBytes bounds a discovery document or a key set.
const maxDocumentBytes = 1 << 20
