package pgsource

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/snapflip/snapflip/snapshot"
)

// Change capture from the logical replication stream (watch.mode logical). One
// process at a time (the holder of the watch lease) reads the slot. It keeps, for
// every committed transaction that changed a watched table and that no published
// version holds yet, the keys it changed per collection. A snapshot opened while the
// stream is read waits until the stream has passed the WAL position taken inside it,
// then takes the keys of the transactions the snapshot sees (by xid, against its
// xmin, xmax and in-progress list): those are every id that changed since the parent,
// when the parent is the version this reading last published (or, for a new reading,
// when the slot's confirmed position is at or before the parent's resume position).
// The slot is confirmed only up to the oldest transaction no published version holds:
// a crash replays, it never loses. With nothing held, it is confirmed as far as the
// stream has been read, so writes to other tables never pin WAL.

// StreamConfig tunes Stream. A zero field takes its default (DefaultStreamConfig),
// but for LogicalConfig's, which are required.
type StreamConfig struct {
	LogicalConfig
	// CatchUp bounds how long a snapshot waits for the stream to pass its position
	// before it is read without the stream's help; default 5s.
	CatchUp time.Duration
	// WarnRetained is the WAL the slot may retain before a warning; default 1 GiB.
	WarnRetained int64
	// NudgeAfter is how far, in bytes, the slot's restart position may lag its
	// confirmed position, with no transaction held, before the reading asks the server
	// to log a running-transactions record so that it moves; default 8 MiB.
	NudgeAfter int64
	// HoldBytes bounds the memory the transactions held for the next version take
	// (their changed keys); HoldWAL the WAL from the oldest of them to what was
	// received, which the slot retains for them; HoldFor how long the oldest may wait.
	// Past any of them (a pinned dataset, failing syncs, a lagging reader) the reading
	// lets their keys go: it keeps only which collections they changed, lets the slot
	// advance past them, and the next version compares those collections in full.
	// Defaults 64 MiB, 256 MiB and 5 minutes.
	HoldBytes, HoldWAL int64
	HoldFor            time.Duration
	// Observer hears the stream's events (snapshot.EventStreamStarted,
	// EventSlotCreated, …); nil for none.
	Observer snapshot.Observer
}

// DefaultStreamConfig returns the values Stream takes for StreamConfig's zero
// fields; it names no publication or slot.
func DefaultStreamConfig() StreamConfig {
	return StreamConfig{CatchUp: 5 * time.Second, WarnRetained: 1 << 30, NudgeAfter: 8 << 20,
		HoldBytes: 64 << 20, HoldWAL: 256 << 20, HoldFor: 5 * time.Minute}
}

// Validate reports the first unusable field, naming it: a missing publication or
// slot, or a negative duration or size. The error wraps snapshot.ErrInvalid.
func (c StreamConfig) Validate() error {
	if err := c.LogicalConfig.Validate(); err != nil {
		return err
	}
	switch {
	case c.CatchUp < 0:
		return fmt.Errorf("%w StreamConfig.CatchUp %s: must not be negative (0 takes the default)", snapshot.ErrInvalid, c.CatchUp)
	case c.WarnRetained < 0:
		return fmt.Errorf("%w StreamConfig.WarnRetained %d: must not be negative (0 takes the default)", snapshot.ErrInvalid, c.WarnRetained)
	case c.NudgeAfter < 0:
		return fmt.Errorf("%w StreamConfig.NudgeAfter %d: must not be negative (0 takes the default)", snapshot.ErrInvalid, c.NudgeAfter)
	case c.HoldBytes < 0:
		return fmt.Errorf("%w StreamConfig.HoldBytes %d: must not be negative (0 takes the default)", snapshot.ErrInvalid, c.HoldBytes)
	case c.HoldWAL < 0:
		return fmt.Errorf("%w StreamConfig.HoldWAL %d: must not be negative (0 takes the default)", snapshot.ErrInvalid, c.HoldWAL)
	case c.HoldFor < 0:
		return fmt.Errorf("%w StreamConfig.HoldFor %s: must not be negative (0 takes the default)", snapshot.ErrInvalid, c.HoldFor)
	}
	return nil
}

