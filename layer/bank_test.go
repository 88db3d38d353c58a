package layer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// pgbench returns the path of pgbench beside the throwaway server of dsn.
func pgbench(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("../deploy/local/postgres.sh", "bin", u.Port()).Output()
	if err != nil {
		t.Fatalf("postgres.sh bin: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "pgbench")
}

// tpcb is pgbench's TPC-B-like transaction, over 2,000 accounts.
const tpcb = `\set aid random(1, 2000)
\set bid 1
\set tid random(1, 10)
\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);
END;
`

// bankCollections are pgbench's accounts, tellers and branches.
var bankCollections = []pgsource.Collection{
	{Name: "accounts", Table: "pgbench_accounts", Key: "aid"},
	{Name: "tellers", Table: "pgbench_tellers", Key: "tid"},
	{Name: "branches", Table: "pgbench_branches", Key: "bid"},
}

// balances returns the sum of the balances version m holds of each collection.
func balances(t *testing.T, h *holdRig, m snapshot.Manifest) map[string]int64 {
	t.Helper()
	field := map[string]string{"accounts": "abalance", "tellers": "tbalance", "branches": "bbalance"}
	out := map[string]int64{}
	for name, f := range field {
		for _, line := range scanCollection(t, h.Store, rig.Dataset, m.Chain(name), name) {
			_, body, _ := strings.Cut(line, "=")
			var doc map[string]any
			if err := json.Unmarshal([]byte(body), &doc); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			out[name] += int64(doc[f].(float64))
		}
	}
	return out
}

// The bank invariant under pgbench's TPC-B load: every transaction adds the same
// amount to an account, its teller and its branch, so in every consistent snapshot
// the three sums are equal. Every version published while pgbench runs, and
// columns are added to tellers and to accounts, holds the three equal, but for a
// held collection, which holds the sum of the version it is held at; every hold
// ends, and the last version equals Postgres. In both watch modes, with
// definition_changes hold (and wait, where no version holds any).
func TestBankInvariantThroughHolds(t *testing.T) {
	for _, tc := range []struct {
		mode string
		hold bool
	}{{"stats", true}, {"logical", true}, {"stats", false}} {
		t.Run(fmt.Sprintf("%s/hold=%t", tc.mode, tc.hold), func(t *testing.T) {
			h := newHoldRigOf(t, bankCollections)
			// The accounts' bases are read in chunks of 300 rows, each in a
			// transaction of its own, while pgbench writes.
			ps := h.Pub.Source.(*pgsource.Source)
			ps.PartitionMinRows, ps.BaseChunkRows = 100, 300
			if !tc.hold {
				h.c.Source = nil
			}
			bin := pgbench(t, h.DSN)
			if out, err := exec.Command(bin, "-i", "-q", "-s", "1", h.DSN).CombinedOutput(); err != nil {
				t.Fatalf("pgbench -i: %v\n%s", err, out)
			}
			// TPC-B over 2,000 accounts (pgbench's own, but for the accounts' range), so
			// that a version is quick to check under the race detector.
			h.Exec(t, `DELETE FROM pgbench_accounts WHERE aid > 2000`, `VACUUM ANALYZE pgbench_accounts`)
			script := filepath.Join(t.TempDir(), "tpcb.sql")
			if err := os.WriteFile(script, []byte(tpcb), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.mode == "logical" {
				h.Stream(t, fmt.Sprintf("snapflip_bank_%d", time.Now().UnixNano()%1e12))
			}
			// Bases are read from the source only every third version, so that
			// versions are published between a base's snapshot and its read; those
			// from storage as soon as asked for.
			close(h.src.gate)
			h.src.reads = make(chan struct{})
			close(h.docs.gate)
			ctx := context.Background()
			run := exec.Command(bin, "-n", "-c", "2", "-j", "1", "-T", "6", "-R", "100", "-f", script, h.DSN)
			if err := run.Start(); err != nil {
				t.Fatal(err)
			}
			started := time.Now()
			ddl := []string{`ALTER TABLE pgbench_tellers ADD COLUMN note int NOT NULL DEFAULT 1`,
				`ALTER TABLE pgbench_accounts ADD COLUMN note int NOT NULL DEFAULT 2`}
			at := map[uint64]map[string]int64{} // by source LSN, a version's sums
			versions, held := 0, 0
			check := func(m snapshot.Manifest) {
				t.Helper()
				sums := balances(t, h, m)
				at[m.Source.LSN] = sums
				versions++
				want := int64(-1)
				for _, name := range []string{"accounts", "tellers", "branches"} {
					c := m.Collections[name]
					if c.Held != nil {
						held++
						if then, ok := at[c.Held.Source.LSN]; ok && then[name] != sums[name] {
							t.Fatalf("version %s holds %s at LSN %d with the sum %d; the version at that position held %d", m.Version, name, c.Held.Source.LSN, sums[name], then[name])
						}
						continue
					}
					if want >= 0 && sums[name] != want {
						t.Fatalf("version %s: the balances' sums %v differ (held: %v)", m.Version, sums, m.HeldCollections())
					}
					want = sums[name]
				}
			}
			done := make(chan error, 1)
			go func() { done <- run.Wait() }()
			for running := true; running; {
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("pgbench: %v", err)
					}
					running = false
				default:
				}
				if len(ddl) > 0 && time.Since(started) > time.Duration(3-len(ddl))*1500*time.Millisecond {
					h.Exec(t, ddl[0]) // while pgbench runs: columns added as a DBA would
					ddl = ddl[1:]
				}
				if versions%3 == 2 {
					select { // a base waiting to be read reads now
					case h.src.reads <- struct{}{}:
					default:
					}
				}
				res, err := h.Pub.Publish(ctx, snapshot.PublishOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if !res.NoOp {
					check(res.Manifest)
				}
			}
			close(h.src.reads)
			var last snapshot.Manifest
			for i := 0; i == 0 || len(last.HeldCollections()) > 0; i++ {
				if i == 20 {
					t.Fatalf("collections still held after pgbench ended: %v", last.HeldCollections())
				}
				h.c.Wait()
				res, err := h.Pub.Publish(ctx, snapshot.PublishOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if !res.NoOp {
					check(res.Manifest)
				}
				last = h.Published(t, rig.Dataset)
			}
			if tc.hold && held == 0 {
				t.Errorf("no version held a collection while its new base was read")
			}
			if !tc.hold && held > 0 {
				t.Errorf("definition_changes wait: %d versions held a collection", held)
			}
			f := h.Publish(t, h.besideRig.full)
			for _, c := range bankCollections {
				got := scanCollection(t, h.Store, rig.Dataset, last.Chain(c.Name), c.Name)
				want := scanCollection(t, h.Store, "full", f.Chain(c.Name), c.Name)
				if len(got) != len(want) || strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("%s: the last version holds %d documents, a full copy %d", c.Name, len(got), len(want))
				}
			}
			t.Logf("%d versions, %d held collections seen", versions, held)
		})
	}
}
