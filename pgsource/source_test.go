package pgsource_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

const typesSchema = `CREATE TABLE things (
	id text PRIMARY KEY,
	n numeric, i bigint, f double precision, b boolean,
	ts timestamptz, d date, arr int[], tags text[], j jsonb, raw bytea, note text
)`

func scanAll(tb testing.TB, src *pgsource.Source, collection string) ([]snapshot.Document, snapshot.Position, error) {
	tb.Helper()
	ctx := context.Background()
	snap, err := src.Open(ctx)
	if err != nil {
		return nil, snapshot.Position{}, err
	}
	defer snap.Close(ctx)
	var docs []snapshot.Document
	err = snap.Scan(ctx, collection, func(d snapshot.Document) error { docs = append(docs, d); return nil })
	return docs, snap.Position(), err
}

func TestScanMapsTypesLikeToJSON(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, typesSchema, `INSERT INTO things VALUES
		('a/b#1', 12345678901234567890.000000001, 9007199254740993, 0.1, true,
		 '2024-02-29 23:59:59.123456+05', '2024-02-29', '{1,NULL,3}', '{"x y","ü"}',
		 '{"nested": {"k": [1, 2.50, null]}}', '\xdeadbeef', NULL)`)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "things", Table: "public.things", Key: "id"}})
	if err != nil {
		t.Fatal(err)
	}
	docs, pos, err := scanAll(t, src, "things")
	if err != nil {
		t.Fatal(err)
	}
	want := []snapshot.Document{{ID: "a/b#1", Body: []byte(`{"id":"a/b#1","n":12345678901234567890.000000001,"i":9007199254740993,"f":0.1,"b":true,"ts":"2024-02-29T18:59:59.123456+00:00","d":"2024-02-29","arr":[1,null,3],"tags":["x y","ü"],"j":{"nested": {"k": [1, 2.50, null]}},"raw":"\\xdeadbeef","note":null}`)}}
	if diff := cmp.Diff(want, docs, cmp.Comparer(func(a, b []byte) bool { return string(a) == string(b) })); diff != "" {
		t.Errorf("documents (-want +got):\n%s", diff)
	}
	if pos.LSN == 0 || pos.PgSnapshot == "" || pos.Config == "" {
		t.Errorf("position = %+v; want an LSN, a snapshot and a config fingerprint", pos)
	}
}

