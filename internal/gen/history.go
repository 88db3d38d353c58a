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
	if !t.NoPK {
		return "INSERT INTO " + t.Ident() + " (" + strings.Join(cols, ", ") + ") VALUES\n" + strings.Join(rows, ",\n") + "\nON CONFLICT DO NOTHING"
	}
	// Without a primary key, keep the key's text unique: the first row of each key
	// text, and none whose key text the table has.
	k := keyText("v", t)
	return "INSERT INTO " + t.Ident() + " (" + strings.Join(cols, ", ") + ")\nSELECT DISTINCT ON (" + k + ") * FROM (VALUES\n" +
		strings.Join(rows, ",\n") + "\n) AS v (" + strings.Join(cols, ", ") + ")\nWHERE NOT EXISTS (SELECT FROM " + t.Ident() +
		" AS o WHERE " + keyText("o", t) + " = " + k + ")"
}

// reinsert returns an INSERT of rows with the given keys (as text) and random values;
// a key taken again since is skipped.
func (g *Gen) reinsert(t *Table, keys []string) string {
	cols := []string{Ident(t.Key.Name)}
	for _, c := range t.Cols {
		cols = append(cols, Ident(c.Name))
	}
	rows := make([]string, len(keys))
	for i, k := range keys {
		vs := []string{"(" + Quote(k) + "::text)::" + t.Key.Type.SQL}
		for _, c := range t.Cols {
			vs = append(vs, c.Type.ValueOrNull(g, 0.2))
		}
		rows[i] = "(" + strings.Join(vs, ", ") + ")"
	}
	k := keyText("v", t)
	return "INSERT INTO " + t.Ident() + " (" + strings.Join(cols, ", ") + ")\nSELECT DISTINCT ON (" + k + ") * FROM (VALUES\n" +
		strings.Join(rows, ",\n") + "\n) AS v (" + strings.Join(cols, ", ") + ")\nWHERE NOT EXISTS (SELECT FROM " + t.Ident() +
		" AS o WHERE " + keyText("o", t) + " = " + k + ")"
}

