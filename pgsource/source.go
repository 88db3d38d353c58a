package pgsource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/snapshot"
)

// MaxIDBytes is the longest id a document may have.
const MaxIDBytes = 1024

// DefaultConnectTimeout bounds connecting (dial, TLS, authentication) when the DSN
// sets no connect_timeout: a server that accepts connections but never answers would
// otherwise hold a sync forever.
const DefaultConnectTimeout = 10 * time.Second

// closeTimeout bounds closing a connection, which outlives the caller's context so that
// a cancelled read still says goodbye (the server then ends its transaction at once).
const closeTimeout = 5 * time.Second

// rollbackTimeout bounds ending a snapshot's transaction to keep its connection, and
// beginning the next one on it: a server that does not answer at once has the
// connection closed instead (and Open connects anew).
const rollbackTimeout = time.Second

// keepFor is how long a connection is used for snapshots from when it connected. A
// session keeps the settings it connected with (a role's or database's search_path,
// for one), so a change to them is seen within this time.
var keepFor = 10 * time.Minute

// Source reads collections from the Postgres database at a DSN.
type Source struct {
	// Readers is how many connections read one large table at once, each a hash
	// partition of its keys, all in the same exported snapshot; default 1.
	Readers int
	// PartitionMinRows is the row count from which a table is read in parallel;
	// default 200,000.
	PartitionMinRows int64
	// BaseTransaction is the longest a base read beside the stream (OpenBase) holds
	// a source transaction open: it is read in chunks, each in a transaction of its
	// own. Zero means DefaultBaseTransaction; a negative value reads each base in one
	// transaction.
	BaseTransaction time.Duration
	// BaseChunkRows also ends a chunk of such a base after that many rows. Zero
	// means DefaultBaseChunkRows; a negative value ends chunks by time alone.
	BaseChunkRows int
	// BaseMarkRows is how often a base read in chunks says where it stands
	// (snapshot.ChunkedSnapshot's OnChunk), within a chunk as well as at its end,
	// so that at most that many rows are read again after a kill. Zero means
	// DefaultBaseMarkRows; a negative value says so at chunk ends alone.
	BaseMarkRows int
	// RowKeyBytes returns the bytes of the row key that stores document id of
	// collection (in any version), for Check's estimates of index sizes; nil counts
	// the id alone.
	RowKeyBytes func(collection, id string) int

	cfg         *pgx.ConnConfig
	collections []Collection

	mu       sync.Mutex
	idle     *pgx.Conn // the last snapshot's connection, its transaction ended, for the next Open
	idleBorn time.Time // when idle connected

	stream atomic.Pointer[stream] // the replication stream this process reads, if any
}

var _ snapshot.Source = (*Source)(nil)

// outputSettings pin every setting that changes how a value is written as text or
// JSON.
var outputSettings = map[string]string{
	"timezone":           "UTC",
	"datestyle":          "ISO, MDY",
	"intervalstyle":      "postgres",
	"bytea_output":       "hex",
	"extra_float_digits": "1",
	"xmloption":          "content",
}

// New returns a Source for the DSN and collections. It does not connect. The error
// for a malformed DSN does not repeat the DSN, which may hold a password.
func New(dsn string, collections []Collection) (*Source, error) {
	if err := ValidateCollections(collections); err != nil {
		return nil, err
	}
	if strings.TrimSpace(dsn) == "" {
		return nil, errors.New("postgres.dsn: required (or set SNAPFLIP_POSTGRES_DSN)")
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("postgres.dsn: cannot parse the connection string (its text is not shown because it may hold a password)")
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "snapflip-syncer"
	}
	// Ids and documents must come out the same whatever the server's, database's or
	// role's defaults: the time zone, the date and interval styles (a date key
	// 2024-01-02 is "02/01/2024" under DateStyle 'SQL, DMY'), bytea as hex, floats
	// exact and shortest.
	for k, v := range outputSettings {
		cfg.RuntimeParams[k] = v
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	return &Source{Readers: 1, PartitionMinRows: 200_000, cfg: cfg, collections: collections}, nil
}

// Collections returns the collection names in configured order.
func (s *Source) Collections() []string {
	names := make([]string, len(s.collections))
	for i, c := range s.collections {
		names[i] = c.Name
	}
	return names
}

// Ping connects once to prove the database is reachable.
func (s *Source) Ping(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, s.cfg)
	if err != nil {
		return s.connectError(err)
	}
	return closeConn(ctx, conn)
}

