package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/auth"
)

// TestGenerativePolicy holds every route of the API to a reference model of who may
// read what (docs/design.md, "Who may read what"), over auth files and tokens drawn at
// random: the lists nobody wrote, with overlapping grants, "*" before and after named
// collections, two issuers, claims as numbers past 2^53, empty, fractional, boolean.
//
// The model (policyFile.decide), written apart from auth.Policy: for each collection,
// the first grant that matches the caller and names the collection decides. A grant
// matches when its issuer is empty or the token's iss, and its subject is the token's
// sub or its claim holds the value (a string equal to it, an integer JSON number of
// those digits, or an array holding one). It names a collection when it lists it or
// "*". Without rows it decides Whole; with rows {field, claim}, Scoped to field = the
// claim's text when the claim is a non-empty string or an integer JSON number (its
// digits, never rounded), else NoClaim, answered 403 like Denied. No grant decides:
// Denied.
//
// The data (policyWorld): three collections synced by the real syncer through four
// versions, rows moved between tenants, deleted and inserted, a version where only one
// tenant's rows change and one where a collection does not change at all, Postgres
// read after each sync as the oracle. Each drawn policy gets an API of its own,
// in-process, over one resolver; each of its tokens asks every route (policyProbe), and
// nothing the model denies may be answered in a body, a header, a count, a kind or a
// page token; an identity granted nothing gets 403 everywhere.
//
// A failure is reported once per route and rule, with the smallest drawn policy that
// showed it: its seed (SNAPFLIP_POLICY_SEED replays that policy alone), the auth file,
// the token's claims, the request, and what the model wanted. SNAPFLIP_GEN_POLICIES
// sets how many policies are drawn (make chaos draws more).
func TestGenerativePolicy(t *testing.T) {
	t.Parallel()
	w := newPolicyWorld(t)
	seeds := policySeeds(t)
	f := &findings{byKey: map[findingKey]*finding{}}
	var stats policyStats
	start := time.Now()
	work := make(chan uint64)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := range work {
				w.runPolicy(t, seed, f, &stats)
			}
		}()
	}
	for _, s := range seeds {
		work <- s
	}
	close(work)
	wg.Wait()
	t.Logf("%d policies, %s in %s", len(seeds), stats.String(), time.Since(start).Round(time.Millisecond))
	w.report(t, f)
}

const (
	envPolicies   = "SNAPFLIP_GEN_POLICIES" // policies drawn; default policiesDefault
	envPolicySeed = "SNAPFLIP_POLICY_SEED"  // one policy's seed: replay it alone

	policiesDefault  = 300
	callersPerPolicy = 4
)

// policySeeds returns the seeds of the policies to draw: SNAPFLIP_POLICY_SEED alone,
// or SNAPFLIP_GEN_POLICIES of them from the clock.
func policySeeds(t *testing.T) []uint64 {
	t.Helper()
	if s := os.Getenv(envPolicySeed); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer", envPolicySeed, s)
		}
		return []uint64{seed}
	}
	n := genEnvInt(t, envPolicies, policiesDefault)
	base := uint64(time.Now().UnixNano())
	t.Logf("seeds %d..%d (%s=<seed> replays one)", base, base+uint64(n)-1, envPolicySeed)
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = base + uint64(i)
	}
	return seeds
}

// ---- One policy ----

// runPolicy draws a policy from seed, serves it, and has each of its callers ask
// every route.
func (w *policyWorld) runPolicy(t *testing.T, seed uint64, f *findings, stats *policyStats) {
	gen := policyGen{rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), issuers: w.urls}
	file := gen.file()
	srv, err := w.serve(file)
	if errors.Is(err, errRefused) {
		f.add(findingKey{"auth.Parse", ruleParse}, finding{ex: example{seed: seed, file: file}, request: "auth.Parse of the file",
			got: err.Error(), want: "the file accepted"})
		return
	}
	if err != nil {
		t.Errorf("seed %d: the API of the drawn file: %v", seed, err)
		return
	}
	stats.policies.Add(1)
	for range callersPerPolicy {
		ex := example{seed: seed, probe: gen.rng.Uint64(), file: file}
		ex.who = gen.caller(file)
		w.newProbe(srv, ex, f, stats).run()
	}
}

var errRefused = errors.New("auth.Parse refuses the file")

