package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/auth"
	"github.com/snapflip/snapflip/auth/authtest"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/resolver"
)

// TestGenerativePolicy holds every route of the API to a reference model of who may
// read what (docs/design.md, "Who may read what"), over auth files and tokens drawn at
// random: the lists nobody wrote, with overlapping grants, "*" before and after named
// collections, two issuers, claims as numbers past 2^53, empty, fractional, boolean.
//
// The model (policyFile.decide), written apart from auth.Policy: for each collection,
// the first grant that matches the caller and names the collection decides. A grant
// matches when its issuer is empty or the token's iss, and its subject is the token's
// sub or its claim holds the value (a string equal to it, an integer JSON number of
// those digits, or an array holding one). It names a collection when it lists it or
// "*". Without rows it decides Whole; with rows {field, claim}, Scoped to field = the
// claim's text when the claim is a non-empty string or an integer JSON number (its
// digits, never rounded), else NoClaim, answered 403 like Denied. No grant decides:
// Denied.
//
// The data (policyWorld): three collections synced by the real syncer through four
// versions, rows moved between tenants, deleted and inserted, a version where only one
// tenant's rows change and one where a collection does not change at all, Postgres
// read after each sync as the oracle. Each drawn policy gets an API of its own,
// in-process, over one resolver; each of its tokens asks every route (policyProbe), and
// nothing the model denies may be answered in a body, a header, a count, a kind or a
// page token; an identity granted nothing gets 403 everywhere.
//
// A failure is reported once per route and rule, with the smallest drawn policy that
// showed it: its seed (SNAPFLIP_POLICY_SEED replays that policy alone), the auth file,
// the token's claims, the request, and what the model wanted. SNAPFLIP_GEN_POLICIES
// sets how many policies are drawn (make chaos draws more).
func TestGenerativePolicy(t *testing.T) {
	t.Parallel()
	w := newPolicyWorld(t)
	seeds := policySeeds(t)
	f := &findings{byKey: map[findingKey]*finding{}}
	var stats policyStats
	start := time.Now()
	work := make(chan uint64)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := range work {
				w.runPolicy(t, seed, f, &stats)
			}
		}()
	}
	for _, s := range seeds {
		work <- s
	}
	close(work)
	wg.Wait()
	t.Logf("%d policies, %s in %s", len(seeds), stats.String(), time.Since(start).Round(time.Millisecond))
	w.report(t, f)
}

const (
	envPolicies   = "SNAPFLIP_GEN_POLICIES" // policies drawn; default policiesDefault
	envPolicySeed = "SNAPFLIP_POLICY_SEED"  // one policy's seed: replay it alone

	policiesDefault  = 300
	callersPerPolicy = 4
)

// policySeeds returns the seeds of the policies to draw: SNAPFLIP_POLICY_SEED alone,
// or SNAPFLIP_GEN_POLICIES of them from the clock.
func policySeeds(t *testing.T) []uint64 {
	t.Helper()
	if s := os.Getenv(envPolicySeed); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer", envPolicySeed, s)
		}
		return []uint64{seed}
	}
	n := genEnvInt(t, envPolicies, policiesDefault)
	base := uint64(time.Now().UnixNano())
	t.Logf("seeds %d..%d (%s=<seed> replays one)", base, base+uint64(n)-1, envPolicySeed)
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = base + uint64(i)
	}
	return seeds
}

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

// ---- The world ----

// policyWorld is what every drawn policy is asked about: three collections (docs
// scoped by a text tenant, accts by a bigint acct, plain by neither, each indexed by
// both so that any grant's scope is served), synced through four versions, and the
// rows Postgres held at each.
type policyWorld struct {
	res      *resolver.Resolver
	issuers  map[string]*authtest.Issuer // by URL
	urls     [2]string
	versions []string                          // oldest first; the last is current
	rows     []map[string]map[string]policyRow // per version: collection → id → row
	ids      map[string][]string               // per collection: every id ever written, sorted
	index    map[string]int                    // version → its place in versions
	// etags are the documents' ETags, per version, collection and id; wholeTokens a
	// next_page_token of each collection's list read whole (survey).
	etags       []map[string]map[string]string
	wholeTokens map[string]string
}

// policyRow is a row as Postgres held it at a sync.
type policyRow struct {
	doc          string  // to_json of the row: the document the API must serve
	tenant, acct *string // the columns as text; nil for NULL
	n            int
}

func (r policyRow) field(name string) *string {
	if name == "acct" {
		return r.acct
	}
	return r.tenant
}

// policyConfig keeps every change a delta (rebase_ratio), so that each version's
// changes can be listed.
const policyConfig = `dataset: e2e
schedule: "@every 1h"
ttl: 1h
rebase_ratio: 100
collections:
  - name: docs
    table: public.docs
    key: id
    indexes: [[tenant, n], [acct, n], n]
  - name: accts
    table: public.accts
    key: id
    indexes: [[acct, n], [tenant, n], n]
  - name: plain
    table: public.plain
    key: id
    indexes: [[tenant, n], [acct, n], n]
`

// policyID is the i-th id of a collection. A page token is searched for ids in
// clear: the letter and two digits make it a substring of no other id, and its
// suffix of no version, base64 or hex (a sealed cursor's ciphertext); the suffix also
// needs escaping in a path.
func policyID(collection string, i int) string {
	return fmt.Sprintf("%c%02d%s", collection[0], i, []string{".", "/x.", " %", "ü"}[i%4])
}

func sqlOrNull(vals []string, i int, null bool) string {
	if null {
		return "NULL"
	}
	return stack.Quote(vals[i%len(vals)])
}

