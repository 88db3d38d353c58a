package pgsource

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/snapshot"
)

// Finding what changed without rendering unchanged rows (docs/design.md, "Layered
// versions"). A visible row version whose xmin precedes the xmin of an earlier
// snapshot was committed before that snapshot was taken, so that snapshot saw this
// very row version: the version read from it holds its document already. Only rows
// whose xmin falls at or after the earlier snapshot's xmin are turned into JSON (and
// then compared by content, since a row rewritten with the same values is no change).
// Frozen rows keep their raw xmin; a coincidence in the 32-bit window only renders a
// row needlessly, it never hides one. Subtransaction xids are above their top-level
// xid, so savepoints are covered.

var (
	_ snapshot.DeltaSnapshot  = (*snap)(nil)
	_ snapshot.ChangedScanner = (*snap)(nil)
)

// systemID names the cluster, database and timeline, "<system identifier>:<database
// oid>:<timeline>", or "" when pg_control_system() or pg_control_checkpoint() is not
// granted to the role.
func systemID(ctx context.Context, tx pgx.Tx) (string, error) {
	var ok bool
	if err := tx.QueryRow(ctx, controlGrantedSQL).Scan(&ok); err != nil {
		return "", err
	}
	if !ok {
		return "", nil
	}
	// The timeline too: a promoted standby (after an asynchronous failover that lost
	// transactions) or a point-in-time restore keeps the system identifier but hands
	// out transaction ids again from below what the parent saw.
	var id string
	err := tx.QueryRow(ctx, systemIDSQL).Scan(&id)
	if strings.HasSuffix(id, ":?") {
		return "", err // no timeline: the identity is not enough
	}
	return id, err
}

// controlGrantedSQL reads whether the role may call pg_control_system().
const controlGrantedSQL = `SELECT has_function_privilege('pg_control_system()', 'execute')`

// systemIDSQL reads "<system identifier>:<database oid>:<timeline>", the timeline
// "?" when pg_control_checkpoint() is not granted.
const systemIDSQL = `SELECT (SELECT system_identifier FROM pg_control_system())::text || ':' ||
	(SELECT oid FROM pg_database WHERE datname = current_database())::text || ':' ||
	CASE WHEN has_function_privilege('pg_control_checkpoint()', 'execute')
		THEN (SELECT timeline_id FROM pg_control_checkpoint())::text ELSE '?' END`

// snapshotBounds parses pg_current_snapshot()'s "xmin:xmax:xip,…".
func snapshotBounds(s string) (xmin, xmax uint64, err error) {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) < 2 {
		return 0, 0, fmt.Errorf("%w snapshot %q", snapshot.ErrInvalid, s)
	}
	if xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("%w snapshot %q", snapshot.ErrInvalid, s)
	}
	if xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("%w snapshot %q", snapshot.ErrInvalid, s)
	}
	return xmin, xmax, nil
}

// ScanSince streams the collection in id byte order; see snapshot.DeltaSnapshot.
func (r *snap) ScanSince(ctx context.Context, collection string, since *snapshot.Position, fn func(snapshot.Document) error) (snapshot.LayerMode, error) {
	cr, err := r.read(collection)
	if err != nil {
		return snapshot.LayerMode{}, err
	}
	c := cr.c
	plan, err := r.changeMode(ctx, cr, since)
	if err != nil {
		return snapshot.LayerMode{}, fmt.Errorf("collection %s: %w", collection, err)
	}
	mode := snapshotMode(plan.mode)
	q := idQuery{cr: cr, sel: docSQL, from: rowsFromSQL(c)}
	if plan.mode == readRowVersion {
		// FROM the table itself (not a subquery) so that xmin is there; t.* is the
		// same columns in the same order as SELECT * FROM the table.
		q.sel, q.from, q.args = changedDocSQL, tableFromSQL(c), []any{int64(plan.lo), int64(plan.window)}
	}
	rows, err := r.inIDOrder(ctx, q)
	if err != nil {
		return mode, err
	}
	return mode, readRows(rows, c, cr.key, true, fn)
}

