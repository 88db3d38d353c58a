package pgsource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The notify mode (WatchConfig.Mode "notify"), opt-in. The statistics poll misses a
// commit for ~10 s when its session reported less than a second before and then went
// idle (watch.go). Here each watched table gets a statement trigger that calls one
// function, snapflip.notify_change(), which sends pg_notify('snapflip_changes',
// 'schema.table'); a connection of the watch's own LISTENs. Postgres delivers a
// notification only once its transaction has committed, and only once that transaction
// is no longer running in the listener's snapshot, so the snapshot xmax read right
// after on the listening connection is above the change's transaction: the Change.Xmax
// contract holds. A rolled-back transaction notifies nothing; notifications of one
// transaction with the same payload are folded into one.
//
// Triggers go on every table the statistics poll watches and on their ancestors: a
// statement on a partitioned (or inheritance) parent fires only the parent's statement
// triggers, and a statement on a partition only the partition's. Relations that cannot
// have triggers (materialized views, foreign tables, system catalogs) are left to the
// poll.
//
// The poll keeps running beside the listener, at the same cost as in the stats mode:
// it is the safety net for what fires no trigger on a table it polls (writes with
// session_replication_role = replica, such as logical replication's apply; triggers
// someone dropped or disabled; a table the trigger could not be installed on). A
// partition attached since the tables were last resolved is in neither the triggers
// nor the poll's list: a commit to it is caught by the new baseline ("watch started")
// that the next resolve reports, when it has found the partition, up to
// WatchConfig.Resolve later.

// ErrNotifySetup reports that the notify mode cannot be set up on this source: the
// role lacks a privilege it needs, the source is a standby (or refuses writes), a
// trigger of snapflip's name is not snapflip's, or the installed function is another
// role's or SECURITY DEFINER. Retrying does not help; watch.mode stats needs none of it.
var ErrNotifySetup = errors.New("watch.mode notify cannot be set up")

const (
	// NotifyChannel is the channel the triggers notify; the payload is the table's
	// quoted, schema-qualified name.
	NotifyChannel = "snapflip_changes"
	// NotifySchema holds the trigger function, NotifyFunction.
	NotifySchema = "snapflip"
	// NotifyFunction is the trigger function, in NotifySchema.
	NotifyFunction = "snapflip.notify_change()"
	// NotifyTrigger is the name of the trigger on each watched table.
	NotifyTrigger = "snapflip_notify"
)

// notifyFunctionBody is the trigger function's body. An installed function whose body
// differs but for white space (an older release's) is replaced; one a DBA created from
// docs/freshness.md's SQL is not.
const notifyFunctionBody = `
BEGIN
	PERFORM pg_catalog.pg_notify('snapflip_changes', pg_catalog.format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME));
	RETURN NULL;
END
`

// notifyLockKey is the advisory lock that keeps replicas installing at once apart
// ("snapflip" in ASCII).
const notifyLockKey int64 = 0x736e6170666c6970

// notifyLockTimeout bounds the wait for the lock CREATE TRIGGER takes (SHARE ROW
// EXCLUSIVE, once per table): while it waits, the table's writers queue behind it.
const notifyLockTimeout = "1s"

// RemoveNotify's DROP FUNCTION ... CASCADE locks each table with the trigger ACCESS
// EXCLUSIVE in turn and holds the locks until it commits, so that every reader and
// writer of those tables queues behind it meanwhile: it waits at most
// removeLockTimeout for each table's lock, and removeStatementTimeout in all.
const removeLockTimeout = "1s"

var removeStatementTimeout = "5s" // a variable for its test

