package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapflip/snapflip/client"
	"github.com/snapflip/snapflip/internal/cli"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
)

// replicaCollections are the collections of config a replica holds.
var replicaCollections = []string{"things", "flags"}

// newReplica starts a replica through base, of replicaCollections unless rcfg names
// others, closed when the test ends, and returns it once it holds a version.
func newReplica(tb testing.TB, base string, rcfg client.ReplicaConfig) *client.Replica {
	tb.Helper()
	cfg := client.DefaultConfig()
	cfg.Timeout = 5 * time.Second
	c, err := client.New(base, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if rcfg.Collections == nil {
		rcfg.Collections = replicaCollections
	}
	r, err := client.NewReplica(context.Background(), c, rcfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.Close)
	select {
	case <-r.Ready():
	case <-time.After(30 * time.Second):
		tb.Fatalf("the replica did not load in 30s: %v", r.Err())
	}
	return r
}

// awaitReplica waits until the replica holds v with no lag.
func awaitReplica(tb testing.TB, r *client.Replica, v string) {
	tb.Helper()
	testenv.Eventually(tb, 30*time.Second, func() error {
		if got, lag := r.Version(), r.Lag(); got != v || lag != 0 {
			return fmt.Errorf("the replica holds %s with lag %s (%v); want %s, caught up", got, lag, r.Err(), v)
		}
		return nil
	})
}

// apiContent reads every collection of replicaCollections at version v through the API.
func apiContent(tb testing.TB, e *env, v string) map[string]map[string]string {
	tb.Helper()
	out := map[string]map[string]string{}
	for _, coll := range replicaCollections {
		docs, ok, ms := readAll(tb, e, v, coll)
		if len(ms) > 0 || !ok {
			tb.Fatalf("read %s at %s through the API: %v (held %t)", coll, v, ms, ok)
		}
		out[coll] = docs
	}
	return out
}

// checkView compares a view of the replica, id by id, with the API's content of its
// version.
func checkView(tb testing.TB, view client.View, want map[string]map[string]string) {
	tb.Helper()
	for coll, docs := range want {
		if n := view.Len(coll); n != len(docs) {
			tb.Errorf("version %s, %s: the replica holds %d documents, the API %d", view.Version(), coll, n, len(docs))
		}
		for id, doc := range docs {
			got, ok := view.Get(coll, id)
			if !ok || string(got.JSON) != doc || got.Version != view.Version() {
				tb.Errorf("version %s, %s/%q: the replica has %q (found %t, version %s); the API %q", view.Version(), coll, id,
					got.JSON, ok, got.Version, doc)
			}
		}
		view.Range(coll, func(d client.Document) bool {
			if _, ok := docs[d.ID]; !ok {
				tb.Errorf("version %s, %s/%q: the replica holds it; the API does not", view.Version(), coll, d.ID)
			}
			return true
		})
	}
}

// checkIndex compares the replica's index of things.gen with the API's documents.
func checkIndex(tb testing.TB, view client.View, ix *client.Index, want map[string]map[string]string) {
	tb.Helper()
	byGen := map[int][]string{}
	for id, doc := range want["things"] {
		var d struct{ Gen int }
		if err := json.Unmarshal([]byte(doc), &d); err != nil {
			tb.Fatal(err)
		}
		byGen[d.Gen] = append(byGen[d.Gen], id)
	}
	for gen := range 5 {
		got, err := view.Lookup(ix, gen)
		if err != nil {
			tb.Fatal(err)
		}
		var ids []string
		for _, d := range got {
			ids = append(ids, d.ID)
		}
		if fmt.Sprint(ids) != fmt.Sprint(sorted(byGen[gen])) {
			tb.Errorf("version %s: things with gen %d by the index = %q; the API has %q", view.Version(), gen, ids, sorted(byGen[gen]))
		}
	}
}

func sorted(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// readSample is a document a reader saw in a view.
type readSample struct{ version, coll, id, doc string }

// TestReplicaFollowsHistories: random histories of changes, deletes, rollbacks (to
// the previous version, and two back) and new bases, published while a replica
// follows; after each flip, once the replica has caught up, it holds exactly what the
// API serves for that version, id by id, and its index of a field agrees; readers
// read it throughout, and every document any of them saw in a view is the API's for
// the view's version.
func TestReplicaFollowsHistories(t *testing.T) {
	// Not parallel: its readers take every core they are given, which would slow the
	// timed tests beside them.
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 2))
	e := start(t)
	writeConfig(t, e, changesConfig(100))
	out, err := e.sync(t)
	if err != nil {
		t.Fatal(err)
	}
	v := stack.PublishedVersion(t, out)

	var flips []string
	var flipsMu sync.Mutex
	cfg := client.DefaultReplicaConfig()
	cfg.OnFlip = func(v string) {
		flipsMu.Lock()
		flips = append(flips, v)
		flipsMu.Unlock()
	}
	r := newReplica(t, e.Base, cfg)
	ix, err := r.Index("things", "gen")
	if err != nil {
		t.Fatal(err)
	}

	// Readers: each read goes through a View, and what it saw is checked at the end.
	var stop atomic.Bool
	var readers sync.WaitGroup
	samples := make([][]readSample, 4)
	for i := range samples {
		readers.Add(1)
		go func() {
			defer readers.Done()
			ids := append(append([]string(nil), changesIDs...), "on", "off", "a/b", "f0", "f1", "rebased")
			for n := 0; !stop.Load(); n++ {
				view := r.View()
				id := ids[n%len(ids)]
				for _, coll := range replicaCollections {
					if d, ok := view.Get(coll, id); ok && n%61 == 0 {
						samples[i] = append(samples[i], readSample{view.Version(), coll, id, string(d.JSON)})
					} else if !ok && n%61 == 0 {
						samples[i] = append(samples[i], readSample{view.Version(), coll, id, ""})
					}
				}
				if _, ok := r.Get("things", id); ok && n%1000 == 0 {
					time.Sleep(time.Millisecond) // let the follower have a core now and then
				}
			}
		}()
	}

	content := map[string]map[string]map[string]string{}
	check := func(v string) {
		t.Helper()
		awaitReplica(t, r, v)
		content[v] = apiContent(t, e, v)
		view := r.View()
		checkView(t, view, content[v])
		checkIndex(t, view, ix, content[v])
	}
	check(v)
	var published []string
	published = append(published, v)
	for step := 1; step <= 16; step++ {
		switch step {
		case 5, 9:
			back := map[int][]string{5: {"rollback", "--previous"}, 9: {"rollback", "--force", "--to", published[len(published)-3]}}[step]
			if _, err := e.syncerCmd(t, append(back, "--reason", "r")...); err != nil {
				t.Fatalf("%v: %v", back, err)
			}
			if _, err := e.syncerCmd(t, "unpin", "--reason", "r"); err != nil {
				t.Fatal(err)
			}
			cur := e.get(t, "/v1/versions/current")
			var p struct{ Version string }
			_ = json.Unmarshal(cur.body, &p)
			testenv.Eventually(t, time.Minute, func() error {
				if got := e.get(t, "/v1/versions/current"); !strings.Contains(string(got.body), p.Version) {
					return fmt.Errorf("current is not %s yet", p.Version)
				}
				return nil
			})
			check(p.Version)
			continue
		case 12:
			writeConfig(t, e, changesConfig(0.0001))
			testenv.Exec(t, e.DSN, `INSERT INTO things (id, gen) VALUES ('rebased', 1) ON CONFLICT (id) DO UPDATE SET gen = things.gen + 1`)
		}
		// A random step may change no document (a row updated to itself, a delete of
		// an id that is not there); the flag makes every step publish, so that the
		// rollbacks above always have versions to go back to.
		testenv.Exec(t, e.DSN, append(changesStep(rnd), fmt.Sprintf(`UPDATE flags SET value = 'step-%d' WHERE key = 'on'`, step))...)
		out, err := e.sync(t)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if step == 12 {
			writeConfig(t, e, changesConfig(100))
		}
		v := stack.PublishedVersion(t, out)
		published = append(published, v)
		check(v)
	}
	stop.Store(true)
	readers.Wait()

	n := 0
	for _, ss := range samples {
		for _, s := range ss {
			want, ok := content[s.version]
			if !ok {
				continue // a version the history passed without a check
			}
			n++
			if want[s.coll][s.id] != s.doc {
				t.Errorf("a reader saw %s/%q = %q in version %s; the API has %q", s.coll, s.id, s.doc, s.version, want[s.coll][s.id])
			}
		}
	}
	if n == 0 {
		t.Error("no reader saw a version the history checked")
	}
	st := r.Stats()
	t.Logf("%d versions published, %d flips followed (%+v), %d reads checked", len(published), len(flips), st, n)
	// The history must make the replica follow by changes and reload, or it proves
	// little.
	if st.Changed == 0 || st.Reloaded <= int64(len(replicaCollections)) {
		t.Errorf("the replica followed %d collections by their changes and reloaded %d; want both, beyond the first load", st.Changed, st.Reloaded)
	}
}