// ScanChanged streams only the rows whose row version is in the window since the
// parent's snapshot, in id byte order; see snapshot.ChangedScanner.
func (r *snap) ScanChanged(ctx context.Context, collection string, since *snapshot.Position, max int64, fn func(snapshot.Document) error) (int64, bool, error) {
	cr, err := r.read(collection)
	if err != nil {
		return 0, false, err
	}
	c, key := cr.c, cr.key
	plan, err := r.changeMode(ctx, cr, since)
	if err != nil || plan.mode != readRowVersion {
		return 0, false, err
	}
	var p changedPass
	passed := cr.pass != nil && since.Same(*cr.pass.since)
	if passed {
		p = *cr.pass
	}
	rel := p.rel // the pass ran on a countable table only
	if !passed {
		var ok bool
		if rel, ok, err = r.countable(ctx, cr); err != nil || !ok {
			return 0, false, err
		}
	}
	// Open counted the rows in this snapshot. The changed ones are found in one scan
	// that stops after max+1, and sorted; the first row says how many there were.
	// When Open's pass counted them too, none or too many cost no scan, and in a
	// plain table whose changed rows sit in few pages the scan probes those pages'
	// ctids alone.
	total := cr.rows
	if !cr.counted { // the stream's keys stood in for a count
		return 0, false, nil
	}
	where, args := changedSQL, []any{int64(plan.lo), int64(plan.window), max + 1}
	if passed {
		switch {
		case p.changed == 0:
			return total, true, nil
		case p.changed > max:
			return total, false, nil
		case rel.kind == relTable && int64(len(p.blocks))*int64(p.maxOffset)*4 <= total:
			where = ctidProbeSQL + " AND " + where
			args = append(args, p.blocks, p.maxOffset)
		}
	}
	rows, err := r.tx.Query(ctx, changedRowsSQL(c, key, where), args...)
	if err != nil {
		return 0, false, fmt.Errorf("query %s: %w", describe(c), err)
	}
	if !rows.Next() {
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, false, fmt.Errorf("query %s: %w", describe(c), err)
		}
		return total, true, nil
	}
	if n, err := strconv.ParseInt(string(rows.RawValues()[2]), 10, 64); err != nil || n > max {
		rows.Close()
		return total, false, err
	}
	return total, true, readRows(&peeked{Rows: rows, first: true}, c, key, true, fn)
}

// changedRowsSQL reads, from the table collection c keyed by key, the id and
// document of at most $3 rows where where holds, in id byte order, each with the
// number of rows read.
func changedRowsSQL(c Collection, key []string, where string) string {
	return "SELECT id, doc, (count(*) OVER ())::text FROM (SELECT " + keySQL(key) + " AS id, " + docSQL + " AS doc FROM " +
		tableFromSQL(c) + " WHERE " + where + " LIMIT $3) AS changed ORDER BY id COLLATE \"C\""
}

// ctidProbeSQL is true for a row at a ctid (block, 1…$5) of the blocks $4: the pages
// a pass found changed rows in, probed alone.
const ctidProbeSQL = rowAlias + ".ctid = ANY (ARRAY(SELECT format('(%s,%s)', b, o)::tid FROM unnest($4::int8[]) AS b, generate_series(1, $5::int) AS o))"

// docSQL is the document of the row rowAlias: its JSON text.
const docSQL = "to_json(" + rowAlias + ".*)::text"

// changedDocSQL is the document of the row rowAlias when its row version is in the
// window [$1, $1+$2) (changedSQL), else NULL.
var changedDocSQL = "CASE WHEN " + changedSQL + " THEN " + docSQL + " END"

// tableFromSQL is the FROM item of a table collection's table, named rowAlias.
func tableFromSQL(c Collection) string {
	return pgx.Identifier(c.tableParts()).Sanitize() + " AS " + rowAlias
}

// rowsFromSQL is the FROM item of a collection's rows (rowsSQL), named rowAlias.
func rowsFromSQL(c Collection) string {
	return "(" + c.rowsSQL() + "\n) AS " + rowAlias
}

// peeked is rows whose first row Next has been called for already.
type peeked struct {
	pgx.Rows
	first bool
}

