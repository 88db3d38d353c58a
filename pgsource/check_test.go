package pgsource_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
)

const checkSchema = `
CREATE TABLE customers (id int PRIMARY KEY, email text NOT NULL UNIQUE, name text);
INSERT INTO customers SELECT g, 'c' || g || '@example.com', 'n' FROM generate_series(1, 500) g;
CREATE TABLE payments (payment_id int, payment_date timestamptz, amount numeric,
	PRIMARY KEY (payment_date, payment_id)) PARTITION BY RANGE (payment_date);
CREATE TABLE payments_2024 PARTITION OF payments FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE payments_other PARTITION OF payments DEFAULT;
INSERT INTO payments SELECT g, '2024-03-01'::timestamptz + g * interval '1 min', g FROM generate_series(1, 300) g;
INSERT INTO payments SELECT g, '2023-03-01'::timestamptz + g * interval '1 min', g FROM generate_series(1, 200) g;
CREATE TABLE loose (a int, b text, c int NOT NULL);
CREATE TABLE ambiguous (a int NOT NULL UNIQUE, b int NOT NULL UNIQUE);
CREATE TABLE nothing (a int);
CREATE TABLE pairs (a int NOT NULL, b int NOT NULL, UNIQUE (b, a));
CREATE TABLE nullable_pairs (a int, b int NOT NULL, UNIQUE (a, b));
CREATE TABLE docs (id int PRIMARY KEY, j json);
CREATE VIEW active AS SELECT * FROM customers WHERE id > 10;
CREATE SEQUENCE side_effects;
CREATE TABLE victims (id int PRIMARY KEY);
INSERT INTO victims VALUES (1), (2);
CREATE SCHEMA hidden;
CREATE TABLE hidden.secret (id int PRIMARY KEY);
CREATE TABLE unreadable (id int PRIMARY KEY);
ANALYZE;
CREATE TABLE fresh (id int PRIMARY KEY);
`

// readerDSN creates a role that may read customers only, and returns dsn for it.
func readerDSN(tb testing.TB, dsn string) string {
	tb.Helper()
	role := fmt.Sprintf("snapflip_reader_%d", time.Now().UnixNano())
	testenv.Exec(tb, dsn, "CREATE ROLE "+role+" LOGIN", "GRANT SELECT ON customers TO "+role)
	tb.Cleanup(func() { testenv.Exec(tb, dsn, "DROP OWNED BY "+role, "DROP ROLE "+role) })
	return strings.Replace(dsn, "postgres@", role+"@", 1)
}

