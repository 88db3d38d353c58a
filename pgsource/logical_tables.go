package pgsource

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The tables watch.mode logical publishes, and their replica identities: a table
// collection's changes arrive as its table's (a partitioned table's as its root's),
// keyed by the replica identity's columns in the old row of an UPDATE or DELETE; a
// query's or a view's arrive as the tables it reads.

// LogicalTables tells the stream consumer how a pgoutput relation maps to the
// collections.
type LogicalTables struct {
	// Collections are the table collections whose changes arrive as their rows: those
	// naming a table, or a partitioned table, that is itself published. In configured
	// order.
	Collections []LogicalCollection
	// Published are the published relations that the collections read, by oid: a
	// change to one may change each collection it names, which the consumer reads
	// again (a query's or a view's, a partition's, and the table collections').
	Published []PublishedRelation
	// Altered is the WAL position just after PrepareLogical changed the publication
	// (0 when it changed nothing): a table joins a publication from there on, and
	// what it committed before is on no stream.
	Altered uint64
}

// PublishedRelation is a relation of the publication that collections read.
type PublishedRelation struct {
	// OID is the relation's oid, the RelationID of pgoutput's messages.
	OID uint32
	// Name is its quoted, schema-qualified name.
	Name string
	// Collections name the collections that read it (or, for a partitioned table, a
	// partition of it), sorted.
	Collections []string
}

// LogicalCollection maps a table collection to the relation its changes arrive as.
type LogicalCollection struct {
	// Collection is the collection's name.
	Collection string
	// Relation is the published relation: the table, or the partitioned table (whose
	// partitions' changes are published as its own).
	Relation PublishedRelation
	// Columns are the relation's columns in the order pgoutput's Relation message,
	// and every tuple of it, lists them: by attribute number, without dropped and
	// generated columns.
	Columns []string
	// Key is the collection's key (configured, or inferred as the sync infers it).
	Key []string
	// KeyPositions[i] is the index in Columns (and in a tuple's columns) of Key[i].
	// Every key column is in the replica identity of the table and of each of its
	// partitions, so the old tuple of an UPDATE or DELETE carries it.
	KeyPositions []int
}

// logicalRel is a table logical mode publishes (a root: a table, or the top of a
// partition tree), or one whose writers it must not fail (a root's partitions).
type logicalRel struct {
	oid     uint32
	name    string // quoted, schema-qualified
	kind    relKind
	owned   bool // the role owns it (may publish it)
	root    *logicalRel
	columns []string // pgoutput's columns (roots)
	// identity are the replica identity's columns; nil when it has none (NOTHING,
	// DEFAULT without a primary key, USING INDEX of an index that is gone).
	identity     []string
	identityDesc string
	candidates   []identityIndex // unique indexes REPLICA IDENTITY USING INDEX accepts
	collections  map[string]bool
	keys         []collectionKey // the table collections keyed on this table (leaves)
}

// The replica identities, pg_class.relreplident (NOTHING is the fourth).
const (
	identityFull       = "f"
	identityDefault    = "d"
	identityUsingIndex = "i"
)

type identityIndex struct {
	name    string // quoted
	primary bool
	columns []string
}

type collectionKey struct {
	collection string
	key        []string
}

// logicalRelations are the relations the collections read, as logical mode sees them.
type logicalRelations struct {
	roots  []*logicalRel // publishable, by name
	leaves []*logicalRel // the tables under the roots (a plain root is its own), by name
}

