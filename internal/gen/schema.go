package gen

import (
	"fmt"
	"slices"
	"strings"

	"github.com/snapflip/snapflip/pgsource"
)

// Options bounds what a schema and its history hold.
type Options struct {
	// Tables is the most tables a schema has; default 2.
	Tables int
	// Columns is the most columns besides the key a table starts with; default 8.
	Columns int
	// Rows is the most rows a table starts with; default 20. Steps insert about a
	// quarter of it.
	Rows int
	// TypeChanges lets histories rename enum labels and composite attributes and add
	// attributes: changes to what rows say that rewrite no row.
	TypeChanges bool
	// SettingChanges lets histories change the database's DateStyle, IntervalStyle,
	// bytea_output and extra_float_digits, which change the text of values and keys.
	SettingChanges bool
	// NondeterministicKeys gives the text keys of tables without a primary key a
	// case-insensitive, nondeterministic collation, and histories keys that differ
	// from others in case only.
	NondeterministicKeys bool
	// PartitionedNullKeys lets histories make NULL keys when the syncer reads tables
	// in hash partitions (Readers > 1).
	PartitionedNullKeys bool
	// CommentAfterSemicolon lets a query collection's text end in ';' and a comment.
	CommentAfterSemicolon bool
}

// keyCollations are deterministic collations whose order is not byte order.
var keyCollations = []string{`"C"`, `"POSIX"`, `"ucs_basic"`, `"und-x-icu"`, `"sv-SE-x-icu"`, `"tr-TR-x-icu"`, `"de-DE-x-icu"`}

func (o Options) withDefaults() Options {
	if o.Tables <= 0 {
		o.Tables = 2
	}
	if o.Columns <= 0 {
		o.Columns = 8
	}
	if o.Rows <= 0 {
		o.Rows = 20
	}
	return o
}

// Column is a table's column.
type Column struct {
	Name string
	Type *Type
}

// Table is a generated table: a key column (its primary key) and other columns, in
// public or in a schema of its own, maybe hash-partitioned.
type Table struct {
	// Schema is the table's schema; "" means public.
	Schema string
	Name   string
	Key    Column
	Cols   []Column
	// Partitions is how many hash partitions the table has; 0 when it is a plain table.
	Partitions int
	// Collection is the name of the table collection that reads it; "" when none does.
	Collection string
	// RefQuoted makes the config name the table with quoted identifiers even where
	// they are not needed.
	RefQuoted bool
	// NoPK leaves the key without a primary key: the generated statements keep its
	// text unique, except those that make invalid keys on purpose (InvalidKey).
	NoPK bool
	// deleted holds keys (as text) the history deleted, which a later step may insert
	// again: a delta must then replace its own tombstone's meaning.
	deleted []string
	// KeyCollation is the text key's collation ("" for the default): the API's order is
	// byte order whatever it is.
	KeyCollation string

	partNames []string
}

// Ident returns the table's qualified, quoted name.
func (t *Table) Ident() string { return qualify(t.Schema, t.Name) }

func qualify(schema, name string) string {
	if schema == "" {
		return Ident(name)
	}
	return Ident(schema) + "." + Ident(name)
}

// Ref returns the table as the config's `table:` names it: "schema.table" or "table",
// a part quoted when it holds a dot or starts with a double quote (or when quoted is
// set).
func Ref(schema, name string, quoted bool) string {
	part := func(s string) string {
		if quoted || strings.Contains(s, ".") || strings.HasPrefix(s, `"`) {
			return Ident(s)
		}
		return s
	}
	if schema == "" {
		return part(name)
	}
	return part(schema) + "." + part(name)
}

// Create returns the table's CREATE statements.
func (t *Table) Create() []string {
	key := Ident(t.Key.Name) + " " + t.Key.Type.SQL
	if t.KeyCollation != "" {
		key += " COLLATE " + t.KeyCollation
	}
	if !t.NoPK {
		key += " PRIMARY KEY"
	}
	defs := []string{key}
	for _, c := range t.Cols {
		defs = append(defs, Ident(c.Name)+" "+c.Type.SQL)
	}
	stmt := "CREATE TABLE " + t.Ident() + " (\n\t" + strings.Join(defs, ",\n\t") + "\n)"
	if t.Partitions == 0 {
		return []string{stmt}
	}
	out := []string{stmt + " PARTITION BY HASH (" + Ident(t.Key.Name) + ")"}
	for i, p := range t.partNames {
		out = append(out, fmt.Sprintf("CREATE TABLE %s PARTITION OF %s FOR VALUES WITH (MODULUS %d, REMAINDER %d)",
			qualify(t.Schema, p), t.Ident(), t.Partitions, i))
	}
	return out
}

