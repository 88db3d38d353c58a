package pgsource

import (
	"bytes"
	"container/heap"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// Reading a table in id byte order without a sort. A layered version is written in
// the store's order, its ids' bytes, which for an integer key is not the number's
// order ("10" before "9"), so Postgres sorts every row first: at 5,000,000 rows that
// is gigabytes of temporary files, and no row reaches the store until the sort is
// done. Among the ids of as many digits and the same sign, though, byte order is the
// number's order (ascending for the non-negative, descending for the negative), which
// an index scan streams. So a large table keyed by an integer column is read as one
// index scan per digit count, each on its own connection in the same exported snapshot,
// merged by the ids' bytes: rows reach the store from the first, and nothing is sorted.

// maxDigitScans bounds the index scans of one merged read (connections held at once):
// ids of more digit counts and signs than that are sorted by Postgres instead.
const maxDigitScans = 10

// rowReader is what readRows needs of a query's result: pgx.Rows, or a merge of them.
type rowReader interface {
	Next() bool
	RawValues() [][]byte
	Err() error
	Close()
}

// idRange is the ids of one digit count and sign, lo..hi, and the direction in which
// the number's order is their byte order.
type idRange struct {
	lo, hi int64
	desc   bool
}

// digitRanges returns the ranges of the ids in first..last, one per digit count and
// sign: non-negative ids of d digits are 10^(d-1)..10^d-1 (0..9 for one digit),
// negative ones -(10^d-1)..-10^(d-1), each clipped to first..last, least digits
// first.
func digitRanges(first, last int64) []idRange {
	var out []idRange
	add := func(lo, hi int64, desc bool) {
		if lo, hi = max(lo, first), min(hi, last); lo <= hi {
			out = append(out, idRange{lo, hi, desc})
		}
	}
	add(0, 9, false)
	add(-9, -1, true)
	for lo := int64(10); ; lo *= 10 {
		if lo > math.MaxInt64/10 { // 19 digits, the most an int8 has
			add(lo, math.MaxInt64, false)
			add(math.MinInt64, -lo, true)
			return out
		}
		add(lo, lo*10-1, false)
		add(-(lo*10 - 1), -lo, true)
	}
}

// integerTypes are the key column types whose text is their decimal digits.
var integerTypes = map[uint32]bool{20: true, 21: true, 23: true} // int8, int2, int4

// digitScans returns the ranges to read a collection in by index scans, or nil when
// Postgres is to sort it: unless it is a table of at least PartitionMinRows rows whose
// key is one integer column Postgres guarantees unique and NOT NULL (so that the
// ranges cover every row, and the scans follow its index), whose ids are in at most
// maxDigitScans ranges.
func (r *snap) digitScans(ctx context.Context, cr *collectionRead) ([]idRange, error) {
	if n := cr.rows; !cr.counted || n < r.src.PartitionMinRows || n == 0 {
		return nil, nil
	}
	return r.keyRanges(ctx, cr)
}

// keyRanges returns the ranges to read a collection in by index scans whatever its
// size, or nil: as digitScans says.
func (r *snap) keyRanges(ctx context.Context, cr *collectionRead) ([]idRange, error) {
	c, key := cr.c, cr.key
	if c.Table == "" || len(key) != 1 {
		return nil, nil
	}
	rel, ok, err := r.countable(ctx, cr)
	if err != nil || !ok {
		return nil, err
	}
	if col, found := rel.column(key[0]); !found || !integerTypes[col.typ] {
		return nil, nil
	}
	// Which ranges hold an id: an index probe each, in one statement.
	all := digitRanges(math.MinInt64, math.MaxInt64)
	los, his := make([]int64, len(all)), make([]int64, len(all))
	for i, rg := range all {
		los[i], his[i] = rg.lo, rg.hi
	}
	rows, err := r.tx.Query(ctx, heldRangesSQL(c, key[0]), los, his)
	if err != nil {
		return nil, fmt.Errorf("read the key ranges of %s: %w", describe(c), err)
	}
	held, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("read the key ranges of %s: %w", describe(c), err)
	}
	if len(held) > maxDigitScans {
		return nil, nil
	}
	ranges := make([]idRange, len(held))
	for i, n := range held {
		ranges[i] = all[n]
	}
	return ranges, nil
}

// idQuery is the statement SELECT <id>, <sel> FROM <from> of one collection: sel and
// from name the row rowAlias, and args are $1… of sel.
type idQuery struct {
	cr        *collectionRead
	sel, from string
	args      []any
}

func (q idQuery) sql() string {
	return "SELECT " + keySQL(q.cr.key) + ", " + q.sel + " FROM " + q.from
}

// sortedSQL is q sorted by Postgres in id byte order.
func (q idQuery) sortedSQL() string {
	return q.sql() + " ORDER BY " + keySQL(q.cr.key) + ` COLLATE "C"`
}

// rangeSQL is q over the ids of one range of its one integer key column, lo and hi
// the parameters after q's, in the range's byte order: the index's order, ascending
// or descending.
func (q idQuery) rangeSQL(desc bool) string {
	col := rowAlias + "." + pgx.Identifier{q.cr.key[0]}.Sanitize()
	stmt := q.sql() + " WHERE " + col + " BETWEEN $" + strconv.Itoa(len(q.args)+1) + "::int8 AND $" + strconv.Itoa(len(q.args)+2) + "::int8 ORDER BY " + col
	if desc {
		stmt += " DESC"
	}
	return stmt
}