// TestCheckGoodConfig: Check reports each collection's source, key (configured or
// inferred), whether Postgres guarantees the key, and the table's estimated rows and
// size, with no problem.
func TestCheckGoodConfig(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, checkSchema)
	src, err := pgsource.New(dsn, []pgsource.Collection{
		{Name: "customers", Table: "public.customers"},
		{Name: "payments", Table: "payments"},
		{Name: "by_email", Table: "customers", Key: "email"},
		{Name: "pairs", Table: "pairs", KeyColumns: []string{"a", "b"}},
		{Name: "loose", Table: "loose", KeyColumns: []string{"c", "b"}},
		{Name: "nullable_pairs", Table: "nullable_pairs", KeyColumns: []string{"a", "b"}},
		{Name: "fresh", Table: "fresh"},
		{Name: "active", Table: "active", Key: "id"},
		{Name: "query", Query: "SELECT c.id, c.name, nextval('side_effects') AS n FROM customers c;", Key: "id"},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := src.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	const notProvable = "not provable: duplicates and NULLs will be checked during the sync"
	want := []pgsource.CollectionReport{
		{Collection: "customers", Source: "table public.customers", Exists: true, Key: []string{"id"}, KeyInferred: true,
			KeyUnique: true, KeyGuarantee: "primary key customers_pkey", EstimatedRows: 500},
		{Collection: "payments", Source: "partitioned table payments", Exists: true, Key: []string{"payment_date", "payment_id"}, KeyInferred: true,
			KeyUnique: true, KeyGuarantee: "primary key payments_pkey", EstimatedRows: 500},
		{Collection: "by_email", Source: "table customers", Exists: true, Key: []string{"email"},
			KeyUnique: true, KeyGuarantee: "unique index customers_email_key over NOT NULL columns", EstimatedRows: 500},
		{Collection: "pairs", Source: "table pairs", Exists: true, Key: []string{"a", "b"},
			KeyUnique: true, KeyGuarantee: "unique index pairs_b_a_key over NOT NULL columns", EstimatedRows: 0},
		{Collection: "loose", Source: "table loose", Exists: true, Key: []string{"c", "b"}, KeyGuarantee: notProvable, EstimatedRows: 0},
		{Collection: "nullable_pairs", Source: "table nullable_pairs", Exists: true, Key: []string{"a", "b"}, KeyGuarantee: notProvable, EstimatedRows: 0},
		{Collection: "fresh", Source: "table fresh", Exists: true, Key: []string{"id"}, KeyInferred: true,
			KeyUnique: true, KeyGuarantee: "primary key fresh_pkey", EstimatedRows: -1}, // never analyzed
		{Collection: "active", Source: "view active", Exists: true, Key: []string{"id"}, KeyGuarantee: notProvable, EstimatedRows: -1, SizeBytes: -1},
		{Collection: "query", Source: "query", Exists: true, Key: []string{"id"}, KeyGuarantee: notProvable, EstimatedRows: -1, SizeBytes: -1},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(pgsource.CollectionReport{}, "SizeBytes"), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("reports (-want +got):\n%s", diff)
	}
	for _, r := range got {
		if !r.OK() {
			t.Errorf("%s: OK() with problems %q", r.Collection, r.Problems)
		}
		switch {
		case r.Collection == "customers" || r.Collection == "payments":
			if r.SizeBytes < 50_000 {
				t.Errorf("%s: size %d; want the size of its 500 rows and indexes", r.Collection, r.SizeBytes)
			}
		case r.Source == "query" || r.Source == "view active":
			if r.SizeBytes != -1 {
				t.Errorf("%s: size %d; want -1, unknown", r.Collection, r.SizeBytes)
			}
		case r.SizeBytes < 0:
			t.Errorf("%s: size %d; want a table's size", r.Collection, r.SizeBytes)
		}
	}
	// Described, never run: the query's nextval did not move the sequence. And what
	// Check found good opens for a sync.
	ctx := context.Background()
	snap, err := src.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close(ctx)
	var called bool
	if err := snapshotQueryRow(t, dsn, `SELECT is_called FROM side_effects`, &called); err != nil || called {
		t.Errorf("sequence called = %v, %v; Check ran the query", called, err)
	}
}

// TestCheckBadConfig: every problem is reported, as a sentence naming the collection,
// and Check still reports what it could find; nothing is written.
func TestCheckBadConfig(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, checkSchema)
	src, err := pgsource.New(dsn, []pgsource.Collection{
		{Name: "missing", Table: "public.missing"},
		{Name: "missing_keyed", Table: "missing", Key: "id"},
		{Name: "no_column", Table: "customers", KeyColumns: []string{"id", "nope", "neither"}},
		{Name: "ambiguous", Table: "ambiguous"},
		{Name: "nothing", Table: "nothing"},
		{Name: "view", Table: "active"},
		{Name: "bad_sql", Query: "SELEC id FROM customers", Key: "id"},
		{Name: "query_no_key", Query: "SELECT id AS ident, name FROM customers", Key: "id"},
		{Name: "query_ambiguous", Query: "SELECT a.id, b.id FROM customers a JOIN customers b USING (email)", Key: "id"},
		{Name: "json_key", Table: "docs", Key: "j"},
		{Name: "writes", Query: "WITH d AS (DELETE FROM victims RETURNING *) SELECT * FROM d", Key: "id"},
	})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := pgsource.New(readerDSN(t, dsn), []pgsource.Collection{
		{Name: "hidden_schema", Table: "hidden.secret"}, {Name: "unreadable", Table: "unreadable"}, {Name: "readable", Table: "customers"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := src.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got2, err := reader.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, got2...)
	want := map[string][]string{ // collection → what its one problem must say
		"missing":         {"table public.missing does not exist"},
		"missing_keyed":   {"table missing does not exist"},
		"no_column":       {"key columns nope, neither are not in table customers (its columns: id, email, name)"},
		"ambiguous":       {"no primary key and 2 unique indexes that could be its key: [a] (index ambiguous_a_key), [b] (index ambiguous_b_key)"},
		"nothing":         {"table nothing has no primary key and no unique index", "name its key in the config"},
		"view":            {"active is a view, whose key cannot be inferred", "name its key in the config"},
		"bad_sql":         {"the query is not valid", "syntax error"},
		"query_no_key":    {"key column id is not among the query's columns (ident, name)"},
		"query_ambiguous": {"the statement the sync runs fails", `column reference "id" is ambiguous`},
		"json_key":        {"the statement the sync runs fails", "could not identify an ordering operator for type json"},
		"writes":          {"the query is not valid", "data-modifying"},
		"hidden_schema":   {"hidden.secret", "permission denied for schema hidden"},
		"unreadable":      {"permission denied: this user may not read every column of table unreadable"},
	}
	seen := map[string]bool{}
	for _, r := range got {
		w, ok := want[r.Collection]
		if !ok {
			if !r.OK() {
				t.Errorf("%s: problems %q; want none", r.Collection, r.Problems)
			}
			continue
		}
		seen[r.Collection] = true
		if len(r.Problems) != 1 || r.OK() {
			t.Errorf("%s: problems %q; want one", r.Collection, r.Problems)
			continue
		}
		p := r.Problems[0]
		if !strings.HasPrefix(p, "collection "+r.Collection+": ") {
			t.Errorf("%s: problem %q does not start by naming the collection", r.Collection, p)
		}
		for _, s := range w {
			if !strings.Contains(p, s) {
				t.Errorf("%s: problem %q does not say %q", r.Collection, p, s)
			}
		}
		t.Logf("%s", p)
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("no report for %s", name)
		}
	}
	for _, r := range got {
		switch r.Collection {
		case "missing", "missing_keyed", "bad_sql", "writes", "hidden_schema":
			if r.Exists {
				t.Errorf("%s: Exists; want not", r.Collection)
			}
		default:
			if !r.Exists {
				t.Errorf("%s: does not exist; want it found", r.Collection)
			}
		}
	}
	var n int
	if err := snapshotQueryRow(t, dsn, `SELECT count(*) FROM victims`, &n); err != nil || n != 2 {
		t.Errorf("victims = %d, %v after Check; want the 2 rows untouched", n, err)
	}
}

func snapshotQueryRow(tb testing.TB, dsn, q string, dest any) error {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, q).Scan(dest)
}

