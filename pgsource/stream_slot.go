package pgsource

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/snapshot"
)

// The reading's watch over its slot: the WAL it retains (metrics, a warning), and
// its restart position. Postgres moves a logical slot's restart_lsn only where its
// walsender decoded a running-transactions record (xl_running_xacts) that the
// confirmed position has passed, and logs one every 15 s while WAL is written, or at
// a checkpoint. While only unwatched tables are written the slot is confirmed as far
// as the stream was read, yet would keep 15 s of the write rate. So when restart_lsn
// lags the confirmed position by more than StreamConfig.NudgeAfter and nothing is
// held, the reading asks the server to log one, at most once a second: with
// pg_log_standby_snapshot() on Postgres 16 and later (if it may execute it), else by
// creating and at once dropping a temporary logical slot, whose creation logs one
// before it waits for the transactions in flight to end.

// slotEvery is how often the reading reads its slot's positions.
const slotEvery = time.Second

// nudgeEvery is the least time between two requests for a running-transactions
// record; nudgeBackoff the time after a failed one; nudgeWait the statement_timeout
// of the nudge's connection: how long a temporary slot may wait for transactions in
// flight (its record is written by then).
const (
	nudgeEvery   = time.Second
	nudgeBackoff = time.Minute
	nudgeWait    = time.Second
)

// slotWatch is the reading's watch over its slot, used by the reading's goroutine.
type slotWatch struct {
	st           *stream
	conn         *pgx.Conn
	stats        func(StreamStats)
	nudge        *nudger
	sender       uint32    // the reading's WAL sender's process id
	next         time.Time // when to read the slot next
	nextRetained time.Time // when to report the retained WAL next
	warned       time.Time // when the retained WAL was last warned of
}

// check reads the slot's positions when due: it asks for a running-transactions
// record when the restart position lags, and reports the retained WAL every
// retainedEvery.
func (w *slotWatch) check(ctx context.Context, now time.Time) error {
	if now.Before(w.next) {
		return nil
	}
	w.next = now.Add(slotEvery)
	f, err := lookupSlot(ctx, w.conn, w.st.cfg.Slot)
	if err != nil {
		return err
	}
	if !f.exists {
		return fmt.Errorf("replication slot %s is gone while it is read", w.st.cfg.Slot)
	}
	if err := w.tablesKept(ctx); err != nil {
		return err
	}
	if err := w.notSynchronous(ctx); err != nil {
		return err
	}
	if bad, err := uncarriedPartitions(ctx, w.conn, w.st.publishedOIDs()); err != nil {
		return err
	} else if len(bad) > 0 {
		// A partition attached or altered while the stream is read: a new reading
		// refuses it, naming it.
		return fmt.Errorf("%w: a published table now has %s", ErrTablesChanged, strings.Join(bad, ", "))
	}
	if d, err := publicationDigest(ctx, w.conn, w.st.cfg.Publication); err != nil {
		return err
	} else if d != w.st.publication {
		// A table dropped from it, or added, what it publishes, a row filter: a new
		// reading prepares it again, and compares in full with versions read before.
		// A table dropped since tablesKept looked is named rather than the publication.
		if err := w.tablesKept(ctx); err != nil {
			return err
		}
		return fmt.Errorf("%w: publication %s changed while it was read", ErrTablesChanged, w.st.cfg.Publication)
	}
	retained := max(f.retained, 0)
	st := w.st
	st.expire(ctx, now)
	st.mu.Lock()
	held, heldBytes, receiving := len(st.held), st.heldBytes, st.cur != nil
	letGo := 0
	if st.gone != nil {
		letGo = st.gone.n
	}
	st.mu.Unlock()
	// A standby logs no running-transactions record: its primary's reach it.
	if f.behind > st.cfg.NudgeAfter && held == 0 && !receiving && !f.standby {
		w.nudge.poke(now)
	}
	if now.Before(w.nextRetained) {
		return nil
	}
	w.nextRetained = now.Add(retainedEvery)
	if retained > st.cfg.WarnRetained && now.Sub(w.warned) > time.Minute {
		w.warned = now
		st.report(ctx, snapshot.EventSlotRetains, "retained_bytes", retained, "threshold", st.cfg.WarnRetained)
	}
	if w.stats != nil {
		w.stats(StreamStats{RetainedBytes: retained, Held: held, HeldBytes: heldBytes, LetGo: letGo})
	}
	return nil
}

// publishedOIDs are the oids of the published relations the reading follows.
func (st *stream) publishedOIDs() []uint32 {
	oids := make([]uint32, len(st.tables.Published))
	for i, r := range st.tables.Published {
		oids[i] = r.OID
	}
	return oids
}

// notSynchronous returns an error wrapping ErrLogicalSetup when the server counts the
// reading's WAL sender as a synchronous standby, or a candidate to become one
// (synchronous_standby_names '*', or naming its application_name): the source's
// commits would then wait for the reader, which confirms a transaction only once a
// version holds it.
func (w *slotWatch) notSynchronous(ctx context.Context) error {
	if w.sender == 0 {
		return nil
	}
	var state, names, app string
	err := w.conn.QueryRow(ctx, `SELECT coalesce(r.sync_state, 'async'), current_setting('synchronous_standby_names'), coalesce(r.application_name, '')
		FROM (SELECT 1) AS one LEFT JOIN pg_stat_replication r ON r.pid = $1`, w.sender).Scan(&state, &names, &app)
	if err != nil {
		return fmt.Errorf("read the reader's replication state: %w", err)
	}
	if state == "async" {
		return nil
	}
	return fmt.Errorf("%w: the server counts snapflip's replication connection (application_name %q) as a %s synchronous standby "+
		"(synchronous_standby_names = %q): its commits would wait for the syncer, which confirms a transaction only once a version "+
		"holds it; name the real standbys in synchronous_standby_names instead of '*', or give the syncer another application_name in its DSN",
		ErrLogicalSetup, app, state, names)
}

