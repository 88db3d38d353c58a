package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
)

const keysSchema = `
-- Keyed by (payment_date, payment_id), partitioned by date, as a sales schema has it.
CREATE TABLE payments (payment_id int, payment_date timestamptz, amount numeric, memo text,
	PRIMARY KEY (payment_date, payment_id)) PARTITION BY RANGE (payment_date);
CREATE TABLE payments_2024 PARTITION OF payments FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE payments_other PARTITION OF payments DEFAULT;
-- Text components that need escaping, and numerics.
CREATE TABLE paths (tenant text, path text, v numeric, note text, PRIMARY KEY (tenant, path, v));
-- A join table whose one unique index over NOT NULL columns is its key.
CREATE TABLE film_actor (actor_id int NOT NULL, film_id int NOT NULL, role text, UNIQUE (film_id, actor_id));
`

const keysConfig = `dataset: e2e
schedule: "@every 1h"
ttl: 1h
collections:
  - name: payments
    table: payments
  - name: paths
    table: public.paths
  - name: film_actor
    table: film_actor
  - name: paths_by_v
    query: "SELECT v, tenant, path, note FROM paths WHERE v <> 0"
    key: [v, tenant, path]
  - name: things
    table: things
    key: id
`

// keyID is the composite id rule as docs/configuration.md documents it, written out for the test:
// each component's text with '%' as %25 and ',' as %2C, joined by ','.
func keyID(components ...string) string {
	esc := make([]string, len(components))
	for i, c := range components {
		esc[i] = strings.ReplaceAll(strings.ReplaceAll(c, "%", "%25"), ",", "%2C")
	}
	return strings.Join(esc, ",")
}

