package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/auth"
	"github.com/snapflip/snapflip/auth/authtest"
	"github.com/snapflip/snapflip/resolver"
	"github.com/snapflip/snapflip/snapshot"
)

// countingVerifier counts the verifications a request makes.
type countingVerifier struct {
	next interface {
		Verify(ctx context.Context, raw string) (*auth.Identity, error)
	}
	n atomic.Int64
}

func (v *countingVerifier) Verify(ctx context.Context, raw string) (*auth.Identity, error) {
	v.n.Add(1)
	return v.next.Verify(ctx, raw)
}

// policyServer is a server over f whose current version holds c (indexed by tenant,
// and by tenant then v) and d, with the grants; set, when given, tunes its config.
func policyServer(t *testing.T, f *fakeReader, grants []auth.Grant, set func(*api.Config)) (http.Handler, *authtest.Issuer, *countingVerifier) {
	t.Helper()
	return policyServerOver(t, f, f, authtest.NewIssuer(t), grants, set)
}

// policyServerOver is policyServer reading through r (f or a wrapper of it), with
// the issuer is.
func policyServerOver(t *testing.T, f *fakeReader, r api.Reader, is *authtest.Issuer, grants []auth.Grant, set func(*api.Config)) (http.Handler, *authtest.Issuer, *countingVerifier) {
	t.Helper()
	cfg := auth.Config{Issuers: []auth.Issuer{{Issuer: is.URL(), Audience: "snapflip"}}, AllowHTTP: true, KeyRefresh: time.Minute, Leeway: time.Second, Grants: grants}
	v, err := auth.NewVerifier(context.Background(), cfg, auth.VerifierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.manifests = []snapshot.Manifest{{Version: ver, Collections: map[string]snapshot.CollectionStats{
		"c": {Rows: 3, Bytes: 99, Indexes: []snapshot.IndexDef{
			{Name: "tenant", Fields: []string{"tenant"}, Types: []string{"text"}},
			{Name: "tenant_v", Fields: []string{"tenant", "v"}, Types: []string{"text", "int8"}}}},
		"d": {Rows: 5},
	}}}
	counted := &countingVerifier{next: v}
	h := newServer(t, r, func(c *api.Config) {
		c.Auth = &api.Auth{Verifier: counted, Policy: auth.NewPolicy(cfg)}
		if set != nil {
			set(c)
		}
	})
	return h, is, counted
}

// appGrant scopes callers with role app to their tenant's documents of c.
var appGrant = auth.Grant{Claim: &auth.ClaimMatch{Name: "role", Value: "app"}, Collections: []string{"c"}, Rows: &auth.RowRule{Field: "tenant", Claim: "tenant"}}

func tenantDocs() *fakeReader {
	return &fakeReader{docs: map[string]string{
		"c\x00a": `{"tenant":"t1","v":300}`, "c\x00b": `{"tenant":"t1","v":100}`, "c\x00x": `{"tenant":"t2","v":500}`,
		"d\x00y": `{"n":1}`,
	}}
}

// TestVerifiedOncePerRequest: the middleware verifies the token and passes the
// identity on; no handler verifies it again.
func TestVerifiedOncePerRequest(t *testing.T) {
	h, is, counted := policyServer(t, tenantDocs(), []auth.Grant{appGrant, {Subject: "reader", Collections: []string{"*"}}}, nil)
	app := is.Token(authtest.Claims{"sub": "app", "aud": "snapflip", "role": "app", "tenant": "t1"})
	reader := is.Token(authtest.Claims{"sub": "reader", "aud": "snapflip"})
	for _, c := range []struct{ path, token string }{
		{"/v1/data/c/a", app}, {"/v1/data/c", app}, {"/v1/data/c?v=gte.1&tenant=eq.t1", app}, {"/v1/collections", app},
		{"/v1/versions", app}, {"/v1/versions/current", reader}, {"/v1/data/d/y", reader}, {"/", reader},
	} {
		before := counted.n.Load()
		if res, body := call(t, h, c.path, c.token); res.StatusCode != 200 {
			t.Errorf("%s: %d %s", c.path, res.StatusCode, body)
		}
		if got := counted.n.Load() - before; got != 1 {
			t.Errorf("%s: the token was verified %d times; want once", c.path, got)
		}
	}
}

// TestWildcardAfterAScopedGrant: a "*" grant after a scoped one does not undo the
// scope on the routes that report on several collections: the status page refuses,
// the collections and versions give no counts of the scoped collection, and the flip
// stream gives no rows of it.
func TestWildcardAfterAScopedGrant(t *testing.T) {
	readers := auth.Grant{Claim: &auth.ClaimMatch{Name: "groups", Value: "readers"}, Collections: []string{"*"}}
	h, is, _ := policyServer(t, tenantDocs(), []auth.Grant{appGrant, readers}, nil)
	both := is.Token(authtest.Claims{"sub": "svc", "aud": "snapflip", "role": "app", "tenant": "t1", "groups": []string{"readers"}})
	if res, body := call(t, h, "/", both); res.StatusCode != 403 {
		t.Errorf("the status page: %d %.200s; want 403", res.StatusCode, body)
	}
	if res, body := call(t, h, "/v1/collections", both); res.StatusCode != 200 ||
		!strings.Contains(body, `{"name":"c","scoped":true}`) || !strings.Contains(body, `{"name":"d","count":5`) {
		t.Errorf("collections: %d %s; want c scoped without counts, d with its count", res.StatusCode, body)
	}
	if res, body := call(t, h, "/v1/versions/current", both); res.StatusCode != 200 || strings.Contains(body, `"c":`) || !strings.Contains(body, `"d":5`) {
		t.Errorf("the current version: %d %s; want d's count and not c's", res.StatusCode, body)
	}
	url := serveWatch(t, h)
	ev := firstFlipEvent(t, url, both)
	if got := fmt.Sprint(ev["collections"]); got != "map[c:map[scoped:true] d:map[rows:5]]" {
		t.Errorf("the flip event's collections = %s; want c scoped without rows, d with them", got)
	}
}

// firstFlipEvent returns the data of the first flip event of a watch with the token.
func firstFlipEvent(t *testing.T, url, token string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/watch", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("watch: %d", res.StatusCode)
	}
	buf := make([]byte, 64<<10)
	var got string
	for !strings.Contains(got, "event: flip\ndata: ") || !strings.Contains(got[strings.Index(got, "event: flip\ndata: "):], "\n\n") {
		n, err := res.Body.Read(buf)
		if err != nil {
			t.Fatalf("watch: %v after %q", err, got)
		}
		got += string(buf[:n])
	}
	data := got[strings.Index(got, "event: flip\ndata: ")+len("event: flip\ndata: "):]
	data = data[:strings.Index(data, "\n")]
	var ev map[string]any
	if err := json.Unmarshal([]byte(data), &ev); err != nil {
		t.Fatalf("flip event %q: %v", data, err)
	}
	return ev
}

