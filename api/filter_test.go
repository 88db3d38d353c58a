package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
)

// filterReader returns a fake with collection c indexed on n (int4) and on (t, n),
// collection bare without indexes, and documents i0…i9 with n = i mod 4 (NULL for
// i9) and t alternating "x", "y".
func filterReader() *fakeReader {
	f := &fakeReader{docs: map[string]string{}}
	for i := range 10 {
		n := fmt.Sprint(i % 4)
		if i == 9 {
			n = "null"
		}
		f.docs[fmt.Sprintf("c\x00i%d", i)] = fmt.Sprintf(`{"id":"i%d","t":%q,"n":%s}`, i, []string{"x", "y"}[i%2], n)
	}
	f.manifests = []snapshot.Manifest{{Version: ver, Collections: map[string]snapshot.CollectionStats{
		"c": {Indexes: []snapshot.IndexDef{
			{Name: "n", Fields: []string{"n"}, Types: []string{"int4"}},
			{Name: "t,n", Fields: []string{"t", "n"}, Types: []string{"text", "int4"}},
		}},
		"bare": {},
	}}}
	return f
}

// filterIDs pages through a filter and returns the ids in order, checking that every
// page is of one version.
func filterIDs(t *testing.T, h http.Handler, query string) []string {
	t.Helper()
	var ids []string
	target := "/v1/data/c?" + query
	for range 20 {
		resp, body := do(t, h, "GET", target, "")
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s = %d %s", target, resp.StatusCode, body)
		}
		var page testenv.ListPage
		if err := json.Unmarshal(body, &page); err != nil || page.Version != string(ver) {
			t.Fatalf("GET %s: %s, %v", target, body, err)
		}
		for _, d := range page.Documents {
			ids = append(ids, d.ID)
		}
		if page.NextPageToken == "" {
			return ids
		}
		target = "/v1/data/c?" + query + "&page_token=" + url.QueryEscape(page.NextPageToken)
	}
	t.Fatalf("GET %s: more than 20 pages", query)
	return nil
}

// A filter answers the matching documents in the order of its index's fields, then
// by id, over pages of one version.
func TestFilterPagesInIndexOrder(t *testing.T) {
	h := newServer(t, filterReader(), nil)
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"n=eq.1", []string{"i1", "i5"}},
		{"n=gt.1&limit=2", []string{"i2", "i6", "i3", "i7"}},
		{"n=gte.1&n=lt.3&limit=1", []string{"i1", "i5", "i2", "i6"}},
		{"n=in.(3,0)", []string{"i0", "i4", "i8", "i3", "i7"}},
		{"n=is.null", []string{"i9"}},
		{"t=eq.y&limit=3", []string{"i1", "i5", "i3", "i7", "i9"}},
		{"t=eq.x&n=lte.0", []string{"i0", "i4", "i8"}},
		{"n=eq.1.0", []string{"i1", "i5"}},
		{"n=eq.9", nil},
	} {
		if got := filterIDs(t, h, tc.query); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ids %v; want %v", tc.query, got, tc.want)
		}
	}
}

// A filter keeps the selected fields of each document.
func TestFilterSelects(t *testing.T) {
	h := newServer(t, filterReader(), nil)
	resp, body := do(t, h, "GET", "/v1/data/c?n=eq.2&select=n", "")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `{"id":"i2","document":{"n":2}}`) {
		t.Errorf("filter with select = %d %s", resp.StatusCode, body)
	}
}

