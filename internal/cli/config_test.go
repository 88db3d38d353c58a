package cli

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"gopkg.in/yaml.v3"

	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

var baseEnv = env(map[string]string{EnvPostgresDSN: "postgres://u@h/db", EnvEmulatorHost: "127.0.0.1:1"})

func TestConfigDefaultsAndGates(t *testing.T) {
	cfg, err := ParseSyncerConfig(strings.NewReader(`
validation: {max_shrink: 0.2}
collections:
  - {name: a, table: t, key: k}
  - {name: b, query: "SELECT 1 AS k", key: k, min_rows: 5, allow_empty: true}
  - {name: c, table: u, key: k, max_shrink: 0}
`), baseEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Dataset != "default" || cfg.Schedule != "@every 5m" || cfg.TTL != 168*time.Hour || cfg.Postgres.Readers != 1 ||
		cfg.Lease.Duration != 15*time.Second || cfg.Bigtable.Table != "snapflip" || cfg.Postgres.DSN != "postgres://u@h/db" {
		t.Errorf("defaults not applied: %+v", cfg)
	}
	def, gates := cfg.gates()
	want := map[string]snapshot.Gate{
		"a": {MaxShrink: 0.2},
		"b": {MaxShrink: 0.2, MinRows: 5, AllowEmpty: true},
		"c": {MaxShrink: 1},
	}
	if diff := cmp.Diff(want, gates); diff != "" {
		t.Errorf("gates (-want +got):\n%s", diff)
	}
	if def.MaxShrink != 0.2 {
		t.Errorf("default gate %+v", def)
	}
}

// TestGateOverrides: every gate field set globally, per collection, or both, in both
// directions: a collection's field replaces the global one whatever its value, and a
// field set nowhere keeps the built-in default.
func TestGateOverrides(t *testing.T) {
	def := snapshot.DefaultGate()
	tests := []struct {
		name             string
		global, perColl  string
		wantDef, wantCol snapshot.Gate
	}{
		{"nothing set", ``, ``, def, def},
		{"max_shrink global", `max_shrink: 0.2`, ``, snapshot.Gate{MaxShrink: 0.2}, snapshot.Gate{MaxShrink: 0.2}},
		{"max_shrink collection", ``, `max_shrink: 0.2`, def, snapshot.Gate{MaxShrink: 0.2}},
		{"max_shrink off per collection", `max_shrink: 0.2`, `max_shrink: 0`, snapshot.Gate{MaxShrink: 0.2}, snapshot.Gate{MaxShrink: 1}},
		{"max_shrink on per collection", `max_shrink: 0`, `max_shrink: 0.3`, snapshot.Gate{MaxShrink: 1}, snapshot.Gate{MaxShrink: 0.3}},
		{"min_rows global", `min_rows: 1000`, ``, snapshot.Gate{MaxShrink: 0.5, MinRows: 1000}, snapshot.Gate{MaxShrink: 0.5, MinRows: 1000}},
		{"min_rows collection", ``, `min_rows: 7`, def, snapshot.Gate{MaxShrink: 0.5, MinRows: 7}},
		{"min_rows off per collection", `min_rows: 1000`, `min_rows: 0`, snapshot.Gate{MaxShrink: 0.5, MinRows: 1000}, def},
		{"min_rows lower per collection", `min_rows: 1000`, `min_rows: 10`, snapshot.Gate{MaxShrink: 0.5, MinRows: 1000}, snapshot.Gate{MaxShrink: 0.5, MinRows: 10}},
		{"allow_empty global", `allow_empty: true`, ``, snapshot.Gate{MaxShrink: 0.5, AllowEmpty: true}, snapshot.Gate{MaxShrink: 0.5, AllowEmpty: true}},
		{"allow_empty collection", ``, `allow_empty: true`, def, snapshot.Gate{MaxShrink: 0.5, AllowEmpty: true}},
		{"allow_empty off per collection", `allow_empty: true`, `allow_empty: false`, snapshot.Gate{MaxShrink: 0.5, AllowEmpty: true}, def},
		{"allow_empty false globally", `allow_empty: false`, ``, def, def},
		{"all off per collection", `{max_shrink: 0.1, min_rows: 5, allow_empty: true}`, `{max_shrink: 0, min_rows: 0, allow_empty: false}`,
			snapshot.Gate{MaxShrink: 0.1, MinRows: 5, AllowEmpty: true}, snapshot.Gate{MaxShrink: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := "collections:\n  - {name: a, table: t, key: k}\n  - {name: b, table: u, key: k}\n"
			if tt.global != "" {
				y = "validation: " + braced(tt.global) + "\n" + y
			}
			if tt.perColl != "" {
				y = strings.Replace(y, "{name: b, table: u, key: k}", "{name: b, table: u, key: k, "+strings.Trim(tt.perColl, "{}")+"}", 1)
			}
			cfg, err := ParseSyncerConfig(strings.NewReader(y), baseEnv)
			if err != nil {
				t.Fatalf("%s: %v", y, err)
			}
			gotDef, gates := cfg.gates()
			if diff := cmp.Diff(tt.wantDef, gotDef); diff != "" {
				t.Errorf("global gate (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantDef, gates["a"]); diff != "" {
				t.Errorf("gate of a collection that sets nothing (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCol, gates["b"]); diff != "" {
				t.Errorf("gate of the collection (-want +got):\n%s", diff)
			}
		})
	}
}

// braced wraps a YAML flow mapping's fields in braces unless they have them.
func braced(s string) string {
	if strings.HasPrefix(s, "{") {
		return s
	}
	return "{" + s + "}"
}

// TestConfigWatchMode: watch.mode is stats unless the config says logical, and setting
// it leaves the watch's other fields at their defaults; min_interval is 1s in stats
// mode and 250ms in logical mode unless the config sets it (0 too); the publication is
// snapflip and the slot is named after the dataset unless the config names them.
func TestConfigWatchMode(t *testing.T) {
	const coll = "collections: [{name: a, table: t, key: k}]\n"
	watch := func(name, publication, slot string) WatchConfig {
		mode, err := pgsource.ParseWatchMode(name)
		if err != nil {
			t.Fatal(err)
		}
		least := time.Second
		if mode == pgsource.WatchModeLogical {
			least = 250 * time.Millisecond
		}
		return WatchConfig{Enabled: true, Interval: 200 * time.Millisecond, MinInterval: least, Mode: mode, Publication: publication, Slot: slot,
			HoldBytes: 64 << 20, HoldWAL: 256 << 20, HoldFor: 5 * time.Minute}
	}
	withMin := func(w WatchConfig, least time.Duration) WatchConfig {
		w.MinInterval = least
		return w
	}
	disabled := watch("logical", "snapflip", "snapflip_default")
	disabled.Enabled = false
	for _, tt := range []struct {
		yaml string
		want WatchConfig
	}{
		{coll, watch("stats", "snapflip", "snapflip_default")},
		{"watch: {mode: stats}\n" + coll, watch("stats", "snapflip", "snapflip_default")},
		{"watch: {mode: logical}\n" + coll, watch("logical", "snapflip", "snapflip_default")},
		{"watch: {enabled: false, mode: logical}\n" + coll, disabled},
		{"dataset: shop\nwatch: {mode: logical}\n" + coll, watch("logical", "snapflip", "snapflip_shop")},
		{"dataset: shop\nwatch: {mode: logical, publication: orders_pub, slot: orders_1}\n" + coll, watch("logical", "orders_pub", "orders_1")},
		{"watch: {publication: '', slot: ''}\n" + coll, watch("stats", "snapflip", "snapflip_default")},
		{"watch: {mode: logical, min_interval: 1s}\n" + coll, withMin(watch("logical", "snapflip", "snapflip_default"), time.Second)},
		{"watch: {min_interval: 250ms}\n" + coll, withMin(watch("stats", "snapflip", "snapflip_default"), 250*time.Millisecond)},
		{"watch: {mode: logical, min_interval: 0s}\n" + coll, withMin(watch("logical", "snapflip", "snapflip_default"), 0)},
		{"watch: {min_interval: 0s}\n" + coll, withMin(watch("stats", "snapflip", "snapflip_default"), 0)},
		{"watch: {mode: logical, hold_bytes: 1048576, hold_wal: 2097152, hold_for: 30s}\n" + coll, func() WatchConfig {
			w := watch("logical", "snapflip", "snapflip_default")
			w.HoldBytes, w.HoldWAL, w.HoldFor = 1<<20, 2<<20, 30*time.Second
			return w
		}()},
	} {
		cfg, err := ParseSyncerConfig(strings.NewReader(tt.yaml), baseEnv)
		if err != nil {
			t.Errorf("config %q: %v", tt.yaml, err)
			continue
		}
		if diff := cmp.Diff(tt.want, cfg.Watch); diff != "" {
			t.Errorf("config %q: watch (-want +got):\n%s", tt.yaml, diff)
		}
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	const coll = "collections: [{name: a, table: t, key: k}]\n"
	tests := []struct{ yaml, want string }{
		{"validation: {max_shrink: 2}\n" + coll, "validation.max_shrink"},
		{"collections: [{name: a, table: t, key: k, min_rows: -1}]\n", "collections[0].min_rows"},
		{"postgres: {readers: 0}\n" + coll, "postgres.readers"},
		{"lease: {duration: 1ms}\n" + coll, "lease.duration"},
		{"progress_interval: 0s\n" + coll, "progress_interval"},
		{"max_document_bytes: 0\n" + coll, "max_document_bytes"},
		{"bigtable: {writers: -1}\n" + coll, "bigtable.writers"},
		{"dataset: ''\n" + coll, "dataset"},
		{"collections: [{name: a, table: t, key: k, colour: red}]\n", "collections[0].colour (line 1): unknown field"},
		// Wrong types name the field, where yaml.v3 alone names only the line.
		{"dataset: [1, 2]\n" + coll, "dataset (line 1)"},
		{"ttl: abc\n" + coll, "ttl (line 1)"},
		{"ttl: 5\n" + coll, "ttl (line 1)"},
		{"ttl: -1h\n" + coll, "ttl -1h0m0s"},
		{"ttl: 1500ms\n" + coll, "ttl 1.5s: must be whole seconds"},
		{"bigtable:\n  writers: many\n" + coll, "bigtable.writers (line 2)"},
		{"validation: {max_shrink: abc}\n" + coll, "validation.max_shrink (line 1)"},
		{"collections:\n  - {name: a, table: t, key: k}\n  - {name: b, table: t, key: k, min_rows: lots}\n", "collections[1].min_rows (line 3)"},
		{"collections: {name: a}\n", "collections (line 1)"},
		{"unknown_top: 1\n" + coll, "unknown_top (line 1): unknown field"},
		{"dataset: a\ndataset: b\n" + coll, "dataset (line 2): set twice; first on line 1"},
		{"schedule: 'every day'\n" + coll, "schedule"},
		{"lease: {acquire_timeout: 0s}\n" + coll, "lease.acquire_timeout"},
		{"bigtable: {batch_rows: -1}\n" + coll, "bigtable.batch_rows"},
		{"max_document_bytes: 200000000\n" + coll, "max_document_bytes"},
		{"collections: []\n", "collections"},
		{"versions: delta\n" + coll, `versions "delta"`},
		{"max_layers: 0\n" + coll, "max_layers"},
		{"rebase_ratio: 0\n" + coll, "rebase_ratio"},
		{"base_rows_per_second: 0\n" + coll, "base_rows_per_second 0: must be at least 1"},
		{"base_rows_per_second: .nan\n" + coll, "base_rows_per_second NaN"},
		{"base_rows_per_second: many\n" + coll, "base_rows_per_second (line 1)"},
		{"source_base_rows_per_second: 0.5\n" + coll, "source_base_rows_per_second 0.5: must be 0 (no bound) or at least 1"},
		{"source_base_rows_per_second: -1\n" + coll, "source_base_rows_per_second -1"},
		{"source_base_rows_per_second: .nan\n" + coll, "source_base_rows_per_second NaN"},
		{"base_transaction: 10ms\n" + coll, "base_transaction 10ms: must be at least 100ms"},
		{"base_transaction: -1s\n" + coll, "base_transaction -1s: must be at least 100ms"},
		{"base_part_rows: -5\n" + coll, "base_part_rows -5: must be 0 (bases not shared) or at least 1000"},
		{"base_part_rows: 10\n" + coll, "base_part_rows 10: must be 0 (bases not shared) or at least 1000"},
		{"definition_changes: later\n" + coll, `definition_changes "later": must be "hold" or "wait"`},
		{"definition_changes: \"\"\n" + coll, `definition_changes "": must be "hold" or "wait"`},
		{"watch: {interval: 1ms}\n" + coll, "watch.interval"},
		{"watch: {min_interval: -1s}\n" + coll, "watch.min_interval"},
		{"watch: {hold_bytes: -1}\n" + coll, "watch.hold_bytes"},
		{"watch: {hold_wal: -1}\n" + coll, "watch.hold_wal"},
		{"watch: {hold_for: -1s}\n" + coll, "watch.hold_for"},
		{"watch: {enabled: sometimes}\n" + coll, "watch.enabled (line 1)"},
		{"watch: {mode: trigger}\n" + coll, `watch.mode (line 1): invalid watch mode "trigger": must be "stats" or "logical"`},
		{"watch: {mode: ''}\n" + coll, `watch.mode (line 1): invalid watch mode "": must be "stats" or "logical"`},
		{"watch: {mode: notify}\n" + coll, `watch.mode (line 1): invalid watch mode "notify": it was removed: use "logical" (the replication stream; no triggers on your tables), see docs/freshness.md`},
		{"watch: {enabled: false, mode: notify}\n" + coll, `watch.mode (line 1): invalid watch mode "notify": it was removed`},
		{"watch: {slot: Snapflip}\n" + coll, `watch.slot "Snapflip": must be 1..63 of a-z, 0-9 and _`},
		{"watch: {slot: snap-flip}\n" + coll, `watch.slot "snap-flip"`},
		{"watch: {slot: " + strings.Repeat("s", 64) + "}\n" + coll, "watch.slot"},
		{"watch: {slot: [a]}\n" + coll, "watch.slot (line 1)"},
		{"watch: {publication: 1pub}\n" + coll, `watch.publication "1pub": must be a lower-case SQL identifier of 1..63 bytes`},
		{"watch: {publication: 'my pub'}\n" + coll, `watch.publication "my pub"`},
		{"watch: {publication: Snapflip}\n" + coll, `watch.publication "Snapflip"`},
		{"watch: {publication: " + strings.Repeat("p", 64) + "}\n" + coll, "watch.publication"},
		{"collections: [{name: a, key: k}]\n", "collections[0]"},
		{"collections: [{name: a, table: t, query: 'SELECT 1', key: k}]\n", "collections[0]"},
		{"collections: [{name: a, query: 'SELECT 1 AS k'}]\n", "collections[0].key (a): required for a query"},
		{"collections: [{name: a, table: t, key: []}]\n", "collections[0].key (a): an empty list"},
		{"collections: [{name: a, table: t, key: {a: b}}]\n", "collections[0].key (line 1): want a column name or a list of column names"},
		{"collections: [{name: a, table: t, key: [a, [b]]}]\n", "collections[0].key (line 1)"},
		{"collections: [{name: a, table: t, key: [a, '']}]\n", "collections[0].key (a): an empty column name"},
		{"collections: [{name: a, table: t, key: [a, b, a]}]\n", `collections[0].key (a): column "a" named twice`},
		{"collections: [{table: t, key: k}]\n", "collections[0].name"},
		{"collections: [{name: a, table: t, key: k}, {name: a, table: u, key: k}]\n", "collections[1].name"},
		{"dataset: 'x'\n  bad: 1\n" + coll, "line 1"},
	}
	for _, tt := range tests {
		_, err := ParseSyncerConfig(strings.NewReader(tt.yaml), baseEnv)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("config %q: error %v; want it to name %q", tt.yaml, err, tt.want)
		}
	}
}

// FuzzParseSyncerConfig: any bytes as a config file either parse into a valid config
// or give an error (never a panic); a config that parses survives being written out
// as YAML and parsed again.
func FuzzParseSyncerConfig(f *testing.F) {
	for _, s := range []string{
		"collections: [{name: a, table: t, key: k}]\n",
		"dataset: shop\nschedule: \"*/5 * * * *\"\nttl: 48h\nvalidation: {max_shrink: 0.5, min_rows: 1}\n" +
			"postgres: {readers: 4, partition_min_rows: 1000}\nbigtable: {writers: 4, batch_rows: 500}\n" +
			"collections:\n  - {name: a, table: public.t, key: id, min_rows: 5}\n  - {name: b, query: \"SELECT k, v FROM x;\", key: k, allow_empty: true}\n",
		"collections: [{name: a, table: t, key: k, colour: red}]\n",
		"watch: {mode: logical, interval: 1s}\ncollections: [{name: a, table: t, key: k}]\n",
		"dataset: Big-Shop\nwatch: {publication: p, slot: s}\ncollections: [{name: a, table: t, key: k}]\n",
		"lease: {duration: 1ms}\n",
		"ttl: -1s\ncollections: [{name: a, table: t, key: k}]\n",
		"collections: [{name: a, table: t, key: k}, {name: a, table: u, key: k}]\n",
		"collections: [{name: a, table: t}, {name: b, table: u, key: [x, y]}, {name: c, query: 'SELECT 1 AS k', key: [k]}]\n",
		"collections: [{name: a, table: t, key: [a, [b]]}]\n",
		"{{{", "- - -", "dataset: [1, 2]\n", "max_document_bytes: 1e99\n", "\t", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, y string) {
		cfg, err := ParseSyncerConfig(strings.NewReader(y), baseEnv)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("config %q: an empty error", y)
			}
			return
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("config %q parsed but does not marshal: %v", y, err)
		}
		again, err := ParseSyncerConfig(bytes.NewReader(out), baseEnv)
		if err != nil {
			t.Fatalf("config %q parsed, but its YAML %q does not: %v", y, out, err)
		}
		if diff := cmp.Diff(cfg, again, cmp.AllowUnexported(SyncerConfig{})); diff != "" {
			t.Fatalf("config %q changed on a YAML round trip (-first +again):\n%s", y, diff)
		}
	})
}

