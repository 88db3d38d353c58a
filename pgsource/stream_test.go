package pgsource_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// streamSource starts reading the replication stream for collections over dsn, and
// returns once the stream is read.
func streamSource(t *testing.T, dsn string, slot string, cs []pgsource.Collection) *pgsource.Source {
	t.Helper()
	src, err := pgsource.New(dsn, cs)
	if err != nil {
		t.Fatal(err)
	}
	stop := startStream(t, src, slot, nil)
	t.Cleanup(func() {
		stop()
		testenv.DropSlot(t, dsn, slot)
	})
	return src
}

// startStream reads the stream of src until the returned function is called; it
// returns once the stream is read.
func startStream(t *testing.T, src *pgsource.Source, slot string, log *slog.Logger) (stop func()) {
	t.Helper()
	cfg := pgsource.StreamConfig{LogicalConfig: pgsource.LogicalConfig{Publication: slot, Slot: slot}}
	if log != nil {
		cfg.Observer = snapshot.ObserverFunc(func(ctx context.Context, e snapshot.Event) {
			log.InfoContext(ctx, e.Kind.String(), e.Attrs...)
		})
	}
	return startStreamWith(t, src, cfg)
}

// startStreamWith is startStream with a config of the caller's.
func startStreamWith(t *testing.T, src *pgsource.Source, cfg pgsource.StreamConfig) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- src.Stream(ctx, cfg, nil, nil)
	}()
	stop = func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) && !errors.Is(err, pgsource.ErrTablesChanged) {
			t.Errorf("Stream: %v", err)
		}
	}
	testenv.Eventually(t, time.Minute, func() error {
		select {
		case err := <-done:
			t.Fatalf("Stream: %v", err)
		default:
		}
		if !src.Streaming() {
			return errors.New("not streaming yet")
		}
		return nil
	})
	return stop
}