// withDefaults returns c with its zero fields set to DefaultStreamConfig's.
func (c StreamConfig) withDefaults() StreamConfig {
	d := DefaultStreamConfig()
	c.CatchUp = cmp.Or(c.CatchUp, d.CatchUp)
	c.WarnRetained = cmp.Or(c.WarnRetained, d.WarnRetained)
	c.NudgeAfter = cmp.Or(c.NudgeAfter, d.NudgeAfter)
	c.HoldBytes = cmp.Or(c.HoldBytes, d.HoldBytes)
	c.HoldWAL = cmp.Or(c.HoldWAL, d.HoldWAL)
	c.HoldFor = cmp.Or(c.HoldFor, d.HoldFor)
	return c
}

// StreamStats describes the stream, for metrics.
type StreamStats struct {
	// RetainedBytes is the WAL the slot keeps on the server.
	RetainedBytes int64
	// Held is how many committed transactions wait for a version, with their keys;
	// HeldBytes about the memory they take; LetGo how many more, whose keys were let
	// go (StreamConfig.HoldBytes), wait for a version that compares in full.
	Held      int
	HeldBytes int64
	LetGo     int
}

// maxStreamKeys bounds the changed keys kept per collection, in a transaction and in
// a version; past it, the collection is compared in full. (A version reads fewer by
// id when its parent is small: snapshot decides.)
const maxStreamKeys = 200_000

// streamStatusEvery is how often the reading confirms its position to the server and
// how long it waits for a message; retainedEvery how often it reports the slot's
// retained WAL.
const (
	streamStatusEvery = time.Second
	retainedEvery     = 10 * time.Second
)

// heldTxn is a committed transaction that changed watched collections.
type heldTxn struct {
	xid    uint32
	xid64  uint64 // xid with its epoch
	commit uint64 // its commit record's position: replayed from there
	end    uint64
	at     time.Time // when its commit was received
	// keys are the keys it changed (columns joined by NUL), with their collections,
	// in the order changed, repeats included: a slice, not maps, so that a held
	// transaction of one key takes some 150 bytes.
	keys  []heldKey
	dirty map[string]string // collection → why its keys are not known
	size  int64             // about the memory it takes, once committed
}

// heldKey is a key a transaction changed in a collection.
type heldKey struct{ collection, key string }

// heldOverhead is about what a held transaction takes beside its keys (the struct,
// its place in the held list), and keyOverhead what each key takes beside its bytes.
const (
	heldOverhead = 136
	keyOverhead  = 32
)

// measure sets t.size.
func (t *heldTxn) measure() {
	t.size = heldOverhead + int64(cap(t.keys))*keyOverhead
	for _, k := range t.keys {
		t.size += int64(len(k.key)+7) &^ 7
	}
	for c, why := range t.dirty {
		t.size += int64(len(c)+len(why)) + 64
	}
}

// collections returns the collections t changed keys of, once each.
func (t *heldTxn) collections() []string {
	var cs []string
	for _, k := range t.keys {
		if !slices.Contains(cs, k.collection) {
			cs = append(cs, k.collection)
		}
	}
	return cs
}

// letGo stands for held transactions whose keys the reading let go: the collections
// they changed (the next version compares those in full), and the range of their ids,
// which tells which snapshots see them all.
type letGo struct {
	lo, hi uint64 // the least and greatest id, with their epoch
	first  uint64 // the oldest one's commit position
	n      int
	dirty  map[string]string // collection → why
	// ids marks which ids from base on were let go, one bit each, so that a
	// transaction of someone else's still in progress (a long batch job) does not
	// keep them unseen; nil once they would not fit in maxLetGoBits (then any id in
	// progress between lo and hi counts).
	base uint64
	ids  []uint64
}

// maxLetGoBits bounds letGo.ids: 2^27 ids, 16 MiB (some 2.7 hours of 13,500 commits a
// second); letGoSlack is how far below the first id let go the bits begin, for
// transactions that began before it and committed after.
const (
	maxLetGoBits = 1 << 27
	letGoSlack   = 1 << 16
)

