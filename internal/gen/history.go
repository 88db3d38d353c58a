package gen

import (
	"fmt"
	"slices"
	"strings"
)

// Insert returns an INSERT of up to n random rows into t; a row whose key is taken is
// skipped (ON CONFLICT DO NOTHING).
func (g *Gen) Insert(t *Table, n int) string {
	cols := []string{Ident(t.Key.Name)}
	for _, c := range t.Cols {
		cols = append(cols, Ident(c.Name))
	}
	rows := make([]string, n)
	for i := range rows {
		vs := []string{t.Key.Type.KeyValue(g)}
		for _, c := range t.Cols {
			vs = append(vs, c.Type.ValueOrNull(g, 0.2))
		}
		rows[i] = "(" + strings.Join(vs, ", ") + ")"
	}
	return "INSERT INTO " + t.Ident() + " (" + strings.Join(cols, ", ") + ") VALUES\n" + strings.Join(rows, ",\n") + "\nON CONFLICT DO NOTHING"
}

// Fill returns the statements that give every table of s its first rows.
func (g *Gen) Fill(s *Schema) []string {
	var out []string
	for _, t := range s.Tables {
		if n := g.intn(s.opt.Rows + 1); n > 0 {
			out = append(out, g.Insert(t, n))
		}
	}
	return out
}

// Step returns the statements of one random change between two syncs: inserts,
// updates, deletes, key changes, rewrites that change nothing, truncates, columns
// added (with or without a default) and dropped; sometimes nothing at all. keys
// returns a table's current keys as text. A key change may hit a key that exists;
// the caller ignores that unique violation.
func (g *Gen) Step(s *Schema, keys func(*Table) []string) []string {
	if g.chance(0.1) {
		return nil
	}
	var out []string
	for _, t := range s.Tables {
		if !g.chance(0.8) {
			continue
		}
		ks := keys(t)
		for range g.between(1, 3) {
			out = append(out, g.op(s, t, ks)...)
		}
	}
	return out
}

func (g *Gen) someKeys(ks []string, n int) []string {
	if len(ks) == 0 {
		return nil
	}
	out := make([]string, 0, n)
	for range n {
		out = append(out, pick(g, ks))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func keyIn(t *Table, ks []string) string {
	qs := make([]string, len(ks))
	for i, k := range ks {
		qs[i] = Quote(k)
	}
	return "(" + Ident(t.Key.Name) + ")::text IN (" + strings.Join(qs, ", ") + ")"
}

func (g *Gen) op(s *Schema, t *Table, ks []string) []string {
	some := max(1, s.opt.Rows/4)
	switch w := g.intn(100); {
	case w < 30:
		return []string{g.Insert(t, g.between(1, some))}
	case w < 55 && len(ks) > 0:
		var out []string
		for _, k := range g.someKeys(ks, g.between(1, some)) {
			if len(t.Cols) == 0 {
				break
			}
			var sets []string
			for _, c := range t.Cols {
				if g.chance(0.4) {
					sets = append(sets, Ident(c.Name)+" = "+c.Type.ValueOrNull(g, 0.3))
				}
			}
			if len(sets) == 0 {
				c := pick(g, t.Cols)
				sets = append(sets, Ident(c.Name)+" = "+c.Type.ValueOrNull(g, 0.3))
			}
			out = append(out, "UPDATE "+t.Ident()+" SET "+strings.Join(sets, ", ")+" WHERE "+keyIn(t, []string{k}))
		}
		return out
	case w < 70 && len(ks) > 0:
		return []string{"DELETE FROM " + t.Ident() + " WHERE " + keyIn(t, g.someKeys(ks, g.between(1, some)))}
	case w < 80 && len(ks) > 0:
		var out []string
		for _, k := range g.someKeys(ks, g.between(1, 3)) {
			out = append(out, "UPDATE "+t.Ident()+" SET "+Ident(t.Key.Name)+" = "+t.Key.Type.KeyValue(g)+" WHERE "+keyIn(t, []string{k}))
		}
		return out
	case w < 84:
		return []string{"UPDATE " + t.Ident() + " SET " + Ident(t.Key.Name) + " = " + Ident(t.Key.Name)}
	case w < 87:
		return []string{"TRUNCATE " + t.Ident()}
	case w < 94:
		c := g.column(s, t.used())
		stmt := "ALTER TABLE " + t.Ident() + " ADD COLUMN " + Ident(c.Name) + " " + c.Type.SQL
		if g.chance(0.5) {
			stmt += " DEFAULT " + c.Type.Value(g)
		}
		t.Cols = append(t.Cols, c)
		return []string{stmt}
	case len(t.Cols) > 0:
		i := g.intn(len(t.Cols))
		c := t.Cols[i]
		t.Cols = slices.Delete(t.Cols, i, i+1)
		return []string{"ALTER TABLE " + t.Ident() + " DROP COLUMN " + Ident(c.Name)}
	}
	return nil
}

// Shrunk returns a copy of t with only its key and the named columns (those t has).
func (t *Table) Shrunk(cols []string) *Table {
	c := *t
	c.Cols = nil
	for _, col := range t.Cols {
		if slices.Contains(cols, col.Name) {
			c.Cols = append(c.Cols, col)
		}
	}
	return &c
}

// InsertText returns an INSERT of one row of t from its columns' text forms (key
// first, then Cols in order; nil is NULL).
func (t *Table) InsertText(vals []*string) string {
	cols := []string{Ident(t.Key.Name)}
	for _, c := range t.Cols {
		cols = append(cols, Ident(c.Name))
	}
	if len(vals) != len(cols) {
		panic(fmt.Sprintf("gen: %d values for %d columns", len(vals), len(cols)))
	}
	vs := make([]string, len(vals))
	typ := append([]Column{t.Key}, t.Cols...)
	for i, v := range vals {
		if v == nil {
			vs[i] = "NULL::" + typ[i].Type.SQL
		} else {
			vs[i] = cast(*v, typ[i].Type.SQL)
		}
	}
	return "INSERT INTO " + t.Ident() + " (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(vs, ", ") + ")"
}