// Column returns the column named name, including the key.
func (t *Table) Column(name string) (Column, bool) {
	if name == t.Key.Name {
		return t.Key, true
	}
	for _, c := range t.Cols {
		if c.Name == name {
			return c, true
		}
	}
	return Column{}, false
}

// Query is a query collection, or a view read as a table collection.
type Query struct {
	Collection string
	// Key is the output column whose text is the id.
	Key string
	// SQL is the query as the config holds it (it may end in ';', a comment or blank
	// lines); Plain is the same query without them.
	SQL, Plain string
	// View, when set, is the view holding Plain that the collection reads as a table.
	View, ViewSchema string
	// Table is the table it reads; the id of its row is the table's key as text.
	Table *Table
}

// Schema is one generated database: setup statements, tables, and the collections
// reading them.
type Schema struct {
	// Setup creates schemas, enums, composites, domains and ranges, in order.
	Setup   []string
	Tables  []*Table
	Queries []*Query
	// Readers is how many connections the syncer should read a table with
	// (postgres.readers); above 1, every table is read in hash partitions.
	Readers int

	opt         Options
	types       []*Type // column types besides the base ones: arrays and custom
	base        []*Type
	rels        map[string]names // namespace → relation and type names
	colls       names
	aliases     names // query key names: no table column ever takes one
	enums       []*enumType
	composites  []*compositeType
	ciCollation string   // a case-insensitive, nondeterministic collation, when asked for
	schemas     []string // "" (public) and the generated ones
	typeUses    map[string]int
}

// Collections returns the config's collections.
func (s *Schema) Collections() []pgsource.Collection {
	var cs []pgsource.Collection
	for _, t := range s.Tables {
		if t.Collection != "" {
			cs = append(cs, pgsource.Collection{Name: t.Collection, Table: Ref(t.Schema, t.Name, t.RefQuoted), Key: t.Key.Name})
		}
	}
	for _, q := range s.Queries {
		if q.View != "" {
			cs = append(cs, pgsource.Collection{Name: q.Collection, Table: Ref(q.ViewSchema, q.View, false), Key: q.Key})
		} else {
			cs = append(cs, pgsource.Collection{Name: q.Collection, Query: q.SQL, Key: q.Key})
		}
	}
	return cs
}

// Create returns every statement that creates the schema (without rows).
func (s *Schema) Create() []string {
	out := slices.Clone(s.Setup)
	for _, t := range s.Tables {
		out = append(out, t.Create()...)
	}
	for _, q := range s.Queries {
		if q.View != "" {
			out = append(out, "CREATE VIEW "+qualify(q.ViewSchema, q.View)+" AS "+q.Plain)
		}
	}
	return out
}

// TypeUses counts the column types the schema used (its history included), by kind
// and name.
func (s *Schema) TypeUses() map[string]int { return s.typeUses }

// collectionNames are valid collection names ([A-Za-z0-9][A-Za-z0-9_.-]*) that look
// like something else: paths, versions, one letter, dots.
var collectionNames = []string{"t", "T", "x", "a.b", "a..b", "a.", "0", "9lives", "v1", "data", "batchGet",
	"A.B-C_d", "x-", "x_", "collections", "versions", "1.0", "e2e", "a-b.c_d", "Z9", "openapi.yaml",
	strings.Repeat("c", 128)}

func (g *Gen) collectionName(s *Schema) string {
	for try := 0; ; try++ {
		n := pick(g, collectionNames)
		if try > 3 {
			n = fmt.Sprintf("%s%d", n, try)
			if len(n) > 128 {
				n = n[len(n)-128:]
			}
		}
		if !s.colls[n] {
			s.colls[n] = true
			return n
		}
	}
}

