package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/client"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
)

// pagilaConfig syncs Pagila's tables (testdata/pagila) with indexes on foreign keys
// (customer_id, inventory_id), an enum (rating), numerics (rental_rate, amount), a
// smallint (length), timestamps (rental_date, return_date, payment_date) and text
// (last_name); payment is partitioned and keyed by (payment_date, payment_id).
const pagilaConfig = `dataset: e2e
schedule: "@every 1h"
ttl: 1h
collections:
  - name: rental
    table: public.rental
    indexes: [customer_id, [inventory_id, rental_date], return_date]
  - name: film
    table: public.film
    indexes: [rating, [rental_rate, length]]
  - name: payment
    table: public.payment
    indexes: [amount, payment_date, customer_id]
  - name: customer
    table: public.customer
    indexes: [[store_id, last_name]]
`

// pagilaChange is a day at the store: thirty rentals go out (customer 42 takes ten,
// inventory 17 goes out again), the rentals out since before July come back and are
// paid, PG-13 films at 2.99 go up to 3.49, unrated films get a rating, a payment of
// customer 42 is refunded (deleted) and the Moores of store 1 become Smiths.
const pagilaChange = `
INSERT INTO rental (rental_date, inventory_id, customer_id, staff_id)
SELECT timestamptz '2022-07-25 10:00:00+00' + g * interval '7 minutes 3.5 seconds', 17 + g * 101, 42 + (g % 3) * 100, 1 + g % 2
FROM generate_series(0, 29) g;
UPDATE rental SET return_date = '2022-07-26 09:30:00+00' WHERE return_date IS NULL AND rental_date < '2022-07-01';
INSERT INTO payment (customer_id, staff_id, rental_id, amount, payment_date)
SELECT customer_id, staff_id, rental_id, 4.99, '2022-07-26 09:30:00.25+00' FROM rental
WHERE return_date = '2022-07-26 09:30:00+00';
UPDATE film SET rental_rate = 3.49 WHERE rating = 'PG-13' AND rental_rate = 2.99;
UPDATE film SET rating = 'PG' WHERE rating IS NULL AND film_id < 500;
DELETE FROM payment WHERE payment_id = (SELECT min(payment_id) FROM payment WHERE customer_id = 42);
UPDATE customer SET last_name = 'Smith' WHERE store_id = 1 AND last_name = 'Moore';
`

// pagilaIDs is each collection's id as Postgres' text, by the documented rule (Keys
// and ids, docs/configuration.md): one column's text, or the components' texts with
// % and , escaped, joined by commas.
var pagilaIDs = map[string]string{
	"rental":   "rental_id::text",
	"film":     "film_id::text",
	"customer": "customer_id::text",
	"payment":  `replace(replace(payment_date::text, '%', '%25'), ',', '%2C') || ',' || payment_id::text`,
}

// pagilaFilter is a filter and how Postgres answers it: where is its condition, order
// the served index's fields as Postgres orders them (text as COLLATE "C", an enum by
// its label's bytes, NULLs last).
type pagilaFilter struct {
	coll    string
	filters []client.Filter
	where   string
	order   string
}

func (f pagilaFilter) String() string {
	s := make([]string, len(f.filters))
	for i, c := range f.filters {
		s[i] = c.String()
	}
	return f.coll + "?" + strings.Join(s, "&")
}

// query is the filter's query string, each name and value escaped.
func (f pagilaFilter) query() string {
	s := make([]string, len(f.filters))
	for i, c := range f.filters {
		name, expr, _ := strings.Cut(c.String(), "=")
		s[i] = url.QueryEscape(name) + "=" + url.QueryEscape(expr)
	}
	return strings.Join(s, "&")
}

var (
	may1  = time.Date(2022, 5, 1, 0, 0, 0, 0, time.UTC)
	may8  = time.Date(2022, 5, 8, 0, 0, 0, 0, time.UTC)
	july1 = time.Date(2022, 7, 1, 2, 0, 0, 0, time.FixedZone("CEST", 2*3600))
)

