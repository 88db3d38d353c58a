package e2e

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
)

// ---- The generator ----

// policyStar stands for every collection no grant names: what "*" decides.
const policyStar = "zz-unnamed"

// The world's values, which grants and tokens draw from so that they overlap.
var (
	policyCollections = []string{"accts", "docs", "plain"} // in name order, as the API lists them

	dataTenants = []string{"t0", "t1", "t2", "42", "9007199254740993"}
	dataAccts   = []string{"9007199254740993", "9007199254740992", "42", "-7"}

	grantSubjects = []string{"svc-a", "svc-b"}
	grantClaims   = []policyClaim{{"role", "app"}, {"role", "ops"}, {"groups", "ops"}, {"groups", "dev"},
		{"tenant", "t0"}, {"tenant", "42"}, {"acct", "42"}, {"acct", "9007199254740993"}}
	// rowRules scope by tenant (text) and acct (bigint), and now and then by the other's
	// claim: a number claim on a text field, a text claim on a number field.
	rowRules = []policyRows{{"tenant", "tenant"}, {"acct", "acct"}, {"tenant", "tenant"}, {"acct", "acct"},
		{"tenant", "acct"}, {"acct", "tenant"}}

	// callerClaims are the values each claim of a token is drawn from; absentClaim
	// leaves it out.
	callerClaims = []struct {
		name   string
		values []any
	}{
		{"acct", []any{absentClaim{}, num("9007199254740993"), num("9007199254740992"), "9007199254740993", num("42"),
			num("-7"), "", 1.5, false, []any{num("42")}, "t0"}},
		{"groups", []any{absentClaim{}, []any{"ops", "dev"}, "ops", []any{"dev"}, []any{num("42"), "x"}}},
		{"role", []any{absentClaim{}, "app", "ops", []any{"app", "x"}, []any{}, num("7"), true}},
		{"tenant", []any{absentClaim{}, "", "t0", "t1", "t2", "42", num("42"), num("9007199254740993"), "9007199254740993",
			1.5, true, []any{"t0"}, map[string]any{"id": "t0"}}},
	}
)

type absentClaim struct{}

func isAbsent(v any) bool { _, ok := v.(absentClaim); return ok }

func num(s string) json.Number { return json.Number(s) }

// policyGen draws auth files and tokens over the two issuers.
type policyGen struct {
	rng     *rand.Rand
	issuers [2]string
}

// file draws 2–6 grants over both issuers (every grant names one) or over one of them
// (a grant may leave it out).
func (g policyGen) file() policyFile {
	f := policyFile{AllowHTTP: true}
	trusted := g.issuers[:]
	if g.rng.IntN(5) < 2 {
		trusted = []string{g.issuers[g.rng.IntN(2)]}
	}
	for _, iss := range trusted {
		f.Issuers = append(f.Issuers, policyIssuer{Issuer: iss, Audience: "snapflip"})
	}
	for range 2 + g.rng.IntN(5) {
		f.Grants = append(f.Grants, g.grant(trusted))
	}
	return f
}

func (g policyGen) grant(trusted []string) policyGrant {
	var gr policyGrant
	if len(trusted) > 1 || g.rng.IntN(2) == 0 {
		gr.Issuer = trusted[g.rng.IntN(len(trusted))]
	}
	if g.rng.IntN(10) < 3 {
		gr.Subject = grantSubjects[g.rng.IntN(len(grantSubjects))]
	} else {
		c := grantClaims[g.rng.IntN(len(grantClaims))]
		gr.Claim = &c
	}
	gr.Collections = g.collections()
	if g.rng.IntN(2) == 0 {
		r := rowRules[g.rng.IntN(len(rowRules))]
		gr.Rows = &r
	}
	return gr
}

// collections draws "*" alone, named collections with "*" among them, or named ones.
func (g policyGen) collections() []string {
	named := slices.Clone(policyCollections)
	g.rng.Shuffle(len(named), func(i, j int) { named[i], named[j] = named[j], named[i] })
	named = named[:1+g.rng.IntN(len(named))]
	switch g.rng.IntN(6) {
	case 0:
		return []string{"*"}
	case 1:
		return slices.Insert(named, g.rng.IntN(len(named)+1), "*")
	}
	return named
}

// caller draws a token from either issuer; most are made to satisfy a grant of f, and
// to carry a claim its row rule can scope by.
func (g policyGen) caller(f policyFile) caller {
	c := caller{iss: g.issuers[g.rng.IntN(2)], sub: []string{"svc-a", "svc-b", "svc-c"}[g.rng.IntN(3)], claims: map[string]any{}}
	if len(f.Issuers) == 1 && g.rng.IntN(8) > 0 {
		c.iss = f.Issuers[0].Issuer
	}
	for _, cl := range callerClaims {
		if v := cl.values[g.rng.IntN(len(cl.values))]; !isAbsent(v) {
			c.claims[cl.name] = v
		}
	}
	if g.rng.IntN(10) < 3 {
		return c
	}
	gr := f.Grants[g.rng.IntN(len(f.Grants))]
	if gr.Issuer != "" {
		c.iss = gr.Issuer
	}
	if gr.Rows != nil && g.rng.IntN(4) > 0 {
		c.claims[gr.Rows.Claim] = g.scopeValue(gr.Rows.Field)
	}
	switch {
	case gr.Subject != "":
		c.sub = gr.Subject
	case g.rng.IntN(3) == 0:
		c.claims[gr.Claim.Name] = []any{"x", g.asClaim(gr.Claim.Value)}
	default:
		c.claims[gr.Claim.Name] = g.asClaim(gr.Claim.Value)
	}
	return c
}

// scopeValue draws a claim a row rule on field finds rows by.
func (g policyGen) scopeValue(field string) any {
	vals := dataTenants
	if field == "acct" {
		vals = dataAccts
	}
	return g.asClaim(vals[g.rng.IntN(len(vals))])
}

// asClaim returns s as a string claim, or, for digits, as a JSON number half the time.
func (g policyGen) asClaim(s string) any {
	if integerDigits.MatchString(s) && g.rng.IntN(2) == 0 {
		return num(s)
	}
	return s
}