// TestKeysComposite: tables whose key is left to be inferred (a partitioned table with
// a composite primary key, a table keyed by awkward text and numerics, a join table
// with a unique index) and a query with a composite key are synced, and every row is
// read back through GET, batchGet and the list (following page tokens) under the id the
// documented rule makes of Postgres' own text of its key, with Postgres' to_json of
// the row; ids list in byte order, grouped by their leading components.
func TestKeysComposite(t *testing.T) {
	t.Parallel()
	e := start(t)
	testenv.Exec(t, e.DSN, keysSchema)
	stamps := []string{"2024-02-29 12:34:56.789012+00", "2024-02-29 12:34:56.789012+05:30", "1999-12-31 23:59:59.999999-05",
		"2024-02-29 12:34:56+00", "0044-03-15 12:00:00+00 BC", "infinity", "-infinity"}
	for i, ts := range stamps {
		for k, id := range []int{-5, 0, 5, 50, -2147483648, 2147483647, 7, 70, 700} {
			testenv.Exec(t, e.DSN, fmt.Sprintf(`INSERT INTO payments VALUES (%d, %s, %d.25, %s)`, id, stack.Quote(ts), -i, stack.Quote(awkwardIDs[(i*9+k)%len(awkwardIDs)])))
		}
	}
	tenants := []string{"", "acme", "a,b", "100%", "%2C", "%25", "x y", "ü/日本", "#frag", "?q=1&r", ",", ",,", "a%2Cb", "Ann", "Ann Lee"}
	paths := []string{"", "/", "a/b", "a,b/c", "%", " lead", "trail ", "+plus"}
	values := []string{"-5", "-0.5", "0", "0.0000001", "-12345678901234567890.123456789", "7"}
	n := 0
	var rows []string
	for i, tenant := range tenants {
		for j, path := range paths {
			v := values[(i*len(paths)+j)%len(values)]
			rows = append(rows, fmt.Sprintf("(%s, %s, %s, %s)", stack.Quote(tenant), stack.Quote(path), v, stack.Quote(fmt.Sprint(n))))
			v = values[(i+j+1)%len(values)]
			rows = append(rows, fmt.Sprintf("(%s, %s, %s, NULL)", stack.Quote(tenant), stack.Quote(path), v))
			n++
		}
	}
	testenv.Exec(t, e.DSN, "INSERT INTO paths VALUES "+strings.Join(rows, ", ")+" ON CONFLICT DO NOTHING",
		`INSERT INTO film_actor SELECT a, f, 'r' || a || '/' || f FROM generate_series(-3, 3) a, generate_series(1, 12) f`)
	if err := os.WriteFile(e.ConfigPath, []byte(keysConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := e.sync(t)
	if err != nil {
		t.Fatalf("syncer once: %v", err)
	}
	v := stack.PublishedVersion(t, out)

	for _, c := range []struct {
		name, query string // query: each row's key components as text, then to_json of the row
		components  int
	}{
		{"payments", `SELECT payment_date::text, payment_id::text, to_json(t)::text FROM payments t`, 2},
		{"paths", `SELECT tenant, path, v::text, to_json(t)::text FROM paths t`, 3},
		{"film_actor", `SELECT film_id::text, actor_id::text, to_json(t)::text FROM film_actor t`, 2},
		{"paths_by_v", `SELECT v::text, tenant, path, to_json(t)::text FROM (SELECT v, tenant, path, note FROM paths WHERE v <> 0) t`, 3},
	} {
		want := sourceKeys(t, e.DSN, c.query, c.components)
		if len(want) < 50 {
			t.Fatalf("%s: %d rows in the source; the test proves little", c.name, len(want))
		}
		checkKeyedCollection(t, e, c.name, v, want)
	}
	// A key of one column keeps its ids, which hold ',' and '%' as they are.
	for _, id := range []string{"100%", "%2F", "plain"} {
		if r := e.get(t, docPath("things", id)); r.status != http.StatusOK {
			t.Errorf("things/%q = %d; want the document under its id as it is", id, r.status)
		}
	}
}

// sourceKeys returns, by the documented id, Postgres' to_json of each row; query
// yields the key's components as text (UTC), then the row's JSON.
func sourceKeys(tb testing.TB, dsn, query string, components int) map[string]string {
	tb.Helper()
	out := map[string]string{}
	for _, vals := range stack.SourceRows(tb, dsn, query) {
		id := keyID(vals[:components]...)
		if _, dup := out[id]; dup {
			tb.Fatalf("two rows with id %q: the rule is not injective", id)
		}
		out[id] = vals[components]
	}
	return out
}

func checkKeyedCollection(t *testing.T, e *env, coll, version string, want map[string]string) {
	t.Helper()
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	// The API learns of the flip within its pointer refresh.
	e.awaitVersion(t, docPath(coll, ids[0]), version)

	// GET, the id path-escaped once.
	for _, id := range ids {
		r := e.get(t, docPath(coll, id))
		if r.status != http.StatusOK || r.version != version || string(r.body) != want[id] {
			t.Errorf("GET %s (%s/%q) = %d from %s: %s; want %s", docPath(coll, id), coll, id, r.status, r.version, r.body, want[id])
		}
	}

	// batchGet, the ids as they are in JSON.
	body, _ := json.Marshal(map[string][]string{"ids": append(slices.Clone(ids), keyID("no", "such"))})
	req, err := http.NewRequest(http.MethodPost, e.Base+"/v1/data/"+url.PathEscape(coll)+":batchGet", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, b := callAPI(t, req)
	var batch struct {
		Version   string                     `json:"version"`
		Documents map[string]json.RawMessage `json:"documents"`
		Missing   []string                   `json:"missing"`
	}
	if err := json.Unmarshal(b, &batch); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("batchGet %s = %d %s (%v)", coll, resp.StatusCode, b, err)
	}
	if batch.Version != version || len(batch.Documents) != len(want) || !slices.Equal(batch.Missing, []string{"no,such"}) {
		t.Errorf("batchGet %s: %d documents from %s, missing %q; want %d from %s, missing [no,such]",
			coll, len(batch.Documents), batch.Version, batch.Missing, len(want), version)
	}
	for id, doc := range batch.Documents {
		if w, ok := want[id]; !ok || string(doc) != w {
			t.Errorf("batchGet %s: %q = %s; want %s", coll, id, doc, w)
		}
	}

	// The list, page by page, in byte order of ids.
	var listed []string
	path := "/v1/data/" + url.PathEscape(coll) + "?limit=9"
	for pages := 0; ; pages++ {
		if pages > len(want) {
			t.Fatalf("list %s: more pages than documents", coll)
		}
		r := e.get(t, path)
		var p listPage
		if err := json.Unmarshal(r.body, &p); r.status != http.StatusOK || err != nil {
			t.Fatalf("GET %s = %d %s (%v)", path, r.status, r.body, err)
		}
		if p.Version != version {
			t.Errorf("list %s: a page from %s; want %s", coll, p.Version, version)
		}
		for _, d := range p.Documents {
			listed = append(listed, d.ID)
			if w, ok := want[d.ID]; !ok || string(d.Document) != w {
				t.Errorf("list %s: %q = %s; want %s", coll, d.ID, d.Document, w)
			}
		}
		if p.NextPageToken == "" {
			break
		}
		path = "/v1/data/" + url.PathEscape(coll) + "?limit=9&page_token=" + url.QueryEscape(p.NextPageToken)
	}
	if !slices.Equal(listed, ids) {
		t.Errorf("list %s: %d ids %q; want the %d ids in byte order %q", coll, len(listed), listed, len(ids), ids)
	}
	// Rows that share a first component are listed together.
	last := map[string]int{}
	for i, id := range listed {
		first, _, _ := strings.Cut(id, ",")
		if j, ok := last[first]; ok && j != i-1 {
			t.Errorf("list %s: ids starting %q at %d and %d, with others between", coll, first, j, i)
		}
		last[first] = i
	}
}
