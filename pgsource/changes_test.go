package pgsource_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// scanSince opens a snapshot and streams one collection since an earlier position,
// returning the rendered ids, every id in order, the mode and the new position.
func scanSince(t *testing.T, src *pgsource.Source, coll string, since *snapshot.Position) (rendered, all []string, mode string, pos snapshot.Position) {
	t.Helper()
	ctx := context.Background()
	sn, err := src.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close(ctx)
	ds, ok := sn.(snapshot.DeltaSnapshot)
	if !ok {
		t.Fatal("the Postgres snapshot is not a DeltaSnapshot")
	}
	m, err := ds.ScanSince(ctx, coll, since, func(d snapshot.Document) error {
		all = append(all, d.ID)
		if d.Body != nil {
			rendered = append(rendered, d.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("ScanSince(%s): %v", coll, err)
	}
	return rendered, all, m.String(), sn.Position()
}

// Row-version mode renders exactly the rows written since the earlier snapshot, however
// they were written (plain, in a savepoint, rewritten to the same values, in another
// partition), and nothing that VACUUM FULL or a freeze merely moved; ids come in byte
// order whatever the key's type.
//
// The test has a Postgres server of its own: a transaction running elsewhere in the
// cluster when a snapshot is taken holds its xmin back, which (rightly) widens the
// window of rows rendered, and the exact sets below would not hold.
func TestScanSinceRendersOnlyRowsWrittenSince(t *testing.T) {
	dsn, _ := testenv.PostgresServer(t)
	testenv.Exec(t, dsn,
		`CREATE TABLE nums (id bigint PRIMARY KEY, v text)`,
		`INSERT INTO nums SELECT g, 'v' || g FROM generate_series(1, 300) g`,
		`CREATE TABLE parts (id int, region text, v int, PRIMARY KEY (region, id)) PARTITION BY LIST (region)`,
		`CREATE TABLE parts_eu PARTITION OF parts FOR VALUES IN ('eu')`,
		`CREATE TABLE parts_us PARTITION OF parts FOR VALUES IN ('us')`,
		`INSERT INTO parts SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g FROM generate_series(1, 100) g`,
		`CREATE VIEW even AS SELECT * FROM nums WHERE id % 2 = 0`,
		`CREATE TABLE swap (id int PRIMARY KEY, v text)`, `INSERT INTO swap VALUES (1, 'old')`,
		`CREATE TABLE swap_new (id int PRIMARY KEY, v text)`, `INSERT INTO swap_new VALUES (1, 'new')`)
	src, err := pgsource.New(dsn, []pgsource.Collection{
		{Name: "nums", Table: "nums"},
		{Name: "parts", Table: "parts"},
		{Name: "even", Table: "even", Key: "id"},
		{Name: "q", Query: "SELECT * FROM nums", Key: "id"},
		{Name: "swap", Table: "swap"},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, all, mode, first := scanSince(t, src, "nums", nil)
	if !strings.HasPrefix(mode, "content") || len(all) != 300 {
		t.Fatalf("no parent: mode %q, %d rows; want content, 300", mode, len(all))
	}
	if !slices.IsSorted(all) || all[0] != "1" || all[1] != "10" {
		t.Fatalf("ids not in byte order: %v…", all[:5])
	}
	testenv.Exec(t, dsn,
		`UPDATE nums SET v = 'changed' WHERE id = 7`,
		`UPDATE nums SET v = v WHERE id = 8`, // the same values: still a new row version
		`BEGIN; SAVEPOINT s; UPDATE nums SET v = 'sp' WHERE id = 9; RELEASE s; COMMIT`,
		`BEGIN; SAVEPOINT s; UPDATE nums SET v = 'gone' WHERE id = 10; ROLLBACK TO s; COMMIT`,
		`INSERT INTO nums VALUES (301, 'new')`,
		`DELETE FROM nums WHERE id = 11`,
		`UPDATE parts SET v = -1 WHERE id IN (4, 5)`,
		`VACUUM FULL nums`, `VACUUM FREEZE parts`)
	cases := []struct {
		coll     string
		mode     string
		rendered []string
	}{
		{"nums", "row-version", []string{"301", "7", "8", "9"}},
		{"parts", "row-version", []string{"eu,4", "us,5"}},
		{"even", "content: not a table", nil},
		{"q", "content: a query", nil},
	}
	for _, c := range cases {
		rendered, all, mode, _ := scanSince(t, src, c.coll, &first)
		if !strings.HasPrefix(mode, c.mode) {
			t.Errorf("%s: mode %q; want %q", c.coll, mode, c.mode)
		}
		if !slices.IsSorted(all) {
			t.Errorf("%s: ids not in byte order", c.coll)
		}
		if c.rendered != nil && !slices.Equal(rendered, c.rendered) {
			t.Errorf("%s: rendered %v; want %v", c.coll, rendered, c.rendered)
		}
		if c.rendered == nil && len(rendered) != len(all) {
			t.Errorf("%s: rendered %d of %d rows; content mode renders all", c.coll, len(rendered), len(all))
		}
	}
	// A table swapped in by renames has the same definitions, and rows older than the
	// parent's snapshot: it must not pass for the parent's table.
	testenv.Exec(t, dsn, `ALTER TABLE swap RENAME TO swap_old; ALTER TABLE swap_new RENAME TO swap`)
	if rendered, _, mode, _ := scanSince(t, src, "swap", &first); !strings.HasPrefix(mode, "content") || len(rendered) != 1 {
		t.Errorf("a table swapped in: mode %q, rendered %v; want content mode rendering its row", mode, rendered)
	}
	// A definition change rewrites no row but changes documents: every row is rendered.
	testenv.Exec(t, dsn, `ALTER TABLE nums RENAME COLUMN v TO w`)
	if _, _, mode, _ := scanSince(t, src, "nums", &first); !strings.Contains(mode, "definitions changed") {
		t.Errorf("after a column rename: mode %q; want content (definitions changed)", mode)
	}
	// Another cluster's parent, or one from the future, cannot be trusted.
	other := first
	other.System = "elsewhere:1"
	if _, _, mode, _ := scanSince(t, src, "parts", &other); !strings.Contains(mode, "another cluster") {
		t.Errorf("a parent from another cluster: mode %q", mode)
	}
	future := first
	future.PgSnapshot = fmt.Sprintf("%d:%d:", uint64(1)<<40, uint64(1)<<40)
	if _, _, mode, _ := scanSince(t, src, "parts", &future); !strings.Contains(mode, "backwards") {
		t.Errorf("a parent with later xids: mode %q", mode)
	}
}

// ScanChanged sends exactly the rows ScanSince renders, with the same documents, in
// the same order, and the collection's count, after random writes; it declines (no
// row sent) for a key Postgres does not guarantee unique, a table with inheritance
// children, a query, no parent, and more changed rows than its limit.
func TestScanChangedMatchesScanSince(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn,
		`CREATE TABLE items (id int PRIMARY KEY, v text)`, `INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 500) g`,
		`CREATE TABLE loose (id int, v text)`, `INSERT INTO loose SELECT g, 'v' FROM generate_series(1, 50) g`,
		`CREATE TABLE fam (id int PRIMARY KEY, v text)`, `CREATE TABLE fam_kid () INHERITS (fam)`, `INSERT INTO fam VALUES (1, 'a')`)
	src, err := pgsource.New(dsn, []pgsource.Collection{
		{Name: "items", Table: "items"}, {Name: "loose", Table: "loose", Key: "id"}, {Name: "fam", Table: "fam"},
		{Name: "q", Query: "SELECT * FROM items", Key: "id"},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, parent := scanSince(t, src, "items", nil)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	var stmts []string
	for range 40 {
		id := 1 + rng.IntN(600)
		switch rng.IntN(3) {
		case 0:
			stmts = append(stmts, fmt.Sprintf(`UPDATE items SET v = 'u%d' WHERE id = %d`, rng.IntN(1000), id))
		case 1:
			stmts = append(stmts, fmt.Sprintf(`INSERT INTO items VALUES (%d, 'i') ON CONFLICT (id) DO UPDATE SET v = 'c'`, id))
		default:
			stmts = append(stmts, fmt.Sprintf(`DELETE FROM items WHERE id = %d`, id))
		}
	}
	testenv.Exec(t, dsn, append(stmts, `UPDATE loose SET v = 'x' WHERE id = 3`, `UPDATE fam SET v = 'b'`)...)

	ctx := context.Background()
	sn, err := src.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close(ctx)
	cs := sn.(snapshot.ChangedScanner)
	ds := sn.(snapshot.DeltaSnapshot)
	var want []string
	var count int64
	if _, err := ds.ScanSince(ctx, "items", &parent, func(d snapshot.Document) error {
		count++
		if d.Body != nil {
			want = append(want, d.ID+"="+string(d.Body))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var got []string
	total, ok, err := cs.ScanChanged(ctx, "items", &parent, 1_000, func(d snapshot.Document) error {
		got = append(got, d.ID+"="+string(d.Body))
		return nil
	})
	if err != nil || !ok || total != count || !slices.Equal(got, want) {
		t.Errorf("ScanChanged(items) = %d rows, ok %v, %v, total %d;\nScanSince rendered %d rows of %d (%v)", len(got), ok, err, total, len(want), count, stmts)
	}
	if len(want) > 1 {
		if _, ok, err := cs.ScanChanged(ctx, "items", &parent, int64(len(want)-1), func(snapshot.Document) error {
			t.Error("ScanChanged over its limit sent a row")
			return nil
		}); ok || err != nil {
			t.Errorf("ScanChanged with %d changed and a limit of %d = ok %v, %v; want declined", len(want), len(want)-1, ok, err)
		}
	}
	for _, tt := range []struct {
		coll  string
		since *snapshot.Position
	}{{"loose", &parent}, {"fam", &parent}, {"q", &parent}, {"items", nil}} {
		if _, ok, err := cs.ScanChanged(ctx, tt.coll, tt.since, 1_000, func(snapshot.Document) error {
			t.Errorf("ScanChanged(%s) sent a row; want it declined", tt.coll)
			return nil
		}); ok || err != nil {
			t.Errorf("ScanChanged(%s, parent %v) = ok %v, %v; want declined", tt.coll, tt.since != nil, ok, err)
		}
	}
}

// TestOpenHoldingCountsNothingOfAHeldTable opens a snapshot that holds big while
// another session holds big's ACCESS EXCLUSIVE lock: any read of big's rows would
// wait for it. The snapshot opens, gives big the parent's fingerprint and its
// definitions, and declines big's changed rows; items, not held, is counted and
// its changes are told.
func TestOpenHoldingCountsNothingOfAHeldTable(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn,
		`CREATE TABLE big (id int PRIMARY KEY, v text)`, `INSERT INTO big SELECT g, 'v' FROM generate_series(1, 100) g`,
		`CREATE TABLE items (id int PRIMARY KEY, v text)`, `INSERT INTO items SELECT g, 'v' FROM generate_series(1, 10) g`)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "big", Table: "big"}, {Name: "items", Table: "items"}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, parent := scanSince(t, src, "items", nil)
	testenv.Exec(t, dsn, `ALTER TABLE big ADD COLUMN extra int NOT NULL DEFAULT 7`, `UPDATE items SET v = 'w' WHERE id = 3`)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	locker := testenv.Connect(t, ctx, dsn)
	defer locker.Close(context.Background())
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `LOCK TABLE big IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	sn, err := src.OpenHolding(ctx, &parent, []string{"big"})
	if err != nil {
		t.Fatalf("OpenHolding while big is locked: %v", err)
	}
	defer sn.Close(context.Background())
	pos := sn.Position()
	if got, want := pos.Fingerprints["big"], parent.Fingerprints["big"]; got != want || got == "" {
		t.Errorf("big's fingerprint %q; want the parent's %q", got, want)
	}
	if pos.Definitions["big"] == "" || pos.Definitions["big"] == parent.Definitions["big"] {
		t.Errorf("big's definitions %q, the parent's %q: want the new ones", pos.Definitions["big"], parent.Definitions["big"])
	}
	if pos.Fingerprints["items"] == parent.Fingerprints["items"] {
		t.Errorf("items' fingerprint %q is the parent's: its change was not counted", pos.Fingerprints["items"])
	}
	cs := sn.(snapshot.ChangedScanner)
	if _, ok, err := cs.ScanChanged(ctx, "big", &parent, 1_000, func(snapshot.Document) error { return nil }); ok || err != nil {
		t.Errorf("ScanChanged(big), held = ok %v, %v; want declined", ok, err)
	}
	var changed []string
	if _, ok, err := cs.ScanChanged(ctx, "items", &parent, 1_000, func(d snapshot.Document) error {
		changed = append(changed, d.ID)
		return nil
	}); !ok || err != nil || len(changed) != 1 {
		t.Errorf("ScanChanged(items) = %v, ok %v, %v; want the one row changed", changed, ok, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	n := 0
	if _, err := sn.(snapshot.DeltaSnapshot).ScanSince(ctx, "big", &parent, func(snapshot.Document) error { n++; return nil }); err != nil || n != 100 {
		t.Errorf("ScanSince(big), held = %d rows, %v; want all 100", n, err)
	}
}