// closeConn closes a connection within closeTimeout, even when ctx has ended. Closing
// ends the connection's transaction too.
func closeConn(ctx context.Context, c *pgx.Conn) error {
	ctx, cancel := snapshot.Detach(ctx, closeTimeout)
	defer cancel()
	return c.Close(ctx)
}

// Describe names the database without its credentials: "127.0.0.1:5432 database app".
func (s *Source) Describe() string {
	return fmt.Sprintf("%s:%d database %s", s.cfg.Host, s.cfg.Port, s.cfg.Database)
}

func (s *Source) connectError(err error) error {
	return fmt.Errorf("connect to postgres at %s:%d database %s: %w", s.cfg.Host, s.cfg.Port, s.cfg.Database, err)
}

var snapshotTx = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}

// begin begins the snapshot transaction on the connection the last snapshot left
// (a new backend costs Postgres about as much CPU as a small delta's scans, and
// starts with its catalog caches cold), or on a new one when there is none or it no
// longer answers within rollbackTimeout.
func (s *Source) begin(ctx context.Context) (conn *pgx.Conn, born time.Time, tx pgx.Tx, err error) {
	s.mu.Lock()
	conn, born = s.idle, s.idleBorn
	s.idle = nil
	s.mu.Unlock()
	if conn != nil {
		bctx, cancel := context.WithTimeout(ctx, min(s.cfg.ConnectTimeout, rollbackTimeout))
		tx, err = conn.BeginTx(bctx, snapshotTx)
		cancel()
		if err == nil {
			return conn, born, tx, nil
		}
		_ = closeConn(ctx, conn)
		if ctx.Err() != nil {
			return nil, born, nil, ctx.Err()
		}
	}
	born = time.Now()
	if conn, err = pgx.ConnectConfig(ctx, s.cfg); err != nil {
		return nil, born, nil, s.connectError(err)
	}
	if tx, err = conn.BeginTx(ctx, snapshotTx); err != nil {
		_ = closeConn(ctx, conn)
		return nil, born, nil, fmt.Errorf("begin snapshot transaction: %w", err)
	}
	return conn, born, tx, nil
}

// keep ends conn's transaction and keeps conn for the next Open, or closes it when
// the transaction does not end at once, conn connected keepFor ago or more, or a
// connection is kept already.
func (s *Source) keep(ctx context.Context, conn *pgx.Conn, born time.Time, tx pgx.Tx) error {
	if !conn.IsClosed() && time.Since(born) < keepFor {
		rctx, cancel := snapshot.Detach(ctx, rollbackTimeout)
		err := tx.Rollback(rctx)
		cancel()
		if err == nil && conn.PgConn().TxStatus() == 'I' {
			s.mu.Lock()
			if s.idle == nil {
				s.idle, s.idleBorn, conn = conn, born, nil
			}
			s.mu.Unlock()
			if conn == nil {
				return nil
			}
		}
	}
	return closeConn(ctx, conn)
}

// Close closes the connection Open keeps between snapshots, if any.
func (s *Source) Close(ctx context.Context) error {
	s.mu.Lock()
	conn := s.idle
	s.idle = nil
	s.mu.Unlock()
	if conn == nil {
		return nil
	}
	return closeConn(ctx, conn)
}

// Open connects and begins one REPEATABLE READ, READ ONLY transaction, whose first
// statement takes the snapshot and records the WAL position inside it. The key of a
// table collection that names none is inferred then, inside the snapshot; Open fails,
// naming the collection, when it cannot be.
func (s *Source) Open(ctx context.Context) (snapshot.SourceSnapshot, error) {
	return s.open(ctx, nil)
}

// open begins the snapshot (start), then fingerprints every collection in it. A
// failure after start ends the snapshot's transaction as Close does.
func (s *Source) open(ctx context.Context, since *snapshot.Position) (snapshot.SourceSnapshot, error) {
	return s.openOf(ctx, since, s.collections, nil)
}

