package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/auth/authtest"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/resolver"
)

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
		v1 = append(v1, row("docs", i, nullIf(i%6 == 5, dataTenants[i%len(dataTenants)]), nullIf(i%3 != 0, dataAccts[i%len(dataAccts)]), (i*7)%20-5))
	}
	for i := 1; i <= 10; i++ {
		v1 = append(v1, row("accts", i, nullIf(i%2 != 0, dataTenants[i%len(dataTenants)]), nullIf(i%5 == 4, dataAccts[i%len(dataAccts)]), (i*3)%11-3))
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
	conn := testenv.Connect(t, ctx, dsn)
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