// add records the id x as let go.
func (g *letGo) add(x uint64) {
	g.lo, g.hi = min(g.lo, x), max(g.hi, x)
	if g.ids == nil || x < g.base || x-g.base >= maxLetGoBits {
		g.ids = nil
		return
	}
	w := (x - g.base) / 64
	if w >= uint64(len(g.ids)) {
		g.ids = append(g.ids, make([]uint64, w+1-uint64(len(g.ids)))...)
	}
	g.ids[w] |= 1 << ((x - g.base) % 64)
}

// has reports whether x may be an id let go.
func (g *letGo) has(x uint64) bool {
	if x < g.lo || x > g.hi {
		return false
	}
	if g.ids == nil {
		return true
	}
	w := (x - g.base) / 64
	return w < uint64(len(g.ids)) && g.ids[w]&(1<<((x-g.base)%64)) != 0
}

// seenBy reports whether the snapshot vis sees every transaction let go: each had
// completed when it was taken (below its xmax, and not in progress).
func (g *letGo) seenBy(vis visibility) bool {
	if g.hi < vis.xmin {
		return true
	}
	if g.hi >= vis.xmax {
		return false
	}
	for x := range vis.xip {
		if g.has(x) {
			return false
		}
	}
	return true
}

func (t *heldTxn) relevant() bool { return len(t.keys) > 0 || len(t.dirty) > 0 }

func (t *heldTxn) markDirty(collection, why string) {
	if t.dirty == nil {
		t.dirty = map[string]string{}
	}
	if _, ok := t.dirty[collection]; !ok {
		t.dirty[collection] = why
	}
	t.keys = slices.DeleteFunc(t.keys, func(k heldKey) bool { return k.collection == collection })
}

func (t *heldTxn) addKey(collection, key string) {
	if _, ok := t.dirty[collection]; ok {
		return
	}
	t.keys = append(t.keys, heldKey{collection, key})
	if len(t.keys) > maxStreamKeys {
		// Counted with repeats, and over every collection: a transaction this large
		// is compared in full.
		for _, c := range t.collections() {
			t.markDirty(c, fmt.Sprintf("over %d ids changed in one transaction", maxStreamKeys))
		}
	}
}

// streamRelation is what a relation message said, and which collections it feeds.
type streamRelation struct {
	msg *pglogrepl.RelationMessage
	// keyed maps a table collection to its key columns' positions in msg's columns.
	keyed map[string][]int
	// others are the collections the relation feeds that are re-read in full.
	others []string
}

// collections returns every collection the relation feeds.
func (r *streamRelation) collections() []string {
	cs := slices.Clone(r.others)
	for c := range r.keyed {
		cs = append(cs, c)
	}
	return cs
}

// stream is one reading of the slot.
type stream struct {
	cfg     StreamConfig
	reading string
	system  string
	start   uint64 // the slot's confirmed position when the reading began
	connCfg *pgx.ConnConfig
	tables  LogicalTables
	// publication fingerprints the publication's definition the reading reads
	// (publicationDigestSQL); barrier is the xmax of a snapshot taken after it was
	// read: a transaction spanning a change of the publication made before is below.
	publication string
	barrier     uint64

	mu        sync.Mutex
	held      []*heldTxn // in commit order
	heldBytes int64      // the sum of held's sizes
	gone      *letGo     // the transactions whose keys were let go; nil for none
	xidRef    uint64     // a recent id with its epoch, which gives the stream's ids theirs
	recv      uint64     // every commit before it has been received
	// moved is closed and replaced whenever recv moves.
	moved chan struct{}
	// fresh: nothing published by this reading yet; last is the position of the
	// version the pointer named when it last held what a snapshot read.
	fresh bool
	last  snapshot.Position
	rels  map[uint32]*streamRelation
	cur   *heldTxn // the transaction being received
	// logs are the key logs of bases read beside the stream, by collection
	// (stream_baselog.go).
	logs map[string]*keyLog

	// changed is Stream's callback (nil for none).
	changed func(Change)
}