func (p *peeked) Next() bool {
	if p.first {
		p.first = false
		return true
	}
	return p.Rows.Next()
}

// xminSQL is the raw 32-bit xmin of the row version rowAlias as a bigint, as
// xmin::text::bigint says it, without that text round trip, which costs as much as
// the rest of a scan.
var xminSQL = xminFrom("(SELECT age('3'::xid))", "age("+rowAlias+".xmin)", rowAlias+".xmin::text::bigint")

// xminFrom restores a transaction id x from age3 = age('3') and agex = age(x): age(y)
// is the distance, modulo 2^32 and as a signed 32-bit integer, back to y from one id
// that stays the same for the transaction, so x = age3 + 3 - agex modulo 2^32. age
// saturates at 2^31-1 only for the permanent ids (0, 1, 2), which take raw instead.
func xminFrom(age3, agex, raw string) string {
	return "(CASE WHEN " + agex + " = 2147483647 THEN " + raw + " ELSE (" + age3 + "::bigint + 3 - " + agex + ") & 4294967295 END)"
}

// changedSQL is true for a row version whose xmin is in the window [$1, $1+$2)
// (modulo 2^32).
var changedSQL = "((" + xminSQL + " - $1) & 4294967295) < $2"

// windowSQL is true for a row version whose xmin is on the 32-bit circle from $1
// (text) to the id age() measures from, when that is less than 2^31 on (the pass
// checks age($1) is not negative): every row version changedSQL is true for, and,
// since a frozen row keeps its raw xmin, a frozen row whose xmin falls there by
// coincidence, as changedSQL renders such a row. It costs a scan a third less than
// changedSQL, which fingerprint's pass needs only to count, not to tell apart.
var windowSQL = windowFrom("age("+rowAlias+".xmin)", "(SELECT age($1::text::xid))")

// windowFrom is true when agex = age(x) is between 0 and agelo = age(lo): x is on
// the circle from lo to the origin of age. A negative age is an id past the origin,
// or one 2^31 or more before it, as an old frozen row's raw xmin can be.
func windowFrom(agex, agelo string) string {
	return "(" + agex + " BETWEEN 0 AND " + agelo + ")"
}

// readMode is how ScanSince finds a collection's changed rows: by row version, or
// by content for one of the reasons that rule row versions out.
type readMode int

// The read modes.
const (
	// readRowVersion renders only the rows whose row version is in the window since
	// the parent's snapshot.
	readRowVersion readMode = iota + 1
	// The others render every row and compare it by content; each names the reason.
	contentNoParent
	contentQuery
	contentNotTable
	contentNoIdentity
	contentOtherCluster
	contentDefinitions
	contentNotHeap
	contentParentSnapshotUnknown
	contentXidsBackwards
	contentWraparound
)

// contentWhy says, for each mode that renders every row, why.
var contentWhy = map[readMode]string{
	contentNoParent:              "no parent to compare with",
	contentQuery:                 "a query has no row versions",
	contentNotTable:              "not a table (a view, materialized view or foreign table)",
	contentNoIdentity:            "the cluster's identity is unknown (pg_control_system() not granted)",
	contentOtherCluster:          "the parent was read from another cluster, database or timeline",
	contentDefinitions:           "the table's column or type definitions changed",
	contentNotHeap:               "the table (or a partition) is not stored as heap",
	contentParentSnapshotUnknown: "the parent's snapshot is unknown",
	contentXidsBackwards:         "transaction ids went backwards since the parent (a restored cluster?)",
	contentWraparound:            "over 2^31 transactions since the parent",
}

// String returns the mode's text, as manifests record it: "row-version", or
// "content: <why>".
func (m readMode) String() string {
	if m != readRowVersion {
		if _, ok := contentWhy[m]; !ok {
			return fmt.Sprintf("readMode(%d)", int(m))
		}
	}
	return snapshotMode(m).String()
}

// snapshotMode is a read mode as ScanSince reports it to package snapshot (see
// snapshot.DeltaSnapshot).
func snapshotMode(m readMode) snapshot.LayerMode {
	if m == readRowVersion {
		return snapshot.ModeRowVersion
	}
	return snapshot.ContentMode(contentWhy[m])
}

