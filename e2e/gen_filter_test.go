package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	sqlgen "github.com/snapflip/snapflip/internal/gen"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// The generative test of filters: the random schemas and histories of TestGenerative
// (inserts, deletes, key changes, values into and out of NULL, columns renamed,
// retyped and dropped, rollbacks, crashes, rebases), each collection declaring random
// indexes over its indexable fields, single and composite, chosen again before every
// sync. After every sync, random filters of every operator (eq, in with commas,
// quotes and parentheses, gt, gte, lt, lte with one or two bounds, is.null), with
// random small pages and sometimes select=, must answer what Postgres answers from
// the version's documents: `SELECT id … WHERE … ORDER BY <the index's fields> NULLS
// LAST, id COLLATE "C"`, the same documents in the same order over every page. A
// filter no index serves must be a 400, and so must a value its field's type cannot
// hold. Earlier versions, pinned with ?version=, after newer ones and after
// rollbacks, must answer as they did.
const envGenFilterSchemas = "SNAPFLIP_GEN_FILTER_SCHEMAS" // schemas, each with its own history

// genFilterDefault are the short form's sizes.
var genFilterDefault = genSizes{schemas: 6, syncs: 5, opt: sqlgen.Options{Tables: 2, Columns: 10, Rows: 25}, filters: true}

func TestGenerativeFilters(t *testing.T) {
	t.Parallel()
	sz := genSizesFromEnv(t)
	sz.schemas = genEnvInt(t, envGenFilterSchemas, genFilterDefault.schemas)
	sz.syncs = genEnvInt(t, envGenSyncs, genFilterDefault.syncs)
	sz.filters = true
	base := genBaseSeed(t)
	t.Logf("seeds %d..%d: %d schemas × %d syncs; replay the first with\n  %s",
		base, base+uint64(sz.schemas)-1, sz.schemas, sz.syncs, sz.replay(base))
	var mu sync.Mutex
	var total genStats
	start := time.Now()
	t.Cleanup(func() {
		t.Logf("covered in %v: %d filters answered as Postgres answers them (%d pinned to an earlier version, %d with select, "+
			"%d served by more than one index, answering more than one document), %d refused as they must be; %d indexes (%d composite) over %d versions",
			time.Since(start).Round(time.Millisecond), total.filtered, total.pinned, total.selected, total.choices, total.refused,
			total.indexes, total.composite, total.published)
		if total.filtered == 0 || total.refused == 0 {
			t.Errorf("no filter checked (%d) or none refused (%d)", total.filtered, total.refused)
		}
	})
	for i := range sz.schemas {
		seed := base + uint64(i)
		szi := sz
		szi.opt = genOptions(seed, sz.opt)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			s := runGenerated(t, seed, szi)
			mu.Lock()
			defer mu.Unlock()
			total.add(s)
		})
	}
}

// genFilters is what a filtered history keeps: its random choices, each collection's
// indexable fields as of the last sync, and what every version it checked held.
type genFilters struct {
	rnd      *rand.Rand
	fields   map[string]map[string]genKind // collection → indexable field → kind
	versions []genFilterVersion
}

func newGenFilters(seed uint64) *genFilters {
	return &genFilters{rnd: rand.New(rand.NewPCG(seed, 0xf117e4)), fields: map[string]map[string]genKind{}}
}

// genFilterVersion is what a version held: per collection, its documents, indexes
// and their fields' kinds.
type genFilterVersion struct {
	version string
	colls   map[string]genFilterColl
}

type genFilterColl struct {
	st      genState
	indexes [][]string
	kinds   map[string]genKind
}

// genKind is how an indexed field's values compare, as Postgres' cast of the JSON
// value's text to the type it names.
type genKind string

const (
	kindNumber      genKind = "numeric"
	kindText        genKind = "text"
	kindBool        genKind = "boolean"
	kindDate        genKind = "date"
	kindTimestamp   genKind = "timestamp"
	kindTimestampTZ genKind = "timestamptz"
)

// genKinds are the base types (pg_type.typname) an index can hold; an enum is text.
var genKinds = map[string]genKind{
	"int2": kindNumber, "int4": kindNumber, "int8": kindNumber, "numeric": kindNumber,
	"float4": kindNumber, "float8": kindNumber, "text": kindText, "varchar": kindText, "name": kindText,
	"uuid": kindText, "bool": kindBool, "date": kindDate, "timestamp": kindTimestamp, "timestamptz": kindTimestampTZ,
}

