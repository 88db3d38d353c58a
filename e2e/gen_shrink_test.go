package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"

	sqlgen "github.com/snapflip/snapflip/internal/gen"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
)

// A genCase is one collection over one table with some of its columns and rows: what
// a failure is shrunk to. Each attempt runs in a fresh database, synced once by the
// same syncer and read through the same API as the failing run.
type genCase struct {
	gc    genColl
	table *sqlgen.Table
	rows  [][]*string // text forms: the key, then table.Cols in order; nil is NULL
}

// statements returns the SQL that builds the case: the setup it needs, the table, the
// view if the collection reads one, and one INSERT per row.
func (r *genRun) statements(c genCase) []string {
	var out []string
	need := []string{c.table.Ident(), c.table.Key.Type.SQL}
	for _, col := range c.table.Cols {
		need = append(need, col.Type.SQL)
	}
	if c.gc.query != nil {
		need = append(need, c.gc.query.Plain)
	}
	// A setup statement is kept when something kept names what it creates.
	var setup []string
	for i := len(r.s.Setup) - 1; i >= 0; i-- {
		stmt := r.s.Setup[i]
		name := stmt
		for _, p := range []string{"CREATE SCHEMA ", "CREATE TYPE ", "CREATE DOMAIN ", "CREATE COLLATION "} {
			name = strings.TrimPrefix(name, p)
		}
		if j := strings.Index(name, " AS "); j >= 0 {
			name = name[:j]
		}
		if j := strings.Index(name, " ("); j >= 0 && strings.HasPrefix(stmt, "CREATE COLLATION ") {
			name = name[:j]
		}
		if strings.HasPrefix(stmt, "CREATE SCHEMA ") {
			name += "."
		}
		for _, n := range need {
			if strings.Contains(n, name) {
				setup = append(setup, stmt)
				need = append(need, stmt)
				break
			}
		}
	}
	slices.Reverse(setup)
	out = append(out, setup...)
	out = append(out, c.table.Create()...)
	if q := c.gc.query; q != nil && q.View != "" {
		out = append(out, "CREATE VIEW "+qualifiedView(q)+" AS "+q.Plain)
	}
	for _, row := range c.rows {
		out = append(out, c.table.InsertText(row))
	}
	return out
}

func qualifiedView(q *sqlgen.Query) string {
	if q.ViewSchema == "" {
		return sqlgen.Ident(q.View)
	}
	return sqlgen.Ident(q.ViewSchema) + "." + sqlgen.Ident(q.View)
}

// rowsOf reads the text form of t's rows with the given ids (all rows when ids is nil).
func (r *genRun) rowsOf(t *sqlgen.Table, ids []string) [][]*string {
	cols := []string{"(" + sqlgen.Ident(t.Key.Name) + ")::text"}
	for _, c := range t.Cols {
		cols = append(cols, "("+sqlgen.Ident(c.Name)+")::text")
	}
	q := "SELECT " + strings.Join(cols, ", ") + " FROM " + t.Ident()
	var args []any
	if ids != nil {
		q += " WHERE (" + sqlgen.Ident(t.Key.Name) + ")::text = ANY($1)"
		args = append(args, ids)
	}
	rows, err := r.conn.Query(context.Background(), q+" ORDER BY ("+sqlgen.Ident(t.Key.Name)+")::text COLLATE \"C\"", args...)
	if err != nil {
		r.t.Logf("shrink: read rows: %v", err)
		return nil
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) ([]*string, error) {
		vals := make([]*string, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		return vals, row.Scan(ptrs...)
	})
	if err != nil {
		r.t.Logf("shrink: read rows: %v", err)
	}
	return out
}

// only returns c with the key and the named columns only.
func (c genCase) only(cols []string) genCase {
	keep := []int{0}
	for i, col := range c.table.Cols {
		if slices.Contains(cols, col.Name) {
			keep = append(keep, i+1)
		}
	}
	out := genCase{gc: c.gc, table: c.table.Shrunk(cols)}
	for _, row := range c.rows {
		var nr []*string
		for _, i := range keep {
			nr = append(nr, row[i])
		}
		out.rows = append(out.rows, nr)
	}
	return out
}

// shrinker runs cases against one emulator and API of its own.
type shrinker struct {
	r        *genRun
	e        *env
	attempts int
}

