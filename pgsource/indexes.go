package pgsource

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/snapshot"
)

// MaxIndexFields bounds the fields of one index.
const MaxIndexFields = 8

// MaxIndexes bounds the indexes of one collection.
const MaxIndexes = 16

// validateIndexes reports the first unusable index of the collection at field
// (collections[i]), naming it as collections[i].indexes[j].
func validateIndexes(field string, c Collection) error {
	if len(c.Indexes) > MaxIndexes {
		return fmt.Errorf("%s.indexes (%s): %d indexes, over the limit of %d", field, c.Name, len(c.Indexes), MaxIndexes)
	}
	names := map[string]int{}
	for j, ix := range c.Indexes {
		at := fmt.Sprintf("%s.indexes[%d] (%s)", field, j, c.Name)
		switch {
		case len(ix) == 0:
			return fmt.Errorf("%s: an empty list: name the field or fields to index", at)
		case len(ix) > MaxIndexFields:
			return fmt.Errorf("%s: %d fields, over the limit of %d", at, len(ix), MaxIndexFields)
		}
		seen := map[string]bool{}
		for _, f := range ix {
			switch {
			case f == "":
				return fmt.Errorf("%s: an empty field name", at)
			case seen[f]:
				return fmt.Errorf("%s: field %q named twice", at, f)
			}
			seen[f] = true
		}
		name := IndexName(ix)
		if k, dup := names[name]; dup {
			return fmt.Errorf("%s: the same fields as indexes[%d]", at, k)
		}
		names[name] = j
	}
	return nil
}

// IndexName names an index by its fields: joined by commas (a field's own commas
// are doubled, so that names never collide).
func IndexName(fields []string) string {
	quoted := make([]string, len(fields))
	for i, f := range fields {
		quoted[i] = strings.ReplaceAll(f, ",", ",,")
	}
	return strings.Join(quoted, ",")
}

// baseTypesSQL resolves type oids to the name of the type their values compare as:
// a domain's base type (through domains over domains), "text" for an enum (indexes
// compare its labels as text), the type itself otherwise. Only a built-in type
// (pg_catalog's) is named bare; any other is named as format_type qualifies it, so a
// user's type that happens to be called "numeric" is never taken for the built-in one.
const baseTypesSQL = `WITH RECURSIVE d(start, oid) AS (
		SELECT o, o FROM unnest($1::oid[]) AS o
		UNION ALL
		SELECT d.start, t.typbasetype FROM d JOIN pg_type t ON t.oid = d.oid WHERE t.typtype = 'd'
	)
	SELECT d.start, CASE
			WHEN t.typtype = 'e' THEN 'text'
			WHEN t.typnamespace = 'pg_catalog'::regnamespace THEN t.typname::text
			ELSE format_type(t.oid, NULL) || ' (user-defined)'
		END
	FROM d JOIN pg_type t ON t.oid = d.oid WHERE t.typtype <> 'd'`

// fieldTypes returns the name of each top-level field of the collection's documents
// and the base type its values compare as (baseTypesSQL), in column order, as
// Postgres describes the collection's rows without running the statement.
func fieldTypes(ctx context.Context, conn *pgx.Conn, c Collection) (names, types []string, err error) {
	sd, err := conn.PgConn().Prepare(ctx, "", c.rowsSQL(), nil)
	if err != nil {
		return nil, nil, inCollection(c.Name, fmt.Errorf("describe its rows: %w", err))
	}
	oids := make([]uint32, len(sd.Fields))
	for i, f := range sd.Fields {
		names = append(names, f.Name)
		oids[i] = f.DataTypeOID
	}
	base := map[uint32]string{}
	rows, err := conn.Query(ctx, baseTypesSQL, oids)
	if err != nil {
		return nil, nil, inCollection(c.Name, fmt.Errorf("read its field types: %w", err))
	}
	var oid uint32
	var name string
	if _, err := pgx.ForEachRow(rows, []any{&oid, &name}, func() error { base[oid] = name; return nil }); err != nil {
		return nil, nil, inCollection(c.Name, fmt.Errorf("read its field types: %w", err))
	}
	for _, o := range oids {
		types = append(types, base[o])
	}
	return names, types, nil
}

// indexDefs returns the collection's declared indexes with each field's type, read
// in the snapshot's transaction. A field the documents do not hold, or hold twice,
// is an error naming the index and the fields they hold.
func indexDefs(ctx context.Context, conn *pgx.Conn, c Collection) ([]snapshot.IndexDef, error) {
	if len(c.Indexes) == 0 {
		return nil, nil
	}
	names, types, err := fieldTypes(ctx, conn, c)
	if err != nil {
		return nil, err
	}
	var defs []snapshot.IndexDef
	for _, ix := range c.Indexes {
		def := snapshot.IndexDef{Name: IndexName(ix), Fields: ix}
		for _, f := range ix {
			at := -1
			for i, n := range names {
				if n == f && at >= 0 {
					return nil, fmt.Errorf("%w collection %s index %s: field %q is two columns of the rows", snapshot.ErrSource, c.Name, def.Name, f)
				}
				if n == f {
					at = i
				}
			}
			if at < 0 {
				return nil, fmt.Errorf("%w collection %s index %s: no field %q: the documents hold %s", snapshot.ErrSource, c.Name, def.Name, f, strings.Join(names, ", "))
			}
			def.Types = append(def.Types, types[at])
		}
		defs = append(defs, def)
	}
	return defs, nil
}

// Indexes returns the collection's declared indexes, each field typed as of the
// snapshot (snapshot.IndexedSnapshot).
func (s *snap) Indexes(ctx context.Context, collection string) ([]snapshot.IndexDef, error) {
	cr, ok := s.reads[collection]
	if !ok {
		return nil, fmt.Errorf("collection %q is not configured", collection)
	}
	return indexDefs(ctx, s.conn, cr.c)
}