// tablesKept returns an error wrapping ErrTablesChanged when a relation the reading
// follows is gone. A table dropped and created again is a new relation, which the
// publication lost with the old one, and whose changes no stream carries until a new
// reading prepares the publication for it. (The watch's poll sees it too, but may
// have found the new table before this reading prepared the publication for the old.)
func (w *slotWatch) tablesKept(ctx context.Context) error {
	oids := w.st.publishedOIDs()
	var gone []string
	if err := w.conn.QueryRow(ctx, `SELECT coalesce(array_agg(o::text), '{}') FROM unnest($1::oid[]) AS o
		WHERE NOT EXISTS (SELECT FROM pg_class WHERE oid = o)`, oids).Scan(&gone); err != nil {
		return fmt.Errorf("read the tables the stream follows: %w", err)
	}
	for _, r := range w.st.tables.Published {
		if slices.Contains(gone, strconv.FormatUint(uint64(r.OID), 10)) {
			return fmt.Errorf("%w: %s (oid %d) was dropped", ErrTablesChanged, r.Name, r.OID)
		}
	}
	return nil
}

// nudger asks the server for a running-transactions record, one request at a time,
// in the background on a connection of its own, so the stream is read meanwhile.
type nudger struct {
	connCfg *pgx.ConnConfig                                   // with statement_timeout nudgeWait
	report  func(context.Context, snapshot.EventKind, ...any) // the reading's
	slot    string                                            // the temporary slot's name, the reading's own
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu     sync.Mutex
	busy   bool
	next   time.Time // no request before
	failed bool      // a request failed: said once

	// Used by the request under way only.
	conn   *pgx.Conn
	noFunc bool // pg_log_standby_snapshot() is missing (before Postgres 16) or not permitted
}

// newNudger returns a nudger whose requests end with ctx or close.
func newNudger(ctx context.Context, connCfg *pgx.ConnConfig, report func(context.Context, snapshot.EventKind, ...any), reading string) *nudger {
	cfg := connCfg.Copy()
	cfg.RuntimeParams["statement_timeout"] = strconv.FormatInt(nudgeWait.Milliseconds(), 10)
	n := &nudger{connCfg: cfg, report: report, slot: "snapflip_nudge_" + strings.ReplaceAll(reading, "-", "")}
	n.ctx, n.cancel = context.WithCancel(ctx)
	return n
}

// poke starts a request unless one is under way or it is too soon.
func (n *nudger) poke(now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.busy || now.Before(n.next) {
		return
	}
	n.busy = true
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx := n.ctx
		err := n.request(ctx)
		n.mu.Lock()
		defer n.mu.Unlock()
		n.busy = false
		n.next = time.Now().Add(nudgeEvery)
		if err == nil || ctx.Err() != nil {
			return
		}
		n.next = time.Now().Add(nudgeBackoff)
		if !n.failed {
			n.failed = true
			n.report(ctx, snapshot.EventRecordFailed, "err", err)
		}
	}()
}

// close ends the request under way (the reading that made it is over, and a server
// that stopped answering must not hold it), waits for it, and closes the connection.
func (n *nudger) close() {
	n.cancel()
	n.wg.Wait()
	if n.conn != nil {
		_ = closeConn(n.ctx, n.conn)
		n.conn = nil
	}
}

// request has the server log a running-transactions record. A failed request closes
// its connection: a temporary slot it may have left ends with the session.
func (n *nudger) request(ctx context.Context) error {
	err := n.logRunning(ctx)
	if err != nil && n.conn != nil {
		_ = closeConn(ctx, n.conn)
		n.conn = nil
	}
	return err
}

func (n *nudger) logRunning(ctx context.Context) error {
	if n.conn == nil {
		conn, err := pgx.ConnectConfig(ctx, n.connCfg)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		n.conn = conn
	}
	if !n.noFunc {
		_, err := n.conn.Exec(ctx, `SELECT pg_log_standby_snapshot()`)
		// undefined_function before Postgres 16; insufficient_privilege unless granted.
		// A temporary slot needs no privilege but REPLICATION.
		if !isCode(err, "42883", "42501") {
			if err != nil {
				return fmt.Errorf("SELECT pg_log_standby_snapshot(): %w", err)
			}
			return nil
		}
		n.noFunc = true
	}
	return n.tempSlot(ctx)
}

// tempSlot creates and drops a temporary logical slot. Its creation logs a
// running-transactions record, then waits for the transactions writing at that
// moment to end: that wait is cut short by the connection's statement_timeout, the
// record is written.
func (n *nudger) tempSlot(ctx context.Context) error {
	_, err := n.conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput', true)`, n.slot)
	if isCode(err, "57014") { // query_canceled: the statement's end dropped the slot
		return nil
	}
	if err != nil {
		return fmt.Errorf("create the temporary replication slot %s: %w", n.slot, err)
	}
	if _, err := n.conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, n.slot); err != nil {
		return fmt.Errorf("drop the temporary replication slot %s: %w", n.slot, err)
	}
	return nil
}