// Schema returns a random schema: zero or one extra schema, custom types, tables of
// random columns, and the collections reading them: a table collection for most
// tables, query collections and views over some.
func (g *Gen) Schema(opt Options) *Schema {
	opt = opt.withDefaults()
	s := &Schema{opt: opt, rels: map[string]names{"": {}}, colls: names{}, aliases: names{}, schemas: []string{""},
		base: baseTypes(), typeUses: map[string]int{}, Readers: 1}
	if g.chance(0.33) {
		s.Readers = 2
	}
	if g.chance(0.4) {
		used := names{"public": true, "pg_catalog": true, "information_schema": true, "pg_toast": true}
		name := g.ident(used)
		for strings.HasPrefix(name, "pg_") {
			name = g.ident(used)
		}
		s.Setup = append(s.Setup, "CREATE SCHEMA "+Ident(name))
		s.schemas = append(s.schemas, name)
		s.rels[name] = names{}
	}
	g.customTypes(s)
	if opt.NondeterministicKeys {
		s.ciCollation = g.typeName(s)
		s.Setup = append(s.Setup, "CREATE COLLATION "+s.ciCollation+" (provider = icu, locale = 'und-u-ks-level2', deterministic = false)")
	}
	for range g.between(1, opt.Tables) {
		t := g.table(s)
		s.Tables = append(s.Tables, t)
	}
	for _, t := range s.Tables {
		if g.chance(0.4) {
			s.Queries = append(s.Queries, g.query(s, t))
		}
		if g.chance(0.15) {
			s.Queries = append(s.Queries, g.view(s, t))
		}
	}
	if len(s.Collections()) == 0 {
		s.Tables[0].Collection = g.collectionName(s)
	}
	return s
}

// relName returns a new name for a relation or type in schema ns.
func (g *Gen) relName(s *Schema, ns string) string {
	return g.ident(s.rels[ns])
}

func (g *Gen) namespace(s *Schema) string { return pick(g, s.schemas) }

// typeName returns a new type's qualified name: public's too, since an unqualified
// "numeric" would be pg_catalog's.
func (g *Gen) typeName(s *Schema) string {
	ns := g.namespace(s)
	name := g.relName(s, ns)
	if ns == "" {
		return Ident("public") + "." + Ident(name)
	}
	return qualify(ns, name)
}

// enumType is an enum: its labels change when a history renames one.
type enumType struct {
	name   string
	labels []string
}

// compositeType is a composite type: its fields change when a history renames or adds
// one.
type compositeType struct {
	name   string
	fields []Column
	used   names
}

// enumLabels are enum labels: empty, spaces, quotes, words JSON and SQL know, 63 bytes.
var enumLabels = []string{"", "a", "b c", "ü", "it's", `"q"`, "NULL", "null", "true", "123", "emoji 🎉",
	`back\slash`, "  ", strings.Repeat("L", maxIdentBytes), "Mixed", "mixed", "#", "%"}

