package pgsource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snapflip/snapflip/index"
)

// IndexReport is what Check found out about one declared index of a collection.
type IndexReport struct {
	// Name is the index's name (IndexName of its fields).
	Name string
	// Fields are its fields, in index order.
	Fields []IndexField
	// EntryBytes estimates what one entry takes in storage as a delta writes it: its
	// row key (Source.RowKeyBytes; without it, the entry's id alone) and its value. A
	// base packs its entries in blocks with their shared prefixes left out, so it
	// takes less, and EstimatedBytes bounds it from above. Its values
	// and the document's id are as wide as their columns' Width where Postgres has
	// statistics, else as wide as a typical value of their type. Zero when a field is
	// missing or cannot be indexed.
	EntryBytes int
	// EstimatedBytes is the collection's estimated rows times EntryBytes, one entry a
	// document: at most what a base's index takes; -1 when either is unknown.
	EstimatedBytes int64
}

// OK reports whether every field of the index exists and can be indexed.
func (r IndexReport) OK() bool {
	return !slices.ContainsFunc(r.Fields, func(f IndexField) bool { return !f.Exists || !f.Indexable })
}

// IndexField is one field of an index, as Check found it.
type IndexField struct {
	// Name is the field: a column of the table, an output name of the query.
	Name string
	// Exists is true when the documents hold the field (Postgres describes a column of
	// that name); false too when the collection's source was not found.
	Exists bool
	// Type is the base type its values compare as: a domain's base type, "text" for an
	// enum, the column's type else (pg_type.typname, "_int4" for int4[]); "" when the
	// field does not exist.
	Type string
	// Indexable is true when an index can order the field's values as Postgres does
	// (index.TypeFor accepts Type).
	Indexable bool
	// Why says why the field cannot be indexed; "" when it can, or does not exist.
	Why string `json:",omitempty"`
	// Width is the bytes a value of the field takes as text on average, as Postgres'
	// statistics of its column say (textWidths); -1 without statistics (a query, a
	// view, a table never analyzed).
	Width int
}

// checkIndexes reports on each declared index of the collection, adding a problem for
// each field that is missing or cannot be indexed. Of a collection whose table or
// query was not found it lists the indexes, their fields unknown.
func (s *Source) checkIndexes(ctx context.Context, conn *pgx.Conn, c Collection, r *CollectionReport) error {
	if len(c.Indexes) == 0 {
		return nil
	}
	if !r.Exists {
		r.Indexes = uncheckedIndexes(c)
		return nil
	}
	names, types, err := fieldTypes(ctx, conn, c)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		r.problem("indexes: %s", withoutCollection(err))
		return nil
	}
	widths, err := textWidths(ctx, conn, c)
	if err != nil {
		return err
	}
	facts := columnFacts{names: names, types: types, widths: widths}
	id := facts.sampleID(r.Key)
	for _, ix := range c.Indexes {
		ir := facts.index(ix, r)
		if ir.OK() {
			ir.EntryBytes = s.entryBytes(c.Name, ir, id)
		}
		if ir.EntryBytes > 0 && r.EstimatedRows >= 0 {
			ir.EstimatedBytes = r.EstimatedRows * int64(ir.EntryBytes)
		}
		r.Indexes = append(r.Indexes, ir)
	}
	return nil
}

// uncheckedIndexes lists the collection's indexes with nothing known of their fields,
// for a collection whose rows Postgres could not describe.
func uncheckedIndexes(c Collection) []IndexReport {
	var out []IndexReport
	for _, ix := range c.Indexes {
		ir := IndexReport{Name: IndexName(ix), EstimatedBytes: -1}
		for _, f := range ix {
			ir.Fields = append(ir.Fields, IndexField{Name: f, Width: -1})
		}
		out = append(out, ir)
	}
	return out
}

// textWidths returns, for each column of the collection's table that Postgres has
// statistics of, the bytes its values take as text on average: the mean of the
// values Postgres sampled (its histogram bounds, else its most common values by
// frequency), else, for a variable-width type, pg_stats.avg_width less a varlena
// header. None for a query, nor when Postgres refuses to say: the widths only size
// an estimate.
func textWidths(ctx context.Context, conn *pgx.Conn, c Collection) (map[string]int, error) {
	widths := map[string]int{}
	if c.Table == "" {
		return widths, nil
	}
	// A partitioned table's statistics are its inherited ones; a plain table with
	// inheritance children has both, and a sync reads the children's rows too.
	rows, _ := conn.Query(ctx, `SELECT s.attname::text, max(coalesce(
			(SELECT avg(octet_length(b)) FROM unnest(s.histogram_bounds::text::text[]) b),
			(SELECT sum(octet_length(v) * f) / sum(f) FROM unnest(s.most_common_vals::text::text[], s.most_common_freqs) m(v, f)),
			CASE WHEN t.typlen = -1 THEN s.avg_width - 1 END))::float8
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = c.relname
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = s.attname
		JOIN pg_type t ON t.oid = a.atttypid
		WHERE c.oid = to_regclass($1) GROUP BY s.attname`, pgx.Identifier(c.tableParts()).Sanitize())
	var name string
	var width *float64
	_, err := pgx.ForEachRow(rows, []any{&name, &width}, func() error { // rows holds Query's error
		if width != nil && *width >= 0 {
			widths[name] = int(math.Round(*width))
		}
		return nil
	})
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		return map[string]int{}, nil
	case err != nil:
		return nil, fmt.Errorf("read column statistics: %w", err)
	}
	return widths, nil
}