// keyed opens a snapshot since parent and returns what ScanKeyed sends for coll
// ("id" or "id-" for a deleted one), whether it knew, and the snapshot's position.
func keyed(t *testing.T, src *pgsource.Source, coll string, parent *snapshot.Position) ([]string, bool, snapshot.Position) {
	t.Helper()
	ctx := context.Background()
	sn, err := src.OpenSince(ctx, parent)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close(ctx)
	var got []string
	ok, err := sn.(snapshot.KeyedScanner).ScanKeyed(ctx, coll, parent, 1000, func(d snapshot.Document) error {
		if d.Body == nil {
			got = append(got, d.ID+"-")
		} else {
			got = append(got, d.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, ok, sn.Position()
}

// The stream names exactly the keys written since the version it last saw
// published: inserts, updates, deletes and both keys of a key update, in one
// transaction or many; transactions a snapshot does not see wait for the next one.
func TestStreamNamesChangedKeys(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn,
		`CREATE TABLE items (id bigint PRIMARY KEY, v text)`,
		`INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 100) g`,
		`CREATE TABLE pairs (a text, b int, v text, PRIMARY KEY (a, b))`,
		`INSERT INTO pairs VALUES ('x,y', 1, 'one'), ('z', 2, 'two')`,
		`CREATE TABLE other (id int PRIMARY KEY)`)
	slot := fmt.Sprintf("snapflip_test_%d", time.Now().UnixNano()%1e12)
	src := streamSource(t, dsn, slot, []pgsource.Collection{{Name: "items", Table: "items"}, {Name: "pairs", Table: "pairs"}})

	_, ok, p0 := keyed(t, src, "items", nil)
	if ok || p0.Stream == nil {
		t.Fatalf("no parent: ok %v, stream position %v; want false and a position", ok, p0.Stream)
	}
	src.Holds(context.Background(), p0, p0)

	testenv.Exec(t, dsn,
		`INSERT INTO items VALUES (1001, 'new')`,
		`UPDATE items SET v = 'changed' WHERE id = 5`,
		`DELETE FROM items WHERE id = 7`,
		`UPDATE items SET id = 2000 WHERE id = 9`,
		`BEGIN; UPDATE items SET v = 'x' WHERE id = 11; DELETE FROM items WHERE id = 12; COMMIT`,
		`UPDATE pairs SET v = 'uno' WHERE a = 'x,y'`,
		`INSERT INTO other VALUES (1)`)
	got, ok, p1 := keyed(t, src, "items", &p0)
	want := []string{"1001", "11", "12-", "2000", "5", "7-", "9-"}
	if !ok || !slices.Equal(got, want) {
		t.Fatalf("items since p0: %v (known %v); want %v", got, ok, want)
	}
	if got, ok, _ = keyed(t, src, "pairs", &p0); !ok || !slices.Equal(got, []string{"x%2Cy,1"}) {
		t.Fatalf("pairs since p0: %v (known %v); want [x%%2Cy,1]", got, ok)
	}
	// Not yet published: a second snapshot since p0 still names them all.
	if got, ok, _ = keyed(t, src, "items", &p0); !ok || !slices.Equal(got, want) {
		t.Fatalf("items since p0 again: %v (known %v); want %v", got, ok, want)
	}
	src.Holds(context.Background(), p1, p1)
	if got, ok, _ = keyed(t, src, "items", &p1); !ok || len(got) != 0 {
		t.Fatalf("items since p1, nothing written: %v (known %v); want nothing", got, ok)
	}
	// A parent the stream did not see published: not known.
	if _, ok, _ = keyed(t, src, "items", &p0); ok {
		t.Fatal("items since p0 after p1 was published: known; want unknown")
	}

	// A transaction in progress when the snapshot is taken waits for the next.
	tx := testenv.OpenTx(t, dsn, `UPDATE items SET v = 'late' WHERE id = 20`)
	testenv.Exec(t, dsn, `UPDATE items SET v = 'early' WHERE id = 21`)
	ctx := context.Background()
	sn, err := src.OpenSince(ctx, &p1)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Exec(t, dsn, `INSERT INTO other VALUES (2)`) // moves the stream past the commit
	p2 := sn.Position()
	var ids []string
	if _, err := sn.(snapshot.KeyedScanner).ScanKeyed(ctx, "items", &p1, 1000, func(d snapshot.Document) error {
		ids = append(ids, d.ID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sn.Close(ctx)
	if !slices.Equal(ids, []string{"21"}) {
		t.Fatalf("items since p1 with 20 in progress: %v; want [21]", ids)
	}
	src.Holds(ctx, p2, p2)
	if got, ok, _ = keyed(t, src, "items", &p2); !ok || !slices.Equal(got, []string{"20"}) {
		t.Fatalf("items since p2: %v (known %v); want [20]", got, ok)
	}
}

// A rewrite that keeps every column's type (ALTER … TYPE … USING, here on a table
// with no column added since its last rewrite, so that the definitions stay the same)
// changes every row and sends nothing on the stream: the stream does not claim to know
// the changes since a parent read before it, and knows them again after.
func TestStreamUnknownAfterRewrite(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE items (id bigint PRIMARY KEY, n int NOT NULL)`,
		`INSERT INTO items SELECT g, g FROM generate_series(1, 50) g`)
	slot := fmt.Sprintf("snapflip_test_%d", time.Now().UnixNano()%1e12)
	src := streamSource(t, dsn, slot, []pgsource.Collection{{Name: "items", Table: "items"}})
	_, _, p0 := keyed(t, src, "items", nil)
	src.Holds(context.Background(), p0, p0)
	if got, ok, p1 := keyed(t, src, "items", &p0); !ok || len(got) != 0 || p1.Definitions["items"] != p0.Definitions["items"] {
		t.Fatalf("items since p0, nothing written: %v (known %v); want nothing, known", got, ok)
	}
	testenv.Exec(t, dsn, `ALTER TABLE items ALTER COLUMN n TYPE int USING n + 1000`)
	_, ok, p1 := keyed(t, src, "items", &p0)
	if p1.Definitions["items"] != p0.Definitions["items"] {
		t.Fatalf("the rewrite changed the definitions: the case tests nothing")
	}
	if ok {
		t.Fatal("items since p0 after a rewrite: known; want unknown (every row changed)")
	}
	src.Holds(context.Background(), p1, p1)
	testenv.Exec(t, dsn, `UPDATE items SET n = 0 WHERE id = 3`)
	if got, ok, _ := keyed(t, src, "items", &p1); !ok || !slices.Equal(got, []string{"3"}) {
		t.Fatalf("items since p1: %v (known %v); want [3]", got, ok)
	}
}

// A watched table dropped and created again under its name is another relation, which
// the publication lost with the old one: the reading that follows the old one knows
// nothing of it, and a new reading, which adds it to the publication, knows nothing of
// what it committed before. Neither claims to know the changes since a parent read
// before (each version is compared in full); the next reading's versions are exact
// again.
func TestStreamUnknownAfterTableRecreated(t *testing.T) {
	dsn := testenv.Postgres(t)
	const create = `CREATE TABLE items (id bigint PRIMARY KEY, v text)`
	testenv.Exec(t, dsn, create, `INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 10) g`)
	slot := fmt.Sprintf("snapflip_test_%d", time.Now().UnixNano()%1e12)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "items", Table: "items"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.DropSlot(t, dsn, slot) })
	stop := startStream(t, src, slot, nil)
	ctx := context.Background()
	_, _, p0 := keyed(t, src, "items", nil)
	src.Holds(ctx, p0, p0)

	testenv.Exec(t, dsn, `BEGIN; DROP TABLE items; `+create+`; INSERT INTO items SELECT g, 'new' FROM generate_series(1, 10) g; COMMIT`)
	_, ok, p1 := keyed(t, src, "items", &p0)
	if ok {
		t.Fatal("items since p0, the table created again: known; want unknown")
	}
	src.Holds(ctx, p1, p1)
	testenv.Exec(t, dsn, `UPDATE items SET v = 'on no stream' WHERE id = 3`)
	if _, ok, _ := keyed(t, src, "items", &p1); ok {
		t.Fatal("items since p1, read from the new table, by the reading that follows the old one (or by none): known; want unknown")
	}
	stop()                                // the reading has ended, or ends, with ErrTablesChanged
	stop = startStream(t, src, slot, nil) // adds the new table to the publication
	defer stop()
	// The new reading adds the table to the publication as it starts: a snapshot
	// taken before that is recorded is (rightly) no base for the stream's changes,
	// so p2 is taken again until one is.
	testenv.Eventually(t, 30*time.Second, func() error {
		_, ok, p2 := keyed(t, src, "items", &p1)
		if ok {
			t.Fatal("items since p1, after the publication took the new table: known; want unknown (the update before it is on no stream)")
		}
		src.Holds(ctx, p2, p2)
		testenv.Exec(t, dsn, `UPDATE items SET v = 'streamed' WHERE id = 4`)
		got, ok, _ := keyed(t, src, "items", &p2)
		if !ok {
			return fmt.Errorf("items since p2 (%s): unknown", p2)
		}
		if !slices.Equal(got, []string{"4"}) {
			t.Fatalf("items since p2: %v; want [4]", got)
		}
		return nil
	})
}

// A reading whose table is dropped (and created again: a new relation, which the
// publication lost with the old one) ends with ErrTablesChanged within a few seconds,
// so that a new reading prepares the publication for the new table.
func TestStreamEndsWhenItsTableIsDropped(t *testing.T) {
	dsn := testenv.Postgres(t)
	const create = `CREATE TABLE items (id bigint PRIMARY KEY, v text)`
	testenv.Exec(t, dsn, create)
	slot := fmt.Sprintf("snapflip_test_%d", time.Now().UnixNano()%1e12)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "items", Table: "items"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.DropSlot(t, dsn, slot) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- src.Stream(ctx, pgsource.StreamConfig{LogicalConfig: pgsource.LogicalConfig{Publication: slot, Slot: slot}}, nil, nil)
	}()
	testenv.Eventually(t, time.Minute, func() error {
		if !src.Streaming() {
			return errors.New("not streaming yet")
		}
		return nil
	})
	testenv.Exec(t, dsn, `BEGIN; DROP TABLE items; `+create+`; COMMIT`)
	select {
	case err := <-done:
		if !errors.Is(err, pgsource.ErrTablesChanged) || !strings.Contains(err.Error(), "public.items") {
			t.Fatalf("the reading ended with %v; want ErrTablesChanged naming items", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the reading still follows the dropped table after a minute")
	}
}

// The stream keeps at most 200,000 changed keys of a collection in a transaction, and
// in what a version lacks; past that it does not claim to know them (the version is
// compared in full), and it knows the changes after the next version again.
func TestStreamBoundsChangedKeys(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE items (id int PRIMARY KEY)`)
	slot := fmt.Sprintf("snapflip_test_%d", time.Now().UnixNano()%1e12)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "items", Table: "items"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.DropSlot(t, dsn, slot) })
	// Decoding 200,000 changes under -race takes longer than the default wait.
	cfg := pgsource.StreamConfig{LogicalConfig: pgsource.LogicalConfig{Publication: slot, Slot: slot}, CatchUp: 5 * time.Minute}
	defer startStreamWith(t, src, cfg)()
	ctx := context.Background()
	known := func(since *snapshot.Position) (bool, snapshot.Position) {
		t.Helper()
		sn, err := src.OpenSince(ctx, since)
		if err != nil {
			t.Fatal(err)
		}
		defer sn.Close(ctx)
		ok, err := sn.(snapshot.KeyedScanner).ScanKeyed(ctx, "items", since, 1<<30, func(snapshot.Document) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		pos := sn.Position()
		if pos.Stream == nil {
			t.Fatal("the snapshot is not placed in the stream")
		}
		return ok, pos
	}
	_, p := known(nil)
	for _, step := range []struct {
		stmts []string
		known bool
	}{
		{[]string{`INSERT INTO items SELECT generate_series(1, 200001)`}, false},                          // one transaction
		{[]string{`DELETE FROM items WHERE id <= 100000`, `DELETE FROM items WHERE id <= 200001`}, false}, // two
		{[]string{`INSERT INTO items SELECT generate_series(1, 100)`}, true},
	} {
		src.Holds(ctx, p, p)
		testenv.Exec(t, dsn, step.stmts...)
		ok, next := known(&p)
		if ok != step.known {
			t.Errorf("after %s: the changes known %v; want %v", strings.Join(step.stmts, "; "), ok, step.known)
		}
		p = next
	}
}

// A version read before the stream (the first after a slot is made, say) that a
// snapshot of the stream's found to hold the same contents (a no-op) is followed from
// there: the next version names only the keys written since, not a full comparison.
func TestStreamFollowsAParentFoundEqual(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn,
		`CREATE TABLE items (id bigint PRIMARY KEY, v text)`,
		`INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 10) g`)
	slot := fmt.Sprintf("snapflip_test_%d", time.Now().UnixNano()%1e12)
	src := streamSource(t, dsn, slot, []pgsource.Collection{{Name: "items", Table: "items"}})
	_, _, p0 := keyed(t, src, "items", nil)
	// A parent read without the stream, with p0's contents (its fingerprints).
	parent := p0
	parent.LSN, parent.PgSnapshot, parent.Stream = 1, "1:1:", nil
	if _, ok, _ := keyed(t, src, "items", &parent); ok {
		t.Fatal("since a parent read without the stream: known; want unknown")
	}
	src.Holds(context.Background(), p0, parent) // the no-op: p0 read what parent holds
	testenv.Exec(t, dsn, `UPDATE items SET v = 'changed' WHERE id = 3`, `DELETE FROM items WHERE id = 4`)
	if got, ok, _ := keyed(t, src, "items", &parent); !ok || !slices.Equal(got, []string{"3", "4-"}) {
		t.Fatalf("since the parent found equal: %v (known %v); want [3 4-]", got, ok)
	}
	other := parent
	other.LSN, other.PgSnapshot = 2, "2:2:"
	if _, ok, _ := keyed(t, src, "items", &other); ok {
		t.Fatal("since another parent read without the stream: known; want unknown")
	}
}

// A slot invalidated while no one read it (max_slot_wal_keep_size) is said loudly,
// replaced, and the version after it is compared in full: the stream's history has a
// gap, so it must not claim to know what changed.
func TestStreamAfterSlotLost(t *testing.T) {
	dsn, _ := testenv.PostgresServer(t)
	testenv.Exec(t, dsn,
		`CREATE TABLE items (id bigint PRIMARY KEY, v text)`,
		`INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 100) g`)
	slot := "snapflip_lost"
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "items", Table: "items"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.DropSlot(t, dsn, slot) })
	stop := startStream(t, src, slot, nil)
	_, _, p0 := keyed(t, src, "items", nil)
	src.Holds(context.Background(), p0, p0)
	testenv.Exec(t, dsn, `DELETE FROM items WHERE id = 1`)
	got, ok, p1 := keyed(t, src, "items", &p0)
	if !ok || !slices.Equal(got, []string{"1-"}) {
		t.Fatalf("items since p0: %v (known %v); want [1-]", got, ok)
	}
	src.Holds(context.Background(), p1, p1)
	stop()

	// While no one reads the slot: a change, then more WAL than the slot may keep.
	testenv.Exec(t, dsn, `DELETE FROM items WHERE id = 2`,
		`ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`, `SELECT pg_reload_conf()`,
		`CREATE TABLE junk AS SELECT g, repeat('x', 500) AS pad FROM generate_series(1, 40000) g`,
		`SELECT pg_switch_wal()`, `CHECKPOINT`, `SELECT pg_switch_wal()`, `CHECKPOINT`)
	var status string
	testenv.Eventually(t, time.Minute, func() error {
		conn := testenv.OpenTx(t, dsn)
		defer conn.Rollback(context.Background())
		if err := conn.QueryRow(context.Background(), `SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&status); err != nil {
			return err
		}
		if status != "lost" {
			testenv.Exec(t, dsn, `SELECT pg_switch_wal()`, `CHECKPOINT`)
			return fmt.Errorf("wal_status %s; want lost", status)
		}
		return nil
	})

	var log testenv.Log
	defer startStream(t, src, slot, slog.New(slog.NewTextHandler(&log, nil)))()
	log.Await(t, "the slot's loss", 1, "invalidated")
	if got, ok, _ = keyed(t, src, "items", &p1); ok {
		t.Fatalf("items since p1 after the slot was lost: %v, known; want unknown (a full comparison)", got)
	}
}

// The stream names a key by its text; a changed key is looked up as the row whose id
// is that text, not merely one equal to it in the key's type: numeric 1.5 and 1.50
// are equal, and distinct ids.
func TestStreamKeysAreIDs(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn,
		`CREATE TABLE nums (id numeric PRIMARY KEY, v text)`,
		`INSERT INTO nums VALUES (1.5, 'a'), (2, 'b'), (3.0, 'c')`)
	slot := fmt.Sprintf("snapflip_test_%d", time.Now().UnixNano()%1e12)
	src := streamSource(t, dsn, slot, []pgsource.Collection{{Name: "nums", Table: "nums"}})
	_, _, p0 := keyed(t, src, "nums", nil)
	src.Holds(context.Background(), p0, p0)

	testenv.Exec(t, dsn, `DELETE FROM nums WHERE id = 1.5`, `INSERT INTO nums VALUES (1.50, 'd')`,
		`UPDATE nums SET id = 3 WHERE id = 3`)
	want := []string{"1.5-", "1.50", "3", "3.0-"}
	if got, ok, _ := keyed(t, src, "nums", &p0); !ok || !slices.Equal(got, want) {
		t.Errorf("nums since p0: %v (known %v); want %v", got, ok, want)
	}
}

// A key the stream names that no version can hold (empty, or over the id's limit),
// written and then deleted or changed again before the snapshot, is gone: nothing to
// delete, and no error, since the snapshot holds no such id.
func TestStreamKeysGoneInvalid(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE words (w text PRIMARY KEY, v text)`, `INSERT INTO words VALUES ('a', '1'), ('b', '2')`)
	slot := fmt.Sprintf("snapflip_test_%d", time.Now().UnixNano()%1e12)
	src := streamSource(t, dsn, slot, []pgsource.Collection{{Name: "words", Table: "words"}})
	_, _, p0 := keyed(t, src, "words", nil)
	src.Holds(context.Background(), p0, p0)
	testenv.Exec(t, dsn, `UPDATE words SET w = '' WHERE w = 'a'`, `INSERT INTO words VALUES (repeat('x', 2000), '3')`,
		`DELETE FROM words WHERE octet_length(w) NOT BETWEEN 1 AND 1024`, `UPDATE words SET v = '4' WHERE w = 'b'`)
	if got, ok, _ := keyed(t, src, "words", &p0); !ok || !slices.Equal(got, []string{"a-", "b"}) {
		t.Errorf("words since p0: %v (known %v); want [a- b]", got, ok)
	}
	// A row of the snapshot with such an id still fails the sync.
	testenv.Exec(t, dsn, `UPDATE words SET w = '' WHERE w = 'b'`)
	sn, err := src.OpenSince(context.Background(), &p0)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close(context.Background())
	if _, err := sn.(snapshot.KeyedScanner).ScanKeyed(context.Background(), "words", &p0, 1000, func(snapshot.Document) error { return nil }); !errors.Is(err, snapshot.ErrSource) {
		t.Errorf("a row with an empty id: ScanKeyed = %v; want ErrSource", err)
	}
}

// A transaction in progress that wrote WAL after the last commit leaves WAL nobody
// flushes while the database is otherwise idle: the stream must still pass a
// snapshot taken then, and know its changes exactly, without waiting out CatchUp.
func TestStreamPassesUnflushedWAL(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE items (id bigint PRIMARY KEY, v text)`, `INSERT INTO items VALUES (1, 'a'), (2, 'b')`)
	slot := fmt.Sprintf("snapflip_test_%d", time.Now().UnixNano()%1e12)
	src := streamSource(t, dsn, slot, []pgsource.Collection{{Name: "items", Table: "items"}})
	_, _, p0 := keyed(t, src, "items", nil)
	src.Holds(context.Background(), p0, p0)
	testenv.Exec(t, dsn, `UPDATE items SET v = 'changed' WHERE id = 1`)
	tx := testenv.OpenTx(t, dsn, `INSERT INTO items VALUES (3, 'in progress')`)
	defer tx.Rollback(context.Background())
	start := time.Now()
	got, ok, _ := keyed(t, src, "items", &p0)
	if !ok || !slices.Equal(got, []string{"1"}) {
		t.Fatalf("items since p0 with a transaction in progress: %v (known %v) after %v; want [1]", got, ok, time.Since(start).Round(time.Millisecond))
	}
}

// While only an unwatched table is written, the slot's restart position follows its
// confirmed position within seconds: the reading has the server log the
// running-transactions record that moves it rather than wait up to 15 s for the one
// the server logs on its own (or a checkpoint). Without it, the restart position
// passes the end of the writes within the wait only when such a record happens to
// fall there.
//
// The test has a Postgres server of its own: a transaction running elsewhere in the
// cluster keeps the restart position before its start, however far the slot is
// confirmed.
func TestStreamMovesRestartPosition(t *testing.T) {
	dsn, _ := testenv.PostgresServer(t)
	testenv.Exec(t, dsn, `CREATE TABLE items (id bigint PRIMARY KEY, v text)`,
		`CREATE TABLE other (id bigserial PRIMARY KEY, pad text NOT NULL)`)
	slot := fmt.Sprintf("snapflip_test_%d", time.Now().UnixNano()%1e12)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "items", Table: "items"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.DropSlot(t, dsn, slot) })
	cfg := pgsource.StreamConfig{LogicalConfig: pgsource.LogicalConfig{Publication: slot, Slot: slot}, NudgeAfter: 1 << 20}
	defer startStreamWith(t, src, cfg)()

	// About 30 MB of WAL, none of it to a watched table.
	testenv.Exec(t, dsn, slices.Repeat([]string{`INSERT INTO other (pad) SELECT repeat('x', 1000) FROM generate_series(1, 1000)`}, 30)...)
	ctx := context.Background()
	conn := testenv.Connect(t, ctx, dsn)
	defer conn.Close(ctx)
	var end string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	// Decoding 30 MB may take a loaded machine a while: first the slot is confirmed
	// past the writes, and then the nudge must move its restart position soon (the
	// server's own standby snapshots, every 15 s, would move it too late).
	testenv.Eventually(t, time.Minute, func() error {
		var confirmed bool
		if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, slot, end).Scan(&confirmed); err != nil {
			return err
		}
		if !confirmed {
			return fmt.Errorf("slot %s not yet confirmed past %s", slot, end)
		}
		return nil
	})
	start := time.Now()
	testenv.Eventually(t, 10*time.Second, func() error {
		var restart, confirmed string
		var passed bool
		err := conn.QueryRow(ctx, `SELECT restart_lsn::text, confirmed_flush_lsn::text, restart_lsn >= $2::pg_lsn
			FROM pg_replication_slots WHERE slot_name = $1`, slot, end).Scan(&restart, &confirmed, &passed)
		if err != nil {
			return err
		}
		if !passed {
			return fmt.Errorf("%v after the writes ended at %s: restart_lsn %s, confirmed_flush_lsn %s; want restart_lsn past the writes",
				time.Since(start).Round(time.Millisecond), end, restart, confirmed)
		}
		return nil
	})
}

// Past StreamConfig.HoldBytes the stream lets the held transactions' keys go: the
// next version is not told keys (it compares the collection in full), the slot is
// confirmed past those transactions, and once a published version saw them all, keys
// are named again.
func TestStreamLetsHeldTransactionsGo(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE items (id int PRIMARY KEY, v int)`, `INSERT INTO items SELECT g, 0 FROM generate_series(1, 100) g`)
	slot := fmt.Sprintf("snapflip_test_%d", time.Now().UnixNano()%1e12)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "items", Table: "items"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.DropSlot(t, dsn, slot) })
	cfg := pgsource.StreamConfig{LogicalConfig: pgsource.LogicalConfig{Publication: slot, Slot: slot}, HoldBytes: 16 << 10}
	defer startStreamWith(t, src, cfg)()
	ctx := context.Background()
	_, _, p0 := keyed(t, src, "items", nil)
	src.Holds(ctx, p0, p0)
	var first string
	testenv.QueryRow(t, dsn, `SELECT pg_current_wal_insert_lsn()::text`, &first)
	for i := range 100 { // 100 transactions of one key each: over 16 KiB held
		testenv.Exec(t, dsn, fmt.Sprintf(`UPDATE items SET v = 1 WHERE id = %d`, i+1))
	}
	_, ok, p1 := keyed(t, src, "items", &p0)
	if ok {
		t.Errorf("after the held transactions were let go: keys named; want the collection compared in full")
	}
	// The slot is confirmed past the transactions let go (once a second).
	testenv.Eventually(t, time.Minute, func() error {
		var past bool
		testenv.QueryRow(t, dsn, fmt.Sprintf(`SELECT confirmed_flush_lsn > '%s'::pg_lsn + 4096 FROM pg_replication_slots WHERE slot_name = '%s'`, first, slot), &past)
		if !past {
			return errors.New("the slot is not confirmed past the transactions let go")
		}
		return nil
	})
	src.Holds(ctx, p1, p1) // a version that saw them all is published
	testenv.Exec(t, dsn, `UPDATE items SET v = 2 WHERE id = 7`)
	if got, ok, _ := keyed(t, src, "items", &p1); !ok || !slices.Equal(got, []string{"7"}) {
		t.Errorf("after a version saw what was let go: %v (known %v); want [7]", got, ok)
	}
}