// serve returns an API of the auth file over the world's resolver, wired as
// metadata-api --auth wires it.
func (w *policyWorld) serve(file policyFile) (*api.Server, error) {
	text, err := yaml.Marshal(file)
	if err != nil {
		return nil, err
	}
	cfg, err := auth.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errRefused, err)
	}
	ctx := context.Background()
	v, err := auth.NewVerifier(ctx, cfg, auth.VerifierOptions{})
	if err != nil {
		return nil, err
	}
	view, err := w.res.Current(ctx)
	if err != nil {
		return nil, err
	}
	if err := api.ScopeIndexes(cfg, view.Manifest); err != nil {
		return nil, err
	}
	c := api.DefaultConfig()
	c.Dataset, c.WatchInterval = "e2e", 5*time.Millisecond
	c.Auth = &api.Auth{Verifier: v, Policy: auth.NewPolicy(cfg)}
	return api.NewServer(w.res, c, nil)
}

// ---- Findings ----

// rule is what a failure breaks, each a sentence of docs/design.md's "Who may read
// what" or of the model.
type rule int

const (
	ruleParse rule = iota
	ruleUnverified
	ruleAnswersDenied
	ruleNothing
	ruleRefusesGranted
	ruleFails
	ruleRows
	ruleNotFound
	ruleFilter
	ruleToken
	ruleChanges
	ruleKind
	ruleCounts
	ruleStatus
	ruleWatch
	ruleHeader
)

func (r rule) String() string {
	return [...]string{
		ruleParse:          "the drawn auth file is refused (grants name their issuer; an http issuer says allow_http: true)",
		ruleUnverified:     "a token of an issuer the file does not list is 401",
		ruleAnswersDenied:  "a collection the model denies (no grant decides, or a scoped grant without its claim: NoClaim) is answered other than 403",
		ruleNothing:        "an identity granted nothing learns nothing but that it is refused: 403 on every route",
		ruleRefusesGranted: "a collection the model grants is refused (403): claims compared as text, a number its digits, the issuer matched",
		ruleFails:          "a read the model grants fails: the same query works for a scoped and an unscoped caller",
		ruleRows:           "the documents are not Postgres's rows for the decision (SELECT … WHERE field = claim)",
		ruleNotFound:       "an id outside the scope is the 404 of an id never written, without an ETag",
		ruleFilter:         "a scoped caller's own conditions and its scope both apply: its rows, or an empty page, never an error",
		ruleToken:          "a page token or cursor names an id outside the scope",
		ruleChanges:        "the changes are the ids whose row is or was in the scope, and no other",
		ruleKind:           "a scoped caller's changes kind tells whether others' rows changed",
		ruleCounts:         "a count or bytes only for a collection read whole; only the collections granted",
		ruleStatus:         "the status page only for an identity that reads every collection whole, by the rule per collection",
		ruleWatch:          "the flip stream names only the collections granted, without rows for scoped ones",
		ruleHeader:         "a refusal carries no ETag, and for an identity granted nothing no version",
	}[r]
}

// example is a drawn policy and caller.
type example struct {
	seed    uint64 // the policy's: SNAPFLIP_POLICY_SEED replays it
	probe   uint64 // the seed of the probe's own draws (the version read, the ids asked)
	file    policyFile
	who     caller
	decides string // the model's decisions, as the probe saw them
}

// size orders examples: grants first, then listed collections and claims.
func (e example) size() int {
	n := len(e.who.claims)
	for _, g := range e.file.Grants {
		n += 100 + len(g.Collections)
	}
	return n
}

type findingKey struct {
	route string
	rule  rule
}

// finding is one route's failures of one rule: how many, and the smallest example.
type finding struct {
	n                  int
	ex                 example
	request, got, want string
}

// findings collects the failures of every policy.
type findings struct {
	mu    sync.Mutex
	byKey map[findingKey]*finding
}

func (f *findings) add(k findingKey, x finding) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.byKey[k]
	if cur == nil {
		cur = &x
		f.byKey[k] = cur
	} else if x.ex.size() < cur.ex.size() {
		*cur = finding{n: cur.n, ex: x.ex, request: x.request, got: x.got, want: x.want}
	}
	cur.n++
}

