package e2e

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/auth/authtest"
)

// policyProbe is one caller of one policy's API asking every route, and what the model
// says it may read.
type policyProbe struct {
	w       *policyWorld
	srv     http.Handler
	raw     string              // the bearer token
	dec     map[string]decision // per collection, and policyStar
	scope   map[string]map[string]policyRow
	at      int  // the version reads name; the current one unless pinned
	pinned  bool // reads name the version (Snapshot-Version)
	trusted bool // the file lists the token's issuer
	rng     *rand.Rand
	out     *findings
	ex      example
	stats   *policyStats
}

func (w *policyWorld) newProbe(srv http.Handler, ex example, out *findings, stats *policyStats) *policyProbe {
	c, rng := ex.who, rand.New(rand.NewPCG(ex.probe, 0))
	claims := authtest.Claims{"sub": c.sub, "aud": "snapflip"}
	maps.Copy(claims, c.claims)
	p := &policyProbe{w: w, srv: srv, raw: w.issuers[c.iss].Token(claims), dec: map[string]decision{}, scope: map[string]map[string]policyRow{},
		at: len(w.versions) - 1, rng: rng, out: out, ex: ex, stats: stats}
	p.trusted = slices.ContainsFunc(ex.file.Issuers, func(is policyIssuer) bool { return is.Issuer == c.iss })
	if rng.IntN(3) == 0 {
		p.at, p.pinned = rng.IntN(len(w.versions)), true
	}
	var says []string
	for _, name := range append(slices.Clone(policyCollections), policyStar) {
		d := ex.file.decide(c, name)
		p.dec[name], p.scope[name] = d, w.visible(p.at, name, d)
		says = append(says, fmt.Sprintf("%s: %s", name, d))
		stats.decisions[d.access].Add(1)
	}
	p.ex.decides = strings.Join(says, "; ")
	if p.pinned {
		p.ex.decides += fmt.Sprintf("; reads version %d (%s) by Snapshot-Version", p.at+1, w.versions[p.at])
	}
	stats.callers.Add(1)
	return p
}

func (w *policyWorld) label(iss string) string {
	if iss == w.urls[0] {
		return "A"
	}
	return "B"
}

// run asks every route.
func (p *policyProbe) run() {
	if !p.trusted {
		p.stats.untrusted.Add(1)
		p.checkUnverified()
		return
	}
	for _, c := range policyCollections {
		if p.dec[c].reads() {
			p.checkReads(c)
		} else {
			p.checkRefused(c)
		}
	}
	if !slices.ContainsFunc(slices.Collect(maps.Values(p.dec)), decision.reads) {
		p.stats.nothing.Add(1)
		p.checkNothing()
		return
	}
	p.checkCollections()
	p.checkVersions()
	p.checkStatus()
	p.checkWatch()
}

// answer is a response as the checks read it.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) String() string {
	s := fmt.Sprintf("%d %s", a.status, bytes.TrimSpace(a.body))
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	if et := a.header.Get("ETag"); et != "" {
		s += " (ETag " + et + ")"
	}
	return s
}

// send serves a request with the probe's token.
func (p *policyProbe) send(method, target, body string, headers ...string) answer {
	p.stats.requests.Add(1)
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+p.raw)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	p.srv.ServeHTTP(rec, req)
	return answer{rec.Code, rec.Header(), rec.Body.Bytes()}
}

func (p *policyProbe) get(target string, headers ...string) answer {
	return p.send(http.MethodGet, target, "", headers...)
}

// pin returns the headers that name the version reads ask for.
func (p *policyProbe) pin() []string {
	if !p.pinned {
		return nil
	}
	return []string{api.HeaderVersion, p.w.versions[p.at]}
}

func (p *policyProbe) fail(route string, r rule, request, got, want string) {
	p.out.add(findingKey{route, r}, finding{ex: p.ex, request: request, got: got, want: want})
}