// openOf is open for the collections cols alone: the snapshot's transaction touches
// no other table, so it takes no lock on them. The collections held are not
// measured (see measure).
func (s *Source) openOf(ctx context.Context, since *snapshot.Position, cols []Collection, held []string) (_ snapshot.SourceSnapshot, err error) {
	sn, err := s.start(ctx, since, cols)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = sn.Close(ctx)
		}
	}()
	// Where the rows are, for a later version's stream delta to compare (its parent
	// may have been read before the stream was).
	if sn.pos.Files, err = tableFiles(ctx, sn.tx, cols); err != nil {
		return nil, fmt.Errorf("the files of the tables: %w", err)
	}
	for _, c := range cols {
		if err := sn.measure(ctx, sn.reads[c.Name], since, slices.Contains(held, c.Name)); err != nil {
			return nil, fmt.Errorf("collection %s: %w", c.Name, err)
		}
	}
	if s.Readers > 1 {
		if err := sn.tx.QueryRow(ctx, exportSnapshotSQL).Scan(&sn.exported); err != nil {
			return nil, fmt.Errorf("export snapshot: %w", err)
		}
	}
	return sn, nil
}

// start begins the snapshot's transaction and reads, inside it, the WAL position,
// the collections' keys, the cluster's identity, and what the replication stream
// says of the snapshot. A failure closes the connection.
func (s *Source) start(ctx context.Context, since *snapshot.Position, cols []Collection) (_ *snap, err error) {
	conn, born, tx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = closeConn(ctx, conn)
		}
	}()
	var lsnText, snapText string
	var recovery bool
	var next int64
	if err := tx.QueryRow(ctx, snapshotPositionSQL).Scan(&lsnText, &snapText, &recovery, &next); err != nil {
		return nil, fmt.Errorf("read source position: %w", err)
	}
	lsn, err := ParseLSN(lsnText)
	if err != nil {
		return nil, err
	}
	keys, err := resolveKeys(ctx, tx, cols)
	if err != nil {
		return nil, err
	}
	reads := make(map[string]*collectionRead, len(cols))
	for _, c := range cols {
		cr := &collectionRead{c: c, key: keys[c.Name], parts: 1}
		if cr.byteOrder, err = needsByteOrder(ctx, conn, c, cr.key); err != nil {
			return nil, fmt.Errorf("collection %s: %w", c.Name, err)
		}
		reads[c.Name] = cr
	}
	system, err := systemID(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("read the cluster's identity: %w", err)
	}
	sn := &snap{src: s, conn: conn, born: born, tx: tx, reads: reads, extra: map[int]*pgx.Conn{},
		pos: snapshot.Position{LSN: lsn, PgSnapshot: snapText, Recovery: recovery, NextXid: uint64(max(next, 0)), Config: fingerprint(cols, keys),
			Configs: collectionFingerprints(cols, keys), Fingerprints: map[string]string{}, Definitions: map[string]string{}, System: system}}
	if st := s.stream.Load(); st != nil {
		if sn.delta, err = st.delta(ctx, snapText, lsn, since); err != nil {
			return nil, err
		}
		sn.pos.Stream = sn.delta.pos
	}
	return sn, nil
}

// snapshotPositionSQL reads the WAL position (replayed, on a standby), the
// transaction's snapshot ("xmin:xmax:xip,…"), whether the server is in recovery, and
// the transaction id it would assign next. That id is read without assigning one:
// age() of a 32-bit id measures from it (in a transaction that has none of its own),
// and xmin gives the epoch, being within 2^31 of it.
const snapshotPositionSQL = `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
	ELSE pg_current_wal_insert_lsn() END)::text, s::text, pg_is_in_recovery(),
	pg_snapshot_xmin(s)::text::bigint + age(pg_snapshot_xmin(s)::xid)
	FROM pg_current_snapshot() AS s`

// exportSnapshotSQL exports the transaction's snapshot for other connections to
// import.
const exportSnapshotSQL = "SELECT pg_export_snapshot()"