// report fails the test once per route and rule, with its smallest example shrunk.
func (w *policyWorld) report(t *testing.T, f *findings) {
	keys := slices.SortedFunc(maps.Keys(f.byKey), func(a, b findingKey) int {
		return cmp.Or(cmp.Compare(a.rule, b.rule), cmp.Compare(a.route, b.route))
	})
	shrunk := make([]finding, len(keys))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			shrunk[i] = w.shrink(k, *f.byKey[k])
		}()
	}
	wg.Wait()
	for i, k := range keys {
		x := shrunk[i]
		text, _ := yaml.Marshal(x.ex.file)
		t.Errorf("%s\n  route %s, %d failures. Drawn by seed %d (SNAPFLIP_POLICY_SEED=%d go test -race -count=1 -run 'TestGenerativePolicy$' -v ./e2e/), shrunk to:\n"+
			"  issuers A = %s, B = %s\n%s  token %s\n  model: %s\n  request: %s\n  got:  %s\n  want: %s",
			k.rule, k.route, f.byKey[k].n, x.ex.seed, x.ex.seed, w.urls[0], w.urls[1], indent(string(text)), w.describe(x.ex.who), x.ex.decides, x.request, x.got, x.want)
	}
}

// describe is a caller's claims as its token carries them, the issuer by its label.
func (w *policyWorld) describe(c caller) string {
	shown := maps.Clone(c.claims)
	shown["iss"], shown["sub"] = w.label(c.iss), c.sub
	b, _ := json.Marshal(shown)
	return string(b)
}

// shrink drops grants, claims and listed collections from a failing example while
// it fails the same way, trying at most shrinkTries smaller ones.
func (w *policyWorld) shrink(k findingKey, x finding) finding {
	if k.rule == ruleParse {
		return x
	}
	for tries := 0; tries < shrinkTries; {
		smaller := false
		for _, ex := range smallerExamples(x.ex) {
			if tries++; tries > shrinkTries {
				break
			}
			if y, ok := w.retry(k, ex); ok {
				x, smaller = y, true
				break
			}
		}
		if !smaller {
			break
		}
	}
	return x
}

const shrinkTries = 60

// smallerExamples are ex without one grant, one claim, or one collection of a grant.
func smallerExamples(ex example) []example {
	var out []example
	f := ex.file
	for i := range f.Grants {
		if len(f.Grants) > 1 {
			f := f
			f.Grants = slices.Delete(slices.Clone(f.Grants), i, i+1)
			out = append(out, example{seed: ex.seed, probe: ex.probe, file: f, who: ex.who})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(ex.who.claims)) {
		c := ex.who
		c.claims = maps.Clone(c.claims)
		delete(c.claims, name)
		out = append(out, example{seed: ex.seed, probe: ex.probe, file: f, who: c})
	}
	for i, g := range f.Grants {
		for j := range g.Collections {
			if len(g.Collections) > 1 {
				f := f
				f.Grants = slices.Clone(f.Grants)
				f.Grants[i].Collections = slices.Delete(slices.Clone(g.Collections), j, j+1)
				out = append(out, example{seed: ex.seed, probe: ex.probe, file: f, who: ex.who})
			}
		}
	}
	return out
}

// retry asks every route for ex again and returns its failure of k, if it fails so.
func (w *policyWorld) retry(k findingKey, ex example) (finding, bool) {
	srv, err := w.serve(ex.file)
	if err != nil {
		return finding{}, false
	}
	out := &findings{byKey: map[findingKey]*finding{}}
	w.newProbe(srv, ex, out, &policyStats{}).run()
	if x, ok := out.byKey[k]; ok {
		return *x, true
	}
	return finding{}, false
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n    ") + "\n"
}

// policyStats counts what the drawn policies exercised.
type policyStats struct {
	policies, callers, untrusted, nothing, statusWrong, requests atomic.Int64
	decisions                                                    [4]atomic.Int64 // by access
}

func (s *policyStats) String() string {
	return fmt.Sprintf("%d callers (%d of an issuer not listed, %d granted nothing), decisions %d Denied %d Whole %d Scoped %d NoClaim, %d requests",
		s.callers.Load(), s.untrusted.Load(), s.nothing.Load(),
		s.decisions[denied].Load(), s.decisions[whole].Load(), s.decisions[scoped].Load(), s.decisions[noClaim].Load(), s.requests.Load())
}
