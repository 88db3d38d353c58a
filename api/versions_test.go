package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/snapshot"
)

// Versions of the layered fixture, oldest first; ver (the current one) is newest.
const (
	verBase  = snapshot.Version("11111111-3f7e-4c57-9d0c-0a5d2c1f8e21-1763000000000")
	verFull  = snapshot.Version("22222222-3f7e-4c57-9d0c-0a5d2c1f8e21-1763100000000")
	verDelta = snapshot.Version("33333333-3f7e-4c57-9d0c-0a5d2c1f8e21-1763600000000")
)

// layeredManifests returns hand-built manifests, newest first: ver, a layered version
// whose collections wrote a delta (orders, a chain of 3 down to a base 41h old), a
// base (users) and nothing (tags); verDelta, its parent; verFull, a full copy; and
// verBase, the base.
func layeredManifests(now time.Time) []snapshot.Manifest {
	baseTime := now.Add(-41*time.Hour - 10*time.Minute)
	baseLayer := snapshot.LayerRef{Version: verBase, Kind: snapshot.LayerBase, Docs: 1000, Bytes: 64 << 10, DataTime: baseTime}
	deltaLayer := snapshot.LayerRef{Version: verDelta, Kind: snapshot.LayerDelta, Docs: 10, Tombstones: 2, Bytes: 700, DataTime: now.Add(-2 * time.Hour)}
	cur := snapshot.Manifest{
		Version: ver, State: snapshot.StatePublished, Format: snapshot.FormatLayered, Parent: verDelta,
		BytesWritten: 1536, StartedAt: now.Add(-5 * time.Minute), TTL: 72 * time.Hour, Writer: "w",
		Collections: map[string]snapshot.CollectionStats{
			"orders": {Rows: 1008, Written: 1008, Bytes: 65 << 10, Layers: []snapshot.LayerRef{
				{Version: ver, Kind: snapshot.LayerDelta, Docs: 5, Tombstones: 1, Bytes: 1200, DataTime: now.Add(-5 * time.Minute)},
				deltaLayer, baseLayer,
			}, Own: &snapshot.OwnLayer{Kind: snapshot.LayerDelta, Mode: snapshot.ModeRowVersion, Inserted: 3, Changed: 2, Deleted: 1,
				Rendered: 5, Emitted: 6, Written: 6, Chunks: 1, ChunksWritten: 1}},
			"users": {Rows: 40, Written: 40, Bytes: 4 << 10, Layers: []snapshot.LayerRef{
				{Version: ver, Kind: snapshot.LayerBase, Docs: 40, Bytes: 4 << 10, DataTime: now.Add(-5 * time.Minute)},
			}, Own: &snapshot.OwnLayer{Kind: snapshot.LayerBase, Mode: snapshot.ContentMode("first version"), Inserted: 40, Rendered: 40,
				Emitted: 40, Written: 40, Chunks: 1, ChunksWritten: 1}},
			"tags": {Rows: 7, Written: 7, Bytes: 100, Layers: []snapshot.LayerRef{baseLayer},
				Own: &snapshot.OwnLayer{Mode: snapshot.ModeSameFingerprint}},
		},
	}
	parent := snapshot.Manifest{
		Version: verDelta, State: snapshot.StateRetired, Format: snapshot.FormatLayered, Parent: verFull,
		BytesWritten: 900, StartedAt: now.Add(-2 * time.Hour), TTL: 72 * time.Hour, Writer: "w",
		Collections: map[string]snapshot.CollectionStats{
			"orders": {Rows: 1004, Written: 1004, Layers: []snapshot.LayerRef{deltaLayer, baseLayer},
				Own: &snapshot.OwnLayer{Kind: snapshot.LayerDelta, Inserted: 4, Changed: 6, Deleted: 2, Rendered: 10, Emitted: 12, Written: 12}},
		},
	}
	full := snapshot.Manifest{
		Version: verFull, State: snapshot.StateRetired, BytesWritten: 70 << 10, StartedAt: now.Add(-30 * time.Hour), Writer: "w",
		Collections: map[string]snapshot.CollectionStats{"orders": {Rows: 1000, Written: 1000}},
	}
	base := snapshot.Manifest{
		Version: verBase, State: snapshot.StateRetired, Format: snapshot.FormatLayered, BytesWritten: 66 << 10,
		StartedAt: baseTime, Writer: "w",
		Collections: map[string]snapshot.CollectionStats{
			"orders": {Rows: 1000, Written: 1000, Layers: []snapshot.LayerRef{baseLayer},
				Own: &snapshot.OwnLayer{Kind: snapshot.LayerBase, Inserted: 1000, Rendered: 1000, Emitted: 1000, Written: 1000}},
		},
	}
	return []snapshot.Manifest{cur, parent, full, base}
}