// genListParams are the list route's own parameters, which no filter can name.
var genListParams = map[string]bool{"limit": true, "page_token": true, "version": true, "select": true}

// rowsSQL returns a statement whose columns are the collection's top-level fields.
func (gc genColl) rowsSQL() string {
	if gc.query != nil {
		return "SELECT * FROM (" + gc.query.Plain + ") AS x"
	}
	return "SELECT * FROM " + gc.table.Ident()
}

// indexable returns the collection's fields an index can hold and their kinds, as
// Postgres describes its rows: a domain as its base type, an enum as text. A name two
// columns share, or one the list route keeps for itself, is left out.
func (r *genRun) indexable(gc genColl) map[string]genKind {
	ctx := context.Background()
	sd, err := r.conn.PgConn().Prepare(ctx, "", gc.rowsSQL(), nil)
	if err != nil {
		r.fatalf("describe the rows of %s: %v", gc.Name, err)
	}
	seen := map[string]int{}
	for _, f := range sd.Fields {
		seen[f.Name]++
	}
	out := map[string]genKind{}
	for _, f := range sd.Fields {
		// kin-openapi splits an object parameter's keys at U+001F too (see below).
		if seen[f.Name] > 1 || genListParams[f.Name] || strings.Contains(f.Name, "\x1f") {
			continue
		}
		if k, ok := genKinds[r.baseType(f.DataTypeOID)]; ok && (k != kindText || r.shortText(gc, f.Name)) {
			out[f.Name] = k
		}
	}
	return out
}

// genMaxIndexedText bounds the text values of a field the test indexes: an entry's
// encoded values may take at most layer.MaxIndexKeyBytes, and a longer value fails the
// sync by design (layer.TestUnindexableFieldsFailTheVersion), so three such fields of
// one index stay well within it.
const genMaxIndexedText = 500

// shortText reports whether every value of a text field of the collection's rows is
// at most genMaxIndexedText bytes.
func (r *genRun) shortText(gc genColl, field string) bool {
	var n int
	q := "SELECT coalesce(max(octet_length(" + pgx.Identifier{field}.Sanitize() + "::text)), 0) FROM (" + gc.rowsSQL() + ") AS s"
	if err := r.conn.QueryRow(context.Background(), q).Scan(&n); err != nil {
		r.fatalf("the longest value of %s.%s: %v", gc.Name, field, err)
	}
	return n <= genMaxIndexedText
}

// baseType returns the name of the type whose values oid's compare as: a domain's
// base type, "text" for an enum, a built-in type's own name, "" for a user's type.
func (r *genRun) baseType(oid uint32) string {
	for {
		var typtype, name string
		var base uint32
		var builtIn bool
		err := r.conn.QueryRow(context.Background(), "SELECT typtype::text, typbasetype, typname::text, typnamespace = 'pg_catalog'::regnamespace FROM pg_type WHERE oid = $1", oid).Scan(&typtype, &base, &name, &builtIn)
		switch {
		case err != nil:
			r.fatalf("type %d: %v", oid, err)
		case typtype == "d":
			oid = base
			continue
		case typtype == "e":
			return "text"
		case !builtIn:
			return "" // a user's type, whatever its name: "numeric" in another schema is no number
		}
		return name
	}
}

// declareIndexes chooses each collection's indexes for the next sync, and writes
// both deployments' configs: the indexes whose fields are still indexable stay (a
// field retyped to text stays, as text), one may go, a new one may come.
func (r *genRun) declareIndexes() {
	f := r.filters
	for i := range r.colls {
		gc := &r.colls[i]
		kinds := r.indexable(*gc)
		f.fields[gc.Name] = kinds
		var keep []pgsource.Columns
		for _, ix := range gc.Indexes {
			if !slices.ContainsFunc(ix, func(name string) bool { _, ok := kinds[name]; return !ok }) {
				keep = append(keep, ix)
			}
		}
		if len(keep) > 1 && f.rnd.IntN(6) == 0 {
			i := f.rnd.IntN(len(keep))
			keep = slices.Delete(keep, i, i+1)
		}
		if len(kinds) > 0 && (len(keep) == 0 || len(keep) < 4 && f.rnd.IntN(3) == 0) {
			if ix := f.newIndex(kinds, keep); !slices.ContainsFunc(keep, func(c pgsource.Columns) bool { return slices.Equal(c, ix) }) {
				keep = append(keep, ix)
			}
		}
		gc.Indexes = keep
	}
	r.writeConfig(r.e.ConfigPath, r.colls, r.layers)
	r.writeConfig(r.full.ConfigPath, r.colls, "versions: full\n")
}

