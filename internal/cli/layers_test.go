package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
)

// The versions of testenv.LayeredManifests, oldest first.
const (
	vBase  = testenv.LayeredBase
	vFull  = testenv.LayeredFull
	vDelta = testenv.LayeredDelta
	vCur   = testenv.LayeredCurrent
)

// layeredFixture is testenv.LayeredManifests.
func layeredFixture(now time.Time) []snapshot.Manifest { return testenv.LayeredManifests(now) }

// TestVersionsShowLayers: `syncer versions` says each version's shape, longest chain,
// bytes written and parent, in the table and in JSON, and its TTL left counts from its
// chain's oldest layer.
func TestVersionsShowLayers(t *testing.T) {
	now := time.Now()
	ms := layeredFixture(now) // oldest first
	slices.Reverse(ms)
	rows := versionRows(ms, snapshot.Pointer{Version: vCur, Previous: vDelta}, 24*time.Hour, now)
	type want struct {
		shape   string
		chain   int
		written int64
		parent  snapshot.Version
		ttlLeft string
	}
	wants := []struct {
		v snapshot.Version
		want
	}{
		// vCur's oldest layer is vBase's, 41h old: 31h of its 72h TTL are left.
		{vCur, want{"mixed", 3, 1536, vDelta, "31h0m0s"}},
		{vDelta, want{"delta", 2, 900, vBase, "31h0m0s"}},
		{vFull, want{"full", 1, 70 << 10, "", "0s"}}, // no TTL of its own: the configured 24h
		{vBase, want{"base", 1, 66 << 10, "", "31h0m0s"}},
	}
	if len(rows) != len(wants) {
		t.Fatalf("%d rows; want %d", len(rows), len(wants))
	}
	for i, w := range wants {
		r := rows[i]
		if got := (want{r.Shape, r.ChainLength, r.BytesWritten, r.Parent, r.TTLLeft}); r.Version != w.v || got != w.want {
			t.Errorf("row %d: %s %+v; want %s %+v", i, r.Version, got, w.v, w.want)
		}
	}

	var table bytes.Buffer
	if err := writeVersions(&table, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(table.String()), "\n")
	if !regexp.MustCompile(`TOKEN +SHAPE +CHAIN +WRITTEN +PARENT$`).MatchString(lines[0]) {
		t.Errorf("header %q; want SHAPE, CHAIN, WRITTEN and PARENT columns", lines[0])
	}
	for i, re := range []string{
		`^` + string(vCur) + ` +published +current .* mixed +3 +1\.5 KiB +` + string(vDelta) + `$`,
		`^` + string(vDelta) + ` +retired +previous .* delta +2 +900 B +` + string(vBase) + `$`,
		`^` + string(vFull) + ` +retired .* full +1 +70\.0 KiB +-$`,
		`^` + string(vBase) + ` +retired .* base +1 +66\.0 KiB +-$`,
	} {
		if !regexp.MustCompile(re).MatchString(lines[i+1]) {
			t.Errorf("line %q; want it to match %s", lines[i+1], re)
		}
	}

	var js bytes.Buffer
	if err := printJSON(&js, rows[:1]); err != nil {
		t.Fatal(err)
	}
	var decoded []map[string]any
	if err := json.Unmarshal(js.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"format": 2.0, "shape": "mixed", "chain_length": 3.0, "bytes_written": 1536.0, "parent": string(vDelta)} {
		if decoded[0][k] != v {
			t.Errorf("JSON %s = %v; want %v", k, decoded[0][k], v)
		}
	}
}

