package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
)

type listPage = testenv.ListPage

func gen(tb testing.TB, doc []byte) int {
	tb.Helper()
	var d struct {
		Gen *int `json:"gen"`
	}
	if err := json.Unmarshal(doc, &d); err != nil || d.Gen == nil {
		tb.Fatalf("document without gen: %s", doc)
	}
	return *d.Gen
}

// TestPagingUnderFlips: a reader pages through a collection while the pointer flips
// after every page; every page comes from the version of the first, in id order, and
// the listing is complete.
func TestPagingUnderFlips(t *testing.T) {
	t.Parallel()
	e := start(t)
	testenv.Exec(t, e.DSN, `INSERT INTO things (id) SELECT 'p-' || lpad(g::text, 4, '0') FROM generate_series(1, 300) g`)
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	first := e.awaitVersion(t, docPath("things", "plain"), "").version
	var ids []string
	path := "/v1/data/things?limit=7"
	for g := 1; ; g++ {
		r := e.get(t, path)
		if r.status != 200 {
			t.Fatalf("GET %s = %d %s", path, r.status, r.body)
		}
		var p listPage
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatal(err)
		}
		if p.Version != first || r.version != first {
			t.Fatalf("page %d from %s (header %s); want every page from %s", g, p.Version, r.version, first)
		}
		for _, d := range p.Documents {
			if gen(t, d.Document) != 0 {
				t.Fatalf("page %d holds %s from a later generation", g, d.ID)
			}
			ids = append(ids, d.ID)
		}
		if p.NextPageToken == "" {
			break
		}
		path = "/v1/data/things?limit=7&page_token=" + url.QueryEscape(p.NextPageToken)
		// Flip the pointer before the next page.
		testenv.Exec(t, e.DSN, fmt.Sprintf(`UPDATE things SET gen = %d`, g))
		if g%10 == 1 {
			if _, err := e.sync(t); err != nil {
				t.Fatal(err)
			}
		}
	}
	if want := len(awkwardIDs) + 300; len(ids) != want {
		t.Errorf("listed %d ids; want %d", len(ids), want)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i-1] >= ids[i] {
			t.Errorf("ids out of order: %q then %q", ids[i-1], ids[i])
		}
	}
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	if p, err := st.ReadPointer(context.Background(), "e2e"); err != nil || string(p.Version) == first {
		t.Errorf("the pointer never flipped during the listing (%v); the test proves nothing", err)
	}
}

