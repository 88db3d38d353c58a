package auth_test

import (
	"errors"
	"slices"
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
		{"issuer not a URL", "issuers: [{issuer: nope, audience: a}]\n" + grant, "http(s) URL"},
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
