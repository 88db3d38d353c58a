package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/snapflip/snapflip/auth/authtest"
	"github.com/snapflip/snapflip/internal/cli"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
)

// authConfig adds to config a collection scoped by tenant (its index starts with the
// scope's field) and one nobody but the admin is granted.
const authConfig = config + `  - name: docs
    table: public.docs
    key: id
    indexes: [[tenant, n], n]
  - name: secret
    table: public.secret
    key: id
`

// authFile is the auth file of the tests: an admin, tenant apps scoped by their
// tenant claim, and a reader of things and flags.
const authFile = `issuers: [{issuer: %q, audience: snapflip}]
key_refresh: 1s
allow_http: true
grants:
  - subject: admin
    collections: ["*"]
    admin: true
  - claim: {name: role, value: tenant-app}
    collections: [docs]
    rows: {field: tenant, claim: tenant}
  - subject: things-reader
    collections: [things, flags]
`

// authEnv is an env whose API verifies tokens of its own issuer.
type authEnv struct {
	*env
	issuer *authtest.Issuer
}

// startAuth starts an env whose API reads authFile, with grants (YAML list items)
// put before its own, which they take precedence over.
func startAuth(t *testing.T, grants ...string) *authEnv {
	t.Helper()
	e := start(t)
	testenv.Exec(t, e.DSN, `CREATE TABLE docs (id text PRIMARY KEY, tenant text, n int, body text)`,
		`CREATE TABLE secret (id text PRIMARY KEY, v text)`, `INSERT INTO secret VALUES ('s1', 'classified')`)
	is := authtest.NewIssuer(t)
	path := filepath.Join(t.TempDir(), "auth.yaml")
	file := strings.Replace(fmt.Sprintf(authFile, is.URL()), "grants:\n", "grants:\n"+strings.Join(grants, ""), 1)
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	e.StopAPI()
	e.startAPI(t, cli.EnvAuthConfig, path)
	return &authEnv{env: e, issuer: is}
}

// tenant returns a token of a tenant app with the tenant claim (none when "").
func (a *authEnv) tenant(tenant string) string {
	c := authtest.Claims{"sub": "app-" + tenant, "aud": "snapflip", "role": "tenant-app"}
	if tenant != "" {
		c["tenant"] = tenant
	}
	return a.issuer.Token(c)
}

func (a *authEnv) subject(sub string) string {
	return a.issuer.Token(authtest.Claims{"sub": sub, "aud": "snapflip"})
}