// keyText is the text of t's key in the row alias, compared byte by byte.
func keyText(alias string, t *Table) string {
	return "(" + alias + "." + Ident(t.Key.Name) + ")::text COLLATE \"C\""
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
	if s.opt.TypeChanges && g.chance(0.3) {
		return g.typeChange(s) // alone, so that no row is rewritten
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
	if s.opt.TypeChanges && g.chance(0.5) {
		out = append(out, g.typeChange(s)...)
	}
	if s.opt.SettingChanges && g.chance(0.5) {
		out = append(out, g.settingChange())
	}
	return out
}

// typeChange renames an enum label or a composite's attribute, or adds an attribute.
func (g *Gen) typeChange(s *Schema) []string {
	switch {
	case len(s.enums) > 0 && g.chance(0.5):
		e := pick(g, s.enums)
		i := g.intn(len(e.labels))
		to := truncateUTF8(e.labels[i]+pick(g, []string{" renamed", "2", "é", "'"}), maxIdentBytes)
		if slices.Contains(e.labels, to) || s.inQueries(e.name) { // a query's 'label'::e would name a label gone
			return nil
		}
		stmt := "ALTER TYPE " + e.name + " RENAME VALUE " + Quote(e.labels[i]) + " TO " + Quote(to)
		e.labels[i] = to
		return []string{stmt}
	case len(s.composites) > 0:
		c := pick(g, s.composites)
		if g.chance(0.5) && !s.inQueries(c.name) { // a query's ROW(…)::c would lack the attribute

			f := Column{Name: g.ident(c.used), Type: pick(g, s.base)}
			c.fields = append(c.fields, f)
			return []string{"ALTER TYPE " + c.name + " ADD ATTRIBUTE " + Ident(f.Name) + " " + f.Type.SQL}
		}
		i := g.intn(len(c.fields))
		to := g.ident(c.used)
		stmt := "ALTER TYPE " + c.name + " RENAME ATTRIBUTE " + Ident(c.fields[i].Name) + " TO " + Ident(to)
		c.fields[i].Name = to
		return []string{stmt}
	}
	return nil
}

// inQueries reports whether a query or view names name.
func (s *Schema) inQueries(name string) bool {
	for _, q := range s.Queries {
		if strings.Contains(q.Plain, name) {
			return true
		}
	}
	return false
}

// settings are database settings that change the text Postgres makes of values.
var settings = map[string][]string{
	"DateStyle":          {"ISO, MDY", "SQL, DMY", "Postgres, MDY", "German"},
	"IntervalStyle":      {"postgres", "postgres_verbose", "sql_standard", "iso_8601"},
	"bytea_output":       {"hex", "escape"},
	"extra_float_digits": {"1", "0", "-3", "3"},
}

// settingChange sets one of settings as the database's default.
func (g *Gen) settingChange() string {
	keys := []string{"DateStyle", "IntervalStyle", "bytea_output", "extra_float_digits"}
	k := pick(g, keys)
	return fmt.Sprintf("DO $$BEGIN EXECUTE format('ALTER DATABASE %%I SET %s = %%L', current_database(), %s); END$$",
		k, Quote(pick(g, settings[k])))
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
	return "(" + Ident(t.Key.Name) + ")::text COLLATE \"C\" IN (" + strings.Join(qs, ", ") + ")"
}

// op returns the statements of one random step on table t, whose rows have the keys
// ks.
func (g *Gen) op(s *Schema, t *Table, ks []string) []string {
	some := max(1, s.opt.Rows/4)
	invalid := 6 // percent
	if s.opt.NondeterministicKeys || s.opt.PartitionedNullKeys {
		invalid = 25 // what those options are for
	}
	switch w := g.intn(100); {
	case t.NoPK && len(ks) > 0 && g.intn(100) < invalid:
		k := pick(g, ks)
		if twins := caseTwins(ks); len(twins) > 0 && s.ciCollation != "" && t.KeyCollation == s.ciCollation {
			k = pick(g, twins) // a duplicate among keys equal in the collation
		}
		return []string{g.invalidKey(s, t, k)}
	case t.NoPK && len(ks) > 0 && t.KeyCollation != "" && t.KeyCollation == s.ciCollation && w < 20:
		return []string{caseTwin(t, pick(g, ks))}
	case w < 30:
		return []string{g.Insert(t, g.between(1, some))}
	case w < 55 && len(ks) > 0:
		return g.updates(t, g.someKeys(ks, g.between(1, some)))
	case w < 70 && len(ks) > 0:
		return g.deletes(t, g.someKeys(ks, g.between(1, some)))
	case w < 80 && len(ks) > 0:
		return g.keyMoves(t, g.someKeys(ks, g.between(1, 3)))
	case w < 82 || w < 84 && t.Rescale() == "":
		return []string{"UPDATE " + t.Ident() + " SET " + Ident(t.Key.Name) + " = " + Ident(t.Key.Name)}
	case w < 84:
		return []string{t.Rescale()}
	case w < 86:
		return []string{"TRUNCATE " + t.Ident()}
	case w < 88 && len(t.Cols) > 0:
		return g.columnChange(s, t, renameColumn)
	case w < 90 && len(t.Cols) > 0:
		return g.columnChange(s, t, retypeColumn)
	case w < 95:
		return g.columnChange(s, t, addColumn)
	case len(t.Cols) > 0:
		return g.columnChange(s, t, dropColumn)
	}
	return nil
}

// caseTwin inserts a copy of row k under its key in upper case: in a case-insensitive
// collation a key that differs from another in case only, a valid, distinct id.
func caseTwin(t *Table, k string) string {
	up := "upper(" + Quote(k) + ")"
	cols := []string{Ident(t.Key.Name)}
	vals := []string{up}
	for _, c := range t.Cols {
		cols = append(cols, Ident(c.Name))
		vals = append(vals, Ident(c.Name))
	}
	return "INSERT INTO " + t.Ident() + " (" + strings.Join(cols, ", ") + ") SELECT " + strings.Join(vals, ", ") +
		" FROM " + t.Ident() + " WHERE " + keyIn(t, []string{k}) + " AND NOT EXISTS (SELECT FROM " + t.Ident() +
		" AS o WHERE " + keyText("o", t) + " = " + up + " COLLATE \"C\")"
}

// updates sets some columns of each of the rows keys, to values or NULL.
func (g *Gen) updates(t *Table, keys []string) []string {
	var out []string
	for _, k := range keys {
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
}

// deletes deletes the rows gone and, half the time, brings back with new values the
// ids an earlier step deleted.
func (g *Gen) deletes(t *Table, gone []string) []string {
	out := []string{"DELETE FROM " + t.Ident() + " WHERE " + keyIn(t, gone)}
	if len(t.deleted) > 0 && g.chance(0.5) {
		out = append(out, g.reinsert(t, t.deleted))
		t.deleted = nil
	}
	t.deleted = append(t.deleted, gone...)
	return out
}

// keyMoves gives each of the rows keys a new key (one not taken, in a table without
// a primary key).
func (g *Gen) keyMoves(t *Table, keys []string) []string {
	var out []string
	for _, k := range keys {
		to := t.Key.Type.KeyValue(g)
		stmt := "UPDATE " + t.Ident() + " SET " + Ident(t.Key.Name) + " = " + to + " WHERE " + keyIn(t, []string{k})
		if t.NoPK {
			stmt += " AND NOT EXISTS (SELECT FROM " + t.Ident() + " AS o WHERE " + keyText("o", t) + " = (" + to + ")::text COLLATE \"C\")"
		}
		out = append(out, stmt)
	}
	return out
}

// columnChangeKind is what columnChange does to a table.
type columnChangeKind int

const (
	renameColumn columnChangeKind = iota
	retypeColumn                  // to text, rewriting the table
	addColumn                     // with or without a default
	dropColumn
)

// columnChange returns the ALTER TABLE that changes a column of t as kind says, and
// records it in t; rename, retype and drop need a column.
func (g *Gen) columnChange(s *Schema, t *Table, kind columnChangeKind) []string {
	switch kind {
	case renameColumn:
		c := &t.Cols[g.intn(len(t.Cols))]
		used := t.used()
		to := g.ident(used, s.aliases)
		stmt := "ALTER TABLE " + t.Ident() + " RENAME COLUMN " + Ident(c.Name) + " TO " + Ident(to)
		c.Name = to
		return []string{stmt}
	case retypeColumn:
		c := &t.Cols[g.intn(len(t.Cols))]
		c.Type = s.textType()
		return []string{"ALTER TABLE " + t.Ident() + " ALTER COLUMN " + Ident(c.Name) + " TYPE text USING (" + Ident(c.Name) + ")::text"}
	case addColumn:
		c := g.column(s, t.used())
		stmt := "ALTER TABLE " + t.Ident() + " ADD COLUMN " + Ident(c.Name) + " " + c.Type.SQL
		if g.chance(0.5) {
			stmt += " DEFAULT " + c.Type.Value(g)
		}
		t.Cols = append(t.Cols, c)
		return []string{stmt}
	default:
		i := g.intn(len(t.Cols))
		c := t.Cols[i]
		t.Cols = slices.Delete(t.Cols, i, i+1)
		return []string{"ALTER TABLE " + t.Ident() + " DROP COLUMN " + Ident(c.Name)}
	}
}

// DDL returns the statements of one random change of definitions that writes no row
// change the replication stream or the statistics see: a column renamed, retyped
// (a rewrite), added or dropped, or, with Options.TypeChanges, an enum label or a
// composite's attribute renamed or an attribute added. Nil when the schema has no
// table and no type to change.
func (g *Gen) DDL(s *Schema) []string {
	if s.opt.TypeChanges && g.chance(0.3) {
		if out := g.typeChange(s); len(out) > 0 {
			return out
		}
	}
	if len(s.Tables) == 0 {
		return nil
	}
	t := pick(g, s.Tables)
	if len(t.Cols) == 0 {
		return g.columnChange(s, t, addColumn)
	}
	return g.columnChange(s, t, columnChangeKind(g.intn(4)))
}

// Rescale returns, for a table with a numeric key, an UPDATE that gives every finite
// key one more digit of scale: the same value (no unique index objects), a new id
// (1.5 becomes 1.50). "" for other keys. Distinct ids stay distinct.
func (t *Table) Rescale() string {
	if t.Key.Type.SQL != "numeric" {
		return ""
	}
	k := Ident(t.Key.Name)
	return "UPDATE " + t.Ident() + " SET " + k + " = round(" + k + ", scale(" + k + ") + 1) WHERE scale(" + k + ") BETWEEN 0 AND 200"
}

// caseTwins returns the keys of ks that another key of ks equals but for case.
func caseTwins(ks []string) []string {
	lower := map[string]int{}
	for _, k := range ks {
		lower[strings.ToLower(k)]++
	}
	var out []string
	for _, k := range ks {
		if lower[strings.ToLower(k)] > 1 {
			out = append(out, k)
		}
	}
	return out
}

// invalidKeyKind is how invalidKey makes a key no id can be.
type invalidKeyKind int

const (
	dupKey   invalidKeyKind = iota // a copy of the row
	nullKey                        // NULL
	emptyKey                       // '' (text keys)
	longKey                        // over MaxIDBytes (text keys)
)

// invalidKey returns a statement that gives t a key no id can be: a duplicate (a copy
// of the row), NULL, or for text keys empty or over MaxIDBytes. The sync after it must
// fail; Repair removes such keys.
func (g *Gen) invalidKey(s *Schema, t *Table, k string) string {
	where := " WHERE " + keyIn(t, []string{k})
	kinds := []invalidKeyKind{dupKey, dupKey}
	switch {
	case s.Readers > 1 && s.opt.PartitionedNullKeys:
		kinds = append(kinds, nullKey, nullKey, nullKey)
	case s.Readers == 1:
		kinds = append(kinds, nullKey)
	}
	if t.Key.Type.SQL == "text" {
		kinds = append(kinds, emptyKey, longKey)
	}
	switch pick(g, kinds) {
	case nullKey:
		return "UPDATE " + t.Ident() + " SET " + Ident(t.Key.Name) + " = NULL" + where
	case emptyKey:
		return "UPDATE " + t.Ident() + " SET " + Ident(t.Key.Name) + " = ''" + where
	case longKey:
		return "UPDATE " + t.Ident() + " SET " + Ident(t.Key.Name) + fmt.Sprintf(" = repeat('é', %d)", MaxIDBytes/2+1) + where
	}
	return "INSERT INTO " + t.Ident() + " SELECT * FROM " + t.Ident() + where
}

// Repair returns statements that remove every key no id can be (see invalidKey).
func (s *Schema) Repair() []string {
	var out []string
	for _, t := range s.Tables {
		if !t.NoPK {
			continue
		}
		k := Ident(t.Key.Name)
		out = append(out,
			"DELETE FROM "+t.Ident()+" WHERE "+k+" IS NULL OR octet_length(("+k+")::text) NOT BETWEEN 1 AND "+fmt.Sprint(MaxIDBytes),
			"DELETE FROM "+t.Ident()+" WHERE ctid IN (SELECT ctid FROM (SELECT ctid, row_number() OVER (PARTITION BY ("+k+
				")::text COLLATE \"C\") AS n FROM "+t.Ident()+") AS d WHERE n > 1)")
	}
	return out
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
