package api_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/internal/testenv"
)

func selectReader() *fakeReader {
	return &fakeReader{docs: map[string]string{
		"c\x00a": `{"id": "a", "name": "A", "tags": [1, 2], "a b": 1.10, "ü": null}`,
		"c\x00b": `{"id":"b","name":"B<&>"}`,
	}}
}

// TestSelectOnEveryRead: GET, batchGet and every page of a list keep only the selected
// fields, in the document's order, values byte for byte.
func TestSelectOnEveryRead(t *testing.T) {
	h := newServer(t, selectReader(), nil)
	tests := []struct{ name, method, target, body, want string }{
		{"get", "GET", "/v1/data/c/a?select=tags,id", "", `{"id":"a","tags":[1, 2]}`},
		{"get, percent-encoded names", "GET", "/v1/data/c/a?select=%C3%BC,a%20b", "", `{"a b":1.10,"ü":null}`},
		{"get, '+' is a space", "GET", "/v1/data/c/a?select=a+b", "", `{"a b":1.10}`},
		{"get, nothing selected is there", "GET", "/v1/data/c/a?select=nope", "", `{}`},
		{"get, pinned", "GET", "/v1/data/c/b?select=name&version=" + string(ver), "", `{"name":"B<&>"}`},
		{"batchGet", "POST", "/v1/data/c:batchGet?select=name", `{"ids": ["a", "b", "x"]}`,
			`{"version":"` + string(ver) + `","documents":{"a":{"name":"A"},"b":{"name":"B<&>"}},"missing":["x"]}` + "\n"},
		{"list", "GET", "/v1/data/c?select=name,id", "",
			`{"version":"` + string(ver) + `","documents":[{"id":"a","document":{"id":"a","name":"A"}},{"id":"b","document":{"id":"b","name":"B<&>"}}]}` + "\n"},
	}
	for _, tt := range tests {
		res, body := do(t, h, tt.method, tt.target, tt.body)
		if res.StatusCode != 200 || string(body) != tt.want {
			t.Errorf("%s: %s %s = %d %s; want 200 %s", tt.name, tt.method, tt.target, res.StatusCode, body, tt.want)
		}
		if got := res.Header.Get(api.HeaderVersion); got != string(ver) {
			t.Errorf("%s: %s = %q; want %s", tt.name, api.HeaderVersion, got, ver)
		}
	}
}

// TestSelectAcrossListPages: the selection applies on every page; the page token does
// not carry it, so each page names it again, and the version stays the token's.
func TestSelectAcrossListPages(t *testing.T) {
	h := newServer(t, selectReader(), nil)
	var page testenv.ListPage
	var got []string
	target := "/v1/data/c?limit=1&select=name"
	for range 3 {
		res, body := do(t, h, http.MethodGet, target, "")
		if res.StatusCode != 200 {
			t.Fatalf("GET %s = %d %s", target, res.StatusCode, body)
		}
		page.NextPageToken = ""
		if err := json.Unmarshal(body, &page); err != nil || page.Version != string(ver) {
			t.Fatalf("GET %s = %s (%v); want a page of version %s", target, body, err, ver)
		}
		for _, d := range page.Documents {
			got = append(got, d.ID+" "+string(d.Document))
		}
		if page.NextPageToken == "" {
			break
		}
		target = "/v1/data/c?limit=1&select=name&page_token=" + url.QueryEscape(page.NextPageToken)
	}
	if diff := cmp.Diff([]string{`a {"name":"A"}`, `b {"name":"B<&>"}`}, got); diff != "" {
		t.Errorf("pages (-want +got):\n%s", diff)
	}
}

