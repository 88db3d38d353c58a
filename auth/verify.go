package auth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

// ErrUnauthenticated is wrapped by every error of Verify: the token is missing,
// malformed, signed by no key of its issuer, or fails a claim check.
var ErrUnauthenticated = errors.New("unauthenticated")

// UnauthenticatedError is Verify's error: why the token proves no identity. It
// matches ErrUnauthenticated.
type UnauthenticatedError struct {
	Reason error
}

func (e *UnauthenticatedError) Error() string {
	return ErrUnauthenticated.Error() + ": " + e.Reason.Error()
}

// Is reports whether target is ErrUnauthenticated.
func (e *UnauthenticatedError) Is(target error) bool { return target == ErrUnauthenticated }

// Unwrap returns the reason.
func (e *UnauthenticatedError) Unwrap() error { return e.Reason }

// unauthenticated returns an UnauthenticatedError whose reason is formatted.
func unauthenticated(format string, args ...any) error {
	return &UnauthenticatedError{Reason: fmt.Errorf(format, args...)}
}

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
	cache map[string]verified
}

// verified is a verification the cache holds: the identity, and the issuer and key
// that verified its token, by which a read that finds the key gone drops it.
type verified struct {
	id     *Identity
	issuer *issuer
	key    string // the key's thumbprint
}

type issuer struct {
	url    string
	config *oidc.Config
	keys   *keySet
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
// first token needs them. A zero KeyRefresh or Leeway takes its default. Keys are
// read again as Config.KeyRefresh says, by the verifications that find them old: a
// verifier idle starts no read, and needs no Close.
func NewVerifier(ctx context.Context, c Config, o VerifierOptions) (*Verifier, error) {
	c = c.withDefaults()
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	algs := make([]string, len(algorithms))
	for i, a := range algorithms {
		algs[i] = string(a)
	}
	v := &Verifier{issuers: map[string]*issuer{}, leeway: c.Leeway, now: o.Now, cache: map[string]verified{}}
	for _, ic := range c.Issuers {
		is := &issuer{url: ic.Issuer, keys: &keySet{every: c.KeyRefresh, now: o.Now}, config: &oidc.Config{
			ClientID: ic.Audience, SupportedSigningAlgs: algs,
			// exp gets the leeway this way; go-oidc allows nbf five minutes of its own.
			Now: func() time.Time { return o.Now().Add(-c.Leeway) },
		}}
		is.keys.gone = func(thumbprints []string) { v.forget(is, thumbprints) }
		if ic.JWKSFile != "" {
			is.keys.fetch = fileKeys(ic.JWKSFile)
			if err := is.keys.load(ctx); err != nil {
				return nil, fmt.Errorf("%w: issuer %s: %w", ErrConfig, ic.Issuer, err)
			}
		} else {
			is.keys.fetch = discoveredKeys(o.Client, ic.Issuer, c.AllowHTTP)
		}
		v.issuers[ic.Issuer] = is
	}
	return v, nil
}

// Verify returns the identity raw (a compact JWS) proves: signed by a key of the
// issuer it names, for that issuer's audience, and not expired. A token verified
// before is answered from memory until it expires, or until a read of its issuer's
// keys finds the key that verified it gone (within KeyRefresh of its removal). Errors
// wrap ErrUnauthenticated and never hold the token.
func (v *Verifier) Verify(ctx context.Context, raw string) (*Identity, error) {
	if raw == "" {
		return nil, unauthenticated("no token")
	}
	if len(raw) > MaxTokenBytes {
		return nil, unauthenticated("token of %d bytes, over the limit of %d", len(raw), MaxTokenBytes)
	}
	now := v.now()
	v.mu.RLock()
	e, ok := v.cache[raw]
	v.mu.RUnlock()
	if ok && now.Before(e.id.Until()) {
		waited, err := e.issuer.keys.fresh(ctx, now)
		if err != nil {
			return nil, unauthenticated("%w", err)
		}
		// A read it waited for may have found the token's key gone.
		if !waited || e.issuer.keys.holds(e.key) {
			return e.id, nil
		}
	}
	e, err := v.verify(ctx, raw)
	if err != nil {
		return nil, err
	}
	v.keep(raw, e, now)
	return e.id, nil
}

// keep caches e, unless a read since it was verified found its key gone.
func (v *Verifier) keep(raw string, e verified, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	// A read that finds the key gone drops its tokens under v.mu after it stops
	// holding the key: it did so before this, or it drops e after.
	if !e.issuer.keys.holds(e.key) {
		return
	}
	if len(v.cache) >= cacheSize {
		for k, c := range v.cache {
			if !now.Before(c.id.Until()) {
				delete(v.cache, k)
			}
		}
		if len(v.cache) >= cacheSize {
			clear(v.cache)
		}
	}
	v.cache[raw] = e
}

// forget drops the cached tokens that keys of the issuer, by their thumbprints,
// verified.
func (v *Verifier) forget(is *issuer, thumbprints []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for raw, e := range v.cache {
		if e.issuer == is && slices.Contains(thumbprints, e.key) {
			delete(v.cache, raw)
		}
	}
}

func (v *Verifier) verify(ctx context.Context, raw string) (verified, error) {
	jws, err := jose.ParseSigned(raw, algorithms)
	if err != nil {
		return verified{}, unauthenticated("not a JWT signed with %v: %w", algorithms, err)
	}
	var unverified struct {
		Issuer string `json:"iss"`
	}
	if err := json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &unverified); err != nil {
		return verified{}, unauthenticated("claims are not a JSON object")
	}
	is, ok := v.issuers[unverified.Issuer]
	if !ok {
		return verified{}, unauthenticated("issuer %q is not trusted", clip(unverified.Issuer))
	}
	sig := &signature{keys: is.keys}
	tok, err := oidc.NewVerifier(is.url, sig, is.config).Verify(ctx, raw)
	if err != nil {
		return verified{}, unauthenticated("%w", err)
	}
	var payload json.RawMessage
	if err := tok.Claims(&payload); err != nil {
		return verified{}, unauthenticated("claims: %w", err)
	}
	claims, err := decodeClaims(payload)
	if err != nil {
		return verified{}, unauthenticated("claims: %w", err)
	}
	id := &Identity{Issuer: tok.Issuer, Subject: tok.Subject, Expiry: tok.Expiry, claims: claims, leeway: v.leeway}
	return verified{id: id, issuer: is, key: sig.by}, nil
}

// signature is go-oidc's KeySet for one token: it verifies with the issuer's keys
// and keeps the thumbprint of the key that did, which the cache holds the token by.
type signature struct {
	keys *keySet
	by   string
}

// VerifySignature returns the payload of a JWS signed by one of the issuer's keys.
func (s *signature) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	p, by, err := s.keys.verify(ctx, raw)
	s.by = by
	return p, err
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
