package pgsource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/snapshot"
)

var (
	_ snapshot.SinceOpener   = (*Source)(nil)
	_ snapshot.HoldingOpener = (*Source)(nil)
	_ snapshot.Follower      = (*Source)(nil)
	_ snapshot.KeyedScanner  = (*snap)(nil)
)

// streamDelta is what the stream says about one snapshot.
type streamDelta struct {
	// pos places the snapshot in the stream; nil when the stream did not pass it in
	// time.
	pos *snapshot.StreamPosition
	// since is the parent the keys are exact for; nil for none.
	since *snapshot.Position
	// known holds the table collections whose changes since the parent are known
	// exactly, by name.
	known map[string]*streamKeys
}

// streamKeys are the keys of one collection that changed since the parent.
type streamKeys struct {
	// keys are the changed keys (columns joined by NUL), sorted; cols the key
	// columns in the keys' order.
	keys, cols []string
	// oid is the relation whose changes the keys are: a table dropped and created
	// again under the same name is another, which the keys say nothing of.
	oid uint32
}

// WAL pages begin with a header no record starts in: a position just past one is
// reached by the stream when it reaches the page's start.
const (
	walPageSize       = 8192
	walLongPageHeader = 40
)

// delta waits until the stream has passed lsn, the position taken inside the
// snapshot snapText, and returns what the stream says about it against the parent
// read at since.
func (st *stream) delta(ctx context.Context, snapText string, lsn uint64, since *snapshot.Position) (streamDelta, error) {
	vis, err := parseVisibility(snapText)
	if err != nil {
		return streamDelta{}, err
	}
	target := lsn
	if off := lsn % walPageSize; off <= walLongPageHeader {
		target = lsn - off
	}
	timeout := time.NewTimer(st.cfg.CatchUp)
	defer timeout.Stop()
	nudge := time.NewTimer(streamNudgeAfter)
	defer nudge.Stop()
	for {
		st.mu.Lock()
		if st.recv >= target {
			break
		}
		moved := st.moved
		st.mu.Unlock()
		select {
		case <-ctx.Done():
			return streamDelta{}, ctx.Err()
		case <-timeout.C:
			st.report(ctx, snapshot.EventStreamBehind, "snapshot_lsn", lsnText(lsn), "wait", st.cfg.CatchUp.String())
			return streamDelta{}, nil
		case <-nudge.C:
			st.nudge(ctx)
		case <-moved:
		}
	}
	view, unseen := st.viewLocked(vis, since)
	st.mu.Unlock()
	d := st.deltaOf(ctx, view, since)
	if unseen > 0 && st.changed != nil {
		// A transaction the stream delivered that the snapshot does not see yet: its
		// commit record is in the WAL (and decoded) a moment before Postgres makes it
		// visible, and a snapshot taken in between misses it. Its own report has been
		// taken by the sync that opened this snapshot, so report it again: the next
		// version holds it, instead of the next scheduled one.
		st.changed(Change{LSN: lsn, At: time.Now(), Reason: ReasonStreamUnseen})
	}
	return d, nil
}

// snapshotXmin is a snapshot's xmin; 0 when it does not parse.
func snapshotXmin(s string) uint64 {
	xmin, _, err := snapshotBounds(s)
	if err != nil {
		return 0
	}
	return xmin
}

// heldView is what the stream holds that a snapshot sees, taken under st.mu: the
// transactions it sees (whose keys no one changes once committed, so they are
// merged outside the lock the stream's reader needs), the collections of the
// transactions let go, and where the stream must be read again from to see every
// transaction the snapshot does not.
type heldView struct {
	visible []*heldTxn
	gone    map[string]string // collection → why its keys are not known
	resume  uint64
	invalid string // why the held transactions are not the parent's whole difference
	barrier uint64 // StreamPosition.Barrier of the snapshot
}

// viewLocked is what the stream holds for the snapshot whose visibility is vis, its
// parent read at since; unseen
// counts the held transactions (and the let-go ones, as one) the snapshot does not see.
func (st *stream) viewLocked(vis visibility, since *snapshot.Position) (v heldView, unseen int) {
	v.invalid = st.invalidFor(since)
	v.barrier = st.barrierFor(vis, since)
	v.resume = st.recv
	for _, t := range st.held {
		if vis.sees(t.xid) {
			v.visible = append(v.visible, t)
		} else {
			v.resume = min(v.resume, t.commit)
			unseen++
		}
	}
	if g := st.gone; g != nil {
		v.gone = maps.Clone(g.dirty)
		if !g.seenBy(vis) {
			// Their commits can no longer be replayed: a new reading finds the slot
			// confirmed past this, and compares in full.
			v.resume = min(v.resume, g.first)
			unseen++
		}
	}
	return v, unseen
}

