package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// manifests is a manifestReader over a fixed set of manifests.
type manifests map[snapshot.Version]snapshot.Manifest

func (ms manifests) ReadManifest(_ context.Context, _ string, v snapshot.Version) (snapshot.Manifest, error) {
	m, ok := ms[v]
	if !ok {
		return snapshot.Manifest{}, fmt.Errorf("manifest %s: %w", v, snapshot.ErrNotFound)
	}
	return m, nil
}

// indexedFixture is layeredFixture with two indexes on orders, written by each layer
// of vCur's chain: all entries by vBase's base, changes by the two deltas.
func indexedFixture(now time.Time) manifests {
	writes := map[snapshot.Version][]snapshot.IndexWrite{
		vBase:  {{Name: "customer_id", Entries: 1000, Bytes: 15 << 10}, {Name: "status,placed", Entries: 1000, Bytes: 25 << 10}},
		vDelta: {{Name: "customer_id", Entries: 4, Removed: 2, Bytes: 60}, {Name: "status,placed", Entries: 10, Removed: 8, Bytes: 250}},
		vCur:   {{Name: "customer_id", Entries: 3, Removed: 1, Bytes: 45}},
	}
	defs := []snapshot.IndexDef{
		{Name: "customer_id", Fields: []string{"customer_id"}, Types: []string{"int4"}},
		{Name: "status,placed", Fields: []string{"status", "placed"}, Types: []string{"text", "timestamptz"}},
	}
	ms := manifests{}
	for _, m := range layeredFixture(now) {
		if w, ok := writes[m.Version]; ok {
			c := m.Collections["orders"]
			own := *c.Own
			own.Indexes = w
			c.Own, c.Indexes = &own, defs
			m.Collections["orders"] = c
		}
		ms[m.Version] = m
	}
	return ms
}

// TestInspectShowsIndexesPerLayer: inspect reads the manifest of each layer of a
// chain and says, per index, what that layer wrote; in text and as JSON, which is the
// manifest with index_layers beside it. A layer whose manifest is gone says so.
func TestInspectShowsIndexesPerLayer(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ms := indexedFixture(now)
	in, err := inspect(context.Background(), ms, ms[vCur])
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]layerIndexes{"orders": {
		{Layer: vCur, Kind: "delta", Indexes: []snapshot.IndexWrite{{Name: "customer_id", Entries: 3, Removed: 1, Bytes: 45}}},
		{Layer: vDelta, Kind: "delta", Indexes: ms[vDelta].Collections["orders"].Own.Indexes},
		{Layer: vBase, Kind: "base", Indexes: ms[vBase].Collections["orders"].Own.Indexes},
	}}
	if diff := cmp.Diff(want, in.IndexLayers); diff != "" {
		t.Errorf("index layers (-want +got):\n%s", diff)
	}
	var out bytes.Buffer
	if err := writeInspect(&out, in, 0, now); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, re := range []string{
		`(?m)^  index customer_id \(customer_id int4\)$`,
		`(?m)^  index status,placed \(status text, placed timestamptz\)$`,
		`(?m)^  INDEX +LAYER +ENTRIES +REMOVED +ROWS +BYTES$`,
		`(?m)^  customer_id +` + string(vCur) + ` +3 +1 +4 +45 B$`,
		`(?m)^  customer_id +` + string(vDelta) + ` +4 +2 +6 +60 B$`,
		`(?m)^  customer_id +` + string(vBase) + ` +1000 +0 +1000 +15\.0 KiB$`,
		`(?m)^  status,placed +` + string(vCur) + ` +0 +0 +0 +0 B$`, // its delta changed no status or placed
		`(?m)^  status,placed +` + string(vBase) + ` +1000 +0 +1000 +25\.0 KiB$`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("inspect lacks a line matching %s:\n%s", re, text)
		}
	}
	if strings.Count(text, "  index ") != 2 {
		t.Errorf("inspect lists indexes of collections without any:\n%s", text)
	}

	var js bytes.Buffer
	if err := printJSON(&js, in); err != nil {
		t.Fatal(err)
	}
	var m snapshot.Manifest
	var extra struct {
		IndexLayers map[string][]layerIndexes `json:"index_layers"`
	}
	if err := json.Unmarshal(js.Bytes(), &m); err != nil || m.Version != vCur || len(m.Collections["orders"].Indexes) != 2 {
		t.Errorf("inspect's JSON as a manifest = %+v, %v; want vCur's with its indexes", m, err)
	}
	if err := json.Unmarshal(js.Bytes(), &extra); err != nil || !cmp.Equal(extra.IndexLayers, want) {
		t.Errorf("inspect's JSON index_layers = %+v, %v; want %+v", extra.IndexLayers, err, want)
	}

	// vDelta's manifest is gone: its layer's writes are unknown, the rest still shown.
	delete(ms, vDelta)
	if in, err = inspect(context.Background(), ms, ms[vCur]); err != nil || !in.IndexLayers["orders"][1].ManifestGone {
		t.Fatalf("inspect without vDelta's manifest = %+v, %v; want its layer marked gone", in.IndexLayers, err)
	}
	out.Reset()
	if err := writeInspect(&out, in, 0, now); err != nil {
		t.Fatal(err)
	}
	if re := `(?m)^  customer_id +` + string(vDelta) + ` +\? +\? +\? +\? \(its manifest is gone\)$`; !regexp.MustCompile(re).MatchString(out.String()) {
		t.Errorf("inspect lacks a line matching %s:\n%s", re, out.String())
	}
}