// Stream reads the replication slot until ctx ends or the connection fails, and
// lets the snapshots opened meanwhile learn exactly which keys changed. It prepares
// the publication (PrepareLogical), creates the slot when it is missing, and starts
// a new one when the slot was invalidated, reporting it (snapshot.EventSlotLost: the next
// version is then compared in full, since the stream's history has a gap). changed
// is called for each committed transaction that changed a watched collection, and
// again, from the goroutine that opens a snapshot, when a snapshot does not yet see
// such a transaction (ReasonStreamUnseen); stats every few seconds. The caller must
// be the only reader (it holds the watch lease): a reader still attached to the slot
// is terminated. An invalid config (StreamConfig.Validate) fails at once.
func (s *Source) Stream(ctx context.Context, cfg StreamConfig, changed func(Change), stats func(StreamStats)) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	tables, err := s.PrepareLogical(ctx, cfg.LogicalConfig)
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, s.cfg)
	if err != nil {
		return s.connectError(err)
	}
	defer closeConn(ctx, conn)
	rcfg := s.cfg.Config.Copy()
	rcfg.RuntimeParams["replication"] = "database"
	repl, err := pgconn.ConnectConfig(ctx, rcfg)
	if err != nil {
		return s.connectError(err)
	}
	defer func() {
		cctx, cancel := snapshot.Detach(ctx, rollbackTimeout)
		defer cancel()
		_ = repl.Close(cctx)
	}()
	sys, err := pglogrepl.IdentifySystem(ctx, repl)
	if err != nil {
		return fmt.Errorf("identify system: %w", err)
	}
	st := &stream{cfg: cfg, reading: uuid.NewString(), tables: tables, connCfg: s.cfg,
		system: fmt.Sprintf("%s:%d:%s", sys.SystemID, sys.Timeline, sys.DBName),
		moved:  make(chan struct{}), fresh: true, rels: map[uint32]*streamRelation{}, changed: changed}
	if st.start, err = st.claimSlot(ctx, conn, repl); err != nil {
		return err
	}
	// The publication as this reading reads it; then the current snapshot's xmax,
	// which every transaction that may span a change of it before now is below, and
	// which gives the stream's 32-bit ids their epoch.
	if st.publication, err = publicationDigest(ctx, conn, cfg.Publication); err != nil {
		return err
	}
	if err := conn.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&st.xidRef); err != nil {
		return fmt.Errorf("read the source's transaction ids: %w", err)
	}
	st.barrier = st.xidRef
	args := []string{"proto_version '1'", "publication_names " + quoteLiteral(cfg.Publication)}
	if err := pglogrepl.StartReplication(ctx, repl, cfg.Slot, pglogrepl.LSN(st.start), pglogrepl.StartReplicationOptions{PluginArgs: args}); err != nil {
		return fmt.Errorf("start replication from slot %s: %w", cfg.Slot, err)
	}
	st.recv = st.start
	st.report(ctx, snapshot.EventStreamStarted, "from", lsnText(st.start), "reading", st.reading)
	s.stream.Store(st)
	defer s.stream.CompareAndSwap(st, nil)
	if changed != nil {
		// What committed before the slot's position (while no one read it, or before
		// it existed) is found by a sync now, compared in full if need be.
		changed(Change{LSN: st.start, At: time.Now(), Reason: ReasonWatchStarted})
	}
	return st.read(ctx, conn, repl, changed, stats)
}

// report tells the config's Observer, if any, of an event of the stream's slot.
func (st *stream) report(ctx context.Context, kind snapshot.EventKind, attrs ...any) {
	observe(ctx, st.cfg.Observer, kind, append([]any{"slot", st.cfg.Slot}, attrs...)...)
}

// ErrTablesChanged: a relation the stream follows was dropped (and maybe created
// again, a new relation): a new reading must prepare the publication for the tables
// the collections read now.
var ErrTablesChanged = errors.New("the tables the collections read changed")

