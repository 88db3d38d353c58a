package auth

import (
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// unknownKeyEvery caps the time between reads prompted by tokens naming a key the
// verifier does not hold, however long KeyRefresh is: a key the issuer has just added
// verifies within it.
const unknownKeyEvery = 30 * time.Second

// keySet is an issuer's keys. A verification uses keys read less than every ago: from
// 80% of it a verification has them read again behind it, and past it one waits for
// the read (unless the last read failed: the keys held then stay in use). A token
// naming a key it does not hold has them read sooner, at most once per
// min(every, unknownKeyEvery), however many such tokens come. One read at a time, all
// who need it waiting for the one. A read that finds keys gone tells gone their
// thumbprints before anyone waiting for it goes on.
type keySet struct {
	fetch func(ctx context.Context) (jose.JSONWebKeySet, error)
	every time.Duration
	now   func() time.Time
	gone  func(thumbprints []string)

	// due is when, in Unix nanoseconds, a verification must look at the keys' age
	// again: before it, planKeys says useKeys, and the hot path takes no lock.
	due atomic.Int64

	mu       sync.Mutex
	keys     []heldKey
	readAt   time.Time     // when the read of keys began; zero before one succeeded
	tried    time.Time     // when the last read began
	unknown  time.Time     // when the last read a token naming an unknown key prompted began
	err      error         // the last read's error
	inflight chan struct{} // closed when the read in flight ends; nil when none
	fetches  int64
}

// heldKey is a key of the set and its RFC 7638 thumbprint, which names it to the
// verifier's cache.
type heldKey struct {
	jose.JSONWebKey
	thumbprint string
}

// keysStep is what a verification does about the age of the keys held.
type keysStep int

const (
	useKeys   keysStep = iota // verify with the keys held
	readAhead                 // start a read, and verify with the keys held meanwhile
	awaitRead                 // wait for a read, starting one unless one is in flight
)

// planKeys says what a verification at now does, the keys held read at readAt, the
// last read begun at tried (failed, or in flight), with every the oldest keys it may
// use.
func planKeys(now, readAt, tried time.Time, every time.Duration, failed, inflight bool) keysStep {
	switch {
	case now.Sub(readAt) >= every && !failed:
		return awaitRead
	case inflight || now.Sub(tried) < ahead(every):
		return useKeys
	}
	return readAhead
}

// ahead is how old keys are when a verification has them read behind it.
func ahead(every time.Duration) time.Duration { return every / 5 * 4 }

// fresh makes the keys no older than every at now, unless the last read failed: it
// starts a read behind the caller from 80% of every, and waits for one past it. It
// reports whether it waited for a read, and fails only when ctx ends while it waits.
func (k *keySet) fresh(ctx context.Context, now time.Time) (bool, error) {
	if now.UnixNano() < k.due.Load() {
		return false, nil
	}
	k.mu.Lock()
	switch planKeys(now, k.readAt, k.tried, k.every, k.err != nil, k.inflight != nil) {
	case useKeys:
		k.mu.Unlock()
		return false, nil
	case readAhead:
		k.begin(now)
		k.mu.Unlock()
		go k.read(ctx, now) // which ends within its timeout, whatever becomes of ctx
		return false, nil
	}
	ch := k.inflight
	if ch == nil {
		k.begin(now)
		k.mu.Unlock()
		_ = k.read(ctx, now) // a read that fails leaves the keys held in use
		return true, nil
	}
	k.mu.Unlock()
	if err := await(ctx, ch); err != nil {
		return false, err
	}
	return true, nil
}

// verify returns the payload of a JWS signed by one of the set's keys, and that
// key's thumbprint.
func (k *keySet) verify(ctx context.Context, raw string) ([]byte, string, error) {
	if _, err := k.fresh(ctx, k.now()); err != nil {
		return nil, "", err
	}
	jws, err := jose.ParseSigned(raw, algorithms)
	if err != nil {
		return nil, "", err
	}
	kid := jws.Signatures[0].Header.KeyID
	if p, by, ok := k.verifyWith(jws, kid); ok {
		return p, by, nil
	}
	// A read in flight may have begun before the issuer added the key: after waiting
	// for it, a key still unknown may have a read of its own.
	for range 2 {
		waited, err := k.readUnknown(ctx)
		if err != nil {
			return nil, "", err
		}
		if p, by, ok := k.verifyWith(jws, kid); ok {
			return p, by, nil
		}
		if !waited {
			break
		}
	}
	return nil, "", fmt.Errorf("no key of the issuer (kid %q) verifies the signature", clip(kid))
}

func (k *keySet) verifyWith(jws *jose.JSONWebSignature, kid string) ([]byte, string, bool) {
	k.mu.Lock()
	keys := k.keys
	k.mu.Unlock()
	for i := range keys {
		if kid != "" && keys[i].KeyID != kid {
			continue
		}
		if p, err := jws.Verify(&keys[i].JSONWebKey); err == nil {
			return p, keys[i].thumbprint, true
		}
	}
	return nil, "", false
}

// holds reports whether the key of the thumbprint is in the set.
func (k *keySet) holds(thumbprint string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.ContainsFunc(k.keys, func(h heldKey) bool { return h.thumbprint == thumbprint })
}

// readUnknown reads the keys for a token naming a key the set does not hold, unless
// such a read began less than min(every, unknownKeyEvery) ago; a caller that finds a
// read in flight waits for it. The reads of the keys' age do not count: under
// traffic they come every 80% of every, and a key the issuer added just after one
// must not wait for the next. waited reports that it only waited for a read another
// caller began.
func (k *keySet) readUnknown(ctx context.Context) (waited bool, err error) {
	now := k.now()
	k.mu.Lock()
	if ch := k.inflight; ch != nil {
		k.mu.Unlock()
		return true, await(ctx, ch)
	}
	if !k.unknown.IsZero() && now.Sub(k.unknown) < min(k.every, unknownKeyEvery) {
		err := k.err
		k.mu.Unlock()
		if err != nil {
			return false, fmt.Errorf("keys unavailable: %w", err)
		}
		return false, nil
	}
	k.begin(now)
	k.unknown = now
	k.mu.Unlock()
	return false, k.read(ctx, now)
}

// load reads the keys now, as a verifier starts: no read is in flight.
func (k *keySet) load(ctx context.Context) error {
	now := k.now()
	k.mu.Lock()
	k.begin(now)
	k.mu.Unlock()
	return k.read(ctx, now)
}

// begin marks a read begun at now, which the caller then makes with read, without
// k.mu; k.mu is held, and no read is in flight.
func (k *keySet) begin(now time.Time) {
	k.inflight, k.tried = make(chan struct{}), now
	k.fetches++
}

// read reads the keys for the read begun at began, and ends it: the keys read replace
// the set (a read that fails leaves it), gone hears of the keys no longer in it, and
// then whoever waits for the read goes on.
func (k *keySet) read(ctx context.Context, began time.Time) error {
	// The read outlives a request that gives up: others may be waiting for it.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	set, err := k.fetch(fctx)
	cancel()
	var keys []heldKey
	if err == nil {
		keys, err = thumbprinted(set)
	}
	k.mu.Lock()
	var gone []string
	if err == nil {
		for _, h := range k.keys {
			if !slices.ContainsFunc(keys, func(n heldKey) bool { return n.thumbprint == h.thumbprint }) {
				gone = append(gone, h.thumbprint)
			}
		}
		k.keys, k.readAt = keys, began
	}
	ch := k.inflight
	k.err, k.inflight = err, nil
	k.due.Store(began.Add(ahead(k.every)).UnixNano())
	k.mu.Unlock()
	if len(gone) > 0 && k.gone != nil {
		k.gone(gone)
	}
	close(ch)
	return err
}

// await waits for the read whose channel ch is to end, or ctx.
func await(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// thumbprinted returns the set's keys with their thumbprints; a key that has none
// (of a type no algorithm here verifies with) is left out.
func thumbprinted(set jose.JSONWebKeySet) ([]heldKey, error) {
	var keys []heldKey
	for _, key := range set.Keys {
		if t, err := key.Thumbprint(crypto.SHA256); err == nil {
			keys = append(keys, heldKey{JSONWebKey: key, thumbprint: base64.RawURLEncoding.EncodeToString(t)})
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no key of the %d in the set is RSA, EC or OKP", len(set.Keys))
	}
	return keys, nil
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