// relations finds the tables the collections read and their roots, adds a problem for
// each one logical replication cannot carry, and fills p.tables.
func (p *logicalPlan) relations(ctx context.Context, tx pgx.Tx, collections []Collection) (logicalRelations, error) {
	var rs logicalRelations
	roots := map[uint32]*logicalRel{}
	for _, c := range collections {
		oids, err := watchedTables(ctx, tx.Conn(), []Collection{c})
		if err != nil {
			return rs, err
		}
		rows, err := tx.Query(ctx, `SELECT DISTINCT r.oid, format('%I.%I', n.nspname, r.relname), r.relkind::text,
				pg_has_role(r.relowner, 'USAGE'),
				CASE WHEN r.oid < 16384 OR n.nspname IN ('pg_catalog', 'information_schema') THEN 'system catalog'
					WHEN r.relpersistence <> 'p' THEN 'unlogged or temporary table'
					WHEN r.relkind NOT IN ('r', 'p') THEN 'relation of kind ' || r.relkind::text ELSE '' END
			FROM unnest($1::oid[]) AS w JOIN pg_class r ON r.oid = coalesce(pg_partition_root(w), w)
			JOIN pg_namespace n ON n.oid = r.relnamespace`, oids)
		if err != nil {
			return rs, fmt.Errorf("collection %s: read its tables: %w", c.Name, err)
		}
		for rows.Next() {
			r := &logicalRel{collections: map[string]bool{}}
			var unpublishable string
			if err := rows.Scan(&r.oid, &r.name, &r.kind, &r.owned, &unpublishable); err != nil {
				rows.Close()
				return rs, err
			}
			if unpublishable != "" {
				if k, ok := relkinds[r.kind]; ok && !r.kind.isTable() {
					unpublishable = k
				}
				p.problem("collection %s reads %s, a %s, whose changes logical replication does not carry: use watch.mode stats",
					c.Name, r.name, unpublishable)
				continue
			}
			if have, ok := roots[r.oid]; ok {
				r = have
			} else {
				roots[r.oid] = r
				rs.roots = append(rs.roots, r)
			}
			r.collections[c.Name] = true
		}
		if err := rows.Err(); err != nil {
			return rs, fmt.Errorf("collection %s: read its tables: %w", c.Name, err)
		}
	}
	slices.SortFunc(rs.roots, func(a, b *logicalRel) int { return strings.Compare(a.name, b.name) })
	for _, r := range rs.roots {
		if err := readColumns(ctx, tx, r); err != nil {
			return rs, err
		}
		leaves, err := readLeaves(ctx, tx, r)
		if err != nil {
			return rs, err
		}
		rs.leaves = append(rs.leaves, leaves...)
		bad, err := uncarriedPartitions(ctx, tx, []uint32{r.oid})
		if err != nil {
			return rs, err
		}
		for _, b := range bad {
			p.problem("%s (read by %s) has %s: logical replication does not carry its changes; "+
				"make it a logged, local table, or use watch.mode stats", r.name, strings.Join(slices.Sorted(maps.Keys(r.collections)), ", "), b)
		}
		p.tables.Published = append(p.tables.Published, PublishedRelation{OID: r.oid, Name: r.name,
			Collections: slices.Sorted(maps.Keys(r.collections))})
	}
	slices.SortFunc(rs.leaves, func(a, b *logicalRel) int { return strings.Compare(a.name, b.name) })
	slices.SortFunc(p.tables.Published, func(a, b PublishedRelation) int { return int(a.OID) - int(b.OID) })
	return rs, p.keyed(ctx, tx, collections, roots, rs.leaves)
}

// keyed maps each table collection whose table is a published root to it, with its
// key's positions, and notes the key on the root's tables for identities.
func (p *logicalPlan) keyed(ctx context.Context, tx pgx.Tx, collections []Collection, roots map[uint32]*logicalRel, leaves []*logicalRel) error {
	keys, err := resolveKeys(ctx, tx, collections)
	if err != nil {
		return err
	}
	for _, c := range collections {
		if c.Table == "" {
			continue
		}
		rel, err := lookupRelation(ctx, tx, c)
		if err != nil {
			return fmt.Errorf("collection %s: %w", c.Name, err)
		}
		root, ok := roots[rel.oid]
		if !ok { // a view, or a partition: its changes arrive as another relation's
			continue
		}
		lc := LogicalCollection{Collection: c.Name, Columns: root.columns, Key: keys[c.Name],
			Relation: PublishedRelation{OID: root.oid, Name: root.name, Collections: slices.Sorted(maps.Keys(root.collections))}}
		for _, k := range lc.Key {
			i := slices.Index(root.columns, k)
			if i < 0 {
				p.problem("collection %s: key column %s of %s is a generated column, which logical replication does not send: "+
					"key the collection on stored columns, or use watch.mode stats", c.Name, k, root.name)
			}
			lc.KeyPositions = append(lc.KeyPositions, i)
		}
		p.tables.Collections = append(p.tables.Collections, lc)
		for _, l := range leaves {
			if l.root == root {
				l.keys = append(l.keys, collectionKey{c.Name, lc.Key})
			}
		}
	}
	return nil
}