// TestGrantedNothingIsRefused: an identity no grant gives a collection to, or only
// scoped grants whose claim it lacks, gets 403 on every route but health and metrics.
func TestGrantedNothingIsRefused(t *testing.T) {
	h, is, _ := policyServer(t, tenantDocs(), []auth.Grant{appGrant, {Subject: "reader", Collections: []string{"d"}}}, nil)
	for name, tok := range map[string]string{
		"no grant":            is.Token(authtest.Claims{"sub": "stranger", "aud": "snapflip"}),
		"scoped, no claim":    is.Token(authtest.Claims{"sub": "app", "aud": "snapflip", "role": "app"}),
		"scoped, empty claim": is.Token(authtest.Claims{"sub": "app", "aud": "snapflip", "role": "app", "tenant": ""}),
	} {
		for _, path := range []string{"/", "/v1/versions", "/v1/versions/current", "/v1/versions/" + string(ver), "/v1/collections",
			"/v1/watch", "/v1/versions/" + string(ver) + "/changes/c", "/v1/data/c", "/v1/data/c/a"} {
			if res, body := callWithin(t, h, path, tok); res.StatusCode != 403 || strings.Contains(body, string(ver)) {
				t.Errorf("%s: %s: %d %.200s; want 403 naming nothing", name, path, res.StatusCode, body)
			}
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if res, _ := call(t, h, path, ""); res.StatusCode != 200 {
			t.Errorf("%s: %d; want 200", path, res.StatusCode)
		}
	}
}

// callWithin is call with a request that ends after a few seconds, for a route that
// may answer with a stream.
func callWithin(t *testing.T, h http.Handler, target, token string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Result(), w.Body.String()
}

// blockingReader's Await tells waiting that a request waits, and holds it until
// release is closed (or the request ends), as for a token no version covers yet.
type blockingReader struct {
	*fakeReader
	waiting chan struct{}
	release chan struct{}
}

func (b blockingReader) Await(ctx context.Context, _ snapshot.Token) (snapshot.View, error) {
	b.waiting <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return snapshot.View{}, snapshot.ErrNotYetCovered
}

// TestCapsPerIdentity: one identity cannot hold more than its share of the watch
// streams or of the requests waiting for a token; another identity still can.
func TestCapsPerIdentity(t *testing.T) {
	f := tenantDocs()
	waiting, release := make(chan struct{}, 4), make(chan struct{})
	h, is, _ := policyServerOver(t, f, blockingReader{fakeReader: f, waiting: waiting, release: release}, authtest.NewIssuer(t),
		[]auth.Grant{{Subject: "greedy", Collections: []string{"*"}}, {Subject: "other", Collections: []string{"*"}}},
		func(c *api.Config) { c.MaxWatchersPerIdentity, c.MaxWaitersPerIdentity = 1, 1 })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close) // after the streams' bodies, closed by later cleanups
	greedy := is.Token(authtest.Claims{"sub": "greedy", "aud": "snapflip"})
	other := is.Token(authtest.Claims{"sub": "other", "aud": "snapflip"})
	send := func(path, token string, headers ...string) *http.Response {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res
	}
	if res := send("/v1/watch", greedy); res.StatusCode != 200 {
		t.Fatalf("the first watch: %d", res.StatusCode)
	}
	if res := send("/v1/watch", greedy); res.StatusCode != 429 || res.Header.Get("Retry-After") == "" {
		t.Errorf("a second watch of the same identity: %d; want 429 with Retry-After", res.StatusCode)
	}
	if res := send("/v1/watch", other); res.StatusCode != 200 {
		t.Errorf("another identity's watch: %d; want 200", res.StatusCode)
	}
	// A request waiting for a token holds the identity's one waiter until it ends:
	// the waits below end when the test releases them, not on a clock.
	waited := make(chan int, 2)
	wait := func(token string) {
		waited <- send("/v1/data/d/y", token, "Snapshot-After", "s:5:5:", "Prefer", "wait=10").StatusCode
	}
	go wait(greedy)
	<-waiting
	if res := send("/v1/data/d/y", greedy, "Snapshot-After", "s:5:5:", "Prefer", "wait=10"); res.StatusCode != 429 {
		t.Errorf("a second waiting request of the same identity: %d; want 429", res.StatusCode)
	}
	go wait(other)
	select { // another identity's request waits too
	case <-waiting:
	case got := <-waited:
		t.Fatalf("another identity's waiting request: %d; want it to wait", got)
	}
	close(release)
	for range 2 {
		if got := <-waited; got != 503 {
			t.Errorf("a waiting request: %d; want 503 once its wait ended", got)
		}
	}
}