func TestVersionShape(t *testing.T) {
	own := func(kinds ...snapshot.LayerKind) snapshot.Manifest {
		m := snapshot.Manifest{Format: snapshot.FormatLayered, Collections: map[string]snapshot.CollectionStats{}}
		for i, k := range kinds {
			m.Collections[string(rune('a'+i))] = snapshot.CollectionStats{Own: &snapshot.OwnLayer{Kind: k}}
		}
		return m
	}
	for _, tt := range []struct {
		name string
		m    snapshot.Manifest
		want string
	}{
		{"full copy", snapshot.Manifest{Collections: map[string]snapshot.CollectionStats{"a": {Rows: 1}}}, api.ShapeFull},
		{"bases", own("base", "base"), api.ShapeBase},
		{"deltas", own("delta", "delta"), api.ShapeDelta},
		{"a delta and an unchanged collection", own("delta", ""), api.ShapeDelta},
		{"a base and an unchanged collection", own("", "base"), api.ShapeBase},
		{"bases and deltas", own("base", "", "delta"), api.ShapeMixed},
		{"nothing written", own("", ""), api.ShapeUnchanged},
		{"nothing recorded yet", own(), ""},
		{"an unknown format", snapshot.Manifest{Format: 3}, ""},
	} {
		if got := api.VersionShape(tt.m); got != tt.want {
			t.Errorf("%s: shape %q; want %q", tt.name, got, tt.want)
		}
	}
}

// openapiGet returns a function that serves GET target to s, with the header pairs
// given, as do does, and checks the response against the OpenAPI document s serves,
// as the end-to-end suite does.
func openapiGet(t *testing.T, s http.Handler) func(target string, header ...string) (*http.Response, []byte) {
	t.Helper()
	_, doc := do(t, s, http.MethodGet, "/openapi.yaml", "")
	loader := openapi3.NewLoader()
	spec, err := loader.LoadFromData(doc)
	if err != nil {
		t.Fatal(err)
	}
	router, err := gorillamux.NewRouter(spec)
	if err != nil {
		t.Fatal(err)
	}
	return func(target string, header ...string) (*http.Response, []byte) {
		t.Helper()
		res, body := do(t, s, http.MethodGet, target, "", header...)
		req := httptest.NewRequest(http.MethodGet, target, nil) // what the document routes
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Errorf("%s %s: %v", req.Method, req.URL, err)
			return res, body
		}
		opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
		if err := openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in, Status: res.StatusCode, Header: res.Header,
			Body: io.NopCloser(bytes.NewReader(body)), Options: opts}); err != nil {
			t.Errorf("%s %s: the response is not what the OpenAPI document says: %v\n%s", req.Method, req.URL, err, body)
		}
		return res, body
	}
}

