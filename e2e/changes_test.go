package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/snapshot"
)

// changesPage is a page of GET /v1/versions/{version}/changes/{collection}.
type changesPage struct {
	Version    string        `json:"version"`
	Parent     string        `json:"parent"`
	Collection string        `json:"collection"`
	Kind       string        `json:"kind"`
	Changes    []changeEntry `json:"changes"`
	Next       string        `json:"next"`
}

type changeEntry struct {
	ID      string `json:"id"`
	Deleted bool   `json:"deleted"`
}

func changesPath(v, coll string) string {
	return "/v1/versions/" + url.PathEscape(v) + "/changes/" + url.PathEscape(coll)
}

// readChanges pages through a version's changes to a collection, limit at a time (0:
// the default), and returns them with the first page's kind and parent, or a
// mismatch saying what was wrong with the pages.
func readChanges(tb testing.TB, e *env, v, coll string, limit int) (changesPage, []genMismatch) {
	tb.Helper()
	var all changesPage
	after := ""
	for pages := 0; ; pages++ {
		path := changesPath(v, coll)
		q := url.Values{}
		if limit > 0 {
			q.Set("limit", fmt.Sprint(limit))
		}
		if after != "" {
			q.Set("after", after)
		}
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		req, err := http.NewRequest(http.MethodGet, e.Base+path, nil)
		if err != nil {
			tb.Fatal(err)
		}
		resp, body := callAPI(tb, req)
		var p changesPage
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &p) != nil {
			return all, []genMismatch{{coll: coll, how: fmt.Sprintf("GET %s = %d", path, resp.StatusCode), detail: string(body)}}
		}
		if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=31536000, immutable" || resp.Header.Get("ETag") == "" {
			return all, []genMismatch{{coll: coll, how: fmt.Sprintf("GET %s: Cache-Control %q, ETag %q; want immutable with an ETag", path, cc, resp.Header.Get("ETag"))}}
		}
		if pages == 0 {
			all = p
			all.Changes = nil
		} else if p.Kind != all.Kind || p.Parent != all.Parent || p.Version != v || p.Collection != coll {
			return all, []genMismatch{{coll: coll, how: fmt.Sprintf("page %d says %s %s of %s, the first %s %s", pages, p.Kind, p.Parent, p.Version, all.Kind, all.Parent)}}
		}
		if limit > 0 && len(p.Changes) > limit {
			return all, []genMismatch{{coll: coll, how: fmt.Sprintf("a page of %d changes at limit %d", len(p.Changes), limit)}}
		}
		all.Changes = append(all.Changes, p.Changes...)
		if p.Next == "" {
			return all, nil
		}
		if len(p.Changes) == 0 || pages > 100_000 {
			return all, []genMismatch{{coll: coll, how: fmt.Sprintf("page %d has a next but no changes", pages)}}
		}
		after = p.Next
	}
}

// readAll returns every document of a collection at version v as the API lists it:
// id → its bytes; ok is false when the version does not hold the collection.
func readAll(tb testing.TB, e *env, v, coll string) (docs map[string]string, ok bool, ms []genMismatch) {
	tb.Helper()
	docs = map[string]string{}
	token := ""
	for range 100_000 {
		path := "/v1/data/" + url.PathEscape(coll) + "?limit=1000&version=" + url.QueryEscape(v)
		if token != "" {
			path += "&page_token=" + url.QueryEscape(token)
		}
		r := e.get(tb, path)
		if r.status == http.StatusNotFound {
			return nil, false, nil
		}
		var body struct {
			Documents []struct {
				ID       string          `json:"id"`
				Document json.RawMessage `json:"document"`
			} `json:"documents"`
			NextPageToken string `json:"next_page_token"`
		}
		if r.status != http.StatusOK || json.Unmarshal(r.body, &body) != nil {
			return nil, false, []genMismatch{{coll: coll, how: fmt.Sprintf("GET %s = %d", path, r.status), detail: string(r.body)}}
		}
		for _, d := range body.Documents {
			docs[d.ID] = string(d.Document)
		}
		if token = body.NextPageToken; token == "" {
			break
		}
	}
	return docs, true, nil
}