// TestCheckAndInspectIndexesOfRealLayers: against Postgres and the emulator, `check`
// types each index's fields (an enum as text, a domain as its base), refuses a jsonb
// field and a missing one, estimates each index's size and writes nothing; after a
// base and a delta, `inspect` shows what each layer wrote per index, and the base's
// bytes match check's estimate.
func TestCheckAndInspectIndexesOfRealLayers(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TYPE rating AS ENUM ('G', 'PG', 'NC-17')`,
		`CREATE DOMAIN film_year AS int CHECK (VALUE > 1900)`,
		`CREATE TABLE film (id int PRIMARY KEY, title text, rating rating, release_year film_year, special jsonb)`,
		`INSERT INTO film SELECT g, 'Film ' || g, (ARRAY['G', 'PG', 'NC-17'])[g % 3 + 1]::rating, 1950 + g % 70, '{}'
			FROM generate_series(1, 200) g`,
		`ANALYZE film`)
	bt := testenv.Bigtable(t)
	getenv := env(map[string]string{EnvPostgresDSN: dsn, EnvEmulatorHost: bt})
	config := func(indexes string) string {
		p := filepath.Join(t.TempDir(), "snapflip.yaml")
		yaml := "dataset: idx\ncollections: [{name: film, table: film, indexes: " + indexes + "}]\n"
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	bad := config("[rating, [release_year, title], special, nope]")
	out, _, err := run(t, false, getenv, "check", "--config", bad)
	if !errors.Is(err, ErrCheckFailed) {
		t.Fatalf("check with a jsonb and a missing field = %v; want ErrCheckFailed\n%s", err, out)
	}
	for _, re := range []string{
		`(?m)^  index +rating: rating text; about [0-9.]+ KiB \([0-9]+ B an entry, one a row\)$`,
		`(?m)^  index +release_year,title: release_year int4, title text; about [0-9.]+ KiB \(`,
		`(?m)^  index +special: special jsonb \(cannot be indexed\); cannot be built$`,
		`(?m)^  index +nope: nope \(missing\); cannot be built$`,
		`(?m)^  - collection film: index special: field "special" cannot be indexed: type jsonb: JSON values are not ordered by their rendering$`,
		`(?m)^  - collection film: index nope: no field "nope": the documents hold id, title, rating, release_year, special$`,
		`(?m)^2 problem\(s\):$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("check's report lacks a line matching %s:\n%s", re, out)
		}
	}
	js, _, _ := run(t, false, getenv, "check", "--config", bad, "--json")
	var rep checkReport
	if err := json.Unmarshal([]byte(js), &rep); err != nil || len(rep.Collections) != 1 || len(rep.Collections[0].Indexes) != 4 {
		t.Fatalf("check --json = %v\n%s; want film's 4 indexes", err, js)
	}
	ixs := rep.Collections[0].Indexes
	if f := ixs[2].Fields[0]; f.Type != "jsonb" || f.Indexable || !strings.Contains(f.Why, "JSON values are not ordered") {
		t.Errorf("special in JSON = %+v; want jsonb, not indexable, saying why", f)
	}
	if f := ixs[3].Fields[0]; f.Exists || ixs[3].EstimatedBytes != -1 {
		t.Errorf("nope in JSON = %+v, estimate %d; want missing, no estimate", f, ixs[3].EstimatedBytes)
	}
	// An entry costs at least its row key, whose prefix names the dataset, version and
	// the index's collection.
	rating := ixs[0]
	if prefix := store.DocumentKeyBytes("idx", "film/rating", ""); rating.EntryBytes <= prefix || rating.EstimatedBytes != 200*int64(rating.EntryBytes) {
		t.Errorf("rating's estimate: %d bytes an entry, %d in all; want over the %d bytes of the key's prefix, 200 rows", rating.EntryBytes, rating.EstimatedBytes, prefix)
	}
	st, err := store.Open(context.Background(), testenv.StoreConfig(bt))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if r, err := st.CheckSchema(context.Background()); err != nil || r.Exists {
		t.Errorf("after check, the table exists = %+v, %v; check must write nothing", r, err)
	}

	good := config("[rating, [release_year, title]]")
	syncer := func(args ...string) string {
		t.Helper()
		out, _, err := run(t, false, getenv, append(args, "--config", good, "--log-level", "warn")...)
		if err != nil {
			t.Fatalf("syncer %q: %v\n%s", args, err, out)
		}
		return out
	}
	syncer("check")
	syncer("once")
	// 3 ratings change, 1 film is added and 1 deleted: rating loses 4 entries and
	// gains 4; release_year,title loses and gains 1.
	testenv.Exec(t, dsn, `UPDATE film SET rating = 'G' WHERE id IN (1, 2, 4)`, `DELETE FROM film WHERE id = 10`,
		`INSERT INTO film VALUES (201, 'Film 201', 'PG', 2001, '{}')`)
	syncer("once")
	var rows []versionRow
	if err := json.Unmarshal([]byte(syncer("versions", "--json")), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("versions = %+v, %v; want 2", rows, err)
	}
	cur, base := string(rows[0].Version), string(rows[1].Version)

	text := syncer("inspect", cur, "--table")
	for _, re := range []string{
		`(?m)^  index rating \(rating text\)$`,
		`(?m)^  index release_year,title \(release_year int4, title text\)$`,
		`(?m)^  INDEX +LAYER +ENTRIES +REMOVED +ROWS +BYTES$`,
		`(?m)^  rating +` + cur + ` +4 +4 +8 +[0-9]+ B$`,
		`(?m)^  rating +` + base + ` +200 +0 +1 +[0-9.]+ (B|KiB)$`,
		`(?m)^  release_year,title +` + cur + ` +1 +1 +2 +[0-9]+ B$`,
		`(?m)^  release_year,title +` + base + ` +200 +0 +1 +[0-9.]+ KiB$`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("inspect --table lacks a line matching %s:\n%s", re, text)
		}
	}
	var in inspection
	if err := json.Unmarshal([]byte(syncer("inspect", cur)), &in); err != nil || len(in.IndexLayers["film"]) != 2 {
		t.Fatalf("inspect's JSON = %+v, %v; want film's 2 layers", in.IndexLayers, err)
	}
	layers := in.IndexLayers["film"]
	if l := layers[0]; l.Layer != rows[0].Version || l.Kind != "delta" || len(l.Indexes) != 2 || l.Indexes[0] != (snapshot.IndexWrite{Name: "rating", Entries: 4, Removed: 4, Bytes: l.Indexes[0].Bytes, Written: 8}) {
		t.Errorf("the delta's index writes = %+v; want rating's 4 entries and 4 removed", l)
	}
	// A delta writes one entry a row: its entries' bytes plus a row key prefix each
	// are what check estimated an entry takes, within a fifth. The base packed its
	// entries in blocks, and stored at most what check estimated for all of them.
	keyBytes := int64(store.DocumentKeyBytes("idx", "film/rating", ""))
	delta := layers[0].Indexes[0]
	perEntry := float64(delta.Bytes)/float64(delta.Entries) + float64(keyBytes)
	if float64(rating.EntryBytes) < 0.8*perEntry || float64(rating.EntryBytes) > 1.2*perEntry {
		t.Errorf("the delta wrote %+v, %.1f bytes an entry with its row key; check estimated %d", delta, perEntry, rating.EntryBytes)
	}
	written := layers[1].Indexes[0]
	stored := written.Bytes + written.Blocks*keyBytes
	if written.Name != "rating" || written.Entries != 200 || !written.Packed || written.Blocks != 1 || stored > rating.EstimatedBytes {
		t.Errorf("the base wrote %+v, %d bytes with row keys; check estimated at most %d", written, stored, rating.EstimatedBytes)
	}
	t.Logf("rating: check estimated %d bytes, the base stored %d", rating.EstimatedBytes, stored)
}