// heldRangesSQL reads which of the ranges $1[i]..$2[i] of the table collection c's
// integer key column col hold an id (i - 1, from 0): an index probe each.
func heldRangesSQL(c Collection, col string) string {
	return "SELECT n - 1 FROM unnest($1::int8[], $2::int8[]) WITH ORDINALITY AS r(lo, hi, n)" +
		" WHERE EXISTS (SELECT FROM " + tableFromSQL(c) + " WHERE " + rowAlias + "." + pgx.Identifier{col}.Sanitize() + " BETWEEN r.lo AND r.hi)"
}

// inIDOrder runs q, its rows in id byte order: merged from digitScans' index scans
// when it returns ranges and the connections for them can be had, else sorted by
// Postgres.
func (r *snap) inIDOrder(ctx context.Context, q idQuery) (rowReader, error) {
	ranges, err := r.digitScans(ctx, q.cr)
	if err != nil {
		return nil, err
	}
	if len(ranges) > 1 {
		m, err := r.mergedScans(ctx, q, ranges)
		if m != nil || err != nil {
			return m, err
		}
	}
	if len(ranges) == 1 { // ids of one digit count and sign: the index's order is theirs
		return scanRange(ctx, r.tx, q, ranges[0])
	}
	rows, err := r.tx.Query(ctx, q.sortedSQL(), q.args...)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", describe(q.cr.c), err)
	}
	return rows, nil
}

// mergedScans starts one scan per range, the first on the snapshot's transaction and
// the others on connections that import its snapshot, and merges them. It returns
// nil and no error when the extra connections cannot be had, or would wait for a
// lock: a DDL statement queued behind the snapshot's transaction (which holds the
// table's lock already) is granted the lock before them, and would wait for the
// transaction to end, while the transaction waits for them. The table is sorted by
// Postgres instead.
func (r *snap) mergedScans(ctx context.Context, q idQuery, ranges []idRange) (rowReader, error) {
	m, err := r.importedScans(ctx, q, ranges[1:])
	if m == nil || err != nil {
		return nil, err
	}
	rows, err := scanRange(ctx, r.tx, q, ranges[0])
	if err != nil {
		m.Close()
		return nil, err
	}
	m.add(rows)
	return m, nil
}

// importedScans starts one scan per range, each on a connection that imports the
// snapshot, and merges them; nil and no error as mergedScans says. Closed in the
// middle, they are not read to their ends: their connections are closed.
func (r *snap) importedScans(ctx context.Context, q idQuery, ranges []idRange) (*mergedRows, error) {
	if r.exported == "" {
		if err := r.tx.QueryRow(ctx, exportSnapshotSQL).Scan(&r.exported); err != nil {
			return nil, fmt.Errorf("export snapshot: %w", err)
		}
	}
	m := &mergedRows{}
	for _, rg := range ranges {
		conn, err := r.importSnapshot(ctx)
		if err == nil {
			m.conns = append(m.conns, conn)
			var rows pgx.Rows
			if rows, err = scanRange(ctx, conn, q, rg); err == nil {
				m.add(rows) // its first row: a lock wait has ended by then
				err = m.err
			}
		}
		if err != nil {
			m.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, nil
		}
	}
	return m, nil
}

// scanRange starts the scan of one range of ids of q on on, in the range's byte
// order.
func scanRange(ctx context.Context, on querier, q idQuery, rg idRange) (pgx.Rows, error) {
	rows, err := on.Query(ctx, q.rangeSQL(rg.desc), slices.Concat(q.args, []any{rg.lo, rg.hi})...)
	if err != nil {
		return nil, fmt.Errorf("query %s (ids %d..%d): %w", describe(q.cr.c), rg.lo, rg.hi, err)
	}
	return rows, nil
}

// mergedRows merges results each in id byte order into one, by their first column's
// bytes. Once Next has been called, the least result's row is the current one: its
// values RawValues returns, valid until Next.
type mergedRows struct {
	heads   rowHeap     // the results with a row, least id first
	started bool        // heads[0]'s row has been returned
	all     []pgx.Rows  // every result, to close
	conns   []*pgx.Conn // the connections of all but the first result, closed with them
	err     error
}

// add moves rows to its first row and among the heads, or records its error.
func (m *mergedRows) add(rows pgx.Rows) {
	m.all = append(m.all, rows)
	if rows.Next() {
		heap.Push(&m.heads, rows)
	} else {
		m.ended(rows)
	}
}

// ended records the error, if any, of a result that has no more rows.
func (m *mergedRows) ended(rows pgx.Rows) {
	if err := rows.Err(); err != nil && m.err == nil {
		m.err = err
	}
}

// Next moves the current result on and puts it back in its place among the others:
// one sift down the heap a row.
func (m *mergedRows) Next() bool {
	if m.started && len(m.heads) > 0 {
		if top := m.heads[0]; top.Next() {
			heap.Fix(&m.heads, 0)
		} else {
			m.ended(top)
			heap.Pop(&m.heads)
		}
	}
	m.started = true
	return m.err == nil && len(m.heads) > 0
}

func (m *mergedRows) RawValues() [][]byte { return m.heads[0].RawValues() }

func (m *mergedRows) Err() error { return m.err }

// Close closes the extra connections first, so that their results are not read to
// their ends, then the results.
func (m *mergedRows) Close() {
	for _, c := range m.conns {
		_ = closeConn(context.Background(), c)
	}
	for _, rows := range m.all {
		rows.Close()
	}
	m.all, m.conns, m.heads = nil, nil, nil
}

// rowHeap orders results by their current row's first column, as bytes.
type rowHeap []pgx.Rows

func (h rowHeap) Len() int { return len(h) }
func (h rowHeap) Less(i, j int) bool {
	return bytes.Compare(h[i].RawValues()[0], h[j].RawValues()[0]) < 0
}
func (h rowHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *rowHeap) Push(x any)   { *h = append(*h, x.(pgx.Rows)) }
func (h *rowHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