// frontProxy stands in front of one or more API replicas, as a load balancer would:
// each request goes to the next upstream in turn, and faults can be switched on.
type frontProxy struct {
	srv *httptest.Server

	mu        sync.Mutex
	upstreams []string
	next      int
	refuse    bool // answer 503 to everything
	cutEvents bool // end every watch stream in the middle of its first event
	// streamLife, when set, ends every watch stream after that long.
	streamLife  time.Duration
	goneChanges bool // answer 410 to every version's changes, as for expired versions
	// silentStreams accepts every watch stream and sends nothing on it, as a proxy
	// that buffers would.
	silentStreams bool
}

func newFrontProxy(tb testing.TB, upstreams ...string) *frontProxy {
	p := &frontProxy{upstreams: upstreams}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	tb.Cleanup(func() {
		p.srv.CloseClientConnections()
		p.srv.Close()
	})
	return p
}

func (p *frontProxy) set(edit func(p *frontProxy)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	edit(p)
	if p.refuse || p.cutEvents || p.silentStreams {
		p.srv.CloseClientConnections() // streams open now see the fault too
	}
}

func (p *frontProxy) serve(w http.ResponseWriter, req *http.Request) {
	p.mu.Lock()
	upstream := p.upstreams[p.next%len(p.upstreams)]
	p.next++
	refuse, cut, life, gone, silent := p.refuse, p.cutEvents, p.streamLife, p.goneChanges, p.silentStreams
	p.mu.Unlock()
	if silent && req.URL.Path == "/v1/watch" {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		<-req.Context().Done()
		return
	}
	if gone && strings.Contains(req.URL.Path, "/changes/") {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusGone)
		_, _ = io.WriteString(w, `{"title":"Gone","status":410,"detail":"version expired"}`)
		return
	}
	if life > 0 && req.URL.Path == "/v1/watch" {
		ctx, cancel := context.WithTimeout(req.Context(), life)
		defer cancel()
		req = req.WithContext(ctx)
	}
	if refuse {
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"title":"Service Unavailable","status":503}`)
		return
	}
	target, _ := url.Parse(upstream)
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }, FlushInterval: -1,
		ErrorLog: log.New(io.Discard, "", 0)} // the faults are the point
	if cut && req.URL.Path == "/v1/watch" {
		w = &cuttingWriter{ResponseWriter: w}
	}
	rp.ServeHTTP(w, req)
}

// cuttingWriter passes a watch stream on until its first event's data line has
// started, then ends the connection halfway through that line.
type cuttingWriter struct {
	http.ResponseWriter
	seen []byte
}

func (c *cuttingWriter) Write(b []byte) (int, error) {
	c.seen = append(c.seen, b...)
	if i := bytes.Index(c.seen, []byte("data: ")); i >= 0 {
		end := i + 6 + (len(c.seen)-i-6)/2
		_, _ = c.ResponseWriter.Write(c.seen[:end])
		http.NewResponseController(c.ResponseWriter).Flush()
		panic(http.ErrAbortHandler)
	}
	return len(b), nil
}

func (c *cuttingWriter) Flush() {}

// TestReplicaThroughOutages: a replica follows flips through watch streams cut in the
// middle of an event, streams that open and stay silent, versions whose changes answer 410 (it reads the collections
// whole), a spell of 503s, and the API killed and started again on
// another address behind the same front; it holds a whole version throughout (every
// read any reader made is the API's document of the view's version), says it is
// behind while it is, and catches up after each outage: by the changes of the three
// versions it missed during the 503s, or, past MaxChain, by reading them whole.
func TestReplicaThroughOutages(t *testing.T) {
	// Not parallel, as TestReplicaFollowsHistories.
	e := start(t)
	writeConfig(t, e, changesConfig(100))
	content := map[string]map[string]map[string]string{}
	var contentMu sync.Mutex
	publish := func(what string) string {
		t.Helper()
		testenv.Exec(t, e.DSN, fmt.Sprintf(`UPDATE things SET gen = gen + 1, note = %s WHERE id IN ('plain', 'a/b')`, stack.Quote(what)),
			fmt.Sprintf(`DELETE FROM things WHERE id = %s`, stack.Quote(awkwardIDs[len(content)+2])))
		out, err := e.sync(t)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return stack.PublishedVersion(t, out)
	}
	record := func(v string) string {
		t.Helper()
		c := apiContent(t, e, v)
		contentMu.Lock()
		content[v] = c
		contentMu.Unlock()
		return v
	}
	v := record(publish("first"))
	front := newFrontProxy(t, e.Base)
	cfg := client.DefaultReplicaConfig()
	cfg.PollInterval, cfg.StreamRetry, cfg.StreamIdle = 100*time.Millisecond, 200*time.Millisecond, time.Second
	r := newReplica(t, front.srv.URL, cfg)
	// Another follows lines of one version at most.
	shortCfg := client.DefaultReplicaConfig()
	shortCfg.PollInterval, shortCfg.StreamRetry, shortCfg.MaxChain = 100*time.Millisecond, 200*time.Millisecond, 1
	short := newReplica(t, front.srv.URL, shortCfg)

	var stop atomic.Bool
	var reads atomic.Int64
	reader := make(chan error, 1)
	go func() {
		for !stop.Load() {
			view := r.View()
			contentMu.Lock()
			want, known := content[view.Version()]
			contentMu.Unlock()
			if !known {
				continue // published, not yet read through the API
			}
			for id, doc := range want["things"] {
				if got, ok := view.Get("things", id); !ok || string(got.JSON) != doc {
					reader <- fmt.Errorf("version %s, things/%q: the replica has %q (found %t); the API %q", view.Version(), id, got.JSON, ok, doc)
					return
				}
				reads.Add(1)
			}
			if view.Len("things") != len(want["things"]) {
				reader <- fmt.Errorf("version %s: %d things; the API has %d", view.Version(), view.Len("things"), len(want["things"]))
				return
			}
		}
		reader <- nil
	}()
	awaitReplica(t, r, v)

	// Streams cut in the middle of an event: flips are learnt by polling between them.
	front.set(func(p *frontProxy) { p.cutEvents = true })
	for i := range 3 {
		v = record(publish(fmt.Sprintf("cut %d", i)))
		awaitReplica(t, r, v)
	}
	front.set(func(p *frontProxy) { p.cutEvents = false })

	// Streams that open and say nothing: dropped after StreamIdle, the flips learnt by
	// polling before the next one.
	front.set(func(p *frontProxy) { p.silentStreams = true })
	for i := range 2 {
		v = record(publish(fmt.Sprintf("silent %d", i)))
		awaitReplica(t, r, v)
	}
	front.set(func(p *frontProxy) { p.silentStreams = false })

	// The changes of every version gone (as when the versions between expired): the
	// replica reads the collections whole instead.
	reloaded := r.Stats().Reloaded
	front.set(func(p *frontProxy) { p.goneChanges = true })
	v = record(publish("changes gone"))
	awaitReplica(t, r, v)
	checkView(t, r.View(), content[v])
	if got := r.Stats().Reloaded; got != reloaded+int64(len(replicaCollections)) {
		t.Errorf("with every version's changes gone the replica reloaded %d collections; want %d", got-reloaded, len(replicaCollections))
	}
	front.set(func(p *frontProxy) { p.goneChanges = false })

	// 503 to everything: the replica keeps its version and says it is behind.
	front.set(func(p *frontProxy) { p.refuse = true })
	held := v
	for i := range 3 {
		v = record(publish(fmt.Sprintf("refused %d", i)))
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		if r.Err() == nil || r.Lag() == 0 {
			return fmt.Errorf("the replica reports lag %s, err %v; want both while every request gets a 503", r.Lag(), r.Err())
		}
		return nil
	})
	if got := r.Version(); got != held {
		t.Errorf("while refused the replica moved to %s; it cannot have read it", got)
	}
	t.Logf("refused: lag %s, err %v", r.Lag(), r.Err())
	before, shortBefore := r.Stats(), short.Stats()
	front.set(func(p *frontProxy) { p.refuse = false })
	awaitReplica(t, r, v)
	awaitReplica(t, short, v)
	// Three versions published meanwhile: a line of three, followed by their changes
	// within MaxChain 16, read whole past MaxChain 1.
	if after := r.Stats(); after.Reloaded != before.Reloaded || after.Changed == before.Changed {
		t.Errorf("after three versions missed the replica reloaded %d collections and followed %d by changes; want 0 and some",
			after.Reloaded-before.Reloaded, after.Changed-before.Changed)
	}
	if after := short.Stats(); after.Reloaded-shortBefore.Reloaded != int64(len(replicaCollections)) {
		t.Errorf("after three versions missed the replica with MaxChain 1 reloaded %d collections; want %d",
			after.Reloaded-shortBefore.Reloaded, len(replicaCollections))
	}
	checkView(t, short.View(), content[v])

	// The API killed, a flip meanwhile, and the API back on another address.
	e.StopAPI()
	testenv.Eventually(t, 20*time.Second, func() error {
		if r.Err() == nil {
			return fmt.Errorf("the replica reports no error while the API is down")
		}
		return nil
	})
	v = publish("while down")
	e.startAPI(t)
	front.set(func(p *frontProxy) { p.upstreams = []string{e.Base} })
	record(v)
	awaitReplica(t, r, v)
	checkView(t, r.View(), content[v])

	stop.Store(true)
	if err := <-reader; err != nil {
		t.Error(err)
	}
	t.Logf("%d reads checked; %+v", reads.Load(), r.Stats())
}

// TestReplicaBehindRoundRobin: two API replicas behind one address, one refreshing
// its pointer far slower than the other, serve the replica's requests in turn, the
// flip stream included; flips come quickly, with a rollback among them. The replica
// never moves to an older version than one it held, except to the rollback's, and
// ends on the newest.
func TestReplicaBehindRoundRobin(t *testing.T) {
	t.Parallel()
	e := start(t)
	writeConfig(t, e, changesConfig(100))
	var published []string
	publish := func() {
		t.Helper()
		testenv.Exec(t, e.DSN, `UPDATE things SET gen = gen + 1 WHERE id = 'plain'`)
		out, err := e.sync(t)
		if err != nil {
			t.Fatal(err)
		}
		published = append(published, stack.PublishedVersion(t, out))
	}
	publish()
	fast := e.Base
	e.startAPI(t, cli.EnvRefresh, "1500ms")
	slow := e.Base
	e.Base = fast
	front := newFrontProxy(t, fast, slow)
	// Streams and polls alternate between the two.
	front.set(func(p *frontProxy) { p.streamLife = 300 * time.Millisecond })

	var flipsMu sync.Mutex
	var flips []string
	cfg := client.DefaultReplicaConfig()
	cfg.PollInterval, cfg.StreamRetry = 50*time.Millisecond, 100*time.Millisecond
	cfg.OnFlip = func(v string) {
		flipsMu.Lock()
		flips = append(flips, v)
		flipsMu.Unlock()
	}
	r := newReplica(t, front.srv.URL, cfg)
	for range 4 {
		publish()
	}
	awaitReplica(t, r, published[len(published)-1]) // so that the rollback takes it back
	if _, err := e.syncerCmd(t, "rollback", "--previous", "--reason", "r"); err != nil {
		t.Fatal(err)
	}
	rolledTo := published[len(published)-2]
	if _, err := e.syncerCmd(t, "unpin", "--reason", "r"); err != nil {
		t.Fatal(err)
	}
	awaitReplica(t, r, rolledTo)
	for range 4 {
		publish()
	}
	awaitReplica(t, r, published[len(published)-1])

	order := map[string]int{}
	for i, v := range published {
		order[v] = i
	}
	flipsMu.Lock()
	defer flipsMu.Unlock()
	rolledBack := false
	for i := 1; i < len(flips); i++ {
		from, to := flips[i-1], flips[i]
		if order[to] < order[from] {
			if to != rolledTo || rolledBack {
				t.Errorf("the replica went back from %s to %s (flips %q)", from, to, flips)
			}
			rolledBack = true
		}
	}
	if !rolledBack {
		t.Errorf("the replica never followed the rollback to %s (flips %q)", rolledTo, flips)
	}
	t.Logf("%d versions published, flips followed: %d", len(published), len(flips))
}
