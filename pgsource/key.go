package pgsource

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// IDSeparator joins the components of a composite key's id.
const IDSeparator = ","

// idEscaper and idUnescaper implement the component escaping of ID and SplitID; keySQL
// does the same in SQL. '%' is replaced first, so the '%' of "%2C" is never escaped.
var (
	idEscaper   = strings.NewReplacer("%", "%25", ",", "%2C")
	idUnescaper = strings.NewReplacer("%25", "%", "%2C", ",")
)

// ID returns the id of the document whose key columns have these values, each in its
// text form (what Postgres' ::text makes of it, with TimeZone UTC). A key of one column
// is its value as it is. A composite key's id is its components, each with '%' written
// as "%25" and ',' as "%2C", joined by ','. So ("2024-02-29 12:34:56.789012+00", "-5")
// is "2024-02-29 12:34:56.789012+00,-5" and ("a,b", "100%") is "a%2Cb,100%25".
//
// Distinct tuples have distinct ids (no component of an id holds a ','), and SplitID
// takes an id back to its components. Ids sort (as bytes, which is how the API lists
// them) by their first component, then the next, so rows that share leading components
// are listed together; the one departure from tuple order is that a component followed
// by the separator sorts after the same component continued by a byte below ','
// (a control character, a space or one of !"#$%&'()*+): ("Ann Lee", 1) is listed
// before ("Ann", 1), but ("Ann", 1) before ("Anna", 1) and ("5", 1) before ("50", 1).
func ID(components ...string) string {
	if len(components) == 1 {
		return components[0]
	}
	esc := make([]string, len(components))
	for i, c := range components {
		esc[i] = idEscaper.Replace(c)
	}
	return strings.Join(esc, IDSeparator)
}

// SplitID returns the n components of a composite key's id made by ID. For n == 1 it
// returns the id itself. It fails when the id does not have n components or holds a
// '%' that does not start "%25" or "%2C".
func SplitID(id string, n int) ([]string, error) {
	if n <= 1 {
		return []string{id}, nil
	}
	parts := strings.Split(id, IDSeparator)
	if len(parts) != n {
		return nil, fmt.Errorf("id %q has %d components; want %d", id, len(parts), n)
	}
	for i, p := range parts {
		for j := strings.IndexByte(p, '%'); j >= 0; j = strings.IndexByte(p, '%') {
			if !strings.HasPrefix(p[j:], "%25") && !strings.HasPrefix(p[j:], "%2C") {
				return nil, fmt.Errorf("id %q: component %d holds a '%%' that is not %%25 or %%2C", id, i+1)
			}
			p = p[j+3:]
		}
		parts[i] = idUnescaper.Replace(parts[i])
	}
	return parts, nil
}

// keySQL returns the SQL expression of a row's id, given its key columns: the column's
// text form for one column, else ID's encoding built by Postgres, so that a NULL in any
// column makes the whole id NULL. Columns are quoted and qualified by the row's alias.
func keySQL(key []string) string {
	if len(key) == 1 {
		return "(" + rowAlias + "." + pgx.Identifier{key[0]}.Sanitize() + ")::text"
	}
	parts := make([]string, len(key))
	for i, col := range key {
		// COLLATE "C": replace() refuses a nondeterministic collation, which a text
		// column's collation may be.
		parts[i] = "replace(replace((" + rowAlias + "." + pgx.Identifier{col}.Sanitize() + `)::text COLLATE "C", '%', '%25'), ',', '%2C')`
	}
	return "(" + strings.Join(parts, " || ',' || ") + ")"
}

// orderSQL returns the ORDER BY of a scan, which puts equal ids next to each other.
// A key of one column is ordered by the column itself, which an index can stream; with
// byteOrder (a nondeterministic collation, where 'a' = 'A' and 'a', 'A', 'a' was a
// possible order that hid the duplicate 'a') then by its id in byte order too, which
// costs an incremental sort (about 40% more Postgres time for a million rows), so
// only where needed. A composite key is ordered by its id in byte order (collation
// "C"), the order of the store's row keys.
func orderSQL(key []string, byteOrder bool) string {
	if len(key) == 1 {
		col := rowAlias + "." + pgx.Identifier{key[0]}.Sanitize()
		if byteOrder {
			return col + ", " + keySQL(key) + ` COLLATE "C"`
		}
		return col
	}
	return keySQL(key) + ` COLLATE "C"`
}