// streamOnce reads the stream of the collections over dsn, on slot (its publication
// too), until it fails or 30 s pass, and returns its error.
func streamOnce(t *testing.T, dsn, slot string, cs []pgsource.Collection) error {
	t.Helper()
	src, err := pgsource.New(dsn, cs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return src.Stream(ctx, pgsource.StreamConfig{LogicalConfig: pgsource.LogicalConfig{Publication: slot, Slot: slot}}, nil, nil)
}

// A slot made with two_phase (a DBA's, or another tool's) sends prepared transactions
// at PREPARE, which the stream does not read: it is refused, naming the option and
// the fix, instead of being read.
func TestStreamRefusesATwoPhaseSlot(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE items (id int PRIMARY KEY)`)
	slot := fmt.Sprintf("snapflip_test_%d", time.Now().UnixNano()%1e12)
	t.Cleanup(func() { testenv.DropSlot(t, dsn, slot) })
	testenv.Exec(t, dsn, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput', false, true)`, slot))
	err := streamOnce(t, dsn, slot, []pgsource.Collection{{Name: "items", Table: "items"}})
	if !errors.Is(err, pgsource.ErrLogicalSetup) || !strings.Contains(err.Error(), "two_phase") {
		t.Errorf("Stream on a two_phase slot: %v; want ErrLogicalSetup naming two_phase", err)
	}
}