// InstallNotify installs what the notify mode needs, as Watch does in that mode at
// start and whenever it finds the watched tables again: the function, and the trigger
// on each watched table and its ancestors that lacks it. It is idempotent, and returns
// the tables that have the trigger now. An error wraps ErrNotifySetup when a privilege
// is missing, naming the table or schema and the privilege; a table whose lock was not
// had within a second is left without its trigger and named in the error, and the
// others are installed.
func (s *Source) InstallNotify(ctx context.Context) ([]string, error) {
	conn, err := pgx.ConnectConfig(ctx, s.cfg)
	if err != nil {
		return nil, s.connectError(err)
	}
	defer closeConn(ctx, conn)
	oids, err := watchedTables(ctx, conn, s.collections)
	if err != nil {
		return nil, err
	}
	res, err := installNotify(ctx, conn, oids, true, nil)
	if err == nil {
		err = res.err()
	}
	return res.tables, err
}

// RemoveNotify removes what the notify mode installed in the database: the function
// and, with it, every trigger that calls it (whichever configuration installed them),
// and the schema when nothing else is in it and this role owns it. It returns the
// tables whose trigger it removed, and whether there was a function to remove; nothing
// installed is no error. A syncer still running in notify mode installs them again
// when it next resolves its tables.
func (s *Source) RemoveNotify(ctx context.Context) (tables []string, found bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, s.cfg)
	if err != nil {
		return nil, false, s.connectError(err)
	}
	defer closeConn(ctx, conn)
	// READ WRITE, as for installing: a role read-only by default removes all the same.
	rw := pgx.TxOptions{AccessMode: pgx.ReadWrite}
	err = pgx.BeginTxFunc(ctx, conn, rw, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", notifyLockKey); err != nil {
			return err
		}
		f, err := lookupNotifyFunction(ctx, tx)
		if err != nil || f.oid == 0 {
			return err
		}
		fn := f.oid
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
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+removeLockTimeout+"'"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '"+removeStatementTimeout+"'"); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "DROP FUNCTION "+NotifyFunction+" CASCADE")
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

// notifyTarget is a relation that gets the trigger.
type notifyTarget struct {
	oid  uint32
	name string // quoted, schema-qualified: the notification's payload
	// triggerFn is the function the relation's trigger named NotifyTrigger calls; 0
	// when it has none.
	triggerFn uint32
	enabled   bool // the trigger fires (not ALTER TABLE ... DISABLE TRIGGER)
	mayCreate bool // the role holds TRIGGER on it
}

// notifyInstall is what installNotify did.
type notifyInstall struct {
	// tables have the trigger (enabled or not), sorted: their notifications count.
	tables []string
	// pollOnly are left to the poll, sorted: the relations that cannot have a trigger,
	// those whose trigger is disabled, and those still without one (failed, put off).
	pollOnly []string
	// failed are the tables whose trigger could not be created, sorted, and troubles
	// why.
	failed   []string
	troubles []tableTrouble
	// lockTimeouts, of failed, are those whose lock was not had within notifyLockTimeout.
	lockTimeouts []string
}

// tableTrouble is why tables could not have the trigger; err wraps ErrNotifySetup when
// a privilege is missing or a trigger of snapflip's name is not snapflip's.
type tableTrouble struct {
	tables []string
	err    error
}

// err joins the troubles' errors; nil when there is none.
func (r notifyInstall) err() error {
	errs := make([]error, len(r.troubles))
	for i, t := range r.troubles {
		errs[i] = t.err
	}
	return errors.Join(errs...)
}