// failRead reports a read the model grants that was not answered 200.
func (p *policyProbe) failRead(route, request string, a answer, want string) {
	r := ruleFails
	if a.status == http.StatusForbidden {
		r = ruleRefusesGranted
	}
	p.fail(route, r, request, a.String(), want)
}

// ---- What the model denies ----

// checkRefused asks every route of a collection the model denies: 403, the same for
// an id that exists and one never written, without an ETag.
func (p *policyProbe) checkRefused(c string) {
	some := idsOf(p.w.rows[p.at][c])[0]
	asks := []struct{ route, method, target, body string }{
		{"GET /v1/data/{c}/{id}", http.MethodGet, docPath(c, some), ""},
		{"GET /v1/data/{c}/{id}", http.MethodGet, docPath(c, "zz never"), ""},
		{"POST /v1/data/{c}:batchGet", http.MethodPost, "/v1/data/" + c + ":batchGet", `{"ids": [` + strconv.Quote(some) + `]}`},
		{"GET /v1/data/{c}", http.MethodGet, "/v1/data/" + c + "?limit=3", ""},
		{"GET /v1/data/{c}?{field}=…", http.MethodGet, "/v1/data/" + c + "?n=gte.0", ""},
		{"GET /v1/versions/{v}/changes/{c}", http.MethodGet, changesPath(p.w.versions[len(p.w.versions)-1], c), ""},
	}
	var bodies []string
	for _, ask := range asks {
		a := p.send(ask.method, ask.target, ask.body, p.pin()...)
		p.checkForbidden(ask.route, ruleAnswersDenied, ask.method+" "+ask.target, a, "ETag")
		bodies = append(bodies, string(a.body))
	}
	if bodies[0] != bodies[1] {
		p.fail(asks[0].route, ruleAnswersDenied, fmt.Sprintf("GET %s and GET %s", asks[0].target, asks[1].target),
			bodies[0]+" and "+bodies[1], "the same 403 for an id that exists and one never written")
	}
}

// checkForbidden holds an answer to 403 without any of the headers named.
func (p *policyProbe) checkForbidden(route string, r rule, request string, a answer, headers ...string) {
	if a.status != http.StatusForbidden {
		p.fail(route, r, request, a.String(), "403")
		return
	}
	for _, h := range headers {
		if v := a.header.Get(h); v != "" {
			p.fail(route, ruleHeader, request, fmt.Sprintf("403 with %s: %s", h, v), "403 without "+h)
		}
	}
}

// checkNothing asks an identity the model grants nothing (what "*" would decide
// included) every route that reports on the dataset: 403, naming no version.
func (p *policyProbe) checkNothing() {
	last := p.w.versions[len(p.w.versions)-1]
	for _, ask := range []struct{ route, target string }{
		{"GET /v1/collections", "/v1/collections"}, {"GET /v1/versions", "/v1/versions"},
		{"GET /v1/versions/current", "/v1/versions/current"}, {"GET /v1/versions/{v}", "/v1/versions/" + last},
		{"GET /", "/"},
	} {
		p.checkForbidden(ask.route, ruleNothing, "GET "+ask.target, p.get(ask.target), "ETag", api.HeaderVersion, api.HeaderToken)
	}
	a, _ := p.watchFirst()
	p.checkForbidden("GET /v1/watch", ruleNothing, "GET /v1/watch", a, api.HeaderVersion, api.HeaderToken)
}

// checkUnverified asks with a token of an issuer the file does not list: 401.
func (p *policyProbe) checkUnverified() {
	for _, ask := range []struct{ route, target string }{
		{"GET /v1/collections", "/v1/collections"}, {"GET /v1/data/{c}/{id}", docPath("docs", p.w.ids["docs"][0])},
	} {
		if a := p.get(ask.target); a.status != http.StatusUnauthorized {
			p.fail(ask.route, ruleUnverified, "GET "+ask.target, a.String(), "401")
		}
	}
}