// With synchronous_standby_names = '*' the server may choose the stream's WAL sender
// as a synchronous standby, and its commits would wait for the syncer's flips: the
// stream refuses to read, naming the setting.
func TestStreamRefusesToBeASynchronousStandby(t *testing.T) {
	primary, _ := testenv.Replicated(t) // its hot standby is a synchronous one's rival
	testenv.Exec(t, primary, `CREATE TABLE items (id int PRIMARY KEY)`)
	admin := os.Getenv(testenv.EnvReplicated)
	testenv.Exec(t, admin, `ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`)
	t.Cleanup(func() {
		testenv.Exec(t, admin, `ALTER SYSTEM RESET synchronous_standby_names`, `SELECT pg_reload_conf()`)
	})
	slot := fmt.Sprintf("snapflip_test_%d", time.Now().UnixNano()%1e12)
	t.Cleanup(func() { testenv.DropSlot(t, primary, slot) })
	err := streamOnce(t, primary, slot, []pgsource.Collection{{Name: "items", Table: "items"}})
	if !errors.Is(err, pgsource.ErrLogicalSetup) || !strings.Contains(err.Error(), "synchronous_standby_names") {
		t.Errorf("Stream while synchronous_standby_names = '*': %v; want ErrLogicalSetup naming the setting", err)
	}
}

