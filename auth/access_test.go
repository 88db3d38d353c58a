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
		return auth.NewIdentity("i", sub, time.Now().Add(time.Hour), claims)
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
	} {
		_, err := auth.Parse([]byte(c.yaml))
		if !errors.Is(err, auth.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v; want ErrConfig saying %q", c.name, err, c.want)
		}
	}
}