// measure fingerprints one collection at the snapshot's position: from the stream's
// keys when they tell every change since the parent (streamed), else by reading it
// (fingerprint). A table counted at PartitionMinRows rows or more is read in Readers
// partitions.
func (r *snap) measure(ctx context.Context, cr *collectionRead, since *snapshot.Position, held bool) error {
	if ok, err := r.streamed(ctx, cr, since); err != nil || ok {
		return err
	}
	if fp, ok := heldFingerprint(since, cr.c.Name, held); ok {
		// The version holds the collection at its last state (snapshot.HoldingOpener):
		// its definitions tell whether it is held still, and counting its rows would
		// scan the table its base is being read from. Uncounted, ScanChanged answers
		// not ok, so that a read of it is a whole one.
		cols, err := tableDefinitions(ctx, r.tx, cr.c)
		if err != nil {
			return fmt.Errorf("definitions: %w", err)
		}
		r.pos.Fingerprints[cr.c.Name], r.pos.Definitions[cr.c.Name] = fp, definitionsOf(cols)
		return nil
	}
	fp, defs, rows, err := r.fingerprint(ctx, cr, since)
	if err != nil {
		return fmt.Errorf("fingerprint: %w", err)
	}
	if fp == "" {
		return nil
	}
	r.pos.Fingerprints[cr.c.Name], r.pos.Definitions[cr.c.Name] = fp, defs
	cr.rows, cr.counted = rows, true
	if r.src.Readers > 1 && rows >= r.src.PartitionMinRows {
		cr.parts = r.src.Readers
	}
	return nil
}

// streamed fingerprints a collection from the keys the stream knows changed since
// the parent, without a count or a read, when they are the changes of the table the
// snapshot reads: its definitions and files are the parent's. It returns false when
// they are not.
func (r *snap) streamed(ctx context.Context, cr *collectionRead, since *snapshot.Position) (bool, error) {
	known, ok := r.delta.known[cr.c.Name]
	if !ok || cr.byteOrder {
		return false, nil
	}
	name := cr.c.Name
	cols, err := tableDefinitions(ctx, r.tx, cr.c)
	if err != nil {
		return false, fmt.Errorf("definitions: %w", err)
	}
	defs := definitionsOf(cols)
	files, parentFiles := r.pos.Files[name], since.Files[name]
	same := cols != "" && defs == since.Definitions[name] && files != "" && files == parentFiles && filesOf(files, known.oid)
	parent := since.Fingerprints[name]
	if !same || parent == "" {
		return false, nil
	}
	r.pos.Definitions[name] = defs
	r.pos.Fingerprints[name] = streamFingerprint(parent, known.keys, r.pos)
	cr.keyed = known
	return true, nil
}

// heldFingerprint returns the fingerprint since gives the collection name, when the
// version holds it (held) and since gives one.
func heldFingerprint(since *snapshot.Position, name string, held bool) (string, bool) {
	if !held || since == nil {
		return "", false
	}
	fp, ok := since.Fingerprints[name]
	return fp, ok
}

// ParseLSN parses a Postgres LSN, "16/B374D848".
func ParseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%w LSN %q", snapshot.ErrInvalid, s)
	}
	return h<<32 | l, nil
}

// snap is one open snapshot transaction, plus the connections of parallel readers
// that imported it.
type snap struct {
	src      *Source
	conn     *pgx.Conn
	born     time.Time // when conn connected
	tx       pgx.Tx
	pos      snapshot.Position
	reads    map[string]*collectionRead // by collection name, one for each configured
	exported string

	mu    sync.Mutex
	extra map[int]*pgx.Conn // partition → its connection, in the exported snapshot

	// delta is what the replication stream said about the snapshot.
	delta streamDelta
}

// collectionRead is what a snapshot knows about reading one collection.
type collectionRead struct {
	c   Collection
	key []string // the key columns, configured or inferred
	// byteOrder: the one-column key must also be ordered by its id's bytes (see
	// needsByteOrder).
	byteOrder bool
	// rows is the exact row count of a table collection, when counted.
	rows    int64
	counted bool
	parts   int // how many hash partitions it is read in
	// keyed are the changed keys the replication stream knows exactly, when they
	// stand in for a count and a fingerprint; nil otherwise.
	keyed *streamKeys
	// modes holds changeMode's answer per parent, so that ScanChanged and a ScanSince
	// that follows it ask the catalog once.
	modes map[*snapshot.Position]changePlan
	// pass is what fingerprint's pass found; nil when none ran.
	pass *changedPass
}

