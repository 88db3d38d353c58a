package pgsource_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// handID is the id rule as docs/configuration.md documents it, written out again: each component
// with '%' as %25 and ',' as %2C, joined by ','.
func handID(components ...string) string {
	esc := make([]string, len(components))
	for i, c := range components {
		esc[i] = strings.ReplaceAll(strings.ReplaceAll(c, "%", "%25"), ",", "%2C")
	}
	return strings.Join(esc, ",")
}

func TestIDExamples(t *testing.T) {
	for _, tt := range []struct {
		components []string
		want       string
	}{
		{[]string{"2024-02-29 12:34:56.789012+00", "-5"}, "2024-02-29 12:34:56.789012+00,-5"},
		{[]string{"a,b", "100%"}, "a%2Cb,100%25"},
		{[]string{"", ""}, ","},
		{[]string{"%2C", ","}, "%252C,%2C"},
		{[]string{"a/b#c d", "x"}, "a/b#c d,x"},
		{[]string{"one,%"}, "one,%"}, // a key of one column is its value as it is
	} {
		if got := pgsource.ID(tt.components...); got != tt.want || handID(tt.components...) != tt.want && len(tt.components) > 1 {
			t.Errorf("ID(%q) = %q; want %q", tt.components, got, tt.want)
		}
		back, err := pgsource.SplitID(tt.want, len(tt.components))
		if err != nil || !slices.Equal(back, tt.components) {
			t.Errorf("SplitID(%q) = %q, %v; want %q", tt.want, back, err, tt.components)
		}
	}
	// The order ids list in, and its documented departure from tuple order.
	for _, tt := range [][2][]string{
		{{"5", "9"}, {"50", "1"}},
		{{"Ann", "9"}, {"Anna", "1"}},
		{{"Ann Lee", "9"}, {"Ann", "1"}}, // ' ' sorts below ','
		{{"2024-02-29 12:34:56+00", "9"}, {"2024-02-29 12:34:56.5+00", "1"}},
		{{"a", "b"}, {"a", "b "}},
	} {
		if a, b := pgsource.ID(tt[0]...), pgsource.ID(tt[1]...); a >= b {
			t.Errorf("ID(%q) = %q sorts after ID(%q) = %q", tt[0], a, tt[1], b)
		}
	}
	for _, bad := range []string{"a,b,c", "a", "a%2,b", "a%2c,b", "%,b", "a%41,b"} {
		if got, err := pgsource.SplitID(bad, 2); err == nil {
			t.Errorf("SplitID(%q, 2) = %q; want an error", bad, got)
		}
	}
}

// FuzzID: any components survive ID then SplitID, so distinct tuples have distinct ids.
func FuzzID(f *testing.F) {
	f.Add("a,b\x00100%\x00")
	f.Add("%2C\x00%25,\x00,,")
	f.Fuzz(func(t *testing.T, s string) {
		c := strings.Split(s, "\x00")
		if len(c) < 2 {
			return
		}
		id := pgsource.ID(c...)
		if id != handID(c...) {
			t.Fatalf("ID(%q) = %q; want the documented %q", c, id, handID(c...))
		}
		back, err := pgsource.SplitID(id, len(c))
		if err != nil || !slices.Equal(back, c) {
			t.Fatalf("SplitID(ID(%q)) = %q, %v", c, back, err)
		}
	})
}

// awkwardText are text components that need escaping, or look like escapes, or sort
// oddly.
var awkwardText = []string{"", " ", ",", ",,", "%", "%25", "%2C", "a,b", "a%2Cb", "100%", "a/b", "#frag", "?q=1&r=2",
	"with space", "trail ", "+plus", "ü/日本", "emoji 🎉", "Ann", "Ann Lee", "Anna", "A", "a", "z", "~", "x\ty"}