// customTypes adds enums, composites (maybe nested), domains and a range to s.
func (g *Gen) customTypes(s *Schema) {
	add := func(t *Type) {
		s.types = append(s.types, t)
		if g.chance(0.5) {
			s.types = append(s.types, arrayOf(t))
		}
	}
	for range g.intn(3) {
		e := &enumType{name: g.typeName(s)}
		for _, i := range g.r.Perm(len(enumLabels))[:g.between(1, 6)] {
			e.labels = append(e.labels, enumLabels[i])
		}
		qs := make([]string, len(e.labels))
		for i, l := range e.labels {
			qs[i] = Quote(l)
		}
		s.Setup = append(s.Setup, "CREATE TYPE "+e.name+" AS ENUM ("+strings.Join(qs, ", ")+")")
		s.enums = append(s.enums, e)
		add(&Type{SQL: e.name, Kind: "enum", val: func(g *Gen) string { return cast(pick(g, e.labels), e.name) }})
	}
	for range g.intn(3) {
		c := &compositeType{name: g.typeName(s), used: names{}}
		for range g.between(1, 4) {
			c.fields = append(c.fields, Column{Name: g.ident(c.used), Type: g.columnType(s)})
		}
		defs := make([]string, len(c.fields))
		for i, f := range c.fields {
			defs[i] = Ident(f.Name) + " " + f.Type.SQL
		}
		s.Setup = append(s.Setup, "CREATE TYPE "+c.name+" AS ("+strings.Join(defs, ", ")+")")
		s.composites = append(s.composites, c)
		add(&Type{SQL: c.name, Kind: "composite", val: func(g *Gen) string {
			vs := make([]string, len(c.fields))
			for i, f := range c.fields {
				vs[i] = f.Type.ValueOrNull(g, 0.2)
			}
			return "ROW(" + strings.Join(vs, ", ") + ")::" + c.name
		}})
	}
	for range g.intn(3) {
		name := g.typeName(s)
		base := g.columnType(s)
		check := pick(g, []string{"", " CHECK (num_nulls(VALUE) < 2)", " CHECK (true)"})
		s.Setup = append(s.Setup, "CREATE DOMAIN "+name+" AS "+base.SQL+check)
		add(&Type{SQL: name, Kind: "domain", val: func(g *Gen) string { return "(" + base.Value(g) + ")::" + name }})
	}
	if g.chance(0.3) {
		name := g.typeName(s)
		s.Setup = append(s.Setup, "CREATE TYPE "+name+" AS RANGE (subtype = float8)")
		add(rangeOf(name, name, func(g *Gen) bound {
			f := g.plainFloat()
			return bound{cast(f, "float8"), ratOf(f)}
		}))
	}
}

// textType returns the base type text.
func (s *Schema) textType() *Type {
	for _, t := range s.base {
		if t.SQL == "text" {
			return t
		}
	}
	panic("gen: no text type")
}

// columnType returns a random column type: mostly built-in, else an array or one of
// the schema's custom types.
func (g *Gen) columnType(s *Schema) *Type {
	switch {
	case len(s.types) > 0 && g.chance(0.25):
		return pick(g, s.types)
	case g.chance(0.2):
		return arrayOf(pick(g, s.base))
	}
	return pick(g, s.base)
}

func (g *Gen) table(s *Schema) *Table {
	ns := g.namespace(s)
	t := &Table{Schema: ns, Name: g.relName(s, ns), RefQuoted: g.chance(0.2)}
	used := names{}
	t.Key = Column{Name: g.ident(used, s.aliases), Type: pick(g, keyTypes())}
	for range g.intn(s.opt.Columns + 1) {
		t.Cols = append(t.Cols, g.column(s, used))
	}
	switch {
	case g.chance(0.2):
		t.Partitions = g.between(2, 3)
		for range t.Partitions {
			t.partNames = append(t.partNames, g.relName(s, ns))
		}
	case g.chance(0.25):
		t.NoPK = true
	case s.ciCollation != "" && g.chance(0.6):
		// What NondeterministicKeys is for: tables without a primary key, keyed by text.
		t.NoPK = true
		t.Key.Type = keyTypes()[0]
	}
	if t.Key.Type.SQL == "text" {
		switch {
		case t.NoPK && s.ciCollation != "":
			t.KeyCollation = s.ciCollation
		case g.chance(0.3):
			t.KeyCollation = pick(g, keyCollations)
		}
	}
	if g.chance(0.85) {
		t.Collection = g.collectionName(s)
	}
	return t
}

func (g *Gen) column(s *Schema, used names) Column {
	c := Column{Name: g.ident(used, s.aliases), Type: g.columnType(s)}
	s.typeUses[c.Type.Kind+" "+c.Type.SQL]++
	return c
}

// used returns the table's column names.
func (t *Table) used() names {
	u := names{t.Key.Name: true}
	for _, c := range t.Cols {
		u[c.Name] = true
	}
	return u
}

