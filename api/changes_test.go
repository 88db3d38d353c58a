package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/snapshot"
)

type changesPage struct {
	Version    string `json:"version"`
	Parent     string `json:"parent"`
	Collection string `json:"collection"`
	Kind       string `json:"kind"`
	Changes    []struct {
		ID      string `json:"id"`
		Deleted bool   `json:"deleted"`
	} `json:"changes"`
	Next string `json:"next"`
}

// TestChangesPagesPinned: the changes of a version page in id order, ids of any bytes
// carried by the opaque cursor, each page immutable with an ETag that revalidates;
// every response is what the OpenAPI document says.
func TestChangesPagesPinned(t *testing.T) {
	want := []snapshot.Change{{ID: "%2F"}, {ID: "<&>", Deleted: true}, {ID: "a b?c=d"}, {ID: "a/b", Deleted: true}, {ID: "日本"}}
	f := &fakeReader{manifests: layeredManifests(time.Now()), changes: want}
	s := newServer(t, f, nil)
	get := openapiGet(t, s)
	base := "/v1/versions/" + string(ver) + "/changes/orders"
	var got []snapshot.Change
	target := base + "?limit=2"
	for pages := 0; target != ""; pages++ {
		if pages > len(want) {
			t.Fatalf("more than %d pages", pages)
		}
		res, body := get(target)
		if res.StatusCode != 200 {
			t.Fatalf("GET %s = %d %s", target, res.StatusCode, body)
		}
		if cc, etag := res.Header.Get("Cache-Control"), res.Header.Get("ETag"); cc != "public, max-age=31536000, immutable" || etag == "" {
			t.Errorf("GET %s: Cache-Control %q, ETag %q; want immutable with an ETag", target, cc, etag)
		}
		if again, _ := get(target, "If-None-Match", res.Header.Get("ETag")); again.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with its ETag = %d; want 304", target, again.StatusCode)
		}
		var p changesPage
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		if p.Version != string(ver) || p.Parent != string(verDelta) || p.Collection != "orders" || p.Kind != "delta" {
			t.Errorf("page %s = %+v; want version, parent, collection and kind delta", target, p)
		}
		for _, c := range p.Changes {
			got = append(got, snapshot.Change{ID: c.ID, Deleted: c.Deleted})
		}
		target = ""
		if p.Next != "" {
			target = base + "?limit=2&after=" + url.QueryEscape(p.Next)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}

	other, _ := json.Marshal(map[string]string{"v": string(ver), "c": "users", "a": "x"})
	for _, tc := range []struct {
		name, target string
		want         int
		names        string // what the problem must name
	}{
		{"a limit of 0", base + "?limit=0", 400, ""},
		{"a limit over 10000", base + "?limit=10001", 400, ""},
		{"the largest limit", base + "?limit=10000", 200, ""},
		{"a malformed cursor", base + "?after=%21%21", 400, ""},
		{"another collection's cursor", base + "?after=" + base64.RawURLEncoding.EncodeToString(other), 400, ""},
		{"a malformed version", "/v1/versions/..%2F..%2Fx/changes/orders", 400, ""},
		{"a NUL in the collection", "/v1/versions/" + string(ver) + "/changes/a%00b", 400, ""},
		{"a collection not UTF-8", "/v1/versions/" + string(ver) + "/changes/%ff%fe", 400, ""},
		{"an unknown collection", "/v1/versions/" + string(ver) + "/changes/nope", 404, `\"nope\"`},
		{"an unknown version", "/v1/versions/7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1700000000000/changes/orders", 404, "1700000000000"},
		{"a version no longer readable", "/v1/versions/" + string(verDelta) + "/changes/orders", 410, ""},
	} {
		res, body := do(t, s, http.MethodGet, tc.target, "")
		if res.StatusCode != tc.want {
			t.Errorf("%s: GET %s = %d %s; want %d", tc.name, tc.target, res.StatusCode, body, tc.want)
		}
		if !strings.Contains(string(body), tc.names) {
			t.Errorf("%s: %s; want the problem to name %s", tc.name, body, tc.names)
		}
	}
}

// changesReader fails the reads of the changes endpoint: View with viewErr,
// ChangedIDs with changesErr, when set.
type changesReader struct {
	*fakeReader
	viewErr, changesErr error
}

func (c changesReader) View(ctx context.Context, v snapshot.Version) (snapshot.View, error) {
	if c.viewErr != nil {
		return snapshot.View{}, c.viewErr
	}
	return c.fakeReader.View(ctx, v)
}

func (c changesReader) ChangedIDs(ctx context.Context, v snapshot.View, collection, after string, limit int) (snapshot.Changes, error) {
	if c.changesErr != nil {
		return snapshot.Changes{}, c.changesErr
	}
	return c.fakeReader.ChangedIDs(ctx, v, collection, after, limit)
}

