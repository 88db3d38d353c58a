package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
	"github.com/snapflip/snapflip/snapshot"
)

// ddlConfig is config with a view collection and a query collection over a view.
const ddlConfig = config + `  - name: things_v
    table: things_v
    key: id
  - name: flags_q
    query: "SELECT * FROM flags_v"
    key: key
`

// ddlSchema adds what the DDL cases change: an enum under a domain, a composite, the
// views.
const ddlSchema = `CREATE TYPE mood AS ENUM ('sad', 'ok');
CREATE DOMAIN mood_d AS mood;
CREATE TYPE addr AS (street text);
ALTER TABLE things ADD COLUMN m mood_d DEFAULT 'ok', ADD COLUMN a addr DEFAULT ROW('main st');
ALTER TABLE flags REPLICA IDENTITY FULL;
CREATE VIEW things_v AS SELECT id, note FROM things;
CREATE VIEW flags_v AS SELECT key, value FROM flags WHERE enabled;
INSERT INTO things (id) SELECT 'bulk-' || g FROM generate_series(1, 200) g;`

// ddlOracles are Postgres's own documents of each collection: id, then to_json.
var ddlOracles = map[string]string{
	"things":   `SELECT id, to_json(x.*)::text FROM things AS x`,
	"flags":    `SELECT key, to_json(x.*)::text FROM (SELECT key, value, gen FROM flags WHERE enabled) AS x`,
	"things_v": `SELECT id, to_json(x.*)::text FROM things_v AS x`,
	"flags_q":  `SELECT key, to_json(x.*)::text FROM (SELECT * FROM flags_v) AS x`,
}

// servedDiff compares every document the API serves of coll at version (the current
// one when "") with want (id → Postgres's document), and says how they differ; "" when
// they are equal.
func (e *env) servedDiff(tb testing.TB, coll, version string, want map[string]string) string {
	tb.Helper()
	got := map[string]string{}
	bodies, bad := e.listPages(tb, coll, version)
	if bad != nil {
		return fmt.Sprintf("list %s: %d %s", coll, bad.status, genShort(string(bad.body), 300))
	}
	for _, b := range bodies {
		var body struct {
			Documents []struct {
				ID       string          `json:"id"`
				Document json.RawMessage `json:"document"`
			} `json:"documents"`
		}
		if err := json.Unmarshal(b, &body); err != nil {
			return fmt.Sprintf("list %s: %v", coll, err)
		}
		for _, d := range body.Documents {
			got[d.ID] = string(d.Document)
		}
	}
	for id, doc := range want {
		g, ok := got[id]
		if !ok {
			return fmt.Sprintf("%s/%s: not served; Postgres has %s", coll, id, genShort(doc, 200))
		}
		if fields, detail := genDiffDocs(doc, g); len(fields) > 0 || detail != "" {
			return fmt.Sprintf("%s/%s: fields %v differ: served %s, Postgres has %s %s", coll, id, fields, genShort(g, 300), genShort(doc, 300), detail)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			return fmt.Sprintf("%s/%s: served; Postgres has no such row", coll, id)
		}
	}
	return ""
}

// awaitAllServed waits until every collection the API serves equals Postgres, and
// returns how long that took from since.
func (e *env) awaitAllServed(tb testing.TB, since time.Time, limit time.Duration) time.Duration {
	tb.Helper()
	colls := slices.Sorted(func(yield func(string) bool) {
		for c := range ddlOracles {
			if !yield(c) {
				return
			}
		}
	})
	testenv.Eventually(tb, limit-time.Since(since), func() error {
		for _, c := range colls {
			if d := e.servedDiff(tb, c, "", stack.SourceDocs(tb, e.DSN, ddlOracles[c])); d != "" {
				return fmt.Errorf("served differs from Postgres: %s", d)
			}
		}
		return nil
	})
	return time.Since(since)
}

// ddlCase is one committed statement that changes what documents say.
type ddlCase struct{ name, stmt string }

// ddlCases are the statements TestDefinitionChangesAreServed commits, in order.
var ddlCases = []ddlCase{
	{"update of 200 rows", `UPDATE things SET gen = gen + 1 WHERE id LIKE 'bulk-%'`},
	{"update of primary keys", `UPDATE things SET id = id || '-moved' WHERE id IN ('bulk-1', 'bulk-2')`},
	{"column added, not null with a default", `ALTER TABLE things ADD COLUMN extra text NOT NULL DEFAULT 'x'`},
	{"column dropped", `ALTER TABLE things DROP COLUMN tags`},
	{"column renamed", `ALTER TABLE things RENAME COLUMN i TO qty`},
	{"column retyped, the table rewritten", `ALTER TABLE things ALTER COLUMN n TYPE numeric(12,2)`},
	{"table rewritten, the type kept", `ALTER TABLE things ALTER COLUMN gen TYPE int USING gen + 100`},
	{"enum label renamed under a domain", `ALTER TYPE mood RENAME VALUE 'ok' TO 'fine'`},
	{"composite attribute added", `ALTER TYPE addr ADD ATTRIBUTE zip text`},
	{"composite attribute renamed", `ALTER TYPE addr RENAME ATTRIBUTE street TO road`},
	{"view of a collection redefined", `CREATE OR REPLACE VIEW things_v AS SELECT id, upper(note) AS note FROM things`},
	{"view a query reads redefined", `CREATE OR REPLACE VIEW flags_v AS SELECT key, value || '!' AS value FROM flags WHERE enabled`},
	{"truncate and reload in one transaction", `BEGIN; CREATE TEMP TABLE keep AS SELECT * FROM flags; TRUNCATE flags;
		INSERT INTO flags SELECT key, value || '?', enabled, gen FROM keep; COMMIT`},
}

