package pgsource

import (
	"context"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv"
)

// TestSelectStatements: a key of one column gets the ids it always had, is ordered by
// the column (and, under a nondeterministic collation, then by its id in byte order, so
// byte-equal ids are adjacent), and a NULL id falls into partition 0 (where the scan
// refuses it) instead of into none; it hashes into the config fingerprint as before. A
// composite key's id and order are built from columns qualified by the row's alias.
func TestSelectStatements(t *testing.T) {
	c := Collection{Name: "things", Table: "public.things", Key: "id"}
	for _, tt := range []struct {
		key         []string
		byteOrder   bool
		part, parts int
		want        string
	}{
		{[]string{"id"}, false, 0, 1, "SELECT (t.\"id\")::text, to_json(t.*)::text FROM (SELECT * FROM \"public\".\"things\"\n) AS t ORDER BY t.\"id\""},
		{[]string{"id"}, true, 0, 1, "SELECT (t.\"id\")::text, to_json(t.*)::text FROM (SELECT * FROM \"public\".\"things\"\n) AS t ORDER BY t.\"id\", (t.\"id\")::text COLLATE \"C\""},
		{[]string{"id"}, false, 2, 3, "SELECT (t.\"id\")::text, to_json(t.*)::text FROM (SELECT * FROM \"public\".\"things\"\n) AS t WHERE (coalesce(hashtext((t.\"id\")::text), 0) & 2147483647) % 3 = 2 ORDER BY t.\"id\""},
		{[]string{"t", `a"b`}, false, 0, 1, "SELECT (replace(replace((t.\"t\")::text COLLATE \"C\", '%', '%25'), ',', '%2C') || ',' || replace(replace((t.\"a\"\"b\")::text COLLATE \"C\", '%', '%25'), ',', '%2C')), to_json(t.*)::text FROM (SELECT * FROM \"public\".\"things\"\n) AS t ORDER BY (replace(replace((t.\"t\")::text COLLATE \"C\", '%', '%25'), ',', '%2C') || ',' || replace(replace((t.\"a\"\"b\")::text COLLATE \"C\", '%', '%25'), ',', '%2C')) COLLATE \"C\""},
	} {
		if got := selectSQL(c, tt.key, tt.byteOrder, tt.part, tt.parts); got != tt.want {
			t.Errorf("selectSQL(%q, %d/%d) =\n%s\nwant\n%s", tt.key, tt.part, tt.parts, got, tt.want)
		}
	}
	// The fingerprint's old formula: fmt.Fprintf(h, "%q %q %q %q\n", Name, Table, Query, Key).
	if got, want := fingerprint([]Collection{c}, map[string][]string{"things": {"id"}}), "668b9610d431d682"; got != want {
		t.Errorf("fingerprint of a one-column key = %s; want %s, as before", got, want)
	}
}

// TestNeedsByteOrder: only a key that Postgres may call equal to a different id (a
// nondeterministic collation; a query's collatable key, whose collation the catalog
// does not give) pays for the extra byte order; a text key under the default collation
// and a bigint key are streamed in the column's own order, as an index gives it.
func TestNeedsByteOrder(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`,
		`CREATE TABLE plain (k text PRIMARY KEY, n bigint UNIQUE NOT NULL)`,
		`CREATE TABLE folded (k text COLLATE ci PRIMARY KEY)`)
	ctx := context.Background()
	conn := testenv.Connect(t, ctx, dsn)
	defer conn.Close(ctx)
	for _, tt := range []struct {
		c    Collection
		want bool
	}{
		{Collection{Name: "a", Table: "plain", Key: "k"}, false},
		{Collection{Name: "b", Table: "plain", Key: "n"}, false},
		{Collection{Name: "c", Table: "folded", Key: "k"}, true},
		{Collection{Name: "d", Query: "SELECT n FROM plain", Key: "n"}, false},
		{Collection{Name: "e", Query: "SELECT k FROM plain", Key: "k"}, true},
	} {
		got, err := needsByteOrder(ctx, conn, tt.c, tt.c.keyColumns())
		if err != nil || got != tt.want {
			t.Errorf("needsByteOrder(%s) = %t, %v; want %t", tt.c.Name, got, err, tt.want)
		}
	}
}
