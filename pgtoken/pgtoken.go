package pgtoken

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/snapshot"
)

// Querier runs a query that returns one row. *pgx.Conn, *pgxpool.Pool and pgx.Tx
// are Queriers.
type Querier interface {
	// QueryRow runs sql with args; the row's Scan reports the query's error,
	// pgx.ErrNoRows for none.
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// FromTx returns the token of the transaction tx, "x:" || pg_current_xact_id(): a
// version covers it once it was read after tx ended, so it holds what tx wrote. Take it
// inside the writing transaction (before or after its writes: a transaction has one
// id, assigned on first use), and hand it on once tx committed: a read with it before
// then waits for the commit. Unlike Now, it costs no query after the commit, and asks
// for this transaction alone, where Now's token asks for everything committed when it
// was taken.
func FromTx(ctx context.Context, tx pgx.Tx) (string, error) {
	var tok string
	if err := tx.QueryRow(ctx, `SELECT 'x:' || pg_current_xact_id()`).Scan(&tok); err != nil {
		return "", fmt.Errorf("pgtoken: transaction id: %w", err)
	}
	return tok, nil
}

// Now returns the token of everything committed so far on the server q reaches,
// "s:" || pg_current_snapshot(): a version covers it once it holds every transaction
// that snapshot saw committed. Take it after the write's commit, on any connection to
// the server that committed it: a standby's snapshot may predate the commit, and a
// transaction's own, in REPEATABLE READ or SERIALIZABLE, is the one it took at its
// first statement. A snapshot too long for a token (over 1024 bytes: some 90
// transactions in progress at once) drops its newest in-progress transactions, as the
// API does with its own tokens: the token then asks for more, never less.
func Now(ctx context.Context, q Querier) (string, error) {
	var snap string
	if err := q.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
		return "", fmt.Errorf("pgtoken: snapshot: %w", err)
	}
	tok := snapshot.SnapshotToken(snap, "")
	if tok == "" {
		return "", fmt.Errorf("pgtoken: snapshot %q: not pg_current_snapshot()'s xmin:xmax:xip", snap)
	}
	return tok, nil
}
