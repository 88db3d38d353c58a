package pgsource_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
)

// keySchema holds a table for every way a key can, or cannot, be inferred.
var keySchema = []string{
	`CREATE TABLE one_pk (id int PRIMARY KEY, code text NOT NULL UNIQUE, v text)`,
	`INSERT INTO one_pk VALUES (-5, 'x', 'a'), (10, 'y', NULL), (7, 'z', 'b')`,
	// A partitioned table keyed by (payment_date, payment_id), as a sales schema has.
	`CREATE TABLE payments (payment_id int, payment_date timestamptz, amount numeric,
		PRIMARY KEY (payment_date, payment_id)) PARTITION BY RANGE (payment_date)`,
	`CREATE TABLE payments_2024 PARTITION OF payments FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')`,
	`CREATE TABLE payments_other PARTITION OF payments DEFAULT`,
	`INSERT INTO payments VALUES (1, '2024-02-29 12:34:56.789012+00', 9.99), (-5, '2024-02-29 12:34:56.789012+00', -1),
		(1, '1999-12-31 23:59:59.999999-05', 0)`,
	// A join table.
	`CREATE TABLE film_actor (actor_id int, film_id int, last_update date, PRIMARY KEY (actor_id, film_id))`,
	`INSERT INTO film_actor VALUES (1, 23, '2024-01-01'), (1, 3, '2024-01-02'), (12, 3, '2024-01-03')`,
	// No primary key: the one unique index over NOT NULL columns, not the nullable,
	// partial or expression ones.
	`CREATE TABLE by_code (code text NOT NULL, nick text UNIQUE, other text NOT NULL, n int NOT NULL)`,
	`CREATE UNIQUE INDEX by_code_code ON by_code (code) INCLUDE (n)`,
	`CREATE UNIQUE INDEX by_code_partial ON by_code (other) WHERE n > 0`,
	`CREATE UNIQUE INDEX by_code_expr ON by_code (lower(other))`,
	`INSERT INTO by_code VALUES ('b', NULL, 'o1', 1), ('a', 'A', 'o2', 2)`,
	// No primary key: a composite unique index, twice (one candidate).
	`CREATE TABLE by_pair (a int NOT NULL, b text NOT NULL, v int, UNIQUE (a, b))`,
	`CREATE UNIQUE INDEX by_pair_again ON by_pair (a, b)`,
	`INSERT INTO by_pair VALUES (1, 'x', 1), (1, 'y', 2)`,
	// A primary key beats unique indexes.
	`CREATE TABLE pk_and_unique (id int PRIMARY KEY, a int NOT NULL UNIQUE, b int NOT NULL UNIQUE)`,
	`INSERT INTO pk_and_unique VALUES (1, 10, 100)`,
	// A materialized view with a unique index (its columns are never NOT NULL).
	`CREATE MATERIALIZED VIEW mv AS SELECT id, v FROM one_pk`,
	`CREATE UNIQUE INDEX mv_id ON mv (id)`,
	// Nothing to infer from.
	`CREATE TABLE ambiguous (a int NOT NULL UNIQUE, b int NOT NULL UNIQUE, c text)`,
	`CREATE TABLE nothing (a int, b int)`,
	`CREATE TABLE nullable_unique (a int UNIQUE, b int)`,
	`CREATE TABLE partial_only (a int NOT NULL, b int)`,
	`CREATE UNIQUE INDEX partial_only_a ON partial_only (a) WHERE b > 0`,
	`CREATE VIEW v AS SELECT * FROM one_pk`,
}

// TestKeyInferred: a table collection without a key takes its primary key, or else its
// only unique index over NOT NULL columns (not a partial or expression index), and its
// documents' ids are made from it.
func TestKeyInferred(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, keySchema...)
	tests := []struct {
		table string
		want  []string // ids, in scan order
	}{
		// A key of one column is ordered by its type, as a configured one is.
		{"one_pk", []string{"-5", "7", "10"}},
		// The primary key's column order, not the table's; timestamps as text in UTC;
		// composite ids in byte order.
		{"payments", []string{"2000-01-01 04:59:59.999999+00,1", "2024-02-29 12:34:56.789012+00,-5", "2024-02-29 12:34:56.789012+00,1"}},
		{"film_actor", []string{"1,23", "1,3", "12,3"}},
		{"by_code", []string{"a", "b"}},
		{"by_pair", []string{"1,x", "1,y"}},
		{"pk_and_unique", []string{"1"}},
	}
	for _, tt := range tests {
		t.Run(tt.table, func(t *testing.T) {
			src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "c", Table: tt.table}})
			if err != nil {
				t.Fatalf("New(a table without key) = %v; want the key left to be inferred", err)
			}
			docs, _, err := scanAll(t, src, "c")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range docs {
				got = append(got, d.ID)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("ids = %q; want %q", got, tt.want)
			}
		})
	}
}