// installNotify installs the function and the missing triggers for the watched
// relations oids, except on those putOff reports (nil: none). Strict, a table that
// may not have the trigger (a missing privilege, a trigger of snapflip's name that is
// not snapflip's) fails the install, before any DDL when it can be told from the
// catalog; not strict, the others are installed and it is in the result's failed, as
// is any table whose trigger could not be created. The error is for what fails the
// install as a whole: a standby, the function (a privilege, an untrusted one), the
// catalog not read.
func installNotify(ctx context.Context, conn *pgx.Conn, oids []uint32, strict bool, putOff func(table string) bool) (notifyInstall, error) {
	var res notifyInstall
	var standby bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&standby); err != nil {
		return res, err
	}
	if standby {
		return res, fmt.Errorf("%w: the source is a standby (in recovery), where triggers cannot be created and "+
			"notifications are not sent: point postgres.dsn at the primary, or use watch.mode: stats, which works on a standby", ErrNotifySetup)
	}
	targets, cannot, err := notifyTargets(ctx, conn, oids)
	if err != nil {
		return res, err
	}
	res.pollOnly = cannot
	f, err := lookupNotifyFunction(ctx, conn)
	if err != nil {
		return res, err
	}
	if err := f.trusted(); err != nil {
		return res, err
	}
	fn := f.oid
	var missing, denied []string
	fail := func(err error, tables ...string) {
		res.troubles = append(res.troubles, tableTrouble{tables, err})
		res.failed = append(res.failed, tables...)
	}
	for _, t := range targets {
		switch {
		case t.triggerFn == 0 && putOff != nil && putOff(t.name):
			res.pollOnly = append(res.pollOnly, t.name)
		case t.triggerFn == 0 && !t.mayCreate:
			denied = append(denied, t.name)
		case t.triggerFn == 0:
			missing = append(missing, t.name)
		case t.triggerFn != fn:
			err := fmt.Errorf("%w: table %s has a trigger named %s that does not call %s: rename or drop it",
				ErrNotifySetup, t.name, NotifyTrigger, NotifyFunction)
			if strict {
				return res, err
			}
			fail(err, t.name)
		default:
			res.tables = append(res.tables, t.name)
			if !t.enabled {
				res.pollOnly = append(res.pollOnly, t.name) // someone disabled it; theirs to enable
			}
		}
	}
	if len(denied) > 0 {
		err := deniedError(ctx, conn, denied)
		if strict || !errors.Is(err, ErrNotifySetup) {
			return res, err
		}
		fail(err, denied...)
	}
	if fn == 0 || !sameBody(f.body) {
		// Replacing keeps the function's oid: triggers calling it still do.
		if err := createNotifyFunction(ctx, conn); err != nil {
			return res, err
		}
	}
	for _, name := range missing {
		err := createNotifyTrigger(ctx, conn, name)
		switch {
		case err == nil:
			res.tables = append(res.tables, name)
		case ctx.Err() != nil:
			return res, ctx.Err()
		case strict && errors.Is(err, ErrNotifySetup):
			return res, err
		default:
			fail(err, name)
			if isCode(err, "55P03") {
				res.lockTimeouts = append(res.lockTimeouts, name)
			}
		}
	}
	res.pollOnly = append(res.pollOnly, res.failed...)
	slices.Sort(res.tables)
	slices.Sort(res.pollOnly)
	slices.Sort(res.failed)
	return res, nil
}

// deniedError is the error for tables on which the role may not create the trigger.
func deniedError(ctx context.Context, conn *pgx.Conn, denied []string) error {
	var role string
	if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&role); err != nil {
		return err
	}
	n, list, who := len(denied), strings.Join(denied, ", "), pgx.Identifier{role}.Sanitize()
	return fmt.Errorf("%w: cannot create the change trigger on %s %s: role %s lacks the TRIGGER privilege on %s "+
		"(GRANT TRIGGER ON %s TO %s, or make the role %s owner); watch.mode: stats needs no privilege",
		ErrNotifySetup, plural(n, "table", "tables"), list, who, plural(n, "it", "them"), list, who, plural(n, "its", "their"))
}