// needsByteOrder reports whether a one-column key's order must be completed by its
// id's bytes: when Postgres may call two different ids equal. For a table's (or
// view's) column that is when its collation is nondeterministic; for a query's, whose
// collation the catalog does not say, when its type is collatable at all.
func needsByteOrder(ctx context.Context, conn *pgx.Conn, c Collection, key []string) (bool, error) {
	if len(key) != 1 {
		return false, nil
	}
	var need bool
	if c.Table != "" {
		err := conn.QueryRow(ctx, `SELECT coalesce((SELECT NOT coll.collisdeterministic FROM pg_attribute a
			JOIN pg_collation coll ON coll.oid = a.attcollation
			WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT a.attisdropped), false)`,
			pgx.Identifier(c.tableParts()).Sanitize(), key[0]).Scan(&need)
		return need, err
	}
	// Described, not run: the key's type, from the statement Postgres would plan.
	desc, err := conn.PgConn().Prepare(ctx, "", keyColumnSQL(c, key[0]), nil)
	if err != nil {
		return false, fmt.Errorf("query: %w", err)
	}
	if len(desc.Fields) != 1 {
		return false, nil
	}
	err = conn.QueryRow(ctx, `SELECT coalesce((SELECT typcollation <> 0 FROM pg_type WHERE oid = $1), false)`,
		desc.Fields[0].DataTypeOID).Scan(&need)
	return need, err
}

// keyColumnSQL reads the column col of a collection's rows: described, not run, it
// gives the column's type.
func keyColumnSQL(c Collection, col string) string {
	return "SELECT " + rowAlias + "." + pgx.Identifier{col}.Sanitize() + " FROM " + rowsFromSQL(c)
}

// describeKey names a key's columns in messages: "column id", "columns (a, b)".
func describeKey(key []string) string {
	if len(key) == 1 {
		return "column " + key[0]
	}
	return "columns (" + strings.Join(key, ", ") + ")"
}

// querier is what catalog reads need: a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// relation is what the catalog says about a table collection's relation.
type relation struct {
	oid     uint32
	kind    relKind
	columns []column
	uniques []uniqueIndex // valid unique indexes without WHERE or expressions, primary key first
}

type column struct {
	name    string
	notNull bool
	typ     uint32 // pg_type oid
}

type uniqueIndex struct {
	name    string
	primary bool
	columns []string
	notNull bool // every column is NOT NULL
}

// column returns the relation's column of that name.
func (r relation) column(name string) (column, bool) {
	for _, c := range r.columns {
		if c.name == name {
			return c, true
		}
	}
	return column{}, false
}

// errNoRelation reports a table collection whose relation does not exist.
var errNoRelation = errors.New("not found")

// relKind is a relation's pg_class.relkind, a one-letter code.
type relKind string

// The relation kinds a collection may read.
const (
	relTable       relKind = "r"
	relPartitioned relKind = "p"
	relView        relKind = "v"
	relMatView     relKind = "m"
	relForeign     relKind = "f"
)

// relkinds names relation kinds in messages.
var relkinds = map[relKind]string{relTable: "table", relPartitioned: "partitioned table", relView: "view",
	relMatView: "materialized view", relForeign: "foreign table"}

// isTable reports whether the kind holds rows of its own: a table, or a partitioned
// table (whose partitions do).
func (k relKind) isTable() bool { return k == relTable || k == relPartitioned }

func (r relation) kindName() string {
	if k, ok := relkinds[r.kind]; ok {
		return k
	}
	return "relation (relkind " + string(r.kind) + ")"
}

