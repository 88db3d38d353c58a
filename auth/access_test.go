package auth_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/auth"
)

const example = `
issuers:
  - issuer: https://container.googleapis.com/v1/projects/p/locations/l/clusters/c
    audience: snapflip
grants:
  - subject: system:serviceaccount:billing:billing-api
    collections: [tenants, plans]
  - claim: {name: groups, value: ops}
    collections: ["*"]
    admin: true
  - claim: {name: role, value: tenant-app}
    collections: [tenant_config]
    rows: {field: tenant_id, claim: tenant}
`

func TestPolicy(t *testing.T) {
	cfg, err := auth.Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	p := auth.NewPolicy(cfg)
	id := func(sub string, claims map[string]any) *auth.Identity {
		return auth.NewIdentity(cfg.Issuers[0].Issuer, sub, time.Now().Add(time.Hour), claims)
	}
	billing := id("system:serviceaccount:billing:billing-api", nil)
	ops := id("someone", map[string]any{"groups": []any{"dev", "ops"}})
	tenant := id("app", map[string]any{"role": "tenant-app", "tenant": "t-7"})
	numeric := id("app", map[string]any{"role": "tenant-app", "tenant": float64(42)})
	noClaim := id("app", map[string]any{"role": "tenant-app"})
	for _, c := range []struct {
		name       string
		who        *auth.Identity
		collection string
		want       auth.Access
		scope      auth.Scope
	}{
		{"subject granted", billing, "plans", auth.Whole, auth.Scope{}},
		{"subject not granted", billing, "tenant_config", auth.Denied, auth.Scope{}},
		{"claim array holds the value, star", ops, "anything", auth.Whole, auth.Scope{}},
		{"scoped", tenant, "tenant_config", auth.Scoped, auth.Scope{Field: "tenant_id", Value: "t-7"}},
		{"scoped by a number claim", numeric, "tenant_config", auth.Scoped, auth.Scope{Field: "tenant_id", Value: "42"}},
		{"scoped grant without its claim", noClaim, "tenant_config", auth.NoClaim, auth.Scope{}},
		{"scoped caller, other collection", tenant, "tenants", auth.Denied, auth.Scope{}},
	} {
		got, scope := p.Access(c.who, c.collection)
		if got != c.want || scope != c.scope {
			t.Errorf("%s: Access = %v %+v; want %v %+v", c.name, got, scope, c.want, c.scope)
		}
	}
	if !p.Admin(ops) || p.Admin(billing) || p.Admin(tenant) {
		t.Error("Admin: want only the ops group")
	}
	// The file trusts one issuer, so its grants, which name none, are that issuer's:
	// the same subject from another issuer is granted nothing.
	stranger := auth.NewIdentity("https://other.example", billing.Subject, billing.Expiry, nil)
	if got, _ := p.Access(stranger, "plans"); got != auth.Denied {
		t.Errorf("the granted subject from an issuer the file does not trust: %v; want Denied", got)
	}
	// The first grant that matches and names the collection decides: a whole grant
	// listed first wins over a later scoped one.
	cfg.Grants = append([]auth.Grant{{Claim: &auth.ClaimMatch{Name: "role", Value: "tenant-app"}, Collections: []string{"tenant_config"}}}, cfg.Grants...)
	if got, _ := auth.NewPolicy(cfg).Access(tenant, "tenant_config"); got != auth.Whole {
		t.Errorf("first grant: %v; want Whole", got)
	}
	got := cfg.UnservedScopes(map[string][][]string{"tenant_config": {{"n", "tenant_id"}}, "tenants": nil, "served": {{"tenant_id"}}})
	if want := []auth.Unserved{{Collection: "tenant_config", Field: "tenant_id"}}; !slices.Equal(got, want) {
		t.Errorf("UnservedScopes = %v; want %v", got, want)
	}
}