// notifyTargets returns the watched relations and their ancestors (partitioned and
// inheritance parents) that can have a trigger, and the names of those that cannot.
func notifyTargets(ctx context.Context, conn *pgx.Conn, oids []uint32) ([]notifyTarget, []string, error) {
	rows, err := conn.Query(ctx, `WITH RECURSIVE up(oid) AS (
			SELECT unnest($1::oid[])
			UNION
			SELECT i.inhparent FROM pg_inherits i JOIN up ON i.inhrelid = up.oid)
		SELECT c.oid, format('%I.%I', n.nspname, c.relname),
			c.relkind IN ('r', 'p') AND c.relpersistence <> 't'
				AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%',
			coalesce(t.tgfoid, 0), coalesce(t.tgenabled <> 'D', false), has_table_privilege(c.oid, 'TRIGGER')
		FROM up JOIN pg_class c ON c.oid = up.oid JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_trigger t ON t.tgrelid = c.oid AND t.tgname = $2
		ORDER BY 2`, oids, NotifyTrigger)
	if err != nil {
		return nil, nil, fmt.Errorf("find the tables to put triggers on: %w", err)
	}
	defer rows.Close()
	var out []notifyTarget
	var skipped []string
	for rows.Next() {
		var t notifyTarget
		var ok bool
		if err := rows.Scan(&t.oid, &t.name, &ok, &t.triggerFn, &t.enabled, &t.mayCreate); err != nil {
			return nil, nil, err
		}
		if ok {
			out = append(out, t)
		} else {
			skipped = append(skipped, t.name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("find the tables to put triggers on: %w", err)
	}
	return out, skipped, nil
}

// notifyFunction is the installed trigger function, as found in the catalog.
type notifyFunction struct {
	oid     uint32 // 0 when there is none
	body    string
	owner   string // its owner's name
	ours    bool   // owned by this role or one it is a member of, or this role is a superuser
	definer bool   // SECURITY DEFINER
}

// lookupNotifyFunction returns the installed trigger function; its oid is 0 when there
// is none.
func lookupNotifyFunction(ctx context.Context, q querier) (notifyFunction, error) {
	var f notifyFunction
	err := q.QueryRow(ctx, `SELECT p.oid, p.prosrc, pg_get_userbyid(p.proowner),
			pg_has_role(p.proowner, 'USAGE') OR coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false),
			p.prosecdef
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname = 'notify_change' AND p.pronargs = 0`, NotifySchema).Scan(&f.oid, &f.body, &f.owner, &f.ours, &f.definer)
	if errors.Is(err, pgx.ErrNoRows) {
		return notifyFunction{}, nil
	}
	if err != nil {
		return notifyFunction{}, fmt.Errorf("look up %s: %w", NotifyFunction, err)
	}
	return f, nil
}

// trusted returns an error wrapping ErrNotifySetup unless the installed function may
// be trusted: its body runs in every writer's transaction, so it must be this role's
// (or a role's it is a member of; or this role is a superuser), for no one else to
// change what the writers run, and not SECURITY DEFINER, for the writers not to run it
// with its owner's privileges.
func (f notifyFunction) trusted() error {
	owner := f.owner
	switch {
	case f.oid == 0:
		return nil
	case !f.ours:
		return fmt.Errorf("%w: %s is owned by role %s, which this role neither is nor is a member of; its body runs in "+
			"every writer's transaction, so the syncer calls it only when it is the role's own: ALTER FUNCTION %s OWNER TO "+
			"the syncer's role (or a role it is a member of), or drop it", ErrNotifySetup, NotifyFunction, owner, NotifyFunction)
	case f.definer:
		return fmt.Errorf("%w: %s (owned by role %s) is SECURITY DEFINER: writers would run it with its owner's privileges; "+
			"ALTER FUNCTION %s SECURITY INVOKER, or drop it", ErrNotifySetup, NotifyFunction, owner, NotifyFunction)
	}
	return nil
}

// installTx runs fn in a transaction begun READ WRITE, so that a role whose
// default_transaction_read_only is on installs all the same. A source that refuses
// writes even so (SQLSTATE 25006, a read-only transaction: a standby, or a server kept
// read-only) is ErrNotifySetup.
func installTx(ctx context.Context, conn *pgx.Conn, fn func(pgx.Tx) error) error {
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadWrite}, fn)
	if isCode(err, "25006") {
		return fmt.Errorf("%w: the source refuses writes (a read-only transaction: a standby, or a server kept read-only), "+
			"and installing the triggers is DDL: point postgres.dsn at the primary, or use watch.mode: stats, which writes "+
			"nothing: %v", ErrNotifySetup, err)
	}
	return err
}