// call sends a request with the bearer token (none when "") and the headers (name,
// value pairs), checked against the OpenAPI document.
func (a *authEnv) call(tb testing.TB, method, path, token, body string, headers ...string) (*http.Response, []byte) {
	tb.Helper()
	var req *http.Request
	var err error
	if body != "" {
		req, err = http.NewRequest(method, a.Base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
	} else {
		req, err = http.NewRequest(method, a.Base+path, nil)
	}
	if err != nil {
		tb.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	return callAPI(tb, req)
}

// row is one row of docs as Postgres holds it.
type row struct {
	tenant *string
	n      int
}

func docsNow(tb testing.TB, dsn string) map[string]row {
	tb.Helper()
	ctx := context.Background()
	conn := testenv.Connect(tb, ctx, dsn)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT id, tenant, n FROM docs`)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]row{}
	for rows.Next() {
		var id string
		var r row
		if err := rows.Scan(&id, &r.tenant, &r.n); err != nil {
			tb.Fatal(err)
		}
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

func (r row) in(tenant string) bool { return r.tenant != nil && *r.tenant == tenant }

func (r row) same(o row) bool {
	return r.n == o.n && (r.tenant == nil) == (o.tenant == nil) && (r.tenant == nil || *r.tenant == *o.tenant)
}

// Random documents, grants and row scopes, through flips, with Postgres as the
// oracle: each tenant's caller reads, by every route and from the version named,
// exactly the rows SELECT … WHERE tenant = claim returns, and learns nothing of the
// others through a status, a page token, a count or the changes.
func TestRowScopesAgainstPostgres(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 42))
	tenants := []string{"t0", "t1", "t2", "t-ü/x"}
	// One tenant, drawn, is granted docs whole by a grant listed before the scoped one:
	// the first grant that matches and names the collection decides.
	whole := []string{"t0", "t2", "t-ü/x"}[rng.IntN(3)]
	t.Logf("seed %d; tenant %q reads docs whole", seed, whole)
	a := startAuth(t, fmt.Sprintf("  - claim: {name: tenant, value: %q}\n    collections: [docs]\n", whole))
	defer a.runSyncer(t, authConfig)()
	var prev map[string]row
	var prevVersion string
	ids := map[string]bool{}
	for round := range 4 {
		// Mutate: inserts, tenants moved (in and out of every scope), n changed, deletes.
		var stmts []string
		for i := range 25 {
			id := fmt.Sprintf("d%d-%d %s", round, i, []string{"", "a/b", "100%", "ü"}[i%4])
			ids[id] = true
			tenant := "NULL"
			if rng.IntN(6) > 0 {
				tenant = stack.Quote(tenants[rng.IntN(len(tenants))])
			}
			stmts = append(stmts, fmt.Sprintf(`INSERT INTO docs VALUES (%s, %s, %d, 'a body')`, stack.Quote(id), tenant, rng.IntN(100)))
		}
		for id := range prev {
			switch rng.IntN(5) {
			case 0:
				stmts = append(stmts, fmt.Sprintf(`UPDATE docs SET tenant = %s WHERE id = %s`, stack.Quote(tenants[rng.IntN(len(tenants))]), stack.Quote(id)))
			case 1:
				stmts = append(stmts, fmt.Sprintf(`UPDATE docs SET n = %d WHERE id = %s`, rng.IntN(100), stack.Quote(id)))
			case 2:
				stmts = append(stmts, fmt.Sprintf(`DELETE FROM docs WHERE id = %s`, stack.Quote(id)))
			}
		}
		testenv.Exec(t, a.DSN, "BEGIN; "+strings.Join(stmts, "; ")+"; COMMIT")
		var tok string
		testenv.QueryRow(t, a.DSN, `SELECT 's:' || pg_current_snapshot()`, &tok)
		var resp *http.Response
		var body []byte
		testenv.Eventually(t, time.Minute, func() error {
			// Asked again while not covered: a loaded machine may sync slower than a wait.
			resp, body = a.call(t, "GET", "/v1/versions/current", a.subject("admin"), "", "Snapshot-After", tok, "Prefer", "wait=10")
			if resp.StatusCode == http.StatusServiceUnavailable {
				return fmt.Errorf("round %d: the round's token not covered yet: %s", round, body)
			}
			return nil
		})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("round %d: current version with the round's token: %d %s", round, resp.StatusCode, body)
		}
		version := resp.Header.Get("Snapshot-Version")
		now := docsNow(t, a.DSN)
		for _, tenant := range tenants {
			a.checkScope(t, scopeCheck{round: round, tenant: tenant, whole: tenant == whole, version: version, prevVersion: prevVersion, now: now, prev: prev, ids: slices.Sorted(maps.Keys(ids))})
		}
		prev, prevVersion = now, version
	}

	// A caller whose grant scopes by a claim it lacks: 403, as for a collection not
	// granted, and an unknown one.
	for _, c := range []struct{ what, token, path string }{
		{"no tenant claim", a.tenant(""), "/v1/data/docs"},
		{"a collection not granted", a.tenant("t0"), "/v1/data/secret/s1"},
		{"an unknown collection", a.tenant("t0"), "/v1/data/nope/x"},
		{"things through a tenant token", a.tenant("t0"), "/v1/data/things?limit=5"},
		{"docs through the things reader", a.subject("things-reader"), "/v1/data/docs"},
		{"the status page through a tenant", a.tenant("t0"), "/"},
	} {
		if resp, body := a.call(t, "GET", c.path, c.token, ""); resp.StatusCode != http.StatusForbidden || strings.Contains(string(body), "tenant-app") || strings.Contains(string(body), "secret\"") && c.path != "/v1/data/secret/s1" {
			t.Errorf("%s: %d %s; want 403 naming no grant", c.what, resp.StatusCode, body)
		}
	}
	// The flip stream of a tenant names its collection, scoped, and nothing else.
	ev := a.firstFlip(t, a.tenant("t1"))
	if got := fmt.Sprint(ev["collections"]); got != "map[docs:map[scoped:true]]" {
		t.Errorf("a tenant's flip event collections = %s; want only docs, scoped, without counts", got)
	}
	if ev := a.firstFlip(t, a.subject("admin")); len(ev["collections"].(map[string]any)) != 4 {
		t.Errorf("the admin's flip event collections = %v; want all four with counts", ev["collections"])
	}
	// The admin endpoints take an admin identity; a tenant gets 403.
	if resp, body := a.call(t, "POST", "/v1/admin/unpin", a.tenant("t0"), `{"reason": "tenant"}`); resp.StatusCode != http.StatusForbidden {
		t.Errorf("unpin by a tenant: %d %s; want 403", resp.StatusCode, body)
	}
}

type scopeCheck struct {
	round       int
	tenant      string
	whole       bool // a grant gives the tenant every document
	version     string
	prevVersion string
	now, prev   map[string]row
	ids         []string // every id ever written
}

// checkScope reads the tenant's view of docs by every route from the version and
// compares it with Postgres.
func (a *authEnv) checkScope(t *testing.T, c scopeCheck) {
	t.Helper()
	tok := a.tenant(c.tenant)
	pin := []string{"Snapshot-Version", c.version}
	var want []string
	in := func(r row) bool { return c.whole || r.in(c.tenant) }
	for id, r := range c.now {
		if in(r) {
			want = append(want, id)
		}
	}
	slices.Sort(want)
	where := fmt.Sprintf("round %d, tenant %q, version %s", c.round, c.tenant, c.version)

	// List, every page; its tokens are the scope's own.
	var got []string
	var firstToken string
	for next := ""; ; {
		path := "/v1/data/docs?limit=7"
		if next != "" {
			path += "&page_token=" + url.QueryEscape(next)
		}
		resp, body := a.call(t, "GET", path, tok, "", pin...)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: list: %d %s", where, resp.StatusCode, body)
		}
		if cc := resp.Header.Get("Cache-Control"); !strings.HasPrefix(cc, "private") {
			t.Errorf("%s: a pinned answer with auth on is Cache-Control %q; want private", where, cc)
		}
		var page struct {
			Documents []struct{ ID string } `json:"documents"`
			Next      string                `json:"next_page_token"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		for _, d := range page.Documents {
			got = append(got, d.ID)
		}
		if firstToken == "" {
			firstToken = page.Next
		}
		if next = page.Next; next == "" {
			break
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s: the list holds %q; Postgres says %q", where, got, want)
	}
	if firstToken != "" {
		other := a.tenant("t-other")
		if resp, body := a.call(t, "GET", "/v1/data/docs?page_token="+url.QueryEscape(firstToken), other, ""); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: another tenant's page token: %d %s; want 400", where, resp.StatusCode, body)
		}
	}

	// A filter: the scope is one more condition.
	resp, body := a.call(t, "GET", "/v1/data/docs?n=gte.50&limit=1000", tok, "", pin...)
	var page struct {
		Documents []struct{ ID string } `json:"documents"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &page) != nil {
		t.Fatalf("%s: filter: %d %s", where, resp.StatusCode, body)
	}
	var gotF, wantF []string
	for _, d := range page.Documents {
		gotF = append(gotF, d.ID)
	}
	for _, id := range want {
		if c.now[id].n >= 50 {
			wantF = append(wantF, id)
		}
	}
	slices.Sort(gotF)
	if !slices.Equal(gotF, wantF) {
		t.Errorf("%s: n=gte.50 holds %q; Postgres says %q", where, gotF, wantF)
	}

	// One document: 200 in the scope, and outside it the 404 of an id never written.
	_, never := a.call(t, "GET", docPath("docs", "never written"), tok, "", pin...)
	for _, id := range c.ids {
		resp, body := a.call(t, "GET", docPath("docs", id), tok, "", pin...)
		in := slices.Contains(want, id)
		switch {
		case in && resp.StatusCode != http.StatusOK:
			t.Errorf("%s: GET %q in the scope: %d %s", where, id, resp.StatusCode, body)
		case !in && resp.StatusCode != http.StatusNotFound:
			t.Errorf("%s: GET %q outside the scope: %d %s; want 404", where, id, resp.StatusCode, body)
		case !in && problemDetail(t, body) != strings.Replace(problemDetail(t, never), `"never written"`, fmt.Sprintf("%q", id), 1):
			t.Errorf("%s: GET %q outside the scope answers %s; an id never written %s", where, id, body, never)
		case !in && resp.Header.Get("ETag") != "":
			t.Errorf("%s: GET %q outside the scope carries an ETag", where, id)
		}
	}

	// batchGet: outside ids are missing.
	reqBody, _ := json.Marshal(map[string][]string{"ids": c.ids})
	resp, body = a.call(t, "POST", "/v1/data/docs:batchGet", tok, string(reqBody), pin...)
	var batch struct {
		Documents map[string]json.RawMessage `json:"documents"`
		Missing   []string                   `json:"missing"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &batch) != nil {
		t.Fatalf("%s: batchGet: %d %s", where, resp.StatusCode, body)
	}
	if got := slices.Sorted(maps.Keys(batch.Documents)); !slices.Equal(got, want) {
		t.Errorf("%s: batchGet found %q; Postgres says %q", where, got, want)
	}
	if len(batch.Missing)+len(batch.Documents) != len(c.ids) {
		t.Errorf("%s: batchGet: %d found + %d missing of %d ids", where, len(batch.Documents), len(batch.Missing), len(c.ids))
	}

	// Collections and versions tell it no count of a collection it reads less than
	// whole, nor the bytes of all.
	wantColls, wantCounts := `"collections":[{"name":"docs","scoped":true}]`, `"counts":{}`
	if c.whole {
		wantColls, wantCounts = fmt.Sprintf(`"collections":[{"name":"docs","count":%d,`, len(c.now)), fmt.Sprintf(`"counts":{"docs":%d}`, len(c.now))
	}
	_, body = a.call(t, "GET", "/v1/collections", tok, "", pin...)
	if !strings.Contains(string(body), wantColls) {
		t.Errorf("%s: /v1/collections = %s; want %s", where, body, wantColls)
	}
	_, body = a.call(t, "GET", "/v1/versions/"+c.version, tok, "")
	if !strings.Contains(string(body), wantCounts) || !strings.Contains(string(body), `"bytes_written":0`) {
		t.Errorf("%s: /v1/versions/{v} = %s; want %s and no bytes", where, body, wantCounts)
	}

	// The changes: ids in the scope now (changed) or only before (deleted, for it).
	resp, body = a.call(t, "GET", "/v1/versions/"+c.version+"/changes/docs?limit=3", tok, "")
	var changes changesPage
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &changes) != nil {
		t.Fatalf("%s: changes: %d %s", where, resp.StatusCode, body)
	}
	for changes.Next != "" {
		resp, more := a.call(t, "GET", "/v1/versions/"+c.version+"/changes/docs?limit=3&after="+url.QueryEscape(changes.Next), tok, "")
		var p changesPage
		if resp.StatusCode != http.StatusOK || json.Unmarshal(more, &p) != nil {
			t.Fatalf("%s: changes page: %d %s", where, resp.StatusCode, more)
		}
		changes.Changes, changes.Next = append(changes.Changes, p.Changes...), p.Next
	}
	if changes.Kind != "delta" || c.prev == nil || changes.Parent != c.prevVersion {
		return
	}
	wantC := map[string]bool{}
	for _, id := range c.ids {
		now, inNow := c.now[id]
		before, wasThere := c.prev[id]
		if inNow == wasThere && now.same(before) {
			continue
		}
		if inNow && in(now) {
			wantC[id] = false
		} else if wasThere && in(before) {
			wantC[id] = true
		}
	}
	gotC := map[string]bool{}
	for _, ch := range changes.Changes {
		gotC[ch.ID] = ch.Deleted
	}
	if !maps.Equal(gotC, wantC) {
		t.Errorf("%s: changes against %s (id → deleted) = %v; Postgres says %v", where, changes.Parent, gotC, wantC)
	}
}