// policyHistory is the statements of each version: the first fills the tables; the
// second moves rows between tenants and accounts, deletes and inserts; the third
// changes only tenant t1's docs and account 42's accts; the fourth only plain.
func policyHistory() [][]string {
	row := func(table string, i int, tenant, acct string, n int) string {
		return fmt.Sprintf(`INSERT INTO %s VALUES (%s, %s, %s, %d, 'body of %d')`, table, stack.Quote(policyID(table, i)), tenant, acct, n, i)
	}
	ids := func(table string, is ...int) string {
		var q []string
		for _, i := range is {
			q = append(q, stack.Quote(policyID(table, i)))
		}
		return strings.Join(q, ", ")
	}
	var v1 []string
	for i := 1; i <= 14; i++ {
		v1 = append(v1, row("docs", i, sqlOrNull(dataTenants, i, i%6 == 5), sqlOrNull(dataAccts, i, i%3 != 0), (i*7)%20-5))
	}
	for i := 1; i <= 10; i++ {
		v1 = append(v1, row("accts", i, sqlOrNull(dataTenants, i, i%2 != 0), sqlOrNull(dataAccts, i, i%5 == 4), (i*3)%11-3))
	}
	for i := 1; i <= 5; i++ {
		v1 = append(v1, row("plain", i, "NULL", "NULL", i))
	}
	v2 := []string{
		`UPDATE docs SET tenant = CASE tenant WHEN 't0' THEN 't1' WHEN 't1' THEN 't2' ELSE 't0' END WHERE id IN (` + ids("docs", 1, 2, 5, 9, 11) + `)`,
		`DELETE FROM docs WHERE id IN (` + ids("docs", 3, 7, 12) + `)`,
		row("docs", 15, "'t1'", "NULL", 4), row("docs", 16, "'9007199254740993'", "42", -2), row("docs", 17, "NULL", "9007199254740993", 8),
		`UPDATE docs SET n = n + 10 WHERE id IN (` + ids("docs", 4, 6) + `)`,
		`UPDATE accts SET acct = CASE acct WHEN 9007199254740993 THEN 9007199254740992 WHEN 9007199254740992 THEN 9007199254740993 ELSE 42 END WHERE id IN (` + ids("accts", 1, 2, 4) + `)`,
		`DELETE FROM accts WHERE id IN (` + ids("accts", 3, 8) + `)`,
		row("accts", 11, "NULL", "9007199254740993", 1), row("accts", 12, "'t1'", "42", 0),
		row("plain", 6, "NULL", "NULL", 6),
	}
	v3 := []string{`UPDATE docs SET n = n + 1 WHERE tenant = 't1'`, `UPDATE accts SET n = n + 1 WHERE acct = 42`,
		`UPDATE plain SET n = n + 1 WHERE id = ` + stack.Quote(policyID("plain", 1))}
	v4 := []string{`UPDATE plain SET n = n + 1 WHERE id = ` + stack.Quote(policyID("plain", 2))}
	return [][]string{v1, v2, v3, v4}
}

