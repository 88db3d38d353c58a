package pgsource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/snapshot"
)

// MaxIDBytes is the longest id a document may have.
const MaxIDBytes = 1024

// Source reads collections from the Postgres database at a DSN.
type Source struct {
	cfg         *pgx.ConnConfig
	collections []Collection
	byName      map[string]Collection
	fingerprint string
}

var _ snapshot.Source = (*Source)(nil)

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
	// Timestamps must come out the same whatever the server's default zone.
	cfg.RuntimeParams["timezone"] = "UTC"
	s := &Source{cfg: cfg, collections: collections, byName: map[string]Collection{}, fingerprint: fingerprint(collections)}
	for _, c := range collections {
		s.byName[c.Name] = c
	}
	return s, nil
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
	return conn.Close(ctx)
}

func (s *Source) connectError(err error) error {
	return fmt.Errorf("connect to postgres at %s:%d database %s: %w", s.cfg.Host, s.cfg.Port, s.cfg.Database, err)
}

// Open connects and begins one REPEATABLE READ, READ ONLY transaction, whose first
// statement takes the snapshot and records the WAL position inside it.
func (s *Source) Open(ctx context.Context) (snapshot.SourceSnapshot, error) {
	conn, err := pgx.ConnectConfig(ctx, s.cfg)
	if err != nil {
		return nil, s.connectError(err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("begin snapshot transaction: %w", err)
	}
	var lsnText, snapText string
	err = tx.QueryRow(ctx, `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
		ELSE pg_current_wal_insert_lsn() END)::text, pg_current_snapshot()::text`).Scan(&lsnText, &snapText)
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("read source position: %w", err)
	}
	lsn, err := ParseLSN(lsnText)
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	pos := snapshot.Position{LSN: lsn, Snapshot: snapText, Config: s.fingerprint, Fingerprints: map[string]string{}}
	for _, c := range s.collections {
		fp, err := tableFingerprint(ctx, tx, c)
		if err != nil {
			conn.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("collection %s: fingerprint: %w", c.Name, err)
		}
		if fp != "" {
			pos.Fingerprints[c.Name] = fp
		}
	}
	return &snap{src: s, conn: conn, tx: tx, pos: pos}, nil
}

// tableFingerprint returns a fingerprint of a table collection's contents as the
// snapshot sees them, cheap to compute (no row is turned into JSON): the row count,
// the sum of a hash of every visible row version's xmin, and the column definitions.
// Every insert or update writes row versions with a new xmin and every delete changes
// the count or the sum, so changed contents change the fingerprint. It returns ""
// for a query collection or a relation that is not a table (a view), which can only be
// compared by reading it. Known gap: a change that rewrites no row (an enum label
// renamed) is not seen; a forced or TTL republish picks it up.
func tableFingerprint(ctx context.Context, tx pgx.Tx, c Collection) (string, error) {
	if c.Table == "" {
		return "", nil
	}
	name := pgx.Identifier(strings.Split(c.Table, ".")).Sanitize()
	var kind string
	err := tx.QueryRow(ctx, `SELECT coalesce((SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)), '')`, name).Scan(&kind)
	if err != nil {
		return "", err
	}
	if kind != "r" && kind != "p" {
		return "", nil
	}
	var rows, cols string
	err = tx.QueryRow(ctx, `SELECT count(*)::text || ':' || coalesce(sum(hashint8extended(xmin::text::bigint, 0)::numeric), 0)::text FROM `+name).Scan(&rows)
	if err != nil {
		return "", err
	}
	err = tx.QueryRow(ctx, `SELECT coalesce(string_agg(attname || ' ' || format_type(atttypid, atttypmod) || ' ' || coalesce(attmissingval::text, ''), ',' ORDER BY attnum), '')
		FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`, name).Scan(&cols)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(rows + "\n" + cols))
	return hex.EncodeToString(sum[:12]), nil
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

// snap is one open snapshot transaction.
type snap struct {
	src  *Source
	conn *pgx.Conn
	tx   pgx.Tx
	pos  snapshot.Position
}

func (r *snap) Position() snapshot.Position { return r.pos }

// selectSQL returns the statement that streams a collection: each row's key as text
// and the row as JSON, in key order (so a duplicate key is next to its twin).
func selectSQL(c Collection) string {
	from := c.Query
	if c.Table != "" {
		from = "SELECT * FROM " + pgx.Identifier(strings.Split(c.Table, ".")).Sanitize()
	}
	key := "t." + pgx.Identifier{c.Key}.Sanitize()
	return "SELECT (" + key + ")::text, to_json(t)::text FROM (" + from + "\n) AS t ORDER BY " + key
}

// Scan streams one collection, failing on a NULL, empty, oversized, non-UTF-8 or
// duplicate key.
func (r *snap) Scan(ctx context.Context, collection string, fn func(snapshot.Document) error) error {
	c, ok := r.src.byName[collection]
	if !ok {
		return fmt.Errorf("collection %q: %w", collection, snapshot.ErrNotFound)
	}
	rows, err := r.tx.Query(ctx, selectSQL(c))
	if err != nil {
		return fmt.Errorf("query %s: %w", describe(c), err)
	}
	defer rows.Close()
	var prev []byte
	var n int64
	for rows.Next() {
		vals := rows.RawValues()
		key, body := vals[0], vals[1]
		switch {
		case key == nil:
			return fmt.Errorf("%w: NULL key in column %s (row %d of %s)", snapshot.ErrSource, c.Key, n+1, describe(c))
		case len(key) == 0:
			return fmt.Errorf("%w: empty key in column %s (row %d)", snapshot.ErrSource, c.Key, n+1)
		case len(key) > MaxIDBytes:
			return fmt.Errorf("%w: key %q… in column %s is %d bytes, over the limit of %d",
				snapshot.ErrSource, key[:64], c.Key, len(key), MaxIDBytes)
		case !utf8.Valid(key):
			return fmt.Errorf("%w: key %q in column %s is not valid UTF-8", snapshot.ErrSource, key, c.Key)
		case prev != nil && string(prev) == string(key):
			return fmt.Errorf("%w: duplicate key %q in column %s", snapshot.ErrSource, key, c.Key)
		}
		prev = append(prev[:0], key...)
		n++
		doc := snapshot.Document{ID: string(key), Body: append([]byte(nil), body...)}
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

// Close ends the transaction and the connection.
func (r *snap) Close(ctx context.Context) error {
	if r.conn == nil {
		return nil
	}
	_ = r.tx.Rollback(ctx)
	err := r.conn.Close(ctx)
	r.conn = nil
	return err
}