// TestVersionsDescribeLayers: the version listing, the current version and one
// version say each version's format, shape, longest chain, bytes written and parent,
// and the OpenAPI document declares all of it; expiry counts from the chain's oldest
// layer.
func TestVersionsDescribeLayers(t *testing.T) {
	now := time.Now()
	f := &fakeReader{manifests: layeredManifests(now)}
	s := newServer(t, f, func(c *api.Config) { c.Registry = prometheus.NewRegistry() })
	checked := openapiGet(t, s)
	get := func(path string) []byte {
		t.Helper()
		res, body := checked(path)
		if res.StatusCode != 200 {
			t.Fatalf("GET %s = %d %s", path, res.StatusCode, body)
		}
		return body
	}
	type info struct {
		Version      snapshot.Version `json:"version"`
		Format       *int             `json:"format"`
		Shape        string           `json:"shape"`
		ChainLength  int              `json:"chain_length"`
		BytesWritten *int64           `json:"bytes_written"`
		Parent       snapshot.Version `json:"parent"`
		ExpiresAt    time.Time        `json:"expires_at"`
	}
	var list struct{ Versions []info }
	if err := json.Unmarshal(get("/v1/versions"), &list); err != nil {
		t.Fatal(err)
	}
	want := map[snapshot.Version]struct {
		format int
		shape  string
		chain  int
		bytes  int64
		parent snapshot.Version
	}{
		ver:      {2, api.ShapeMixed, 3, 1536, verDelta},
		verDelta: {2, api.ShapeDelta, 2, 900, verFull},
		verFull:  {0, api.ShapeFull, 1, 70 << 10, ""},
		verBase:  {2, api.ShapeBase, 1, 66 << 10, ""},
	}
	if len(list.Versions) != len(want) {
		t.Fatalf("listed %d versions; want %d", len(list.Versions), len(want))
	}
	check := func(where string, got info) {
		t.Helper()
		w := want[got.Version]
		if got.Format == nil || *got.Format != w.format || got.Shape != w.shape || got.ChainLength != w.chain ||
			got.BytesWritten == nil || *got.BytesWritten != w.bytes || got.Parent != w.parent {
			t.Errorf("%s: %s = format %v, shape %q, chain %d, bytes written %v, parent %q; want %+v",
				where, got.Version, got.Format, got.Shape, got.ChainLength, got.BytesWritten, got.Parent, w)
		}
	}
	for _, v := range list.Versions {
		check("/v1/versions", v)
	}
	var cur info
	if err := json.Unmarshal(get("/v1/versions/current"), &cur); err != nil {
		t.Fatal(err)
	}
	check("/v1/versions/current", cur)
	// ver's TTL counts from its oldest layer, the base 41h10m old, not from when ver began.
	if wantExp := now.Add(-41*time.Hour - 10*time.Minute + 72*time.Hour); !cur.ExpiresAt.Equal(wantExp) {
		t.Errorf("current expires at %s; want %s (its base's data time plus the TTL)", cur.ExpiresAt, wantExp)
	}
	for v := range want {
		var one info
		if err := json.Unmarshal(get("/v1/versions/"+string(v)), &one); err != nil {
			t.Fatal(err)
		}
		check("/v1/versions/{version}", one)
	}
}

// TestStatusPageShowsChains: the status page shows, per collection of the current
// version, its chain and what the publish wrote, the bytes the publish wrote, and each
// version's shape.
func TestStatusPageShowsChains(t *testing.T) {
	now := time.Now()
	s := newServer(t, &fakeReader{manifests: layeredManifests(now)}, func(c *api.Config) { c.Dataset = "demo" })
	res, body := do(t, s, http.MethodGet, "/", "")
	if res.StatusCode != 200 {
		t.Fatalf("status page = %d", res.StatusCode)
	}
	page := string(body)
	for _, want := range []string{
		"delta → 3 layers → base 41h old",    // orders
		"base → 1 layer, 5m old",             // users, rebased by this version
		"unchanged → 1 layer → base 41h old", // tags, carried over as it was
		"delta: 3 inserted, 2 changed, 1 deleted; 5 rendered (row-version)",
		"no layer (unchanged: same fingerprint)",
		"mixed · chain 3 · publish wrote 1.5 KiB · parent", // the current version's card
		"<td>mixed · chain 3</td><td>1.5 KiB</td>",         // the versions table
		"<td>full</td><td>70.0 KiB</td>",
		string(verBase) + " base: 1000 docs, 64.0 KiB, written 41h ago", // the chain's layers, in its title
		string(verDelta) + " delta: 10 docs, 2 tombstones, 700 B, written 2h ago",
		string(ver) + " delta: 5 docs, 1 tombstone, 1.2 KiB, written 5m ago",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("status page lacks %q:\n%s", want, page)
		}
	}
}

