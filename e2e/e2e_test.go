package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/cli"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
	"github.com/snapflip/snapflip/snapshot"
)

// env is a running deployment: a Postgres database, a Bigtable server and a metadata
// API (stack.Env), with the requests and checks the tests make of it.
type env struct{ *stack.Env }

// newEnv returns the env of dataset e2e on the database dsn and the Bigtable server
// at bigtable, with no config file yet.
func newEnv(dsn, bigtable string) *env {
	return &env{&stack.Env{DSN: dsn, Bigtable: bigtable, Dataset: "e2e"}}
}

const config = `dataset: e2e
schedule: "@every 1h"
ttl: 1h
collections:
  - name: things
    table: public.things
    key: id
    indexes: [gen, [b, ts]]
  - name: flags
    query: "SELECT key, value, gen FROM flags WHERE enabled"
    key: key
`

// unindexed returns a config without the index declarations of config's things.
func unindexed(cfg string) string {
	const indexes = "    indexes: [gen, [b, ts]]\n"
	if !strings.Contains(cfg, indexes) {
		panic("the shared config no longer declares " + indexes)
	}
	return strings.Replace(cfg, indexes, "", 1)
}

const schema = `CREATE TABLE things (
	id text PRIMARY KEY,
	n numeric, i bigint, f double precision, b boolean, ts timestamptz, d date,
	arr int[], tags text[], j jsonb, raw bytea, note text, gen int NOT NULL DEFAULT 0
);
CREATE TABLE flags (key text, value text, enabled boolean, gen int NOT NULL DEFAULT 0);`

// awkwardIDs need escaping in URLs and row keys.
var awkwardIDs = []string{"plain", "a/b", "a#b", "100%", "%2F", "with space", "ünïcødé", "日本語", "emoji 🎉",
	"$dollar", "..", ".", "a?b=c&d", "semi;colon", "quote\"d", "back\\slash", "plus+sign", "~tilde", strings.Repeat("L", 1024)}

func start(tb testing.TB) *env {
	tb.Helper()
	return startOn(tb, testenv.Postgres(tb))
}

// startOn is start on the Postgres database dsn.
func startOn(tb testing.TB, dsn string) *env {
	tb.Helper()
	e := newEnv(dsn, testenv.Bigtable(tb))
	testenv.Exec(tb, e.DSN, schema)
	for i, id := range awkwardIDs {
		testenv.Exec(tb, e.DSN, fmt.Sprintf(`INSERT INTO things (id, n, i, f, b, ts, d, arr, tags, j, raw, note)
			VALUES (%s, %d.5, %d, 0.25, %t, '2024-01-02 03:04:05.678+02', '2024-01-02', '{1,NULL,%d}', '{"t","ü"}',
			        '{"k": [1, "two", null], "deep": {"x": 1.50}}', '\x00ff', %s)`,
			stack.Quote(id), i, int64(1)<<53+int64(i), i%2 == 0, i, nullIf(i%3 == 0, "note")))
	}
	testenv.Exec(tb, e.DSN, `INSERT INTO flags VALUES ('on', 'yes', true), ('off', 'no', false), ('a/b', 'slash', true)`)
	e.ConfigPath = filepath.Join(tb.TempDir(), "snapflip.yaml")
	if err := os.WriteFile(e.ConfigPath, []byte(config), 0o600); err != nil {
		tb.Fatal(err)
	}
	e.startAPI(tb)
	return e
}

func nullIf(null bool, s string) string {
	if null {
		return "NULL"
	}
	return stack.Quote(s)
}

// startAPI starts the metadata API in-process on a free port and sets e.Base;
// overrides are environment variables as key, value pairs that replace e.Getenv's.
func (e *env) startAPI(tb testing.TB, overrides ...string) {
	tb.Helper()
	e.startAPIWith(tb, nil, overrides...)
}

// startAPIWith is startAPI with more command-line arguments.
func (e *env) startAPIWith(tb testing.TB, args []string, overrides ...string) {
	tb.Helper()
	e.StartAPI(tb, args, overrides...)
}

// sync runs `syncer once` in-process and returns its output and error.
func (e *env) sync(tb testing.TB, args ...string) (string, error) {
	tb.Helper()
	return e.Sync(args...)
}

