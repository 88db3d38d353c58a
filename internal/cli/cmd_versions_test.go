package cli

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
)

// A sync that finds the source as the current version holds it is recorded as an
// unchanged version, not a failed one, in `syncer versions`; a refused one stays
// failed.
func TestUnchangedSyncIsNotAFailure(t *testing.T) {
	dsn := thingsSource(t)
	getenv := env(map[string]string{EnvPostgresDSN: dsn, EnvEmulatorHost: testenv.Bigtable(t)})
	// A query has no row versions: every sync reads it and compares digests.
	cfg := writeFile(t, "q.yaml", "dataset: un\nttl: 1h\ncollections: [{name: q, query: 'SELECT id, n FROM things', key: id}]\n")
	v1 := publish(t, getenv, cfg)
	// A commit elsewhere moves the source's position, so the next sync reads the
	// query (at the same position a sync has nothing to read and writes nothing).
	testenv.Exec(t, dsn, `CREATE TABLE elsewhere (n int); INSERT INTO elsewhere VALUES (1)`)
	if out, _, err := run(t, false, getenv, "once", "--config", cfg); err != nil {
		t.Fatalf("syncer once on an unchanged source = %v\n%s", err, out)
	}
	testenv.Exec(t, dsn, `DELETE FROM things`)
	if out, _, err := run(t, false, getenv, "once", "--config", cfg); err == nil {
		t.Fatalf("syncer once emptying the collection = nil\n%s; want refused by a gate", out)
	}
	out, _, err := run(t, false, getenv, "versions", "--json", "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Version string `json:"version"`
		State   string `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("versions --json: %v\n%s", err, out)
	}
	states := map[string]int{}
	for _, r := range rows {
		if r.Version != v1 {
			states[r.State]++
		}
	}
	if states["unchanged"] != 1 || states["failed"] != 1 || len(rows) != 3 {
		t.Errorf("versions = %s; want %s published, one unchanged and one failed (refused)", out, v1)
	}

	// --limit lists the newest versions, and the current one when it is older (v1,
	// as after a rollback), and says when older ones were left out.
	out, _, err = run(t, false, getenv, "versions", "--json", "--limit", "1", "--config", cfg)
	var newest []struct {
		Version string   `json:"version"`
		Marks   []string `json:"marks"`
	}
	if err != nil || json.Unmarshal([]byte(out), &newest) != nil || len(newest) != 2 ||
		newest[0].Version != rows[0].Version || newest[1].Version != v1 || !slices.Contains(newest[1].Marks, "current") {
		t.Errorf("versions --limit 1 --json = %v\n%s; want the newest of %v, then %s marked current", err, out, rows, v1)
	}
	for limit, more := range map[string]bool{"1": true, "2": true, "3": false, "0": false, "9223372036854775807": false} {
		out, _, err := run(t, false, getenv, "versions", "--limit", limit, "--config", cfg)
		if err != nil || strings.Contains(out, "older versions not shown") != more {
			t.Errorf("versions --limit %s = %v\n%s; want older versions said to be left out: %t", limit, err, out, more)
		}
	}
	if _, _, err := run(t, false, getenv, "versions", "--limit", "-1", "--config", cfg); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--limit") {
		t.Errorf("versions --limit -1 = %v; want a usage error naming --limit", err)
	}
}

// `syncer versions` lists, below its table, each base built beside the stream that
// is in hand or ended within the hour, as its builder recorded it: state, rows of
// those expected, who builds it and why; with --json on the log, the JSON unchanged.
func TestVersionsShowBasesBesideTheStream(t *testing.T) {
	dsn := thingsSource(t)
	addr := testenv.Bigtable(t)
	getenv := env(map[string]string{EnvPostgresDSN: dsn, EnvEmulatorHost: addr})
	cfg := writeFile(t, "b.yaml", "dataset: bv\nttl: 1h\n"+thingsCollection)
	v1 := publish(t, getenv, cfg)
	st := testenv.Store(t, testenv.StoreConfig(addr))
	now := time.Now()
	for _, b := range []snapshot.BaseStatus{
		{Collection: "things", From: snapshot.Version(v1), Why: "keep-alive: the chain's oldest layer is 30m0s old", State: "building",
			Rows: 250, Expected: 1000, Bytes: 4096, Started: now.Add(-10 * time.Second), Updated: now, Writer: "syncer-7"},
		{Collection: "gone", From: snapshot.Version(v1), Why: "long ago", State: "taken", Started: now.Add(-3 * time.Hour), Updated: now.Add(-2 * time.Hour)},
	} {
		if err := st.RecordBase(context.Background(), "bv", b); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err := run(t, false, getenv, "versions", "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The line's times count from when the command ran (api.TestBaseLine checks them).
	line := regexp.MustCompile(`base of things: building, 250 of 1000 rows \(25%\), 4\.0 KiB, started \d+s ago, about \d+s left, by syncer-7; why: keep-alive`)
	if !line.MatchString(out) || strings.Contains(out, "base of gone") {
		t.Errorf("versions =\n%s\nwant a line %q and none for a base taken two hours ago", out, line)
	}
	out, logged, err := run(t, false, getenv, "versions", "--json", "--config", cfg)
	var rows []map[string]any
	if err != nil || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || !strings.Contains(logged, "base of things: building") {
		t.Errorf("versions --json = %v\n%s\nlog:\n%s\nwant one version as JSON, the base on the log", err, out, logged)
	}
}