// changePlan is changeMode's answer: the read mode and, for readRowVersion, the xid
// window [lo, lo+window) (mod 2^32) of the rows to render.
type changePlan struct {
	mode       readMode
	lo, window uint64
}

// changeMode decides how ScanSince finds changed rows. It asks once per collection
// and parent.
func (r *snap) changeMode(ctx context.Context, cr *collectionRead, since *snapshot.Position) (changePlan, error) {
	if p, ok := cr.modes[since]; ok {
		return p, nil
	}
	p, err := r.decideMode(ctx, cr.c, since)
	if err == nil {
		if cr.modes == nil {
			cr.modes = map[*snapshot.Position]changePlan{}
		}
		cr.modes[since] = p
	}
	return p, err
}

func (r *snap) decideMode(ctx context.Context, c Collection, since *snapshot.Position) (changePlan, error) {
	content := func(m readMode) (changePlan, error) { return changePlan{mode: m}, nil }
	switch {
	case since == nil:
		return content(contentNoParent)
	case c.Table == "":
		return content(contentQuery)
	case r.pos.Definitions[c.Name] == "":
		return content(contentNotTable)
	case since.System == "" || r.pos.System == "":
		return content(contentNoIdentity)
	case since.System != r.pos.System:
		return content(contentOtherCluster)
	case since.Definitions[c.Name] == "" || since.Definitions[c.Name] != r.pos.Definitions[c.Name]:
		return content(contentDefinitions)
	}
	if heap, err := allHeap(ctx, r.tx, c); err != nil {
		return changePlan{}, err
	} else if !heap {
		return content(contentNotHeap)
	}
	pxmin, _, err := snapshotBounds(since.PgSnapshot)
	if err != nil {
		return content(contentParentSnapshotUnknown)
	}
	_, xmax, err := snapshotBounds(r.pos.PgSnapshot)
	if err != nil {
		return changePlan{}, err
	}
	switch {
	case xmax < pxmin:
		return content(contentXidsBackwards)
	case xmax-pxmin >= 1<<31:
		return content(contentWraparound)
	}
	return changePlan{mode: readRowVersion, lo: pxmin & 0xffffffff, window: xmax - pxmin}, nil
}

// allHeap reports whether the table and every partition under it use the heap access
// method, whose row versions carry xmin as described above.
func allHeap(ctx context.Context, tx pgx.Tx, c Collection) (bool, error) {
	var ok bool
	// pg_partition_tree lists nothing for a table that is not partitioned.
	err := tx.QueryRow(ctx, allHeapSQL, pgx.Identifier(c.tableParts()).Sanitize()).Scan(&ok)
	return ok, err
}

// allHeapSQL reads whether the table $1 and every partition under it are stored as
// heap.
const allHeapSQL = `SELECT coalesce(bool_and(c.relkind = 'p' OR coalesce(am.amname, '') = 'heap'), false)
	FROM pg_class c LEFT JOIN pg_am am ON am.oid = c.relam
	WHERE c.oid = to_regclass($1) OR c.oid IN (SELECT relid FROM pg_partition_tree(to_regclass($1)))`

// countable reports whether counting a table's rows proves no deletion: only when ids
// are unique, since a duplicate id added and a row deleted would balance. Without
// Postgres' guarantee every id is read, and the scan finds duplicates; a plain table's
// index covers none of its inheritance children.
func (r *snap) countable(ctx context.Context, cr *collectionRead) (relation, bool, error) {
	rel, err := lookupRelation(ctx, r.tx, cr.c)
	if err != nil {
		return rel, false, err
	}
	if unique, _ := rel.guarantee(cr.key); !unique {
		return rel, false, nil
	}
	if rel.kind != relPartitioned {
		var children bool
		if err := r.tx.QueryRow(ctx, hasChildrenSQL, rel.oid).Scan(&children); err != nil {
			return rel, false, err
		}
		if children {
			return rel, false, nil
		}
	}
	return rel, true, nil
}

// hasChildrenSQL reads whether the relation $1 has inheritance children.
const hasChildrenSQL = `SELECT EXISTS (SELECT FROM pg_inherits WHERE inhparent = $1)`