// read returns the collection's read, or an error wrapping snapshot.ErrNotFound.
func (r *snap) read(collection string) (*collectionRead, error) {
	cr, ok := r.reads[collection]
	if !ok {
		return nil, fmt.Errorf("collection %q: %w", collection, snapshot.ErrNotFound)
	}
	return cr, nil
}

var _ snapshot.PartitionedSnapshot = (*snap)(nil)

func (r *snap) Position() snapshot.Position { return r.pos }

// Rows returns the collection's row count when it was counted cheaply (tables).
func (r *snap) Rows(collection string) (int64, bool) {
	cr, ok := r.reads[collection]
	if !ok {
		return 0, false
	}
	return cr.rows, cr.counted
}

// Partitions returns how many parts the collection is read in.
func (r *snap) Partitions(collection string) int {
	if cr, ok := r.reads[collection]; ok && cr.parts > 0 {
		return cr.parts
	}
	return 1
}

// partitionConn returns a connection for partition part > 0, in the exported
// snapshot (importSnapshot), kept until Close.
func (r *snap) partitionConn(ctx context.Context, part int) (*pgx.Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.extra[part]; ok {
		return c, nil
	}
	c, err := r.importSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	r.extra[part] = c
	return c, nil
}

// importSnapshot returns a new connection whose REPEATABLE READ transaction imports
// the exported snapshot, so that it reads the same snapshot as the main transaction.
// Its lock waits end after importLockTimeout: the main transaction holds its tables'
// locks already, so a lock this connection waits for is one a DDL statement queued
// behind the main transaction is granted first, and it waits for the main transaction
// to end, which waits for this connection.
func (r *snap) importSnapshot(ctx context.Context) (*pgx.Conn, error) {
	c, err := pgx.ConnectConfig(ctx, r.src.cfg)
	if err != nil {
		return nil, r.src.connectError(err)
	}
	if _, err := c.Exec(ctx, beginImportSQL); err != nil {
		_ = closeConn(ctx, c)
		return nil, err
	}
	if _, err := c.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(r.exported)); err != nil {
		_ = closeConn(ctx, c)
		return nil, fmt.Errorf("import snapshot: %w", err)
	}
	if _, err := c.Exec(ctx, setLocalSQL("lock_timeout", importLockTimeout)); err != nil {
		_ = closeConn(ctx, c)
		return nil, err
	}
	return c, nil
}

// beginImportSQL begins the transaction that imports an exported snapshot, which
// must be REPEATABLE READ.
const beginImportSQL = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"

// importLockTimeout is importSnapshot's lock_timeout.
const importLockTimeout = "1s"

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// setLocalSQL sets the setting to value for the rest of the transaction.
func setLocalSQL(setting, value string) string {
	return "SET LOCAL " + setting + " = " + quoteLiteral(value)
}

// rowAlias names the collection's row in the generated SQL.
const rowAlias = "t"

// selectSQL returns the statement that streams a collection (or one hash partition of
// it) with the given key columns: each row's id (see ID) and the row as JSON, in key
// order, so a duplicate id is next to its twin (twins hash alike, so they share a
// partition).
func selectSQL(c Collection, key []string, byteOrder bool, part, parts int) string {
	// The row's alias is only ever used qualified (t.* and t."key"): an unqualified t
	// means a column named t when the row has one, and the whole row would be served
	// as that column's value. (A query pasted from psql often ends in ';', which
	// rowsSQL leaves out: a syntax error inside the subquery it becomes.)
	id := keySQL(key)
	q := "SELECT " + id + ", " + docSQL + " FROM " + rowsFromSQL(c)
	if parts > 1 {
		// A NULL id hashes to NULL, which no partition would match: it goes to
		// partition 0, where the scan fails on it as a whole read does.
		q += fmt.Sprintf(" WHERE (coalesce(hashtext(%s), 0) & 2147483647) %% %d = %d", id, parts, part)
	}
	return q + " ORDER BY " + orderSQL(key, byteOrder)
}