type response struct {
	status  int
	version string
	ctype   string
	body    []byte
}

// get sends GET path to the API and checks the exchange against the OpenAPI document.
func (e *env) get(tb testing.TB, path string) response {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, e.Base+path, nil)
	if err != nil {
		tb.Fatalf("GET %s: %v", path, err)
	}
	resp, body := callAPI(tb, req)
	return response{resp.StatusCode, resp.Header.Get("Snapshot-Version"), resp.Header.Get("Content-Type"), body}
}

func docPath(collection, id string) string {
	return "/v1/data/" + url.PathEscape(collection) + "/" + url.PathEscape(id)
}

// awaitVersion polls until the API answers 200 from version v, or from any version
// when v is "" (the pointer refresh is 20ms), failing after a minute.
func (e *env) awaitVersion(tb testing.TB, path, v string) response {
	tb.Helper()
	var r response
	testenv.Eventually(tb, time.Minute, func() error {
		if r = e.get(tb, path); (v != "" && r.version != v) || r.status != http.StatusOK {
			return fmt.Errorf("GET %s still answers from %q (status %d); want %s", path, r.version, r.status, v)
		}
		return nil
	})
	return r
}

func TestEndToEnd(t *testing.T) {
	t.Parallel()
	e := start(t)

	// Before anything is published: 503 and not ready, but alive.
	if r := e.get(t, docPath("things", "plain")); r.status != http.StatusServiceUnavailable || r.ctype != "application/problem+json" {
		t.Errorf("before any sync: status %d %s; want 503 problem+json", r.status, r.ctype)
	}
	if r := e.get(t, "/readyz"); r.status != http.StatusServiceUnavailable {
		t.Errorf("readyz before any sync = %d; want 503", r.status)
	}
	if r := e.get(t, "/healthz"); r.status != http.StatusOK {
		t.Errorf("healthz = %d; want 200", r.status)
	}

	out, err := e.sync(t)
	if err != nil {
		t.Fatalf("syncer once: %v", err)
	}
	v1 := stack.PublishedVersion(t, out)
	if _, err := snapshot.ParseVersion(v1); err != nil {
		t.Fatalf("published version: %v", err)
	}
	e.awaitVersion(t, "/readyz", "")

	// Every document over HTTP is byte-for-byte what Postgres makes of the row.
	want := stack.SourceDocs(t, e.DSN, `SELECT id, to_json(t)::text FROM things t`)
	if len(want) != len(awkwardIDs) {
		t.Fatalf("source has %d things; want %d", len(want), len(awkwardIDs))
	}
	for id, doc := range want {
		r := e.awaitVersion(t, docPath("things", id), v1)
		if string(r.body) != doc {
			t.Errorf("things/%q = %s; want %s", id, r.body, doc)
		}
		if r.ctype != "application/json" {
			t.Errorf("things/%q content type %q", id, r.ctype)
		}
	}
	flags := stack.SourceDocs(t, e.DSN, `SELECT key, to_json(t)::text FROM (SELECT key, value, gen FROM flags WHERE enabled) t`)
	for id, doc := range flags {
		if r := e.get(t, docPath("flags", id)); r.status != 200 || string(r.body) != doc {
			t.Errorf("flags/%q = %d %s; want %s", id, r.status, r.body, doc)
		}
	}
	for _, tc := range []struct{ path, what string }{
		{docPath("flags", "off"), "a row the query filters out"},
		{docPath("things", "nope"), "an unknown id"},
		{docPath("nope", "plain"), "an unknown collection"},
	} {
		if r := e.get(t, tc.path); r.status != http.StatusNotFound || r.ctype != "application/problem+json" || r.version != v1 {
			t.Errorf("%s: %d %q version %q; want 404 problem+json from %s", tc.what, r.status, r.ctype, r.version, v1)
		}
	}

	// Unchanged source: exit 0, nothing new.
	out, err = e.sync(t)
	if err != nil || !strings.HasPrefix(out, "unchanged") {
		t.Errorf("second sync = %q, %v; want unchanged", out, err)
	}

	// Change the source: the new version is served; the old one stays readable by its
	// version prefix in storage.
	testenv.Exec(t, e.DSN, `UPDATE things SET note = 'changed', gen = 1 WHERE id = 'plain'`, `DELETE FROM things WHERE id = 'a#b'`)
	out, err = e.sync(t)
	if err != nil {
		t.Fatalf("third sync: %v", err)
	}
	v2 := stack.PublishedVersion(t, out)
	r := e.awaitVersion(t, docPath("things", "plain"), v2)
	if !strings.Contains(string(r.body), `"note":"changed"`) {
		t.Errorf("after the change, plain = %s", r.body)
	}
	if r := e.get(t, docPath("things", "a#b")); r.status != http.StatusNotFound {
		t.Errorf("deleted row answers %d; want 404", r.status)
	}
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	old, err := st.GetDocument(context.Background(), snapshot.ChainRef{Dataset: "e2e", Chain: []snapshot.Version{snapshot.Version(v1)}, Collection: "things"}, "a#b")
	if err != nil || string(old) != want["a#b"] {
		t.Errorf("old version's a#b = %s, %v; want it still stored", old, err)
	}

	// A sync that fails midway (a duplicate key in the second collection) changes
	// nothing visible.
	testenv.Exec(t, e.DSN, `UPDATE things SET gen = 2`, `INSERT INTO flags VALUES ('on', 'again', true)`)
	_, err = e.sync(t)
	if err == nil || !strings.Contains(err.Error(), `duplicate key "on"`) || !strings.Contains(err.Error(), "flags") {
		t.Fatalf("sync with a duplicate key = %v; want an error naming the collection and key", err)
	}
	ptr, err := st.ReadPointer(context.Background(), "e2e")
	if err != nil || string(ptr.Version) != v2 {
		t.Errorf("pointer after the failed sync = %s, %v; want %s", ptr.Version, err, v2)
	}
	if r := e.get(t, docPath("things", "plain")); r.version != v2 || !strings.Contains(string(r.body), `"gen":1`) {
		t.Errorf("after the failed sync the API answers %s from %s; want gen 1 from %s", r.body, r.version, v2)
	}
}

