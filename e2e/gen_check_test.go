package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/internal/cli"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// genState is what Postgres says a collection holds: ids in byte order, and each
// id's document as to_jsonb text.
type genState struct {
	ids     []string
	docs    map[string]string
	invalid []string // keys no id can be: NULL, empty, too long, duplicated
}

func (r *genRun) oracle(gc genColl) (genState, error) {
	rows, err := r.conn.Query(context.Background(), gc.oracle)
	if err != nil {
		return genState{}, fmt.Errorf("oracle query of %s: %w\n%s", gc.Name, err, gc.oracle)
	}
	defer rows.Close()
	st := genState{docs: map[string]string{}}
	for rows.Next() {
		var id *string
		var doc string
		if err := rows.Scan(&id, &doc); err != nil {
			return genState{}, err
		}
		switch {
		case id == nil:
			st.invalid = append(st.invalid, "a NULL key")
			continue
		case *id == "":
			st.invalid = append(st.invalid, "an empty key")
		case len(*id) > pgsource.MaxIDBytes:
			st.invalid = append(st.invalid, fmt.Sprintf("a key of %d bytes", len(*id)))
		}
		if _, dup := st.docs[*id]; dup {
			st.invalid = append(st.invalid, fmt.Sprintf("the duplicate key %s", genShort(strconv.Quote(*id), 80)))
			continue
		}
		st.ids = append(st.ids, *id)
		st.docs[*id] = doc
	}
	if err := rows.Err(); err != nil {
		return genState{}, fmt.Errorf("oracle query of %s: %w\n%s", gc.Name, err, gc.oracle)
	}
	sort.Strings(st.ids) // Go compares strings bytewise: the API's documented id order
	return st, nil
}

// states asks Postgres what every collection holds, and lists the collections that
// have a key no id can be (then the sync must fail).
func (r *genRun) states() (map[string]genState, []string) {
	out := map[string]genState{}
	var invalid []string
	for _, gc := range r.colls {
		st, err := r.oracle(gc)
		if err != nil {
			r.fatalf("%v", err)
		}
		out[gc.Name] = st
		if len(st.invalid) > 0 {
			invalid = append(invalid, fmt.Sprintf("%s has %s", gc.Name, strings.Join(st.invalid, ", ")))
		}
	}
	return out, invalid
}

// genMismatch is one disagreement between the API and Postgres.
type genMismatch struct {
	coll, how string
	ids       []string // the ids involved (one, or two out of order)
	fields    []string // for a document, the top-level fields that differ
	detail    string
}

func (m genMismatch) String() string {
	ids := make([]string, len(m.ids))
	for i, id := range m.ids {
		ids[i] = genShort(strconv.Quote(id), 120)
	}
	s := fmt.Sprintf("collection %s, id %s: %s", m.coll, strings.Join(ids, " and "), m.how)
	if len(m.fields) > 0 {
		s += fmt.Sprintf(" (fields %q)", m.fields)
	}
	if m.detail != "" {
		s += "\n    " + strings.ReplaceAll(m.detail, "\n", "\n    ")
	}
	return s
}

func genShort(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("…(%d bytes)", len(s))
}

// check compares every collection with Postgres after a sync published version (or
// left it current).
func (r *genRun) check(version string, k int, states map[string]genState) []genMismatch {
	rnd := rand.New(rand.NewPCG(r.seed, uint64(k)))
	r.e.awaitVersion(r.t, "/v1/collections", version)
	var ms []genMismatch
	counts := r.counts(version, &ms)
	r.good = map[string]genGood{}
	for _, gc := range r.colls {
		st := states[gc.Name]
		// Gone: seen at an earlier sync and not in this one.
		seen := r.seen[gc.Name]
		if seen == nil {
			seen = map[string]bool{}
			r.seen[gc.Name] = seen
		}
		gone := map[string]bool{}
		for id := range seen {
			if _, live := st.docs[id]; !live {
				gone[id] = true
			}
		}
		for _, id := range st.ids {
			seen[id] = true
		}
		r.good[gc.Name] = genGood{st, gone}
		ms = append(ms, r.checkCollection(gc.Name, version, st, gone, counts, rnd)...)
	}
	return ms
}

// genGood is what a collection held at the last published version.
type genGood struct {
	st   genState
	gone map[string]bool
}