// query returns a query collection over t: its key as a column (renamed, or cast to
// text, or as it is through x.*), maybe the whole row, nested, or as jsonb, constants
// of random types, a filter, an order and limit; the config's text may end in ';', a
// comment or blank lines. The row's alias is hostile too.
func (g *Gen) query(s *Schema, t *Table) *Query {
	q := &Query{Collection: g.collectionName(s), Table: t}
	alias := Ident(g.ident(names{}))
	k := alias + "." + Ident(t.Key.Name)
	out := names{}
	var cols []string
	star := g.chance(0.7)
	if star {
		cols = append(cols, alias+".*")
	}
	switch {
	case star && g.chance(0.3):
		q.Key = t.Key.Name
	default:
		q.Key = g.ident(s.aliases, t.used())
		out[q.Key] = true
		expr := k
		if g.chance(0.4) {
			expr = "(" + k + ")::text"
		}
		cols = append(cols, expr+" AS "+Ident(q.Key))
	}
	for range g.intn(4) {
		name := g.ident(out, names{q.Key: true})
		var expr string
		switch g.intn(5) {
		case 0:
			expr = alias
		case 1:
			expr = "to_jsonb(" + alias + ".*)"
		case 2:
			expr = "(" + k + ")::text || " + Quote(g.text(5))
		case 3:
			expr = "ROW(" + k + ", " + pick(g, s.base).Value(g) + ")"
		default:
			expr = g.columnType(s).ValueOrNull(g, 0.2)
		}
		cols = append(cols, expr+" AS "+Ident(name))
	}
	g.r.Shuffle(len(cols), func(i, j int) { cols[i], cols[j] = cols[j], cols[i] })
	q.Plain = "SELECT " + strings.Join(cols, ", ") + " FROM " + t.Ident() + " AS " + alias
	switch g.intn(4) {
	case 0:
		q.Plain += " WHERE (" + k + ")::text COLLATE \"C\" >= " + Quote(truncateUTF8(g.keyText(), 1))
	case 1:
		q.Plain += " WHERE NOT (" + k + ")::text COLLATE \"C\" LIKE " + Quote("%"+string(pick(g, []rune("#/a1 ")))+"%")
	}
	if g.chance(0.2) {
		q.Plain += fmt.Sprintf(" ORDER BY %s DESC LIMIT %d", k, g.between(1, s.opt.Rows))
	}
	switch {
	case star && q.Key == t.Key.Name && g.chance(0.2):
		q.Plain = "TABLE " + t.Ident()
	case star && q.Key == t.Key.Name && g.chance(0.2):
		// Two halves of the table, whose keys cannot meet.
		half := "(" + k + ")::text COLLATE \"C\" < " + Quote(truncateUTF8(g.keyText(), 1))
		from := " FROM " + t.Ident() + " AS " + alias + " WHERE "
		q.Plain = "SELECT " + alias + ".*" + from + half + "\nUNION ALL\nSELECT " + alias + ".*" + from + "NOT (" + half + ")"
	}
	if g.chance(0.15) {
		cte := Ident(g.ident(names{}))
		q.Plain = "WITH " + cte + " AS (" + q.Plain + ") SELECT * FROM " + cte
	}
	ends := []string{"", "", ";", " ;\n", ";;", "\n-- the end", " /* c */", "\n\n"}
	if s.opt.CommentAfterSemicolon {
		ends = append(ends, "; -- the end", ";\n-- done\n", "; /* c */")
	}
	q.SQL = pick(g, []string{"", "\n  ", "\t", "-- leading comment\n", "/* c */ "}) + q.Plain + pick(g, ends)
	return q
}

// view returns a view collection over t: the key renamed and a few expressions; views
// have no fingerprint, so every sync reads them.
func (g *Gen) view(s *Schema, t *Table) *Query {
	ns := g.namespace(s)
	q := &Query{Collection: g.collectionName(s), Table: t, ViewSchema: ns, View: g.relName(s, ns)}
	q.Key = g.ident(s.aliases, t.used())
	out := names{q.Key: true}
	alias := Ident(g.ident(names{}))
	k := alias + "." + Ident(t.Key.Name)
	cols := []string{k + " AS " + Ident(q.Key)}
	for range g.intn(3) {
		cols = append(cols, g.columnType(s).ValueOrNull(g, 0.2)+" AS "+Ident(g.ident(out)))
	}
	if g.chance(0.5) {
		cols = append(cols, "("+k+")::text AS "+Ident(g.ident(out)))
	}
	q.Plain = "SELECT " + strings.Join(cols, ", ") + " FROM " + t.Ident() + " AS " + alias
	return q
}
