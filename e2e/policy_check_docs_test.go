package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// ---- The documents: GET, batchGet, list, filters, select ----

// limit is the page size of the probe's lists of c: small for a scoped caller, whose
// pages and tokens are the ones that could tell of others' rows.
func (p *policyProbe) limit(c string) string {
	if p.dec[c].access == scoped {
		return "2"
	}
	return "6"
}

// checkReads asks every read of a collection the model grants, from the version the
// probe reads, and holds each answer to Postgres's rows for the decision.
func (p *policyProbe) checkReads(c string) {
	p.checkGets(c)
	p.checkBatch(c)
	p.checkListing("GET /v1/data/{c}", c, "/v1/data/"+c+"?limit="+p.limit(c), p.scope[c], ruleRows)
	p.checkSelect(c)
	p.checkFilters(c)
	p.checkForeignToken(c)
	p.checkChanges(c)
}

// checkForeignToken sends a scoped caller the next_page_token of a list read whole:
// refused (400), or a page of its own rows.
func (p *policyProbe) checkForeignToken(c string) {
	if p.dec[c].access != scoped {
		return
	}
	path := "/v1/data/" + c + "?limit=3&page_token=" + url.QueryEscape(p.w.wholeTokens[c])
	a := p.get(path)
	if a.status == http.StatusBadRequest {
		return
	}
	mine := p.w.visible(len(p.w.versions)-1, c, p.dec[c])
	var page struct {
		Documents []struct {
			ID string `json:"id"`
		} `json:"documents"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &page) != nil ||
		slices.ContainsFunc(page.Documents, func(d struct {
			ID string `json:"id"`
		}) bool {
			_, ok := mine[d.ID]
			return !ok
		}) {
		p.fail("GET /v1/data/{c}", ruleToken, "GET "+path+" (the token of a list read whole)", a.String(), fmt.Sprintf("400, or rows of %q alone", idsOf(mine)))
	}
}

// checkGets reads ids in the scope (their documents, byte for byte, with an ETag),
// outside it and gone (the 404 of an id never written, without an ETag).
func (p *policyProbe) checkGets(c string) {
	const route = "GET /v1/data/{c}/{id}"
	never := p.get(docPath(c, "zz never"), p.pin()...)
	if never.status != http.StatusNotFound {
		p.failRead(route, "GET "+docPath(c, "zz never"), never, "404")
		return
	}
	for i, id := range p.sample(c) {
		path := docPath(c, id)
		if r, in := p.scope[c][id]; in {
			if a := p.get(path, p.pin()...); a.status != http.StatusOK || string(a.body) != r.doc || a.header.Get("ETag") == "" {
				p.fail(route, ruleRows, "GET "+path, a.String(), "200 "+r.doc+" with an ETag")
			}
			if a := p.get(path+"?select=n,tenant", p.pin()...); i == 0 && (a.status != http.StatusOK || canonical(string(a.body)) != project(r.doc)) {
				p.fail(route, ruleRows, "GET "+path+"?select=n,tenant", a.String(), "200 "+project(r.doc))
			}
			continue
		}
		// With the document's own ETag in If-None-Match: still the 404, not a 304.
		a := p.get(path, append(p.pin(), "If-None-Match", p.w.etags[p.at][c][id])...)
		want := strings.Replace(problemText(never.body), strconv.Quote("zz never"), strconv.Quote(id), 1)
		if a.status != http.StatusNotFound || problemText(a.body) != want || a.header.Get("ETag") != "" {
			p.fail(route, ruleNotFound, "GET "+path+" If-None-Match: its ETag", a.String(), "404 "+want+", no ETag, as for an id never written")
		}
	}
}

// project is a document's n and tenant alone, canonical (?select=n,tenant).
func project(doc string) string {
	var m map[string]json.RawMessage
	_ = json.Unmarshal([]byte(doc), &m)
	b, _ := json.Marshal(map[string]json.RawMessage{"n": m["n"], "tenant": m["tenant"]})
	return string(b)
}

// canonical is a JSON object with its keys sorted.
func canonical(doc string) string {
	var m map[string]json.RawMessage
	_ = json.Unmarshal([]byte(doc), &m)
	b, _ := json.Marshal(m)
	return string(b)
}

// sample returns up to two ids in the scope, two outside it, and one not there.
func (p *policyProbe) sample(c string) []string {
	var in, out, gone []string
	for _, id := range p.w.ids[c] {
		_, there := p.w.rows[p.at][c][id]
		_, inScope := p.scope[c][id]
		switch {
		case inScope:
			in = append(in, id)
		case there:
			out = append(out, id)
		default:
			gone = append(gone, id)
		}
	}
	return slices.Concat(p.pick(in, 2), p.pick(out, 2), p.pick(gone, 1))
}

func (p *policyProbe) pick(ids []string, n int) []string {
	ids = slices.Clone(ids)
	p.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return ids[:min(n, len(ids))]
}

// problemText returns a problem document's detail ("" when the body is not one).
func problemText(body []byte) string {
	var pr struct{ Detail string }
	_ = json.Unmarshal(body, &pr)
	return pr.Detail
}

// checkBatch asks for every id ever written and one never: the documents in the
// scope, byte for byte; every other id missing.
func (p *policyProbe) checkBatch(c string) {
	const route = "POST /v1/data/{c}:batchGet"
	ids := append(slices.Clone(p.w.ids[c]), "zz never")
	body, _ := json.Marshal(map[string][]string{"ids": ids})
	request := "POST /v1/data/" + c + ":batchGet " + string(body)
	a := p.send(http.MethodPost, "/v1/data/"+c+":batchGet", string(body), p.pin()...)
	var got struct {
		Documents map[string]json.RawMessage `json:"documents"`
		Missing   []string                   `json:"missing"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &got) != nil {
		p.failRead(route, request, a, "200")
		return
	}
	docs := map[string]string{}
	for id, raw := range got.Documents {
		docs[id] = string(raw)
	}
	var missing []string
	for _, id := range ids {
		if _, ok := p.scope[c][id]; !ok {
			missing = append(missing, id)
		}
	}
	slices.Sort(got.Missing)
	slices.Sort(missing)
	if diff := docsDiff(docs, p.scope[c]); diff != "" || !slices.Equal(got.Missing, missing) {
		p.fail(route, ruleRows, request, fmt.Sprintf("%s; missing %q", diff, got.Missing), fmt.Sprintf("found %q, missing %q", idsOf(p.scope[c]), missing))
	}
}

