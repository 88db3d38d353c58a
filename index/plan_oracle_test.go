package index_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/index"
)

// column is a column of the oracle's table and how to draw its values: small
// domains, so that equalities and ties are common.
type column struct {
	name, sqlType string
	typ           index.Type
	value         func(*rand.Rand) string // Postgres input that EncodeText also reads
}

var oracleColumns = map[string]column{
	"int4":        {"", "int4", index.TypeNumber, func(r *rand.Rand) string { return fmt.Sprint(r.IntN(11) - 5) }},
	"numeric":     {"", "numeric", index.TypeNumber, pick("-1.5", "-1", "0", "-0", "0.10", "0.1", "1", "1.00", "2.5", "1e3", "NaN", "Infinity", "-Infinity")},
	"float8":      {"", "float8", index.TypeNumber, pick("-1e300", "-0.5", "0", "-0", "0.25", "1", "3", "NaN", "Infinity", "-Infinity")},
	"text":        {"", "text", index.TypeText, pick("", "a", "a b", "ab", "B", "b", "é", "z\"q", "x,y", "(p)", "\\")},
	"bool":        {"", "bool", index.TypeBool, pick("true", "false")},
	"date":        {"", "date", index.TypeDate, pick("2020-01-01", "2020-01-02", "2021-06-30", "0044-03-15 BC", "infinity", "-infinity")},
	"timestamp":   {"", "timestamp", index.TypeTimestamp, pick("2020-01-01 00:00:00", "2020-01-01 00:00:00.5", "2020-01-01 12:00:00", "1999-12-31 23:59:59.999999", "infinity")},
	"timestamptz": {"", "timestamptz", index.TypeTimestampTZ, pick("2020-01-01 00:00:00+00", "2020-01-01 05:30:00+05:30", "2020-01-01 00:00:00.5Z", "2020-01-01 01:00:00+00", "2019-12-31 20:00:00-05:00", "-infinity")},
}

func pick(vs ...string) func(*rand.Rand) string {
	return func(r *rand.Rand) string { return vs[r.IntN(len(vs))] }
}

// TestPlanMatchesPostgres is the core check of filters: for random tables of two or
// three typed columns with NULLs, and random conditions of every operator, the rows
// whose Key falls in the Scan's ranges are exactly the rows Postgres' WHERE returns.
func TestPlanMatchesPostgres(t *testing.T) {
	conn, ctx := connect(t)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(2, seed))
	schemas := [][]string{
		{"int4", "text", "timestamptz"}, {"numeric", "bool", "date"}, {"float8", "text", "timestamp"},
		{"text", "numeric"}, {"date", "int4", "bool"},
	}
	for si, types := range schemas {
		var cols []column
		for i, ty := range types {
			c := oracleColumns[ty]
			c.name = fmt.Sprintf("c%d", i)
			cols = append(cols, c)
		}
		table := fmt.Sprintf("p%d", si)
		docs := fillTable(t, ctx, conn, rng, table, cols)
		all := oracleDefs(cols)
		for range 150 {
			conds, order, where, args := randomFilter(rng, cols)
			defs := declared(rng, all, cols, order)
			checkFilter(t, ctx, conn, filterCase{table, docs, defs, conds, where, args}, seed)
		}
	}
}