// TestCompositeIDsRoundTrip: awkward tuples of text, timestamptz with microseconds,
// negative numerics and integers get ids that are distinct, made by the documented
// rule from Postgres' text forms (UTC), that decode back to those text forms, and that
// come out of the scan in byte order (the order the API lists them in), grouped by
// leading components, and in tuple order wherever the documented rule promises it.
func TestCompositeIDsRoundTrip(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE c (name text, at timestamptz, amount numeric, n bigint, body text)`)
	rnd := rand.New(rand.NewPCG(1, 2))
	stamps := []string{"2024-02-29 12:34:56.789012+00", "2024-02-29 12:34:56.789012+05:30", "1999-12-31 23:59:59.999999-05",
		"2024-02-29 12:34:56+00", "0044-03-15 12:00:00+00 BC", "infinity", "-infinity", "2024-02-29 12:34:56.000001+00"}
	amounts := []string{"-5", "-0.5", "0", "0.0000001", "-12345678901234567890.123456789", "1e3", "-1.10"}
	ints := []string{"-5", "0", "5", "50", "-9223372036854775808", "9223372036854775807"}
	seen := map[string]bool{}
	var values []string
	for len(values) < 400 {
		row := fmt.Sprintf("(%s, %s, %s, %s, %s)", quoteSQL(awkwardText[rnd.IntN(len(awkwardText))]),
			quoteSQL(stamps[rnd.IntN(len(stamps))]), amounts[rnd.IntN(len(amounts))], ints[rnd.IntN(len(ints))], quoteSQL(fmt.Sprint(len(values))))
		key := row[:strings.LastIndex(row, ",")]
		if !seen[key] {
			seen[key] = true
			values = append(values, row)
		}
	}
	testenv.Exec(t, dsn, "INSERT INTO c VALUES "+strings.Join(values, ", "))
	key := []string{"name", "at", "amount", "n"}

	// What Postgres says each row's key components are, as text in UTC.
	want := map[string][]string{} // body → components
	ctx := context.Background()
	conn := testenv.Connect(t, ctx, dsn)
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET timezone = 'UTC'`); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `SELECT name, at::text, amount::text, n::text, to_json(c)::text FROM c`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var comp [4]string
		var body string
		if err := rows.Scan(&comp[0], &comp[1], &comp[2], &comp[3], &body); err != nil {
			t.Fatal(err)
		}
		want[body] = comp[:]
	}
	if err := rows.Err(); err != nil || len(want) != len(values) {
		t.Fatalf("read back %d rows (%v); want %d", len(want), err, len(values))
	}

	for _, readers := range []int{1, 3} {
		src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "c", Table: "c", KeyColumns: key}})
		if err != nil {
			t.Fatal(err)
		}
		src.Readers, src.PartitionMinRows = readers, 1
		snap, err := src.Open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		bodies := map[string]string{}
		for part := range readers {
			var partIDs []string
			err := snap.(snapshot.PartitionedSnapshot).ScanPartition(ctx, "c", part, readers, func(d snapshot.Document) error {
				partIDs = append(partIDs, d.ID)
				bodies[d.ID] = string(d.Body)
				return nil
			})
			if err != nil {
				t.Fatalf("%d readers: %v", readers, err)
			}
			if !slices.IsSorted(partIDs) {
				t.Errorf("%d readers: part %d is not in byte order", readers, part)
			}
			ids = append(ids, partIDs...)
		}
		snap.Close(ctx)
		if len(bodies) != len(values) || len(ids) != len(values) {
			t.Fatalf("%d readers: %d distinct ids of %d documents; want %d", readers, len(bodies), len(ids), len(values))
		}
		for id, body := range bodies {
			comp, ok := want[body]
			if !ok {
				t.Errorf("%d readers: document %s is no row of the table", readers, body)
				continue
			}
			if id != handID(comp...) {
				t.Errorf("%d readers: id %q; want %q, the documented rule applied to %q", readers, id, handID(comp...), comp)
			}
			if back, err := pgsource.SplitID(id, len(key)); err != nil || !slices.Equal(back, comp) {
				t.Errorf("%d readers: SplitID(%q) = %q, %v; want %q", readers, id, back, err, comp)
			}
		}
	}

	// Order: byte order of ids is what the API lists. Rows that share leading
	// components are contiguous in it, and it is tuple order unless a text component
	// is continued, where another ends, by a byte below ','.
	var ids []string
	for _, comp := range want {
		ids = append(ids, pgsource.ID(comp...))
	}
	slices.Sort(ids)
	tuples := make([][]string, len(ids))
	for i, id := range ids {
		tuples[i], _ = pgsource.SplitID(id, len(key))
	}
	for k := 1; k < len(key); k++ {
		last := map[string]int{}
		for i, tup := range tuples {
			prefix := strings.Join(tup[:k], "\x00")
			if j, ok := last[prefix]; ok && j != i-1 {
				t.Errorf("rows with leading components %q are not listed together (positions %d and %d)", tup[:k], j, i)
			}
			last[prefix] = i
		}
	}
	// For components without '%' or ',' (which escaping changes) the order is tuple
	// order, but for the documented departure: where one component ends and the
	// other's continues with a byte below ',', the shorter sorts after.
	unescaped := func(tup []string) bool {
		return !slices.ContainsFunc(tup, func(c string) bool { return strings.ContainsAny(c, "%,") })
	}
	before := func(x, y []string) bool { // x listed before y, by the documented rule
		k := 0
		for k < len(x) && x[k] == y[k] {
			k++
		}
		a, b := x[k], y[k]
		switch {
		case strings.HasPrefix(b, a):
			return b[len(a)] > ','
		case strings.HasPrefix(a, b):
			return a[len(b)] < ','
		}
		return a < b
	}
	compared, departures := 0, 0
	for i := range tuples {
		for j := i + 1; j < len(tuples); j++ {
			if !unescaped(tuples[i]) || !unescaped(tuples[j]) {
				continue
			}
			compared++
			if !before(tuples[i], tuples[j]) {
				t.Errorf("%q is listed before %q, against the documented order", tuples[i], tuples[j])
			}
			if slices.Compare(tuples[i], tuples[j]) > 0 {
				departures++
			}
		}
	}
	t.Logf("order checked on %d pairs, %d of them where it departs from tuple order", compared, departures)
	if compared < 10000 || departures == 0 {
		t.Errorf("order checked on %d pairs with %d departures; the test proves little", compared, departures)
	}
}