// TestScopedCallersOwnConditions: a scoped caller's conditions on its scope field and
// the scope both apply: its own tenant gives its rows, another an empty page, never
// an error and never another tenant's row.
func TestScopedCallersOwnConditions(t *testing.T) {
	h, is, _ := policyServer(t, tenantDocs(), []auth.Grant{appGrant}, nil)
	app := is.Token(authtest.Claims{"sub": "app", "aud": "snapflip", "role": "app", "tenant": "t1"})
	for _, c := range []struct{ query, want string }{
		{"tenant=eq.t1&v=gte.300", `[{"id":"a","document":{"tenant":"t1","v":300}}]`},
		{"tenant=eq.t2&v=gte.300", `[]`},
		{"tenant=eq.t2", `[]`},
		{"tenant=in.(t2,t1)", `[{"id":"a","document":{"tenant":"t1","v":300}},{"id":"b","document":{"tenant":"t1","v":100}}]`},
		{"tenant=gte.t0&v=lt.200", `[{"id":"b","document":{"tenant":"t1","v":100}}]`},
		{"tenant=gt.t1", `[]`},
		{"tenant=is.null", `[]`},
		{"v=gte.0", `[{"id":"b","document":{"tenant":"t1","v":100}},{"id":"a","document":{"tenant":"t1","v":300}}]`},
	} {
		res, body := call(t, h, "/v1/data/c?"+c.query, app)
		var page struct {
			Documents json.RawMessage `json:"documents"`
		}
		_ = json.Unmarshal([]byte(body), &page)
		if res.StatusCode != 200 || string(page.Documents) != c.want {
			t.Errorf("%s: %d %s; want documents %s", c.query, res.StatusCode, body, c.want)
		}
	}
	if res, body := call(t, h, "/v1/data/c?tenant=eq.t1&v=gte.abc", app); res.StatusCode != 400 {
		t.Errorf("a value not of the field's type: %d %s; want 400", res.StatusCode, body)
	}
}

