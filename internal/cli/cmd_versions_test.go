package cli

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv"
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