// claimSlot makes the slot ready to read and returns its confirmed position: created
// when missing, created again when invalidated, and taken from a reader still
// attached to it.
func (st *stream) claimSlot(ctx context.Context, conn *pgx.Conn, repl *pgconn.PgConn) (uint64, error) {
	slot := st.cfg.Slot
	for attempt := 0; ; attempt++ {
		f, err := lookupSlot(ctx, conn, slot)
		if err != nil {
			return 0, fmt.Errorf("read slot %s: %w", slot, err)
		}
		switch {
		case !f.exists:
			res, err := pglogrepl.CreateReplicationSlot(ctx, repl, slot, "pgoutput",
				pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
			if err != nil {
				return 0, fmt.Errorf("%w: create replication slot %s: %w", ErrLogicalSetup, slot, err)
			}
			lsn, err := ParseLSN(res.ConsistentPoint)
			if err != nil {
				return 0, err
			}
			st.report(ctx, snapshot.EventSlotCreated, "at", lsnText(lsn))
			return lsn, nil
		case f.walStatus == WALLost:
			st.report(ctx, snapshot.EventSlotLost)
			if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot); err != nil {
				return 0, fmt.Errorf("drop invalidated slot %s: %w", slot, err)
			}
		case f.active && attempt < 20:
			// The lease is ours: whoever reads the slot lost it (a paused process).
			st.report(ctx, snapshot.EventSlotTaken, "pid", f.pid)
			if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend($1)", f.pid); err != nil {
				return 0, fmt.Errorf("end the slot's reader (pid %d): %w", f.pid, err)
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		case f.active:
			return 0, activeSlotError(slot, f.pid)
		default:
			if err := f.ours(slot); err != nil {
				return 0, err
			}
			var lsn string
			if err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&lsn); err != nil {
				return 0, fmt.Errorf("read slot %s: %w", slot, err)
			}
			return ParseLSN(lsn)
		}
	}
}

// read receives the stream until ctx ends or the connection fails.
func (st *stream) read(ctx context.Context, conn *pgx.Conn, repl *pgconn.PgConn, changed func(Change), stats func(StreamStats)) error {
	nudge := newNudger(ctx, st.connCfg, st.report, st.reading)
	defer nudge.close()
	slot := &slotWatch{st: st, conn: conn, stats: stats, nudge: nudge, sender: repl.PID()}
	nextStatus := time.Now()
	for {
		now := time.Now()
		if !now.Before(nextStatus) {
			if err := st.confirm(ctx, repl); err != nil {
				return err
			}
			nextStatus = now.Add(streamStatusEvery)
		}
		if err := slot.check(ctx, now); err != nil {
			return err
		}
		rctx, cancel := context.WithDeadline(ctx, nextStatus)
		msg, err := repl.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("receive from the replication stream: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return err
				}
				st.advance(uint64(ka.ServerWALEnd))
				// Answer at once: the server then sends the next keepalive as soon as
				// it has decoded further, which is how snapshots learn it did.
				nextStatus = time.Time{}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return err
				}
				if err := st.decode(ctx, xld.WALData, changed); err != nil {
					return err
				}
			}
		}
	}
}

// confirm tells the server what was received, and confirms (flush position) what no
// held transaction needs replayed.
func (st *stream) confirm(ctx context.Context, repl *pgconn.PgConn) error {
	st.mu.Lock()
	recv, ack := st.recv, st.ackLocked()
	st.mu.Unlock()
	err := pglogrepl.SendStandbyStatusUpdate(ctx, repl, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(recv), WALFlushPosition: pglogrepl.LSN(ack), WALApplyPosition: pglogrepl.LSN(ack)})
	if err != nil {
		return fmt.Errorf("confirm the stream's position: %w", err)
	}
	return nil
}

// ackLocked returns the position the slot may be confirmed to: the commit of the
// oldest held (or half-received) transaction, or, with none, what was received.
func (st *stream) ackLocked() uint64 {
	ack := st.recv
	if len(st.held) > 0 {
		ack = min(ack, st.held[0].commit)
	}
	if st.cur != nil {
		ack = min(ack, st.cur.commit)
	}
	return max(ack, st.start)
}

