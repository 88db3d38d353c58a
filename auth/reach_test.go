package auth_test

import (
	"testing"
	"time"

	"github.com/snapflip/snapflip/auth"
)

// TestEverythingAndAnything: the two answers about every collection follow the
// first-match rule collection by collection, through shadowed and wildcard grants.
func TestEverythingAndAnything(t *testing.T) {
	scoped := func(cs ...string) auth.Grant {
		return auth.Grant{Subject: "svc", Collections: cs, Rows: &auth.RowRule{Field: "tenant", Claim: "tenant"}}
	}
	whole := func(cs ...string) auth.Grant { return auth.Grant{Subject: "svc", Collections: cs} }
	other := auth.Grant{Subject: "other", Collections: []string{"*"}}
	for _, c := range []struct {
		name                 string
		grants               []auth.Grant
		claims               map[string]any
		everything, anything bool
	}{
		{"a whole wildcard", []auth.Grant{whole("*")}, nil, true, true},
		{"a scoped grant, then a whole wildcard", []auth.Grant{scoped("orders"), whole("*")}, map[string]any{"tenant": "t1"}, false, true},
		{"a whole grant shadows a scoped one on the same collection", []auth.Grant{whole("docs"), scoped("docs"), whole("*")}, nil, true, true},
		{"no wildcard: the rest is refused", []auth.Grant{whole("a", "b")}, nil, false, true},
		{"a scoped wildcard without its claim decides all", []auth.Grant{scoped("*"), whole("*")}, nil, false, false},
		{"a scoped grant without its claim, then a whole one on the same collection", []auth.Grant{scoped("a"), whole("a")}, nil, false, false},
		{"a scoped grant without its claim, then a whole wildcard", []auth.Grant{scoped("a"), whole("*")}, nil, false, true},
		{"an empty claim is none", []auth.Grant{scoped("*")}, map[string]any{"tenant": ""}, false, false},
		{"a scoped wildcard with its claim", []auth.Grant{scoped("*")}, map[string]any{"tenant": "t"}, false, true},
		{"no grant matches", []auth.Grant{other}, nil, false, false},
	} {
		p := auth.NewPolicy(auth.Config{Issuers: []auth.Issuer{{Issuer: "https://i", Audience: "a"}}, Grants: c.grants})
		id := auth.NewIdentity("https://i", "svc", time.Time{}, c.claims)
		if got := p.Everything(id); got != c.everything {
			t.Errorf("%s: Everything = %t; want %t", c.name, got, c.everything)
		}
		if got := p.Anything(id); got != c.anything {
			t.Errorf("%s: Anything = %t; want %t", c.name, got, c.anything)
		}
	}
}