// newPolicyWorld syncs the history, one version per step, reads Postgres after each,
// and starts the resolver every drawn policy's API reads through.
func newPolicyWorld(t *testing.T) *policyWorld {
	t.Helper()
	dsn, bt := testenv.Postgres(t), testenv.Bigtable(t)
	e := stack.New(t, dsn, bt, "e2e", policyConfig)
	testenv.Exec(t, dsn, `CREATE TABLE docs (id text PRIMARY KEY, tenant text, acct bigint, n int, body text)`,
		`CREATE TABLE accts (LIKE docs INCLUDING ALL)`, `CREATE TABLE plain (LIKE docs INCLUDING ALL)`)
	w := &policyWorld{issuers: map[string]*authtest.Issuer{}, ids: map[string][]string{}, index: map[string]int{}}
	for _, stmts := range policyHistory() {
		testenv.Exec(t, dsn, "BEGIN; "+strings.Join(stmts, "; ")+"; COMMIT")
		out, err := e.Sync()
		if err != nil {
			t.Fatalf("syncer once: %v", err)
		}
		w.index[stack.PublishedVersion(t, out)] = len(w.versions)
		w.versions = append(w.versions, stack.PublishedVersion(t, out))
		w.rows = append(w.rows, policyRowsNow(t, dsn))
	}
	for _, c := range policyCollections {
		for i := range 20 {
			if id := policyID(c, i); slices.ContainsFunc(w.rows, func(rows map[string]map[string]policyRow) bool { _, ok := rows[c][id]; return ok }) {
				w.ids[c] = append(w.ids[c], id)
			}
		}
		slices.Sort(w.ids[c])
	}
	for i := range w.urls {
		is := authtest.NewIssuer(t)
		if err := is.AddKey(jose.ES256); err != nil { // cheaper to sign than RS256
			t.Fatal(err)
		}
		w.urls[i], w.issuers[is.URL()] = is.URL(), is
	}
	st := testenv.Store(t, testenv.StoreConfig(bt))
	res, err := resolver.New("e2e", st, resolver.Config{Refresh: 20 * time.Millisecond, Layers: layer.NewReader(st, "e2e")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go res.Run(ctx)
	w.res = res
	w.survey(t)
	return w
}

// policyRowsNow reads every row of the three tables.
func policyRowsNow(t *testing.T, dsn string) map[string]map[string]policyRow {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	out := map[string]map[string]policyRow{}
	for _, c := range policyCollections {
		out[c] = map[string]policyRow{}
		rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT id, tenant, acct::text, n, to_json(t)::text FROM %s t`, c))
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			var r policyRow
			if err := rows.Scan(&id, &r.tenant, &r.acct, &r.n, &r.doc); err != nil {
				t.Fatal(err)
			}
			out[c][id] = r
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// survey waits for the resolver to serve the last version and reads the world
// through an API without authentication: that the history has the shape the checks
// rely on (the third version changed only some rows of docs and accts, the fourth
// none), every document's ETag and each collection's first page token, which
// callers then send where they may not read (If-None-Match, page_token).
func (w *policyWorld) survey(t *testing.T) {
	t.Helper()
	last := w.versions[len(w.versions)-1]
	testenv.Eventually(t, time.Minute, func() error {
		if view, err := w.res.Current(context.Background()); err != nil || string(view.Version) != last {
			return fmt.Errorf("the resolver serves %s (%v); want %s", view.Version, err, last)
		}
		return nil
	})
	srv, err := api.NewServer(w.res, api.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(target string, headers ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec
	}
	for _, c := range []string{"docs", "accts"} {
		for at, want := range map[int]string{2: "delta", 3: "unchanged"} {
			rec := ask(changesPath(w.versions[at], c))
			var p changesPage
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Kind != want || p.Parent != w.versions[at-1] {
				t.Fatalf("the world's version %d of %s: %d %s; want %s against %s", at+1, c, rec.Code, rec.Body, want, w.versions[at-1])
			}
		}
	}
	w.etags, w.wholeTokens = make([]map[string]map[string]string, len(w.versions)), map[string]string{}
	for at, v := range w.versions {
		w.etags[at] = map[string]map[string]string{}
		for _, c := range policyCollections {
			w.etags[at][c] = map[string]string{}
			for id := range w.rows[at][c] {
				w.etags[at][c][id] = ask(docPath(c, id), api.HeaderVersion, v).Header().Get("ETag")
			}
		}
	}
	for _, c := range policyCollections {
		var page struct {
			Next string `json:"next_page_token"`
		}
		if rec := ask("/v1/data/" + c + "?limit=2"); json.Unmarshal(rec.Body.Bytes(), &page) != nil || page.Next == "" {
			t.Fatalf("the first page of %s: %d %s; want a next_page_token", c, rec.Code, rec.Body)
		}
		w.wholeTokens[c] = page.Next
	}
}

// visible returns the rows of a collection at a version the decision reads.
func (w *policyWorld) visible(at int, collection string, d decision) map[string]policyRow {
	out := map[string]policyRow{}
	for id, r := range w.rows[at][collection] {
		if d.holds(r) {
			out[id] = r
		}
	}
	return out
}

// changesFor returns what a caller reading through d must be told version at changed
// in the collection: the ids whose row differs from the parent's and is in d now
// (changed), or only was (deleted, for it), in id order.
func (w *policyWorld) changesFor(at int, collection string, d decision) []changeEntry {
	before, now := w.rows[at-1][collection], w.rows[at][collection]
	var out []changeEntry
	for _, id := range w.ids[collection] {
		b, was := before[id]
		n, is := now[id]
		if was == is && (!is || b.doc == n.doc) {
			continue
		}
		switch {
		case is && d.holds(n):
			out = append(out, changeEntry{ID: id})
		case was && d.holds(b):
			out = append(out, changeEntry{ID: id, Deleted: true})
		}
	}
	return out
}

// ---- One policy ----

// runPolicy draws a policy from seed, serves it, and has each of its callers ask
// every route.
func (w *policyWorld) runPolicy(t *testing.T, seed uint64, f *findings, stats *policyStats) {
	gen := policyGen{rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), issuers: w.urls}
	file := gen.file()
	srv, err := w.serve(file)
	if errors.Is(err, errRefused) {
		f.add(findingKey{"auth.Parse", ruleParse}, finding{ex: example{seed: seed, file: file}, request: "auth.Parse of the file",
			got: err.Error(), want: "the file accepted"})
		return
	}
	if err != nil {
		t.Errorf("seed %d: the API of the drawn file: %v", seed, err)
		return
	}
	stats.policies.Add(1)
	for range callersPerPolicy {
		ex := example{seed: seed, probe: gen.rng.Uint64(), file: file}
		ex.who = gen.caller(file)
		w.newProbe(srv, ex, f, stats).run()
	}
}

var errRefused = errors.New("auth.Parse refuses the file")

// serve returns an API of the auth file over the world's resolver, wired as
// metadata-api --auth wires it.
func (w *policyWorld) serve(file policyFile) (*api.Server, error) {
	text, err := yaml.Marshal(file)
	if err != nil {
		return nil, err
	}
	cfg, err := auth.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errRefused, err)
	}
	ctx := context.Background()
	v, err := auth.NewVerifier(ctx, cfg, auth.VerifierOptions{})
	if err != nil {
		return nil, err
	}
	view, err := w.res.Current(ctx)
	if err != nil {
		return nil, err
	}
	if err := api.ScopeIndexes(cfg, view.Manifest); err != nil {
		return nil, err
	}
	c := api.DefaultConfig()
	c.Dataset, c.WatchInterval = "e2e", 5*time.Millisecond
	c.Auth = &api.Auth{Verifier: v, Policy: auth.NewPolicy(cfg)}
	return api.NewServer(w.res, c, nil)
}

// policyProbe is one caller of one policy's API asking every route, and what the model
// says it may read.
type policyProbe struct {
	w       *policyWorld
	srv     http.Handler
	raw     string              // the bearer token
	dec     map[string]decision // per collection, and policyStar
	scope   map[string]map[string]policyRow
	at      int  // the version reads name; the current one unless pinned
	pinned  bool // reads name the version (Snapshot-Version)
	trusted bool // the file lists the token's issuer
	rng     *rand.Rand
	out     *findings
	ex      example
	stats   *policyStats
}

func (w *policyWorld) newProbe(srv http.Handler, ex example, out *findings, stats *policyStats) *policyProbe {
	c, rng := ex.who, rand.New(rand.NewPCG(ex.probe, 0))
	claims := authtest.Claims{"sub": c.sub, "aud": "snapflip"}
	maps.Copy(claims, c.claims)
	p := &policyProbe{w: w, srv: srv, raw: w.issuers[c.iss].Token(claims), dec: map[string]decision{}, scope: map[string]map[string]policyRow{},
		at: len(w.versions) - 1, rng: rng, out: out, ex: ex, stats: stats}
	p.trusted = slices.ContainsFunc(ex.file.Issuers, func(is policyIssuer) bool { return is.Issuer == c.iss })
	if rng.IntN(3) == 0 {
		p.at, p.pinned = rng.IntN(len(w.versions)), true
	}
	var says []string
	for _, name := range append(slices.Clone(policyCollections), policyStar) {
		d := ex.file.decide(c, name)
		p.dec[name], p.scope[name] = d, w.visible(p.at, name, d)
		says = append(says, fmt.Sprintf("%s: %s", name, d))
		stats.decisions[d.access].Add(1)
	}
	p.ex.decides = strings.Join(says, "; ")
	if p.pinned {
		p.ex.decides += fmt.Sprintf("; reads version %d (%s) by Snapshot-Version", p.at+1, w.versions[p.at])
	}
	stats.callers.Add(1)
	return p
}

func (w *policyWorld) label(iss string) string {
	if iss == w.urls[0] {
		return "A"
	}
	return "B"
}

// run asks every route.
func (p *policyProbe) run() {
	if !p.trusted {
		p.stats.untrusted.Add(1)
		p.checkUnverified()
		return
	}
	for _, c := range policyCollections {
		if p.dec[c].reads() {
			p.checkReads(c)
		} else {
			p.checkRefused(c)
		}
	}
	if !slices.ContainsFunc(slices.Collect(maps.Values(p.dec)), decision.reads) {
		p.stats.nothing.Add(1)
		p.checkNothing()
		return
	}
	p.checkCollections()
	p.checkVersions()
	p.checkStatus()
	p.checkWatch()
}

// answer is a response as the checks read it.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) String() string {
	s := fmt.Sprintf("%d %s", a.status, bytes.TrimSpace(a.body))
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	if et := a.header.Get("ETag"); et != "" {
		s += " (ETag " + et + ")"
	}
	return s
}

// send serves a request with the probe's token.
func (p *policyProbe) send(method, target, body string, headers ...string) answer {
	p.stats.requests.Add(1)
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+p.raw)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	p.srv.ServeHTTP(rec, req)
	return answer{rec.Code, rec.Header(), rec.Body.Bytes()}
}

func (p *policyProbe) get(target string, headers ...string) answer {
	return p.send(http.MethodGet, target, "", headers...)
}

// pin returns the headers that name the version reads ask for.
func (p *policyProbe) pin() []string {
	if !p.pinned {
		return nil
	}
	return []string{api.HeaderVersion, p.w.versions[p.at]}
}

func (p *policyProbe) fail(route string, r rule, request, got, want string) {
	p.out.add(findingKey{route, r}, finding{ex: p.ex, request: request, got: got, want: want})
}

// failRead reports a read the model grants that was not answered 200.
func (p *policyProbe) failRead(route, request string, a answer, want string) {
	r := ruleFails
	if a.status == http.StatusForbidden {
		r = ruleRefusesGranted
	}
	p.fail(route, r, request, a.String(), want)
}

// ---- The documents: GET, batchGet, list, filters, select ----

// limit is the page size of the probe's lists of c: small for a scoped caller, whose
// pages and tokens are the ones that could tell of others' rows.
func (p *policyProbe) limit(c string) string {
	if p.dec[c].access == scoped {
		return "2"
	}
	return "6"
}

// checkReads asks every read of a collection the model grants, from the version the
// probe reads, and holds each answer to Postgres's rows for the decision.
func (p *policyProbe) checkReads(c string) {
	p.checkGets(c)
	p.checkBatch(c)
	p.checkListing("GET /v1/data/{c}", c, "/v1/data/"+c+"?limit="+p.limit(c), p.scope[c], ruleRows)
	p.checkSelect(c)
	p.checkFilters(c)
	p.checkForeignToken(c)
	p.checkChanges(c)
}

// checkForeignToken sends a scoped caller the next_page_token of a list read whole:
// refused (400), or a page of its own rows.
func (p *policyProbe) checkForeignToken(c string) {
	if p.dec[c].access != scoped {
		return
	}
	path := "/v1/data/" + c + "?limit=3&page_token=" + url.QueryEscape(p.w.wholeTokens[c])
	a := p.get(path)
	if a.status == http.StatusBadRequest {
		return
	}
	mine := p.w.visible(len(p.w.versions)-1, c, p.dec[c])
	var page struct {
		Documents []struct {
			ID string `json:"id"`
		} `json:"documents"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &page) != nil ||
		slices.ContainsFunc(page.Documents, func(d struct {
			ID string `json:"id"`
		}) bool {
			_, ok := mine[d.ID]
			return !ok
		}) {
		p.fail("GET /v1/data/{c}", ruleToken, "GET "+path+" (the token of a list read whole)", a.String(), fmt.Sprintf("400, or rows of %q alone", idsOf(mine)))
	}
}

// checkGets reads ids in the scope (their documents, byte for byte, with an ETag),
// outside it and gone (the 404 of an id never written, without an ETag).
func (p *policyProbe) checkGets(c string) {
	const route = "GET /v1/data/{c}/{id}"
	never := p.get(docPath(c, "zz never"), p.pin()...)
	if never.status != http.StatusNotFound {
		p.failRead(route, "GET "+docPath(c, "zz never"), never, "404")
		return
	}
	for i, id := range p.sample(c) {
		path := docPath(c, id)
		if r, in := p.scope[c][id]; in {
			if a := p.get(path, p.pin()...); a.status != http.StatusOK || string(a.body) != r.doc || a.header.Get("ETag") == "" {
				p.fail(route, ruleRows, "GET "+path, a.String(), "200 "+r.doc+" with an ETag")
			}
			if a := p.get(path+"?select=n,tenant", p.pin()...); i == 0 && (a.status != http.StatusOK || canonical(string(a.body)) != project(r.doc)) {
				p.fail(route, ruleRows, "GET "+path+"?select=n,tenant", a.String(), "200 "+project(r.doc))
			}
			continue
		}
		// With the document's own ETag in If-None-Match: still the 404, not a 304.
		a := p.get(path, append(p.pin(), "If-None-Match", p.w.etags[p.at][c][id])...)
		want := strings.Replace(problemText(never.body), strconv.Quote("zz never"), strconv.Quote(id), 1)
		if a.status != http.StatusNotFound || problemText(a.body) != want || a.header.Get("ETag") != "" {
			p.fail(route, ruleNotFound, "GET "+path+" If-None-Match: its ETag", a.String(), "404 "+want+", no ETag, as for an id never written")
		}
	}
}

// project is a document's n and tenant alone, canonical (?select=n,tenant).
func project(doc string) string {
	var m map[string]json.RawMessage
	_ = json.Unmarshal([]byte(doc), &m)
	b, _ := json.Marshal(map[string]json.RawMessage{"n": m["n"], "tenant": m["tenant"]})
	return string(b)
}

// canonical is a JSON object with its keys sorted.
func canonical(doc string) string {
	var m map[string]json.RawMessage
	_ = json.Unmarshal([]byte(doc), &m)
	b, _ := json.Marshal(m)
	return string(b)
}

// sample returns up to two ids in the scope, two outside it, and one not there.
func (p *policyProbe) sample(c string) []string {
	var in, out, gone []string
	for _, id := range p.w.ids[c] {
		_, there := p.w.rows[p.at][c][id]
		_, inScope := p.scope[c][id]
		switch {
		case inScope:
			in = append(in, id)
		case there:
			out = append(out, id)
		default:
			gone = append(gone, id)
		}
	}
	return slices.Concat(p.pick(in, 2), p.pick(out, 2), p.pick(gone, 1))
}

func (p *policyProbe) pick(ids []string, n int) []string {
	ids = slices.Clone(ids)
	p.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return ids[:min(n, len(ids))]
}

// problemText returns a problem document's detail ("" when the body is not one).
func problemText(body []byte) string {
	var pr struct{ Detail string }
	_ = json.Unmarshal(body, &pr)
	return pr.Detail
}

// checkBatch asks for every id ever written and one never: the documents in the
// scope, byte for byte; every other id missing.
func (p *policyProbe) checkBatch(c string) {
	const route = "POST /v1/data/{c}:batchGet"
	ids := append(slices.Clone(p.w.ids[c]), "zz never")
	body, _ := json.Marshal(map[string][]string{"ids": ids})
	request := "POST /v1/data/" + c + ":batchGet " + string(body)
	a := p.send(http.MethodPost, "/v1/data/"+c+":batchGet", string(body), p.pin()...)
	var got struct {
		Documents map[string]json.RawMessage `json:"documents"`
		Missing   []string                   `json:"missing"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &got) != nil {
		p.failRead(route, request, a, "200")
		return
	}
	docs := map[string]string{}
	for id, raw := range got.Documents {
		docs[id] = string(raw)
	}
	var missing []string
	for _, id := range ids {
		if _, ok := p.scope[c][id]; !ok {
			missing = append(missing, id)
		}
	}
	slices.Sort(got.Missing)
	slices.Sort(missing)
	if diff := docsDiff(docs, p.scope[c]); diff != "" || !slices.Equal(got.Missing, missing) {
		p.fail(route, ruleRows, request, fmt.Sprintf("%s; missing %q", diff, got.Missing), fmt.Sprintf("found %q, missing %q", idsOf(p.scope[c]), missing))
	}
}

// docsDiff says how documents by id differ from the rows' ("" when they do not).
func docsDiff(got map[string]string, want map[string]policyRow) string {
	gotIDs, wantIDs := slices.Sorted(maps.Keys(got)), idsOf(want)
	if !slices.Equal(gotIDs, wantIDs) {
		return fmt.Sprintf("found %q", gotIDs)
	}
	for _, id := range gotIDs {
		if got[id] != want[id].doc {
			return fmt.Sprintf("%q is %s, Postgres says %s", id, got[id], want[id].doc)
		}
	}
	return ""
}

func idsOf[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// listing is what a walk through a list's pages found.
type listing struct {
	docs   map[string]string // id → document
	tokens []string          // every next_page_token
	bad    *answer           // the page that was not a 200 page, if any
	at     string            // its request
}

// list follows next_page_token from the first page of path.
func (p *policyProbe) list(path string) listing {
	l := listing{docs: map[string]string{}}
	for next := ""; len(l.tokens) < 100; {
		l.at = path
		if next != "" {
			l.at += "&page_token=" + url.QueryEscape(next)
		}
		a := p.get(l.at, p.pin()...)
		var page struct {
			Documents []struct {
				ID       string          `json:"id"`
				Document json.RawMessage `json:"document"`
			} `json:"documents"`
			Next string `json:"next_page_token"`
		}
		if a.status != http.StatusOK || json.Unmarshal(a.body, &page) != nil {
			l.bad = &a
			return l
		}
		for _, d := range page.Documents {
			l.docs[d.ID] = string(d.Document)
		}
		if next = page.Next; next == "" {
			break
		}
		l.tokens = append(l.tokens, next)
	}
	return l
}

// checkListing walks a list or filter through its pages: exactly the rows want, and
// no page token naming an id outside the scope.
func (p *policyProbe) checkListing(route, c, path string, want map[string]policyRow, r rule) {
	l := p.list(path)
	if l.bad != nil {
		if r == ruleFilter && l.bad.status != http.StatusForbidden {
			p.fail(route, r, "GET "+l.at, l.bad.String(), fmt.Sprintf("200 with %q", idsOf(want)))
		} else {
			p.failRead(route, "GET "+l.at, *l.bad, fmt.Sprintf("200 with %q", idsOf(want)))
		}
		return
	}
	if diff := docsDiff(l.docs, want); diff != "" {
		p.fail(route, r, "GET "+path+" and its pages", diff, fmt.Sprintf("%q", idsOf(want)))
	}
	p.checkTokens(route, c, "GET "+path, l.tokens, func(id string) bool { _, ok := p.scope[c][id]; return ok })
}

// checkTokens decodes page tokens (base64url JSON, and the bytes of an index entry
// in them) and looks for an id of the collection the caller may not see.
func (p *policyProbe) checkTokens(route, c, request string, tokens []string, visible func(string) bool) {
	if p.dec[c].access == whole {
		return
	}
	for _, tok := range tokens {
		text := tokenText(tok)
		for _, id := range p.w.ids[c] {
			if !visible(id) && strings.Contains(text, id) {
				p.fail(route, ruleToken, request, fmt.Sprintf("a token holding %q: %s", id, text), "tokens naming no id outside the scope")
				return
			}
		}
	}
}

// tokenText is what a token says in clear: its JSON, and any base64 field decoded.
func tokenText(tok string) string {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return tok
	}
	out := string(b)
	var fields map[string]any
	_ = json.Unmarshal(b, &fields)
	for _, v := range fields {
		if s, ok := v.(string); ok {
			out += "\n" + s
			if e, err := base64.StdEncoding.DecodeString(s); err == nil {
				out += "\n" + string(e)
			}
		}
	}
	return out
}

// checkSelect lists with ?select=n,tenant: each document in the scope, those fields
// of it alone.
func (p *policyProbe) checkSelect(c string) {
	const route = "GET /v1/data/{c}?select"
	path := "/v1/data/" + c + "?select=n,tenant&limit=1000"
	l := p.list(path)
	if l.bad != nil {
		p.failRead(route, "GET "+path, *l.bad, "200")
		return
	}
	want := map[string]policyRow{}
	for id, r := range p.scope[c] {
		r.doc = project(r.doc)
		want[id] = r
	}
	got := map[string]string{}
	for id, d := range l.docs {
		got[id] = canonical(d)
	}
	if diff := docsDiff(got, want); diff != "" {
		p.fail(route, ruleRows, "GET "+path, diff, fmt.Sprintf("%q, n and tenant of each", idsOf(want)))
	}
}

// checkFilters filters by n, and by the scope's field: with the caller's own value
// its rows, with another's an empty page, never an error. A caller reading whole
// filters by one value of tenant or acct.
func (p *policyProbe) checkFilters(c string) {
	const route = "GET /v1/data/{c}?{field}=…"
	d := p.dec[c]
	p.checkListing(route, c, "/v1/data/"+c+"?n=gte.0&limit="+p.limit(c), filterRows(p.scope[c], func(r policyRow) bool { return r.n >= 0 }), ruleRows)
	field := d.field
	if d.access == whole {
		field = []string{"tenant", "acct"}[p.rng.IntN(2)]
	}
	vals := dataTenants
	if field == "acct" {
		vals = dataAccts
	}
	var asked []string
	if d.access == scoped && slices.Contains(vals, d.value) {
		asked = append(asked, d.value)
	}
	others := slices.DeleteFunc(slices.Clone(vals), func(v string) bool { return d.access == scoped && v == d.value })
	asked = append(asked, others[p.rng.IntN(len(others))])
	for _, v := range asked {
		want := filterRows(p.scope[c], func(r policyRow) bool { f := r.field(field); return f != nil && *f == v })
		p.checkListing(route, c, "/v1/data/"+c+"?"+field+"=eq."+url.QueryEscape(v)+"&limit="+p.limit(c), want, ruleFilter)
	}
}

func filterRows(rows map[string]policyRow, keep func(policyRow) bool) map[string]policyRow {
	out := map[string]policyRow{}
	for id, r := range rows {
		if keep(r) {
			out[id] = r
		}
	}
	return out
}

// ---- The changes ----

// checkChanges reads each layered version's changes to the collection, a page at a
// time: the ids whose row is or was in the scope, nothing else in a page or cursor,
// and, for a scoped caller, one kind for every version that changed nothing it reads
// (whether others' rows changed is not its to know).
func (p *policyProbe) checkChanges(c string) {
	const route = "GET /v1/versions/{v}/changes/{c}"
	d := p.dec[c]
	quiet := map[string][]int{} // kind → the versions that changed nothing the caller reads
	for at := 1; at < len(p.w.versions); at++ {
		path := changesPath(p.w.versions[at], c) + "?limit=" + p.limit(c)
		request := "GET " + path + fmt.Sprintf(" (version %d) and its pages", at+1)
		got, cursors, bad := p.readChanges(path)
		if bad != nil {
			p.failRead(route, request, *bad, "200")
			continue
		}
		want := p.w.changesFor(at, c, d)
		layered := got.Kind == "delta" || got.Kind == "unchanged"
		switch {
		case layered && got.Parent != p.w.versions[at-1]:
			p.fail(route, ruleChanges, request, fmt.Sprintf("%s against %s", got.Kind, got.Parent), "against version "+strconv.Itoa(at))
		case layered && !slices.Equal(got.Changes, want):
			p.fail(route, ruleChanges, request, changesString(got.Changes), changesString(want))
		case !layered && len(got.Changes) > 0:
			p.fail(route, ruleChanges, request, got.Kind+" listing "+changesString(got.Changes), "a "+got.Kind+" lists no ids")
		}
		if layered && len(want) == 0 {
			quiet[got.Kind] = append(quiet[got.Kind], at+1)
		}
		now, before := p.w.visible(at, c, d), p.w.visible(at-1, c, d)
		p.checkTokens(route, c, request, cursors, func(id string) bool {
			_, in := now[id]
			_, was := before[id]
			return in || was
		})
	}
	if d.access == scoped && len(quiet) > 1 {
		p.fail(route, ruleKind, fmt.Sprintf("GET /v1/versions/{v}/changes/%s of every version", c),
			fmt.Sprintf("kinds by the versions that changed nothing in the scope: %v", quiet),
			"one kind for every version that changed nothing in the scope, whether or not others' rows changed")
	}
}

// readChanges follows a changes listing's next cursors.
func (p *policyProbe) readChanges(path string) (changesPage, []string, *answer) {
	var all changesPage
	var cursors []string
	for next := ""; len(cursors) < 100; {
		target := path
		if next != "" {
			target += "&after=" + url.QueryEscape(next)
		}
		a := p.get(target)
		var page changesPage
		if a.status != http.StatusOK || json.Unmarshal(a.body, &page) != nil {
			return all, cursors, &a
		}
		if next == "" {
			all = page
			all.Changes = nil
		}
		all.Changes = append(all.Changes, page.Changes...)
		if next = page.Next; next == "" {
			break
		}
		cursors = append(cursors, next)
	}
	return all, cursors, nil
}

// ---- What the model denies ----

// checkRefused asks every route of a collection the model denies: 403, the same for
// an id that exists and one never written, without an ETag.
func (p *policyProbe) checkRefused(c string) {
	some := idsOf(p.w.rows[p.at][c])[0]
	asks := []struct{ route, method, target, body string }{
		{"GET /v1/data/{c}/{id}", http.MethodGet, docPath(c, some), ""},
		{"GET /v1/data/{c}/{id}", http.MethodGet, docPath(c, "zz never"), ""},
		{"POST /v1/data/{c}:batchGet", http.MethodPost, "/v1/data/" + c + ":batchGet", `{"ids": [` + strconv.Quote(some) + `]}`},
		{"GET /v1/data/{c}", http.MethodGet, "/v1/data/" + c + "?limit=3", ""},
		{"GET /v1/data/{c}?{field}=…", http.MethodGet, "/v1/data/" + c + "?n=gte.0", ""},
		{"GET /v1/versions/{v}/changes/{c}", http.MethodGet, changesPath(p.w.versions[len(p.w.versions)-1], c), ""},
	}
	var bodies []string
	for _, ask := range asks {
		a := p.send(ask.method, ask.target, ask.body, p.pin()...)
		p.checkForbidden(ask.route, ruleAnswersDenied, ask.method+" "+ask.target, a, "ETag")
		bodies = append(bodies, string(a.body))
	}
	if bodies[0] != bodies[1] {
		p.fail(asks[0].route, ruleAnswersDenied, fmt.Sprintf("GET %s and GET %s", asks[0].target, asks[1].target),
			bodies[0]+" and "+bodies[1], "the same 403 for an id that exists and one never written")
	}
}

// checkForbidden holds an answer to 403 without any of the headers named.
func (p *policyProbe) checkForbidden(route string, r rule, request string, a answer, headers ...string) {
	if a.status != http.StatusForbidden {
		p.fail(route, r, request, a.String(), "403")
		return
	}
	for _, h := range headers {
		if v := a.header.Get(h); v != "" {
			p.fail(route, ruleHeader, request, fmt.Sprintf("403 with %s: %s", h, v), "403 without "+h)
		}
	}
}

// checkNothing asks an identity the model grants nothing (what "*" would decide
// included) every route that reports on the dataset: 403, naming no version.
func (p *policyProbe) checkNothing() {
	last := p.w.versions[len(p.w.versions)-1]
	for _, ask := range []struct{ route, target string }{
		{"GET /v1/collections", "/v1/collections"}, {"GET /v1/versions", "/v1/versions"},
		{"GET /v1/versions/current", "/v1/versions/current"}, {"GET /v1/versions/{v}", "/v1/versions/" + last},
		{"GET /", "/"},
	} {
		p.checkForbidden(ask.route, ruleNothing, "GET "+ask.target, p.get(ask.target), "ETag", api.HeaderVersion, api.HeaderToken)
	}
	a, _ := p.watchFirst()
	p.checkForbidden("GET /v1/watch", ruleNothing, "GET /v1/watch", a, api.HeaderVersion, api.HeaderToken)
}

// checkUnverified asks with a token of an issuer the file does not list: 401.
func (p *policyProbe) checkUnverified() {
	for _, ask := range []struct{ route, target string }{
		{"GET /v1/collections", "/v1/collections"}, {"GET /v1/data/{c}/{id}", docPath("docs", p.w.ids["docs"][0])},
	} {
		if a := p.get(ask.target); a.status != http.StatusUnauthorized {
			p.fail(ask.route, ruleUnverified, "GET "+ask.target, a.String(), "401")
		}
	}
}

// ---- What reports on several collections ----

// checkCollections: the collections the caller reads, a count and bytes for those it
// reads whole, "scoped" alone for the others.
func (p *policyProbe) checkCollections() {
	const route = "GET /v1/collections"
	a := p.get("/v1/collections", p.pin()...)
	var got struct {
		Collections []struct {
			Name   string `json:"name"`
			Count  *int64 `json:"count"`
			Bytes  *int64 `json:"bytes"`
			Scoped bool   `json:"scoped"`
		} `json:"collections"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &got) != nil {
		p.failRead(route, "GET /v1/collections", a, "200")
		return
	}
	var have, want []string
	for _, c := range got.Collections {
		have = append(have, describeCollection(c.Name, c.Count, c.Bytes != nil, c.Scoped))
	}
	for _, c := range policyCollections {
		switch n := int64(len(p.w.rows[p.at][c])); p.dec[c].access {
		case whole:
			want = append(want, describeCollection(c, &n, true, false))
		case scoped:
			want = append(want, describeCollection(c, nil, false, true))
		}
	}
	if !slices.Equal(have, want) {
		p.fail(route, ruleCounts, "GET /v1/collections", fmt.Sprintf("%q", have), fmt.Sprintf("%q", want))
	}
}

func describeCollection(name string, count *int64, bytes, scoped bool) string {
	s := name
	if count != nil {
		s += fmt.Sprintf(" count=%d", *count)
	}
	if bytes {
		s += " bytes"
	}
	if scoped {
		s += " scoped"
	}
	return s
}

// versionCounts is what a version's description may tell of its collections.
type versionCounts struct {
	Version      string           `json:"version"`
	Counts       map[string]int64 `json:"counts"`
	BytesWritten int64            `json:"bytes_written"`
}

// checkVersions: every description of a version counts only the collections the
// caller reads whole, and tells the bytes written only to one that reads all whole.
func (p *policyProbe) checkVersions() {
	a := p.get("/v1/versions")
	var list struct {
		Versions []versionCounts `json:"versions"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &list) != nil {
		p.failRead("GET /v1/versions", "GET /v1/versions", a, "200")
		return
	}
	for _, v := range list.Versions {
		p.checkCounts("GET /v1/versions", "GET /v1/versions", v)
	}
	named := p.w.versions[p.rng.IntN(len(p.w.versions))]
	for _, ask := range []struct{ route, target string }{
		{"GET /v1/versions/current", "/v1/versions/current"}, {"GET /v1/versions/{v}", "/v1/versions/" + named},
	} {
		a := p.get(ask.target)
		var v versionCounts
		if a.status != http.StatusOK || json.Unmarshal(a.body, &v) != nil {
			p.failRead(ask.route, "GET "+ask.target, a, "200")
			continue
		}
		p.checkCounts(ask.route, "GET "+ask.target, v)
	}
}

func (p *policyProbe) checkCounts(route, request string, v versionCounts) {
	at, ok := p.w.index[v.Version]
	if !ok {
		return // not a version of the world's history
	}
	want, all := map[string]int64{}, true
	for _, c := range policyCollections {
		if p.dec[c].access == whole {
			want[c] = int64(len(p.w.rows[at][c]))
		} else {
			all = false
		}
	}
	if !maps.Equal(v.Counts, want) || !all && v.BytesWritten != 0 {
		wantBytes := ""
		if !all {
			wantBytes = ", bytes_written 0"
		}
		p.fail(route, ruleCounts, request+fmt.Sprintf(" (version %d)", at+1),
			fmt.Sprintf("counts %v, bytes_written %d", v.Counts, v.BytesWritten), fmt.Sprintf("counts %v%s", want, wantBytes))
	}
}

// checkStatus: the status page, which shows every collection's rows and bytes, only
// for a caller the model gives every collection whole (and what "*" decides).
func (p *policyProbe) checkStatus() {
	everything := !slices.ContainsFunc(slices.Collect(maps.Values(p.dec)), func(d decision) bool { return d.access != whole })
	a := p.get("/")
	want := http.StatusForbidden
	if everything {
		want = http.StatusOK
	}
	if a.status != want {
		p.stats.statusWrong.Add(1)
		p.fail("GET /", ruleStatus, "GET /", fmt.Sprintf("%d", a.status), strconv.Itoa(want))
	}
}

// checkWatch reads the first flip event: the collections the caller reads, with
// their rows when it reads them whole, "scoped" alone when through a scope.
func (p *policyProbe) checkWatch() {
	const route = "GET /v1/watch"
	a, ev := p.watchFirst()
	cols, ok := ev["collections"].(map[string]any)
	if a.status != http.StatusOK || !ok {
		p.failRead(route, "GET /v1/watch", a, "200 and a flip event")
		return
	}
	var have, want []string
	for name, v := range cols {
		have = append(have, describeFlip(name, v))
	}
	slices.Sort(have)
	last := len(p.w.versions) - 1
	for _, c := range policyCollections {
		switch p.dec[c].access {
		case whole:
			want = append(want, fmt.Sprintf("%s rows=%d", c, len(p.w.rows[last][c])))
		case scoped:
			want = append(want, c+" scoped")
		}
	}
	if !slices.Equal(have, want) {
		p.fail(route, ruleWatch, "GET /v1/watch, the first flip event", fmt.Sprintf("%q", have), fmt.Sprintf("%q", want))
	}
}

// describeFlip describes a flip event's collection: its rows, or "scoped" and
// whatever else a scoped one carries.
func describeFlip(name string, v any) string {
	m, _ := v.(map[string]any)
	if m["scoped"] != true {
		return fmt.Sprintf("%s rows=%v", name, m["rows"])
	}
	s := name + " scoped"
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k != "scoped" {
			s += " +" + k
		}
	}
	return s
}

// watchFirst opens GET /v1/watch and returns the answer up to its first flip event,
// and that event's data.
func (p *policyProbe) watchFirst() (answer, map[string]any) {
	p.stats.requests.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/watch", nil)
	req.Header.Set("Authorization", "Bearer "+p.raw)
	rec := &sseRecorder{header: http.Header{}, flip: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.srv.ServeHTTP(rec, req)
	}()
	select {
	case <-rec.flip:
	case <-done:
	case <-ctx.Done():
	}
	cancel()
	<-done
	a := answer{status: rec.status, header: rec.header, body: rec.buf.Bytes()}
	events, _ := splitEvents(a.body)
	for _, e := range events {
		if e.event == "flip" {
			var ev map[string]any
			dec := json.NewDecoder(strings.NewReader(e.data))
			dec.UseNumber()
			_ = dec.Decode(&ev)
			return a, ev
		}
	}
	return a, nil
}

// sseRecorder is a ResponseWriter for a stream: it closes flip once a flip event is
// written whole.
type sseRecorder struct {
	header http.Header
	flip   chan struct{}

	mu     sync.Mutex
	status int
	buf    bytes.Buffer
	closed bool
}

func (s *sseRecorder) Header() http.Header { return s.header }

func (s *sseRecorder) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status == 0 {
		s.status = code
	}
}

func (s *sseRecorder) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status == 0 {
		s.status = http.StatusOK
	}
	s.buf.Write(b)
	if events, _ := splitEvents(s.buf.Bytes()); !s.closed && slices.ContainsFunc(events, func(e sseEvent) bool { return e.event == "flip" }) {
		s.closed = true
		close(s.flip)
	}
	return len(b), nil
}

// Flush lets the stream flush (http.ResponseController); the bytes are in buf already.
func (s *sseRecorder) Flush() {}

// ---- Findings ----

// rule is what a failure breaks, each a sentence of docs/design.md's "Who may read
// what" or of the model.
type rule int

const (
	ruleParse rule = iota
	ruleUnverified
	ruleAnswersDenied
	ruleNothing
	ruleRefusesGranted
	ruleFails
	ruleRows
	ruleNotFound
	ruleFilter
	ruleToken
	ruleChanges
	ruleKind
	ruleCounts
	ruleStatus
	ruleWatch
	ruleHeader
)

func (r rule) String() string {
	return [...]string{
		ruleParse:          "the drawn auth file is refused (grants name their issuer; an http issuer says allow_http: true)",
		ruleUnverified:     "a token of an issuer the file does not list is 401",
		ruleAnswersDenied:  "a collection the model denies (no grant decides, or a scoped grant without its claim: NoClaim) is answered other than 403",
		ruleNothing:        "an identity granted nothing learns nothing but that it is refused: 403 on every route",
		ruleRefusesGranted: "a collection the model grants is refused (403): claims compared as text, a number its digits, the issuer matched",
		ruleFails:          "a read the model grants fails: the same query works for a scoped and an unscoped caller",
		ruleRows:           "the documents are not Postgres's rows for the decision (SELECT … WHERE field = claim)",
		ruleNotFound:       "an id outside the scope is the 404 of an id never written, without an ETag",
		ruleFilter:         "a scoped caller's own conditions and its scope both apply: its rows, or an empty page, never an error",
		ruleToken:          "a page token or cursor names an id outside the scope",
		ruleChanges:        "the changes are the ids whose row is or was in the scope, and no other",
		ruleKind:           "a scoped caller's changes kind tells whether others' rows changed",
		ruleCounts:         "a count or bytes only for a collection read whole; only the collections granted",
		ruleStatus:         "the status page only for an identity that reads every collection whole, by the rule per collection",
		ruleWatch:          "the flip stream names only the collections granted, without rows for scoped ones",
		ruleHeader:         "a refusal carries no ETag, and for an identity granted nothing no version",
	}[r]
}

// example is a drawn policy and caller.
type example struct {
	seed    uint64 // the policy's: SNAPFLIP_POLICY_SEED replays it
	probe   uint64 // the seed of the probe's own draws (the version read, the ids asked)
	file    policyFile
	who     caller
	decides string // the model's decisions, as the probe saw them
}

// size orders examples: grants first, then listed collections and claims.
func (e example) size() int {
	n := len(e.who.claims)
	for _, g := range e.file.Grants {
		n += 100 + len(g.Collections)
	}
	return n
}

type findingKey struct {
	route string
	rule  rule
}

// finding is one route's failures of one rule: how many, and the smallest example.
type finding struct {
	n                  int
	ex                 example
	request, got, want string
}

// findings collects the failures of every policy.
type findings struct {
	mu    sync.Mutex
	byKey map[findingKey]*finding
}

func (f *findings) add(k findingKey, x finding) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.byKey[k]
	if cur == nil {
		cur = &x
		f.byKey[k] = cur
	} else if x.ex.size() < cur.ex.size() {
		*cur = finding{n: cur.n, ex: x.ex, request: x.request, got: x.got, want: x.want}
	}
	cur.n++
}

// report fails the test once per route and rule, with its smallest example shrunk.
func (w *policyWorld) report(t *testing.T, f *findings) {
	keys := slices.SortedFunc(maps.Keys(f.byKey), func(a, b findingKey) int {
		return cmp.Or(cmp.Compare(a.rule, b.rule), cmp.Compare(a.route, b.route))
	})
	shrunk := make([]finding, len(keys))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			shrunk[i] = w.shrink(k, *f.byKey[k])
		}()
	}
	wg.Wait()
	for i, k := range keys {
		x := shrunk[i]
		text, _ := yaml.Marshal(x.ex.file)
		t.Errorf("%s\n  route %s, %d failures. Drawn by seed %d (SNAPFLIP_POLICY_SEED=%d go test -race -count=1 -run 'TestGenerativePolicy$' -v ./e2e/), shrunk to:\n"+
			"  issuers A = %s, B = %s\n%s  token %s\n  model: %s\n  request: %s\n  got:  %s\n  want: %s",
			k.rule, k.route, f.byKey[k].n, x.ex.seed, x.ex.seed, w.urls[0], w.urls[1], indent(string(text)), w.describe(x.ex.who), x.ex.decides, x.request, x.got, x.want)
	}
}

// describe is a caller's claims as its token carries them, the issuer by its label.
func (w *policyWorld) describe(c caller) string {
	shown := maps.Clone(c.claims)
	shown["iss"], shown["sub"] = w.label(c.iss), c.sub
	b, _ := json.Marshal(shown)
	return string(b)
}

// shrink drops grants, claims and listed collections from a failing example while
// it fails the same way, trying at most shrinkTries smaller ones.
func (w *policyWorld) shrink(k findingKey, x finding) finding {
	if k.rule == ruleParse {
		return x
	}
	for tries := 0; tries < shrinkTries; {
		smaller := false
		for _, ex := range smallerExamples(x.ex) {
			if tries++; tries > shrinkTries {
				break
			}
			if y, ok := w.retry(k, ex); ok {
				x, smaller = y, true
				break
			}
		}
		if !smaller {
			break
		}
	}
	return x
}

const shrinkTries = 60

// smallerExamples are ex without one grant, one claim, or one collection of a grant.
func smallerExamples(ex example) []example {
	var out []example
	f := ex.file
	for i := range f.Grants {
		if len(f.Grants) > 1 {
			f := f
			f.Grants = slices.Delete(slices.Clone(f.Grants), i, i+1)
			out = append(out, example{seed: ex.seed, probe: ex.probe, file: f, who: ex.who})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(ex.who.claims)) {
		c := ex.who
		c.claims = maps.Clone(c.claims)
		delete(c.claims, name)
		out = append(out, example{seed: ex.seed, probe: ex.probe, file: f, who: c})
	}
	for i, g := range f.Grants {
		for j := range g.Collections {
			if len(g.Collections) > 1 {
				f := f
				f.Grants = slices.Clone(f.Grants)
				f.Grants[i].Collections = slices.Delete(slices.Clone(g.Collections), j, j+1)
				out = append(out, example{seed: ex.seed, probe: ex.probe, file: f, who: ex.who})
			}
		}
	}
	return out
}

// retry asks every route for ex again and returns its failure of k, if it fails so.
func (w *policyWorld) retry(k findingKey, ex example) (finding, bool) {
	srv, err := w.serve(ex.file)
	if err != nil {
		return finding{}, false
	}
	out := &findings{byKey: map[findingKey]*finding{}}
	w.newProbe(srv, ex, out, &policyStats{}).run()
	if x, ok := out.byKey[k]; ok {
		return *x, true
	}
	return finding{}, false
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n    ") + "\n"
}

// policyStats counts what the drawn policies exercised.
type policyStats struct {
	policies, callers, untrusted, nothing, statusWrong, requests atomic.Int64
	decisions                                                    [4]atomic.Int64 // by access
}

func (s *policyStats) String() string {
	return fmt.Sprintf("%d callers (%d of an issuer not listed, %d granted nothing), decisions %d Denied %d Whole %d Scoped %d NoClaim, %d requests",
		s.callers.Load(), s.untrusted.Load(), s.nothing.Load(),
		s.decisions[denied].Load(), s.decisions[whole].Load(), s.decisions[scoped].Load(), s.decisions[noClaim].Load(), s.requests.Load())
}
