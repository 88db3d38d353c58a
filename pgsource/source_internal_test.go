package pgsource

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
)

// TestXminWithoutText: xminSQL says what xmin::text::bigint says of every row version,
// inserted, updated or frozen, in separate transactions, read in a REPEATABLE READ
// transaction while others commit; and the arithmetic behind it restores any id from
// its ages across the whole 32-bit range (ids past 2^31 and past a wraparound from the
// age's origin included), evaluated by Postgres; as does fingerprint's window test.
func TestXminWithoutText(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE x (id int PRIMARY KEY, v text)`)
	for i := range 20 {
		testenv.Exec(t, dsn, `INSERT INTO x SELECT g, 'v' FROM generate_series(`+strconv.Itoa(i*50)+`, `+strconv.Itoa(i*50+49)+`) g`)
		if i == 10 {
			testenv.Exec(t, dsn, `VACUUM FREEZE x`)
		}
	}
	testenv.Exec(t, dsn, `UPDATE x SET v = 'w' WHERE id % 7 = 0`)
	ctx := context.Background()
	conn := testenv.Connect(t, ctx, dsn)
	defer conn.Close(ctx)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	check := func() {
		t.Helper()
		var rows, differ int
		err := tx.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE `+xminSQL+` <> `+rowAlias+`.xmin::text::bigint) FROM x AS `+rowAlias).Scan(&rows, &differ)
		if err != nil {
			t.Fatal(err)
		}
		if rows != 1000 || differ != 0 {
			t.Fatalf("%d of %d row versions have another xmin by xminSQL", differ, rows)
		}
	}
	check()
	testenv.Exec(t, dsn, `INSERT INTO x VALUES (5000, 'later')`, `UPDATE x SET v = 'z' WHERE id < 100`)
	check()

	// The arithmetic: for an origin o and an id x, age(y) = int32(o - y).
	expr := xminFrom("$1::int4", "$2::int4", "-1")
	rng := rand.New(rand.NewPCG(1, 2))
	edges := []uint32{3, 4, 1<<31 - 1, 1 << 31, 1<<31 + 3, 1<<32 - 1, 1<<32 - 3}
	for i := range 2000 {
		o, x := rng.Uint32(), rng.Uint32()
		if i < len(edges)*len(edges) {
			o, x = edges[i/len(edges)], edges[i%len(edges)]
		}
		if x < 3 || int32(o-x) == 1<<31-1 {
			continue // permanent ids and the one id an age cannot tell from them
		}
		var got int64
		if err := conn.QueryRow(ctx, "SELECT "+expr, int32(o-3), int32(o-x)).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != int64(x) {
			t.Fatalf("origin %d, id %d: restored %d", o, x, got)
		}
	}

	// fingerprint's window: x is in it exactly when it is on the circle from lo to the
	// origin, whatever the ids' places on the circle, for an origin less than 2^31
	// after lo (the pass falls back otherwise, age(lo) being negative).
	window := windowFrom("$1::int4", "$2::int4")
	for i := range 2000 {
		o, lo, x := rng.Uint32(), rng.Uint32(), rng.Uint32()
		if i < len(edges)*len(edges) {
			o, x = edges[i/len(edges)], edges[i%len(edges)]
			lo = o - uint32(i%5)*(1<<29)
		}
		if o-lo >= 1<<31 {
			if int32(o-lo) >= 0 {
				t.Fatalf("origin %d, lo %d: age(lo) %d is not negative", o, lo, int32(o-lo))
			}
			continue
		}
		var got bool
		if err := conn.QueryRow(ctx, "SELECT "+window, int32(o-x), int32(o-lo)).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := x-lo <= o-lo; got != want {
			t.Fatalf("origin %d, lo %d, id %d: in the window %v; want %v", o, lo, x, got, want)
		}
	}
}