// newIndex returns a random index over kinds' fields: one field, or two or three;
// often one that shares a prefix with an index of have, or has its fields in another
// order, so that a filter two indexes serve shows which one the API chose.
func (f *genFilters) newIndex(kinds map[string]genKind, have []pgsource.Columns) pgsource.Columns {
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	slices.Sort(names)
	f.rnd.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	if len(have) > 0 && f.rnd.IntN(2) == 0 {
		old := have[f.rnd.IntN(len(have))]
		switch {
		case len(old) > 1 && f.rnd.IntN(2) == 0:
			ix := slices.Clone(old)
			f.rnd.Shuffle(len(ix), func(i, j int) { ix[i], ix[j] = ix[j], ix[i] })
			return ix[:1+f.rnd.IntN(len(ix))]
		case len(old) < len(names):
			for _, n := range names {
				if !slices.Contains(old, n) {
					return append(slices.Clone(old), n)
				}
			}
		}
	}
	n := 1
	if f.rnd.IntN(5) >= 2 {
		n = 2 + f.rnd.IntN(2)
	}
	return pgsource.Columns(names[:min(n, len(names))])
}

// checkFilters checks the version's manifest declares the configured indexes, random
// filters on each collection, and a few on an earlier version pinned.
func (r *genRun) checkFilters(version string, k int, states map[string]genState) []genMismatch {
	f := r.filters
	rnd := rand.New(rand.NewPCG(r.seed, uint64(k)+0xf1))
	ms := r.checkDeclared(version)
	if len(ms) > 0 {
		return ms
	}
	fv := genFilterVersion{version: version, colls: map[string]genFilterColl{}}
	for _, gc := range r.colls {
		fc := genFilterColl{st: states[gc.Name], kinds: f.fields[gc.Name]}
		for _, ix := range gc.Indexes {
			fc.indexes = append(fc.indexes, slices.Clone(ix))
			r.stats.indexes++
			if len(ix) > 1 {
				r.stats.composite++
			}
		}
		fv.colls[gc.Name] = fc
		q := &genFilterCheck{r: r, rnd: rnd, coll: gc.Name, fc: fc, version: version}
		ms = append(ms, q.run(6)...)
	}
	// An earlier version, pinned.
	if n := len(f.versions); n > 0 {
		old := f.versions[rnd.IntN(n)]
		if old.version != version {
			for name, fc := range old.colls {
				q := &genFilterCheck{r: r, rnd: rnd, coll: name, fc: fc, version: old.version, pinned: true}
				ms = append(ms, q.run(2)...)
			}
		}
	}
	if len(f.versions) == 0 || f.versions[len(f.versions)-1].version != version {
		f.versions = append(f.versions, fv)
	}
	return ms
}

// checkDeclared compares each collection's indexes in the version's manifest with the
// configured ones: the same fields, in the same order, typed as Postgres types them.
func (r *genRun) checkDeclared(version string) []genMismatch {
	ctx := context.Background()
	m, err := testenv.Store(r.t, testenv.StoreConfig(r.e.Bigtable)).ReadManifest(ctx, "e2e", snapshot.Version(version))
	if err != nil {
		r.t.Fatalf("read the manifest of %s: %v", version, err)
	}
	var ms []genMismatch
	for _, gc := range r.colls {
		var got, want [][]string
		for _, d := range m.Collections[gc.Name].Indexes {
			got = append(got, d.Fields)
			for i, ty := range d.Types {
				if genKinds[ty] != r.filters.fields[gc.Name][d.Fields[i]] {
					ms = append(ms, genMismatch{coll: gc.Name, how: fmt.Sprintf("index %q: field %q has the type %s in the manifest; Postgres says %s",
						d.Name, d.Fields[i], ty, r.filters.fields[gc.Name][d.Fields[i]])})
				}
			}
		}
		for _, ix := range gc.Indexes {
			want = append(want, []string(ix))
		}
		if !reflect.DeepEqual(got, want) {
			ms = append(ms, genMismatch{coll: gc.Name, how: fmt.Sprintf("version %s declares the indexes %q; the config %q", version, got, want)})
		}
	}
	return ms
}