// TestConfigAnchorsAndMerges: YAML anchors, aliases and merge keys work as in yaml.v3.
func TestConfigAnchorsAndMerges(t *testing.T) {
	cfg, err := ParseSyncerConfig(strings.NewReader(`
collections:
  - &base {name: a, table: t, key: id, min_rows: 5}
  - <<: *base
    name: b
    table: u
`), baseEnv)
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.Collections[1]
	if b.Name != "b" || b.Table != "u" || !slices.Equal(b.KeyColumns, []string{"id"}) || b.MinRows == nil || *b.MinRows != 5 {
		t.Errorf("merged collection = %+v", b)
	}
}

// TestDemoConfigParses: the config make demo runs with is valid.
func TestDemoConfigParses(t *testing.T) {
	cfg, err := LoadSyncerConfig("../../deploy/local/snapflip.yaml", baseEnv)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Collections) == 0 {
		t.Error("the demo config has no collections")
	}
}

// TestConfigKeys: key is a column name or a list of them, and may be left out for a
// table (it is then inferred from the table when the syncer opens the source).
func TestConfigKeys(t *testing.T) {
	cfg, err := ParseSyncerConfig(strings.NewReader(`
collections:
  - {name: one, table: t, key: id}
  - {name: number, table: t, key: 5}
  - {name: composite, table: payments, key: [payment_date, payment_id]}
  - name: block
    query: "SELECT a, b FROM x"
    key:
      - a
      - b
  - {name: inferred, table: film_actor}
`), baseEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"one": {"id"}, "number": {"5"}, "composite": {"payment_date", "payment_id"}, "block": {"a", "b"}, "inferred": nil}
	got := map[string][]string{}
	for _, c := range cfg.Collections {
		got[c.Name] = c.KeyColumns
		if c.Key != "" {
			t.Errorf("%s: Key %q set from YAML; want only KeyColumns", c.Name, c.Key)
		}
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	// Written back out, a key of one column is a name and a longer one a list.
	out, err := yaml.Marshal(cfg.Collections)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"key: id\n", "key:\n    - payment_date\n    - payment_id\n"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("marshalled collections\n%s\ndo not hold %q", out, w)
		}
	}
	if strings.Count(string(out), "key") != 4 {
		t.Errorf("marshalled collections\n%s\nhold a key for the collection without one", out)
	}
}

// TestDefaultSlot: the slot's default is snapflip_ and the dataset, lower-cased, with
// every character Postgres does not allow in a slot name replaced by _, cut to 63
// bytes; it is always a valid slot name.
func TestDefaultSlot(t *testing.T) {
	for _, tt := range []struct{ dataset, want string }{
		{"default", "snapflip_default"},
		{"shop_2", "snapflip_shop_2"},
		{"Big-Shop.eu", "snapflip_big_shop_eu"},
		{"café", "snapflip_caf_"},
		{strings.Repeat("x", 128), "snapflip_" + strings.Repeat("x", 54)},
		{"Ä" + strings.Repeat("y", 127), "snapflip__" + strings.Repeat("y", 53)},
	} {
		got := defaultSlot(tt.dataset)
		if got != tt.want {
			t.Errorf("defaultSlot(%q) = %q; want %q", tt.dataset, got, tt.want)
		}
		if !slotName.MatchString(got) {
			t.Errorf("defaultSlot(%q) = %q: not a valid slot name", tt.dataset, got)
		}
	}
}