// deltaOf is delta's answer from what the stream holds for the snapshot, against the
// parent read at since.
func (st *stream) deltaOf(ctx context.Context, v heldView, since *snapshot.Position) streamDelta {
	d := streamDelta{pos: &snapshot.StreamPosition{Slot: st.cfg.Slot, System: st.system, Reading: st.reading, Resume: v.resume,
		Publication: st.publication, Barrier: v.barrier}}
	if why := v.invalid; why != "" {
		if since != nil && since.Stream != nil {
			kind := snapshot.EventStreamNoDelta
			if since.Stream.System != st.system {
				kind = snapshot.EventStreamOtherSystem
			}
			st.report(ctx, kind, "why", why)
		}
		return d
	}
	d.since, d.known = since, map[string]*streamKeys{}
	for _, c := range st.tables.Collections {
		if _, dirty := v.gone[c.Collection]; dirty {
			continue
		}
		keys := map[string]struct{}{}
		exact := true
		for _, t := range v.visible {
			if _, dirty := t.dirty[c.Collection]; dirty {
				exact = false
				break
			}
			for _, k := range t.keys {
				if k.collection == c.Collection {
					keys[k.key] = struct{}{}
				}
			}
		}
		if exact && len(keys) <= maxStreamKeys {
			d.known[c.Collection] = &streamKeys{keys: slices.Sorted(maps.Keys(keys)), cols: c.Key, oid: c.Relation.OID}
		}
	}
	return d
}

// streamNudgeAfter is how long a snapshot waits for the stream before nudging it.
const streamNudgeAfter = 50 * time.Millisecond

// nudge commits a transaction that writes nothing but its commit record. WAL that a
// transaction still in progress wrote after the last commit is not flushed while the
// database is otherwise idle, and the walsender decodes flushed WAL only: a snapshot's
// position just past it would stay ahead of the stream until CatchUp ran out. A commit
// record after it is flushed, at once or, committed asynchronously, by the WAL writer.
func (st *stream) nudge(ctx context.Context) {
	conn, err := pgx.ConnectConfig(ctx, st.connCfg)
	if err == nil {
		defer closeConn(ctx, conn)
		_, err = conn.Exec(ctx, "SELECT txid_current()")
	}
	if err != nil && ctx.Err() == nil {
		st.report(ctx, snapshot.EventNudgeFailed, "err", err)
	}
}

// barrierFor is the Barrier of a snapshot whose visibility is vis, its parent read at
// since: when the parent was read with another publication (or none known), this
// reading's, which every transaction that may span that change is below; the
// parent's while this snapshot's xmin has not passed it; else 0. A snapshot below its
// barrier is no base for the stream's changes (invalidFor).
func (st *stream) barrierFor(vis visibility, since *snapshot.Position) uint64 {
	switch {
	case since == nil || since.Stream == nil || since.Stream.Publication != st.publication:
		if vis.xmin < st.barrier {
			return st.barrier
		}
	case since.Stream.Barrier > vis.xmin:
		return since.Stream.Barrier
	}
	return 0
}