func TestSyncerConfigErrors(t *testing.T) {
	t.Parallel()
	e := newEnv("postgres://nobody@127.0.0.1:1/x", "127.0.0.1:1")
	tests := []struct{ name, yaml, want string }{
		{"unknown field", "dataset: x\ncolections: []\n", "colections"},
		{"bad schedule", "schedule: \"every day\"\ncollections: [{name: a, table: t, key: k}]\n", "schedule"},
		{"bad ttl", "ttl: forever\ncollections: [{name: a, table: t, key: k}]\n", "forever"},
		{"no collections", "dataset: x\n", "collections"},
		{"query without key", "collections: [{name: a, query: 'SELECT 1 AS k'}]\n", "collections[0].key"},
		{"not yaml", "collections: [\n", "yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.ConfigPath = filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(e.ConfigPath, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := e.sync(t)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("syncer with %s = %v; want an error naming %q", tt.name, err, tt.want)
			}
		})
	}
	t.Run("no emulator for the local project", func(t *testing.T) {
		cfg, err := cli.ParseSyncerConfig(strings.NewReader("collections: [{name: a, table: t, key: k}]\npostgres: {dsn: 'postgres://x@y/z'}\n"),
			func(string) string { return "" })
		if err == nil || !strings.Contains(err.Error(), "BIGTABLE_EMULATOR_HOST") {
			t.Errorf("config without an emulator = %+v, %v; want the hint to start the emulator", cfg, err)
		}
	})
	t.Run("unreachable postgres", func(t *testing.T) {
		e2 := start(t)
		e2.DSN = "postgres://postgres@127.0.0.1:1/nope?connect_timeout=2"
		_, err := e2.sync(t)
		if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Errorf("sync with Postgres unreachable = %v; want an error naming it", err)
		}
	})
}