// columnFacts is what Postgres says of a collection's rows: each field's name and
// base type, in order, and the average width of those with statistics.
type columnFacts struct {
	names, types []string
	widths       map[string]int
}

// index reports on one index's fields, adding r's problems for the missing and the
// unindexable.
func (cf columnFacts) index(fields []string, r *CollectionReport) IndexReport {
	ir := IndexReport{Name: IndexName(fields), EstimatedBytes: -1}
	for _, f := range fields {
		fr := IndexField{Name: f, Width: -1}
		at := slices.Index(cf.names, f)
		switch {
		case at < 0:
			r.problem("index %s: no field %q: the documents hold %s", ir.Name, f, strings.Join(cf.names, ", "))
		case slices.Index(cf.names[at+1:], f) >= 0:
			fr.Exists, fr.Type = true, cf.types[at]
			fr.Why = "two columns of the rows have this name"
			r.problem("index %s: field %q is two columns of the rows", ir.Name, f)
		default:
			fr.Exists, fr.Type = true, cf.types[at]
			if _, err := index.TypeFor(fr.Type); err != nil {
				fr.Why = err.Error()
				if ne := (*index.NotIndexableError)(nil); errors.As(err, &ne) {
					fr.Why = "type " + ne.Type + ": " + ne.Why
				}
				r.problem("index %s: field %q cannot be indexed: %s", ir.Name, f, fr.Why)
			} else {
				fr.Indexable = true
			}
		}
		if w, ok := cf.widths[f]; ok {
			fr.Width = w
		}
		ir.Fields = append(ir.Fields, fr)
	}
	return ir
}

// sampleID returns a document id as long as the collection's are estimated to be:
// its key columns' sample values, joined as ID joins them.
func (cf columnFacts) sampleID(key []string) string {
	if len(key) == 0 {
		return samples["int4"].text
	}
	parts := make([]string, len(key))
	for i, k := range key {
		if w, ok := cf.widths[k]; ok {
			parts[i] = strings.Repeat("x", max(w, 1))
			continue
		}
		typ := ""
		if at := slices.Index(cf.names, k); at >= 0 {
			typ = cf.types[at]
		}
		parts[i] = strings.Repeat("x", defaultTextWidth)
		if s, ok := samples[typ]; ok {
			parts[i] = s.text
		}
	}
	return ID(parts...)
}

// entryBytes estimates one entry of index ir, whose fields all exist and can be
// indexed, for a document of id: the entry made from sample values by the code that
// makes real ones, and measured as stored.
func (s *Source) entryBytes(collection string, ir IndexReport, id string) int {
	def := index.Def{Name: ir.Name}
	doc := map[string]json.RawMessage{}
	for _, f := range ir.Fields {
		t, _ := index.TypeFor(f.Type) // ir.OK()
		def.Fields = append(def.Fields, f.Name)
		def.Types = append(def.Types, t)
		doc[f.Name] = sampleJSON(f.Type, t, f.Width)
	}
	body, err := json.Marshal(doc)
	if err != nil {
		return 0
	}
	key, err := index.Key(def, body)
	if err != nil {
		return 0
	}
	entry := index.EntryID(key, id)
	n := len(entry)
	if s.RowKeyBytes != nil {
		n = s.RowKeyBytes(index.Collection(collection, ir.Name), entry)
	}
	return n + len(index.EntryBody)
}

// samples are typical values of the fixed-width types, as Postgres renders them as
// text (ids) and as JSON (documents, whose values indexes encode).
var samples = map[string]struct{ text, json string }{
	"int2":        {"1234", "1234"},
	"int4":        {"1234567", "1234567"},
	"int8":        {"1234567890123", "1234567890123"},
	"numeric":     {"12345.67", "12345.67"},
	"float4":      {"12345.67", "12345.67"},
	"float8":      {"12345.6789012", "12345.6789012"},
	"bool":        {"true", "true"},
	"date":        {"2024-06-01", `"2024-06-01"`},
	"timestamp":   {"2024-06-01 12:34:56.123456", `"2024-06-01T12:34:56.123456"`},
	"timestamptz": {"2024-06-01 12:34:56.123456+00", `"2024-06-01T12:34:56.123456+00:00"`},
	"uuid":        {"7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21", `"7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21"`},
}

// defaultTextWidth is the bytes of a text value without statistics.
const defaultTextWidth = 16

// sampleJSON returns a value of base type typname, indexed as t, as its document
// holds it: a number or a text as wide as width says (when not -1), a typical value
// of the type else.
func sampleJSON(typname string, t index.Type, width int) json.RawMessage {
	switch {
	case t == index.TypeNumber && width > 0:
		return json.RawMessage(strings.Repeat("1234567890", width/10+1)[:width])
	case t == index.TypeText && width >= 0:
		return json.RawMessage(strconv.Quote(strings.Repeat("x", width)))
	}
	if s, ok := samples[typname]; ok {
		return json.RawMessage(s.json)
	}
	return json.RawMessage(strconv.Quote(strings.Repeat("x", defaultTextWidth)))
}