// changedPass is what fingerprint's pass over a table found against the parent read
// at since: the rows, how many are in the row-version window since the parent, the
// pages those are in, and their greatest line number (every one of them is at a ctid
// (block, 1…maxOffset) of blocks). The pages are at most the table's, a number in
// memory however many rows changed.
type changedPass struct {
	since         *snapshot.Position
	rel           relation // the table, countable
	rows, changed int64
	blocks        []int64
	maxOffset     int32
}

// fingerprint returns a table collection's fingerprint, definitions and row count
// ("" for a query collection or a relation that is not a table: tableFingerprint).
// Against a parent whose fingerprint holds its row count and whose row versions
// compare (changeMode), of a table whose changed rows ScanChanged can read alone
// (countable), one pass counts the rows and those in the window since the parent,
// without hashing every row's xmin. None in the window and the parent's count mean
// the parent's contents: every row version the snapshot sees, the parent's snapshot
// saw, and there are as many. The fingerprint is then the parent's; otherwise a new
// one. ScanChanged uses the pass to read only what it found. The window also holds
// rows the parent saw when a transaction elsewhere held its snapshot xmin back; such
// a table is then taken as changed, and its rows in the window compared by content.
// A table ScanChanged cannot read so takes the hashing pass, which tells an unchanged
// table exactly, since taking it as changed would read every row.
func (r *snap) fingerprint(ctx context.Context, cr *collectionRead, since *snapshot.Position) (fp, defs string, rows int64, err error) {
	c := cr.c
	var parent string
	var parentRows int64
	counted := false
	if since != nil {
		parent = since.Fingerprints[c.Name]
		parentRows, counted = fingerprintRows(parent)
	}
	if !counted {
		return tableFingerprint(ctx, r.tx, c)
	}
	cols, err := tableDefinitions(ctx, r.tx, c)
	if err != nil || cols == "" {
		return "", "", 0, err
	}
	defs = definitionsOf(cols)
	r.pos.Definitions[c.Name] = defs // changeMode compares them with the parent's
	plan, err := r.changeMode(ctx, cr, since)
	if err != nil {
		return "", "", 0, err
	}
	if plan.mode != readRowVersion {
		return hashedFingerprint(ctx, r.tx, c, cols)
	}
	rel, ok, err := r.countable(ctx, cr)
	if err != nil {
		return "", "", 0, err
	}
	if !ok {
		return hashedFingerprint(ctx, r.tx, c, cols)
	}
	p := changedPass{since: since, rel: rel}
	var span int32
	err = r.tx.QueryRow(ctx, changedPassSQL(c), strconv.FormatUint(plan.lo, 10)).Scan(&p.rows, &p.changed, &p.blocks, &p.maxOffset, &span)
	if err != nil {
		return "", "", 0, err
	}
	if span < 0 { // 2^31 or more ids since the parent's snapshot: the window says nothing
		return hashedFingerprint(ctx, r.tx, c, cols)
	}
	cr.pass = &p
	if p.changed == 0 && p.rows == parentRows {
		return parent, defs, p.rows, nil
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "changed\n%s\n%d\n%s", parent, r.pos.LSN, r.pos.PgSnapshot))
	return countedFingerprint(p.rows, sum[:]), defs, p.rows, nil
}

// changedPassSQL reads, from the table collection c, the count of its rows, of
// those in the window from the xid $1 (windowSQL), the blocks of those and their
// greatest line number, and the age of $1. The window's test runs once a row, in a
// subquery kept apart (OFFSET 0), for the aggregates that read it; a ctid's block and
// line number are its text's.
func changedPassSQL(c Collection) string {
	return `SELECT count(*), count(*) FILTER (WHERE w),
		coalesce(array_agg(DISTINCT (t::text::point)[0]::int8) FILTER (WHERE w), '{}'),
		coalesce(max((t::text::point)[1]::int4) FILTER (WHERE w), 0), age($1::text::xid)
		FROM (SELECT ` + rowAlias + `.ctid AS t, ` + windowSQL + ` AS w FROM ` + tableFromSQL(c) + ` OFFSET 0) AS p`
}