var pagilaFilters = []pagilaFilter{
	{"rental", []client.Filter{client.Eq("customer_id", 42)}, "customer_id = 42", "customer_id"},
	{"rental", []client.Filter{client.In("customer_id", 7, 142, 599)}, "customer_id IN (7, 142, 599)", "customer_id"},
	{"rental", []client.Filter{client.Lte("inventory_id", 40)}, "inventory_id <= 40", "inventory_id, rental_date"},
	{"rental", []client.Filter{client.Eq("inventory_id", 17), client.Gte("rental_date", "2022-03-01T00:00:00Z")},
		"inventory_id = 17 AND rental_date >= '2022-03-01T00:00:00Z'", "inventory_id, rental_date"},
	{"rental", []client.Filter{client.In("inventory_id", 118, 219, 320, 522), client.Gt("rental_date", "2022-03-01T00:00:00Z"), client.Lte("rental_date", "2022-07-25T10:14:07Z")},
		"inventory_id IN (118, 219, 320, 522) AND rental_date > '2022-03-01T00:00:00Z' AND rental_date <= '2022-07-25T10:14:07Z'", "inventory_id, rental_date"},
	{"rental", []client.Filter{client.IsNull("return_date")}, "return_date IS NULL", "return_date"},
	{"rental", []client.Filter{client.Gt("return_date", july1)}, "return_date > '2022-07-01T02:00:00+02:00'", "return_date"},
	{"film", []client.Filter{client.Eq("rating", "PG-13")}, "rating = 'PG-13'", "rating::text COLLATE \"C\""},
	{"film", []client.Filter{client.In("rating", "G", "NC-17")}, "rating IN ('G', 'NC-17')", "rating::text COLLATE \"C\""},
	// Text order: PG-13 and R are after PG, NC-17 and G before it.
	{"film", []client.Filter{client.Gt("rating", "PG")}, "rating::text COLLATE \"C\" > 'PG'", "rating::text COLLATE \"C\""},
	{"film", []client.Filter{client.IsNull("rating")}, "rating IS NULL", "rating::text COLLATE \"C\""},
	{"film", []client.Filter{client.Eq("rental_rate", 2.99), client.Gte("length", 120)},
		"rental_rate = 2.99 AND length >= 120", "rental_rate, length"},
	{"film", []client.Filter{client.Eq("rental_rate", "3.490")}, "rental_rate = 3.49", "rental_rate, length"},
	{"film", []client.Filter{client.Lt("rental_rate", 1)}, "rental_rate < 1", "rental_rate, length"},
	{"payment", []client.Filter{client.Gte("amount", 20)}, "amount >= 20", "amount"},
	{"payment", []client.Filter{client.Eq("amount", 0)}, "amount = 0", "amount"},
	{"payment", []client.Filter{client.Gte("payment_date", may1), client.Lt("payment_date", may8)},
		"payment_date >= '2022-05-01T00:00:00Z' AND payment_date < '2022-05-08T00:00:00Z'", "payment_date"},
	{"payment", []client.Filter{client.Gt("payment_date", "2022-07-15T12:00:00.5Z")}, "payment_date > '2022-07-15T12:00:00.5Z'", "payment_date"},
	{"payment", []client.Filter{client.Eq("customer_id", 42)}, "customer_id = 42", "customer_id"},
	// Byte order: Müller after Moore, "de la Cruz" after every capital.
	{"customer", []client.Filter{client.Eq("store_id", 1), client.Gte("last_name", "M"), client.Lt("last_name", "T")},
		"store_id = 1 AND last_name COLLATE \"C\" >= 'M' AND last_name COLLATE \"C\" < 'T'", "store_id, last_name COLLATE \"C\""},
	{"customer", []client.Filter{client.In("store_id", 2, 1), client.In("last_name", "O'Brien", "de la Cruz", "Van Buren", "Moore")},
		"store_id IN (1, 2) AND last_name IN ('O''Brien', 'de la Cruz', 'Van Buren', 'Moore')", "store_id, last_name COLLATE \"C\""},
}

// pagilaDoc is one document of an answer.
type pagilaDoc struct{ id, doc string }

// pagila is a deployment of Pagila's schema and rows, with a client of its API.
type pagila struct {
	*env
	c *client.Client
}