// readColumns reads the columns pgoutput sends of r: by number, without dropped and
// generated ones.
func readColumns(ctx context.Context, q querier, r *logicalRel) error {
	rows, err := q.Query(ctx, `SELECT attname::text FROM pg_attribute WHERE attrelid = $1 AND attnum > 0
		AND NOT attisdropped AND attgenerated = '' ORDER BY attnum`, r.oid)
	if err == nil {
		r.columns, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return fmt.Errorf("read the columns of %s: %w", r.name, err)
	}
	return nil
}

// uncarriedPartitions names the partitions of the roots whose changes logical
// replication does not carry: unlogged and foreign tables (the roots themselves are
// checked apart).
func uncarriedPartitions(ctx context.Context, q querier, roots []uint32) ([]string, error) {
	var bad []string
	err := q.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT format('%s %I.%I',
			CASE WHEN c.relkind = 'f' THEN 'the foreign partition' ELSE 'the unlogged partition' END, n.nspname, c.relname)), '{}')
		FROM unnest($1::oid[]) AS r(oid), LATERAL pg_partition_tree(r.oid) AS t
		JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE t.relid <> r.oid AND (c.relkind = 'f' OR c.relkind = 'r' AND c.relpersistence <> 'p')`, roots).Scan(&bad)
	if err != nil {
		return nil, fmt.Errorf("read the partitions of the published tables: %w", err)
	}
	slices.Sort(bad)
	return bad, nil
}

// readLeaves reads the tables that hold root's rows (the root itself, or its
// partitions) with their replica identities and the unique indexes that could be one.
func readLeaves(ctx context.Context, q querier, root *logicalRel) ([]*logicalRel, error) {
	rows, err := q.Query(ctx, `SELECT c.oid, format('%I.%I', n.nspname, c.relname), c.relreplident::text,
			array(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE (c.oid = $1 OR c.oid IN (SELECT relid FROM pg_partition_tree($1))) AND c.relkind = 'r'
		ORDER BY 2`, root.oid)
	if err != nil {
		return nil, fmt.Errorf("read the partitions of %s: %w", root.name, err)
	}
	var leaves []*logicalRel
	var idents, allColumns = map[*logicalRel]string{}, map[*logicalRel][]string{}
	for rows.Next() {
		l := &logicalRel{root: root}
		var ident string
		var cols []string
		if err := rows.Scan(&l.oid, &l.name, &ident, &cols); err != nil {
			rows.Close()
			return nil, err
		}
		leaves = append(leaves, l)
		idents[l], allColumns[l] = ident, cols
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the partitions of %s: %w", root.name, err)
	}
	for _, l := range leaves {
		// An index's key columns are indkey[0 .. indnkeyatts-1]; an expression's is 0.
		rows, err := q.Query(ctx, `SELECT quote_ident(ic.relname), i.indisprimary, i.indisreplident,
				i.indisvalid AND i.indimmediate AND i.indpred IS NULL AND i.indexprs IS NULL AND NOT EXISTS (
					SELECT FROM generate_series(0, i.indnkeyatts - 1) AS k JOIN pg_attribute a
					ON a.attrelid = i.indrelid AND a.attnum = i.indkey[k] WHERE NOT a.attnotnull),
				array(SELECT a.attname::text FROM generate_series(0, i.indnkeyatts - 1) AS k
					JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[k] ORDER BY k)
			FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
			WHERE i.indrelid = $1 AND i.indisunique ORDER BY i.indisprimary DESC, ic.relname`, l.oid)
		if err != nil {
			return nil, fmt.Errorf("read the indexes of %s: %w", l.name, err)
		}
		var primary, replident *identityIndex
		for rows.Next() {
			var ix identityIndex
			var isReplident, usable bool
			if err := rows.Scan(&ix.name, &ix.primary, &isReplident, &usable, &ix.columns); err != nil {
				rows.Close()
				return nil, err
			}
			if usable {
				l.candidates = append(l.candidates, ix)
			}
			if ix.primary {
				primary = &ix
			}
			if isReplident {
				replident = &ix
			}
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("read the indexes of %s: %w", l.name, err)
		}
		switch ident := idents[l]; {
		case ident == identityFull:
			l.identity, l.identityDesc = allColumns[l], "FULL"
		case ident == identityDefault && primary != nil:
			l.identity, l.identityDesc = primary.columns, fmt.Sprintf("DEFAULT: its primary key %s (%s)", primary.name, strings.Join(primary.columns, ", "))
		case ident == identityDefault:
			l.identityDesc = "DEFAULT, and it has no primary key"
		case ident == identityUsingIndex && replident != nil:
			l.identity, l.identityDesc = replident.columns, fmt.Sprintf("USING INDEX %s (%s)", replident.name, strings.Join(replident.columns, ", "))
		case ident == identityUsingIndex:
			l.identityDesc = "USING INDEX of an index that no longer qualifies"
		default:
			l.identityDesc = "NOTHING"
		}
	}
	return leaves, nil
}

// identities adds a problem for each published table whose writers logical mode
// would fail (it has no replica identity), and for each table collection whose key is
// not in its tables' replica identities.
func (p *logicalPlan) identities(rs logicalRelations) {
	for _, l := range rs.leaves {
		what := "table " + l.name
		if l.root.oid != l.oid {
			what = "partition " + l.name + " of " + l.root.name
		}
		if l.identity == nil {
			var key []string
			if len(l.keys) > 0 {
				key = l.keys[0].key
			}
			p.problem("%s has no replica identity (REPLICA IDENTITY %s), so once it is published Postgres would reject "+
				"every UPDATE and DELETE of it; the syncer does not change how a table logs its rows: %s", what, l.identityDesc, l.identityFix(key))
			continue
		}
		for _, k := range l.keys {
			if !subset(k.key, l.identity) {
				p.problem("collection %s: its key (%s) is not in the replica identity of %s (REPLICA IDENTITY %s), so an UPDATE's "+
					"or DELETE's old row would not carry it: %s", k.collection, strings.Join(k.key, ", "), what, l.identityDesc, l.identityFix(k.key))
			}
		}
	}
}

// identityFix is the SQL a DBA runs to give l a replica identity holding key (nil:
// any).
func (l *logicalRel) identityFix(key []string) string {
	full := fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL; (logs every column of the old row: more WAL)", l.name)
	var pick *identityIndex
	for i, ix := range l.candidates {
		if key == nil || subset(ix.columns, key) && subset(key, ix.columns) {
			pick = &l.candidates[i]
			break
		}
		if pick == nil && subset(key, ix.columns) {
			pick = &l.candidates[i]
		}
	}
	switch {
	case pick == nil && key == nil:
		return "a DBA adds a primary key, or a unique index over NOT NULL columns and names it with ALTER TABLE " +
			l.name + " REPLICA IDENTITY USING INDEX <index>;, or runs " + full
	case pick == nil:
		return "a DBA adds a primary key on (" + strings.Join(key, ", ") + "), or a unique index over them (NOT NULL) and names it " +
			"with ALTER TABLE " + l.name + " REPLICA IDENTITY USING INDEX <index>;, or runs " + full
	case pick.primary:
		return fmt.Sprintf("a DBA runs ALTER TABLE %s REPLICA IDENTITY DEFAULT; (its primary key %s), or %s", l.name, pick.name, full)
	}
	return fmt.Sprintf("a DBA runs ALTER TABLE %s REPLICA IDENTITY USING INDEX %s; (its unique index on (%s)), or %s",
		l.name, pick.name, strings.Join(pick.columns, ", "), full)
}

// subset reports whether every one of a is in b.
func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