// problemDetail returns a problem document's detail.
func problemDetail(tb testing.TB, body []byte) string {
	tb.Helper()
	var p struct{ Detail string }
	if err := json.Unmarshal(body, &p); err != nil {
		tb.Fatalf("not a problem document: %s", body)
	}
	return p.Detail
}

// firstFlip returns the data of the first flip event of the caller's stream.
func (a *authEnv) firstFlip(t *testing.T, token string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", a.Base+"/v1/watch", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ev map[string]any
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatal(err)
			}
			return ev
		}
	}
	t.Fatalf("watch: no event (%v)", sc.Err())
	return nil
}

// Every bad credential is a 401 with a Bearer challenge, at once; tokens naming an
// unknown key make the API read the issuer's keys at most once per key_refresh.
func TestBadCredentials(t *testing.T) {
	t.Parallel()
	a := startAuth(t)
	defer a.runSyncer(t, authConfig)()
	admin := a.subject("admin")
	a.awaitAuthed(t, admin)
	good := authtest.Claims{"sub": "admin", "aud": "snapflip"}
	with := func(k string, v any) authtest.Claims {
		c := maps.Clone(good)
		c[k] = v
		return c
	}
	other := authtest.NewIssuer(t)
	parts := strings.Split(admin, ".")
	path := docPath("things", "plain")
	for _, c := range []struct {
		name    string
		token   string
		headers []string
		query   string
	}{
		{name: "no header"},
		{name: "alg none", token: "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + parts[1] + "."},
		{name: "HS256 keyed with the RSA public key", token: authtest.SignWith(a.issuer.PublicPEM(), jose.HS256, "", with("iss", a.issuer.URL()))},
		{name: "expired", token: a.issuer.Token(with("exp", time.Now().Add(-time.Hour).Unix()))},
		{name: "nbf in the future", token: a.issuer.Token(with("nbf", time.Now().Add(time.Hour).Unix()))},
		{name: "wrong issuer", token: other.Token(good)},
		{name: "wrong audience", token: a.issuer.Token(with("aud", "other"))},
		{name: "unknown kid", token: a.issuer.Unpublished(good)},
		{name: "truncated", token: admin[:len(admin)-12]},
		{name: "16 KiB", token: strings.Repeat("x", 16<<10)},
		{name: "two Authorization headers", token: admin, headers: []string{"Authorization", "Bearer " + admin}},
		{name: "in the query string", query: "?access_token=" + admin},
		{name: "another scheme", headers: []string{"Authorization", "Basic YTpi"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			resp, body := a.call(t, "GET", path+c.query, c.token, "", c.headers...)
			if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), `Bearer realm="snapflip"`) {
				t.Errorf("%d %s (WWW-Authenticate %q); want 401 with a Bearer challenge", resp.StatusCode, body, resp.Header.Get("WWW-Authenticate"))
			}
			if strings.Contains(string(body), parts[2]) {
				t.Errorf("the answer holds the token: %s", body)
			}
			t.Logf("answered in %s", time.Since(start).Round(time.Millisecond))
		})
	}
	// A key removed from the set: refused once the API reads the keys again.
	old := a.issuer.Token(authtest.Claims{"sub": "admin", "aud": "snapflip", "jti": "old"})
	a.issuer.AddKey(jose.ES256)
	a.issuer.RemoveOldest()
	testenv.Eventually(t, time.Minute, func() error {
		// A token of the new key makes the API read the set once key_refresh passed.
		if resp, body := a.call(t, "GET", path, a.subject("admin"), ""); resp.StatusCode != http.StatusOK {
			return fmt.Errorf("a token of the new key: %d %s", resp.StatusCode, body)
		}
		return nil
	})
	if resp, body := a.call(t, "GET", path, old, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a token of a key removed from the set: %d %s; want 401", resp.StatusCode, body)
	}

	// Many tokens naming an unknown key at once: at most one read of the keys per
	// key_refresh (1s) while they arrive, however slowly a loaded machine sends them.
	tokens := make([]string, 64)
	for i := range tokens {
		tokens[i] = a.issuer.Unpublished(authtest.Claims{"sub": "admin", "aud": "snapflip", "n": i})
	}
	reads, began := a.issuer.KeyReads.Load(), time.Now()
	var wg sync.WaitGroup
	for _, tok := range tokens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("GET", a.Base+path, nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	// One read per 80% of key_refresh comes with traffic anyway, and the unknown key
	// adds at most one per key_refresh.
	allowed := 2 + int64(time.Since(began)/(800*time.Millisecond))
	if n := a.issuer.KeyReads.Load() - reads; n > allowed {
		t.Errorf("64 tokens naming an unknown key, sent within %s, made the API read the keys %d times; want at most %d (one per 80%% of key_refresh, one for the unknown key)",
			time.Since(began).Round(time.Millisecond), n, allowed)
	}
}