// lookupRelation reads a table collection's relation from the catalog, as the sync's
// own statement would resolve its name (search_path included). It returns an error
// wrapping errNoRelation when there is none.
func lookupRelation(ctx context.Context, q querier, c Collection) (relation, error) {
	var r relation
	err := q.QueryRow(ctx, `SELECT c.oid, c.relkind::text FROM pg_class c WHERE c.oid = to_regclass($1)`,
		pgx.Identifier(c.tableParts()).Sanitize()).Scan(&r.oid, &r.kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, errNoRelation
	}
	if err != nil {
		return r, fmt.Errorf("look up table %s: %w", c.Table, err)
	}
	rows, err := q.Query(ctx, `SELECT attname::text, attnotnull, atttypid FROM pg_attribute
		WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, r.oid)
	if err != nil {
		return r, fmt.Errorf("read the columns of %s: %w", c.Table, err)
	}
	for rows.Next() {
		var col column
		if err := rows.Scan(&col.name, &col.notNull, &col.typ); err != nil {
			rows.Close()
			return r, err
		}
		r.columns = append(r.columns, col)
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("read the columns of %s: %w", c.Table, err)
	}
	// An index's key columns are indkey[0 .. indnkeyatts-1] (INCLUDE columns follow);
	// an expression index has a 0 among them and indexprs set.
	rows, err = q.Query(ctx, `SELECT ic.relname::text, i.indisprimary,
			array(SELECT a.attname::text FROM generate_series(0, i.indnkeyatts - 1) AS n
				JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[n] ORDER BY n),
			coalesce((SELECT bool_and(a.attnotnull) FROM generate_series(0, i.indnkeyatts - 1) AS n
				JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[n]), false)
		FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
		WHERE i.indrelid = $1 AND i.indisunique AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL
		ORDER BY i.indisprimary DESC, ic.relname`, r.oid)
	if err != nil {
		return r, fmt.Errorf("read the unique indexes of %s: %w", c.Table, err)
	}
	for rows.Next() {
		var u uniqueIndex
		if err := rows.Scan(&u.name, &u.primary, &u.columns, &u.notNull); err != nil {
			rows.Close()
			return r, err
		}
		r.uniques = append(r.uniques, u)
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("read the unique indexes of %s: %w", c.Table, err)
	}
	return r, nil
}

// inferKey returns the key of a relation whose collection names none: its primary key,
// or else its only unique index whose columns are all NOT NULL. The error, a sentence
// naming the collection, says what was found and to set key:.
func (r relation) inferKey(c Collection) ([]string, error) {
	if !r.kind.isTable() && r.kind != relMatView {
		return nil, inCollection(c.Name, fmt.Errorf("%s is a %s, whose key cannot be inferred: name its key in the config (key: column, or key: [column, column])",
			c.Table, r.kindName()))
	}
	var candidates []uniqueIndex
	seen := map[string]bool{}
	var nullable []string
	for _, u := range r.uniques {
		if u.primary {
			return u.columns, nil
		}
		cols := strings.Join(u.columns, ", ")
		if !u.notNull {
			nullable = append(nullable, fmt.Sprintf("%s on (%s)", u.name, cols))
			continue
		}
		if !seen[cols] { // two indexes over the same columns are one candidate
			seen[cols] = true
			candidates = append(candidates, u)
		}
	}
	switch len(candidates) {
	case 1:
		return candidates[0].columns, nil
	case 0:
		msg := fmt.Sprintf("%s %s has no primary key and no unique index over NOT NULL columns (without WHERE or expressions) to take its key from", r.kindName(), c.Table)
		if len(nullable) > 0 {
			msg += fmt.Sprintf(" (unique indexes with nullable columns: %s)", strings.Join(nullable, "; "))
		}
		return nil, inCollection(c.Name, errors.New(msg+": name its key in the config (key: column, or key: [column, column])"))
	}
	var list []string
	for _, u := range candidates {
		list = append(list, fmt.Sprintf("[%s] (index %s)", strings.Join(u.columns, ", "), u.name))
	}
	return nil, inCollection(c.Name, fmt.Errorf("%s %s has no primary key and %d unique indexes that could be its key: %s: name one of them as its key in the config",
		r.kindName(), c.Table, len(candidates), strings.Join(list, ", ")))
}

// resolveKeys returns every collection's key: the configured one, or the inferred one
// for a table that names none.
func resolveKeys(ctx context.Context, q querier, cs []Collection) (map[string][]string, error) {
	keys := map[string][]string{}
	for _, c := range cs {
		if k := c.keyColumns(); k != nil {
			keys[c.Name] = k
			continue
		}
		r, err := lookupRelation(ctx, q, c)
		if errors.Is(err, errNoRelation) {
			return nil, fmt.Errorf("collection %s: table %s does not exist (or is not visible to this user), so its key cannot be inferred", c.Name, c.Table)
		}
		if err != nil {
			return nil, fmt.Errorf("collection %s: %w", c.Name, err)
		}
		k, err := r.inferKey(c)
		if err != nil {
			return nil, err
		}
		keys[c.Name] = k
	}
	return keys, nil
}