// createNotifyFunction creates the schema when it is missing and creates or replaces
// the function, under the advisory lock, unless another replica just did.
func createNotifyFunction(ctx context.Context, conn *pgx.Conn) error {
	return installTx(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", notifyLockKey); err != nil {
			return err
		}
		f, err := lookupNotifyFunction(ctx, tx)
		if err != nil {
			return err
		}
		if err := f.trusted(); err != nil {
			return err
		}
		if f.oid != 0 && sameBody(f.body) {
			return nil
		}
		var schema bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", NotifySchema).Scan(&schema); err != nil {
			return err
		}
		if !schema {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA "+NotifySchema); err != nil {
				if isCode(err, "42501") {
					return fmt.Errorf("%w: create schema %s for the trigger function: %v: the role needs CREATE on the database, "+
						"or a DBA can create the schema and grant CREATE on it (or install the function: see docs/freshness.md); "+
						"watch.mode: stats needs no privilege", ErrNotifySetup, NotifySchema, err)
				}
				return fmt.Errorf("create schema %s: %w", NotifySchema, err)
			}
		}
		_, err = tx.Exec(ctx, "CREATE OR REPLACE FUNCTION "+NotifyFunction+
			" RETURNS trigger LANGUAGE plpgsql AS $snapflip$"+notifyFunctionBody+"$snapflip$")
		if isCode(err, "42501") {
			return fmt.Errorf("%w: create %s: %v: the role needs CREATE on schema %s (or to own the function, to "+
				"replace an older one); watch.mode: stats needs no privilege", ErrNotifySetup, NotifyFunction, err, NotifySchema)
		}
		if err != nil {
			return fmt.Errorf("create %s: %w", NotifyFunction, err)
		}
		return nil
	})
}

// createNotifyTrigger creates the trigger on table (a quoted name) unless another
// replica just did, waiting at most notifyLockTimeout for the table's lock.
func createNotifyTrigger(ctx context.Context, conn *pgx.Conn, table string) error {
	return installTx(ctx, conn, func(tx pgx.Tx) error {
		// The advisory lock first, without the timeout: a replica waiting here waits for
		// another one installing (a second per table at most), not for the table's writers.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", notifyLockKey); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+notifyLockTimeout+"'"); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname = $2)",
			table, NotifyTrigger).Scan(&exists); err != nil {
			return fmt.Errorf("table %s: %w", table, err)
		}
		if exists {
			return nil
		}
		_, err := tx.Exec(ctx, "CREATE TRIGGER "+NotifyTrigger+" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "+table+
			" FOR EACH STATEMENT EXECUTE FUNCTION "+NotifyFunction)
		switch {
		case isCode(err, "42501"):
			return fmt.Errorf("%w: create the change trigger on table %s: %v: the role needs the TRIGGER privilege on it "+
				"(or to own it) and USAGE on schema %s; watch.mode: stats needs no privilege", ErrNotifySetup, table, err, NotifySchema)
		case isCode(err, "55P03"):
			return fmt.Errorf("create the change trigger on table %s: its writers held it for over %s; trying again later: %w",
				table, notifyLockTimeout, err)
		case err != nil:
			return fmt.Errorf("create the change trigger on table %s: %w", table, err)
		}
		return nil
	})
}

// sameBody reports whether an installed function's body is notifyFunctionBody but for
// white space.
func sameBody(body string) bool {
	return strings.Join(strings.Fields(body), " ") == strings.Join(strings.Fields(notifyFunctionBody), " ")
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
