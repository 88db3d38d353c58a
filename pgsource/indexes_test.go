package pgsource_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// indexesOf opens src and returns the collection's indexes as the snapshot types them.
func indexesOf(t *testing.T, src *pgsource.Source, collection string) ([]snapshot.IndexDef, error) {
	t.Helper()
	ctx := context.Background()
	snap, err := src.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close(ctx)
	return snap.(snapshot.IndexedSnapshot).Indexes(ctx, collection)
}

// An index's fields are typed by the base type their values compare as: a domain's
// base (through a domain over a domain), text for an enum, the column's type else;
// a query's output names are fields as a table's columns are.
func TestIndexFieldsAreTypedByTheirBaseType(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TYPE mood AS ENUM ('sad', 'ok')`,
		`CREATE DOMAIN money2 AS numeric(12, 2)`, `CREATE DOMAIN price AS money2 CHECK (VALUE >= 0)`,
		`CREATE TABLE t (id int PRIMARY KEY, m mood, p price, at timestamptz, "from" date, arr int[], "a,b" text)`)
	src, err := pgsource.New(dsn, []pgsource.Collection{
		{Name: "t", Table: "t", Indexes: []pgsource.Columns{{"m"}, {"p", "at"}, {"from"}, {"arr"}, {"a,b", "id"}}},
		{Name: "q", Query: "SELECT id AS key, p + 1 AS next FROM t", Key: "key", Indexes: []pgsource.Columns{{"next"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := indexesOf(t, src, "t")
	if err != nil {
		t.Fatal(err)
	}
	want := []snapshot.IndexDef{
		{Name: "m", Fields: []string{"m"}, Types: []string{"text"}},
		{Name: "p,at", Fields: []string{"p", "at"}, Types: []string{"numeric", "timestamptz"}},
		{Name: "from", Fields: []string{"from"}, Types: []string{"date"}},
		{Name: "arr", Fields: []string{"arr"}, Types: []string{"_int4"}},
		{Name: "a,,b,id", Fields: []string{"a,b", "id"}, Types: []string{"text", "int4"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("indexes of t (-want +got):\n%s", diff)
	}
	got, err = indexesOf(t, src, "q")
	if err != nil || len(got) != 1 || got[0].Types[0] != "numeric" {
		t.Errorf("indexes of q = %+v, %v; want next typed numeric", got, err)
	}
}

// An index over a field the documents do not hold fails the read, naming the field
// and the fields there are.
func TestIndexOverAMissingFieldIsAnError(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE t (id int PRIMARY KEY, n int)`)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "t", Table: "t", Indexes: []pgsource.Columns{{"n", "nope"}}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = indexesOf(t, src, "t")
	if !errors.Is(err, snapshot.ErrSource) || !strings.Contains(err.Error(), `index n,nope: no field "nope": the documents hold id, n`) {
		t.Errorf("Indexes = %v; want ErrSource naming the missing field", err)
	}
}

// Index declarations are checked when the source is made: each error names the
// collection and the index.
func TestIndexDeclarationsAreValidated(t *testing.T) {
	for _, tc := range []struct {
		indexes []pgsource.Columns
		want    string
	}{
		{[]pgsource.Columns{{}}, "collections[0].indexes[0] (t): an empty list"},
		{[]pgsource.Columns{{"a", ""}}, "collections[0].indexes[0] (t): an empty field name"},
		{[]pgsource.Columns{{"a", "a"}}, `collections[0].indexes[0] (t): field "a" named twice`},
		{[]pgsource.Columns{{"a"}, {"b"}, {"a"}}, "collections[0].indexes[2] (t): the same fields as indexes[0]"},
		{[]pgsource.Columns{{"a", "b", "c", "d", "e", "f", "g", "h", "i"}}, "9 fields, over the limit of 8"},
	} {
		_, err := pgsource.New("postgres://x@127.0.0.1/x", []pgsource.Collection{{Name: "t", Table: "t", Indexes: tc.indexes}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with indexes %q = %v; want an error saying %q", tc.indexes, err, tc.want)
		}
	}
}

// Declaring an index changes the source's configuration fingerprint, so a version
// read without it is never taken for an unchanged source; a collection without
// indexes keeps the fingerprint it had before indexes existed.
func TestIndexesChangeTheConfigFingerprint(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE t (id int PRIMARY KEY, n int)`)
	config := func(indexes []pgsource.Columns) string {
		src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "t", Table: "t", Indexes: indexes}})
		if err != nil {
			t.Fatal(err)
		}
		_, pos, err := scanAll(t, src, "t")
		if err != nil {
			t.Fatal(err)
		}
		return pos.Config
	}
	none, empty, one, two := config(nil), config([]pgsource.Columns{}), config([]pgsource.Columns{{"n"}}), config([]pgsource.Columns{{"n", "id"}})
	if none != empty || none == one || one == two {
		t.Errorf("config fingerprints: none %s, empty %s, [n] %s, [n,id] %s; want none = empty, the rest distinct", none, empty, one, two)
	}
}

// A user's type named like a built-in one ("numeric" in another schema, over point)
// is not taken for the built-in: it is typed by its qualified name, which no index
// orders.
func TestIndexFieldOfAUserTypeNamedLikeABuiltIn(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE SCHEMA odd`, `CREATE DOMAIN odd."numeric" AS point`, `CREATE TYPE odd.int4 AS (x int)`,
		`CREATE TABLE t (id int PRIMARY KEY, p odd."numeric", c odd.int4)`)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "t", Table: "t", Indexes: []pgsource.Columns{{"p"}, {"c"}}}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := indexesOf(t, src, "t")
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Types[0] != "point" || got[1].Types[0] != "odd.int4 (user-defined)" {
		t.Errorf("types = %q, %q; want point (the domain's base) and the composite's qualified name", got[0].Types, got[1].Types)
	}
}