// checkUnchanged checks that the API still serves the last published version, as it
// was, after a sync that had to fail.
func (r *genRun) checkUnchanged(version string, k int) []genMismatch {
	rnd := rand.New(rand.NewPCG(r.seed, uint64(k)))
	var ms []genMismatch
	counts := r.counts(version, &ms)
	for _, gc := range r.colls {
		g := r.good[gc.Name]
		ms = append(ms, r.checkCollection(gc.Name, version, g.st, g.gone, counts, rnd)...)
	}
	return ms
}

func (r *genRun) checkCollection(name, version string, st genState, gone map[string]bool, counts map[string]int64, rnd *rand.Rand) []genMismatch {
	var ms []genMismatch
	if n, ok := counts[name]; !ok || n != int64(len(st.ids)) {
		ms = append(ms, genMismatch{coll: name, how: fmt.Sprintf("/v1/collections counts %d (listed: %t); Postgres has %d rows", n, ok, len(st.ids))})
	}
	ms = append(ms, genCheckCollection(r.t, r.e, name, version, st, gone, rnd)...)
	r.stats.rowsChecked += len(st.ids)
	r.stats.gone += len(gone)
	return ms
}

func (r *genRun) counts(version string, ms *[]genMismatch) map[string]int64 {
	resp := r.e.get(r.t, "/v1/collections")
	var body struct {
		Version     string `json:"version"`
		Collections []struct {
			Name  string `json:"name"`
			Count int64  `json:"count"`
		} `json:"collections"`
	}
	out := map[string]int64{}
	if resp.status != http.StatusOK || resp.version != version || json.Unmarshal(resp.body, &body) != nil || body.Version != version {
		*ms = append(*ms, genMismatch{coll: "*", how: fmt.Sprintf("/v1/collections = %d from %q: %s; want 200 from %s", resp.status, resp.version, genShort(string(resp.body), 300), version)})
		return out
	}
	for _, c := range body.Collections {
		out[c.Name] = c.Count
	}
	return out
}