// fillTable creates table with an id and cols, fills it with random rows (about one
// value in six NULL, some fields absent from the JSON) and returns each id's document.
func fillTable(t *testing.T, ctx context.Context, conn *pgx.Conn, rng *rand.Rand, table string, cols []column) map[int]string {
	t.Helper()
	var defsSQL []string
	for _, c := range cols {
		defsSQL = append(defsSQL, c.name+" "+c.sqlType)
	}
	mustExec(t, ctx, conn, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, %s)", table, strings.Join(defsSQL, ", ")))
	for id := range 200 {
		vals := make([]any, len(cols))
		marks := make([]string, len(cols))
		for i, c := range cols {
			marks[i] = fmt.Sprintf("$%d::%s", i+2, c.sqlType)
			if rng.IntN(6) > 0 {
				vals[i] = c.value(rng)
			}
		}
		mustExec(t, ctx, conn, fmt.Sprintf("INSERT INTO %s VALUES ($1, %s)", table, strings.Join(marks, ", ")), append([]any{id}, vals...)...)
	}
	// A document lacks its NULL fields now and then: absent must read as NULL.
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT id, CASE WHEN id %% 3 = 0 THEN json_strip_nulls(to_json(t))::text ELSE to_json(t)::text END FROM %s t", table))
	if err != nil {
		t.Fatal(err)
	}
	docs := map[int]string{}
	for rows.Next() {
		var id int
		var doc string
		if err := rows.Scan(&id, &doc); err != nil {
			t.Fatal(err)
		}
		docs[id] = doc
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return docs
}

// oracleDefs declares an index on every ordered subset of one to three columns.
func oracleDefs(cols []column) []index.Def {
	var defs []index.Def
	var walk func(prefix []int)
	walk = func(prefix []int) {
		if len(prefix) > 0 {
			var names []string
			var types []index.Type
			for _, i := range prefix {
				names, types = append(names, cols[i].name), append(types, cols[i].typ)
			}
			defs = append(defs, index.NewDef(names, types))
		}
		for i := range cols {
			if !slices.Contains(prefix, i) {
				walk(append(slices.Clip(prefix), i))
			}
		}
	}
	walk(nil)
	return defs
}

// declared returns a random half of all, and the index on every column in order,
// which serves the filter randomFilter drew for that order, so that Plan sometimes
// serves an equality from an index with more fields.
func declared(rng *rand.Rand, all []index.Def, cols []column, order []int) []index.Def {
	var defs []index.Def
	for _, d := range all {
		if rng.IntN(2) == 0 {
			defs = append(defs, d)
		}
	}
	var names []string
	var types []index.Type
	for _, i := range order {
		names, types = append(names, cols[i].name), append(types, cols[i].typ)
	}
	return append(defs, index.NewDef(names, types))
}

// randomFilter draws equalities on a random prefix of a random order of the columns
// and, half the time, one or two bounds on the next, and writes them as a WHERE
// clause with its arguments.
func randomFilter(rng *rand.Rand, cols []column) ([]index.Cond, []int, string, []any) {
	order := rng.Perm(len(cols))
	neq := rng.IntN(len(cols) + 1)
	var conds []index.Cond
	var where []string
	var args []any
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	for k, ci := range order {
		c := cols[ci]
		lhs := c.name
		if c.typ == index.TypeText {
			lhs += ` COLLATE "C"`
		}
		if k < neq {
			switch rng.IntN(3) {
			case 0:
				v := c.value(rng)
				conds = append(conds, index.Cond{Field: c.name, Op: index.OpEq, Values: []string{v}})
				where = append(where, fmt.Sprintf("%s = %s::%s", lhs, arg(v), c.sqlType))
			case 1:
				vs := []string{c.value(rng), c.value(rng), c.value(rng)}[:1+rng.IntN(3)]
				conds = append(conds, index.Cond{Field: c.name, Op: index.OpIn, Values: vs})
				where = append(where, fmt.Sprintf("%s = ANY(%s::%s[])", lhs, arg(vs), c.sqlType))
			default:
				conds = append(conds, index.Cond{Field: c.name, Op: index.OpIsNull})
				where = append(where, c.name+" IS NULL")
			}
			continue
		}
		if k > neq || (len(conds) > 0 && rng.IntN(2) == 0) {
			break
		}
		ops := []index.Op{index.OpGt, index.OpGte, index.OpLt, index.OpLte}
		sqlOps := map[index.Op]string{index.OpGt: ">", index.OpGte: ">=", index.OpLt: "<", index.OpLte: "<="}
		lower, upper := ops[rng.IntN(2)], ops[2+rng.IntN(2)]
		for _, op := range [][]index.Op{{lower}, {upper}, {lower, upper}}[rng.IntN(3)] {
			v := c.value(rng)
			conds = append(conds, index.Cond{Field: c.name, Op: op, Values: []string{v}})
			where = append(where, fmt.Sprintf("%s %s %s::%s", lhs, sqlOps[op], arg(v), c.sqlType))
		}
		break
	}
	if len(conds) == 0 {
		c := cols[order[0]]
		conds = append(conds, index.Cond{Field: c.name, Op: index.OpIsNull})
		where = append(where, c.name+" IS NULL")
	}
	rng.Shuffle(len(conds), func(i, j int) { conds[i], conds[j] = conds[j], conds[i] })
	return conds, order, strings.Join(where, " AND "), args
}

type filterCase struct {
	table string
	docs  map[int]string
	defs  []index.Def
	conds []index.Cond
	where string
	args  []any
}

func checkFilter(t *testing.T, ctx context.Context, conn *pgx.Conn, fc filterCase, seed uint64) {
	t.Helper()
	// The conditions go through their query-parameter form, as the API receives them.
	parsed := make([]index.Cond, len(fc.conds))
	for i, c := range fc.conds {
		field, expr, _ := strings.Cut(c.String(), "=")
		var err error
		if parsed[i], err = index.ParseCond(field, expr); err != nil {
			t.Fatalf("ParseCond of %s: %v", c, err)
		}
	}
	scan, err := index.Plan(fc.defs, parsed)
	if err != nil {
		t.Fatalf("seed %d: Plan(%v): %v", seed, fc.conds, err)
	}
	for i := 1; i < len(scan.Ranges); i++ {
		if prev := scan.Ranges[i-1]; prev.End == nil || bytes.Compare(prev.End, scan.Ranges[i].Start) > 0 {
			t.Fatalf("seed %d: %v: ranges %d and %d overlap or are unsorted: %x", seed, fc.conds, i-1, i, scan.Ranges)
		}
	}
	var got []int
	for id, doc := range fc.docs {
		key, err := index.Key(scan.Index, []byte(doc))
		if err != nil {
			t.Fatalf("Key(%s, %s): %v", scan.Index.Name, doc, err)
		}
		key = append(key, fmt.Sprintf("#%d", id)...) // an id suffix never moves a key across a bound
		if inRanges(key, scan.Ranges) {
			got = append(got, id)
		}
	}
	var want []int
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT id FROM %s WHERE %s", fc.table, fc.where), fc.args...)
	if err != nil {
		t.Fatalf("%s: %v", fc.where, err)
	}
	want, err = pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if testing.Verbose() {
		t.Logf("%d ranges, %d rows, %d of %d fields: %v", len(scan.Ranges), len(want), len(fc.conds), len(scan.Index.Fields), fc.conds)
	}
	if !slices.Equal(got, want) {
		t.Errorf("seed %d: %v on index %s (%d ranges): ids %v; Postgres' WHERE %s %v returns %v",
			seed, fc.conds, scan.Index.Name, len(scan.Ranges), got, fc.where, fc.args, want)
	}
	if held := holding(t, fc.docs, scan.Index, parsed); !slices.Equal(held, want) {
		t.Errorf("seed %d: %v by Cond.Holds: ids %v; Postgres' WHERE %s %v returns %v", seed, fc.conds, held, fc.where, fc.args, want)
	}
}

// holding returns the ids of the documents whose values satisfy every condition by
// Cond.Holds, sorted.
func holding(t *testing.T, docs map[int]string, def index.Def, conds []index.Cond) []int {
	t.Helper()
	var out []int
	for id, doc := range docs {
		vals, err := index.Fields([]byte(doc), def.Fields)
		if err != nil {
			t.Fatal(err)
		}
		all := true
		for _, c := range conds {
			i := slices.Index(def.Fields, c.Field)
			raw := vals[i]
			if raw == nil {
				raw = []byte("null") // absent reads as NULL
			}
			enc, err := index.Encode(def.Types[i], raw)
			if err != nil {
				t.Fatalf("Encode %s: %v", vals[i], err)
			}
			ok, err := c.Holds(def.Types[i], enc)
			if err != nil {
				t.Fatalf("%v.Holds: %v", c, err)
			}
			all = all && ok
		}
		if all {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func inRanges(key []byte, ranges []index.Range) bool {
	for _, r := range ranges {
		if bytes.Compare(r.Start, key) <= 0 && (r.End == nil || bytes.Compare(key, r.End) < 0) {
			return true
		}
	}
	return false
}