// The status page shows freshness: versions published in the last minute and the
// current version's commit-to-publish delay.
func TestStatusPageShowsFreshness(t *testing.T) {
	now := time.Now()
	ms := layeredManifests(now)
	for i := range ms {
		if ms[i].Version == ver {
			ms[i].PublishedAt = now.Add(-10 * time.Second)
			ms[i].ChangeSeen = now.Add(-10*time.Second - 1400*time.Millisecond)
		}
	}
	s := newServer(t, &fakeReader{manifests: ms}, func(c *api.Config) { c.Dataset = "demo" })
	_, body := do(t, s, http.MethodGet, "/", "")
	for _, want := range []string{"1 version published in the last minute", "published 1.4s after its change was seen"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("status page lacks %q", want)
		}
	}
}

// A version the syncer found unchanged is shown neutral on the status page (grey on
// the timeline, its own class in the table), never in the failed red.
func TestStatusPageShowsUnchangedNeutral(t *testing.T) {
	now := time.Now()
	ms := append(layeredManifests(now), snapshot.Manifest{Version: "7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1700000000001",
		State: snapshot.StateUnchanged, Reason: "identical to " + string(ver), StartedAt: now.Add(-time.Minute), Writer: "w"})
	s := newServer(t, &fakeReader{manifests: ms}, func(c *api.Config) { c.Dataset = "demo" })
	_, body := do(t, s, http.MethodGet, "/", "")
	page := string(body)
	if !strings.Contains(page, `class="state-unchanged">unchanged`) {
		t.Errorf("status page lacks the unchanged version in its table:\n%.2000s", page)
	}
	for _, line := range strings.Split(page, "\n") {
		if strings.Contains(line, "1700000000001") && strings.Contains(line, "#cf222e") {
			t.Errorf("the unchanged version is drawn in the failed red: %s", line)
		}
	}
}

// The status page reads a bounded number of the newest versions however many there
// are: with 400 published within the last minute it says 300+, and it still shows the
// current version, older than all of them (a rollback's target).
func TestStatusPageAfterManyVersions(t *testing.T) {
	now := time.Now()
	gen := snapshot.NewVersionGen(uuid.New(), func() time.Time { return now.Add(-50 * time.Second) })
	var ms []snapshot.Manifest
	for range 400 {
		m := snapshot.Manifest{Version: gen.Next(), State: snapshot.StateRetired, Writer: "w",
			StartedAt: now.Add(-40 * time.Second), PublishedAt: now.Add(-30 * time.Second)}
		ms = append([]snapshot.Manifest{m}, ms...) // newest first
	}
	f := &fakeReader{manifests: append(ms, layeredManifests(now)...)}
	s := newServer(t, f, func(c *api.Config) { c.Dataset = "demo" })
	_, body := do(t, s, http.MethodGet, "/", "")
	for _, want := range []string{"300+ versions published in the last minute", "<td><code>orders</code></td>", string(ver)[:8]} {
		if !strings.Contains(string(body), want) {
			t.Errorf("status page lacks %q", want)
		}
	}
	if f.versionsAsked > 300 {
		t.Errorf("status page asked for %d versions; want at most 300", f.versionsAsked)
	}
}

