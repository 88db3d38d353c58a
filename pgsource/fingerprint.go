package pgsource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// A table collection's fingerprint tells a version whose contents are its parent's
// without reading a row: the row count and a hash of the row versions' xmin, with the
// definitions of the columns and types, which change what rows say without rewriting
// them; and the files that hold the rows, which a rewrite changes.

// tableFingerprint returns a fingerprint of a table collection's contents as the
// snapshot sees them, cheap to compute (no row is turned into JSON): the row count,
// the sum of a hash of every visible row version's xmin, and the column definitions.
// Every insert or update writes row versions with a new xmin and every delete changes
// the count or the sum, so changed contents change the fingerprint. It returns ""
// for a query collection or a relation that is not a table (a view), which can only be
// compared by reading it. Changes that rewrite no row but change what rows say (a
// column renamed, an enum label renamed, a composite type's attribute renamed or
// added) change the column and type definitions, which are part of it.
func tableFingerprint(ctx context.Context, tx pgx.Tx, c Collection) (fp, defs string, rows int64, err error) {
	cols, err := tableDefinitions(ctx, tx, c)
	if err != nil || cols == "" {
		return "", "", 0, err
	}
	return hashedFingerprint(ctx, tx, c, cols)
}

// hashedFingerprint is tableFingerprint of a table whose definitions are cols.
func hashedFingerprint(ctx context.Context, tx pgx.Tx, c Collection, cols string) (fp, defs string, rows int64, err error) {
	var xsum string
	// sum over bigint adds in numeric, so no hash overflows.
	err = tx.QueryRow(ctx, xminSumSQL(c)).Scan(&rows, &xsum)
	if err != nil {
		return "", "", 0, err
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%d:%s\n%s", rows, xsum, cols))
	return countedFingerprint(rows, sum[:]), definitionsOf(cols), rows, nil
}

// xminSumSQL reads the table collection c's row count and the sum of a hash of every
// visible row version's xmin.
func xminSumSQL(c Collection) string {
	return `SELECT count(*), coalesce(sum(hashint8extended(` + xminSQL + `, 0)), 0)::text FROM ` + tableFromSQL(c)
}

// countedFingerprint is a table's fingerprint, "<rows>.<hash>": the row count, which a
// later version's changedPass compares with, and a hash that tells contents apart.
func countedFingerprint(rows int64, sum []byte) string {
	return strconv.FormatInt(rows, 10) + "." + hex.EncodeToString(sum[:12])
}

// fingerprintRows returns the row count a countedFingerprint holds.
func fingerprintRows(fp string) (int64, bool) {
	n, _, ok := strings.Cut(fp, ".")
	if !ok {
		return 0, false
	}
	rows, err := strconv.ParseInt(n, 10, 64)
	return rows, err == nil
}

// definitionsOf is a collection's Definitions entry: a hash of tableDefinitions.
func definitionsOf(cols string) string {
	sum := sha256.Sum256([]byte(cols))
	return hex.EncodeToString(sum[:12])
}

// tableDefinitions describes a table collection's column and type definitions and
// the relations that hold its rows, reading no row; "" for a query collection or a
// relation that is not a table. Its hash is the collection's Definitions entry
// (definitionsOf).
func tableDefinitions(ctx context.Context, tx pgx.Tx, c Collection) (string, error) {
	if c.Table == "" {
		return "", nil
	}
	name := pgx.Identifier(c.tableParts()).Sanitize()
	var kind relKind
	err := tx.QueryRow(ctx, relkindSQL, name).Scan(&kind)
	if err != nil || !kind.isTable() {
		return "", err
	}
	var cols string
	if err := tx.QueryRow(ctx, columnsFingerprintSQL, name).Scan(&cols); err != nil {
		return "", err
	}
	// Which relations hold the rows: a table swapped in by a rename, or a partition
	// attached in place of another, keeps the definitions and its rows' xmin.
	var rels string
	if err := tx.QueryRow(ctx, relationsSQL, name).Scan(&rels); err != nil {
		return "", err
	}
	return cols + "\n" + rels, nil
}

// relkindSQL reads the relation $1's kind (pg_class.relkind); "" when there is none.
const relkindSQL = `SELECT coalesce((SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)), '')`

// columnsFingerprintSQL describes, as unambiguous JSON, the table $1's columns (name,
// type, default for rows written before the column was added) and every type they
// use, down through arrays, domains, ranges and composites: an enum's labels in
// order, a composite's attributes. Renaming a column, an enum label or a composite's
// attribute, or adding an attribute, rewrites no row but changes what the rows say as
// JSON, so it must change the fingerprint. (Joined as text, a column named
// "a integer ,b" once read like two columns.)
var columnsFingerprintSQL = `WITH RECURSIVE ` + typeClosure(`SELECT atttypid FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`) + `
	SELECT jsonb_build_array(
		` + columnsJSON(`to_regclass($1)`) + `,
		` + typesJSON + `
	)::text`

// typeClosure is a CTE, types(oid), of the types seed selects and every type they
// are made of: arrays' elements, domains' base types, composites' attributes' types,
// ranges' subtypes.
func typeClosure(seed string) string {
	return `types(oid) AS (
		` + seed + `
		UNION
		SELECT s.x FROM types CROSS JOIN LATERAL (SELECT * FROM pg_type WHERE oid = types.oid OFFSET 0) AS ty,
			LATERAL (SELECT ty.typelem WHERE ty.typelem <> 0
				UNION ALL SELECT ty.typbasetype WHERE ty.typbasetype <> 0
				UNION ALL SELECT a.atttypid FROM pg_attribute a
					WHERE ty.typrelid <> 0 AND a.attrelid = ty.typrelid AND a.attnum > 0 AND NOT a.attisdropped
				UNION ALL SELECT r.rngsubtype FROM pg_range r WHERE r.rngtypid = ty.oid) AS s(x)
	)`
}

// columnsJSON is a JSON array of the relation rel's columns: name, type, and the
// value of rows written before the column was added.
func columnsJSON(rel string) string {
	return `(SELECT coalesce(jsonb_agg(jsonb_build_array(attname, format_type(atttypid, atttypmod), attmissingval::text) ORDER BY attnum), '[]')
			FROM pg_attribute WHERE attrelid = ` + rel + ` AND attnum > 0 AND NOT attisdropped)`
}

// typesJSON is a JSON array describing the user-defined types of the CTE types: an
// enum's labels in order, a composite's attributes.
const typesJSON = `(SELECT coalesce(jsonb_agg(jsonb_build_array(ty.oid,
			(SELECT jsonb_agg(enumlabel ORDER BY enumsortorder) FROM pg_enum WHERE enumtypid = ty.oid),
			(SELECT jsonb_agg(jsonb_build_array(attname, format_type(atttypid, atttypmod)) ORDER BY attnum)
				FROM pg_attribute WHERE ty.typrelid <> 0 AND attrelid = ty.typrelid AND attnum > 0 AND NOT attisdropped)
			) ORDER BY ty.oid), '[]')
			FROM pg_type ty WHERE ty.oid IN (SELECT oid FROM types) AND ty.oid >= 16384)`

// relationTree is a CTE, tree(oid), of the relation root and every partition and
// inheritance child under it.
func relationTree(root string) string {
	return `WITH RECURSIVE tree(oid) AS (
		SELECT ` + root + `
		UNION
		SELECT i.inhrelid FROM pg_inherits i JOIN tree ON i.inhparent = tree.oid
	)`
}

// relationsSQL lists the oids of the table $1 and of every partition and inheritance
// child under it.
var relationsSQL = relationTree(`to_regclass($1)::oid`) + `
	SELECT coalesce(string_agg(oid::text, ',' ORDER BY oid), '') FROM tree`

// filesSQL lists, for each of the tables $1, the files that hold its rows and its
// partitions' and inheritance children's ("" for a relation that is not there). A
// rewrite (ALTER TABLE … TYPE … USING, a volatile default) changes every row without
// a message on the replication stream and, with the same column types, without
// changing the definitions: the new files tell.
var filesSQL = `SELECT t.name, coalesce((` + relationTree(`to_regclass(t.name)::oid`) + `
	SELECT string_agg(oid::text || ':' || coalesce(pg_relation_filenode(oid), 0), ',' ORDER BY oid) FROM tree WHERE oid IS NOT NULL), '')
	FROM unnest($1::text[]) AS t(name)`

// filesOf reports whether files (filesSQL's answer for a table) are those of the
// relation oid and its partitions: the table the stream follows is the one the
// snapshot reads.
func filesOf(files string, oid uint32) bool {
	prefix := strconv.FormatUint(uint64(oid), 10) + ":"
	for _, f := range strings.Split(files, ",") {
		if strings.HasPrefix(f, prefix) {
			return true
		}
	}
	return false
}

// tableFiles returns filesSQL's answer for the table collections, by collection, in
// one round trip; nil when there is none.
func tableFiles(ctx context.Context, tx pgx.Tx, collections []Collection) (map[string]string, error) {
	byTable := map[string][]string{}
	var tables []string
	for _, c := range collections {
		if c.Table == "" {
			continue
		}
		name := pgx.Identifier(c.tableParts()).Sanitize()
		if byTable[name] == nil {
			tables = append(tables, name)
		}
		byTable[name] = append(byTable[name], c.Name)
	}
	if len(tables) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	var name, files string
	rows, err := tx.Query(ctx, filesSQL, tables)
	if err != nil {
		return nil, err
	}
	_, err = pgx.ForEachRow(rows, []any{&name, &files}, func() error {
		for _, c := range byTable[name] {
			out[c] = files
		}
		return nil
	})
	return out, err
}
