package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
)

// Two `syncer run` processes with base_part_rows share a base read beside the
// stream: after a column is added to a 40,000-row table, a replica reads parts of
// the base another builds, and the builder takes them from storage;
// the version that takes the base serves the new column on every row, and holds
// as many rows as Postgres.
func TestReplicasShareABase(t *testing.T) {
	t.Parallel()
	e := start(t)
	const rows = 40_000
	testenv.Exec(t, e.DSN, `CREATE TABLE big (id bigint PRIMARY KEY, v int NOT NULL)`,
		fmt.Sprintf(`INSERT INTO big SELECT g, g FROM generate_series(1, %d) g`, rows), `ANALYZE big`)
	cfg := strings.Replace(config, "collections:\n", "collections:\n  - name: big\n    table: public.big\n    key: id\n", 1) +
		// Paced so that the base takes seconds, and the other replica, which looks
		// for bases every second, finds it under way however loaded the machine.
		"base_part_rows: 4000\nsource_base_rows_per_second: 2500\npostgres: {partition_min_rows: 1000}\n"
	a := startSyncerRun(t, cfg, e.DSN, e.Bigtable)
	b := startSyncerRun(t, cfg, e.DSN, e.Bigtable)
	e.awaitServed(t, docPath("big", "7"), `"v":7`, time.Now(), time.Minute)

	testenv.Exec(t, e.DSN, `ALTER TABLE big ADD COLUMN note text DEFAULT 'x'`, `UPDATE big SET v = -v WHERE id IN (3, 30000, 39999)`)
	e.awaitServed(t, docPath("big", "39999"), `"note":"x"`, time.Now(), 2*time.Minute)
	const read, taken = "read a part of a base another replica builds", "a base takes a part another replica read"
	// Each sync takes the lease anew, so either replica may build the base, and
	// both may (the second going on from the first's record): each takes the
	// parts the other read.
	// The syncers' logs are read as they come: wait for the lines.
	testenv.Eventually(t, time.Minute, func() error {
		if n := a.count(read) + b.count(read); n == 0 || a.count(taken)+b.count(taken) == 0 {
			return fmt.Errorf("parts read by a replica: %d; taken by a builder: %d (each replica: read %d, %d; took %d, %d)",
				n, a.count(taken)+b.count(taken), a.count(read), b.count(read), a.count(taken), b.count(taken))
		}
		return nil
	})
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	p, err := st.ReadPointer(context.Background(), e.Dataset)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.ReadManifest(context.Background(), e.Dataset, p.Version)
	if err != nil {
		t.Fatal(err)
	}
	if big := m.Collections["big"]; big.Held != nil || big.Rows != rows {
		t.Fatalf("version %s: big = %+v; want the shared base taken, %d rows", m.Version, big, rows)
	}
	if r := e.get(t, docPath("big", "30000")); !strings.Contains(string(r.body), `"v":-30000`) || !strings.Contains(string(r.body), `"note":"x"`) {
		t.Fatalf("big/30000 serves %s; want the change and the new column", r.body)
	}
	t.Logf("the other replica read %d parts; version %s took the base", a.count(read)+b.count(read), m.Version)
}