func startPagila(tb testing.TB) *pagila {
	tb.Helper()
	e := newEnv(testenv.Postgres(tb), testenv.Bigtable(tb))
	for _, f := range []string{"schema.sql", "data.sql"} {
		b, err := os.ReadFile(filepath.Join("testdata", "pagila", f))
		if err != nil {
			tb.Fatal(err)
		}
		testenv.Exec(tb, e.DSN, string(b))
	}
	e.ConfigPath = filepath.Join(tb.TempDir(), "snapflip.yaml")
	writeConfig(tb, e, pagilaConfig)
	e.startAPI(tb)
	cfg := client.DefaultConfig()
	cfg.Timeout = 10 * time.Second
	c, err := client.New(e.Base, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return &pagila{env: e, c: c}
}

// publish syncs once and returns the version published, once the API serves it.
func (p *pagila) publish(tb testing.TB) string {
	tb.Helper()
	out, err := p.sync(tb)
	if err != nil {
		tb.Fatalf("sync: %v: %s", err, out)
	}
	v := stack.PublishedVersion(tb, out)
	p.awaitVersion(tb, "/v1/collections", v)
	return v
}

// oracle is Postgres' answer to f now: the matching rows' ids and to_json, ordered by
// the index's fields, then by id in byte order.
func (p *pagila) oracle(tb testing.TB, f pagilaFilter) []pagilaDoc {
	tb.Helper()
	id := pagilaIDs[f.coll]
	q := fmt.Sprintf(`SELECT %s, to_json(t)::text FROM public.%s t WHERE %s ORDER BY %s, %s COLLATE "C"`, id, f.coll, f.where, f.order, id)
	var docs []pagilaDoc
	for _, row := range stack.SourceRows(tb, p.DSN, q) {
		docs = append(docs, pagilaDoc{row[0], row[1]})
	}
	return docs
}

// oracles is the oracle of every filter of pagilaFilters.
func (p *pagila) oracles(tb testing.TB) [][]pagilaDoc {
	tb.Helper()
	want := make([][]pagilaDoc, len(pagilaFilters))
	for i, f := range pagilaFilters {
		want[i] = p.oracle(tb, f)
	}
	return want
}

// pin is how a read names the version it reads: not at all (the pointer's), by
// ?version=, or by the Snapshot-Version header.
type pin int

const (
	pinNone pin = iota
	pinQuery
	pinHeader
)

// pages reads f through the API in pages of limit, following page tokens, checking
// each exchange against the OpenAPI document and that each page is of version v.
func (p *pagila) pages(tb testing.TB, f pagilaFilter, v string, how pin) []pagilaDoc {
	tb.Helper()
	base := "/v1/data/" + f.coll + "?" + f.query() + "&limit=40"
	if how == pinQuery {
		base += "&version=" + v
	}
	var docs []pagilaDoc
	for target, n := base, 0; ; n++ {
		req, err := http.NewRequest(http.MethodGet, p.Base+target, nil)
		if err != nil {
			tb.Fatal(err)
		}
		if how == pinHeader {
			req.Header.Set("Snapshot-Version", v)
		}
		resp, body := callAPI(tb, req)
		var page listPage
		mustJSON(tb, response{status: resp.StatusCode, body: body}, &page)
		if page.Version != v || resp.Header.Get("Snapshot-Version") != v {
			tb.Fatalf("GET %s: page %d of version %s (header %s); want %s", target, n, page.Version, resp.Header.Get("Snapshot-Version"), v)
		}
		for _, d := range page.Documents {
			docs = append(docs, pagilaDoc{d.ID, string(d.Document)})
		}
		if page.NextPageToken == "" {
			return docs
		}
		target = base + "&page_token=" + url.QueryEscape(page.NextPageToken)
	}
}

// queried reads f with the Go client's Query, of version v when pinned (else the
// current one, which must be v).
func (p *pagila) queried(tb testing.TB, f pagilaFilter, v string, pinned bool) []pagilaDoc {
	tb.Helper()
	ctx := context.Background()
	opts := client.ListOptions{PageSize: 100}
	seq := p.c.Query(ctx, f.coll, f.filters, opts)
	if pinned {
		s, err := p.c.Pin(v)
		if err != nil {
			tb.Fatal(err)
		}
		seq = s.Query(ctx, f.coll, f.filters, opts)
	}
	var docs []pagilaDoc
	for d, err := range seq {
		if err != nil {
			tb.Fatalf("Query %s: %v", f, err)
		}
		if d.Version != v {
			tb.Fatalf("Query %s: a document of version %s; want %s", f, d.Version, v)
		}
		docs = append(docs, pagilaDoc{d.ID, string(d.JSON)})
	}
	return docs
}

// check reads every filter of pagilaFilters of version v through the API (named as
// how says) and the client, and reports each answer that is not want's.
func (p *pagila) check(tb testing.TB, what, v string, how pin, want [][]pagilaDoc) {
	tb.Helper()
	for i, f := range pagilaFilters {
		if got := p.pages(tb, f, v, how); !slices.Equal(got, want[i]) {
			tb.Errorf("%s: GET %s: %s", what, f, pagilaDiff(want[i], got))
		}
		if got := p.queried(tb, f, v, how != pinNone); !slices.Equal(got, want[i]) {
			tb.Errorf("%s: Query %s: %s", what, f, pagilaDiff(want[i], got))
		}
	}
}

// pagilaDiff says where got first departs from want.
func pagilaDiff(want, got []pagilaDoc) string {
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			return fmt.Sprintf("%d documents, Postgres %d; at %d got %s %.200s, want %s %.200s",
				len(got), len(want), i, got[i].id, got[i].doc, want[i].id, want[i].doc)
		}
	}
	return fmt.Sprintf("%d documents, Postgres %d", len(got), len(want))
}

