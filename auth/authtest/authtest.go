// Package authtest is a token issuer for tests: it serves an OIDC discovery document
// and a JSON Web Key Set over HTTP, signs tokens with its keys (RS256, ES256 or
// EdDSA), and rotates them, as a Kubernetes cluster's service-account issuer does.
package authtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Issuer issues tokens. Its URL is the iss of its tokens and serves its discovery
// document and keys.
type Issuer struct {
	srv *httptest.Server

	mu          sync.Mutex
	keys        []signingKey // the first signs
	removed     []signingKey
	unpublished *rsa.PrivateKey
	// KeyReads counts the key set's reads over HTTP.
	KeyReads atomic.Int64
	lastRead atomic.Int64 // unix nanoseconds
}

// LastKeyRead returns when the key set was last read over HTTP (zero: never).
func (is *Issuer) LastKeyRead() time.Time {
	if n := is.lastRead.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// PublicPEM returns an RSA public key of the issuer in PEM: the bytes an algorithm
// confusion attack keys HS256 with.
func (is *Issuer) PublicPEM() []byte {
	der, err := x509.MarshalPKIXPublicKey(is.PublicRSA())
	if err != nil {
		panic(fmt.Sprintf("authtest: %v", err))
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

type signingKey struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

// NewIssuer starts an issuer with one RS256 key; it stops when the test ends.
func NewIssuer(tb interface {
	Cleanup(func())
	Fatal(...any)
}) *Issuer {
	is := &Issuer{}
	is.srv = httptest.NewServer(http.HandlerFunc(is.serve))
	tb.Cleanup(is.srv.Close)
	if err := is.AddKey(jose.RS256); err != nil {
		tb.Fatal(err)
	}
	return is
}

// URL is the issuer's URL, its tokens' iss.
func (is *Issuer) URL() string { return is.srv.URL }

func (is *Issuer) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/.well-known/openid-configuration":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": is.URL(), "jwks_uri": is.URL() + "/keys",
			"id_token_signing_alg_values_supported": []string{"RS256", "ES256", "EdDSA"}})
	case "/keys":
		is.KeyReads.Add(1)
		is.lastRead.Store(time.Now().UnixNano())
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(is.JWKS())
	default:
		http.NotFound(w, r)
	}
}

// AddKey makes a new key of alg (RS256, ES256 or EdDSA), publishes it and signs with
// it from now on.
func (is *Issuer) AddKey(alg jose.SignatureAlgorithm) error {
	var priv crypto.Signer
	var err error
	switch alg {
	case jose.RS256:
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.EdDSA:
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		return fmt.Errorf("authtest: algorithm %s", alg)
	}
	if err != nil {
		return err
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	k := signingKey{kid: fmt.Sprintf("key-%d-%d", len(is.keys)+len(is.removed)+1, time.Now().UnixNano()), alg: alg, priv: priv}
	is.keys = append([]signingKey{k}, is.keys...)
	return nil
}

// RemoveOldest withdraws the oldest published key from the set; tokens it signed no
// longer verify once a verifier reads the keys again.
func (is *Issuer) RemoveOldest() {
	is.mu.Lock()
	defer is.mu.Unlock()
	if len(is.keys) > 1 {
		is.removed = append(is.removed, is.keys[len(is.keys)-1])
		is.keys = is.keys[:len(is.keys)-1]
	}
}

// JWKS returns the published key set.
func (is *Issuer) JWKS() []byte {
	is.mu.Lock()
	defer is.mu.Unlock()
	var set jose.JSONWebKeySet
	for _, k := range is.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.priv.Public(), KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"})
	}
	b, _ := json.Marshal(set)
	return b
}

// WriteJWKS writes the published key set to path (for a jwks_file).
func (is *Issuer) WriteJWKS(path string) error { return os.WriteFile(path, is.JWKS(), 0o600) }

// Claims are a token's claims; Token fills iss, and exp and iat when absent.
type Claims map[string]any

// Token signs claims with the newest key: iss is the issuer's, iat now and exp an
// hour on unless claims say otherwise.
func (is *Issuer) Token(claims Claims) string {
	is.mu.Lock()
	k := is.keys[0]
	is.mu.Unlock()
	return SignWith(k.priv, k.alg, k.kid, is.withDefaults(claims))
}

// TokenWithRemoved signs claims with the key RemoveOldest withdrew last.
func (is *Issuer) TokenWithRemoved(claims Claims) string {
	is.mu.Lock()
	k := is.removed[len(is.removed)-1]
	is.mu.Unlock()
	return SignWith(k.priv, k.alg, k.kid, is.withDefaults(claims))
}

// Unpublished signs claims with a key of the issuer's name that it never published.
func (is *Issuer) Unpublished(claims Claims) string {
	is.mu.Lock()
	if is.unpublished == nil {
		is.unpublished, _ = rsa.GenerateKey(rand.Reader, 2048)
	}
	priv := is.unpublished
	is.mu.Unlock()
	return SignWith(priv, jose.RS256, "never-published", is.withDefaults(claims))
}

// PublicRSA returns the newest key's public key when it is RSA (for an algorithm
// confusion attack: HS256 keyed with it).
func (is *Issuer) PublicRSA() *rsa.PublicKey {
	is.mu.Lock()
	defer is.mu.Unlock()
	for _, k := range is.keys {
		if p, ok := k.priv.Public().(*rsa.PublicKey); ok {
			return p
		}
	}
	return nil
}

func (is *Issuer) withDefaults(claims Claims) Claims {
	out := Claims{"iss": is.URL(), "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range claims {
		out[k] = v
	}
	return out
}

// SignWith signs claims as a compact JWS with key (any crypto.Signer go-jose takes,
// or an HMAC secret as []byte), alg and kid.
func SignWith(key any, alg jose.SignatureAlgorithm, kid string, claims Claims) string {
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		panic(fmt.Sprintf("authtest: signer: %v", err))
	}
	payload, _ := json.Marshal(claims)
	jws, err := s.Sign(payload)
	if err != nil {
		panic(fmt.Sprintf("authtest: sign: %v", err))
	}
	out, _ := jws.CompactSerialize()
	return out
}
