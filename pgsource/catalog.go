package pgsource

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Noticing DDL. The replication stream carries no message for DDL, nor for a table
// rewrite, and DDL moves no statistics counter; yet what a document says depends on
// the catalog: column names and types, enum labels, composite types' attributes, a
// view's definition, and the file that holds a table's rows (a rewrite changes every
// row it holds without a row change the stream or the counters see). So every watch
// poll, in both modes, also reads a digest of that catalog state for the watched
// relations, and a changed digest is a change like a row change. The sync that
// follows compares the definitions it reads in its own snapshot with its parent's and
// re-reads a collection whose definitions changed in full, comparing by content.

// catalogDigest returns a statement's digest of the catalog state that decides what
// the relations of the parameter rels (and their partitions and inheritance children)
// and the collections' result types of the parameter types say as JSON: each
// relation's name, schema, kind, file, columns and rewrite rules (a view's
// definition), and every type their columns or the results use, down through arrays,
// domains, ranges and composites. (A query's result may use a type no relation does:
// ROW(…)::t.) It reads the catalog only, takes no lock on the relations, and so never
// waits behind DDL.
func catalogDigest(rels, types string) string {
	return `WITH RECURSIVE rels(oid) AS (
		SELECT unnest(` + rels + `::oid[])
		UNION
		SELECT i.inhrelid FROM pg_inherits i JOIN rels ON i.inhparent = rels.oid
	), ` + typeClosure(`SELECT a.atttypid FROM rels CROSS JOIN LATERAL
			(SELECT atttypid FROM pg_attribute WHERE attrelid = rels.oid AND attnum > 0 AND NOT attisdropped OFFSET 0) AS a
		UNION SELECT unnest(`+types+`::oid[])`) + `
	SELECT md5(jsonb_build_array(
		(SELECT coalesce(jsonb_agg(jsonb_build_array(r.oid, c.relname, c.relnamespace, c.relkind, pg_relation_filenode(c.oid),
			` + columnsJSON(`r.oid`) + `,
			(SELECT md5(string_agg(ev_action::text, ',' ORDER BY oid)) FROM pg_rewrite WHERE ev_class = r.oid)
			) ORDER BY r.oid), '[]')
			FROM rels r LEFT JOIN pg_class c ON c.oid = r.oid),
		` + typesJSON + `
	)::text)`
}

// dependentViewsSQL adds to the relations $1 every view (plain or materialized) that
// reads one of them, directly or through other views: a query collection may read a
// view, whose plan names only the tables under it.
const dependentViewsSQL = `WITH RECURSIVE rels(oid) AS (
		SELECT unnest($1::oid[])
		UNION
		SELECT rw.ev_class FROM rels
			JOIN pg_depend d ON d.refclassid = 'pg_class'::regclass AND d.refobjid = rels.oid AND d.classid = 'pg_rewrite'::regclass
			JOIN pg_rewrite rw ON rw.oid = d.objid AND rw.ev_class <> rels.oid
	)
	SELECT coalesce(array_agg(oid ORDER BY oid), '{}') FROM rels`

// resultTypes returns the types of the columns the collections' statements return,
// as Postgres describes them without running them.
func resultTypes(ctx context.Context, conn *pgx.Conn, collections []Collection) ([]uint32, error) {
	seen := map[uint32]bool{}
	for _, c := range collections {
		sd, err := conn.PgConn().Prepare(ctx, "", c.rowsSQL(), nil)
		if err != nil {
			return nil, fmt.Errorf("collection %s: describe its rows: %w", c.Name, err)
		}
		for _, f := range sd.Fields {
			seen[f.DataTypeOID] = true
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// withViews returns the relations oids and every view over them (dependentViewsSQL):
// the relations whose definitions the watch digests.
func withViews(ctx context.Context, conn *pgx.Conn, oids []uint32) ([]uint32, error) {
	var all []uint32
	if err := conn.QueryRow(ctx, dependentViewsSQL, oids).Scan(&all); err != nil {
		return nil, fmt.Errorf("find the views over the watched tables: %w", err)
	}
	return all, nil
}

// publicationDigestSQL fingerprints the publication $1's definition: what it
// publishes, whether through partition roots, each of its tables' entries whole (the
// entry's own oid, so a table dropped from it and added again differs; a row filter,
// a column list) and, from Postgres 15 (withSchemas), the schemas of FOR TABLES IN
// SCHEMA. "" when there is no such publication.
func publicationDigestSQL(withSchemas bool) string {
	schemas := ""
	if withSchemas {
		schemas = `, (SELECT coalesce(jsonb_agg(to_jsonb(n) ORDER BY n.pnnspid), '[]') FROM pg_publication_namespace n WHERE n.pnpubid = p.oid)`
	}
	return `SELECT coalesce((SELECT md5(jsonb_build_array(p.puballtables, p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate, p.pubviaroot,
		(SELECT coalesce(jsonb_agg(to_jsonb(r) ORDER BY r.prrelid), '[]') FROM pg_publication_rel r WHERE r.prpubid = p.oid)` +
		schemas + `)::text) FROM pg_publication p WHERE p.pubname = $1), '')`
}

// publicationDigest returns publicationDigestSQL's answer for the publication name.
func publicationDigest(ctx context.Context, q querier, name string) (string, error) {
	var version int
	if err := q.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return "", fmt.Errorf("read the server's version: %w", err)
	}
	var d string
	if err := q.QueryRow(ctx, publicationDigestSQL(version >= 150000), name).Scan(&d); err != nil {
		return "", fmt.Errorf("read publication %s: %w", name, err)
	}
	return d, nil
}