// TestNoTornReads: readers hammer the API while syncs flip the pointer; every response
// is a complete document from exactly one version.
func TestNoTornReads(t *testing.T) {
	t.Parallel()
	e := start(t)
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	ids := []string{"plain", "a/b", "ünïcødé", "100%"}
	e.awaitVersion(t, docPath("things", ids[0]), "")

	var (
		mu        sync.Mutex
		genOf     = map[string]int{} // version → the generation all its documents carry
		responses atomic.Int64
		stop      = make(chan struct{})
		wg        sync.WaitGroup
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := ids[(w+i)%len(ids)]
				r := e.get(t, docPath("things", id))
				if r.status != http.StatusOK {
					t.Errorf("GET things/%q = %d %s", id, r.status, r.body)
					return
				}
				var doc struct {
					ID  string `json:"id"`
					Gen *int   `json:"gen"`
				}
				if err := json.Unmarshal(r.body, &doc); err != nil || doc.ID != id || doc.Gen == nil {
					t.Errorf("GET things/%q: incomplete document %s (%v)", id, r.body, err)
					return
				}
				mu.Lock()
				if g, ok := genOf[r.version]; ok && g != *doc.Gen {
					t.Errorf("version %s answered gen %d and gen %d: a torn read", r.version, g, *doc.Gen)
				}
				genOf[r.version] = *doc.Gen
				mu.Unlock()
				responses.Add(1)
			}
		}()
	}
	const flips = 5
	for g := 1; g <= flips; g++ {
		testenv.Exec(t, e.DSN, fmt.Sprintf(`UPDATE things SET gen = %d`, g))
		out, err := e.sync(t)
		if err != nil {
			t.Fatalf("sync %d: %v", g, err)
		}
		e.awaitVersion(t, docPath("things", "plain"), stack.PublishedVersion(t, out))
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(genOf) != flips+1 {
		t.Errorf("readers saw %d versions; want all %d", len(genOf), flips+1)
	}
	t.Logf("%d responses across %d versions, none torn", responses.Load(), len(genOf))
}

// TestSyncerRunOnSchedule: `syncer run` publishes at once when nothing is published,
// then on every tick that finds a change, and stops cleanly when its context ends.
func TestSyncerRunOnSchedule(t *testing.T) {
	t.Parallel()
	e := start(t)
	// The schedule alone (the watch would publish the change first: freshness_test.go).
	cfg := "watch: {enabled: false}\n" + strings.Replace(config, `schedule: "@every 1h"`, `schedule: "@every 1s"`, 1)
	if err := os.WriteFile(e.ConfigPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ticks := make(chan snapshot.TickResult, 100)
	ctx, cancel := context.WithCancel(context.Background())
	s := &cli.Syncer{Getenv: e.Getenv, Stdout: io.Discard, Stderr: io.Discard, OnTick: func(r snapshot.TickResult, err error) {
		// A tick under way when the test stops the syncer ends cancelled, as it should.
		if err != nil && ctx.Err() == nil {
			t.Errorf("scheduled sync: %v", err)
		}
		select {
		case ticks <- r:
		default:
		}
	}}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, []string{"run"}) }()
	stopped := false
	defer func() {
		// A test that fails early stops the syncer too, before OnTick could report to
		// a finished test.
		if !stopped {
			cancel()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
			}
		}
	}()

	// Nothing is published yet, so the syncer publishes at once.
	first := e.awaitVersion(t, docPath("things", "plain"), "").version
	testenv.Exec(t, e.DSN, `UPDATE things SET gen = 7 WHERE id = 'plain'`)
	var second snapshot.Version
	timeout := time.After(time.Minute)
	for second == "" {
		select {
		case r := <-ticks:
			if !r.Claimed || r.Fence == 0 {
				t.Errorf("a lone replica's tick = %+v; want it claimed and published under a lease token", r)
			}
			if !r.Publish.NoOp {
				second = r.Publish.Manifest.Version
			}
		case <-timeout:
			t.Fatal("no scheduled publish after the change")
		}
	}
	if string(second) == first {
		t.Fatalf("same version %s published twice", first)
	}
	r := e.awaitVersion(t, docPath("things", "plain"), string(second))
	if !strings.Contains(string(r.body), `"gen":7`) {
		t.Errorf("scheduled version serves %s", r.body)
	}
	cancel()
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Errorf("syncer run after cancel = %v; want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("syncer run did not stop within 15s of cancel")
	}
}