// advance records that every commit before lsn has been received.
func (st *stream) advance(lsn uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if lsn > st.recv && st.cur == nil {
		st.recv = lsn
		close(st.moved)
		st.moved = make(chan struct{})
	}
}

// decode handles one pgoutput message.
func (st *stream) decode(ctx context.Context, data []byte, changed func(Change)) error {
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return fmt.Errorf("decode the replication stream: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		st.relation(m)
	case *pglogrepl.BeginMessage:
		st.mu.Lock()
		st.cur = &heldTxn{xid: m.Xid, xid64: st.widenLocked(m.Xid), commit: uint64(m.FinalLSN)}
		st.mu.Unlock()
	case *pglogrepl.InsertMessage:
		st.tuple(m.RelationID, m.Tuple, "")
	case *pglogrepl.UpdateMessage:
		st.tuple(m.RelationID, m.NewTuple, "")
		if m.OldTuple != nil {
			st.tuple(m.RelationID, m.OldTuple, "")
		}
	case *pglogrepl.DeleteMessage:
		st.tuple(m.RelationID, m.OldTuple, "")
	case *pglogrepl.TruncateMessage:
		for _, id := range m.RelationIDs {
			st.tuple(id, nil, "truncated")
		}
	case *pglogrepl.CommitMessage:
		st.mu.Lock()
		t := st.cur
		st.cur = nil
		var why string
		if t != nil && t.relevant() {
			t.end, t.at = uint64(m.TransactionEndLSN), time.Now()
			t.measure()
			st.held = append(st.held, t)
			st.heldBytes += t.size
			st.logLocked(t)
			why = st.overLocked(t.end)
		}
		st.mu.Unlock()
		if why != "" {
			st.letGo(ctx, why)
		}
		st.advance(uint64(m.TransactionEndLSN))
		if t != nil && t.relevant() && changed != nil {
			changed(Change{LSN: uint64(m.CommitLSN), At: time.Now(), Reason: ReasonStream})
		}
	}
	return nil
}

// widenLocked returns the 32-bit id xid with its epoch: the one within 2^31 of the
// last id widened (or of the snapshot read at the start).
func (st *stream) widenLocked(xid uint32) uint64 {
	ref := st.xidRef
	x := ref&^0xffffffff | uint64(xid)
	switch {
	case x > ref && x-ref > 1<<31 && x >= 1<<32:
		x -= 1 << 32
	case x < ref && ref-x > 1<<31:
		x += 1 << 32
	}
	st.xidRef = max(ref, x)
	return x
}

// overLocked says which bound the held transactions passed, received up to end; ""
// for none.
func (st *stream) overLocked(end uint64) string {
	switch {
	case len(st.held) == 0:
		return ""
	case st.heldBytes > st.cfg.HoldBytes:
		return fmt.Sprintf("their keys take over %d bytes (watch.hold_bytes)", st.cfg.HoldBytes)
	case end > st.held[0].commit && int64(end-st.held[0].commit) > st.cfg.HoldWAL:
		return fmt.Sprintf("the slot would retain over %d bytes of WAL for them (watch.hold_wal)", st.cfg.HoldWAL)
	}
	return ""
}

// expire lets the held transactions go when the oldest waited longer than HoldFor.
func (st *stream) expire(ctx context.Context, now time.Time) {
	st.mu.Lock()
	old := len(st.held) > 0 && now.Sub(st.held[0].at) > st.cfg.HoldFor
	st.mu.Unlock()
	if old {
		st.letGo(ctx, fmt.Sprintf("the oldest waited over %s for a version (watch.hold_for)", st.cfg.HoldFor))
	}
}

