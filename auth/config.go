package auth

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/snapflip/snapflip/snapshot"
)

// ErrConfig is wrapped by every error about the auth file; it wraps
// snapshot.ErrInvalid, as every Validate error does.
var ErrConfig = fmt.Errorf("%w auth config", snapshot.ErrInvalid)

// Config is the auth file (metadata-api --auth FILE).
type Config struct {
	// Issuers are the token issuers the API trusts; at least one.
	Issuers []Issuer `yaml:"issuers"`
	// Grants say who reads what: for each collection, the first grant that matches
	// the caller and names the collection decides.
	Grants []Grant `yaml:"grants"`
	// KeyRefresh is the age past which an issuer's keys are not used unread: a key
	// removed from the issuer's set stops verifying within it, tokens answered from
	// the cache included. A verification that finds the keys older than 80% of it has
	// them read behind it; one that finds them older than it waits for the read. A
	// token naming a key the API does not hold has them read sooner, at most once per
	// min(KeyRefresh, 30s) however many such tokens come. When a read fails the keys
	// held stay in use, however old (availability over a removal the API cannot see),
	// and it is tried again from 80% of KeyRefresh on. Zero: DefaultKeyRefresh.
	KeyRefresh time.Duration `yaml:"key_refresh"`
	// Leeway is the clock skew allowed when checking exp and nbf; zero:
	// DefaultLeeway (for an expiry without leeway, give one nanosecond).
	Leeway time.Duration `yaml:"leeway"`
	// AllowHTTP accepts http:// issuers and discovered jwks_uris, for local testing
	// only: whoever is on the path of a key set read over http can replace its keys
	// and sign any token. False: https only.
	AllowHTTP bool `yaml:"allow_http"`
}

// Issuer is one trusted token issuer.
type Issuer struct {
	// Issuer is the iss claim a token must carry, an https URL (http with AllowHTTP);
	// its keys come from its OIDC discovery document (Issuer +
	// "/.well-known/openid-configuration").
	Issuer string `yaml:"issuer"`
	// Audience is the aud a token must name; required.
	Audience string `yaml:"audience"`
	// JWKSFile, when set, is a local JSON Web Key Set to verify with instead of
	// discovery; it is read again when a token names a key it does not hold.
	JWKSFile string `yaml:"jwks_file"`
}

// Grant is one rule of the auth file.
type Grant struct {
	// Issuer is the issuer whose callers the grant matches, one of the file's
	// issuers. A file of one issuer may leave it out: the grant is that issuer's.
	// With several, every grant names its own, so a subject or claim one issuer
	// vouches for is never granted to another's tokens.
	Issuer string `yaml:"issuer"`
	// Subject matches a caller whose sub claim equals it.
	Subject string `yaml:"subject"`
	// Claim matches a caller whose claim Name is Value as text (a string, or an
	// integer's digits), or an array holding such an element. A grant has a Subject or
	// a Claim, not both.
	Claim *ClaimMatch `yaml:"claim"`
	// Collections are the collections it grants; "*" grants every one.
	Collections []string `yaml:"collections"`
	// Admin also grants the admin endpoints.
	Admin bool `yaml:"admin"`
	// Rows, when set, scopes the grant to the documents whose Field equals the
	// caller's claim Claim.
	Rows *RowRule `yaml:"rows"`
}

// ClaimMatch is a grant's condition on a claim.
type ClaimMatch struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

// RowRule scopes a grant to the documents whose top-level Field equals the value of
// the caller's claim Claim as text: a string, or an integer's digits. A caller whose
// claim is missing, empty or of another kind (a fraction, a bool, an object) has no
// scope.
type RowRule struct {
	Field string `yaml:"field"`
	Claim string `yaml:"claim"`
}