// genFilterCheck runs random filters on one collection of one version.
type genFilterCheck struct {
	r       *genRun
	rnd     *rand.Rand
	coll    string
	fc      genFilterColl
	version string
	pinned  bool // ask with ?version=
	ms      []genMismatch
}

// genCond is one condition: field=op.value (or in.(…), is.null).
type genCond struct {
	field, op string
	values    []string
}

// expr returns the condition's value as a query parameter writes it.
func (c genCond) expr() string {
	switch c.op {
	case "is":
		return "is.null"
	case "in":
		q := make([]string, len(c.values))
		for i, v := range c.values {
			q[i] = v
			if v == "" || strings.ContainsAny(v, `,()"\`) || strings.HasPrefix(v, " ") {
				q[i] = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
			}
		}
		return "in.(" + strings.Join(q, ",") + ")"
	}
	return c.op + "." + c.values[0]
}

func (c genCond) String() string { return c.field + "=" + c.expr() }

// run checks n random filters the indexes serve, and a few they do not.
func (q *genFilterCheck) run(n int) []genMismatch {
	if len(q.fc.indexes) == 0 {
		return nil
	}
	if err := q.load(); err != nil {
		q.r.fatalf("load %s's documents into Postgres: %v", q.coll, err)
	}
	for range n {
		ix := q.fc.indexes[q.rnd.IntN(len(q.fc.indexes))]
		q.check(q.served(ix))
	}
	// NULLs are the values documents share most: where two indexes start with one
	// field, its NULLs are ordered by the chosen index's next field, or by id.
	first := q.fc.indexes[q.rnd.IntN(len(q.fc.indexes))][0]
	for i, a := range q.fc.indexes {
		for _, b := range q.fc.indexes[i+1:] {
			if a[0] == b[0] {
				first = a[0]
			}
		}
	}
	q.check([]genCond{{first, "is", nil}})
	if q.pinned {
		return q.ms
	}
	for range 2 {
		q.check(q.unserved())
	}
	q.checkBadValue()
	return q.ms
}

// load puts the version's documents in a temporary table Postgres filters.
func (q *genFilterCheck) load() error {
	ctx := context.Background()
	conn := q.r.conn
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS gen_filter_docs (id text COLLATE "C" NOT NULL, doc jsonb NOT NULL); TRUNCATE gen_filter_docs`); err != nil {
		return err
	}
	rows := make([][]any, 0, len(q.fc.st.ids))
	for _, id := range q.fc.st.ids {
		rows = append(rows, []any{id, q.fc.st.docs[id]})
	}
	_, err := conn.CopyFrom(ctx, pgx.Identifier{"gen_filter_docs"}, []string{"id", "doc"}, pgx.CopyFromRows(rows))
	return err
}

// values returns the texts field holds in the version's documents (JSON strings
// unquoted, numbers as written), without NULLs, in a random order.
func (q *genFilterCheck) values(field string) []string {
	var out []string
	for _, id := range q.fc.st.ids {
		var doc map[string]json.RawMessage
		if json.Unmarshal([]byte(q.fc.st.docs[id]), &doc) != nil {
			continue
		}
		raw, ok := doc[field]
		if !ok || string(raw) == "null" {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			s = string(raw)
		}
		// kin-openapi splits an object parameter's values at U+001F, and calls a value
		// holding it invalid (the server answers it: the validator cannot read it).
		if !strings.Contains(s, "\x1f") {
			out = append(out, s)
		}
	}
	q.rnd.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// genAwkward are values no document may hold that a filter may name: the in list's
// own punctuation, quotes, blanks, and the specials of each kind.
var genAwkward = map[genKind][]string{
	kindText:        {"a,b", `"q"`, "(x)", "it's", `back\slash`, "", " ", "ü", "🎉", "NULL", "null", ")(", `","`, "a=b&c"},
	kindNumber:      {"0", "-0", "1.10", "-1", "1e3", "NaN", "Infinity", "-Infinity", "0.5", "99999999"},
	kindBool:        {"true", "false"},
	kindDate:        {"2000-01-01", "1970-01-01", "infinity", "-infinity", "0001-01-01 BC"},
	kindTimestamp:   {"2000-01-01T00:00:00", "1999-12-31 23:59:59.999999", "infinity", "-infinity"},
	kindTimestampTZ: {"2000-01-01T00:00:00Z", "2000-01-01T01:00:00+01:00", "1999-12-31T23:59:59.5-00:30", "infinity", "-infinity"},
}

// value returns a value of field: one a document holds, mostly, or an awkward one.
func (q *genFilterCheck) value(field string) string {
	vs := q.values(field)
	if len(vs) > 0 && q.rnd.IntN(4) > 0 {
		v := vs[0]
		if q.fc.kinds[field] == kindNumber && q.rnd.IntN(4) == 0 && strings.Contains(v, ".") && !strings.ContainsAny(v, "eE") {
			v += "0" // the same number, written otherwise
		}
		return v
	}
	aw := genAwkward[q.fc.kinds[field]]
	return aw[q.rnd.IntN(len(aw))]
}

// served returns a random filter ix serves: equality (eq, in, is.null) on a prefix of
// its fields, then maybe one or two bounds on the next.
func (q *genFilterCheck) served(ix []string) []genCond {
	p := q.rnd.IntN(len(ix) + 1)
	var conds []genCond
	for _, f := range ix[:p] {
		conds = append(conds, q.equality(f))
	}
	if p < len(ix) && (p == 0 || q.rnd.IntN(3) > 0) {
		conds = append(conds, q.bounds(ix[p])...)
	}
	return conds
}

func (q *genFilterCheck) equality(f string) genCond {
	switch q.rnd.IntN(6) {
	case 0:
		return genCond{f, "is", nil}
	case 1, 2:
		var vs []string
		for range 1 + q.rnd.IntN(5) {
			vs = append(vs, q.value(f))
		}
		return genCond{f, "in", vs}
	}
	return genCond{f, "eq", []string{q.value(f)}}
}

func (q *genFilterCheck) bounds(f string) []genCond {
	lower := genCond{f, []string{"gt", "gte"}[q.rnd.IntN(2)], []string{q.value(f)}}
	upper := genCond{f, []string{"lt", "lte"}[q.rnd.IntN(2)], []string{q.value(f)}}
	switch q.rnd.IntN(3) {
	case 0:
		return []genCond{lower}
	case 1:
		return []genCond{upper}
	}
	return []genCond{lower, upper}
}

// unserved returns a random filter over the collection's indexable fields, of any
// shape: most are ones no index serves.
func (q *genFilterCheck) unserved() []genCond {
	var fields []string
	for f := range q.fc.kinds {
		fields = append(fields, f)
	}
	slices.Sort(fields)
	var conds []genCond
	for range 1 + q.rnd.IntN(3) {
		f := fields[q.rnd.IntN(len(fields))]
		if q.rnd.IntN(2) == 0 {
			conds = append(conds, q.equality(f))
		} else {
			conds = append(conds, q.bounds(f)...)
		}
	}
	return conds
}

// plan returns the index that serves conds, as the API chooses it: of those with
// equality on a prefix of their fields and at most one range on the next, the one
// with the fewest fields, the first declared among equals; nil when none does (or a
// field has two conditions of one kind, or both an equality and a range).
func (q *genFilterCheck) plan(conds []genCond) []string {
	if serve := q.serving(conds); len(serve) > 0 {
		return serve[0]
	}
	return nil
}

// servers returns how many indexes serve conds.
func (q *genFilterCheck) servers(conds []genCond) int { return len(q.serving(conds)) }

// serving returns the indexes that serve conds, the one the API chooses first.
func (q *genFilterCheck) serving(conds []genCond) [][]string {
	type kinds struct{ eq, lower, upper int }
	by := map[string]*kinds{}
	for _, c := range conds {
		k := by[c.field]
		if k == nil {
			k = &kinds{}
			by[c.field] = k
		}
		switch c.op {
		case "gt", "gte":
			k.lower++
		case "lt", "lte":
			k.upper++
		default:
			k.eq++
		}
	}
	ranges := 0
	for _, k := range by {
		switch {
		case k.eq > 1 || k.lower > 1 || k.upper > 1 || k.eq > 0 && k.lower+k.upper > 0:
			return nil
		case k.eq == 0:
			ranges++
		}
	}
	if ranges > 1 {
		return nil
	}
	var serve [][]string
	for _, ix := range q.fc.indexes {
		if len(ix) < len(by) {
			continue
		}
		ok := true
		for i, f := range ix[:len(by)] {
			k := by[f]
			if k == nil || k.eq == 0 && i != len(by)-1 {
				ok = false
			}
		}
		if ok {
			serve = append(serve, ix)
		}
	}
	slices.SortStableFunc(serve, func(a, b []string) int { return len(a) - len(b) })
	return serve
}

// oracle returns the ids Postgres answers for conds from the version's documents,
// ordered by ix's fields (NULLs last, text by bytes), then id by bytes.
func (q *genFilterCheck) oracle(conds []genCond, ix []string) ([]string, error) {
	var where []string
	var args []any
	param := func(f, v string) string {
		args = append(args, v)
		p := fmt.Sprintf("$%d::text", len(args))
		if q.fc.kinds[f] == kindText {
			return p + ` COLLATE "C"`
		}
		return p + "::" + string(q.fc.kinds[f])
	}
	ops := map[string]string{"eq": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
	for _, c := range conds {
		e := q.typed(c.field)
		switch c.op {
		case "is":
			where = append(where, e+" IS NULL")
		case "in":
			ps := make([]string, len(c.values))
			for i, v := range c.values {
				ps[i] = param(c.field, v)
			}
			where = append(where, e+" IN ("+strings.Join(ps, ", ")+")")
		default:
			where = append(where, e+" "+ops[c.op]+" "+param(c.field, c.values[0]))
		}
	}
	order := make([]string, len(ix))
	for i, f := range ix {
		order[i] = q.typed(f) + " NULLS LAST"
	}
	sql := "SELECT id FROM gen_filter_docs WHERE " + strings.Join(where, " AND ") + " ORDER BY " + strings.Join(order, ", ") + `, id COLLATE "C"`
	rows, err := q.r.conn.Query(context.Background(), sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%w\n%s %q", err, sql, args)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// typed returns the SQL for field's value in a document, as its kind.
func (q *genFilterCheck) typed(field string) string {
	e := "(doc->>" + sqlgen.Quote(field) + ")"
	if q.fc.kinds[field] == kindText {
		return "(" + e + ` COLLATE "C")`
	}
	return "(" + e + "::" + string(q.fc.kinds[field]) + ")"
}

// check asks the API for conds over every page and compares the answer with
// Postgres': a 400 when no index serves them.
func (q *genFilterCheck) check(conds []genCond) {
	ix := q.plan(conds)
	sel := q.selection()
	limit := 1 + q.rnd.IntN(5)
	if ix == nil {
		resp := q.get(conds, sel, limit, "")
		if resp.status != http.StatusBadRequest {
			q.bad(conds, fmt.Sprintf("no index serves it, and the API answers %d; want 400", resp.status), genShort(string(resp.body), 300))
		}
		q.r.stats.refused++
		return
	}
	want, err := q.oracle(conds, ix)
	if err != nil {
		q.bad(conds, "Postgres refuses the filter", err.Error())
		return
	}
	got, docs, ok := q.pages(conds, sel, limit, len(want))
	if !ok {
		return
	}
	if !slices.Equal(got, want) {
		q.bad(conds, fmt.Sprintf("index %q, limit %d: the API answers %d ids, Postgres %d", ix, limit, len(got), len(want)),
			fmt.Sprintf("API:      %s\nPostgres: %s", genIDs(got), genIDs(want)))
		return
	}
	for i, id := range got {
		wantDoc := q.fc.st.docs[id]
		if sel != nil {
			wantDoc = genProject(wantDoc, sel)
		}
		if fields, detail := genDiffDocs(wantDoc, docs[i]); len(fields) > 0 || detail != "" {
			q.ms = append(q.ms, genMismatch{coll: q.coll, how: "filter " + genCondsText(conds) + ": the document differs", ids: []string{id}, fields: fields, detail: detail})
		}
	}
	q.r.stats.filtered++
	if len(want) > 1 && q.servers(conds) > 1 {
		q.r.stats.choices++
	}
	if q.pinned {
		q.r.stats.pinned++
	}
	if sel != nil {
		q.r.stats.selected++
	}
}

// checkBadValue asks for a value no field of a kind other than text can hold: a 400.
func (q *genFilterCheck) checkBadValue() {
	for _, ix := range q.fc.indexes {
		if q.fc.kinds[ix[0]] == kindText {
			continue
		}
		conds := []genCond{{ix[0], "eq", []string{"not-a-" + string(q.fc.kinds[ix[0]])}}}
		if resp := q.get(conds, nil, 10, ""); resp.status != http.StatusBadRequest {
			q.bad(conds, fmt.Sprintf("a value of the wrong type, and the API answers %d; want 400", resp.status), genShort(string(resp.body), 300))
		}
		q.r.stats.refused++
		return
	}
}

// selection returns, sometimes, fields to select: some of the documents' (those
// without a comma, which select cannot name), and one no document has.
func (q *genFilterCheck) selection() []string {
	if q.rnd.IntN(4) > 0 {
		return nil
	}
	var sel []string
	for f := range q.fc.kinds {
		if !strings.Contains(f, ",") && q.rnd.IntN(2) == 0 {
			sel = append(sel, f)
		}
	}
	slices.Sort(sel)
	return append(sel, "no such field")
}

// genProject returns doc with only the fields in sel.
func genProject(doc string, sel []string) string {
	v, err := genDecode(doc)
	m, ok := v.(map[string]any)
	if err != nil || !ok {
		return doc
	}
	for k := range m {
		if !slices.Contains(sel, k) {
			delete(m, k)
		}
	}
	return genJSON(m)
}

func (q *genFilterCheck) get(conds []genCond, sel []string, limit int, token string) response {
	var ps []string
	for _, c := range conds {
		ps = append(ps, url.QueryEscape(c.field)+"="+url.QueryEscape(c.expr()))
	}
	ps = append(ps, "limit="+strconv.Itoa(limit))
	if sel != nil {
		ps = append(ps, "select="+url.QueryEscape(strings.Join(sel, ",")))
	}
	if q.pinned {
		ps = append(ps, "version="+url.QueryEscape(q.version))
	}
	if token != "" {
		ps = append(ps, "page_token="+url.QueryEscape(token))
	}
	return q.r.e.get(q.r.t, "/v1/data/"+url.PathEscape(q.coll)+"?"+strings.Join(ps, "&"))
}

// pages returns the ids and documents of every page of conds' answer; ok is false
// (and a mismatch recorded) when a page is not one of the version's.
func (q *genFilterCheck) pages(conds []genCond, sel []string, limit, want int) (ids, docs []string, ok bool) {
	token := ""
	for page := 0; ; page++ {
		resp := q.get(conds, sel, limit, token)
		var body listPage
		if resp.status != http.StatusOK || resp.version != q.version || json.Unmarshal(resp.body, &body) != nil || body.Version != q.version {
			q.bad(conds, fmt.Sprintf("page %d (limit %d) = %d from %q; want 200 from %s", page, limit, resp.status, resp.version, q.version), genShort(string(resp.body), 500))
			return nil, nil, false
		}
		if len(body.Documents) > limit {
			q.bad(conds, fmt.Sprintf("page %d has %d documents; the limit is %d", page, len(body.Documents), limit), "")
		}
		for _, d := range body.Documents {
			ids = append(ids, d.ID)
			docs = append(docs, string(d.Document))
		}
		if body.NextPageToken == "" {
			return ids, docs, true
		}
		if page > want/limit+2 {
			q.bad(conds, fmt.Sprintf("more than %d pages of %d for %d documents", page, limit, want), "")
			return nil, nil, false
		}
		token = body.NextPageToken
	}
}

func (q *genFilterCheck) bad(conds []genCond, how, detail string) {
	at := "version " + q.version
	if q.pinned {
		at = "pinned " + at
	}
	q.ms = append(q.ms, genMismatch{coll: q.coll, how: "filter " + genCondsText(conds) + " (" + at + "): " + how, detail: detail})
}

func genCondsText(conds []genCond) string {
	s := make([]string, len(conds))
	for i, c := range conds {
		s[i] = c.String()
	}
	return strconv.Quote(strings.Join(s, "&"))
}

// genIDs shows ids for a report, the first few.
func genIDs(ids []string) string {
	var b strings.Builder
	for i, id := range ids {
		if i == 12 {
			fmt.Fprintf(&b, " … (%d)", len(ids))
			break
		}
		b.WriteString(" " + genShort(strconv.Quote(id), 60))
	}
	return b.String()
}