// TestKeyNotInferred: when no key can be inferred, opening the source fails with an
// error that names the collection, says what was found and asks for a key.
func TestKeyNotInferred(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, keySchema...)
	tests := []struct {
		table string
		want  []string
	}{
		{"ambiguous", []string{"collection c:", "table ambiguous", "no primary key", "2 unique indexes", "[a] (index ambiguous_a_key)", "[b] (index ambiguous_b_key)", "name one of them as its key"}},
		{"nothing", []string{"collection c:", "table nothing", "no primary key and no unique index", "name its key in the config"}},
		{"nullable_unique", []string{"collection c:", "no primary key and no unique index", "nullable columns: nullable_unique_a_key on (a)", "name its key"}},
		{"partial_only", []string{"collection c:", "no primary key and no unique index", "name its key"}},
		{"mv", []string{"collection c:", "materialized view mv", "nullable columns: mv_id on (id)"}},
		{"v", []string{"collection c:", "v is a view", "cannot be inferred", "name its key in the config"}},
		{"public.missing", []string{"collection c:", "table public.missing does not exist"}},
	}
	for _, tt := range tests {
		t.Run(tt.table, func(t *testing.T) {
			src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "c", Table: tt.table}})
			if err != nil {
				t.Fatalf("New(a table without key) = %v; want the key left to be inferred", err)
			}
			snap, err := src.Open(context.Background())
			if err == nil {
				snap.Close(context.Background())
				t.Fatal("Open succeeded; want an error saying the key cannot be inferred")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestConfiguredKeyWins: a configured key is used as it is, even where one could be
// inferred, and a query or view must name one.
func TestConfiguredKeyWins(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, keySchema...)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "c", Table: "one_pk", Key: "code"}})
	if err != nil {
		t.Fatal(err)
	}
	docs, _, err := scanAll(t, src, "c")
	if err != nil || len(docs) != 3 || docs[0].ID != "x" {
		t.Errorf("one_pk keyed by code = %v, %v; want ids x, y, z", docs, err)
	}
	_, err = pgsource.New(dsn, []pgsource.Collection{{Name: "q", Query: "SELECT 1 AS k"}})
	if err == nil || !strings.Contains(err.Error(), "collections[0].key (q): required for a query") {
		t.Errorf("New(a query without key) = %v; want an error naming collections[0].key and the collection", err)
	}
}

// TestInferredKeyInPosition: a version's source position records the key it was read
// with, so a changed primary key (new ids) is never taken for an unchanged source.
func TestInferredKeyInPosition(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE t (a int NOT NULL, b int NOT NULL, CONSTRAINT t_pk PRIMARY KEY (a))`, `INSERT INTO t VALUES (1, 2)`)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "c", Table: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	config := func() (string, string) {
		t.Helper()
		docs, pos, err := scanAll(t, src, "c")
		if err != nil || len(docs) != 1 {
			t.Fatalf("scan = %v, %v", docs, err)
		}
		return pos.Config, docs[0].ID
	}
	c1, id1 := config()
	if c2, _ := config(); c2 != c1 {
		t.Errorf("config fingerprint moved from %s to %s with nothing changed", c1, c2)
	}
	testenv.Exec(t, dsn, `ALTER TABLE t DROP CONSTRAINT t_pk`, `ALTER TABLE t ADD PRIMARY KEY (a, b)`)
	c3, id3 := config()
	if c3 == c1 || id1 != "1" || id3 != "1,2" {
		t.Errorf("after the primary key grew: config %s → %s, id %q → %q; want a new config and ids 1 → 1,2", c1, c3, id1, id3)
	}
}