// docsDiff says how documents by id differ from the rows' ("" when they do not).
func docsDiff(got map[string]string, want map[string]policyRow) string {
	gotIDs, wantIDs := slices.Sorted(maps.Keys(got)), idsOf(want)
	if !slices.Equal(gotIDs, wantIDs) {
		return fmt.Sprintf("found %q", gotIDs)
	}
	for _, id := range gotIDs {
		if got[id] != want[id].doc {
			return fmt.Sprintf("%q is %s, Postgres says %s", id, got[id], want[id].doc)
		}
	}
	return ""
}

func idsOf[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// listing is what a walk through a list's pages found.
type listing struct {
	docs   map[string]string // id → document
	tokens []string          // every next_page_token
	bad    *answer           // the page that was not a 200 page, if any
	at     string            // its request
}

// list follows next_page_token from the first page of path.
func (p *policyProbe) list(path string) listing {
	l := listing{docs: map[string]string{}}
	for next := ""; len(l.tokens) < 100; {
		l.at = path
		if next != "" {
			l.at += "&page_token=" + url.QueryEscape(next)
		}
		a := p.get(l.at, p.pin()...)
		var page struct {
			Documents []struct {
				ID       string          `json:"id"`
				Document json.RawMessage `json:"document"`
			} `json:"documents"`
			Next string `json:"next_page_token"`
		}
		if a.status != http.StatusOK || json.Unmarshal(a.body, &page) != nil {
			l.bad = &a
			return l
		}
		for _, d := range page.Documents {
			l.docs[d.ID] = string(d.Document)
		}
		if next = page.Next; next == "" {
			break
		}
		l.tokens = append(l.tokens, next)
	}
	return l
}

// checkListing walks a list or filter through its pages: exactly the rows want, and
// no page token naming an id outside the scope.
func (p *policyProbe) checkListing(route, c, path string, want map[string]policyRow, r rule) {
	l := p.list(path)
	if l.bad != nil {
		if r == ruleFilter && l.bad.status != http.StatusForbidden {
			p.fail(route, r, "GET "+l.at, l.bad.String(), fmt.Sprintf("200 with %q", idsOf(want)))
		} else {
			p.failRead(route, "GET "+l.at, *l.bad, fmt.Sprintf("200 with %q", idsOf(want)))
		}
		return
	}
	if diff := docsDiff(l.docs, want); diff != "" {
		p.fail(route, r, "GET "+path+" and its pages", diff, fmt.Sprintf("%q", idsOf(want)))
	}
	p.checkTokens(route, c, "GET "+path, l.tokens, func(id string) bool { _, ok := p.scope[c][id]; return ok })
}

// checkTokens decodes page tokens (base64url JSON, and the bytes of an index entry
// in them) and looks for an id of the collection the caller may not see.
func (p *policyProbe) checkTokens(route, c, request string, tokens []string, visible func(string) bool) {
	if p.dec[c].access == whole {
		return
	}
	for _, tok := range tokens {
		text := tokenText(tok)
		for _, id := range p.w.ids[c] {
			if !visible(id) && strings.Contains(text, id) {
				p.fail(route, ruleToken, request, fmt.Sprintf("a token holding %q: %s", id, text), "tokens naming no id outside the scope")
				return
			}
		}
	}
}

// tokenText is what a token says in clear: its JSON, and any base64 field decoded.
func tokenText(tok string) string {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return tok
	}
	out := string(b)
	var fields map[string]any
	_ = json.Unmarshal(b, &fields)
	for _, v := range fields {
		if s, ok := v.(string); ok {
			out += "\n" + s
			if e, err := base64.StdEncoding.DecodeString(s); err == nil {
				out += "\n" + string(e)
			}
		}
	}
	return out
}

