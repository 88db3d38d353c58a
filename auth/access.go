package auth

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Identity is a verified caller.
type Identity struct {
	Issuer  string
	Subject string
	// Expiry is when its token expires.
	Expiry time.Time
	claims map[string]any
	leeway time.Duration // the verifier's, past Expiry
}

// Until is when the verifier that made the identity stops accepting its token: the
// expiry and the clock-skew leeway after it. It is zero when the token names no
// expiry.
func (id *Identity) Until() time.Time {
	if id.Expiry.IsZero() {
		return time.Time{}
	}
	return id.Expiry.Add(id.leeway)
}

// NewIdentity returns an identity with the given claims (for tests and for callers
// verified some other way). A float64 claim is an integer's only when it is one
// exactly, within ±2^53; a token's claims are decoded with json.Number instead.
func NewIdentity(issuer, subject string, expiry time.Time, claims map[string]any) *Identity {
	return &Identity{Issuer: issuer, Subject: subject, Expiry: expiry, claims: claims}
}

// claimText returns the claim as the text a scope compares (claimValue).
func (id *Identity) claimText(name string) (string, bool) {
	return claimValue(id.claims[name])
}

// holds reports whether the claim's value (claimValue) is value, or the claim is an
// array holding an element whose value is.
func (id *Identity) holds(name, value string) bool {
	c := id.claims[name]
	if a, ok := c.([]any); ok {
		return slices.ContainsFunc(a, func(e any) bool { s, ok := claimValue(e); return ok && s == value })
	}
	s, ok := claimValue(c)
	return ok && s == value
}

// claimValue returns a claim as text: a string, or an integer's digits exactly as
// the token wrote them. An empty string (a scope of it would give the caller the
// documents whose field is empty, which are no one's), a number that is not an
// integer (a fraction or an exponent, which a token might write for an integer one
// way and a grant another) and a claim of any other kind have no value: a grant or
// scope compares them to nothing.
func claimValue(c any) (string, bool) {
	switch c := c.(type) {
	case string:
		return c, c != ""
	case json.Number:
		if c == "" || strings.ContainsAny(string(c), ".eE") {
			return "", false
		}
		return string(c), true
	case float64:
		if c != math.Trunc(c) || math.Abs(c) > 1<<53 {
			return "", false
		}
		return strconv.FormatFloat(c, 'f', -1, 64), true
	}
	return "", false
}

// matches reports whether the grant is id's: its issuer's, and its subject or claim.
// A grant naming no issuer matches no one; NewPolicy gives it the file's sole issuer.
func (g Grant) matches(id *Identity) bool {
	if g.Issuer == "" || id.Issuer != g.Issuer {
		return false
	}
	if g.Subject != "" {
		return id.Subject == g.Subject
	}
	return id.holds(g.Claim.Name, g.Claim.Value)
}

func (g Grant) names(collection string) bool {
	return slices.Contains(g.Collections, "*") || slices.Contains(g.Collections, collection)
}

// Scope is a row scope: only documents whose top-level Field equals Value.
type Scope struct {
	Field string
	Value string
}

// Access is what a caller may read of one collection.
type Access int

// The answers of Policy.Access.
const (
	Denied  Access = iota // no grant names the collection for the caller
	Whole                 // every document
	Scoped                // the documents of the scope Access returns
	NoClaim               // a scoped grant decides, but the caller lacks its claim
)

// Policy answers the grants of an auth file.
type Policy struct {
	grants []Grant
}

// NewPolicy returns the policy of c's grants. A grant naming no issuer is the
// issuer's when c trusts one; otherwise (Validate refuses that) it matches no one.
func NewPolicy(c Config) *Policy {
	grants := slices.Clone(c.Grants)
	for i := range grants {
		if grants[i].Issuer == "" && len(c.Issuers) == 1 {
			grants[i].Issuer = c.Issuers[0].Issuer
		}
	}
	return &Policy{grants: grants}
}

// Access says what id may read of collection: the first grant that matches id and
// names the collection decides; with a row rule, the scope holds id's claim.
func (p *Policy) Access(id *Identity, collection string) (Access, Scope) {
	for _, g := range p.grants {
		if !g.matches(id) || !g.names(collection) {
			continue
		}
		if g.Rows == nil {
			return Whole, Scope{}
		}
		v, ok := id.claimText(g.Rows.Claim)
		if !ok {
			return NoClaim, Scope{}
		}
		return Scoped, Scope{Field: g.Rows.Field, Value: v}
	}
	return Denied, Scope{}
}

// Admin reports whether a grant with admin: true matches id.
func (p *Policy) Admin(id *Identity) bool {
	return slices.ContainsFunc(p.grants, func(g Grant) bool { return g.Admin && g.matches(id) })
}

// String describes the scope for errors: the field and the claim's value.
func (s Scope) String() string { return fmt.Sprintf("%s = %q", s.Field, s.Value) }