func TestScanIsOneSnapshot(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE a (id int PRIMARY KEY)`, `CREATE TABLE b (id int PRIMARY KEY)`,
		`INSERT INTO a VALUES (1)`, `INSERT INTO b VALUES (1)`)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "a", Table: "a", Key: "id"}, {Name: "b", Table: "b", Key: "id"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	snap, err := src.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close(ctx)
	count := func(coll string) int {
		n := 0
		if err := snap.Scan(ctx, coll, func(snapshot.Document) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := count("a"); got != 1 {
		t.Fatalf("a has %d rows; want 1", got)
	}
	// Writes committed after the snapshot began are invisible to it.
	testenv.Exec(t, dsn, `INSERT INTO b VALUES (2), (3)`)
	if got := count("b"); got != 1 {
		t.Errorf("b seen with %d rows inside the snapshot; want 1 (the snapshot's)", got)
	}
	// And a later snapshot sees them, at a later source position.
	_, pos2, err := scanAll(t, src, "b")
	if err != nil {
		t.Fatal(err)
	}
	if pos2.LSN <= snap.Position().LSN {
		t.Errorf("later snapshot LSN %s not after %s", pos2, snap.Position())
	}
}

func TestScanFailures(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn,
		`CREATE TABLE dup (k text, v int)`, `INSERT INTO dup VALUES ('x', 1), ('y', 2), ('x', 3)`,
		`CREATE TABLE nul (k text, v int)`, `INSERT INTO nul VALUES ('x', 1), (NULL, 2)`,
		`CREATE TABLE empty_key (k text)`, `INSERT INTO empty_key VALUES ('')`,
		`CREATE TABLE long_key (k text)`, `INSERT INTO long_key VALUES (repeat('k', 1025))`,
	)
	tests := []struct {
		name string
		coll pgsource.Collection
		want []string // substrings of the error
		is   error
	}{
		{"duplicate key", pgsource.Collection{Table: "dup", Key: "k"}, []string{`duplicate key "x"`, "column k"}, snapshot.ErrSource},
		{"null key", pgsource.Collection{Table: "nul", Key: "k"}, []string{"NULL key", "column k"}, snapshot.ErrSource},
		{"empty key", pgsource.Collection{Table: "empty_key", Key: "k"}, []string{"empty key"}, snapshot.ErrSource},
		{"oversized key", pgsource.Collection{Table: "long_key", Key: "k"}, []string{"1025 bytes"}, snapshot.ErrSource},
		{"unknown table", pgsource.Collection{Table: "public.nope", Key: "k"}, []string{"nope", "does not exist"}, nil},
		{"unknown key column", pgsource.Collection{Table: "dup", Key: "nokey"}, []string{"nokey", "does not exist"}, nil},
		{"bad query", pgsource.Collection{Query: "SELEC 1", Key: "k"}, []string{"syntax error"}, nil},
		{"duplicate from a query", pgsource.Collection{Query: "SELECT 'same' AS k UNION ALL SELECT 'same'", Key: "k"}, []string{`duplicate key "same"`}, snapshot.ErrSource},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.coll.Name = "c"
			src, err := pgsource.New(dsn, []pgsource.Collection{tt.coll})
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = scanAll(t, src, "c")
			if err == nil {
				t.Fatal("Scan succeeded; want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
		})
	}
}

func TestScanLostConnection(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE big AS SELECT g AS id, repeat('x', 200) AS pad FROM generate_series(1, 200000) g`)
	src, err := pgsource.New(dsn+"&application_name=victim", []pgsource.Collection{{Name: "big", Table: "big", Key: "id"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	snap, err := src.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close(ctx)
	n := 0
	err = snap.Scan(ctx, "big", func(snapshot.Document) error {
		n++
		if n == 10 {
			testenv.Exec(t, dsn, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'victim'`)
		}
		return nil
	})
	if err == nil {
		t.Fatalf("Scan survived its connection being killed (read %d rows); want an error", n)
	}
	if n >= 200000 {
		t.Errorf("read all %d rows despite the kill", n)
	}
}

func TestValidateCollections(t *testing.T) {
	tests := []struct {
		name string
		cs   []pgsource.Collection
		want string
	}{
		{"none", nil, "collections"},
		{"no name", []pgsource.Collection{{Table: "t", Key: "k"}}, "collections[0].name"},
		{"bad name", []pgsource.Collection{{Name: "a/b", Table: "t", Key: "k"}}, "collections[0].name"},
		{"no source", []pgsource.Collection{{Name: "a", Key: "k"}}, "set table or query"},
		{"both", []pgsource.Collection{{Name: "a", Table: "t", Query: "SELECT 1", Key: "k"}}, "not both"},
		{"query without key", []pgsource.Collection{{Name: "a", Query: "SELECT 1 AS k"}}, "collections[0].key (a): required for a query"},
		{"empty key list", []pgsource.Collection{{Name: "a", Table: "t", KeyColumns: []string{}}}, "collections[0].key (a): an empty list"},
		{"empty key column", []pgsource.Collection{{Name: "a", Table: "t", KeyColumns: []string{"k", ""}}}, "collections[0].key (a): an empty column name"},
		{"key column twice", []pgsource.Collection{{Name: "a", Table: "t", KeyColumns: []string{"k", "j", "k"}}}, `collections[0].key (a): column "k" named twice`},
		{"Key and KeyColumns", []pgsource.Collection{{Name: "a", Table: "t", Key: "k", KeyColumns: []string{"k"}}}, "collections[0].key (a): set Key or KeyColumns"},
		{"dup", []pgsource.Collection{{Name: "a", Table: "t", Key: "k"}, {Name: "a", Table: "u", Key: "k"}}, "collections[1].name"},
		{"bad table", []pgsource.Collection{{Name: "a", Table: "a.b.c", Key: "k"}}, "collections[0].table"},
		{"two statements", []pgsource.Collection{{Name: "a", Query: "SELECT 1 AS k; SELECT 2 AS k", Key: "k"}}, "collections[0].query (a): holds more than one statement"},
		{"open string", []pgsource.Collection{{Name: "a", Query: "SELECT 'x AS k", Key: "k"}}, "collections[0].query (a): a string is not closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := pgsource.ValidateCollections(tt.cs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ValidateCollections = %v; want an error naming %q", err, tt.want)
			}
		})
	}
	// A table's key may be left to be inferred when the source is opened.
	if err := pgsource.ValidateCollections([]pgsource.Collection{{Name: "a", Table: "t"}, {Name: "b", Table: "u", KeyColumns: []string{"x", "y"}}}); err != nil {
		t.Errorf("ValidateCollections(tables without key, with a composite key) = %v; want them valid", err)
	}
}

func TestNewHidesTheDSN(t *testing.T) {
	_, err := pgsource.New("postgres://u:s3cret@host:notaport/db", []pgsource.Collection{{Name: "a", Table: "t", Key: "k"}})
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("New(bad dsn) = %v; want an error that does not show the password", err)
	}
}

func TestUnreachablePostgres(t *testing.T) {
	src, err := pgsource.New("postgres://postgres@127.0.0.1:1/db?connect_timeout=2", []pgsource.Collection{{Name: "a", Table: "t", Key: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	err = src.Ping(context.Background())
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("Ping(unreachable) = %v; want an error naming the address", err)
	}
}

// TestConnectTimeoutByDefault: a server that accepts connections and never answers (a
// frozen or vanished host) fails a connect made without any deadline within the
// default connect timeout, or the DSN's own connect_timeout, instead of holding a sync
// forever.
func TestConnectTimeoutByDefault(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	base := "postgres://postgres@" + ln.Addr().String() + "/db"
	for dsn, limit := range map[string]time.Duration{
		base:                        pgsource.DefaultConnectTimeout,
		base + "?connect_timeout=1": time.Second,
	} {
		src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "a", Table: "t", Key: "k"}})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		done := make(chan error, 1)
		go func() { _, err := src.Open(context.Background()); done <- err }()
		select {
		case err := <-done:
			t.Logf("%s: failed after %s: %v", dsn, time.Since(start).Round(time.Millisecond), err)
			if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
				t.Errorf("Open(silent server) = %v; want a connect error naming its address", err)
			}
		case <-time.After(limit + 5*time.Second):
			t.Errorf("Open(silent server) still connecting %s after it started; want it to give up after %s", limit+5*time.Second, limit)
		}
	}
}

func TestQueryWithTrailingSemicolon(t *testing.T) {
	dsn := testenv.Postgres(t)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "q", Query: "SELECT 'a' AS k, 1 AS v ;\n", Key: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	docs, _, err := scanAll(t, src, "q")
	if err != nil || len(docs) != 1 || string(docs[0].Body) != `{"k":"a","v":1}` {
		t.Errorf("query ending in ';' = %v, %v; want its one row", docs, err)
	}
}

func TestFingerprintTracksChanges(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE f (id int PRIMARY KEY, v text)`, `INSERT INTO f SELECT g, 'v' FROM generate_series(1, 100) g`,
		`CREATE TABLE other (id int)`, `CREATE VIEW fv AS SELECT * FROM f`)
	src, err := pgsource.New(dsn, []pgsource.Collection{
		{Name: "f", Table: "f", Key: "id"}, {Name: "fv", Table: "fv", Key: "id"}, {Name: "q", Query: "SELECT * FROM f", Key: "id"}})
	if err != nil {
		t.Fatal(err)
	}
	fp := func() string {
		t.Helper()
		ctx := context.Background()
		snap, err := src.Open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer snap.Close(ctx)
		pos := snap.Position()
		if _, ok := pos.Fingerprints["fv"]; ok {
			t.Error("a view has a fingerprint; want none (only reading it can tell)")
		}
		if _, ok := pos.Fingerprints["q"]; ok {
			t.Error("a query has a fingerprint; want none")
		}
		return pos.Fingerprints["f"]
	}
	base := fp()
	if base == "" {
		t.Fatal("table has no fingerprint")
	}
	// Nothing that leaves the contents alone changes it.
	testenv.Exec(t, dsn, `INSERT INTO other VALUES (1)`, `VACUUM ANALYZE f`, `SELECT * FROM f`)
	if got := fp(); got != base {
		t.Errorf("fingerprint changed without a change to f: %s → %s", base, got)
	}
	changes := []string{
		`UPDATE f SET v = 'w' WHERE id = 1`,
		`UPDATE f SET v = v WHERE id = 2`, // same value, new row version: counted as a change
		`DELETE FROM f WHERE id = 3`,
		`INSERT INTO f VALUES (3, 'v')`,
		`ALTER TABLE f ADD COLUMN extra int DEFAULT 7`,
		`BEGIN; DELETE FROM f WHERE id = 4; INSERT INTO f VALUES (4, 'v'); COMMIT`,
	}
	seen := map[string]string{base: "start"}
	for _, c := range changes {
		testenv.Exec(t, dsn, c)
		got := fp()
		if prev, ok := seen[got]; ok {
			t.Errorf("after %q the fingerprint is the one seen after %q", c, prev)
		}
		seen[got] = c
	}
}

// TestPartitionedScanIsOneSnapshot: parallel readers of one table, each a hash
// partition on its own connection in the exported snapshot, together read exactly the
// rows of one snapshot; a duplicate key is still caught.
func TestPartitionedScanIsOneSnapshot(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE p (id text, v int)`, `INSERT INTO p SELECT 'k' || g, g FROM generate_series(1, 5000) g`)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "p", Table: "p", Key: "id"}})
	if err != nil {
		t.Fatal(err)
	}
	src.Readers, src.PartitionMinRows = 4, 1000
	ctx := context.Background()
	snap, err := src.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close(ctx)
	ps := snap.(snapshot.PartitionedSnapshot)
	if n := ps.Partitions("p"); n != 4 {
		t.Fatalf("Partitions = %d; want 4", n)
	}
	// A change committed after the snapshot must not be seen by any part.
	testenv.Exec(t, dsn, `INSERT INTO p SELECT 'new' || g, g FROM generate_series(1, 100) g`, `DELETE FROM p WHERE v <= 10`)
	seen := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for part := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := ps.ScanPartition(ctx, "p", part, 4, func(d snapshot.Document) error {
				mu.Lock()
				defer mu.Unlock()
				if seen[d.ID] {
					t.Errorf("id %s read by two partitions", d.ID)
				}
				seen[d.ID] = true
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(seen) != 5000 || !seen["k1"] || seen["new1"] {
		t.Errorf("partitions read %d rows (k1 %v, new1 %v); want the snapshot's 5000", len(seen), seen["k1"], seen["new1"])
	}
	if n, ok := ps.Rows("p"); !ok || n != 5000 {
		t.Errorf("Rows = %d, %v; want 5000", n, ok)
	}

	// Duplicates hash to the same partition, so they are still adjacent there.
	testenv.Exec(t, dsn, `INSERT INTO p VALUES ('k4000', 0)`)
	snap2, err := src.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer snap2.Close(ctx)
	var dupErr error
	for part := range 4 {
		if err := snap2.(snapshot.PartitionedSnapshot).ScanPartition(ctx, "p", part, 4, func(snapshot.Document) error { return nil }); err != nil {
			dupErr = err
		}
	}
	if dupErr == nil || !strings.Contains(dupErr.Error(), `duplicate key "k4000"`) {
		t.Errorf("partitioned scan with a duplicate = %v; want the duplicate named", dupErr)
	}
}

// TestScanInvalidUTF8Key: a database whose encoding lets text hold any bytes
// (SQL_ASCII) can hand out a key that is not UTF-8; the scan fails naming it.
func TestScanInvalidUTF8Key(t *testing.T) {
	dsn := testenv.Postgres(t)
	name := fmt.Sprintf("snapflip_ascii_%d", time.Now().UnixNano())
	testenv.Exec(t, dsn, "CREATE DATABASE "+name+" ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
	t.Cleanup(func() { testenv.Exec(t, dsn, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	ascii := u.String()
	testenv.Exec(t, ascii, `CREATE TABLE t (k text PRIMARY KEY, v int)`, `INSERT INTO t VALUES ('ok', 1), (E'bad\xff', 2)`)
	src, err := pgsource.New(ascii, []pgsource.Collection{{Name: "c", Table: "t", Key: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = scanAll(t, src, "c")
	if err == nil || !strings.Contains(err.Error(), "not valid UTF-8") || !errors.Is(err, snapshot.ErrSource) {
		t.Fatalf("scan with a non-UTF-8 key = %v; want a source error saying the key is not valid UTF-8", err)
	}
	t.Log(err)
}

// TestColumnsNamedLikeTheGeneratedSQL: a column named like an alias or a name the
// generated SQL uses is served as a column, never in place of the row (a table with a
// column t was once served as that column's value), whole or partitioned, table or
// query.
func TestColumnsNamedLikeTheGeneratedSQL(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE gadgets (id text PRIMARY KEY, t timestamptz, "T" int, "t.id" text, text int, hashtext int, "select" int)`,
		`INSERT INTO gadgets SELECT 'k' || g, '2024-02-29 12:34:56.789+00', g, 'x', g, g, g FROM generate_series(1, 40) g`)
	want := `{"id":"k1","t":"2024-02-29T12:34:56.789+00:00","T":1,"t.id":"x","text":1,"hashtext":1,"select":1}`
	for _, c := range []pgsource.Collection{
		{Name: "table", Table: "gadgets", Key: "id"},
		{Name: "query", Query: `SELECT * FROM gadgets`, Key: "id"},
		{Name: "keyed-by-t", Query: `SELECT id AS t, t AS id FROM gadgets`, Key: "t"},
		{Name: "composite", Table: "gadgets", KeyColumns: []string{"t", "id", "T"}},
	} {
		for _, readers := range []int{1, 3} {
			src, err := pgsource.New(dsn, []pgsource.Collection{c})
			if err != nil {
				t.Fatal(err)
			}
			src.Readers, src.PartitionMinRows = readers, 1
			ctx := context.Background()
			snap, err := src.Open(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ps := snap.(snapshot.PartitionedSnapshot)
			got := map[string]string{}
			for part := range readers {
				err := ps.ScanPartition(ctx, c.Name, part, readers, func(d snapshot.Document) error {
					got[d.ID] = string(d.Body)
					return nil
				})
				if err != nil {
					t.Fatalf("%s, %d readers: %v", c.Name, readers, err)
				}
			}
			snap.Close(ctx)
			if len(got) != 40 {
				t.Errorf("%s, %d readers: %d documents; want 40", c.Name, readers, len(got))
			}
			k1 := "k1"
			if c.Name == "composite" {
				k1 = "2024-02-29 12:34:56.789+00,k1,1"
			}
			if c.Name == "keyed-by-t" {
				if d := got["k1"]; d != `{"t":"k1","id":"2024-02-29T12:34:56.789+00:00"}` {
					t.Errorf("%s: k1 = %s", c.Name, d)
				}
			} else if d := got[k1]; d != want {
				t.Errorf("%s, %d readers: k1 = %s; want %s", c.Name, readers, d, want)
			}
		}
	}
}

// TestOpenKeepsItsConnection: a snapshot's Close ends its transaction and leaves its
// session idle for the next Open, which takes a new snapshot on it (it sees what was
// committed in between, and a table changed since); a kept session that was
// terminated is replaced by a new one without an error; the source's Close ends it.
func TestOpenKeepsItsConnection(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE kv (id int PRIMARY KEY, v text)`, `INSERT INTO kv VALUES (1, 'one')`)
	src, err := pgsource.New(dsn+"&application_name=kept", []pgsource.Collection{{Name: "kv", Table: "kv", Key: "id"},
		{Name: "broken", Query: "SELECT id / (id - id) AS id FROM kv", Key: "id"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admin := testenv.Connect(t, ctx, dsn)
	defer admin.Close(ctx)
	// sessions returns the pid and state of each session of the source.
	sessions := func() map[int]string {
		t.Helper()
		rows, err := admin.Query(ctx, `SELECT pid, state FROM pg_stat_activity WHERE application_name = 'kept'`)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int]string{}
		for rows.Next() {
			var pid int
			var state string
			if err := rows.Scan(&pid, &state); err != nil {
				t.Fatal(err)
			}
			out[pid] = state
		}
		return out
	}
	onlyIdle := func() int {
		t.Helper()
		s := sessions()
		if len(s) != 1 {
			t.Fatalf("%d sessions after Close (%v), want the one kept", len(s), s)
		}
		for pid, state := range s {
			if state != "idle" {
				t.Fatalf("the kept session is %q, want idle (its transaction ended)", state)
			}
			return pid
		}
		return 0
	}
	count := func() int {
		t.Helper()
		docs, _, err := scanAll(t, src, "kv")
		if err != nil {
			t.Fatal(err)
		}
		return len(docs)
	}
	if n := count(); n != 1 {
		t.Fatalf("first snapshot: %d rows, want 1", n)
	}
	first := onlyIdle()
	testenv.Exec(t, dsn, `INSERT INTO kv VALUES (2, 'two')`)
	if n := count(); n != 2 {
		t.Fatalf("a snapshot on the kept session: %d rows, want 2 (a new snapshot)", n)
	}
	if again := onlyIdle(); again != first {
		t.Errorf("the second snapshot ran on session %d, not on the kept %d", again, first)
	}

	testenv.Exec(t, dsn, fmt.Sprintf(`SELECT pg_terminate_backend(%d, 10000)`, first))
	if n := count(); n != 2 {
		t.Fatalf("after the kept session was terminated: %d rows, want 2", n)
	}
	second := onlyIdle()
	if second == first {
		t.Fatalf("the terminated session %d is still there", first)
	}

	// The table changed between snapshots (the kept session has its statements
	// prepared), and a snapshot whose statement failed in the server: the next
	// snapshot reads the table as it is now.
	testenv.Exec(t, dsn, `ALTER TABLE kv ADD COLUMN w int DEFAULT 7`)
	snap, err := src.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Scan(ctx, "broken", func(snapshot.Document) error { return nil }); err == nil || !strings.Contains(err.Error(), "division by zero") {
		t.Fatalf("Scan of a query that divides by zero: %v", err)
	}
	if err := snap.Close(ctx); err != nil {
		t.Fatal(err)
	}
	docs, _, err := scanAll(t, src, "kv")
	if err != nil || len(docs) != 2 || !strings.Contains(string(docs[0].Body), `"w":7`) {
		t.Fatalf("after the table changed: %v, %s", err, docs)
	}

	if err := src.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The backend ends on its own time after the goodbye.
	testenv.Eventually(t, 10*time.Second, func() error {
		if s := sessions(); len(s) != 0 {
			return fmt.Errorf("sessions after the source's Close: %v, want none", s)
		}
		return nil
	})
}