// TestDefinitionChangesAreServed: in both watch modes, with the schedule hourly so
// that only the watch can do it, each committed statement that changes what
// documents say — row changes, and DDL that writes no row the replication stream or
// the statistics see — is served within probeLimit (the watch serves it, not the
// schedule; BenchmarkDDLToServed measures how soon), every collection equal to
// Postgres's own to_json of its rows.
func TestDefinitionChangesAreServed(t *testing.T) {
	// Not parallel: it measures latency.
	for _, mode := range []string{"stats", "logical"} {
		t.Run(mode, func(t *testing.T) {
			e := start(t)
			testenv.Exec(t, e.DSN, ddlSchema)
			cfg := ddlConfig
			if mode == "logical" {
				cfg = strings.Replace(logicalConfig(t, e), config, ddlConfig, 1)
			}
			defer e.runSyncer(t, cfg)()
			e.awaitAllServed(t, time.Now(), probeLimit)
			var lat []time.Duration
			for _, c := range ddlCases {
				testenv.Exec(t, e.DSN, c.stmt)
				at := time.Now()
				d := e.awaitAllServed(t, at, probeLimit)
				lat = append(lat, d)
				t.Logf("%-40s served after %s", c.name, d.Round(time.Millisecond))
				if d > probeLimit {
					t.Errorf("%s: served after %s; want at most %s", c.name, d.Round(time.Millisecond), probeLimit)
				}
			}
			if mode == "logical" {
				// A DBA drops the slot (ending its reader first), then a row changes.
				testenv.Exec(t, e.DSN, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE active_pid IS NOT NULL AND database = current_database()`,
					`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE NOT active AND database = current_database()`,
					`UPDATE things SET note = 'after the slot was dropped' WHERE id = 'plain'`)
				e.awaitAllServed(t, time.Now(), probeLimit)
			}
			slices.Sort(lat)
			t.Logf("%s: statement to served, %d statements: median %s, max %s", mode, len(lat),
				lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
		})
	}
}

// TestServedAfterPostgresRestart: in both watch modes, after the source restarts
// (a fast shutdown ends every session, the watch's and the stream's too) a row change
// is served without the schedule, the watch having reconnected by itself.
func TestServedAfterPostgresRestart(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"stats", "logical"} {
		t.Run(mode, func(t *testing.T) {
			pg := testenv.StartPostgres(t)
			e := startOn(t, pg.DSN)
			testenv.Exec(t, e.DSN, `ALTER TABLE flags REPLICA IDENTITY FULL`)
			cfg := config
			if mode == "logical" {
				cfg = logicalConfig(t, e)
			}
			defer e.runSyncer(t, cfg)()
			e.awaitServed(t, docPath("things", "plain"), `"id":"plain"`, time.Now(), 30*time.Second)
			pg.Restart()
			testenv.Exec(t, e.DSN, `UPDATE things SET note = 'after the restart' WHERE id = 'plain'`)
			d := e.awaitServed(t, docPath("things", "plain"), "after the restart", time.Now(), probeLimit)
			t.Logf("served %s after the commit", d.Round(time.Millisecond))
		})
	}
}

// TestDefinitionChangeWritesOneBase: a column added to a collection's table changes
// every document, so the version after it writes the collection as a base, once: not
// a delta of every row that the next version must then rebase (rebase_ratio).
func TestDefinitionChangeWritesOneBase(t *testing.T) {
	t.Parallel()
	e := start(t)
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	testenv.Exec(t, e.DSN, `ALTER TABLE things ADD COLUMN seven int DEFAULT 7`)
	v2 := stack.PublishedVersion(t, mustSync(t, e))
	testenv.Exec(t, e.DSN, `UPDATE flags SET gen = gen + 1`) // another collection changes
	v3 := stack.PublishedVersion(t, mustSync(t, e))
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	kinds := func(v string) []snapshot.LayerKind {
		m, err := st.ReadManifest(context.Background(), e.Dataset, snapshot.Version(v))
		if err != nil {
			t.Fatal(err)
		}
		var ks []snapshot.LayerKind
		for _, l := range m.Collections["things"].Layers {
			ks = append(ks, l.Kind)
		}
		return ks
	}
	if ks := kinds(v2); len(ks) != 1 || ks[0] != snapshot.LayerBase {
		t.Errorf("things after the column was added: layers %v; want one base", ks)
	}
	if k2, k3 := kinds(v2), kinds(v3); !slices.Equal(k2, k3) {
		t.Errorf("things in the next version: layers %v, after %v; want the same chain (no rebase)", k3, k2)
	}
}