// awaitAuthed waits until the API serves the token a read of things.
func (a *authEnv) awaitAuthed(t *testing.T, token string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() error {
		if resp, body := a.call(t, "GET", docPath("things", "plain"), token, ""); resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET things/plain: %d %s", resp.StatusCode, body)
		}
		return nil
	})
}

// The issuer adds a key and signs with it while readers read with fresh tokens: no
// request fails.
func TestKeyRotationUnderLoad(t *testing.T) {
	t.Parallel()
	a := startAuth(t)
	defer a.runSyncer(t, authConfig)()
	a.awaitAuthed(t, a.subject("admin"))
	var reads, failures atomic.Int64
	var rotated atomic.Bool
	var afterRotation atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var firstFailure atomic.Value
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequest("GET", a.Base+docPath("things", "plain"), nil)
				req.Header.Set("Authorization", "Bearer "+a.subject("admin"))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					continue
				}
				resp.Body.Close()
				reads.Add(1)
				if rotated.Load() {
					afterRotation.Add(1)
				}
				if resp.StatusCode != http.StatusOK {
					failures.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate")))
				}
			}
		}()
	}
	testenv.Eventually(t, time.Minute, func() error {
		if reads.Load() < 50 {
			return fmt.Errorf("%d reads before the rotation", reads.Load())
		}
		return nil
	})
	// While requests come, the API reads the keys about once per 80% of key_refresh
	// (1s): the rotation adds at most one read to those.
	reads0, began := a.issuer.KeyReads.Load(), time.Now()
	if err := a.issuer.AddKey(jose.ES256); err != nil {
		t.Fatal(err)
	}
	rotated.Store(true)
	testenv.Eventually(t, time.Minute, func() error {
		if afterRotation.Load() < 100 {
			return fmt.Errorf("%d reads after the rotation", afterRotation.Load())
		}
		return nil
	})
	cancel()
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Errorf("%d of %d reads failed across the rotation; the first: %v", n, reads.Load(), firstFailure.Load())
	}
	elapsed := time.Since(began)
	if n, most := a.issuer.KeyReads.Load()-reads0, 2+int64(elapsed/(800*time.Millisecond)); n > most {
		t.Errorf("over the rotation's %s the API read the keys %d times; want at most %d (one per 80%% of key_refresh, and one for the new key)",
			elapsed.Round(time.Millisecond), n, most)
	}
	t.Logf("%d reads, %d after the rotation, none failed", reads.Load(), afterRotation.Load())
}

// The API refuses to start when a scoped collection has no index starting with the
// scope's field in the current version.
func TestScopeWithoutIndexRefusesToStart(t *testing.T) {
	t.Parallel()
	a := startAuth(t)
	if err := os.WriteFile(a.ConfigPath, []byte(authConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := a.sync(t); err != nil {
		t.Fatalf("syncer once: %v\n%s", err, out)
	}
	path := filepath.Join(t.TempDir(), "auth.yaml")
	file := fmt.Sprintf("allow_http: true\nissuers: [{issuer: %q, audience: snapflip}]\ngrants: [{claim: {name: role, value: r}, collections: [secret], rows: {field: v, claim: t}}]\n", a.issuer.URL())
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	m := &cli.MetadataAPI{Getenv: func(k string) string {
		if k == cli.EnvAuthConfig {
			return path
		}
		return a.Getenv(k)
	}, Stderr: os.Stderr}
	err := m.Run(context.Background(), []string{"--addr", "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "collection secret is scoped by v, but has no index whose first field is v") {
		t.Errorf("metadata-api with a scope no index serves: %v; want a refusal naming the collection and field", err)
	}
}