// invalidFor says why the transactions the stream holds are not every one a snapshot
// sees that the version read at since does not; "" when they are.
func (st *stream) invalidFor(since *snapshot.Position) string {
	switch {
	case since == nil:
		return "no parent"
	case since.Stream != nil && since.Stream.Publication != st.publication:
		// A table that joined the publication since (or left it and joined again):
		// what it committed meanwhile is on no stream.
		return "the publication's definition changed since the parent was read"
	case since.Stream != nil && since.Stream.Barrier > 0 && snapshotXmin(since.PgSnapshot) < since.Stream.Barrier:
		// A transaction that wrote a table before it joined the publication, and
		// committed after, streams only its later changes; the parent did not see it.
		return "the parent was read while a transaction begun before the publication changed could still run"
	case !st.fresh && since.Same(st.last):
		// This reading saw since published, or found it holds what one of the
		// reading's snapshots read (a no-op): whatever since was read with, the held
		// transactions are what it lacks.
		return ""
	case st.tables.Altered > since.LSN:
		// A table that joined the publication then: what it committed before is on
		// no stream, and the parent may not hold it.
		return "the publication changed after the parent was read"
	case since.Stream == nil:
		return "the parent was not read with the stream"
	case since.Stream.Slot != st.cfg.Slot:
		return "the parent was read with slot " + since.Stream.Slot
	case since.Stream.System != st.system:
		return "the parent was read from another cluster, timeline or database (" + since.Stream.System + ", now " + st.system + ")"
	case !st.fresh:
		return "the parent is not the version this reading last saw published (a rollback?)"
	case st.start > since.Stream.Resume:
		// A new reading holds every transaction committed from where the slot was
		// confirmed; the version at since does not see only ones committed from Resume.
		return "the slot was confirmed past the parent's position (a new slot, or a new reading after writes)"
	}
	return ""
}

// holds forgets the transactions the snapshot at pos saw: the pointer's version,
// read at ptr, holds what it read.
func (st *stream) holds(pos, ptr snapshot.Position) {
	if pos.Stream == nil || pos.Stream.Reading != st.reading {
		return
	}
	vis, err := parseVisibility(pos.PgSnapshot)
	if err != nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.held = slices.DeleteFunc(st.held, func(t *heldTxn) bool {
		if vis.sees(t.xid) {
			st.heldBytes -= t.size
			return true
		}
		return false
	})
	if st.gone != nil && st.gone.seenBy(vis) {
		st.gone = nil
	}
	st.fresh, st.last = false, ptr
}

// visibility is a snapshot's pg_current_snapshot(): xmin, xmax and the
// transactions in progress.
type visibility struct {
	xmin, xmax uint64
	xip        map[uint64]bool
}

func parseVisibility(s string) (visibility, error) {
	xmin, xmax, err := snapshotBounds(s)
	if err != nil {
		return visibility{}, err
	}
	v := visibility{xmin: xmin, xmax: xmax, xip: map[uint64]bool{}}
	parts := strings.SplitN(s, ":", 3)
	if len(parts) == 3 && parts[2] != "" {
		for _, x := range strings.Split(parts[2], ",") {
			n, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return visibility{}, fmt.Errorf("%w snapshot %q", snapshot.ErrInvalid, s)
			}
			v.xip[n] = true
		}
	}
	return v, nil
}

// sees reports whether the snapshot sees the committed transaction xid, a 32-bit id
// as the stream gives it, taken within 2^31 of xmax.
func (v visibility) sees(xid uint32) bool {
	x := v.xmax&^0xffffffff | uint64(xid)
	if x > v.xmax && x-v.xmax > 1<<31 && x >= 1<<32 {
		x -= 1 << 32
	} else if x+(1<<31) < v.xmax {
		x += 1 << 32
	}
	return x < v.xmin || x < v.xmax && !v.xip[x]
}

// OpenSince is Open for a version whose parent was read at since. While this
// process reads the replication stream, a table collection whose changes since the
// parent the stream knows exactly is not counted or fingerprinted by reading it
// (its fingerprint follows from the parent's and the changes), and ScanKeyed reads
// its changed keys alone.
func (s *Source) OpenSince(ctx context.Context, since *snapshot.Position) (snapshot.SourceSnapshot, error) {
	return s.open(ctx, since)
}

// OpenHolding is OpenSince for a version that holds the collections held at their
// last state: their changes are not counted; see snapshot.HoldingOpener.
func (s *Source) OpenHolding(ctx context.Context, since *snapshot.Position, held []string) (snapshot.SourceSnapshot, error) {
	return s.openOf(ctx, since, s.collections, held)
}

// Holds tells the stream, if this process reads it, that the pointer's version
// holds what the snapshot at pos read; see snapshot.Follower.
func (s *Source) Holds(_ context.Context, pos, ptr snapshot.Position) {
	if st := s.stream.Load(); st != nil {
		st.holds(pos, ptr)
	}
}

