package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
)

// ---- The model ----

// policyFile is a drawn auth file: the YAML auth.Parse reads, and what the model
// decides by.
type policyFile struct {
	Issuers []policyIssuer `yaml:"issuers"`
	// AllowHTTP lets the file name the test issuers, which serve their keys over http.
	AllowHTTP bool          `yaml:"allow_http"`
	Grants    []policyGrant `yaml:"grants"`
}

type policyIssuer struct {
	Issuer   string `yaml:"issuer"`
	Audience string `yaml:"audience"`
}

type policyGrant struct {
	Issuer      string       `yaml:"issuer,omitempty"`
	Subject     string       `yaml:"subject,omitempty"`
	Claim       *policyClaim `yaml:"claim,omitempty,flow"`
	Collections []string     `yaml:"collections,flow"`
	Rows        *policyRows  `yaml:"rows,omitempty,flow"`
}

type policyClaim struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

type policyRows struct {
	Field string `yaml:"field"`
	Claim string `yaml:"claim"`
}

// caller is a drawn token: its issuer, subject and other claims as the token carries
// them (string, json.Number, float64, bool, []any, map[string]any); a claim the token
// lacks is not in the map.
type caller struct {
	iss, sub string
	claims   map[string]any
}

// access is the model's answer for one collection.
type access int

const (
	denied  access = iota // no grant decides
	whole                 // every document
	scoped                // the documents whose field equals the claim's text
	noClaim               // a scoped grant decides, but the caller has no claim text for it
)

func (a access) String() string { return [...]string{"Denied", "Whole", "Scoped", "NoClaim"}[a] }

// decision is what the model says a caller may read of one collection.
type decision struct {
	access       access
	field, value string // of a scoped decision
}

func (d decision) reads() bool { return d.access == whole || d.access == scoped }

func (d decision) String() string {
	if d.access == scoped {
		return fmt.Sprintf("Scoped %s = %q", d.field, d.value)
	}
	return d.access.String()
}

// holds reports whether the decision reads the row.
func (d decision) holds(r policyRow) bool {
	switch d.access {
	case whole:
		return true
	case scoped:
		v := r.field(d.field)
		return v != nil && *v == d.value
	}
	return false
}

// decide is the rule: the first grant that matches c and names the collection.
func (f policyFile) decide(c caller, collection string) decision {
	for _, g := range f.Grants {
		if !g.matches(c) || !slices.ContainsFunc(g.Collections, func(s string) bool { return s == "*" || s == collection }) {
			continue
		}
		if g.Rows == nil {
			return decision{access: whole}
		}
		if v, ok := claimText(c.claims[g.Rows.Claim]); ok && v != "" {
			return decision{access: scoped, field: g.Rows.Field, value: v}
		}
		return decision{access: noClaim}
	}
	return decision{access: denied}
}

func (g policyGrant) matches(c caller) bool {
	if g.Issuer != "" && g.Issuer != c.iss {
		return false
	}
	if g.Subject != "" {
		return g.Subject == c.sub
	}
	v := c.claims[g.Claim.Name]
	if arr, ok := v.([]any); ok {
		return slices.ContainsFunc(arr, func(e any) bool { s, ok := claimText(e); return ok && s == g.Claim.Value })
	}
	s, ok := claimText(v)
	return ok && s == g.Claim.Value
}

var integerDigits = regexp.MustCompile(`^-?[0-9]+$`)

// claimText returns a claim as text: a string, or an integer JSON number's digits.
func claimText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case json.Number:
		return string(v), integerDigits.MatchString(string(v))
	}
	return "", false
}
