package pgsource

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// CollectionReport is what Check found out about one collection without reading a row
// of it.
type CollectionReport struct {
	// Collection is the collection's name.
	Collection string
	// Source says where the rows come from: "table public.t" (or "partitioned table",
	// "view", "materialized view", "foreign table" when the relation is one), or "query".
	Source string
	// Exists is true when the table exists, or when the query is valid SQL whose
	// columns Postgres could describe.
	Exists bool
	// Key is the key's columns, configured or inferred; nil when neither.
	Key []string
	// KeyInferred is true when Key was inferred from the table (none was configured).
	KeyInferred bool
	// KeyUnique is true when Postgres itself guarantees that Key is unique and never
	// NULL: it is the primary key, or a unique index (valid, without WHERE or
	// expressions) is over exactly its columns and they are all NOT NULL. Otherwise
	// the sync finds duplicates and NULLs as it reads, and fails on the first.
	KeyUnique bool
	// KeyGuarantee says, for people, why Key is or is not known to be unique.
	KeyGuarantee string
	// EstimatedRows is Postgres' estimate of the row count (pg_class.reltuples, summed
	// over the partitions of a partitioned table); -1 when unknown: a query, a view, or
	// a table never vacuumed or analyzed.
	EstimatedRows int64
	// SizeBytes is the table's size on disk with its indexes and TOAST
	// (pg_total_relation_size, summed over partitions); -1 when unknown.
	SizeBytes int64
	// Indexes are the collection's declared indexes, in configured order: whether each
	// field exists and can be indexed, and the index's estimated size.
	Indexes []IndexReport `json:",omitempty"`
	// Problems are what would make a sync fail, each a sentence naming the collection;
	// empty when nothing was found.
	Problems []string
}

// OK reports whether Check found no problem with the collection.
func (r CollectionReport) OK() bool { return len(r.Problems) == 0 }

