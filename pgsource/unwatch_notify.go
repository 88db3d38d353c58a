package pgsource

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Removing what the retired notify watch mode installed in the source, for sources it
// ran on: a function, NotifyFunction in schema NotifySchema, and a statement trigger,
// NotifyTrigger, calling it on each watched table and its ancestors. The syncer no
// longer installs any of them; `syncer unwatch` removes them.

const (
	// NotifySchema held the notify mode's trigger function, NotifyFunction.
	NotifySchema = "snapflip"
	// NotifyFunction is the notify mode's trigger function, in NotifySchema.
	NotifyFunction = "snapflip.notify_change()"
	// NotifyTrigger is the name of the notify mode's trigger on each watched table.
	NotifyTrigger = "snapflip_notify"
)

// notifyLockKey is the advisory lock replicas in notify mode took to install ("snapflip"
// in ASCII); removing takes it too, so as not to race a syncer of an older release
// still installing.
const notifyLockKey int64 = 0x736e6170666c6970

// RemoveNotify's DROP FUNCTION ... CASCADE locks each table with the trigger ACCESS
// EXCLUSIVE in turn and holds the locks until it commits, so that every reader and
// writer of those tables queues behind it meanwhile: it waits at most
// removeLockTimeout for each table's lock, and removeStatementTimeout in all.
const removeLockTimeout = "1s"

var removeStatementTimeout = "5s" // a variable for its test

// dropNotifySQL drops NotifyFunction and every trigger that calls it.
const dropNotifySQL = "DROP FUNCTION " + NotifyFunction + " CASCADE"

// RemoveNotify removes what the notify mode installed in the database: the function
// and, with it, every trigger that calls it (whichever configuration installed them),
// and the schema when nothing else is in it and this role owns it. It returns the
// tables whose trigger it removed, and whether there was a function to remove; nothing
// installed is no error. A syncer of an older release still running in notify mode
// installs them again when it next resolves its tables.
func (s *Source) RemoveNotify(ctx context.Context) (tables []string, found bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, s.cfg)
	if err != nil {
		return nil, false, s.connectError(err)
	}
	defer closeConn(ctx, conn)
	// READ WRITE: a role read-only by default removes all the same.
	rw := pgx.TxOptions{AccessMode: pgx.ReadWrite}
	err = pgx.BeginTxFunc(ctx, conn, rw, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", notifyLockKey); err != nil {
			return err
		}
		fn, err := notifyFunctionOID(ctx, tx)
		if err != nil || fn == 0 {
			return err
		}
		found = true
		rows, err := tx.Query(ctx, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_trigger t
			JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE t.tgfoid = $1 ORDER BY 1`, fn)
		if err != nil {
			return err
		}
		if tables, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		slices.Sort(tables)
		// Dropping the function drops the triggers that depend on it; unlike DROP
		// TRIGGER, this needs ownership of the function only, not of each table. The
		// timeouts bound how long it holds up the tables' readers and writers.
		if _, err := tx.Exec(ctx, setLocalSQL("lock_timeout", removeLockTimeout)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, setLocalSQL("statement_timeout", removeStatementTimeout)); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, dropNotifySQL)
		switch {
		case err == nil:
			return nil
		case isCode(err, "42501"):
			return fmt.Errorf("drop %s: %w: run this as the role that installed it (the syncer's) or as its owner", NotifyFunction, err)
		case isCode(err, "55P03"):
			return fmt.Errorf("drop %s: a table with its trigger was in use (a long transaction, or a busy table) for over %s, "+
				"and the drop gave up rather than hold up its readers and writers longer; nothing was removed: try again at a "+
				"quiet time: %w", NotifyFunction, removeLockTimeout, err)
		case isCode(err, "57014") && ctx.Err() == nil:
			return fmt.Errorf("drop %s: removing the trigger from %d %s took over %s, and the drop gave up rather than hold "+
				"up their readers and writers longer; nothing was removed: try again at a quiet time: %w",
				NotifyFunction, len(tables), plural(len(tables), "table", "tables"), removeStatementTimeout, err)
		}
		return fmt.Errorf("drop %s: %w", NotifyFunction, err)
	})
	if isCode(err, "25006") {
		return nil, false, fmt.Errorf("the source refuses writes (a standby?): run this against the primary: %w", err)
	}
	if err != nil {
		return nil, false, err
	}
	// The schema goes too when it is empty and ours; a DBA's, or one still holding
	// something, stays.
	var ours bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = $1
		AND pg_has_role(n.nspowner, 'USAGE') AND NOT EXISTS (SELECT FROM pg_depend d
			WHERE d.refclassid = 'pg_namespace'::regclass AND d.refobjid = n.oid))`, NotifySchema).Scan(&ours); err != nil {
		return tables, found, err
	}
	if ours {
		err := pgx.BeginTxFunc(ctx, conn, rw, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "DROP SCHEMA "+NotifySchema)
			return err
		})
		if err != nil && !isCode(err, "2BP01", "42501") {
			return tables, found, fmt.Errorf("drop schema %s: %w", NotifySchema, err)
		}
	}
	return tables, found, nil
}

// notifyFunctionOID returns the oid of the installed NotifyFunction; 0 when there is
// none.
func notifyFunctionOID(ctx context.Context, q querier) (uint32, error) {
	var oid uint32
	err := q.QueryRow(ctx, `SELECT p.oid FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname = 'notify_change' AND p.pronargs = 0`, NotifySchema).Scan(&oid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("look up %s: %w", NotifyFunction, err)
	}
	return oid, nil
}

// isCode reports whether err is a Postgres error with one of the SQLSTATE codes.
func isCode(err error, codes ...string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && slices.Contains(codes, pgErr.Code)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
