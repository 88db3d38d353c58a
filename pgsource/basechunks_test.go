package pgsource_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// chunkCounter is the base snapshot OpenBase returns, telling how it was read.
type chunkCounter interface {
	Chunks() pgsource.BaseChunks
}

// A base read in chunks, each in a transaction of its own, while the table changes
// under it (updates, a row updated several times, inserts behind and ahead of the
// read, deletes, ids moved across the read's place), plus its catch-up since the
// base's position, equals Postgres at the catch-up's snapshot: rows unchanged since
// the base's position are taken from the base, every other from the catch-up.
func TestChunkedBaseAndCatchUpEqualOneSnapshot(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { chunkedBaseAgainstPostgres(t, seed) })
	}
}

// A base cut into parts (as the syncer replicas share it), the parts read in any
// order, each in chunks of its own while rows change, plus its catch-up, equals
// Postgres at the catch-up's snapshot: every id once, in its part, in byte order.
func TestPartedBaseAndCatchUpEqualOneSnapshot(t *testing.T) {
	for _, seed := range []uint64{4, 5} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { baseAgainstPostgres(t, seed, true) })
	}
}

func chunkedBaseAgainstPostgres(t *testing.T, seed uint64) { baseAgainstPostgres(t, seed, false) }

// readParts cuts bs's collection acct into parts of about rows ids and reads them,
// in an order rng draws, each from its own snapshot at bs's position; each is sent
// to fn in byte order, the parts in theirs.
func readParts(t *testing.T, src *pgsource.Source, bs snapshot.SourceSnapshot, rng *rand.Rand, fn func(snapshot.Document) error) {
	ctx := context.Background()
	cuts, _, err := bs.(snapshot.PartedSnapshot).BaseParts(ctx, "acct", 2000)
	if err != nil {
		t.Fatal(err)
	}
	if len(cuts) < 4 {
		t.Fatalf("cuts %v; want about one per 2,000 of 12,300 ids", cuts)
	}
	pos := bs.Position()
	_ = bs.Close(ctx)
	parts := make([][]snapshot.Document, len(cuts)+1)
	for _, i := range rng.Perm(len(parts)) {
		after, through := "", ""
		if i > 0 {
			after = cuts[i-1]
		}
		if i < len(cuts) {
			through = cuts[i]
		}
		ps, err := src.ReadBasePart(ctx, "acct", pos, after, through)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ps.(snapshot.DeltaSnapshot).ScanSince(ctx, "acct", nil, func(d snapshot.Document) error {
			if d.ID <= after || (through != "" && d.ID > through) {
				return fmt.Errorf("part %d (%q, %q] sent id %s", i, after, through, d.ID)
			}
			parts[i] = append(parts[i], d)
			return nil
		})
		_ = ps.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(parts[i]) == 0 {
			t.Fatalf("part %d (%q, %q] is empty", i, after, through)
		}
	}
	for _, part := range parts {
		for _, d := range part {
			if err := fn(d); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func baseAgainstPostgres(t *testing.T, seed uint64, parted bool) {
	dsn := testenv.Postgres(t)
	// Ids of several digit counts and both signs: the base reads them in byte order
	// through one index scan per range.
	testenv.Exec(t, dsn, `CREATE TABLE acct (id bigint PRIMARY KEY, v int NOT NULL, note text)`,
		`INSERT INTO acct SELECT g, g % 97, 'n' || g FROM generate_series(1, 12000) g`,
		`INSERT INTO acct SELECT -g, g, NULL FROM generate_series(1, 300) g`,
		`INSERT INTO acct VALUES (9223372036854775807, 1, 'max'), (-9223372036854775808, 2, 'min')`)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "acct", Table: "acct", Key: "id"}})
	if err != nil {
		t.Fatal(err)
	}
	src.PartitionMinRows, src.BaseChunkRows = 100, 1500
	ctx := context.Background()
	w := testenv.Connect(t, ctx, dsn)
	defer w.Close(ctx)
	rng := rand.New(rand.NewPCG(seed, seed))
	exec := func(sql string, args ...any) {
		if _, err := w.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// change writes near id, the last id the base sent: behind it and ahead of it,
	// in its range and in others.
	change := func(id int64) {
		near := id + rng.Int64N(200) - 100
		far := rng.Int64N(14000) - 1000
		switch rng.IntN(7) {
		case 0:
			exec(`UPDATE acct SET v = v + 1 WHERE id = $1`, near)
		case 1: // several times in one chunk's window
			for range 3 {
				exec(`UPDATE acct SET v = v + 1, note = 'again' WHERE id = $1`, far)
			}
		case 2:
			exec(`INSERT INTO acct VALUES ($1, 0, 'new') ON CONFLICT (id) DO NOTHING`, near+20000)
		case 3:
			exec(`INSERT INTO acct VALUES ($1, 0, 'new') ON CONFLICT (id) DO NOTHING`, far*3)
		case 4:
			exec(`DELETE FROM acct WHERE id = $1`, near)
		case 5: // an id moved across the read's place, both ways
			exec(`UPDATE acct SET id = $2 WHERE id = $1 AND NOT EXISTS (SELECT FROM acct WHERE id = $2)`, near, far+30000)
		case 6:
			exec(`DELETE FROM acct WHERE id = $1`, far)
		}
	}
	bs, err := src.OpenBase(ctx, "acct")
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close(ctx)
	base := map[string]string{}
	n, prev := 0, ""
	scan := func(fn func(snapshot.Document) error) error {
		_, err := bs.(snapshot.DeltaSnapshot).ScanSince(ctx, "acct", nil, fn)
		return err
	}
	if parted {
		scan = func(fn func(snapshot.Document) error) error {
			readParts(t, src, bs, rng, fn)
			return nil
		}
	}
	err = scan(func(d snapshot.Document) error {
		if d.ID <= prev && n > 0 {
			return fmt.Errorf("id %s sent after %s: not in byte order", d.ID, prev)
		}
		prev = d.ID
		base[d.ID] = string(d.Body)
		if n++; n%40 == 0 {
			id, _ := strconv.ParseInt(d.ID, 10, 64)
			change(id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	basePos := bs.Position()
	if c := bs.(chunkCounter).Chunks(); !parted && (c.Chunks < 8 || c.Whole != "") {
		t.Fatalf("read as %+v; want a chunk per 1,500 rows", c)
	}
	change(5000)

	v, err := src.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close(ctx)
	got := map[string]string{}
	mode, err := v.(snapshot.DeltaSnapshot).ScanSince(ctx, "acct", &basePos, func(d snapshot.Document) error {
		if d.Body != nil {
			got[d.ID] = string(d.Body)
			return nil
		}
		b, ok := base[d.ID]
		if !ok {
			return fmt.Errorf("id %s unchanged since the base's position, but not in the base", d.ID)
		}
		got[d.ID] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if mode.Kind != snapshot.KindRowVersion {
		t.Fatalf("catch-up mode %v; want row versions", mode)
	}
	want := map[string]string{}
	if err := v.Scan(ctx, "acct", func(d snapshot.Document) error { want[d.ID] = string(d.Body); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("base plus catch-up holds %d rows; Postgres %d", len(got), len(want))
	}
	for id, body := range want {
		if got[id] != body {
			t.Errorf("id %s: base plus catch-up %q; Postgres %q", id, got[id], body)
		}
	}
}

// A base no index scan reads in byte order (its ids are text) is read in one
// transaction, and says why; it is not cut into parts for the replicas to share.
func TestBaseOfTextIDsIsOneTransaction(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE tags (name text PRIMARY KEY)`,
		`INSERT INTO tags SELECT 'tag' || g FROM generate_series(1, 500) g`)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "tags", Table: "tags", Key: "name"}})
	if err != nil {
		t.Fatal(err)
	}
	src.PartitionMinRows, src.BaseTransaction = 100, time.Millisecond
	ctx := context.Background()
	bs, err := src.OpenBase(ctx, "tags")
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close(ctx)
	if cuts, _, err := bs.(snapshot.PartedSnapshot).BaseParts(ctx, "tags", 50); err != nil || len(cuts) != 0 {
		t.Fatalf("a base of text ids cut at %q (%v); want no parts", cuts, err)
	}
	n := 0
	if _, err := bs.(snapshot.DeltaSnapshot).ScanSince(ctx, "tags", nil, func(snapshot.Document) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if c := bs.(chunkCounter).Chunks(); n != 500 || c.Chunks != 1 || c.Whole == "" {
		t.Errorf("read %d rows as %+v; want 500 in one transaction, with the reason", n, c)
	}
}

// A reader that stalls in the middle of a chunk holds no source transaction past
// base_transaction: Postgres ends the chunk's transactions (no backend of the
// database holds back vacuum any more), and the base fails rather than go on.
func TestStalledChunkHoldsNoTransaction(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE acct (id bigint PRIMARY KEY, v int NOT NULL)`,
		`INSERT INTO acct SELECT g, g FROM generate_series(1, 20000) g`)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "acct", Table: "acct", Key: "id"}})
	if err != nil {
		t.Fatal(err)
	}
	src.PartitionMinRows, src.BaseTransaction = 100, 500*time.Millisecond
	ctx := context.Background()
	watch := testenv.Connect(t, ctx, dsn)
	defer watch.Close(ctx)
	bs, err := src.OpenBase(ctx, "acct")
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close(ctx)
	n := 0
	_, err = bs.(snapshot.DeltaSnapshot).ScanSince(ctx, "acct", nil, func(snapshot.Document) error {
		if n++; n == 10 {
			// Stalled: wait until no backend of the database holds an xmin.
			testenv.Eventually(t, 30*time.Second, func() error {
				var holding int
				if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL`).Scan(&holding); err != nil {
					return err
				}
				if holding > 0 {
					return fmt.Errorf("%d backends still hold back vacuum", holding)
				}
				return nil
			})
		}
		return nil
	})
	if err == nil {
		t.Fatalf("the base read %d rows after its transactions were ended; want it to fail", n)
	}
	t.Logf("the stalled base failed after %d rows: %v", n, err)
}
