package pgsource

import "testing"

// TestSelectStatements: a key of one column gets the ids it always had, is ordered by
// the column and then its id in byte order (so byte-equal ids are adjacent even under
// a nondeterministic collation), and a NULL id falls into partition 0 (where the scan
// refuses it) instead of into none; it hashes into the config fingerprint as before. A
// composite key's id and order are built from columns qualified by the row's alias.
func TestSelectStatements(t *testing.T) {
	c := Collection{Name: "things", Table: "public.things", Key: "id"}
	for _, tt := range []struct {
		key         []string
		part, parts int
		want        string
	}{
		{[]string{"id"}, 0, 1, "SELECT (t.\"id\")::text, to_json(t.*)::text FROM (SELECT * FROM \"public\".\"things\"\n) AS t ORDER BY t.\"id\", (t.\"id\")::text COLLATE \"C\""},
		{[]string{"id"}, 2, 3, "SELECT (t.\"id\")::text, to_json(t.*)::text FROM (SELECT * FROM \"public\".\"things\"\n) AS t WHERE (coalesce(hashtext((t.\"id\")::text), 0) & 2147483647) % 3 = 2 ORDER BY t.\"id\", (t.\"id\")::text COLLATE \"C\""},
		{[]string{"t", `a"b`}, 0, 1, "SELECT (replace(replace((t.\"t\")::text COLLATE \"C\", '%', '%25'), ',', '%2C') || ',' || replace(replace((t.\"a\"\"b\")::text COLLATE \"C\", '%', '%25'), ',', '%2C')), to_json(t.*)::text FROM (SELECT * FROM \"public\".\"things\"\n) AS t ORDER BY (replace(replace((t.\"t\")::text COLLATE \"C\", '%', '%25'), ',', '%2C') || ',' || replace(replace((t.\"a\"\"b\")::text COLLATE \"C\", '%', '%25'), ',', '%2C')) COLLATE \"C\""},
	} {
		if got := selectSQL(c, tt.key, tt.part, tt.parts); got != tt.want {
			t.Errorf("selectSQL(%q, %d/%d) =\n%s\nwant\n%s", tt.key, tt.part, tt.parts, got, tt.want)
		}
	}
	// The fingerprint's old formula: fmt.Fprintf(h, "%q %q %q %q\n", Name, Table, Query, Key).
	if got, want := fingerprint([]Collection{c}, map[string][]string{"things": {"id"}}), "668b9610d431d682"; got != want {
		t.Errorf("fingerprint of a one-column key = %s; want %s, as before", got, want)
	}
}