// A table that leaves the publication and joins it again while the stream is read:
// what was written to it meanwhile is on no stream, so the reading ends (a new one
// prepares the publication again) and no version is told keys for it since before.
func TestStreamNoticesThePublicationChanging(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE a (id int PRIMARY KEY)`, `CREATE TABLE b (id int PRIMARY KEY)`)
	slot := fmt.Sprintf("snapflip_test_%d", time.Now().UnixNano()%1e12)
	src := streamSource(t, dsn, slot, []pgsource.Collection{{Name: "a", Table: "a"}, {Name: "b", Table: "b"}})
	ctx := context.Background()
	_, _, p0 := keyed(t, src, "b", nil)
	src.Holds(ctx, p0, p0)
	testenv.Exec(t, dsn, `ALTER PUBLICATION `+slot+` DROP TABLE b`, `INSERT INTO b VALUES (5)`, `ALTER PUBLICATION `+slot+` ADD TABLE b`)
	testenv.Exec(t, dsn, `INSERT INTO a VALUES (1)`)
	testenv.Eventually(t, time.Minute, func() error {
		if src.Streaming() {
			return errors.New("the reading goes on with the publication changed under it")
		}
		return nil
	})
	if got, ok, _ := keyed(t, src, "b", &p0); ok {
		t.Errorf("since a version read before b left the publication and joined it again: keys %v; want b compared in full", got)
	}
}

// A transaction that wrote a table before the table joined the publication, and
// commits after, streams only what it wrote after. The version compared in full when
// the table joined does not see it (it still ran); the version after that must not
// take the stream's keys from it, or the transaction's earlier rows are never served.
func TestStreamBarrierForATransactionSpanningThePublicationChange(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE a (id int PRIMARY KEY)`, `CREATE TABLE b (id int PRIMARY KEY)`)
	slot := fmt.Sprintf("snapflip_test_%d", time.Now().UnixNano()%1e12)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "a", Table: "a"}, {Name: "b", Table: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.DropSlot(t, dsn, slot) })
	cfg := pgsource.StreamConfig{LogicalConfig: pgsource.LogicalConfig{Publication: slot, Slot: slot}}
	stop := startStreamWith(t, src, cfg)
	ctx := context.Background()
	_, _, p0 := keyed(t, src, "b", nil)
	src.Holds(ctx, p0, p0)
	stop()
	testenv.Exec(t, dsn, `ALTER PUBLICATION `+slot+` DROP TABLE b`)
	spanning := testenv.OpenTx(t, dsn, `INSERT INTO b VALUES (7)`) // before b joins again
	// The process's start prepares the publication (b joins it again), then the stream.
	if _, err := src.PrepareLogical(ctx, cfg.LogicalConfig); err != nil {
		t.Fatal(err)
	}
	defer startStreamWith(t, src, cfg)()
	if got, ok, _ := keyed(t, src, "b", &p0); ok {
		t.Errorf("since a version read before b joined the publication: keys %v; want b compared in full", got)
	}
	_, _, p1 := keyed(t, src, "b", nil) // compared in full, while the transaction runs
	src.Holds(ctx, p1, p1)
	if err := spanning.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := keyed(t, src, "b", &p1); ok {
		t.Errorf("since a version read while a transaction spanning b's joining ran: keys %v; want b compared in full", got)
	}
}

