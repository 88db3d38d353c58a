package pgsource

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
)

// TestDigitRanges: the ranges of any first..last cover it exactly, without overlap,
// and within each range every id has as many digits and the same sign, so that the
// number's order (ascending, or descending for negative ids) is the ids' byte order.
func TestDigitRanges(t *testing.T) {
	edges := []int64{math.MinInt64, math.MinInt64 + 1, -1e18 - 1, -1e18, -1e18 + 1, -100, -99, -10, -9, -1,
		0, 1, 9, 10, 11, 99, 100, 1e17, 1e18 - 1, 1e18, math.MaxInt64 - 1, math.MaxInt64}
	var pairs [][2]int64
	for _, a := range edges {
		for _, b := range edges {
			pairs = append(pairs, [2]int64{a, b})
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		// Any magnitude: a random number of digits, either sign.
		a := rng.Int64N(pow10(rng.IntN(18)+1)) * (1 - 2*rng.Int64N(2))
		b := rng.Int64N(pow10(rng.IntN(18)+1)) * (1 - 2*rng.Int64N(2))
		pairs = append(pairs, [2]int64{a, b})
	}
	for _, p := range pairs {
		first, last := p[0], p[1]
		if first > last {
			continue
		}
		rs := digitRanges(first, last)
		slices.SortFunc(rs, func(x, y idRange) int { return cmpInt(x.lo, y.lo) })
		if len(rs) == 0 || rs[0].lo != first || rs[len(rs)-1].hi != last {
			t.Fatalf("%d..%d: ranges %v do not span it", first, last, rs)
		}
		for i, r := range rs {
			if i > 0 && rs[i-1].hi+1 != r.lo {
				t.Fatalf("%d..%d: ranges %v leave a gap or overlap", first, last, rs)
			}
			lo, hi := strconv.FormatInt(r.lo, 10), strconv.FormatInt(r.hi, 10)
			if len(lo) != len(hi) || (r.lo < 0) != (r.hi < 0) || r.desc != (r.lo < 0) {
				t.Fatalf("%d..%d: range %+v mixes digit counts or signs", first, last, r)
			}
			if r.lo < r.hi {
				next := strconv.FormatInt(r.lo+1, 10)
				if (lo < next) == r.desc {
					t.Fatalf("%d..%d: range %+v: %s and %s are not in its byte order", first, last, r, lo, next)
				}
			}
		}
	}
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestScanSinceInDigitOrder: a large table keyed by an integer column is read by one
// index scan per digit count, merged, and comes out as Postgres's own ORDER BY id
// COLLATE "C" says, documents and all: smallint, integer and bigint keys over their
// whole ranges, and rows changed since a parent (the row-version read). Every scan
// reads the snapshot the read opened, whatever commits after it. Ids over more digit
// counts than maxDigitScans are sorted by Postgres.
func TestScanSinceInDigitOrder(t *testing.T) {
	// A server of its own: a transaction elsewhere holding xmin back would put rows
	// the parent saw in the row-version read, rendered needlessly (design.md).
	dsn, _ := testenv.PostgresServer(t)
	rng := rand.New(rand.NewPCG(7, 8))
	spread := func(lo, hi int64, n int) []int64 {
		var ids []int64
		for _, v := range []int64{lo, hi, 0, -1, 1, 9, 10, -9, -10} {
			if v >= lo && v <= hi {
				ids = append(ids, v)
			}
		}
		for range n {
			// Every digit count alike, not every value alike.
			d := pow10(rng.IntN(19) + 1)
			if d <= 0 {
				d = math.MaxInt64
			}
			v := rng.Int64N(d)
			if rng.IntN(2) == 0 {
				v = -v
			}
			if v >= lo && v <= hi {
				ids = append(ids, v)
			}
		}
		return ids
	}
	tables := []struct {
		name, typ string
		ids       []int64
		merged    bool
	}{
		{"small", "smallint", spread(math.MinInt16, math.MaxInt16, 3000), true},
		{"medium", "integer", spread(-99, 99_999_999, 3000), true},
		{"huge", "bigint", append(spread(math.MinInt64, -1e17, 300), spread(1e17, math.MaxInt64, 300)...), true},
		{"wide", "integer", spread(math.MinInt32, math.MaxInt32, 3000), false},
	}
	var colls []Collection
	for _, tb := range tables {
		testenv.Exec(t, dsn, fmt.Sprintf(`CREATE TABLE %s (id %s PRIMARY KEY, v text)`, tb.name, tb.typ))
		testenv.Exec(t, dsn, fmt.Sprintf(`INSERT INTO %s SELECT DISTINCT g, 'v' || g FROM unnest('%s'::int8[]) g`, tb.name, int8Array(tb.ids)))
		colls = append(colls, Collection{Name: tb.name, Table: tb.name})
	}
	src, err := New(dsn, colls)
	if err != nil {
		t.Fatal(err)
	}
	src.PartitionMinRows = 1
	ctx := context.Background()
	conn := testenv.Connect(t, ctx, dsn)
	defer conn.Close(ctx)
	oracle := func(table string, changed bool) []string {
		t.Helper()
		doc := "to_json(t.*)::text"
		if changed {
			doc = "CASE WHEN v LIKE 'changed%' THEN " + doc + " END"
		}
		rows, err := conn.Query(ctx, `SELECT id::text || '=' || coalesce(`+doc+`, '') FROM `+table+` AS t ORDER BY id::text COLLATE "C"`)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	read := func(sn *snap, table string, since *snapshot.Position) (got []string, mode string) {
		t.Helper()
		m, err := sn.ScanSince(ctx, table, since, func(d snapshot.Document) error {
			got = append(got, d.ID+"="+string(d.Body))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got, m.String()
	}

	before := map[string][]string{}
	for _, tb := range tables {
		before[tb.name] = oracle(tb.name, false)
	}
	sn, err := src.OpenSince(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	parent := sn.Position()
	for _, tb := range tables {
		// Commits after the snapshot: no scan may see them.
		testenv.Exec(t, dsn, `DELETE FROM `+tb.name+` WHERE id IN (SELECT id FROM `+tb.name+` ORDER BY random() LIMIT 5)`,
			`UPDATE `+tb.name+` SET v = 'changed ' || v WHERE id IN (SELECT id FROM `+tb.name+` ORDER BY random() LIMIT 20)`)
	}
	for _, tb := range tables {
		ranges, err := sn.(*snap).digitScans(ctx, sn.(*snap).reads[tb.name])
		if err != nil {
			t.Fatal(err)
		}
		if merged := len(ranges) > 1; merged != tb.merged {
			t.Errorf("%s: read in %d index scans; want merged %v", tb.name, len(ranges), tb.merged)
		}
		got, _ := read(sn.(*snap), tb.name, nil)
		if diff := cmp.Diff(before[tb.name], got); diff != "" {
			t.Errorf("%s (%d rows): ScanSince differs from ORDER BY id COLLATE \"C\" (-want +got):\n%s", tb.name, len(got), diff)
		}
	}
	if err := sn.Close(ctx); err != nil {
		t.Fatal(err)
	}

	next, err := src.OpenSince(ctx, &parent)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close(ctx)
	for _, tb := range tables {
		got, mode := read(next.(*snap), tb.name, &parent)
		if mode != "row-version" {
			t.Fatalf("%s: read by %s; want row-version", tb.name, mode)
		}
		if diff := cmp.Diff(oracle(tb.name, true), got); diff != "" {
			t.Errorf("%s: the rows changed since the parent differ (-want +got):\n%s", tb.name, diff)
		}
	}
}

func int8Array(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return "{" + strings.Join(s, ",") + "}"
}

func pow10(d int) int64 {
	p := int64(1)
	for range d {
		p *= 10
	}
	return p
}

// TestDigitScansFallBack: a merged read that cannot have its extra connections (a
// role's connection limit), or whose extra connections would wait for a lock (a DDL
// statement queued behind the snapshot's transaction, which its scans would wait
// behind while it waits for them), reads the table sorted by Postgres instead, and
// reads it whole; the DDL then runs once the snapshot ends.
func TestDigitScansFallBack(t *testing.T) {
	role := testenv.Role(t, "snapflip_one_conn")
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE nums (id bigint PRIMARY KEY, v text)`,
		`INSERT INTO nums SELECT g, 'v' || g FROM generate_series(-500, 5000) g`)
	ctx := context.Background()
	conn := testenv.Connect(t, ctx, dsn)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT id::text FROM nums ORDER BY id::text COLLATE "C"`)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	read := func(t *testing.T, dsn string, during func(sn *snap)) {
		t.Helper()
		src, err := New(dsn, []Collection{{Name: "nums", Table: "nums"}})
		if err != nil {
			t.Fatal(err)
		}
		src.PartitionMinRows = 1
		sn, err := src.OpenSince(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sn.Close(ctx)
		if ranges, err := sn.(*snap).digitScans(ctx, sn.(*snap).reads["nums"]); err != nil || len(ranges) != 7 {
			t.Fatalf("nums would be read in %d index scans (%v); want 7", len(ranges), err)
		}
		during(sn.(*snap))
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		var got []string
		if _, err := sn.(*snap).ScanSince(ctx, "nums", nil, func(d snapshot.Document) error {
			got = append(got, d.ID)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the ids read differ from ORDER BY id COLLATE \"C\" (-want +got):\n%s", diff)
		}
	}

	t.Run("connection limit", func(t *testing.T) {
		testenv.Exec(t, dsn, `ALTER ROLE `+role+` CONNECTION LIMIT 1`, `GRANT SELECT ON nums TO `+role)
		read(t, testenv.AsRole(t, dsn, role), func(*snap) {})
	})

	t.Run("DDL queued", func(t *testing.T) {
		var done <-chan error
		read(t, dsn, func(*snap) { done = queueBehind(t, dsn, `ALTER TABLE nums ADD COLUMN w int`) })
		if err := <-done; err != nil {
			t.Errorf("the ALTER TABLE queued behind the read: %v", err)
		}
	})
}

// queueBehind runs stmt on a connection of its own and returns once it waits for a
// lock; its result arrives on the channel.
func queueBehind(t *testing.T, dsn, stmt string) <-chan error {
	t.Helper()
	ctx := context.Background()
	ddl := testenv.Connect(t, ctx, dsn)
	t.Cleanup(func() { ddl.Close(ctx) })
	var pid int
	if err := ddl.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	watch := testenv.Connect(t, ctx, dsn)
	t.Cleanup(func() { watch.Close(ctx) })
	done := make(chan error, 1)
	go func() {
		_, err := ddl.Exec(ctx, stmt)
		done <- err
	}()
	testenv.Eventually(t, 30*time.Second, func() error {
		var waiting bool
		if err := watch.QueryRow(ctx, `SELECT coalesce((SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1), false)`, pid).Scan(&waiting); err != nil {
			return err
		}
		if !waiting {
			return fmt.Errorf("%q does not wait for its lock yet", stmt)
		}
		return nil
	})
	return done
}

// TestPartitionReaderLockTimeout: a parallel reader's scan, on a connection that
// imported the snapshot, behind a DDL statement queued behind the snapshot's
// transaction fails within its lock_timeout, naming the lock, rather than waiting for
// a transaction that waits for it; the DDL then runs once the snapshot ends.
func TestPartitionReaderLockTimeout(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE parted (id int PRIMARY KEY, v text)`,
		`INSERT INTO parted SELECT g, 'v' FROM generate_series(1, 1000) g`)
	src, err := New(dsn, []Collection{{Name: "parted", Table: "parted"}})
	if err != nil {
		t.Fatal(err)
	}
	src.Readers, src.PartitionMinRows = 2, 1
	ctx := context.Background()
	sn, err := src.OpenSince(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := queueBehind(t, dsn, `ALTER TABLE parted ADD COLUMN w int`)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = sn.(*snap).ScanPartition(sctx, "parted", 1, 2, func(snapshot.Document) error { return nil })
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Errorf("a parallel reader behind a queued ALTER TABLE: %v; want lock_timeout's error (55P03)", err)
	}
	if err := sn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("the ALTER TABLE queued behind the read: %v", err)
	}
}