// genCheckCollection checks one collection against st: every page of the list (in
// byte order, no extra id, each document equal), GET of every id, batchGet of every id
// with the gone ones and some never seen (missing exactly those), and 404 for every gone
// id; every response from version.
func genCheckCollection(tb testing.TB, e *env, coll, version string, st genState, gone map[string]bool, rnd *rand.Rand) []genMismatch {
	tb.Helper()
	var ms []genMismatch
	bad := func(how string, ids []string, detail string) {
		ms = append(ms, genMismatch{coll: coll, how: how, ids: ids, detail: detail})
	}
	docMismatch := func(how, id, got string) {
		fields, detail := genDiffDocs(st.docs[id], got)
		if len(fields) > 0 || detail != "" {
			ms = append(ms, genMismatch{coll: coll, how: how, ids: []string{id}, fields: fields, detail: detail})
		}
	}

	// The list, page by page.
	limit := 1 + rnd.IntN(7)
	var listed []string
	token := ""
	for page := 0; ; page++ {
		path := "/v1/data/" + url.PathEscape(coll) + "?limit=" + strconv.Itoa(limit)
		if token != "" {
			path += "&page_token=" + url.QueryEscape(token)
		}
		resp := e.get(tb, path)
		var body listPage
		if resp.status != http.StatusOK || resp.version != version || json.Unmarshal(resp.body, &body) != nil || body.Version != version {
			bad(fmt.Sprintf("list page %d = %d from %q; want 200 from %s", page, resp.status, resp.version, version), nil, genShort(string(resp.body), 500))
			break
		}
		for _, d := range body.Documents {
			if n := len(listed); n > 0 && listed[n-1] >= d.ID {
				bad("the list is not in id (byte) order", []string{listed[n-1], d.ID}, "")
			}
			listed = append(listed, d.ID)
			if _, ok := st.docs[d.ID]; !ok {
				bad("listed, but Postgres has no such row", []string{d.ID}, genShort(string(d.Document), 500))
				continue
			}
			docMismatch("list page "+strconv.Itoa(page), d.ID, string(d.Document))
		}
		if len(body.Documents) > limit {
			bad(fmt.Sprintf("list page %d has %d documents; the limit is %d", page, len(body.Documents), limit), nil, "")
		}
		if body.NextPageToken == "" {
			break
		}
		if page > len(st.ids)+2 {
			bad(fmt.Sprintf("the list has more than %d pages of %d for %d rows", page, limit, len(st.ids)), nil, "")
			break
		}
		token = body.NextPageToken
	}
	listedSet := map[string]bool{}
	for _, id := range listed {
		listedSet[id] = true
	}
	for _, id := range st.ids {
		if !listedSet[id] {
			bad("a row Postgres has is not listed", []string{id}, "")
		}
	}

	// Every id by GET.
	for _, id := range st.ids {
		resp := e.get(tb, docPath(coll, id))
		if resp.status != http.StatusOK || resp.version != version {
			bad(fmt.Sprintf("GET = %d from %q; want 200 from %s", resp.status, resp.version, version), []string{id}, genShort(string(resp.body), 300))
			continue
		}
		docMismatch("GET", id, string(resp.body))
	}
	var goneIDs []string
	for id := range gone {
		goneIDs = append(goneIDs, id)
	}
	sort.Strings(goneIDs)
	for _, id := range goneIDs {
		if resp := e.get(tb, docPath(coll, id)); resp.status != http.StatusNotFound || resp.version != version {
			bad(fmt.Sprintf("gone since an earlier sync, but GET = %d from %q; want 404 from %s", resp.status, resp.version, version), []string{id}, genShort(string(resp.body), 300))
		}
	}

	// batchGet: every id, the gone ones and a few never seen, shuffled, in chunks.
	never := []string{"never seen " + strconv.Itoa(rnd.IntN(1e6)), "never/seen#%", "never 🎉"}
	ask := append(append(slices.Clone(st.ids), goneIDs...), never...)
	rnd.Shuffle(len(ask), func(i, j int) { ask[i], ask[j] = ask[j], ask[i] })
	wantMissing := map[string]bool{}
	for _, id := range append(goneIDs, never...) {
		if _, ok := st.docs[id]; !ok {
			wantMissing[id] = true
		}
	}
	for len(ask) > 0 {
		n := min(len(ask), 1+rnd.IntN(60))
		chunk := ask[:n]
		ask = ask[n:]
		resp := genPost(tb, e, "/v1/data/"+url.PathEscape(coll)+":batchGet", map[string]any{"ids": chunk})
		var body struct {
			Version   string                     `json:"version"`
			Documents map[string]json.RawMessage `json:"documents"`
			Missing   []string                   `json:"missing"`
		}
		if resp.status != http.StatusOK || resp.version != version || json.Unmarshal(resp.body, &body) != nil || body.Version != version {
			bad(fmt.Sprintf("batchGet of %d ids = %d from %q; want 200 from %s", len(chunk), resp.status, resp.version, version), nil, genShort(string(resp.body), 500))
			continue
		}
		missing := map[string]bool{}
		for _, id := range body.Missing {
			missing[id] = true
		}
		for _, id := range chunk {
			doc, found := body.Documents[id]
			switch {
			case wantMissing[id] && (found || !missing[id]):
				bad(fmt.Sprintf("batchGet: found %t, in missing %t; want only missing", found, missing[id]), []string{id}, "")
			case !wantMissing[id] && (!found || missing[id]):
				bad(fmt.Sprintf("batchGet: found %t, in missing %t; want found", found, missing[id]), []string{id}, "")
			case found:
				docMismatch("batchGet", id, string(doc))
			}
		}
		if len(body.Documents)+len(body.Missing) != len(chunk) {
			bad(fmt.Sprintf("batchGet of %d ids answered %d documents and %d missing", len(chunk), len(body.Documents), len(body.Missing)), nil, "")
		}
	}
	return ms
}

func genPost(tb testing.TB, e *env, path string, body any) response {
	tb.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		tb.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, e.Base+path, bytes.NewReader(b))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, rb := callAPI(tb, req) // checked against the OpenAPI document, like every exchange
	return response{resp.StatusCode, resp.Header.Get("Snapshot-Version"), resp.Header.Get("Content-Type"), rb}
}

// genDecode decodes one JSON value, numbers as json.Number; a repeated key keeps its
// last value, as jsonb does.
func genDecode(s string) (any, error) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the JSON value")
	}
	return v, nil
}