// fails reports whether the case still fails, and how.
func (sh *shrinker) fails(c genCase) (bool, string) {
	sh.attempts++
	r := sh.r
	if sh.e == nil {
		sh.e = newEnv("", testenv.Bigtable(r.t))
		sh.e.ConfigPath = filepath.Join(r.t.TempDir(), "shrink.yaml")
		sh.e.startAPI(r.t)
	}
	sh.e.DSN = testenv.Postgres(r.t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, sh.e.DSN)
	if err != nil {
		return false, err.Error()
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET timezone = 'UTC'"); err != nil {
		return false, err.Error()
	}
	for _, stmt := range r.statements(c) {
		if _, err := conn.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol); err != nil {
			return false, fmt.Sprintf("the case does not build: %v", err)
		}
	}
	r.writeConfig(sh.e.ConfigPath, []genColl{c.gc}, r.layers)
	out, err := sh.e.sync(r.t)
	saved := r.conn
	r.conn = conn
	st, oerr := r.oracle(c.gc)
	r.conn = saved
	switch {
	case oerr != nil:
		return false, oerr.Error()
	case len(st.invalid) > 0 && err == nil:
		return true, fmt.Sprintf("  the sync succeeded; it must fail, as the collection has %s\n", strings.Join(st.invalid, ", "))
	case len(st.invalid) > 0:
		return false, "" // failed, as it must
	case err != nil:
		return true, fmt.Sprintf("  sync fails: %v\n", err)
	case strings.HasPrefix(out, "unchanged"):
		return false, "unchanged"
	}
	version := stack.PublishedVersion(r.t, out)
	sh.e.awaitVersion(r.t, "/v1/collections", version)
	ms := genCheckCollection(r.t, sh.e, c.gc.Name, version, st, nil, rand.New(rand.NewPCG(1, 2)))
	if len(ms) == 0 {
		return false, ""
	}
	var b strings.Builder
	for i, m := range ms {
		if i == 3 {
			fmt.Fprintf(&b, "  … and %d more\n", len(ms)-i)
			break
		}
		fmt.Fprintf(&b, "  %s\n", m)
	}
	return true, b.String()
}

const maxShrinkAttempts = 24

// shrink returns the smallest case it finds that still fails: first the key and the
// differing columns of the rows involved, then those rows with every column, then every
// row, halved and with columns dropped one by one while it still fails.
func (r *genRun) shrink(ms []genMismatch) string {
	sh := &shrinker{r: r}
	var colls []genColl
	var ids []string
	var fields []string
	if len(ms) > 0 {
		for _, gc := range r.colls {
			if gc.Name == ms[0].coll {
				colls = []genColl{gc}
			}
		}
		ids, fields = ms[0].ids, ms[0].fields
	}
	if colls == nil {
		colls = r.colls
	}
	for _, gc := range colls {
		full := genCase{gc: gc, table: gc.table}
		var tried []genCase
		if len(ids) > 0 {
			one := genCase{gc: gc, table: gc.table, rows: r.rowsOf(gc.table, ids)}
			if len(one.rows) > 0 {
				tried = append(tried, one.only(r.tableFields(gc, fields)), one)
			}
		}
		full.rows = r.rowsOf(gc.table, nil)
		tried = append(tried, full)
		for _, c := range tried {
			if ok, how := sh.fails(c); ok {
				c, how = sh.minimize(c, how)
				return r.describeCase(c, how, sh.attempts)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "shrinking: no single collection fails on its own from the final rows (%d attempts); "+
		"the failure needs the history. The statements run (the replay runs them again):\n", sh.attempts)
	for i, stmt := range r.log {
		if i == 200 {
			fmt.Fprintf(&b, "  … and %d more\n", len(r.log)-i)
			break
		}
		fmt.Fprintf(&b, "  %s;\n", genShort(stmt, 400))
	}
	return b.String()
}

// tableFields maps a document's differing fields to the table's columns: a field that
// is a column, or, for a field holding the whole row (a query's x AS row), the columns
// inside it.
func (r *genRun) tableFields(gc genColl, fields []string) []string {
	var out []string
	for _, f := range fields {
		if _, ok := gc.table.Column(f); ok {
			out = append(out, f)
		}
	}
	if len(out) == 0 && gc.query != nil {
		return nil // a query's own expression: the key alone may do
	}
	return out
}

// minimize drops rows (halves, then one by one while few) and columns (one by one)
// while the case still fails.
func (sh *shrinker) minimize(c genCase, how string) (genCase, string) {
	for len(c.rows) > 1 && sh.attempts < maxShrinkAttempts {
		half := len(c.rows) / 2
		a, b := c, c
		a.rows, b.rows = c.rows[:half], c.rows[half:]
		if ok, h := sh.fails(a); ok {
			c, how = a, h
		} else if ok, h := sh.fails(b); ok {
			c, how = b, h
		} else {
			break
		}
	}
	for i := 0; i < len(c.table.Cols) && sh.attempts < maxShrinkAttempts; {
		var keep []string
		for j, col := range c.table.Cols {
			if j != i {
				keep = append(keep, col.Name)
			}
		}
		if d := c.only(keep); len(d.table.Cols) < len(c.table.Cols) {
			if ok, h := sh.fails(d); ok {
				c, how = d, h
				continue
			}
		}
		i++
	}
	return c, how
}

func (r *genRun) describeCase(c genCase, how string, attempts int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "minimal failing schema (%d columns, %d rows; shrunk in %d attempts), alone in a fresh database and deployment:\n",
		1+len(c.table.Cols), len(c.rows), attempts)
	for _, stmt := range r.statements(c) {
		fmt.Fprintf(&b, "  %s;\n", strings.ReplaceAll(genShort(stmt, 3000), "\n", "\n  "))
	}
	gc := c.gc.Collection
	y, _ := yaml.Marshal(map[string]any{"collections": []genYAMLColl{{gc.Name, gc.Table, gc.Query, gc.Key, genYAMLIndexes(gc.Indexes)}}})
	fmt.Fprintf(&b, "  -- config:\n  %s", strings.ReplaceAll(string(y), "\n", "\n  "))
	fmt.Fprintf(&b, "\n  -- Postgres says: %s\n  -- it fails with:\n%s", c.gc.oracle, how)
	return b.String()
}