// TestBatchGetUnderFlips: batchGets while syncs flip the pointer; each answer comes
// from one version.
func TestBatchGetUnderFlips(t *testing.T) {
	t.Parallel()
	e := start(t)
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	e.awaitVersion(t, docPath("things", "plain"), "")
	body, _ := json.Marshal(map[string][]string{"ids": append(append([]string{}, awkwardIDs...), "nope")})
	stop := e.readers(t, 4, func() (string, []int, error) {
		req, err := http.NewRequest(http.MethodPost, e.Base+"/v1/data/things:batchGet", bytes.NewReader(body))
		if err != nil {
			return "", nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, b, err := sendAPI(t, req)
		if err != nil {
			return "", nil, err
		}
		var out struct {
			Version   string                     `json:"version"`
			Documents map[string]json.RawMessage `json:"documents"`
			Missing   []string                   `json:"missing"`
		}
		if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != 200 ||
			len(out.Documents) != len(awkwardIDs) || len(out.Missing) != 1 {
			return "", nil, fmt.Errorf("batchGet = %d, %d documents, missing %v, %v", resp.StatusCode, len(out.Documents), out.Missing, err)
		}
		var gens []int
		for _, d := range out.Documents {
			gens = append(gens, gen(t, d))
		}
		return out.Version, gens, nil
	})
	for g := 1; g <= 4; g++ {
		testenv.Exec(t, e.DSN, fmt.Sprintf(`UPDATE things SET gen = %d`, g))
		out, err := e.sync(t)
		if err != nil {
			t.Fatal(err)
		}
		e.awaitVersion(t, docPath("things", "plain"), stack.PublishedVersion(t, out))
	}
	if seen := stop(); len(seen) < 2 {
		t.Errorf("batchGets saw %d versions; want the flips to show", len(seen))
	}
}

// TestPinnedReadsAfterFlipsAndGone: a version named by a client keeps answering after
// newer flips, cacheably; a version that never existed, or expired, answers 410.
func TestPinnedReadsAfterFlipsAndGone(t *testing.T) {
	// Not parallel: its TTL of seconds leaves little room for a loaded machine. v1
	// must outlive a retention change, three syncs and the reads below.
	e := start(t)
	cfg := strings.Replace(config, "ttl: 1h", "ttl: 15s", 1)
	writeConfig(t, e, cfg)
	out, err := e.sync(t)
	if err != nil {
		t.Fatal(err)
	}
	v1 := stack.PublishedVersion(t, out)
	writeConfig(t, e, config) // later versions live an hour, which the table's rules must allow
	if out, err := e.syncerCmd(t, "retention", "--apply"); err != nil {
		t.Fatalf("syncer retention --apply = %v\n%s", err, out)
	}
	for g := 1; g <= 3; g++ {
		testenv.Exec(t, e.DSN, fmt.Sprintf(`UPDATE things SET gen = %d`, g))
		if _, err := e.sync(t); err != nil {
			t.Fatal(err)
		}
	}
	r := e.get(t, docPath("things", "plain")+"?version="+v1)
	if r.status != 200 || r.version != v1 || gen(t, r.body) != 0 {
		t.Fatalf("pinned read = %d from %s: %s; want v1's document", r.status, r.version, r.body)
	}
	req, _ := http.NewRequest(http.MethodGet, e.Base+docPath("things", "plain"), nil)
	req.Header.Set("Snapshot-Version", v1)
	resp, _ := callAPI(t, req)
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Cache-Control"), "immutable") {
		t.Errorf("pinned by header: %d, Cache-Control %q; want 200 and an immutable cache", resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
	never := "7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1700000000000"
	if r := e.get(t, docPath("things", "plain")+"?version="+never); r.status != http.StatusGone {
		t.Errorf("a version that never existed = %d; want 410", r.status)
	}
	// v1 was written with a 15s TTL: it expires, and then answers 410.
	e.awaitGone(t, docPath("things", "plain")+"?version="+v1, "pinned read of an expiring version")
}

// awaitGone waits until path answers 410 (a version expired), failing on any answer
// but 200 before it.
func (e *env) awaitGone(t *testing.T, path, what string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() error {
		switch r := e.get(t, path); r.status {
		case http.StatusGone:
			return nil
		case http.StatusOK:
			return fmt.Errorf("%s = %d; want 410 once it expires", what, r.status)
		default:
			t.Fatalf("%s = %d %s; want 200 until it expires, then 410", what, r.status, r.body)
			return nil
		}
	})
}

// TestVersionsAndCollections: the administrative reads.
func TestVersionsAndCollections(t *testing.T) {
	t.Parallel()
	e := start(t)
	var versions []string
	for g := 0; g < 3; g++ {
		testenv.Exec(t, e.DSN, fmt.Sprintf(`UPDATE things SET gen = %d`, g+10))
		out, err := e.sync(t)
		if err != nil {
			t.Fatal(err)
		}
		versions = append(versions, stack.PublishedVersion(t, out))
	}
	cur := versions[2]
	e.awaitVersion(t, docPath("things", "plain"), cur)

	var cols struct {
		Version     string `json:"version"`
		Collections []struct {
			Name  string `json:"name"`
			Count int64  `json:"count"`
		} `json:"collections"`
	}
	mustJSON(t, e.get(t, "/v1/collections"), &cols)
	if cols.Version != cur || len(cols.Collections) != 2 || cols.Collections[0].Name != "flags" || cols.Collections[1].Count != int64(len(awkwardIDs)) {
		t.Errorf("/v1/collections = %+v", cols)
	}

	var list struct {
		Versions []struct {
			Version string `json:"version"`
			State   string `json:"state"`
			Current bool   `json:"current"`
			Token   uint64 `json:"token"`
		} `json:"versions"`
		NextPageToken string `json:"next_page_token"`
	}
	mustJSON(t, e.get(t, "/v1/versions?limit=2"), &list)
	if len(list.Versions) != 2 || list.Versions[0].Version != cur || !list.Versions[0].Current || list.Versions[1].State != "retired" || list.NextPageToken == "" {
		t.Errorf("/v1/versions?limit=2 = %+v", list)
	}
	next := list.NextPageToken
	list.Versions, list.NextPageToken = nil, ""
	mustJSON(t, e.get(t, "/v1/versions?limit=2&page_token="+url.QueryEscape(next)), &list)
	if len(list.Versions) != 1 || list.Versions[0].Version != versions[0] || list.NextPageToken != "" {
		t.Errorf("second page = %+v", list)
	}

	var current struct {
		Version    string  `json:"version"`
		Fence      uint64  `json:"fence"`
		Pinned     bool    `json:"pinned"`
		Previous   string  `json:"previous"`
		AgeSeconds float64 `json:"age_seconds"`
		TTLSeconds float64 `json:"ttl_seconds"`
	}
	mustJSON(t, e.get(t, "/v1/versions/current"), &current)
	if current.Version != cur || current.Previous != versions[1] || current.Fence != 3 || current.Pinned || current.TTLSeconds != 3600 {
		t.Errorf("/v1/versions/current = %+v", current)
	}
	if r := e.get(t, "/v1/versions/"+versions[0]); r.status != 200 || !strings.Contains(string(r.body), `"state":"retired"`) {
		t.Errorf("/v1/versions/{v} = %d %s", r.status, r.body)
	}
	if r := e.get(t, "/v1/versions/7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1700000000000"); r.status != 404 {
		t.Errorf("unknown version = %d; want 404", r.status)
	}
	if r := e.get(t, "/v1/versions/garbage"); r.status != 400 {
		t.Errorf("malformed version = %d; want 400", r.status)
	}
	m := e.get(t, "/metrics")
	for _, want := range []string{`snapflip_api_requests_total{method="GET",route="/v1/versions/current",status="200"} 1`,
		"snapflip_api_cache_misses_total", "snapflip_api_pointer_age_seconds", "snapflip_api_served_version_timestamp_seconds"} {
		if !strings.Contains(string(m.body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func mustJSON(tb testing.TB, r response, v any) {
	tb.Helper()
	if r.status != 200 {
		tb.Fatalf("status %d: %s", r.status, r.body)
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		tb.Fatalf("decode %s: %v", r.body, err)
	}
}

// TestHostileRequests: malformed ids, versions and bodies against the real server get
// 4xx problem documents, never a 5xx.
func TestHostileRequests(t *testing.T) {
	t.Parallel()
	e := start(t)
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	e.awaitVersion(t, docPath("things", "plain"), "")
	raw := func(method, target, body string) int {
		t.Helper()
		resp, _ := e.raw(t, method, target, body)
		return resp.StatusCode
	}
	for _, tc := range []struct {
		method, target, body string
	}{
		{"GET", "/v1/data/things/../../etc/passwd", ""},
		{"GET", "/v1/data/things/%00", ""},
		{"GET", "/v1/data/things/a%00b", ""},
		{"GET", "/v1/data/things/%ff%fe", ""},
		{"GET", "/v1/data/things/" + strings.Repeat("x", 10<<10), ""},
		{"GET", "/v1/data/things/%", ""},
		{"GET", "/v1/data/%00/x", ""},
		{"GET", "/v1/data/things/plain?version=%00", ""},
		{"GET", "/v1/data/things/plain?version=" + strings.Repeat("7", 5000), ""},
		{"GET", "/v1/data/things?page_token=" + strings.Repeat("A", 10000), ""},
		{"GET", "/v1/data/things?limit=-1", ""},
		{"POST", "/v1/data/things:batchGet", `{"ids": [` + strings.Repeat(`"x",`, 1500) + `"x"]}`},
		{"POST", "/v1/data/things:batchGet", strings.Repeat("[", 1<<20)},
		{"DELETE", "/v1/data/things/plain", ""},
	} {
		if code := raw(tc.method, tc.target, tc.body); code < 400 || code >= 500 {
			t.Errorf("%s %.70s = %d; want a 4xx", tc.method, tc.target, code)
		}
	}
	// ".." is an id like any other (this dataset has one): decoded once, never a path.
	for _, target := range []string{"/v1/data/things/..", "/v1/data/things/%2e%2e"} {
		if r := e.get(t, target); r.status != 200 || !strings.Contains(string(r.body), `"id":".."`) {
			t.Errorf("GET %s = %d %s; want the document whose id is \"..\"", target, r.status, r.body)
		}
	}
}

// TestBatchGetAndListServeTheBytesGETServes: a document read by batchGet or by a list
// page is byte for byte the one GET serves (Postgres' to_json of the row), not a
// re-encoding of it: they once came compacted, with <, > and & escaped.
func TestBatchGetAndListServeTheBytesGETServes(t *testing.T) {
	t.Parallel()
	e := start(t)
	testenv.Exec(t, e.DSN, `UPDATE things SET note = '<b>fish & chips</b>', j = '{"spaced":  [1,  2], "html": "<&>"}'`)
	out, err := e.sync(t)
	if err != nil {
		t.Fatal(err)
	}
	v := stack.PublishedVersion(t, out)
	byGET := map[string]string{}
	for _, id := range awkwardIDs {
		r := e.awaitVersion(t, docPath("things", id), v)
		byGET[id] = string(r.body)
	}
	ids, _ := json.Marshal(map[string][]string{"ids": append(slices.Clone(awkwardIDs), "nope")})
	req, _ := http.NewRequest(http.MethodPost, e.Base+"/v1/data/things:batchGet?version="+v, bytes.NewReader(ids))
	req.Header.Set("Content-Type", "application/json")
	resp, body := callAPI(t, req)
	var batch struct {
		Documents map[string]json.RawMessage `json:"documents"`
		Missing   []string                   `json:"missing"`
	}
	if err := json.Unmarshal(body, &batch); err != nil || resp.StatusCode != 200 {
		t.Fatalf("batchGet = %d %s, %v", resp.StatusCode, body, err)
	}
	if !slices.Equal(batch.Missing, []string{"nope"}) {
		t.Errorf("batchGet missing = %q; want [nope]", batch.Missing)
	}
	listed := map[string]string{}
	for tok := ""; ; {
		r := e.get(t, "/v1/data/things?limit=4&version="+v+"&page_token="+url.QueryEscape(tok))
		var page struct {
			Documents []struct {
				ID       string          `json:"id"`
				Document json.RawMessage `json:"document"`
			} `json:"documents"`
			Next string `json:"next_page_token"`
		}
		mustJSON(t, r, &page)
		for _, d := range page.Documents {
			listed[d.ID] = string(d.Document)
		}
		if tok = page.Next; tok == "" {
			break
		}
	}
	for id, want := range byGET {
		if got := string(batch.Documents[id]); got != want {
			t.Errorf("batchGet things/%q = %s; GET serves %s", id, got, want)
		}
		if got := listed[id]; got != want {
			t.Errorf("list things/%q = %s; GET serves %s", id, got, want)
		}
	}
	if len(listed) != len(byGET) {
		t.Errorf("list has %d documents; want %d", len(listed), len(byGET))
	}
}

// raw sends a request with target as written (no client-side cleaning or escaping),
// checks the exchange against the OpenAPI document and returns the response and body.
func (e *env) raw(tb testing.TB, method, target, body string) (*http.Response, []byte) {
	tb.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.Base, "http://"))
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	request := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", method, target, len(body), body)
	fmt.Fprint(conn, request)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		tb.Fatalf("%s %.60s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("%s %.60s: read body: %v", method, target, err)
	}
	checkRawOpenAPI(tb, []byte(request), resp, b)
	return resp, b
}