// TestInspectTableShowsChains: `syncer inspect --table` prints, per collection, each
// layer of its chain with its expiry (data time plus the TTL) and what the version's
// publish wrote.
func TestInspectTableShowsChains(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ms := layeredFixture(now)
	var out bytes.Buffer
	if err := writeInspect(&out, inspection{Manifest: ms[3]}, 0, now); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, re := range []string{
		`(?m)^format +2 \(layered\)$`,
		`(?m)^shape +mixed$`,
		`(?m)^parent +` + string(vDelta) + `$`,
		`(?m)^written +1\.5 KiB \(1536 bytes sent to storage\)$`,
		// The version's data time is its oldest layer's, 41h ago; it expires 72h after.
		`(?m)^data time +2026-02-27T19:00:00Z \(41h0m0s ago\)$`,
		`(?m)^expires +2026-03-02T19:00:00Z \(TTL 72h0m0s\)$`,
		`(?m)^collection orders: 1010 documents, 65\.0 KiB, digest abc$`,
		`(?m)^  this version wrote: a delta layer: 3 inserted, 2 changed, 1 deleted, 5 rendered; 6 of 6 cells and 1 of 1 fingerprint chunks written \(mode row-version\)$`,
		`(?m)^  LAYER +KIND +DOCS +TOMBSTONES +BYTES +DATA TIME +EXPIRES$`,
		`(?m)^  ` + string(vCur) + ` +delta +5 +1 +1\.2 KiB +2026-03-01T11:55:00Z +2026-03-04T11:55:00Z$`,
		`(?m)^  ` + string(vDelta) + ` +delta +10 +2 +700 B +2026-03-01T10:00:00Z +2026-03-04T10:00:00Z$`,
		`(?m)^  ` + string(vBase) + ` +base +1000 +0 +64\.0 KiB +2026-02-27T19:00:00Z +2026-03-02T19:00:00Z$`,
		`(?m)^  this version wrote: a base layer: 40 inserted, 0 changed, 0 deleted, 40 rendered; .* \(mode content: new collection\)$`,
		`(?m)^  this version wrote: no layer; the parent's chain as it was \(mode unchanged: same fingerprint\)$`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("inspect lacks a line matching %s:\n%s", re, text)
		}
	}
	// The collections come in name order.
	if o, tg, u := strings.Index(text, "collection orders"), strings.Index(text, "collection tags"), strings.Index(text, "collection users"); !(o < tg && tg < u) {
		t.Errorf("collections out of order:\n%s", text)
	}

	// A full copy has one row, the version's own, expiring by the configured TTL when
	// the manifest has none; a refreshed layered version's layers count from the refresh.
	out.Reset()
	if err := writeInspect(&out, inspection{Manifest: ms[1]}, 24*time.Hour, now); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^format +0 \(full copy\)$`, `(?m)^shape +full$`, `(?m)^parent +-$`, `(?m)^  this version wrote: a full copy$`,
		`(?m)^  ` + string(vFull) + ` +full +1000 +0 +64\.0 KiB +2026-02-28T06:00:00Z +2026-03-01T06:00:00Z \(expired\)$`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("inspect of a full copy lacks a line matching %s:\n%s", re, out.String())
		}
	}
	refreshed := ms[2]
	refreshed.RefreshedAt = now.Add(-time.Hour)
	out.Reset()
	if err := writeInspect(&out, inspection{Manifest: refreshed}, 0, now); err != nil {
		t.Fatal(err)
	}
	if re := `(?m)^  ` + string(vBase) + ` +base +1000 +0 +64\.0 KiB +2026-03-01T11:00:00Z \(refreshed\) +2026-03-04T11:00:00Z$`; !regexp.MustCompile(re).MatchString(out.String()) {
		t.Errorf("inspect of a refreshed version lacks a line matching %s:\n%s", re, out.String())
	}
}

// TestVersionsAndInspectOfRealLayers: against Postgres and the emulator, the first
// publish writes bases and the next, after a change, a delta on it; `versions` and
// `inspect --table` say so, and `inspect` still prints the manifest as JSON.
//
// A Postgres server of its own: the exact count of rendered rows asserted below would
// not hold while a transaction elsewhere in a shared cluster widens the row-version
// window.
func TestVersionsAndInspectOfRealLayers(t *testing.T) {
	dsn, _ := testenv.PostgresServer(t)
	testenv.Exec(t, dsn, `CREATE TABLE things (id text PRIMARY KEY, n int)`, `INSERT INTO things VALUES ('a', 1), ('b', 2), ('c', 3)`)
	getenv := env(map[string]string{EnvPostgresDSN: dsn, EnvEmulatorHost: testenv.Bigtable(t)})
	config := filepath.Join(t.TempDir(), "snapflip.yaml")
	if err := os.WriteFile(config, []byte("dataset: layers\nmax_layers: 2\nrebase_ratio: 100\ncollections: [{name: things, table: public.things, key: id}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	syncer := func(args ...string) string {
		t.Helper()
		out, _, err := run(t, false, getenv, append(args, "--config", config, "--log-level", "warn")...)
		if err != nil {
			t.Fatalf("syncer %q: %v\n%s", args, err, out)
		}
		return out
	}
	syncer("once")
	testenv.Exec(t, dsn, `UPDATE things SET n = 20 WHERE id = 'b'`, `DELETE FROM things WHERE id = 'c'`, `INSERT INTO things VALUES ('d', 4)`)
	syncer("once")

	var rows []versionRow
	if err := json.Unmarshal([]byte(syncer("versions", "--json")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d versions; want 2", len(rows))
	}
	cur, first := rows[0], rows[1]
	if cur.Shape != "delta" || cur.ChainLength != 2 || cur.Parent != first.Version || cur.BytesWritten <= 0 || cur.Format != snapshot.FormatLayered {
		t.Errorf("the second version = %+v; want a delta on the first, a chain of 2, bytes written", cur)
	}
	if first.Shape != "base" || first.ChainLength != 1 || first.Parent != "" || first.BytesWritten <= 0 {
		t.Errorf("the first version = %+v; want a base, a chain of 1, bytes written, no parent", first)
	}
	table := syncer("versions")
	if !regexp.MustCompile(`(?m)^` + string(cur.Version) + ` .* delta +2 +[0-9.]+ (B|KiB) +` + string(first.Version) + `$`).MatchString(table) {
		t.Errorf("versions table lacks the delta's row:\n%s", table)
	}

	text := syncer("inspect", string(cur.Version), "--table")
	for _, re := range []string{
		`(?m)^collection things: 3 documents`,
		`(?m)^  this version wrote: a delta layer: 1 inserted, 1 changed, 1 deleted, `,
		`(?m)^  ` + string(cur.Version) + ` +delta +2 +1 +`,
		`(?m)^  ` + string(first.Version) + ` +base +3 +0 +`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("inspect --table lacks a line matching %s:\n%s", re, text)
		}
	}
	var m snapshot.Manifest
	if err := json.Unmarshal([]byte(syncer("inspect", string(cur.Version))), &m); err != nil || m.Parent != first.Version || len(m.Collections["things"].Layers) != 2 {
		t.Errorf("inspect's JSON = %+v, %v; want the manifest with its chain", m, err)
	}
	if _, _, err := run(t, false, getenv, "inspect", string(cur.Version), "--table", "--json", "--config", config); err == nil {
		t.Errorf("inspect --table --json succeeded; want them refused together")
	}

	// At max_layers (2) the next change gets a merged delta, and inspect says what it
	// merged.
	testenv.Exec(t, dsn, `UPDATE things SET n = 1000 WHERE id = 'a'`)
	syncer("once")
	if err := json.Unmarshal([]byte(syncer("versions", "--json")), &rows); err != nil {
		t.Fatal(err)
	}
	text = syncer("inspect", string(rows[0].Version), "--table")
	for _, re := range []string{
		`(?m)^  this version wrote: a delta layer: 0 inserted, 1 changed, 0 deleted, 1 rendered, 3 copied from the deltas it merged;`,
		`(?m)^  ` + string(rows[0].Version) + ` +delta \(merges 1\) +3 +1 +`,
		`(?m)^  ` + string(first.Version) + ` +base +3 +0 +`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("inspect --table of a merged delta lacks a line matching %s:\n%s", re, text)
		}
	}
}