// genDiffDocs compares the document Postgres makes (want) with the one served (got) as
// JSON values: objects as maps, arrays in order, numbers as exact decimals. It returns
// the top-level fields that differ and a description of the first differences.
func genDiffDocs(want, got string) (fields []string, detail string) {
	w, err := genDecode(want)
	if err != nil {
		return nil, fmt.Sprintf("Postgres' document does not decode: %v: %s", err, genShort(want, 300))
	}
	g, err := genDecode(got)
	if err != nil {
		return nil, fmt.Sprintf("the served document is not JSON: %v: %s", err, genShort(got, 300))
	}
	var diffs []string
	wm, wok := w.(map[string]any)
	gm, gok := g.(map[string]any)
	if !wok || !gok {
		if genDiff(w, g, "$", &diffs) {
			return nil, ""
		}
		return nil, strings.Join(diffs, "\n")
	}
	keys := map[string]bool{}
	for k := range wm {
		keys[k] = true
	}
	for k := range gm {
		keys[k] = true
	}
	for k := range keys {
		wv, inW := wm[k]
		gv, inG := gm[k]
		switch {
		case !inW:
			diffs = append(diffs, fmt.Sprintf("%s: served, but not in Postgres' row", strconv.Quote(k)))
		case !inG:
			diffs = append(diffs, fmt.Sprintf("%s: in Postgres' row, but not served", strconv.Quote(k)))
		case !genDiff(wv, gv, strconv.Quote(k), &diffs):
		default:
			continue
		}
		fields = append(fields, k)
	}
	sort.Strings(fields)
	sort.Strings(diffs)
	if len(diffs) > 5 {
		diffs = append(diffs[:5], fmt.Sprintf("… and %d more", len(diffs)-5))
	}
	return fields, strings.Join(diffs, "\n")
}

// genDiff reports whether want and got are the same JSON value, appending where they
// are not to diffs.
func genDiff(want, got any, path string, diffs *[]string) bool {
	differ := func() bool {
		*diffs = append(*diffs, fmt.Sprintf("%s: Postgres %s, served %s", path, genShort(genJSON(want), 200), genShort(genJSON(got), 200)))
		return false
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return differ()
		}
		same := true
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return differ()
			}
			same = genDiff(wv, gv, path+"."+strconv.Quote(k), diffs) && same
		}
		return same
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return differ()
		}
		same := true
		for i := range w {
			same = genDiff(w[i], g[i], fmt.Sprintf("%s[%d]", path, i), diffs) && same
		}
		return same
	case json.Number:
		g, ok := got.(json.Number)
		if !ok {
			return differ()
		}
		wr, ok1 := new(big.Rat).SetString(string(w))
		gr, ok2 := new(big.Rat).SetString(string(g))
		if !ok1 || !ok2 || wr.Cmp(gr) != 0 {
			return differ()
		}
		return true
	default: // string, bool, nil
		if want != got {
			return differ()
		}
		return true
	}
}

func genJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// checkTwin compares the incremental deployment with its full-copy twin: per
// collection the same count and digest (so the same bytes under every id), and every
// list page (limit 1000) byte for byte.
func (r *genRun) checkTwin() []genMismatch {
	var ms []genMismatch
	ctx := context.Background()
	read := func(e *env) snapshot.Manifest {
		st := testenv.Store(r.t, testenv.StoreConfig(e.Bigtable))
		p, err := st.ReadPointer(ctx, "e2e")
		if err != nil {
			r.t.Fatal(err)
		}
		m, err := st.ReadManifest(ctx, "e2e", p.Version)
		if err != nil {
			r.t.Fatal(err)
		}
		return m
	}
	mi, mf := read(r.e), read(r.full)
	defer func() {
		if r.counted == nil {
			r.counted = map[snapshot.Version]bool{}
		}
		r.counted[mi.Version] = true
	}()
	if mi.Format != snapshot.FormatLayered || mf.Format != snapshot.FormatFull {
		ms = append(ms, genMismatch{coll: "*", how: fmt.Sprintf("manifest formats %d (incremental) and %d (full)", mi.Format, mf.Format)})
	}
	r.awaitVersion(r.full, string(mf.Version))
	r.awaitVersion(r.e, string(mi.Version))
	for _, gc := range r.colls {
		ci, cf := mi.Collections[gc.Name], mf.Collections[gc.Name]
		r.stats.longestChain = max(r.stats.longestChain, len(ci.Layers))
		if ci.Own != nil && !r.counted[mi.Version] {
			switch ci.Own.Kind {
			case snapshot.LayerDelta:
				r.stats.deltas++
				merged := len(ci.Layers) > 0 && ci.Layers[0].Merged > 0
				if merged {
					r.stats.merged++
				}
				if ci.Own.Mode == snapshot.ModeStream {
					r.stats.stream++
				}
				if ci.Own.Mode == snapshot.ModeChangedOnly {
					r.stats.changedOnly++
					if merged {
						r.stats.mergedChangedOnly++
					}
				}
			case snapshot.LayerBase:
				r.stats.bases++
			}
		}
		if ci.Rows != cf.Rows || ci.Digest != cf.Digest || ci.Bytes != cf.Bytes {
			ms = append(ms, genMismatch{coll: gc.Name, how: fmt.Sprintf("incremental holds %d rows, %d bytes, digest %s (chain of %d); full %d rows, %d bytes, digest %s",
				ci.Rows, ci.Bytes, ci.Digest, len(ci.Layers), cf.Rows, cf.Bytes, cf.Digest)})
		}
		pi, pf := r.listRaw(r.e, gc.Name), r.listRaw(r.full, gc.Name)
		if !slices.Equal(pi, pf) {
			ms = append(ms, genMismatch{coll: gc.Name, how: fmt.Sprintf("the list differs: %d pages from incremental, %d from full", len(pi), len(pf))})
		}
	}
	return ms
}