// Load reads and validates the auth file at path.
func Load(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	c, err := Parse(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse reads an auth file's YAML, refusing unknown fields, and validates it; a zero
// KeyRefresh or Leeway takes its default.
func Parse(b []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	c = c.withDefaults()
	return c, c.Validate()
}

// DefaultKeyRefresh and DefaultLeeway are what a zero KeyRefresh and Leeway take.
const (
	DefaultKeyRefresh = 5 * time.Minute
	DefaultLeeway     = 30 * time.Second
)

// DefaultConfig returns the values a zero field takes: KeyRefresh and Leeway (the
// issuers and grants have none).
func DefaultConfig() Config { return Config{KeyRefresh: DefaultKeyRefresh, Leeway: DefaultLeeway} }

// withDefaults fills c's zero KeyRefresh and Leeway.
func (c Config) withDefaults() Config {
	c.KeyRefresh = cmp.Or(c.KeyRefresh, DefaultKeyRefresh)
	c.Leeway = cmp.Or(c.Leeway, DefaultLeeway)
	return c
}

// Validate names the first thing wrong with c.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	if len(c.Issuers) == 0 {
		return bad("issuers: at least one is required")
	}
	if c.KeyRefresh < 0 || c.Leeway < 0 || c.Leeway > 5*time.Minute {
		return bad("key_refresh must not be negative, and leeway within 0..5m")
	}
	seen := map[string]bool{}
	var names []string
	for i, is := range c.Issuers {
		switch {
		case fetchable(is.Issuer, c.AllowHTTP) != nil:
			return bad("issuers[%d].issuer %q: want an https URL, the iss claim of its tokens (http only with allow_http: true, for local testing)", i, is.Issuer)
		case seen[is.Issuer]:
			return bad("issuers[%d].issuer %q: named twice", i, is.Issuer)
		case is.Audience == "":
			return bad("issuers[%d].audience: required (a token for another audience is refused)", i)
		}
		seen[is.Issuer] = true
		names = append(names, strconv.Quote(is.Issuer))
	}
	if len(c.Grants) == 0 {
		return bad("grants: at least one is required (with none, every caller gets 403)")
	}
	for i, g := range c.Grants {
		switch {
		case g.Issuer == "" && len(c.Issuers) > 1:
			return bad("grants[%d]: the file trusts %d issuers, so every grant must name its issuer: one of %s", i, len(c.Issuers), strings.Join(names, ", "))
		case g.Issuer != "" && !seen[g.Issuer]:
			return bad("grants[%d].issuer %q: not one of the issuers (%s)", i, g.Issuer, strings.Join(names, ", "))
		case (g.Subject == "") == (g.Claim == nil):
			return bad("grants[%d]: want subject or claim, one of them", i)
		case g.Claim != nil && (g.Claim.Name == "" || g.Claim.Value == ""):
			return bad("grants[%d].claim: want name and value", i)
		case len(g.Collections) == 0:
			return bad("grants[%d].collections: at least one (\"*\" for every collection)", i)
		case g.Rows != nil && (g.Rows.Field == "" || g.Rows.Claim == ""):
			return bad("grants[%d].rows: want field and claim", i)
		case slices.ContainsFunc(g.Collections, func(s string) bool { return strings.TrimSpace(s) == "" }):
			return bad("grants[%d].collections: an empty name", i)
		}
	}
	return nil
}

// errNotHTTPS is a URL keys may not be read from.
var errNotHTTPS = errors.New("not an https URL (http only with allow_http: true)")

// fetchable returns errNotHTTPS unless rawURL is an https URL with a host, or an
// http one when allowHTTP.
func fetchable(rawURL string, allowHTTP bool) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" || (u.Scheme != "https" && (u.Scheme != "http" || !allowHTTP)) {
		return errNotHTTPS
	}
	return nil
}

// HasAdmin reports whether a grant gives the admin endpoints.
func (c Config) HasAdmin() bool {
	return slices.ContainsFunc(c.Grants, func(g Grant) bool { return g.Admin })
}

// Unserved is a collection a row scope reads without an index to serve it.
type Unserved struct {
	Collection, Field string
}

// UnservedScopes returns, in order, each collection of indexes (a collection's
// indexes, each its fields in order) that a grant with rows reads (by name, or by
// "*") where no index's first field is the scope's: a scoped read is a filter on that
// field, and only such an index serves it.
func (c Config) UnservedScopes(indexes map[string][][]string) []Unserved {
	var out []Unserved
	for _, g := range c.Grants {
		if g.Rows == nil {
			continue
		}
		for name, ixs := range indexes {
			if !g.names(name) || slices.ContainsFunc(ixs, func(ix []string) bool { return len(ix) > 0 && ix[0] == g.Rows.Field }) {
				continue
			}
			if u := (Unserved{name, g.Rows.Field}); !slices.Contains(out, u) {
				out = append(out, u)
			}
		}
	}
	slices.SortFunc(out, func(a, b Unserved) int {
		return strings.Compare(a.Collection+"\x00"+a.Field, b.Collection+"\x00"+b.Field)
	})
	return out
}