// diffVersions returns what changed from parent to v: every id whose document
// differs or is new, and every id gone, in id order.
func diffVersions(parent, v map[string]string) []changeEntry {
	var out []changeEntry
	for id, doc := range v {
		if old, ok := parent[id]; !ok || old != doc {
			out = append(out, changeEntry{ID: id})
		}
	}
	for id := range parent {
		if _, ok := v[id]; !ok {
			out = append(out, changeEntry{ID: id, Deleted: true})
		}
	}
	slices.SortFunc(out, func(a, b changeEntry) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// checkChanges checks every collection of version v: its changes, paged limit at a
// time (0: the default), are the diff of its parent and it, both read through the
// API, id by id; a version that wrote a collection whole lists none. It returns the
// kind of each collection's changes.
func checkChanges(tb testing.TB, e *env, v string, limit int) (map[string]string, []genMismatch) {
	tb.Helper()
	var cols struct {
		Collections []struct {
			Name string `json:"name"`
		} `json:"collections"`
	}
	if r := e.get(tb, "/v1/collections?version="+url.QueryEscape(v)); r.status != http.StatusOK || json.Unmarshal(r.body, &cols) != nil {
		return nil, []genMismatch{{how: fmt.Sprintf("the collections of %s = %d", v, r.status), detail: string(r.body)}}
	}
	kinds := map[string]string{}
	var ms []genMismatch
	for _, c := range cols.Collections {
		got, bad := readChanges(tb, e, v, c.Name, limit)
		if ms = append(ms, bad...); len(bad) > 0 {
			continue
		}
		kinds[c.Name] = got.Kind
		mismatch := func(how string, detail ...string) {
			ms = append(ms, genMismatch{coll: c.Name, how: fmt.Sprintf("version %s (%s against %s): %s", v, got.Kind, got.Parent, how),
				detail: strings.Join(detail, "\n")})
		}
		if got.Kind != "delta" && got.Kind != "unchanged" {
			if len(got.Changes) > 0 {
				mismatch(fmt.Sprintf("%d changes listed; want none", len(got.Changes)))
			}
			continue
		}
		if got.Parent == "" {
			mismatch("no parent")
			continue
		}
		now, _, bad := readAll(tb, e, v, c.Name)
		was, inParent, bad2 := readAll(tb, e, got.Parent, c.Name)
		if ms = append(append(ms, bad...), bad2...); len(bad)+len(bad2) > 0 {
			continue
		}
		if !inParent {
			mismatch("the parent does not hold the collection")
			continue
		}
		want := diffVersions(was, now)
		if got.Kind == "unchanged" && len(want) > 0 {
			mismatch(fmt.Sprintf("unchanged, yet %d ids differ from the parent", len(want)))
			continue
		}
		if !slices.Equal(want, got.Changes) {
			mismatch("the changes are not the diff of the parent and the version",
				"want "+changesString(want), "got  "+changesString(got.Changes))
		}
	}
	return kinds, ms
}

func changesString(cs []changeEntry) string {
	var b strings.Builder
	for i, c := range cs {
		if i == 40 {
			fmt.Fprintf(&b, " … %d more", len(cs)-i)
			break
		}
		b.WriteString(" " + genShort(fmt.Sprintf("%q", c.ID), 60))
		if c.Deleted {
			b.WriteString("(deleted)")
		}
	}
	return b.String()
}

// changesConfig is config made incremental with short chains that merge, and never
// rebased by size (rebase_ratio): a chain at three layers gets a merged delta.
func changesConfig(rebaseRatio float64) string {
	return strings.Replace(config, "ttl: 1h\n",
		fmt.Sprintf("ttl: 1h\nversions: incremental\nmax_layers: 3\nrebase_ratio: %g\nvalidation: {max_shrink: 0, allow_empty: true}\n", rebaseRatio), 1)
}

// changesIDs are the ids a changes history picks from: the awkward ones and more.
var changesIDs = append(slices.Clone(awkwardIDs), "k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9",
	"<&>", "a\u00a0b", "k10", "k11", "k12", "k13", "k14", "k15")

// changesStep returns random statements: inserts, updates that change a document or
// leave it as it was, deletes, and ids deleted and inserted again as they were.
func changesStep(rnd *rand.Rand) []string {
	var stmts []string
	id := func() string { return stack.Quote(changesIDs[rnd.IntN(len(changesIDs))]) }
	for range 1 + rnd.IntN(6) {
		switch rnd.IntN(8) {
		case 0, 1:
			stmts = append(stmts, fmt.Sprintf(`INSERT INTO things (id, gen) VALUES (%s, %d) ON CONFLICT (id) DO UPDATE SET gen = EXCLUDED.gen`, id(), rnd.IntN(4)))
		case 2:
			stmts = append(stmts, fmt.Sprintf(`UPDATE things SET note = 'n%d' WHERE id = %s`, rnd.IntN(3), id()))
		case 3:
			stmts = append(stmts, fmt.Sprintf(`UPDATE things SET gen = gen WHERE id = %s`, id())) // a new row version, the same document
		case 4:
			stmts = append(stmts, fmt.Sprintf(`DELETE FROM things WHERE id = %s`, id()))
		case 5:
			k := stack.Quote(fmt.Sprintf("f%d", rnd.IntN(6)))
			stmts = append(stmts, fmt.Sprintf(`DELETE FROM flags WHERE key = %s`, k),
				fmt.Sprintf(`INSERT INTO flags VALUES (%s, 'v%d', %t)`, k, rnd.IntN(2), rnd.IntN(3) > 0))
		case 6:
			stmts = append(stmts, fmt.Sprintf(`UPDATE flags SET enabled = NOT enabled WHERE key = %s`, stack.Quote(fmt.Sprintf("f%d", rnd.IntN(6)))))
		case 7:
			// Deleted and inserted again as it was: the same document.
			stmts = append(stmts, fmt.Sprintf(`WITH gone AS (DELETE FROM things WHERE id = %s RETURNING *) INSERT INTO things SELECT * FROM gone`, id()))
		}
	}
	return stmts
}

// TestChangesAreTheDiff: random histories of inserts, updates, deletes, a rollback
// and a new base, with chains short enough to merge; for every version published,
// its changes to every collection, paged by a few ids and all at once, are exactly
// the ids whose document differs between its parent and it, read through the API,
// and tombstones for the ids its parent had and it has not.
func TestChangesAreTheDiff(t *testing.T) {
	t.Parallel()
	for _, cached := range []bool{false, true} {
		t.Run(map[bool]string{false: "scan", true: "run-cache"}[cached], func(t *testing.T) {
			t.Parallel()
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rnd := rand.New(rand.NewPCG(seed, 1))
			e := start(t)
			writeConfig(t, e, changesConfig(100))
			st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
			if cached {
				e.Runs = layer.NewRunCache(st, layer.DefaultRunCacheBytes)
			}
			var versions []string
			sync := func(what string) {
				t.Helper()
				out, err := e.sync(t)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if !strings.HasPrefix(out, "unchanged") {
					versions = append(versions, stack.PublishedVersion(t, out))
				}
			}
			sync("first sync")
			for step := 1; step <= 14; step++ {
				switch step {
				case 6:
					// Back to the previous version: the next delta is against it.
					for _, args := range [][]string{{"rollback", "--previous", "--reason", "r"}, {"unpin", "--reason", "r"}} {
						if out, err := e.syncerCmd(t, args...); err != nil {
							t.Fatalf("%v: %v %s", args, err, out)
						}
					}
				case 10:
					// A new base: any delta is too large against the base.
					writeConfig(t, e, changesConfig(0.0001))
					testenv.Exec(t, e.DSN, changesStep(rnd)...)
					// A change for certain: the random step may leave every document as it was.
					testenv.Exec(t, e.DSN, `INSERT INTO things (id, gen) VALUES ('rebased', 1) ON CONFLICT (id) DO UPDATE SET gen = things.gen + 1`)
					sync("a rebase")
					writeConfig(t, e, changesConfig(100))
					continue
				}
				testenv.Exec(t, e.DSN, changesStep(rnd)...)
				sync(fmt.Sprintf("step %d", step))
			}

			ctx := context.Background()
			seen := map[string]int{}
			var merged, rolledOver int
			prev := ""
			for i, v := range versions {
				limit := 1 + rnd.IntN(3)
				kinds, ms := checkChanges(t, e, v, limit)
				for _, m := range ms {
					t.Errorf("paged by %d: %s", limit, m)
				}
				if _, ms := checkChanges(t, e, v, 0); len(ms) > 0 {
					t.Errorf("at the default limit: %s", ms[0])
				}
				m, err := st.ReadManifest(ctx, "e2e", snapshot.Version(v))
				if err != nil {
					t.Fatal(err)
				}
				for name, c := range m.Collections {
					if i > 0 {
						seen[kinds[name]]++
					}
					if c.Own != nil && c.Own.Copied > 0 && kinds[name] == "delta" {
						merged++
					}
				}
				if m.Parent != "" && string(m.Parent) != prev {
					rolledOver++
				}
				prev = v
			}
			// The history must reach what it is about, or it proves nothing.
			if seen["delta"] == 0 || seen["base"] == 0 || merged == 0 || rolledOver == 0 {
				t.Errorf("after the first version the history reached %v kinds, %d merged deltas with copies, %d versions not over the one before; want deltas, a base, merges and a rollback",
					seen, merged, rolledOver)
			}
		})
	}
}

// TestChangesRefusals: an unknown version or collection answers 404 naming it;
// malformed versions, collections, limits and cursors 400; a version that expired or
// never completed 410; a page revalidates to 304 with its ETag.
func TestChangesRefusals(t *testing.T) {
	// Not parallel: its TTL of seconds leaves no room for a loaded machine.
	e := start(t)
	out, err := e.sync(t)
	if err != nil {
		t.Fatal(err)
	}
	v1 := stack.PublishedVersion(t, out)
	testenv.Exec(t, e.DSN, `UPDATE things SET gen = 7 WHERE id = 'plain'`, `DELETE FROM things WHERE id = 'a/b'`)
	out, err = e.sync(t)
	if err != nil {
		t.Fatal(err)
	}
	v2 := stack.PublishedVersion(t, out)

	first, ms := readChanges(t, e, v2, "things", 1)
	if len(ms) > 0 || first.Kind != "delta" || first.Parent != v1 ||
		!slices.Equal(first.Changes, []changeEntry{{ID: "a/b", Deleted: true}, {ID: "plain"}}) {
		t.Errorf("v2's changes = %+v %v; want plain changed and a/b deleted, against v1", first, ms)
	}
	req, _ := http.NewRequest(http.MethodGet, e.Base+changesPath(v2, "things"), nil)
	resp, _ := callAPI(t, req)
	req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
	if again, _ := callAPI(t, req); again.StatusCode != http.StatusNotModified {
		t.Errorf("a page with its ETag = %d; want 304", again.StatusCode)
	}

	never := "7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1700000000000"
	failed := snapshot.Manifest{Dataset: "e2e", Version: snapshot.NewVersionGen([16]byte{9}, nil).Next(), State: snapshot.StateWriting, StartedAt: time.Now()}
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	ctx := context.Background()
	if err := st.CreateManifest(ctx, failed); err != nil {
		t.Fatal(err)
	}
	failed.State = snapshot.StateFailed
	if err := st.UpdateManifest(ctx, failed, snapshot.StateWriting); err != nil {
		t.Fatal(err)
	}
	// A cursor as the server makes them: base64url of the version, collection and id.
	cursor := func(coll string) string {
		b, _ := json.Marshal(map[string]string{"v": v2, "c": coll, "a": "a/b"})
		return base64.RawURLEncoding.EncodeToString(b)
	}
	for _, tc := range []struct {
		path  string
		want  int
		names string
	}{
		{changesPath(never, "things"), 404, never},
		{changesPath(v2, "nope"), 404, `\"nope\"`},
		{changesPath(v2, "a/b"), 404, `\"a/b\"`},
		{"/v1/versions/" + v2 + "/changes/%00", 400, ""},
		{"/v1/versions/" + v2 + "/changes/%ff", 400, ""},
		{"/v1/versions/not-a-version/changes/things", 400, ""},
		{"/v1/versions/current/changes/things", 400, ""},
		{changesPath(v2, "things") + "?limit=0", 400, ""},
		{changesPath(v2, "things") + "?limit=10001", 400, ""},
		{changesPath(v2, "things") + "?after=%%%", 400, ""},
		{changesPath(v2, "things") + "?after=bm9wZQ", 400, ""},
		{changesPath(v2, "things") + "?after=" + cursor("flags"), 400, ""},
		{changesPath(v2, "things") + "?after=" + cursor("things"), 200, ""},
		{changesPath(string(failed.Version), "things"), 410, string(failed.Version)},
	} {
		r := e.get(t, tc.path)
		if r.status != tc.want || !strings.Contains(string(r.body), tc.names) {
			t.Errorf("GET %s = %d %s; want %d naming %s", tc.path, r.status, r.body, tc.want, tc.names)
		}
	}
	// A version written with a 2s TTL expires, and then answers 410.
	writeConfig(t, e, strings.Replace(config, "ttl: 1h", "ttl: 2s", 1))
	testenv.Exec(t, e.DSN, `UPDATE things SET gen = 8 WHERE id = 'plain'`)
	if out, err = e.sync(t); err != nil {
		t.Fatal(err)
	}
	v3 := stack.PublishedVersion(t, out)
	e.awaitGone(t, changesPath(v3, "things"), "the changes of an expiring version")
}

// TestChangesOfAMerge: a merged delta that replaced the chain's two newest deltas
// over an older one holding tombstones lists exactly what its version changed: not
// the documents it copied from the deltas it merged, nor the older delta's
// tombstones it kept, but the row it changed and the base's row it deleted.
func TestChangesOfAMerge(t *testing.T) {
	t.Parallel()
	e := start(t)
	writeConfig(t, e, strings.Replace(changesConfig(100), "max_layers: 3", "max_layers: 4", 1))
	var versions []string
	for _, step := range [][]string{
		nil, // the base
		{`DELETE FROM things WHERE id IN ('a#b', 'with space', '$dollar', 'semi;colon', '~tilde')`}, // an older delta of tombstones
		{`UPDATE things SET gen = 1 WHERE id = 'plain'`},
		{`UPDATE things SET gen = 1 WHERE id = 'a/b'`},
		{`UPDATE things SET gen = 1 WHERE id = '100%'`, `DELETE FROM things WHERE id = '..'`}, // merges the two before
	} {
		testenv.Exec(t, e.DSN, step...)
		out, err := e.sync(t)
		if err != nil {
			t.Fatal(err)
		}
		versions = append(versions, stack.PublishedVersion(t, out))
	}
	v := versions[len(versions)-1]
	m, err := testenv.Store(t, testenv.StoreConfig(e.Bigtable)).ReadManifest(context.Background(), "e2e", snapshot.Version(v))
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Collections["things"]; len(c.Layers) != 3 || c.Layers[0].Merged != 2 || c.Own == nil || c.Own.Copied < 5 {
		t.Fatalf("the last version's layers of things = %+v, own %+v; want a merge of two deltas over the tombstones' delta, copying them", c.Layers, c.Own)
	}
	for _, limit := range []int{1, 2, 0} {
		got, ms := readChanges(t, e, v, "things", limit)
		if want := []changeEntry{{ID: "..", Deleted: true}, {ID: "100%"}}; len(ms) > 0 || got.Kind != "delta" || !slices.Equal(got.Changes, want) {
			t.Errorf("paged by %d: the merge's changes = %+v %v; want %v", limit, got, ms, want)
		}
		if _, ms := checkChanges(t, e, v, limit); len(ms) > 0 {
			t.Errorf("paged by %d: %s", limit, ms[0])
		}
	}
}