// awaitVersion waits until e's API serves version v.
func (r *genRun) awaitVersion(e *env, v string) { e.awaitVersion(r.t, "/v1/collections", v) }

// listRaw returns the documents array of every list page of a collection, as sent.
func (r *genRun) listRaw(e *env, coll string) []string {
	bodies, bad := e.listPages(r.t, coll, "")
	var pages []string
	for _, b := range bodies {
		var body struct {
			Documents json.RawMessage `json:"documents"`
		}
		if err := json.Unmarshal(b, &body); err != nil {
			return append(pages, fmt.Sprintf("undecodable page: %s", b))
		}
		pages = append(pages, string(body.Documents))
	}
	if bad != nil {
		pages = append(pages, fmt.Sprintf("status %d: %s", bad.status, bad.body))
	}
	return pages
}

// listPages returns the body of every page of a collection's list (pinned to version
// when set), 1000 documents a page; bad is the first answer that is not a page.
func (e *env) listPages(tb testing.TB, coll, version string) (bodies [][]byte, bad *response) {
	tb.Helper()
	token := ""
	for range 1000 {
		path := "/v1/data/" + url.PathEscape(coll) + "?limit=1000"
		if version != "" {
			path += "&version=" + url.QueryEscape(version)
		}
		if token != "" {
			path += "&page_token=" + url.QueryEscape(token)
		}
		resp := e.get(tb, path)
		var body struct {
			NextPageToken string `json:"next_page_token"`
		}
		if resp.status != http.StatusOK || json.Unmarshal(resp.body, &body) != nil {
			return bodies, &resp
		}
		bodies = append(bodies, resp.body)
		if token = body.NextPageToken; token == "" {
			break
		}
	}
	return bodies, nil
}

// rollBack rolls the incremental deployment back to its previous version and unpins
// it, returning the version now current.
func (r *genRun) rollBack() string {
	if out, err := r.e.syncerCmd(r.t, "rollback", "--previous", "--reason", "generative history"); err != nil {
		r.fatalf("rollback: %v: %s", err, out)
	}
	if out, err := r.e.syncerCmd(r.t, "unpin", "--reason", "generative history"); err != nil {
		r.fatalf("unpin: %v: %s", err, out)
	}
	r.log = append(r.log, "-- (syncer rollback --previous; syncer unpin)")
	r.stats.rollbacks++
	p, err := testenv.Store(r.t, testenv.StoreConfig(r.e.Bigtable)).ReadPointer(context.Background(), "e2e")
	if err != nil {
		r.t.Fatal(err)
	}
	return string(p.Version)
}

// genCrashPoints are the publish protocol's kill points a history may die at.
var genCrashPoints = []string{"after-open", "mid-write@1", "after-seal", "after-flip"}

// crash runs the incremental syncer once, killed at a kill point of the seed's choice,
// and returns the version the pointer names after it ("" when none).
func (r *genRun) crash() string {
	point := genCrashPoints[(r.seed/4)%uint64(len(genCrashPoints))]
	if r.e.runKilled(r.t, -1, []string{cli.EnvCrashAt + "=" + point}, "once") {
		r.stats.crashes++
	}
	r.log = append(r.log, "-- (syncer once, killed at "+point+")")
	p, err := testenv.Store(r.t, testenv.StoreConfig(r.e.Bigtable)).ReadPointer(context.Background(), "e2e")
	if err != nil {
		return ""
	}
	return string(p.Version)
}
