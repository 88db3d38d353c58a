package pgsource

import "testing"

// TestSingleKeyStatementUnchanged: a key of one column is read with the very statement
// it was read with before keys could have several columns (same ids, same order, same
// partitions), and hashes into the config fingerprint as before; a composite key's id
// and order are built from columns qualified by the row's alias.
func TestSingleKeyStatementUnchanged(t *testing.T) {
	c := Collection{Name: "things", Table: "public.things", Key: "id"}
	for _, tt := range []struct {
		key         []string
		part, parts int
		want        string
	}{
		{[]string{"id"}, 0, 1, "SELECT (t.\"id\")::text, to_json(t.*)::text FROM (SELECT * FROM \"public\".\"things\"\n) AS t ORDER BY t.\"id\""},
		{[]string{"id"}, 2, 3, "SELECT (t.\"id\")::text, to_json(t.*)::text FROM (SELECT * FROM \"public\".\"things\"\n) AS t WHERE (hashtext((t.\"id\")::text) & 2147483647) % 3 = 2 ORDER BY t.\"id\""},
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