// Scan streams a whole collection.
func (r *snap) Scan(ctx context.Context, collection string, fn func(snapshot.Document) error) error {
	return r.ScanPartition(ctx, collection, 0, 1, fn)
}

// ScanPartition streams one of parts hash partitions of a collection, failing on a
// NULL, empty, oversized, non-UTF-8 or duplicate key. Partition 0 reads on the main
// transaction; the others on connections that imported its snapshot.
func (r *snap) ScanPartition(ctx context.Context, collection string, part, parts int, fn func(snapshot.Document) error) error {
	cr, err := r.read(collection)
	if err != nil {
		return err
	}
	var on querier = r.tx
	if part > 0 {
		if on, err = r.partitionConn(ctx, part); err != nil {
			return err
		}
	}
	rows, err := on.Query(ctx, selectSQL(cr.c, cr.key, cr.byteOrder, part, parts))
	if err != nil {
		return fmt.Errorf("query %s: %w", describe(cr.c), err)
	}
	return readRows(rows, cr.c, cr.key, false, fn)
}

// readRows streams a scan's (id, JSON) rows to fn, failing on a NULL, empty,
// oversized, non-UTF-8 or duplicate key. With byteOrder the ids must come in strictly
// increasing byte order; a NULL document is then passed on as a nil Body, but not
// under an id no version can hold (NULL, empty, oversized or not UTF-8): such a row
// is a key the stream named that is gone (written, then deleted or changed again),
// for which there is nothing to delete.
func readRows(rows rowReader, c Collection, key []string, byteOrder bool, fn func(snapshot.Document) error) error {
	defer rows.Close()
	var prev []byte
	var n int64
	for rows.Next() {
		vals := rows.RawValues()
		id, body := vals[0], vals[1]
		if byteOrder && body == nil && (len(id) == 0 || len(id) > MaxIDBytes || !utf8.Valid(id)) {
			continue
		}
		switch {
		case id == nil && len(key) > 1:
			return fmt.Errorf("%w: NULL key: a NULL in %s (row %d of %s)", snapshot.ErrSource, describeKey(key), n+1, describe(c))
		case id == nil:
			return fmt.Errorf("%w: NULL key in %s (row %d of %s)", snapshot.ErrSource, describeKey(key), n+1, describe(c))
		case len(id) == 0:
			return fmt.Errorf("%w: empty key in %s (row %d)", snapshot.ErrSource, describeKey(key), n+1)
		case len(id) > MaxIDBytes:
			return fmt.Errorf("%w: key %q… in %s is %d bytes, over the limit of %d",
				snapshot.ErrSource, id[:64], describeKey(key), len(id), MaxIDBytes)
		case !utf8.Valid(id):
			return fmt.Errorf("%w: key %q in %s is not valid UTF-8", snapshot.ErrSource, id, describeKey(key))
		case prev != nil && string(prev) == string(id):
			return fmt.Errorf("%w: duplicate key %q in %s", snapshot.ErrSource, id, describeKey(key))
		case byteOrder && prev != nil && string(id) < string(prev):
			return fmt.Errorf("%s: ids out of byte order: %q after %q (the server's \"C\" collation does not compare bytes)",
				describe(c), id, prev)
		}
		prev = append(prev[:0], id...)
		n++
		doc := snapshot.Document{ID: string(id)}
		if body != nil {
			doc.Body = append([]byte{}, body...)
		}
		if err := fn(doc); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s after %d rows: %w", describe(c), n, err)
	}
	return nil
}

func describe(c Collection) string {
	if c.Table != "" {
		return "table " + c.Table
	}
	return "query"
}

// Close ends the transactions: the partitions' by closing their connections, each
// within closeTimeout even when ctx has ended, and the snapshot's own by a ROLLBACK
// within rollbackTimeout, which keeps its connection for the source's next Open, or
// else by closing it too.
func (r *snap) Close(ctx context.Context) error {
	r.mu.Lock()
	for part, c := range r.extra {
		_ = closeConn(ctx, c)
		delete(r.extra, part)
	}
	r.mu.Unlock()
	if r.conn == nil {
		return nil
	}
	err := r.src.keep(ctx, r.conn, r.born, r.tx)
	r.conn = nil
	return err
}
