package pgtoken_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgtoken"
	"github.com/snapflip/snapflip/snapshot"
)

// A connection and a transaction take the queries (a *pgxpool.Pool's QueryRow is
// theirs too).
var (
	_ pgtoken.Querier = (*pgx.Conn)(nil)
	_ pgtoken.Querier = pgx.Tx(nil)
)

// TestTokens: FromTx names the writing transaction; Now, taken on another connection
// before the commit, does not see it, and taken after, does, by Postgres's own
// visibility rule and by the API's; the tokens parse as the API parses them.
func TestTokens(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.Postgres(t)
	writer := testenv.Connect(t, ctx, dsn)
	defer writer.Close(ctx)
	conn := testenv.Connect(t, ctx, dsn)
	defer conn.Close(ctx)
	if _, err := writer.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}

	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op once committed
	if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	write, err := pgtoken.FromTx(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	var xid string
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if write != "x:"+xid {
		t.Errorf("FromTx = %q; want x:%s", write, xid)
	}
	during, err := pgtoken.Now(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := pgtoken.Now(ctx, writer)
	if err != nil {
		t.Fatal(err)
	}
	rtx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inTx, err := pgtoken.Now(ctx, rtx)
	if err != nil {
		t.Fatal(err)
	}
	_ = rtx.Rollback(ctx)

	wt, err := snapshot.ParseToken(write)
	if err != nil || wt.Kind != snapshot.TokenXid {
		t.Fatalf("the API parses FromTx's %q as %+v, %v; want a transaction's token", write, wt, err)
	}
	for _, tc := range []struct {
		name, tok string
		sees      bool
	}{
		{"taken during the write", during, false},
		{"taken after the commit", after, true},
		{"taken in a transaction after the commit", inTx, true},
	} {
		st, err := snapshot.ParseToken(tc.tok)
		if err != nil || st.Kind != snapshot.TokenSnapshot || !strings.HasPrefix(tc.tok, "s:") {
			t.Errorf("Now %s = %q: the API parses it as %+v, %v; want a snapshot's token", tc.name, tc.tok, st, err)
			continue
		}
		var visible bool
		if err := conn.QueryRow(ctx, `SELECT pg_visible_in_snapshot($1::xid8, $2::pg_snapshot)`,
			xid, strings.TrimPrefix(tc.tok, "s:")).Scan(&visible); err != nil {
			t.Fatal(err)
		}
		if visible != tc.sees || st.Snapshot.Covers(wt) != tc.sees {
			t.Errorf("Now %s = %q: Postgres sees the write %v, the API %v; want %v", tc.name, tc.tok, visible, st.Snapshot.Covers(wt), tc.sees)
		}
	}
}

// TestErrors: a query that fails is an error, not a token.
func TestErrors(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1/0`); err == nil {
		t.Fatal("1/0 succeeded")
	}
	if tok, err := pgtoken.FromTx(ctx, tx); err == nil || tok != "" {
		t.Errorf("FromTx in an aborted transaction = %q, %v; want an error", tok, err)
	}
	if tok, err := pgtoken.Now(ctx, tx); err == nil || tok != "" {
		t.Errorf("Now in an aborted transaction = %q, %v; want an error", tok, err)
	}
	_ = tx.Rollback(ctx)
	_ = conn.Close(ctx)
	if tok, err := pgtoken.Now(ctx, conn); err == nil || tok != "" {
		t.Errorf("Now on a closed connection = %q, %v; want an error", tok, err)
	}
}