// letGo forgets the held transactions' keys: it keeps which collections they changed
// and the range of their ids, and lets the slot be confirmed past them. The next
// version compares those collections in full; a new reading after a restart does too,
// its slot being confirmed past the parent's position.
func (st *stream) letGo(ctx context.Context, why string) {
	st.mu.Lock()
	n := len(st.held)
	if n == 0 {
		st.mu.Unlock()
		return
	}
	g := st.gone
	if g == nil {
		x := st.held[0].xid64
		g = &letGo{lo: x, hi: x, first: st.held[0].commit, dirty: map[string]string{}, base: x - min(x, letGoSlack), ids: []uint64{}}
		st.gone = g
	}
	for _, t := range st.held {
		g.add(t.xid64)
		g.first = min(g.first, t.commit)
		g.n++
		for _, c := range t.collections() {
			if _, ok := g.dirty[c]; !ok {
				g.dirty[c] = "its changes' keys were let go: " + why
			}
		}
		for c, w := range t.dirty {
			if _, ok := g.dirty[c]; !ok {
				g.dirty[c] = w
			}
		}
	}
	collections := slices.Sorted(maps.Keys(g.dirty))
	st.held, st.heldBytes = nil, 0
	st.mu.Unlock()
	st.report(ctx, snapshot.EventStreamLetGo, "why", why, "transactions", n, "collections", strings.Join(collections, ","))
}

// relation records a relation message; a relation whose columns changed since the
// last message about it is re-read in full by the transaction that follows.
func (st *stream) relation(m *pglogrepl.RelationMessage) {
	r := &streamRelation{msg: m, keyed: map[string][]int{}}
	keyed := map[string]bool{}
	for _, c := range st.tables.Collections {
		if c.Relation.OID != m.RelationID {
			continue
		}
		pos := make([]int, len(c.Key))
		ok := true
		for i, k := range c.Key {
			pos[i] = slices.IndexFunc(m.Columns, func(col *pglogrepl.RelationMessageColumn) bool { return col.Name == k })
			ok = ok && pos[i] >= 0
		}
		if ok {
			r.keyed[c.Collection] = pos
			keyed[c.Collection] = true
		}
	}
	for _, p := range st.tables.Published {
		if p.OID == m.RelationID {
			for _, c := range p.Collections {
				if !keyed[c] {
					r.others = append(r.others, c)
				}
			}
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if old := st.rels[m.RelationID]; old != nil && !sameColumns(old.msg, m) && st.cur != nil {
		for _, c := range r.collections() {
			st.cur.markDirty(c, "the table's definition changed")
		}
	}
	st.rels[m.RelationID] = r
}

func sameColumns(a, b *pglogrepl.RelationMessage) bool {
	return a.Namespace == b.Namespace && a.RelationName == b.RelationName &&
		slices.EqualFunc(a.Columns, b.Columns, func(x, y *pglogrepl.RelationMessageColumn) bool { return *x == *y })
}

// tuple records the keys a row (nil: the whole relation, for why) changed in the
// transaction being received.
func (st *stream) tuple(rel uint32, tup *pglogrepl.TupleData, why string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	t := st.cur
	if t == nil {
		return
	}
	r := st.rels[rel]
	if r == nil { // never happens: pgoutput describes a relation before its rows
		for _, c := range st.tables.Collections {
			t.markDirty(c.Collection, "a change to an undescribed relation")
		}
		return
	}
	for _, c := range r.others {
		t.markDirty(c, "not a table collection")
	}
	for c, pos := range r.keyed {
		switch {
		case why != "":
			t.markDirty(c, why)
		case tup == nil:
			t.markDirty(c, "a change without its key")
		default:
			key, ok := tupleKey(tup, pos)
			if !ok {
				t.markDirty(c, "a key column unchanged and stored out of line, or NULL")
				continue
			}
			t.addKey(c, key)
		}
	}
}

// tupleKey joins the key columns' text values with NUL (which text never holds).
func tupleKey(tup *pglogrepl.TupleData, pos []int) (string, bool) {
	var b strings.Builder
	for i, p := range pos {
		if p >= len(tup.Columns) || tup.Columns[p].DataType != pglogrepl.TupleDataTypeText {
			return "", false
		}
		if i > 0 {
			b.WriteByte(0)
		}
		b.Write(tup.Columns[p].Data)
	}
	return b.String(), true
}