// A filter no index serves, a value of the wrong type, a malformed condition and a
// token of another filter are each a 400 problem naming the input, never a 5xx.
func TestFilterRefusesWhatNoIndexServes(t *testing.T) {
	h := newServer(t, filterReader(), nil)
	many := make([]string, 10_000)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	for _, tc := range []struct{ target, want string }{
		{"/v1/data/c?id=eq.i1", "the indexes are (n), (t,n)"},
		{"/v1/data/c?n=eq.1&t=gt.x", "no index serves"},
		{"/v1/data/c?n=eq.abc", "abc"},
		{"/v1/data/c?n=like.1", "like.1"},
		{"/v1/data/c?n=in.(1,2", "in.(1,2"},
		{"/v1/data/c?n=in.(" + strings.Join(many, ",") + ")", "more than 100 values"},
		{"/v1/data/c?n=eq.%00", "n"},
		{"/v1/data/c?n=eq.%FF", "n"},
		{"/v1/data/c?%FF=eq.1", "eq.1"},
		{"/v1/data/c?limit=eq.5", "limit"},
		{"/v1/data/bare?n=eq.1", "collection bare has no indexes"},
		{"/v1/data/c?n=eq.1&page_token=" + url.QueryEscape("eyJ2IjoiNyJ9"), "page_token"},
	} {
		resp, body := do(t, h, "GET", tc.target, "")
		if resp.StatusCode != 400 || !strings.Contains(string(body), tc.want) {
			t.Errorf("GET %.120s = %d %.300s; want 400 naming %q", tc.target, resp.StatusCode, body, tc.want)
		}
	}
	// A token of one filter is refused by another.
	resp, body := do(t, h, "GET", "/v1/data/c?n=gt.0&limit=1", "")
	var page testenv.ListPage
	if err := json.Unmarshal(body, &page); err != nil || resp.StatusCode != 200 || page.NextPageToken == "" {
		t.Fatalf("first page: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, h, "GET", "/v1/data/c?n=gt.1&limit=1&page_token="+url.QueryEscape(page.NextPageToken), "")
	if resp.StatusCode != 400 || !strings.Contains(string(body), "another collection or filter") {
		t.Errorf("a token of another filter = %d %s; want 400", resp.StatusCode, body)
	}
}

// hostileFilters are queries a client could send to filter c: quotes, commas and
// parentheses inside in, NUL, invalid UTF-8, 10,000 values in in, fields named like
// the list route's parameters, values of the wrong type, malformed escapes.
func hostileFilters() []string {
	many := make([]string, 10_000)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	return []string{
		`n=in.(1,"2,3",4)`, `t=in.(a(b)`, `t=in.(a,b))`, `t=in.("a`, `t=in.(a,,b)`,
		`t=in.(%22%5C%22)`, "n=in.(" + strings.Join(many, ",") + ")",
		"n=eq.%00", "t=eq.a%00b", "%00=eq.1", "t=eq.%FF", "%FF%FE=eq.1", "t=in.(%C0%80)", "n=eq.\x00", "t=eq.\xff",
		"limit=eq.5", "version=eq.5", "page_token=eq.5", "n=eq.1&limit=eq.1",
		"n=eq.true", "n=gt.2022-01-01T00:00:00Z", "n=in.(1,x)", "n=is.true", "n=like.1*",
		"n=eq.1;x", "n=eq.%zz", "n=eq.1 2", "=eq.1", "=", "n=gt.1&n=gt.2",
	}
}

// oddFilters are queries a filter answers, for the fuzz target's corpus: quotes,
// commas and parentheses quoted inside in, a huge number, an empty range, a select
// that looks like a filter.
var oddFilters = []string{`t=in.("a,b","(c)","d\"e",f)`, "n=eq.1e999999999", "t=eq.x&n=gt.1&n=lt.0", "n=eq.1&t=eq.x",
	"select=eq.5&n=eq.1", "&&", "n=in.(" + strings.Repeat("1,", 99) + "1)"}

// FuzzFilterQuery: whatever query string a client sends to the list route of a
// collection with indexes, the answer is a 200 page or a 4xx problem naming
// something of what it sent, never a 5xx.
func FuzzFilterQuery(f *testing.F) {
	for _, q := range append(hostileFilters(), oddFilters...) {
		f.Add(q)
	}
	h := newServer(f, filterReader(), nil)
	f.Fuzz(func(t *testing.T, raw string) {
		req := httptest.NewRequest(http.MethodGet, "/v1/data/c", nil)
		req.URL.RawQuery = raw
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		res := rec.Result()
		body := rec.Body.Bytes()
		if res.StatusCode == 200 {
			if !json.Valid(body) {
				t.Fatalf("GET /v1/data/c?%q = 200 %q; not JSON", raw, body)
			}
			return
		}
		var p api.Problem
		if res.StatusCode < 400 || res.StatusCode >= 500 || res.Header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(body, &p) != nil {
			t.Fatalf("GET /v1/data/c?%q = %d %s; want 200 or a 4xx problem", raw, res.StatusCode, body)
		}
		if !namesInput(p.Detail, raw) {
			t.Fatalf("GET /v1/data/c?%q = %d, detail %q: it names nothing of the query", raw, res.StatusCode, p.Detail)
		}
	})
}

// namesInput reports whether a problem's detail names something of a raw query: the
// first bytes of a parameter's name or value, as sent or decoded, plain or with Go's
// escapes (which the server quotes input that is not printable with), or a pair with
// an empty name as it is; a query of nothing but separators names nothing, and any
// detail will do.
func namesInput(detail, raw string) bool {
	var parts []string
	for _, kv := range strings.Split(raw, "&") {
		k, v, _ := strings.Cut(kv, "=")
		parts = append(parts, k, v)
		if k == "" {
			parts = append(parts, kv) // "=" or "=v": the detail can only quote the pair
		}
		if d, err := url.QueryUnescape(k); err == nil {
			parts = append(parts, d)
		}
		if d, err := url.QueryUnescape(v); err == nil {
			parts = append(parts, d)
		}
	}
	some := false
	for _, s := range parts {
		if s == "" {
			continue
		}
		some = true
		quoted := strconv.Quote(s)
		for _, form := range []string{s, quoted[1 : len(quoted)-1]} {
			if mentions(detail, form[:min(len(form), 8)]) {
				return true
			}
		}
	}
	return !some
}

// mentions reports whether detail holds s; one shorter than 4 bytes must stand apart
// from letters and digits, so that a field "n" is not found in "invalid".
func mentions(detail, s string) bool {
	if len(s) >= 4 {
		return strings.Contains(detail, s)
	}
	word := func(b byte) bool { return b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }
	for i := 0; ; {
		j := strings.Index(detail[i:], s)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(s)
		if (j == 0 || !word(detail[j-1]) || !word(s[0])) && (end == len(detail) || !word(detail[end]) || !word(s[len(s)-1])) {
			return true
		}
		i = j + 1
	}
}

// Every hostile filter is a 400 problem that names what was sent.
func TestFilterHostileQueries(t *testing.T) {
	h := newServer(t, filterReader(), nil)
	for _, raw := range hostileFilters() {
		req := httptest.NewRequest(http.MethodGet, "/v1/data/c", nil)
		req.URL.RawQuery = raw
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var p api.Problem
		if rec.Code != 400 || json.Unmarshal(rec.Body.Bytes(), &p) != nil || !namesInput(p.Detail, raw) {
			t.Errorf("GET /v1/data/c?%.80q = %d %.300s; want a 400 problem naming the input", raw, rec.Code, rec.Body.Bytes())
		}
	}
}