// TestSelectETags: a selection has an ETag of its own, If-None-Match answers 304 only
// for the selection it came from, and the caching headers are those of a whole read.
func TestSelectETags(t *testing.T) {
	h := newServer(t, selectReader(), nil)
	etag := func(target string) string {
		t.Helper()
		res, body := do(t, h, http.MethodGet, target, "")
		if res.StatusCode != 200 || res.Header.Get("Cache-Control") != "no-cache" || res.Header.Get("Vary") != api.HeaderVersion+", "+api.HeaderAfter {
			t.Fatalf("GET %s = %d, Cache-Control %q, Vary %q (%s)", target, res.StatusCode, res.Header.Get("Cache-Control"), res.Header.Get("Vary"), body)
		}
		return res.Header.Get("ETag")
	}
	whole, name, id, both := etag("/v1/data/c/a"), etag("/v1/data/c/a?select=name"), etag("/v1/data/c/a?select=id"), etag("/v1/data/c/a?select=name,id")
	seen := map[string]bool{}
	for _, e := range []string{whole, name, id, both} {
		if seen[e] || !strings.HasPrefix(e, `"`) || !strings.HasSuffix(e, `"`) {
			t.Errorf("ETags whole %s, name %s, id %s, name+id %s; want four distinct quoted tags", whole, name, id, both)
		}
		seen[e] = true
	}
	if again := etag("/v1/data/c/a?select=id,name"); again != both {
		t.Errorf("select=id,name has ETag %s, name,id %s; want one for the same fields", again, both)
	}
	for _, tt := range []struct {
		target, inm string
		want        int
	}{
		{"/v1/data/c/a?select=name", name, 304},
		{"/v1/data/c/a?select=name&version=" + string(ver), name, 304},
		{"/v1/data/c/a?select=id", name, 200},
		{"/v1/data/c/a", name, 200},
		{"/v1/data/c/a?select=name", whole, 200},
	} {
		res, body := do(t, h, http.MethodGet, tt.target, "", "If-None-Match", tt.inm)
		if res.StatusCode != tt.want || (tt.want == 304 && (len(body) != 0 || res.Header.Get("ETag") != tt.inm)) {
			t.Errorf("GET %s, If-None-Match %s = %d, ETag %s (%s); want %d", tt.target, tt.inm, res.StatusCode, res.Header.Get("ETag"), body, tt.want)
		}
	}
}

// TestSelectRefusals: a malformed or hostile select is a 400 problem naming it, on
// every read, before anything is read.
func TestSelectRefusals(t *testing.T) {
	h := newServer(t, selectReader(), nil)
	many := strings.Repeat("f,", 200) + "g"
	for _, tt := range []struct{ query, want string }{
		{"select=", "select: empty"},
		{"select=a,,b", "field 2 is empty"},
		{"select=%2C", "field 1 is empty"},
		{"select=a,b,a", `"a" is named twice`},
		{"select=a%00b", "NUL"},
		{"select=a%FFb", "UTF-8"},
		{"select=a&select=b", "given 2 times"},
		{"select=" + many, "201 fields, over the limit of 100"},
		{"select=" + strings.Repeat("f,", 10000) + "g", "20001 bytes, over the limit of 4096"},
		{"select=" + strings.Repeat("%22", 5000), "5000 bytes, over the limit of 4096"},
		{"select=" + strings.Repeat("x", 1<<20), "over the limit of 4096"},
	} {
		for _, r := range []struct{ method, path, body string }{
			{"GET", "/v1/data/c/a", ""},
			{"POST", "/v1/data/c:batchGet", `{"ids":["a"]}`},
			{"GET", "/v1/data/c", ""},
		} {
			res, body := do(t, h, r.method, r.path+"?"+tt.query, r.body)
			var p api.Problem
			err := json.Unmarshal(body, &p)
			if res.StatusCode != 400 || err != nil || !strings.Contains(p.Detail, tt.want) || res.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%s %s?%.60s = %d %.300s; want a 400 problem saying %q", r.method, r.path, tt.query, res.StatusCode, body, tt.want)
			}
			if len(p.Detail) > 300 {
				t.Errorf("%s %s?%.60s: a %d-byte detail; want the input truncated", r.method, r.path, tt.query, len(p.Detail))
			}
		}
	}
	// Quotes, brackets and escapes are names like any other.
	if res, body := do(t, h, http.MethodGet, "/v1/data/c/a?select=%22,%5C,%7B,%5B", ""); res.StatusCode != 200 || string(body) != `{}` {
		t.Errorf("select of odd names = %d %s; want 200 {}", res.StatusCode, body)
	}
}

// FuzzSelectQuery: whatever a client passes as select, every read answers 200 or a
// 4xx problem, never a 5xx.
func FuzzSelectQuery(f *testing.F) {
	for _, s := range []string{"a", "", "a,,b", "\x00", "\xff", `"`, "name,id", "a&select=b", strings.Repeat("x,", 200)} {
		f.Add(s)
	}
	h := newServer(f, selectReader(), nil)
	f.Fuzz(func(t *testing.T, sel string) {
		for _, r := range []struct{ method, path, body string }{
			{"GET", "/v1/data/c/a", ""},
			{"POST", "/v1/data/c:batchGet", `{"ids":["a","b"]}`},
			{"GET", "/v1/data/c", ""},
		} {
			target := r.path + "?select=" + url.QueryEscape(sel)
			res, body := do(t, h, r.method, target, r.body)
			if res.StatusCode >= 500 || (res.StatusCode != 200 && res.Header.Get("Content-Type") != "application/problem+json") {
				t.Fatalf("%s %s = %d %s; want 200 or a 4xx problem", r.method, target, res.StatusCode, body)
			}
			if res.StatusCode == 200 && !json.Valid(body) {
				t.Fatalf("%s %s = 200 %q; not JSON", r.method, target, body)
			}
		}
	})
}