// Check reports on every collection, in configured order, without reading a row: does
// the table exist (is the query valid), what is the key (configured or inferred), is
// it provably unique and NOT NULL, how large is the table, for each declared index
// whether its fields exist and can be indexed and its estimated size, and every
// problem found (a missing table, key column, index field or privilege, a key that
// cannot be inferred, a field whose type cannot be indexed, a query that does not
// parse, a statement the sync would run that Postgres rejects).
//
// It writes nothing: its session is read only (default_transaction_read_only), the
// catalog is read, and statements are only described (parsed and analyzed, as PREPARE
// does), never executed. The error is for not being able to check at all (Postgres
// unreachable); what is wrong with a collection is in its report.
func (s *Source) Check(ctx context.Context) ([]CollectionReport, error) {
	cfg := s.cfg.Copy()
	cfg.RuntimeParams = maps.Clone(s.cfg.RuntimeParams)
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, s.connectError(err)
	}
	defer closeConn(ctx, conn)
	out := make([]CollectionReport, 0, len(s.collections))
	for _, c := range s.collections {
		r := CollectionReport{Collection: c.Name, Key: c.keyColumns(), EstimatedRows: -1, SizeBytes: -1}
		var err error
		if c.Table != "" {
			err = checkTable(ctx, conn, c, &r)
		} else {
			err = checkQuery(ctx, conn, c, &r)
		}
		if err == nil {
			err = s.checkIndexes(ctx, conn, c, &r)
		}
		if err != nil {
			return nil, fmt.Errorf("collection %s: %w", c.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// problem adds a problem naming the collection.
func (r *CollectionReport) problem(format string, args ...any) {
	r.Problems = append(r.Problems, "collection "+r.Collection+": "+fmt.Sprintf(format, args...))
}

const notProvable = "not provable: duplicates and NULLs will be checked during the sync"

func checkTable(ctx context.Context, conn *pgx.Conn, c Collection, r *CollectionReport) error {
	r.Source = "table " + c.Table
	rel, err := lookupRelation(ctx, conn, c)
	if errors.Is(err, errNoRelation) {
		r.problem("table %s does not exist (or is not visible to this user)", c.Table)
		if r.Key == nil {
			r.KeyGuarantee = "unknown: no key is configured and the table to infer it from does not exist"
		} else {
			r.KeyGuarantee = notProvable
		}
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) { // refused, not failed: no USAGE on the table's schema
		r.problem("%v", err)
		return nil
	}
	if err != nil {
		return err
	}
	r.Exists = true
	r.Source = rel.kindName() + " " + c.Table

	var readable bool
	if err := conn.QueryRow(ctx, `SELECT has_table_privilege($1::oid, 'SELECT') OR NOT EXISTS (
			SELECT FROM pg_attribute WHERE attrelid = $1::oid AND attnum > 0 AND NOT attisdropped
			AND NOT has_column_privilege($1::oid, attnum, 'SELECT'))`, rel.oid).Scan(&readable); err != nil {
		return fmt.Errorf("read privileges: %w", err)
	}
	if !readable {
		r.problem("permission denied: this user may not read every column of %s %s", rel.kindName(), c.Table)
	}

	if r.Key == nil {
		key, err := rel.inferKey(c)
		if err != nil {
			r.problem("%s", withoutCollection(err))
			r.KeyGuarantee = "unknown: no key is configured and none can be inferred"
		} else {
			r.Key, r.KeyInferred = key, true
		}
	}
	if r.Key != nil {
		var missing []string
		for _, k := range r.Key {
			if !slices.ContainsFunc(rel.columns, func(col column) bool { return col.name == k }) {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			names := make([]string, len(rel.columns))
			for i, col := range rel.columns {
				names[i] = col.name
			}
			r.problem("key %s not in %s %s (its columns: %s)", describeMissing(missing), rel.kindName(), c.Table, strings.Join(names, ", "))
			r.KeyGuarantee = notProvable
		} else {
			r.KeyUnique, r.KeyGuarantee = rel.guarantee(r.Key)
		}
	}

	if err := rel.estimate(ctx, conn, r); err != nil {
		return err
	}
	if r.OK() {
		describeSync(ctx, conn, c, r)
	}
	return nil
}

// describeMissing names missing key columns: "column x", "columns x, y".
func describeMissing(cols []string) string {
	if len(cols) == 1 {
		return "column " + cols[0] + " is"
	}
	return "columns " + strings.Join(cols, ", ") + " are"
}

// guarantee says whether Postgres guarantees that key is unique and NOT NULL.
func (rel relation) guarantee(key []string) (bool, string) {
	want := slices.Sorted(slices.Values(key))
	for _, u := range rel.uniques {
		if !slices.Equal(want, slices.Sorted(slices.Values(u.columns))) {
			continue
		}
		if u.primary {
			return true, "primary key " + u.name
		}
		if u.notNull {
			return true, "unique index " + u.name + " over NOT NULL columns"
		}
	}
	return false, notProvable
}

// estimate fills in the row estimate and size of a table, materialized view or
// partitioned table (summed over its leaf partitions).
func (rel relation) estimate(ctx context.Context, conn *pgx.Conn, r *CollectionReport) error {
	var q string
	switch rel.kind {
	case relTable, relMatView:
		q = `SELECT reltuples::float8, pg_total_relation_size(oid) FROM pg_class WHERE oid = $1`
	case relPartitioned:
		q = `SELECT CASE WHEN bool_and(c.reltuples >= 0) THEN sum(c.reltuples)::float8 ELSE -1 END,
			coalesce(sum(pg_total_relation_size(c.oid)), 0)
			FROM pg_partition_tree($1) p JOIN pg_class c ON c.oid = p.relid WHERE p.isleaf`
	default:
		return nil
	}
	var rows *float64
	var size *int64
	if err := conn.QueryRow(ctx, q, rel.oid).Scan(&rows, &size); err != nil {
		return fmt.Errorf("estimate size: %w", err)
	}
	if rows != nil && *rows >= 0 {
		r.EstimatedRows = int64(*rows)
	}
	if size != nil {
		r.SizeBytes = *size
	}
	return nil
}

func checkQuery(ctx context.Context, conn *pgx.Conn, c Collection, r *CollectionReport) error {
	r.Source = "query"
	r.KeyGuarantee = notProvable
	sd, err := conn.PgConn().Prepare(ctx, "", "SELECT * FROM "+rowsFromSQL(c), nil)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		r.problem("the query is not valid: %v", err)
		return nil
	}
	r.Exists = true
	var missing, names []string
	for _, f := range sd.Fields {
		names = append(names, f.Name)
	}
	for _, k := range r.Key {
		if !slices.Contains(names, k) {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		r.problem("key %s not among the query's columns (%s)", describeMissing(missing), strings.Join(names, ", "))
		return nil
	}
	describeSync(ctx, conn, c, r)
	return nil
}

// describeSync has Postgres describe the statement a sync runs, which catches what the
// catalog alone does not (an ambiguous key column, a key type without ordering).
func describeSync(ctx context.Context, conn *pgx.Conn, c Collection, r *CollectionReport) {
	if _, err := conn.PgConn().Prepare(ctx, "", selectSQL(c, r.Key, false, 0, 1), nil); err != nil && ctx.Err() == nil {
		r.problem("the statement the sync runs fails: %v", err)
	}
}