// TestCheckIndexes: Check reports each declared index's fields (whether the documents
// hold them, their base type, whether they can be indexed and why not) and its
// estimated size, within a fifth of what the rows' real entries take; a missing or
// unindexable field is a problem naming the collection and the index.
func TestCheckIndexes(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TYPE rating AS ENUM ('G', 'PG', 'NC-17')`,
		`CREATE DOMAIN film_year AS int CHECK (VALUE > 1900)`,
		`CREATE TABLE film (id int PRIMARY KEY, title text, rating rating, release_year film_year, special jsonb,
			code char(3), tags text[], updated timestamptz)`,
		`INSERT INTO film SELECT g, 'A Film Titled Number ' || g || repeat('z', g % 20), (ARRAY['G', 'PG', 'NC-17'])[g % 3 + 1]::rating,
			1950 + g % 70, '{}', 'abc', '{}', '2024-01-01'::timestamptz + g * interval '1 hour' FROM generate_series(1, 500) g`,
		`ANALYZE film`)
	collections := []pgsource.Collection{
		{Name: "film", Table: "film", Indexes: []pgsource.Columns{{"title"}, {"rating", "release_year"}, {"special"}, {"nope"},
			{"code"}, {"tags"}, {"updated"}}},
		{Name: "film_q", Query: "SELECT id, title AS name FROM film", Key: "id", Indexes: []pgsource.Columns{{"name"}, {"title"}}},
		{Name: "gone", Table: "gone", Key: "id", Indexes: []pgsource.Columns{{"a"}}},
	}
	src, err := pgsource.New(dsn, collections)
	if err != nil {
		t.Fatal(err)
	}
	got, err := src.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d reports; want 3", len(got))
	}
	field := func(name, typ string, indexable bool, why string) pgsource.IndexField {
		return pgsource.IndexField{Name: name, Exists: typ != "", Type: typ, Indexable: indexable, Why: why}
	}
	wantFilm := []pgsource.IndexReport{
		{Name: "title", Fields: []pgsource.IndexField{field("title", "text", true, "")}},
		{Name: "rating,release_year", Fields: []pgsource.IndexField{field("rating", "text", true, ""), field("release_year", "int4", true, "")}},
		{Name: "special", Fields: []pgsource.IndexField{field("special", "jsonb", false, "type jsonb: JSON values are not ordered by their rendering")}},
		{Name: "nope", Fields: []pgsource.IndexField{field("nope", "", false, "")}},
		{Name: "code", Fields: []pgsource.IndexField{field("code", "bpchar", false,
			"type bpchar: char(n) compares ignoring trailing spaces, which its JSON rendering keeps")}},
		{Name: "tags", Fields: []pgsource.IndexField{field("tags", "_text", false, "type _text: arrays cannot be indexed")}},
		{Name: "updated", Fields: []pgsource.IndexField{field("updated", "timestamptz", true, "")}},
	}
	sizes := cmpopts.IgnoreFields(pgsource.IndexReport{}, "EntryBytes", "EstimatedBytes")
	widths := cmpopts.IgnoreFields(pgsource.IndexField{}, "Width")
	if diff := cmp.Diff(wantFilm, got[0].Indexes, sizes, widths); diff != "" {
		t.Errorf("film's indexes (-want +got):\n%s", diff)
	}
	wantProblems := []string{
		`collection film: index special: field "special" cannot be indexed: type jsonb: JSON values are not ordered by their rendering`,
		`collection film: index nope: no field "nope": the documents hold id, title, rating, release_year, special, code, tags, updated`,
		`collection film: index code: field "code" cannot be indexed: type bpchar: `,
		`collection film: index tags: field "tags" cannot be indexed: type _text: arrays cannot be indexed`,
	}
	if len(got[0].Problems) != len(wantProblems) {
		t.Errorf("film's problems %q; want %d", got[0].Problems, len(wantProblems))
	}
	for i, p := range got[0].Problems {
		if i < len(wantProblems) && !strings.HasPrefix(p, wantProblems[i]) {
			t.Errorf("film's problem %d = %q; want it to start %q", i, p, wantProblems[i])
		}
	}

	// The estimates: one entry per row, its bytes within a fifth of the real entries'
	// mean; none for an index that cannot be built.
	for _, ir := range got[0].Indexes {
		if !ir.OK() {
			if ir.EntryBytes != 0 || ir.EstimatedBytes != -1 {
				t.Errorf("index %s cannot be built, yet its estimate is %d bytes an entry, %d in all", ir.Name, ir.EntryBytes, ir.EstimatedBytes)
			}
			continue
		}
		if ir.Fields[0].Width <= 0 {
			t.Errorf("index %s: field %s has no width after ANALYZE", ir.Name, ir.Fields[0].Name)
		}
		real := meanEntryBytes(t, dsn, ir)
		if ir.EstimatedBytes != 500*int64(ir.EntryBytes) || float64(ir.EntryBytes) < real*0.8 || float64(ir.EntryBytes) > real*1.2 {
			t.Errorf("index %s: estimate %d bytes an entry, %d in all; the real entries take %.1f bytes each, 500 rows", ir.Name, ir.EntryBytes, ir.EstimatedBytes, real)
		}
		t.Logf("index %s: estimated %d bytes an entry, real %.1f", ir.Name, ir.EntryBytes, real)
	}

	// A query has no statistics: its fields' widths and rows are unknown, so is its
	// size; a field it does not output is a problem.
	q := got[1]
	if len(q.Indexes) != 2 || !q.Indexes[0].OK() || q.Indexes[0].Fields[0].Width != -1 || q.Indexes[0].EntryBytes <= 0 ||
		q.Indexes[0].EstimatedBytes != -1 || q.Indexes[1].OK() {
		t.Errorf("film_q's indexes = %+v; want name indexable, without statistics or size, and title missing", q.Indexes)
	}
	if len(q.Problems) != 1 || !strings.Contains(q.Problems[0], `index title: no field "title": the documents hold id, name`) {
		t.Errorf("film_q's problems = %q; want title missing", q.Problems)
	}
	// A missing table: its indexes are listed, unchecked, and the table is the problem.
	g := got[2]
	if len(g.Indexes) != 1 || g.Indexes[0].Name != "a" || g.Indexes[0].Fields[0].Exists || len(g.Problems) != 1 ||
		!strings.Contains(g.Problems[0], "does not exist") {
		t.Errorf("gone = %+v; want its index unchecked, one problem: the table", g)
	}

	// With the storage's row key, each entry costs its row key and value.
	sized, err := pgsource.New(dsn, collections[:1])
	if err != nil {
		t.Fatal(err)
	}
	sized.RowKeyBytes = func(collection, id string) int { return len(collection) + len(id) + 100 }
	withKeys, err := sized.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if a, b := got[0].Indexes[0].EntryBytes, withKeys[0].Indexes[0].EntryBytes; b != a+len("film/title")+100 {
		t.Errorf("with row keys, an entry of title takes %d bytes; want %d + %d", b, a, len("film/title")+100)
	}
}

// meanEntryBytes returns the mean bytes of the entries of index ir, whose fields are
// film's, as layers write them: each row's values encoded, escaped, a separator and
// its id, and the entry's value.
func meanEntryBytes(tb testing.TB, dsn string, ir pgsource.IndexReport) float64 {
	tb.Helper()
	def := index.Def{Name: ir.Name}
	for _, f := range ir.Fields {
		ty, err := index.TypeFor(f.Type)
		if err != nil {
			tb.Fatal(err)
		}
		def.Fields, def.Types = append(def.Fields, f.Name), append(def.Types, ty)
	}
	ctx := context.Background()
	conn := testenv.Connect(tb, ctx, dsn)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT id::text, to_json(f)::text FROM film f`)
	if err != nil {
		tb.Fatal(err)
	}
	var id, body string
	var total, n int
	if _, err := pgx.ForEachRow(rows, []any{&id, &body}, func() error {
		key, err := index.Key(def, []byte(body))
		total += len(index.EntryID(key, id)) + len(index.EntryBody)
		n++
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	return float64(total) / float64(n)
}