// wrongIndexReader's Filter answers every document of the collection, as an index
// that disagrees with its documents would.
type wrongIndexReader struct{ *fakeReader }

func (w wrongIndexReader) Filter(_ context.Context, v snapshot.View, q resolver.FilterQuery) (resolver.FilterPage, error) {
	docs, _, err := w.Page(context.Background(), v, q.Collection, "", 100)
	return resolver.FilterPage{Docs: docs}, err
}

// TestFilterRechecksTheScope: a document the index returns outside the caller's scope
// is not served.
func TestFilterRechecksTheScope(t *testing.T) {
	f := tenantDocs()
	h, is, _ := policyServerOver(t, f, wrongIndexReader{f}, authtest.NewIssuer(t), []auth.Grant{appGrant}, nil)
	app := is.Token(authtest.Claims{"sub": "app", "aud": "snapflip", "role": "app", "tenant": "t1"})
	for _, path := range []string{"/v1/data/c", "/v1/data/c?v=gte.0"} {
		if res, body := call(t, h, path, app); res.StatusCode != 200 || strings.Contains(body, "t2") || !strings.Contains(body, `"a"`) {
			t.Errorf("%s through an index that disagrees: %d %s; want t1's documents only", path, res.StatusCode, body)
		}
	}
}

// countingReader counts the documents a request reads, and answers ChangedIDs with
// the kind it is given.
type countingReader struct {
	*fakeReader
	reads atomic.Int64
	kind  snapshot.ChangesKind
}

func (c *countingReader) GetMany(ctx context.Context, v snapshot.View, collection string, ids []string) (map[string]resolver.Doc, []string, error) {
	c.reads.Add(int64(len(ids)))
	return c.fakeReader.GetMany(ctx, v, collection, ids)
}

func (c *countingReader) ChangedIDs(ctx context.Context, v snapshot.View, collection, after string, limit int) (snapshot.Changes, error) {
	page, err := c.fakeReader.ChangedIDs(ctx, v, collection, after, limit)
	if c.kind != "" {
		page.Kind, page.IDs, page.More = c.kind, nil, false
	}
	return page, err
}