// checkSelect lists with ?select=n,tenant: each document in the scope, those fields
// of it alone.
func (p *policyProbe) checkSelect(c string) {
	const route = "GET /v1/data/{c}?select"
	path := "/v1/data/" + c + "?select=n,tenant&limit=1000"
	l := p.list(path)
	if l.bad != nil {
		p.failRead(route, "GET "+path, *l.bad, "200")
		return
	}
	want := map[string]policyRow{}
	for id, r := range p.scope[c] {
		r.doc = project(r.doc)
		want[id] = r
	}
	got := map[string]string{}
	for id, d := range l.docs {
		got[id] = canonical(d)
	}
	if diff := docsDiff(got, want); diff != "" {
		p.fail(route, ruleRows, "GET "+path, diff, fmt.Sprintf("%q, n and tenant of each", idsOf(want)))
	}
}

// checkFilters filters by n, and by the scope's field: with the caller's own value
// its rows, with another's an empty page, never an error. A caller reading whole
// filters by one value of tenant or acct.
func (p *policyProbe) checkFilters(c string) {
	const route = "GET /v1/data/{c}?{field}=…"
	d := p.dec[c]
	p.checkListing(route, c, "/v1/data/"+c+"?n=gte.0&limit="+p.limit(c), filterRows(p.scope[c], func(r policyRow) bool { return r.n >= 0 }), ruleRows)
	field := d.field
	if d.access == whole {
		field = []string{"tenant", "acct"}[p.rng.IntN(2)]
	}
	vals := dataTenants
	if field == "acct" {
		vals = dataAccts
	}
	var asked []string
	if d.access == scoped && slices.Contains(vals, d.value) {
		asked = append(asked, d.value)
	}
	others := slices.DeleteFunc(slices.Clone(vals), func(v string) bool { return d.access == scoped && v == d.value })
	asked = append(asked, others[p.rng.IntN(len(others))])
	for _, v := range asked {
		want := filterRows(p.scope[c], func(r policyRow) bool { f := r.field(field); return f != nil && *f == v })
		p.checkListing(route, c, "/v1/data/"+c+"?"+field+"=eq."+url.QueryEscape(v)+"&limit="+p.limit(c), want, ruleFilter)
	}
}

func filterRows(rows map[string]policyRow, keep func(policyRow) bool) map[string]policyRow {
	out := map[string]policyRow{}
	for id, r := range rows {
		if keep(r) {
			out[id] = r
		}
	}
	return out
}