// TestChangesStorageFailures: storage that does not answer, reading the version's
// manifest or its run, makes the changes 503 with Retry-After (never a 404 or 410,
// which a client would act on); any other failure is a 500; neither shows storage's
// words, and neither is cacheable.
func TestChangesStorageFailures(t *testing.T) {
	down := fmt.Errorf("read the fingerprints: bigtable (secret-host:443) %w: rpc error", snapshot.ErrUnavailable)
	slow := fmt.Errorf("read manifest at secret-host:443: %w", context.DeadlineExceeded)
	broken := errors.New("rpc error: secret-host:443 exploded")
	f := &fakeReader{manifests: layeredManifests(time.Now()), changes: []snapshot.Change{{ID: "a"}}}
	target := "/v1/versions/" + string(ver) + "/changes/orders"
	for _, tc := range []struct {
		name string
		r    changesReader
		want int
	}{
		{"the manifest unreachable", changesReader{fakeReader: f, viewErr: down}, 503},
		{"the manifest read timing out", changesReader{fakeReader: f, viewErr: slow}, 503},
		{"the run unreachable", changesReader{fakeReader: f, changesErr: down}, 503},
		{"the run read timing out", changesReader{fakeReader: f, changesErr: slow}, 503},
		{"the run failing otherwise", changesReader{fakeReader: f, changesErr: broken}, 500},
	} {
		s := newServer(t, tc.r, nil)
		get := openapiGet(t, s)
		if tc.want == 500 { // the document lists the statuses a client acts on
			get = func(target string, _ ...string) (*http.Response, []byte) { return do(t, s, http.MethodGet, target, "") }
		}
		res, body := get(target)
		if res.StatusCode != tc.want || strings.Contains(string(body), "secret-host") {
			t.Errorf("%s: GET %s = %d %s; want %d without storage's words", tc.name, target, res.StatusCode, body, tc.want)
		}
		if tc.want == 503 && res.Header.Get("Retry-After") == "" {
			t.Errorf("%s: a 503 without Retry-After", tc.name)
		}
		if cc := res.Header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("%s: Cache-Control %q; want no-store", tc.name, cc)
		}
	}
}

// TestChangesHostileInput: a request the changes endpoint cannot serve as asked is a
// 4xx problem whose detail names what was wrong.
func TestChangesHostileInput(t *testing.T) {
	f := &fakeReader{manifests: layeredManifests(time.Now()), changes: []snapshot.Change{{ID: "a"}}}
	s := newServer(t, f, nil)
	base := "/v1/versions/" + string(ver) + "/changes/orders"
	cursor := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	for _, tc := range []struct {
		target string
		want   int
		names  string
	}{
		{"/v1/versions/" + strings.Repeat("a", 300) + "/changes/orders", 400, "version: 300 bytes"},
		{"/v1/versions/7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-99999999999999999999/changes/orders", 400, "invalid version"},
		{"/v1/versions/" + string(ver) + "/changes/" + strings.Repeat("c", 200), 400, "collection: 200 bytes"},
		{"/v1/versions/" + string(ver) + "/changes/%25zz", 404, `collection \"%zz\"`},
		{base + "?limit=abc", 400, `limit \"abc\"`},
		{base + "?limit=-1", 400, `limit \"-1\"`},
		{base + "?limit=99999999999999999999", 400, "limit"},
		{base + "?after=" + strings.Repeat("A", 20_000), 400, "after: too long"},
		{base + "?after=%25", 400, "after: malformed"},
		{base + "?after=" + cursor(map[string]any{}), 400, "after: names no version"},
		{base + "?after=" + cursor(nil), 400, "after: names no version"},
		{base + "?after=" + cursor(map[string]any{"v": 1}), 400, "after: malformed"},
		{base + "?after=" + cursor(map[string]string{"v": string(ver), "c": "orders"}), 400, "after: empty"},
		{base + "?after=" + cursor(map[string]string{"v": string(ver), "c": "orders", "a": "a\x00b"}), 400, "after: holds a NUL"},
		{base + "?after=" + cursor(map[string]string{"v": string(verDelta), "c": "orders", "a": "a"}), 400, string(verDelta)},
		{base + "?limit=1&limit", 200, ""},
		{base + "?limit=1;x", 400, "query string"},
	} {
		res, body := do(t, s, http.MethodGet, tc.target, "")
		var p api.Problem
		if tc.want != 200 && (json.Unmarshal(body, &p) != nil || p.Status != tc.want || res.Header.Get("Content-Type") != "application/problem+json") {
			t.Errorf("GET %.100s = %d %s; want a %d problem", tc.target, res.StatusCode, body, tc.want)
		}
		if res.StatusCode != tc.want || !strings.Contains(string(body), tc.names) {
			t.Errorf("GET %.100s = %d %s; want %d naming %s", tc.target, res.StatusCode, body, tc.want, tc.names)
		}
	}
}

// FuzzChanges: whatever version, collection, limit and cursor a client sends, the
// changes endpoint answers 200, 304 or a 4xx problem, never a 5xx.
func FuzzChanges(f *testing.F) {
	f.Add(string(ver), "orders", "2", "")
	f.Add("..", "%00", "0", "%%%")
	f.Add(string(ver), "orders", "+3", "eyJ2IjoiIiwiYyI6IiIsImEiOiIifQ")
	f.Add("current", "a%2Fb", "-1", "bnVsbA")
	f.Add(string(ver)+"0", "%ff", "1e3", "e30")
	s := newServer(f, &fakeReader{manifests: layeredManifests(time.Now()), changes: []snapshot.Change{{ID: "a"}, {ID: "b"}}}, nil)
	f.Fuzz(func(t *testing.T, version, collection, limit, after string) {
		target := "/v1/versions/" + version + "/changes/" + collection + "?limit=" + url.QueryEscape(limit) + "&after=" + url.QueryEscape(after)
		req, err := http.NewRequest(http.MethodGet, "http://x"+target, nil)
		if err != nil {
			return // not a URL a client could send
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code >= 500 || (rec.Code >= 400 && rec.Header().Get("Content-Type") != "application/problem+json") {
			t.Fatalf("GET %s = %d %s; want 200 or a 4xx problem", target, rec.Code, rec.Body)
		}
	})
}