// TestPagila: Pagila's schema with generated rows, synced with indexes on foreign
// keys and numeric, enum, timestamp and text columns. Every filter of pagilaFilters,
// read through the API in pages (checked against the OpenAPI document) and through
// the client's Query, answers what Postgres answers, in the same order: on the first
// version; on the version after a day of rentals, returns, a price change and a
// refund; on the first version pinned by ?version=, by Snapshot-Version and by
// client.Pin; and through the pointer after a rollback to it.
func TestPagila(t *testing.T) {
	t.Parallel()
	p := startPagila(t)
	v1 := p.publish(t)
	old := p.oracles(t)
	p.check(t, "first version", v1, pinNone, old)

	testenv.Exec(t, p.DSN, pagilaChange)
	v2 := p.publish(t)
	changed := p.oracles(t)
	moved := 0
	for i, f := range pagilaFilters {
		if !slices.Equal(old[i], changed[i]) {
			moved++
		}
		if len(old[i]) == 0 && len(changed[i]) == 0 {
			t.Errorf("%s matches nothing in Postgres, before or after the change; the test wants filters that do", f)
		}
	}
	if moved < len(pagilaFilters)*2/3 {
		t.Errorf("the change moved the answers of %d of %d filters; want most of them", moved, len(pagilaFilters))
	}
	p.check(t, "after the change", v2, pinNone, changed)
	p.check(t, "the first version by ?version=", v1, pinQuery, old)
	p.check(t, "the first version by Snapshot-Version", v1, pinHeader, old)

	if out, err := p.syncerCmd(t, "rollback", "--previous", "--reason", "the price change was a mistake"); err != nil {
		t.Fatalf("rollback: %v: %s", err, out)
	}
	p.awaitVersion(t, "/v1/collections", v1)
	p.check(t, "after the rollback", v1, pinNone, old)
	p.check(t, "the rolled-back version by ?version=", v2, pinQuery, changed)
}

// TestHostileFilters: against the real server and Pagila's indexed collections,
// filters with commas, parentheses and quotes inside in, NUL, invalid UTF-8, 10,000
// values in in, fields named like the list route's parameters, values of the wrong
// type and malformed escapes, each sent as written, are each a 400 problem whose
// detail names the input, checked against the OpenAPI document; never a 5xx.
func TestHostileFilters(t *testing.T) {
	t.Parallel()
	p := startPagila(t)
	p.publish(t)
	many := make([]string, 10_000)
	for i := range many {
		many[i] = fmt.Sprint(i + 1)
	}
	for _, tc := range []struct{ query, want string }{
		{`customer_id=in.(1,"2,3",4)`, `"2,3" is not a number`},
		{`customer_id=in.(1,%222,3%22,4)`, `"2,3" is not a number`},
		{`rating=in.(G,PG(13))`, "PG(13)"},
		{`rating=in.(G,"PG-13`, `rating=in.(G,"PG-13`},
		{`rating=in.(G,PG))`, "rating=in.(G,PG))"},
		{`rating=in.()`, "rating=in.()"},
		{"customer_id=in.(" + strings.Join(many, ",") + ")", "more than 100 values"},
		{"customer_id=eq.%00", "customer_id"},
		{"%00=eq.1", `"\x00"`},
		{"rating=eq.%FF", "rating"},
		{"%C0%80=eq.1", "eq.1"},
		{"limit=eq.5", `limit "eq.5"`},
		{"version=eq.5", `"eq.5"`},
		{"page_token=eq.5", "page_token"},
		{"customer_id=eq.abc", `"abc" is not a number`},
		{"customer_id=is.true", "customer_id=is.true"},
		{"customer_id=like.4*", "like"},
		{"rental_date=gt.yesterday", "yesterday"},
		{"return_date=lt.2022-13-45T00:00:00Z", "2022-13-45T00:00:00Z"},
		{"rental_rate=eq.true", "true"},
		{"amount=lt.1,5", "1,5"},
		{"customer_id=eq.1;x", "customer_id=eq.1;x"},
		{"customer_id=eq.%zz", "customer_id=eq.%zz"},
		{"staff_id=eq.1", "(customer_id)"},
		{"customer_id=eq.1&customer_id=eq.2", "customer_id=eq.1&customer_id=eq.2"},
	} {
		target := "/v1/data/rental?" + tc.query
		if strings.HasPrefix(tc.query, "rating") {
			target = "/v1/data/film?" + tc.query
		}
		if strings.HasPrefix(tc.query, "amount") {
			target = "/v1/data/payment?" + tc.query
		}
		resp, body := p.raw(t, http.MethodGet, target, "")
		var prob struct {
			Detail string `json:"detail"`
		}
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" ||
			json.Unmarshal(body, &prob) != nil || !strings.Contains(prob.Detail, tc.want) {
			t.Errorf("GET %.100s = %d %.300s; want a 400 problem naming %q", target, resp.StatusCode, body, tc.want)
		}
	}
}