// streamFingerprint is the fingerprint of a collection whose changes since a parent
// with fingerprint parent are keys: the parent's when there are none.
func streamFingerprint(parent string, keys []string, pos snapshot.Position) string {
	if len(keys) == 0 {
		return parent
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "stream\n%s\n%d\n%s", parent, pos.LSN, pos.PgSnapshot))
	return "s" + hex.EncodeToString(sum[:12])
}

// ScanKeyed sends the documents of the keys the stream named, looked up in the
// snapshot by index in one statement; see snapshot.KeyedScanner.
func (r *snap) ScanKeyed(ctx context.Context, collection string, since *snapshot.Position, max int64, fn func(snapshot.Document) error) (bool, error) {
	cr, ok := r.reads[collection]
	if !ok || since == nil {
		return false, nil
	}
	known := cr.keyed
	if r.delta.since == nil || !since.Same(*r.delta.since) {
		// Since a base read beside the stream, not the parent.
		known, ok = r.baseKeys(cr, since)
		if !ok {
			return false, nil
		}
	}
	if known == nil || int64(len(known.keys)) > max {
		return false, nil
	}
	keys, cols, c := known.keys, known.cols, cr.c
	if len(keys) == 0 {
		return true, nil
	}
	table := pgx.Identifier(c.tableParts()).Sanitize()
	args := make([]any, len(cols))
	vals := make([][]string, len(cols))
	for _, k := range keys {
		for i, v := range strings.Split(k, "\x00") {
			vals[i] = append(vals[i], v)
		}
	}
	// The key columns' types, in one round trip.
	var types []string
	if err := r.tx.QueryRow(ctx, keyTypesSQL, table, cols).Scan(&types); err != nil {
		return false, fmt.Errorf("collection %s: the types of key columns %v: %w", collection, cols, err)
	} else if len(types) != len(cols) {
		return false, fmt.Errorf("%w: collection %s: %s has %d of the key columns %v", snapshot.ErrSource, collection, table, len(types), cols)
	}
	for i := range cols {
		args[i] = vals[i]
	}
	rows, err := r.tx.Query(ctx, keyedSQL(table, cr.key, cols, types), args...)
	if err != nil {
		return false, fmt.Errorf("query %s: %w", describe(c), err)
	}
	if err := readRows(rows, c, cr.key, true, fn); err != nil {
		if isCode(err, "21000") { // more than one row for one key
			return false, fmt.Errorf("%w: duplicate key in %s (a changed key names several rows)", snapshot.ErrSource, describe(c))
		}
		return false, err
	}
	return true, nil
}

// keyTypesSQL reads the types of the columns $2 of the table $1, in that order.
const keyTypesSQL = `SELECT coalesce(array_agg(format_type(atttypid, NULL) ORDER BY array_position($2::text[], attname::text)), '{}')
	FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND attname = ANY($2::text[])`

// keyedSQL reads, in id byte order, the id (made from key) of every key the stream
// named and the document of table's row under it, NULL when there is none. The keys'
// columns cols, of types, are the text arrays $1…, one a column.
func keyedSQL(table string, key, cols, types []string) string {
	casts, names, conds, params := make([]string, len(cols)), make([]string, len(cols)), make([]string, len(cols)), make([]string, len(cols))
	for i, col := range cols {
		q := pgx.Identifier{col}.Sanitize()
		names[i] = "k" + strconv.Itoa(i)
		casts[i] = "u." + names[i] + "::" + types[i] + " AS " + q
		// Equal in the key's type is not enough: numeric 1.5 and 1.50 are equal and
		// distinct ids. The index finds the candidates, the text (the id's) the row.
		conds[i] = "d." + q + " = " + rowAlias + "." + q + " AND (d." + q + `)::text COLLATE "C" = (` + rowAlias + "." + q + `)::text COLLATE "C"`
		params[i] = "$" + strconv.Itoa(i+1) + "::text[]"
	}
	id := keySQL(key)
	return "SELECT " + id + ", (SELECT to_json(d.*)::text FROM " + table + " AS d WHERE " + strings.Join(conds, " AND ") + ") FROM (SELECT " +
		strings.Join(casts, ", ") + " FROM unnest(" + strings.Join(params, ", ") + ") AS u(" + strings.Join(names, ", ") + ")) AS " + rowAlias +
		" ORDER BY " + id + " COLLATE \"C\""
}

// Streaming reports whether this process reads the replication stream now.
func (s *Source) Streaming() bool { return s.stream.Load() != nil }