// TestCompositeKeyFailures: a NULL in any key column, or two rows with the same key,
// fail the scan naming the key's columns, as for a key of one column.
func TestCompositeKeyFailures(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE k (a text, b int, v int)`)
	for _, tt := range []struct{ rows, want string }{
		{`('x', 1, 1), ('x', NULL, 2)`, "NULL key: a NULL in columns (a, b)"},
		{`('x', 1, 1), (NULL, 1, 2)`, "NULL key: a NULL in columns (a, b)"},
		{`('x,1', 2, 1), ('x,1', 2, 2), ('x', 1, 3)`, `duplicate key "x%2C1,2" in columns (a, b)`},
	} {
		testenv.Exec(t, dsn, `TRUNCATE k`, `INSERT INTO k VALUES `+tt.rows)
		src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "c", Table: "k", KeyColumns: []string{"a", "b"}}})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = scanAll(t, src, "c")
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, snapshot.ErrSource) {
			t.Errorf("scan of %s = %v; want a source error saying %q", tt.rows, err, tt.want)
		}
	}
}

// TestCompositeKeyNondeterministicCollation: a text key column with a case-insensitive
// collation (which replace() refuses) is part of a composite id like any other; its
// values keep their case.
func TestCompositeKeyNondeterministicCollation(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`,
		`CREATE TABLE k (name text COLLATE ci, n int, PRIMARY KEY (n, name))`,
		`INSERT INTO k VALUES ('A,%', 1), ('b', 1), ('B', 2)`)
	src, err := pgsource.New(dsn, []pgsource.Collection{{Name: "c", Table: "k", KeyColumns: []string{"name", "n"}}, {Name: "inferred", Table: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	for coll, want := range map[string][]string{"c": {"A%2C%25,1", "B,2", "b,1"}, "inferred": {"1,A%2C%25", "1,b", "2,B"}} {
		docs, _, err := scanAll(t, src, coll)
		var got []string
		for _, d := range docs {
			got = append(got, d.ID)
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: ids %q, %v; want %q", coll, got, err, want)
		}
	}
}

func quoteSQL(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