// An unlogged or foreign partition of a published partitioned table changes with
// nothing on the stream: the stream refuses it at start, naming it, and ends when a
// partition becomes one while it is read.
func TestStreamRefusesUncarriedPartitions(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE p (id int PRIMARY KEY) PARTITION BY RANGE (id)`,
		`CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (100)`,
		`CREATE UNLOGGED TABLE p2 PARTITION OF p FOR VALUES FROM (100) TO (200)`)
	slot := fmt.Sprintf("snapflip_test_%d", time.Now().UnixNano()%1e12)
	t.Cleanup(func() { testenv.DropSlot(t, dsn, slot) })
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "p", Table: "p"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := pgsource.StreamConfig{LogicalConfig: pgsource.LogicalConfig{Publication: slot, Slot: slot}}
	if err := streamOnce(t, dsn, slot, []pgsource.Collection{{Name: "p", Table: "p"}}); !errors.Is(err, pgsource.ErrLogicalSetup) || !strings.Contains(err.Error(), "unlogged partition public.p2") {
		t.Fatalf("Stream with an unlogged partition: %v; want ErrLogicalSetup naming it", err)
	}
	testenv.Exec(t, dsn, `ALTER TABLE p2 SET LOGGED`)
	stop := startStreamWith(t, src, cfg)
	testenv.Exec(t, dsn, `ALTER TABLE p2 SET UNLOGGED`)
	testenv.Eventually(t, time.Minute, func() error {
		if src.Streaming() {
			return errors.New("the reading goes on with an unlogged partition")
		}
		return nil
	})
	stop()
	// A foreign table attached as a partition (postgres_fdw, to this very database).
	testenv.Exec(t, dsn, `ALTER TABLE p2 SET LOGGED`, `CREATE EXTENSION postgres_fdw`,
		fmt.Sprintf(`CREATE SERVER here FOREIGN DATA WRAPPER postgres_fdw OPTIONS (dbname '%s')`, testenv.Database(t, dsn)),
		`CREATE USER MAPPING FOR CURRENT_USER SERVER here`, `CREATE TABLE remote (id int)`,
		// A partitioned table with an index takes no foreign partition: q has none.
		`CREATE TABLE q (id int NOT NULL) PARTITION BY RANGE (id)`,
		`CREATE TABLE q1 PARTITION OF q FOR VALUES FROM (0) TO (100)`, `ALTER TABLE q1 REPLICA IDENTITY FULL`,
		`CREATE FOREIGN TABLE q2 PARTITION OF q FOR VALUES FROM (100) TO (200) SERVER here OPTIONS (table_name 'remote')`)
	if err := streamOnce(t, dsn, slot, []pgsource.Collection{{Name: "q", Table: "q", Key: "id"}}); !errors.Is(err, pgsource.ErrLogicalSetup) || !strings.Contains(err.Error(), "foreign partition public.q2") {
		t.Errorf("Stream with a foreign partition: %v; want ErrLogicalSetup naming it", err)
	}
}