// TestKeptConnectionIsRenewed: a snapshot runs on the connection the last one left
// while that connected less than keepFor ago, and on a new one after, which has the
// role's settings as they are now.
func TestKeptConnectionIsRenewed(t *testing.T) {
	role := testenv.Role(t, "renewed")
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE SCHEMA other`, `CREATE TABLE public.kv (id int PRIMARY KEY)`, `CREATE TABLE other.kv (id int PRIMARY KEY)`,
		`INSERT INTO other.kv VALUES (1)`, `GRANT USAGE ON SCHEMA other TO `+role, `GRANT SELECT ON public.kv, other.kv TO `+role)
	src, err := New(testenv.AsRole(t, dsn, role), []Collection{{Name: "kv", Table: "kv", Key: "id"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer src.Close(ctx)
	// open reads the collection and returns its row count and the session's pid.
	open := func() (int, uint32) {
		t.Helper()
		sn, err := src.Open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer sn.Close(ctx)
		n := 0
		if err := sn.Scan(ctx, "kv", func(snapshot.Document) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n, sn.(*snap).conn.PgConn().PID()
	}
	n, first := open()
	if n != 0 {
		t.Fatalf("read %d rows of public.kv, want 0", n)
	}
	testenv.Exec(t, dsn, `ALTER ROLE `+role+` SET search_path = other`)
	if n, pid := open(); pid != first || n != 0 {
		t.Fatalf("second snapshot: session %d (first %d), %d rows; want the kept session, which reads public.kv still", pid, first, n)
	}
	defer func(d time.Duration) { keepFor = d }(keepFor)
	keepFor = 0
	_, _ = open() // closes the kept session after its snapshot
	if n, pid := open(); pid == first || n != 1 {
		t.Fatalf("after keepFor: session %d (first %d), %d rows; want a new session, which reads other.kv (1 row)", pid, first, n)
	}
}

// fingerprint's one pass against a parent: nothing changed keeps the parent's
// fingerprint and costs ScanChanged no read; rows updated in place (HOT, scattered
// over the table), inserted and deleted as many as inserted (the count unchanged)
// give a new fingerprint, and ScanChanged sends exactly the rows ScanSince renders
// (the same documents, in the same order) by probing their pages, with no sequential
// scan; rows only deleted give a new fingerprint and no changed row. A partitioned
// table, whose partitions' ctids overlap, gets the same rows by scanning.
//
// The test has a Postgres server of its own: a transaction running elsewhere in the
// cluster when the parent's snapshot is taken would put rows the parent saw in the
// window (TestFingerprintPassHeldBack), and "nothing changed" would not hold.
func TestFingerprintPass(t *testing.T) {
	dsn, _ := testenv.PostgresServer(t)
	testenv.Exec(t, dsn, `CREATE TABLE big (id int PRIMARY KEY, v text) WITH (fillfactor = 50)`,
		`INSERT INTO big SELECT g, 'v' || g FROM generate_series(1, 100000) g`, `VACUUM FREEZE big`,
		`CREATE TABLE parts (id int, region int, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region)`,
		`CREATE TABLE parts_1 PARTITION OF parts FOR VALUES IN (1)`, `CREATE TABLE parts_2 PARTITION OF parts FOR VALUES IN (2)`,
		`INSERT INTO parts SELECT g, 1 + g % 2, 'p' FROM generate_series(1, 2000) g`)
	src, err := New(dsn, []Collection{{Name: "items", Table: "big"}, {Name: "parts", Table: "parts"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	open := func(since *snapshot.Position) *snap {
		t.Helper()
		sn, err := src.OpenSince(ctx, since)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sn.Close(ctx) })
		return sn.(*snap)
	}
	seqScans := func(sn *snap) (n int64) {
		t.Helper()
		if err := sn.tx.QueryRow(ctx, `SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'big'::regclass`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	changedIn := func(sn *snap, coll string, since *snapshot.Position) (got []string, total int64, ok bool) {
		t.Helper()
		total, ok, err := sn.ScanChanged(ctx, coll, since, 1_000, func(d snapshot.Document) error {
			got = append(got, d.ID+"="+string(d.Body))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got, total, ok
	}
	changed := func(sn *snap, since *snapshot.Position) ([]string, int64, bool) {
		t.Helper()
		return changedIn(sn, "items", since)
	}
	rendered := func(sn *snap, coll string, since *snapshot.Position) (want []string) {
		t.Helper()
		if _, err := sn.ScanSince(ctx, coll, since, func(d snapshot.Document) error {
			if d.Body != nil {
				want = append(want, d.ID+"="+string(d.Body))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return want
	}

	parent := open(nil).Position()
	if _, ok := fingerprintRows(parent.Fingerprints["items"]); !ok {
		t.Fatalf("a table's fingerprint %q holds no row count", parent.Fingerprints["items"])
	}
	same := open(&parent)
	for _, coll := range []string{"items", "parts"} {
		if fp := same.Position().Fingerprints[coll]; fp != parent.Fingerprints[coll] {
			t.Errorf("nothing changed: %s's fingerprint %s, the parent's %s", coll, fp, parent.Fingerprints[coll])
		}
	}
	before := seqScans(same)
	if got, total, ok := changed(same, &parent); !ok || len(got) != 0 || total != 100000 || seqScans(same) != before {
		t.Errorf("nothing changed: ScanChanged sent %d rows, ok %v, total %d, %d sequential scans", len(got), ok, total, seqScans(same)-before)
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for i := range 48 {
		switch {
		case i < 40:
			testenv.Exec(t, dsn, `UPDATE big SET v = 'u`+strconv.Itoa(i)+`' WHERE id = `+strconv.Itoa(1+rng.IntN(100000)))
		case i < 44:
			testenv.Exec(t, dsn, `INSERT INTO big VALUES (`+strconv.Itoa(100000+i)+`, 'new')`)
		default:
			testenv.Exec(t, dsn, `DELETE FROM big WHERE id = `+strconv.Itoa(i))
		}
	}
	testenv.Exec(t, dsn, `UPDATE parts SET v = 'q' WHERE id IN (5, 6, 1500)`, `INSERT INTO parts VALUES (3000, 2, 'n')`)
	sn := open(&parent)
	if fp := sn.Position().Fingerprints["items"]; fp == parent.Fingerprints["items"] {
		t.Errorf("rows changed: the fingerprint is still the parent's")
	}
	want := rendered(sn, "items", &parent)
	before = seqScans(sn)
	got, total, ok := changed(sn, &parent)
	if !ok || total != 100000 || !slices.Equal(got, want) {
		t.Errorf("ScanChanged = %d rows, ok %v, total %d; ScanSince rendered %d:\n%v\n%v", len(got), ok, total, len(want), got, want)
	}
	if n := seqScans(sn) - before; n != 0 {
		t.Errorf("ScanChanged of %d changed rows in %d pages scanned the table %d times; want their pages probed", len(got), len(sn.reads["items"].pass.blocks), n)
	}
	// More changed than the limit: declined, without a scan either.
	before = seqScans(sn)
	if _, ok, err := sn.ScanChanged(ctx, "items", &parent, int64(len(got)-1), func(snapshot.Document) error {
		t.Error("ScanChanged over its limit sent a row")
		return nil
	}); ok || err != nil || seqScans(sn) != before {
		t.Errorf("ScanChanged of %d changed rows with a limit of %d = ok %v, %v, %d scans; want declined, none", len(got), len(got)-1, ok, err, seqScans(sn)-before)
	}
	if got, total, ok := changedIn(sn, "parts", &parent); !ok || total != 2001 || len(got) != 4 || !slices.Equal(got, rendered(sn, "parts", &parent)) {
		t.Errorf("ScanChanged(parts) = %v, ok %v, total %d; ScanSince rendered %v", got, ok, total, rendered(sn, "parts", &parent))
	}

	now := sn.Position()
	testenv.Exec(t, dsn, `DELETE FROM big WHERE id = 7`)
	gone := open(&now)
	if fp := gone.Position().Fingerprints["items"]; fp == now.Fingerprints["items"] {
		t.Errorf("a row deleted: the fingerprint is still the parent's")
	}
	if got, total, ok := changed(gone, &now); !ok || len(got) != 0 || total != 99999 {
		t.Errorf("a row deleted: ScanChanged sent %d rows, ok %v, total %d; want none of 99999", len(got), ok, total)
	}
}

// A transaction held open across the parent's snapshot holds its xmin back, so rows
// the parent saw fall in the window: a table whose key Postgres does not guarantee
// unique (whose changed rows cannot be read alone) keeps the hashing pass and is told
// unchanged exactly; a table with a primary key is taken as changed, and ScanChanged
// sends its rows in the window, which the parent holds as they are.
func TestFingerprintPassHeldBack(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE keyed (id int PRIMARY KEY, v text)`, `CREATE TABLE loose (id int, v text)`)
	ctx := context.Background()
	holder := testenv.Connect(t, ctx, dsn)
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT txid_current()`); err != nil {
		t.Fatal(err)
	}
	testenv.Exec(t, dsn, `INSERT INTO keyed SELECT g, 'k' FROM generate_series(1, 100) g`, `INSERT INTO loose SELECT g, 'l' FROM generate_series(1, 100) g`)
	src, err := New(dsn, []Collection{{Name: "keyed", Table: "keyed"}, {Name: "loose", Table: "loose", Key: "id"}})
	if err != nil {
		t.Fatal(err)
	}
	first, err := src.OpenSince(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	parent := first.Position()
	first.Close(ctx)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	sn, err := src.OpenSince(ctx, &parent)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close(ctx)
	if fp := sn.Position().Fingerprints["loose"]; fp != parent.Fingerprints["loose"] {
		t.Errorf("loose, unchanged: fingerprint %s, the parent's %s", fp, parent.Fingerprints["loose"])
	}
	if sn.(*snap).reads["loose"].pass != nil {
		t.Error("loose took the window's pass; want the hashing pass")
	}
	var got int
	total, ok, err := sn.(snapshot.ChangedScanner).ScanChanged(ctx, "keyed", &parent, 1_000, func(snapshot.Document) error { got++; return nil })
	if err != nil || !ok || total != 100 || got != 100 {
		t.Errorf("keyed, its rows in the window: ScanChanged sent %d rows, ok %v, total %d, %v; want all 100", got, ok, total, err)
	}
}