// GET /v1/versions pages the versions newest first, each version once, and each page
// asks storage for its own versions plus one, however many there are.
func TestVersionsPagesReadTheirOwnVersions(t *testing.T) {
	gen := snapshot.NewVersionGen(uuid.New(), nil)
	var ms []snapshot.Manifest
	for range 10 {
		ms = append([]snapshot.Manifest{{Version: gen.Next(), State: snapshot.StateRetired, Writer: "w"}}, ms...)
	}
	f := &fakeReader{manifests: ms}
	s := newServer(t, f, nil)
	var got []snapshot.Version
	target := "/v1/versions?limit=3"
	for pages := 1; ; pages++ {
		asked := f.versionsAsked
		res, body := do(t, s, http.MethodGet, target, "")
		var page struct {
			Versions []struct {
				Version snapshot.Version `json:"version"`
			} `json:"versions"`
			Next string `json:"next_page_token"`
		}
		if res.StatusCode != http.StatusOK || json.Unmarshal(body, &page) != nil {
			t.Fatalf("GET %s = %d %s", target, res.StatusCode, body)
		}
		if n := f.versionsAsked - asked; n != 4 {
			t.Errorf("page %d asked storage for %d versions; want 4 (its 3 and one more)", pages, n)
		}
		for _, v := range page.Versions {
			got = append(got, v.Version)
		}
		if page.Next == "" || pages > 4 {
			break
		}
		target = "/v1/versions?limit=3&page_token=" + page.Next
	}
	var want []snapshot.Version
	for _, m := range ms {
		want = append(want, m.Version)
	}
	if !slices.Equal(got, want) {
		t.Errorf("pages listed %v; want %v", got, want)
	}
}

// basesReader is a reader that keeps records of bases beside the stream.
type basesReader struct {
	*fakeReader
	recs []snapshot.BaseStatus
}

func (b basesReader) ListBases(context.Context) ([]snapshot.BaseStatus, error) { return b.recs, nil }

// The status page shows each base built beside the stream that is in hand or ended
// within the hour: how far it is, who builds it and why; one that failed says why.
func TestStatusPageShowsBasesBesideTheStream(t *testing.T) {
	now := time.Now()
	r := basesReader{fakeReader: &fakeReader{manifests: layeredManifests(now)}, recs: []snapshot.BaseStatus{
		{Collection: "orders", From: ver, Why: "the deltas hold 600 rows against the base's 1000 (rebase_ratio 0.5)", State: "building",
			Rows: 500, Expected: 1000, Bytes: 2048, Started: now.Add(-20 * time.Second), Updated: now, Writer: "syncer-a"},
		{Collection: "tags", From: ver, Why: "keep-alive", State: "failed", Err: "storage unreachable", RetryAt: now.Add(time.Minute),
			Started: now.Add(-time.Minute), Updated: now},
		{Collection: "users", From: ver, Why: "old", State: "taken", Started: now.Add(-3 * time.Hour), Updated: now.Add(-2 * time.Hour)},
	}}
	for i, m := range r.manifests {
		if m.Version == ver {
			c := m.Collections["orders"]
			c.Held = &snapshot.Held{Why: "the table's column or type definitions changed", Since: now.Add(-2 * time.Minute)}
			r.manifests[i].Collections["orders"] = c
		}
	}
	s := newServer(t, r, func(c *api.Config) { c.Dataset = "demo" })
	_, body := do(t, s, http.MethodGet, "/", "")
	page := string(body)
	for _, want := range []string{
		"held for 2m at its state before: the table&#39;s column or type definitions changed",
		"Bases beside the stream",
		"base of orders: building, 500 of 1000 rows (50%), 2.0 KiB, started ", // the times: TestBaseLine
		"left, by syncer-a; why: the deltas hold 600 rows",
		"base of tags: failed, 0 of 0 rows, 0 B, started ",
		"(storage unreachable; tried again at",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("status page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "base of users") {
		t.Errorf("status page shows a base taken two hours ago")
	}
}