func TestParseRefuses(t *testing.T) {
	issuer := "issuers: [{issuer: https://i.example, audience: a}]\n"
	grant := "grants: [{subject: s, collections: [c]}]\n"
	two := "issuers: [{issuer: https://i.example, audience: a}, {issuer: https://j.example, audience: a}]\n"
	for _, c := range []struct{ name, yaml, want string }{
		{"empty", "", "EOF"},
		{"unknown field", issuer + grant + "extra: 1\n", "extra"},
		{"no issuers", grant, "issuers: at least one"},
		{"no audience", "issuers: [{issuer: https://i.example}]\n" + grant, "audience: required"},
		{"issuer not a URL", "issuers: [{issuer: nope, audience: a}]\n" + grant, "https URL"},
		{"http issuer", "issuers: [{issuer: http://i.example, audience: a}]\n" + grant, `issuers[0].issuer "http://i.example": want an https URL`},
		{"http issuer, allow_http false", "allow_http: false\nissuers: [{issuer: http://i.example, audience: a}]\n" + grant, "allow_http: true"},
		{"ftp issuer, allow_http", "allow_http: true\nissuers: [{issuer: ftp://i.example, audience: a}]\n" + grant, "https URL"},
		{"issuer twice", "issuers: [{issuer: https://i.example, audience: a}, {issuer: https://i.example, audience: b}]\n" + grant, "named twice"},
		{"no grants", issuer, "grants: at least one"},
		{"subject and claim", issuer + "grants: [{subject: s, claim: {name: a, value: b}, collections: [c]}]\n", "one of them"},
		{"neither", issuer + "grants: [{collections: [c]}]\n", "one of them"},
		{"no collections", issuer + "grants: [{subject: s}]\n", "collections: at least one"},
		{"rows without claim", issuer + "grants: [{subject: s, collections: [c], rows: {field: f}}]\n", "rows: want field and claim"},
		{"claim without value", issuer + "grants: [{claim: {name: a}, collections: [c]}]\n", "want name and value"},
		{"leeway too long", issuer + grant + "leeway: 1h\n", "leeway"},
		{"grant of an issuer not trusted", issuer + "grants: [{issuer: https://j.example, subject: s, collections: [c]}]\n",
			`grants[0].issuer "https://j.example": not one of the issuers`},
		{"two issuers, a grant without its issuer", two + "grants: [{issuer: https://i.example, subject: s, collections: [c]}, {subject: s, collections: [c]}]\n",
			"grants[1]: the file trusts 2 issuers, so every grant must name its issuer:"},
	} {
		_, err := auth.Parse([]byte(c.yaml))
		if !errors.Is(err, auth.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v; want ErrConfig saying %q", c.name, err, c.want)
		}
	}
	if c, err := auth.Parse([]byte("allow_http: true\nissuers: [{issuer: http://localhost:8080, audience: a}]\n" + grant)); err != nil || !c.AllowHTTP {
		t.Errorf("an http issuer with allow_http: %+v, %v", c, err)
	}
}