// TestScopedChangesAreBounded: a scoped caller's changes page reads a bounded number
// of documents however many others changed, its cursor never shows an id outside the
// scope, and its kind does not tell a version that changed nothing from one that
// changed only others' documents.
func TestScopedChangesAreBounded(t *testing.T) {
	f := tenantDocs()
	for i := range 5000 {
		id := fmt.Sprintf("o%05d", i)
		f.docs["c\x00"+id] = `{"tenant":"t2","v":1}`
		f.changes = append(f.changes, snapshot.Change{ID: id})
	}
	f.docs["c\x00z"] = `{"tenant":"t1","v":1}`
	f.changes = append(f.changes, snapshot.Change{ID: "z"})
	cr := &countingReader{fakeReader: f}
	h, is, _ := policyServerOver(t, f, cr, authtest.NewIssuer(t), []auth.Grant{appGrant}, nil)
	app := is.Token(authtest.Claims{"sub": "app", "aud": "snapflip", "role": "app", "tenant": "t1"})
	path := "/v1/versions/" + string(ver) + "/changes/c?limit=1"
	var got []string
	for pages := 0; ; pages++ {
		before := cr.reads.Load()
		res, body := call(t, h, path, app)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, res.StatusCode, body)
		}
		if n := cr.reads.Load() - before; n > 2000 {
			t.Errorf("one page read %d documents; want at most 2000 (two per changed id examined)", n)
		}
		var page struct {
			Kind    string `json:"kind"`
			Changes []struct {
				ID string `json:"id"`
			} `json:"changes"`
			Next string `json:"next"`
		}
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatal(err)
		}
		for _, c := range page.Changes {
			got = append(got, c.ID)
		}
		if page.Next == "" {
			break
		}
		raw, _ := base64.RawURLEncoding.DecodeString(page.Next)
		if strings.Contains(string(raw), `"o0`) || strings.Contains(string(raw), `"a":"o`) {
			t.Fatalf("the cursor shows an id outside the scope: %s", raw)
		}
		if pages > 20 {
			t.Fatal("no end after 20 pages")
		}
		path = "/v1/versions/" + string(ver) + "/changes/c?limit=1&after=" + page.Next
	}
	if fmt.Sprint(got) != "[z]" {
		t.Errorf("the scoped changes = %v; want [z]", got)
	}
	// A forged cursor is refused.
	forged := base64.RawURLEncoding.EncodeToString([]byte(`{"v":"` + string(ver) + `","c":"c","a":"","s":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="}`))
	if res, body := call(t, h, "/v1/versions/"+string(ver)+"/changes/c?after="+forged, app); res.StatusCode != 400 {
		t.Errorf("a forged cursor: %d %s; want 400", res.StatusCode, body)
	}
	cr.kind = snapshot.ChangesUnchanged
	if res, body := call(t, h, "/v1/versions/"+string(ver)+"/changes/c", app); res.StatusCode != 200 || !strings.Contains(body, `"kind":"delta"`) {
		t.Errorf("a version that changed nothing, to a scoped caller: %d %s; want kind delta", res.StatusCode, body)
	}
}

// TestScopeClaimOfAnotherType: a claim that is no value of the scope field's type
// (text for a number) scopes the caller to nothing: an empty page on every list and
// filter, as GET answers 404, never a 400 for a condition the caller did not send.
func TestScopeClaimOfAnotherType(t *testing.T) {
	f := tenantDocs()
	byV := auth.Grant{Claim: &auth.ClaimMatch{Name: "role", Value: "app"}, Collections: []string{"c"}, Rows: &auth.RowRule{Field: "v", Claim: "tenant"}}
	h, is, _ := policyServer(t, f, []auth.Grant{byV}, nil)
	c := f.manifests[0].Collections["c"]
	c.Indexes = append(c.Indexes, snapshot.IndexDef{Name: "v", Fields: []string{"v"}, Types: []string{"int8"}})
	f.manifests[0].Collections["c"] = c
	app := is.Token(authtest.Claims{"sub": "app", "aud": "snapflip", "role": "app", "tenant": "t1"})
	for _, path := range []string{"/v1/data/c", "/v1/data/c?select=v", "/v1/data/c?v=gte.0", "/v1/data/c?tenant=eq.t1"} {
		if res, body := call(t, h, path, app); res.StatusCode != 200 || !strings.Contains(body, `"documents":[]`) {
			t.Errorf("%s: %d %s; want an empty page", path, res.StatusCode, body)
		}
	}
	if res, body := call(t, h, "/v1/data/c/a", app); res.StatusCode != 404 {
		t.Errorf("GET: %d %s; want 404", res.StatusCode, body)
	}
}