// A grant that names an issuer matches only that issuer's callers: with two issuers,
// the same subject or claim from the other is a stranger.
func TestGrantIssuer(t *testing.T) {
	cfg, err := auth.Parse([]byte(`
issuers:
  - {issuer: https://a.example, audience: snapflip}
  - {issuer: https://b.example, audience: snapflip}
grants:
  - {issuer: https://a.example, subject: app, collections: [docs]}
  - {issuer: https://b.example, claim: {name: groups, value: ops}, collections: ["*"], admin: true}
  - {issuer: https://b.example, subject: app, collections: [docs], rows: {field: tenant, claim: tenant}}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := auth.NewPolicy(cfg)
	id := func(issuer, sub string, claims map[string]any) *auth.Identity {
		return auth.NewIdentity(issuer, sub, time.Now().Add(time.Hour), claims)
	}
	for _, c := range []struct {
		name  string
		who   *auth.Identity
		want  auth.Access
		admin bool
	}{
		{"a's app", id("https://a.example", "app", nil), auth.Whole, false},
		{"b's app, scoped by b's grant", id("https://b.example", "app", map[string]any{"tenant": "t"}), auth.Scoped, false},
		{"b's ops", id("https://b.example", "someone", map[string]any{"groups": []any{"ops"}}), auth.Whole, true},
		{"a's ops: the claim is b's grant", id("https://a.example", "someone", map[string]any{"groups": []any{"ops"}}), auth.Denied, false},
		{"an untrusted issuer's app", id("https://c.example", "app", nil), auth.Denied, false},
	} {
		if got, _ := p.Access(c.who, "docs"); got != c.want {
			t.Errorf("%s: Access = %v; want %v", c.name, got, c.want)
		}
		if got := p.Admin(c.who); got != c.admin {
			t.Errorf("%s: Admin = %v; want %v", c.name, got, c.admin)
		}
	}
}

// A claim is compared as text: a string, or an integer's digits, exactly. A number
// that is not an integer, or a claim of another kind, is no value, so a scope it
// would name is NoClaim and a grant it would match does not.
func TestClaimValues(t *testing.T) {
	const issuer = "https://i.example"
	cfg, err := auth.Parse([]byte(`
issuers: [{issuer: https://i.example, audience: a}]
grants:
  - {claim: {name: org, value: "9007199254740993"}, collections: [orgs]}
  - {subject: app, collections: [docs], rows: {field: tenant_id, claim: tenant}}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := auth.NewPolicy(cfg)
	for _, c := range []struct {
		name   string
		claim  any
		access auth.Access
		scope  string // the scope's value when Scoped
		holds  bool   // whether org: claim matches the org grant
	}{
		{"string", "t-7", auth.Scoped, "t-7", false},
		{"empty string", "", auth.NoClaim, "", false},
		{"array holding an empty string", []any{""}, auth.NoClaim, "", false},
		{"string of the grant's digits", "9007199254740993", auth.Scoped, "9007199254740993", true},
		{"integer past 2^53", json.Number("9007199254740993"), auth.Scoped, "9007199254740993", true},
		{"negative integer", json.Number("-12"), auth.Scoped, "-12", false},
		{"integer past 2^64", json.Number("123456789012345678901234567890"), auth.Scoped, "123456789012345678901234567890", false},
		{"fraction", json.Number("1.5"), auth.NoClaim, "", false},
		{"exponent", json.Number("9007199254740993e0"), auth.NoClaim, "", false},
		{"exponent E", json.Number("1E3"), auth.NoClaim, "", false},
		{"integer as a fraction", json.Number("42.0"), auth.NoClaim, "", false},
		{"array holding the integer", []any{json.Number("1"), json.Number("9007199254740993")}, auth.NoClaim, "", true},
		{"array holding the string", []any{"x", "9007199254740993"}, auth.NoClaim, "", true},
		{"array holding a fraction", []any{json.Number("9007199254740993.0")}, auth.NoClaim, "", false},
		{"bool", true, auth.NoClaim, "", false},
		{"null", nil, auth.NoClaim, "", false},
		{"object", map[string]any{"id": "t-7"}, auth.NoClaim, "", false},
		{"float64 integer", float64(42), auth.Scoped, "42", false},
		{"float64 2^53", float64(1 << 53), auth.Scoped, "9007199254740992", false},
		{"float64 -2^53", -float64(1 << 53), auth.Scoped, "-9007199254740992", false},
		{"float64 past 2^53", float64(1 << 60), auth.NoClaim, "", false},
		{"float64 fraction", 1.5, auth.NoClaim, "", false},
	} {
		id := auth.NewIdentity(issuer, "app", time.Now().Add(time.Hour), map[string]any{"tenant": c.claim, "org": c.claim})
		var want auth.Scope
		if c.access == auth.Scoped {
			want = auth.Scope{Field: "tenant_id", Value: c.scope}
		}
		if got, scope := p.Access(id, "docs"); got != c.access || scope != want {
			t.Errorf("%s: Access = %v %+v; want %v %+v", c.name, got, scope, c.access, want)
		}
		wantOrg := auth.Denied
		if c.holds {
			wantOrg = auth.Whole
		}
		if got, _ := p.Access(id, "orgs"); got != wantOrg {
			t.Errorf("%s: the org grant: %v; want %v", c.name, got, wantOrg)
		}
	}
}

// Policy.Access and Admin agree with a plain model of the rule over generated auth
// files (one issuer or two, grants overlapping, "*" before or after named
// collections, row scopes) and callers (either issuer or an untrusted one, claims as
// strings, integers past 2^53, fractions, empty strings, bools, arrays).
func TestPolicyAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	values := []any{"t1", "t2", "", json.Number("9007199254740993"), json.Number("1.5"), json.Number("2e3"),
		float64(42), float64(1 << 60), 0.5, true, nil, []any{"t1", json.Number("9007199254740993")}, []any{""}}
	for range 2000 {
		issuers := []string{"https://a.example"}
		if rng.IntN(2) == 0 {
			issuers = append(issuers, "https://b.example")
		}
		cfg := auth.Config{}
		for _, is := range issuers {
			cfg.Issuers = append(cfg.Issuers, auth.Issuer{Issuer: is, Audience: "a"})
		}
		for range 1 + rng.IntN(5) {
			g := auth.Grant{Admin: rng.IntN(4) == 0}
			if len(issuers) > 1 || rng.IntN(2) == 0 {
				g.Issuer = issuers[rng.IntN(len(issuers))]
			}
			if rng.IntN(2) == 0 {
				g.Subject = pick("s1", "s2")
			} else {
				g.Claim = &auth.ClaimMatch{Name: pick("role", "tenant"), Value: pick("t1", "9007199254740993", "42", "1.5")}
			}
			for range 1 + rng.IntN(2) {
				g.Collections = append(g.Collections, pick("x", "y", "*"))
			}
			if rng.IntN(2) == 0 {
				g.Rows = &auth.RowRule{Field: "f", Claim: pick("tenant", "role")}
			}
			cfg.Grants = append(cfg.Grants, g)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("a generated config: %v", err)
		}
		p := auth.NewPolicy(cfg)
		for range 10 {
			iss := pick(append(issuers, "https://c.example")...)
			sub := pick("s1", "s2", "s3")
			claims := map[string]any{"role": values[rng.IntN(len(values))], "tenant": values[rng.IntN(len(values))]}
			id := auth.NewIdentity(iss, sub, time.Now().Add(time.Hour), claims)
			for _, coll := range []string{"x", "y", "z"} {
				wantAccess, wantScope := modelAccess(cfg, iss, sub, claims, coll)
				if got, scope := p.Access(id, coll); got != wantAccess || scope != wantScope {
					t.Fatalf("grants %s, caller %s %s %v, collection %s: Access = %v %+v; want %v %+v",
						grantsText(cfg.Grants), iss, sub, claims, coll, got, scope, wantAccess, wantScope)
				}
			}
			if got, want := p.Admin(id), modelAdmin(cfg, iss, sub, claims); got != want {
				t.Fatalf("grants %s, caller %s %s %v: Admin = %v; want %v", grantsText(cfg.Grants), iss, sub, claims, got, want)
			}
		}
	}
}

// modelText is a claim as a grant or scope compares it: a non-empty string, or an
// integer's decimal digits.
func modelText(c any) (string, bool) {
	switch c := c.(type) {
	case string:
		return c, len(c) > 0
	case json.Number:
		if _, ok := new(big.Int).SetString(string(c), 10); ok {
			return string(c), true
		}
	case float64:
		if i := int64(c); float64(i) == c && i >= -1<<53 && i <= 1<<53 {
			return strconv.FormatInt(i, 10), true
		}
	}
	return "", false
}

func modelMatches(cfg auth.Config, g auth.Grant, iss, sub string, claims map[string]any) bool {
	grantIssuer := g.Issuer
	if grantIssuer == "" {
		grantIssuer = cfg.Issuers[0].Issuer // Validate allows it only with one issuer
	}
	if grantIssuer != iss {
		return false
	}
	if g.Subject != "" {
		return sub == g.Subject
	}
	elems := []any{claims[g.Claim.Name]}
	if a, ok := claims[g.Claim.Name].([]any); ok {
		elems = a
	}
	for _, e := range elems {
		if s, ok := modelText(e); ok && s == g.Claim.Value {
			return true
		}
	}
	return false
}

func modelAccess(cfg auth.Config, iss, sub string, claims map[string]any, coll string) (auth.Access, auth.Scope) {
	for _, g := range cfg.Grants {
		if !modelMatches(cfg, g, iss, sub, claims) || !(slices.Contains(g.Collections, coll) || slices.Contains(g.Collections, "*")) {
			continue
		}
		if g.Rows == nil {
			return auth.Whole, auth.Scope{}
		}
		if v, ok := modelText(claims[g.Rows.Claim]); ok {
			return auth.Scoped, auth.Scope{Field: g.Rows.Field, Value: v}
		}
		return auth.NoClaim, auth.Scope{}
	}
	return auth.Denied, auth.Scope{}
}

func modelAdmin(cfg auth.Config, iss, sub string, claims map[string]any) bool {
	for _, g := range cfg.Grants {
		if g.Admin && modelMatches(cfg, g, iss, sub, claims) {
			return true
		}
	}
	return false
}

func grantsText(grants []auth.Grant) string {
	var b strings.Builder
	for _, g := range grants {
		fmt.Fprintf(&b, "{issuer %q subject %q claim %+v collections %v rows %+v admin %v} ", g.Issuer, g.Subject, g.Claim, g.Collections, g.Rows, g.Admin)
	}
	return b.String()
}
