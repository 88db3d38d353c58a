package pgsource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snapflip/snapflip/snapshot"
)

// What watch.mode logical needs in the source: wal_level = logical, a role with the
// REPLICATION attribute, a free replication slot, and a publication of every table the
// collections read (a partition's root in its stead: the publication publishes via the
// partition root, so a partitioned table's changes arrive under the root's name). The
// stream consumer creates and reads the slot; here the source is checked and the
// publication made ready.
//
// Logical replication must never fail a writer: once a table is in a publication that
// publishes updates and deletes, Postgres rejects an UPDATE or DELETE of it unless the
// table has a replica identity (its primary key, a unique index chosen with REPLICA
// IDENTITY USING INDEX, or FULL). So a table without one is refused, never altered:
// how a table logs its rows is its owner's choice.

// LogicalConfig names the publication and slot of watch.mode logical.
type LogicalConfig struct {
	// Publication is the publication whose changes the slot streams.
	Publication string
	// Slot is the logical replication slot (plugin pgoutput) of the stream.
	Slot string
}

// Validate reports a missing publication or slot, naming the field. The error wraps
// snapshot.ErrInvalid.
func (c LogicalConfig) Validate() error {
	switch {
	case c.Publication == "":
		return fmt.Errorf("%w LogicalConfig.Publication: required", snapshot.ErrInvalid)
	case c.Slot == "":
		return fmt.Errorf("%w LogicalConfig.Slot: required", snapshot.ErrInvalid)
	}
	return nil
}

// ErrLogicalSetup reports that what watch.mode logical needs is missing and the syncer
// cannot make it itself: a setting, an attribute or privilege of the role, a table's
// replica identity, a publication a DBA made. Its message names each one and the SQL a
// DBA runs. Retrying does not help.
var ErrLogicalSetup = errors.New("logical replication setup")

// logicalComment marks a publication snapflip created: RemoveLogical drops only those.
const logicalComment = "created by snapflip"

// logicalLockKey keeps syncers preparing the same database at once apart ("snapflip"
// in ASCII, plus one).
const logicalLockKey int64 = 0x736e6170666c6971

// CREATE and ALTER PUBLICATION take a SHARE UPDATE EXCLUSIVE lock on each table they
// add, which writers do not conflict with but a running ALTER TABLE or VACUUM FULL
// does, and whatever queues behind the waiting DDL waits too: the DDL here waits at
// most logicalLockTimeout per lock and logicalStatementTimeout in all.
const logicalLockTimeout = "1s"

const logicalStatementTimeout = "5s"

// LogicalReport is what CheckLogical found: the problems that keep watch.mode logical
// from running, and the facts about the publication and the slot.
type LogicalReport struct {
	// Publication and Slot are the configured names.
	Publication string `json:"publication"`
	Slot        string `json:"slot"`
	// PublicationExists says the publication exists; PublicationOurs that snapflip
	// created it (RemoveLogical drops it), and PublicationOwner is its owner.
	PublicationExists bool   `json:"publication_exists"`
	PublicationOurs   bool   `json:"publication_ours"`
	PublicationOwner  string `json:"publication_owner,omitempty"`
	// Tables are the relations the publication must publish, as quoted
	// schema-qualified names, sorted: the tables the collections read, each
	// partition's root in its stead.
	Tables []string `json:"tables"`
	// Pending is the DDL PrepareLogical would run (create the publication, add
	// tables); empty when there is none or when there are problems.
	Pending []string `json:"pending,omitempty"`
	// SlotExists says the slot exists; SlotActive that a process streams from it,
	// SlotPID that process's pid.
	SlotExists bool `json:"slot_exists"`
	SlotActive bool `json:"slot_active"`
	SlotPID    int  `json:"slot_pid,omitempty"`
	// SlotWALStatus is pg_replication_slots.wal_status: reserved, extended, unreserved
	// or lost; empty without a slot.
	SlotWALStatus WALStatus `json:"slot_wal_status,omitempty"`
	// SlotRetainedBytes is how much WAL the slot holds back from removal; -1 without a
	// slot or when unknown.
	SlotRetainedBytes int64 `json:"slot_retained_bytes"`
	// Problems are what keeps logical mode from running, each a sentence naming the
	// fix; empty when it can run.
	Problems []string `json:"problems"`
}

// err is the report's problems as an error wrapping ErrLogicalSetup, one a line when
// there are several; nil when there is none.
func (r LogicalReport) err() error {
	switch len(r.Problems) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%w: %s", ErrLogicalSetup, r.Problems[0])
	}
	return fmt.Errorf("%w: %d problems:\n- %s", ErrLogicalSetup, len(r.Problems), strings.Join(r.Problems, "\n- "))
}

// CheckLogical reports, creating and changing nothing, whether watch.mode logical can
// run on this source, and its publication and slot as they are. The error is for not
// being able to check at all; what keeps logical mode from running is in
// LogicalReport.Problems.
func (s *Source) CheckLogical(ctx context.Context, cfg LogicalConfig) (LogicalReport, error) {
	conn, err := pgx.ConnectConfig(ctx, s.cfg)
	if err != nil {
		return LogicalReport{}, s.connectError(err)
	}
	defer closeConn(ctx, conn)
	var rep LogicalReport
	err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		p, err := s.inspectLogical(ctx, tx, cfg)
		rep = p.report
		return err
	})
	return rep, err
}

// PrepareLogical makes the publication ready: it creates it (marked as snapflip's), or
// adds the missing tables to one snapflip created, when the role may and no writer can
// fail for it. Otherwise it changes nothing and returns an error wrapping
// ErrLogicalSetup that names every problem CheckLogical would and its fix. It is
// idempotent, and does not create the slot.
func (s *Source) PrepareLogical(ctx context.Context, cfg LogicalConfig) (LogicalTables, error) {
	conn, err := pgx.ConnectConfig(ctx, s.cfg)
	if err != nil {
		return LogicalTables{}, s.connectError(err)
	}
	defer closeConn(ctx, conn)
	var tables LogicalTables
	var altered bool
	// READ WRITE, whatever the role's default: the DDL runs in the transaction that
	// found it safe, under a lock that keeps other syncers' preparing out.
	err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadWrite}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", logicalLockKey); err != nil {
			return err
		}
		p, err := s.inspectLogical(ctx, tx, cfg)
		if err != nil {
			return err
		}
		if len(p.report.Problems) > 0 {
			return p.report.err()
		}
		if len(p.report.Pending) > 0 {
			if err := setDDLTimeouts(ctx, tx); err != nil {
				return err
			}
		}
		for _, stmt := range p.report.Pending {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return ddlError(stmt, err)
			}
		}
		tables = p.tables
		altered = len(p.report.Pending) > 0
		return nil
	})
	if sqlState(err) == "25006" {
		return LogicalTables{}, fmt.Errorf("%w: the source refuses writes (a standby?): point postgres.dsn at the primary: %v", ErrLogicalSetup, err)
	}
	if err != nil || !altered {
		return tables, err
	}
	var lsn string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
		return LogicalTables{}, fmt.Errorf("read the WAL position after changing the publication: %w", err)
	}
	tables.Altered, err = ParseLSN(lsn)
	return tables, err
}

// RemoveLogical removes what watch.mode logical made in the database: the slot, and
// the publication when snapflip created it (a DBA's stays). An active slot is not
// dropped: the error names the process streaming from it. Nothing to remove is no
// error.
func (s *Source) RemoveLogical(ctx context.Context, cfg LogicalConfig) (droppedSlot, droppedPublication bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, s.cfg)
	if err != nil {
		return false, false, s.connectError(err)
	}
	defer closeConn(ctx, conn)
	slot, err := lookupSlot(ctx, conn, cfg.Slot)
	if err != nil {
		return false, false, err
	}
	if slot.exists {
		if err := slot.ours(cfg.Slot); err != nil {
			return false, false, fmt.Errorf("drop replication slot %s: %w", cfg.Slot, err)
		}
		if !slot.here {
			return false, false, fmt.Errorf("replication slot %s is for database %s, not this one: not dropped", cfg.Slot, slot.database)
		}
		if slot.active {
			return false, false, activeSlotError(cfg.Slot, slot.pid)
		}
		_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", cfg.Slot)
		switch {
		case sqlState(err) == "55006": // became active meanwhile
			slot, _ = lookupSlot(ctx, conn, cfg.Slot)
			return false, false, activeSlotError(cfg.Slot, slot.pid)
		case sqlState(err) == "42704": // dropped meanwhile
		case err != nil:
			return false, false, fmt.Errorf("drop replication slot %s: %w", cfg.Slot, err)
		default:
			droppedSlot = true
		}
	}
	pub, err := lookupPublication(ctx, conn, cfg.Publication)
	if err != nil || !pub.exists || !pub.ours {
		return droppedSlot, false, err
	}
	err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadWrite}, func(tx pgx.Tx) error {
		if err := setDDLTimeouts(ctx, tx); err != nil {
			return err
		}
		stmt := dropPublicationSQL(cfg.Publication)
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return ddlError(stmt, err)
		}
		return nil
	})
	if err != nil {
		return droppedSlot, false, err
	}
	return droppedSlot, true, nil
}

func activeSlotError(slot string, pid int) error {
	return fmt.Errorf("replication slot %s is in use by process %d (a syncer still running with watch.mode logical?): "+
		"stop it first, or end it with SELECT pg_terminate_backend(%d); nothing was removed", slot, pid, pid)
}

// setDDLTimeouts bounds the transaction's waits for locks and its statements.
func setDDLTimeouts(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, setLocalSQL("lock_timeout", logicalLockTimeout)); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, setLocalSQL("statement_timeout", logicalStatementTimeout))
	return err
}

// dropPublicationSQL drops the publication named name, if it exists.
func dropPublicationSQL(name string) string {
	return "DROP PUBLICATION IF EXISTS " + pgx.Identifier{name}.Sanitize()
}

// ddlError says what a failed statement of stmt means for the caller.
func ddlError(stmt string, err error) error {
	switch sqlState(err) {
	case "42501":
		return fmt.Errorf("%w: %s: %v: a DBA runs it, or grants what it needs", ErrLogicalSetup, stmt, err)
	case "55P03", "57014":
		return fmt.Errorf("%s: a table was in use (a long ALTER TABLE or VACUUM FULL) beyond %s (%s in all), and the "+
			"statement gave up rather than hold up the table's users; nothing was changed: try again at a quiet time: %w",
			stmt, logicalLockTimeout, logicalStatementTimeout, err)
	}
	return fmt.Errorf("%s: %w", stmt, err)
}

// sqlState returns err's SQLSTATE, or "" when it has none.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// logicalPlan is what inspectLogical found: the report, with the DDL that would make
// the publication ready, and the tables' mapping.
type logicalPlan struct {
	report LogicalReport
	tables LogicalTables
}

func (p *logicalPlan) problem(format string, args ...any) {
	p.report.Problems = append(p.report.Problems, fmt.Sprintf(format, args...))
}

// inspectLogical reads, in tx, what logical mode needs and what the source has. It
// changes nothing.
func (s *Source) inspectLogical(ctx context.Context, tx pgx.Tx, cfg LogicalConfig) (logicalPlan, error) {
	p := logicalPlan{report: LogicalReport{Publication: cfg.Publication, Slot: cfg.Slot, Tables: []string{},
		SlotRetainedBytes: -1, Problems: []string{}}}
	var srv serverFacts
	if err := tx.QueryRow(ctx, serverFactsSQL, cfg.Publication).Scan(&srv.walLevel, &srv.role, &srv.replication, &srv.maxSlots,
		&srv.maxSenders, &srv.usedSlots, &srv.standby, &srv.mayCreate, &srv.database, &srv.version, &srv.publication); err != nil {
		return p, fmt.Errorf("read the server's settings: %w", err)
	}
	slot, err := lookupSlot(ctx, tx, cfg.Slot)
	if err != nil {
		return p, err
	}
	p.server(srv, slot, cfg)
	rels, err := p.relations(ctx, tx, s.collections)
	if err != nil {
		return p, err
	}
	for _, r := range rels.roots {
		p.report.Tables = append(p.report.Tables, r.name)
	}
	slices.Sort(p.report.Tables)
	p.identities(rels)
	pub, err := lookupPublication(ctx, tx, cfg.Publication)
	if err != nil {
		return p, err
	}
	if err := p.publication(ctx, tx, pub, rels, srv); err != nil {
		return p, err
	}
	if len(p.report.Problems) > 0 {
		p.report.Pending = nil
	}
	return p, nil
}

// serverFacts are the server's settings and the role's attributes.
type serverFacts struct {
	walLevel, role, database string
	publication              string // quoted
	replication              bool   // REPLICATION, superuser, or RDS's rds_replication
	maxSlots, maxSenders     int
	usedSlots                int
	standby, mayCreate       bool
	version                  int
}

const serverFactsSQL = `SELECT current_setting('wal_level'), quote_ident(current_user),
	r.rolsuper OR r.rolreplication OR coalesce((SELECT pg_has_role('rds_replication', 'MEMBER')
		WHERE to_regrole('rds_replication') IS NOT NULL), false),
	current_setting('max_replication_slots')::int, current_setting('max_wal_senders')::int,
	(SELECT count(*)::int FROM pg_replication_slots), pg_is_in_recovery(),
	has_database_privilege(current_database(), 'CREATE'), quote_ident(current_database()),
	current_setting('server_version_num')::int, quote_ident($1)
	FROM pg_roles r WHERE r.rolname = current_user`

// server adds the problems of the server's settings, the role and the slot.
func (p *logicalPlan) server(srv serverFacts, slot slotFacts, cfg LogicalConfig) {
	if srv.walLevel != "logical" {
		p.problem("wal_level is %s; logical replication needs logical: a DBA runs ALTER SYSTEM SET wal_level = logical; "+
			"and restarts Postgres (on Cloud SQL set the flag cloudsql.logical_decoding=on; on Amazon RDS set "+
			"rds.logical_replication=1 in the parameter group and reboot)", srv.walLevel)
	}
	if srv.standby {
		p.problem("the source is a standby, where this Postgres cannot decode changes: point postgres.dsn at the primary")
	}
	if !srv.replication {
		p.problem("role %s may not use replication slots: a DBA runs ALTER ROLE %s REPLICATION; "+
			"(on Amazon RDS: GRANT rds_replication TO %s;)", srv.role, srv.role, srv.role)
	}
	if srv.maxSlots == 0 || srv.maxSenders == 0 {
		p.problem("max_replication_slots is %d and max_wal_senders is %d; each must be at least 1 for the syncer's slot: "+
			"a DBA raises them (ALTER SYSTEM SET max_replication_slots = 10; ALTER SYSTEM SET max_wal_senders = 10;) and restarts Postgres",
			srv.maxSlots, srv.maxSenders)
	} else if !slot.exists && srv.usedSlots >= srv.maxSlots {
		p.problem("every replication slot is taken (%d of max_replication_slots %d), so slot %s cannot be created: drop one "+
			"no longer used (SELECT slot_name, active FROM pg_replication_slots; SELECT pg_drop_replication_slot('name');) "+
			"or raise max_replication_slots and restart Postgres", srv.usedSlots, srv.maxSlots, cfg.Slot)
	}
	if !slot.exists {
		return
	}
	p.report.SlotExists, p.report.SlotActive, p.report.SlotPID = true, slot.active, slot.pid
	p.report.SlotWALStatus, p.report.SlotRetainedBytes = slot.walStatus, slot.retained
	if err := slot.ours(cfg.Slot); err != nil {
		p.problem("%v", err)
	} else if !slot.here {
		p.problem("replication slot %s is for database %s, not %s: name another watch.slot, or drop it there", cfg.Slot, slot.database, srv.database)
	}
	// A lost slot (wal_status lost) is no problem to refuse: the reader drops it,
	// creates it again and compares the next version in full (Stream).
}

// slotFacts is a replication slot as pg_replication_slots shows it.
type slotFacts struct {
	exists                 bool
	kind, plugin, database string
	here                   bool // database is the session's
	active                 bool
	pid                    int
	walStatus              WALStatus
	retained               int64 // WAL kept from restart_lsn; -1 when it has none
	// behind is how far restart_lsn lags confirmed_flush_lsn (0 when either is
	// unknown); standby whether the server is in recovery.
	behind  int64
	standby bool
	// twoPhase: the slot decodes prepared transactions at PREPARE (made with
	// two_phase), which the stream does not read.
	twoPhase bool
}

// slotLogical is pg_replication_slots.slot_type of a logical slot.
const slotLogical = "logical"

// WALStatus is pg_replication_slots.wal_status: whether the server still keeps the
// WAL a slot needs.
type WALStatus string

// WALLost is the wal_status of a slot invalidated for the WAL it lost (others are
// reserved, extended and unreserved).
const WALLost WALStatus = "lost"

// ours reports, as an error, a slot of the name that is not a logical pgoutput slot.
func (f slotFacts) ours(name string) error {
	if f.kind != slotLogical || f.plugin != "pgoutput" {
		return fmt.Errorf("replication slot %s is a %s slot of plugin %q, not a logical slot of pgoutput: it is not snapflip's: name another watch.slot", name, f.kind, f.plugin)
	}
	if f.twoPhase {
		return fmt.Errorf("%w: replication slot %s was created with two_phase: it sends prepared transactions at PREPARE, which snapflip does not read; "+
			"drop it (SELECT pg_drop_replication_slot('%s'), or syncer unwatch) and the syncer creates one without, or name another watch.slot",
			ErrLogicalSetup, name, name)
	}
	return nil
}

func lookupSlot(ctx context.Context, q querier, name string) (slotFacts, error) {
	f := slotFacts{retained: -1}
	err := q.QueryRow(ctx, `SELECT slot_type::text, coalesce(plugin::text, ''), coalesce(database::text, ''),
		database IS NOT DISTINCT FROM current_database(), active,
		coalesce(active_pid, 0), coalesce(wal_status, ''),
		coalesce(pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END,
			restart_lsn)::bigint, -1),
		coalesce(pg_wal_lsn_diff(confirmed_flush_lsn, restart_lsn), 0)::bigint, pg_is_in_recovery(),
		coalesce((to_jsonb(s)->>'two_phase')::bool, false)
		FROM pg_replication_slots s WHERE slot_name = $1`, name).Scan(&f.kind, &f.plugin, &f.database, &f.here, &f.active, &f.pid, &f.walStatus,
		&f.retained, &f.behind, &f.standby, &f.twoPhase)
	if errors.Is(err, pgx.ErrNoRows) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("read replication slot %s: %w", name, err)
	}
	f.exists = true
	return f, nil
}

// publicationFacts is a publication as pg_publication shows it.
type publicationFacts struct {
	exists, ours, owned           bool // ours: snapflip's comment; owned: the role may alter it
	oid                           uint32
	owner                         string
	allTables, viaRoot            bool
	insert, update, del, truncate bool
}

func lookupPublication(ctx context.Context, q querier, name string) (publicationFacts, error) {
	var f publicationFacts
	err := q.QueryRow(ctx, `SELECT p.oid, coalesce(obj_description(p.oid, 'pg_publication'), '') = $2,
		pg_has_role(p.pubowner, 'USAGE'), pg_get_userbyid(p.pubowner)::text, p.puballtables, p.pubviaroot,
		p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate
		FROM pg_publication p WHERE p.pubname = $1`, name, logicalComment).Scan(&f.oid, &f.ours, &f.owned, &f.owner,
		&f.allTables, &f.viaRoot, &f.insert, &f.update, &f.del, &f.truncate)
	if errors.Is(err, pgx.ErrNoRows) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("read publication %s: %w", name, err)
	}
	f.exists = true
	return f, nil
}

// publication adds the publication's problems, or the DDL that makes it ready.
func (p *logicalPlan) publication(ctx context.Context, tx pgx.Tx, pub publicationFacts, rs logicalRelations, srv serverFacts) error {
	if !pub.exists {
		p.createPublication(rs, srv)
		return nil
	}
	name := srv.publication
	p.report.PublicationExists, p.report.PublicationOurs, p.report.PublicationOwner = true, pub.ours, pub.owner
	if !pub.insert || !pub.update || !pub.del || !pub.truncate {
		p.problem("publication %s does not publish every kind of change (insert %v, update %v, delete %v, truncate %v): "+
			"a DBA runs ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate');",
			name, pub.insert, pub.update, pub.del, pub.truncate, name)
	}
	if rs.partitioned() && !pub.viaRoot {
		p.problem("publication %s publishes a partitioned table's changes as its partitions': a DBA runs "+
			"ALTER PUBLICATION %s SET (publish_via_partition_root = true);", name, name)
	}
	missing, err := p.unpublished(ctx, tx, rs, srv)
	if err != nil {
		return err
	}
	if srv.version >= 150000 {
		if err := p.filtered(ctx, tx, pub, rs, srv); err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		p.addTables(pub, missing, srv)
	}
	return nil
}

// names returns the roots' names, in order.
func (rs logicalRelations) names() []string {
	var names []string
	for _, r := range rs.roots {
		names = append(names, r.name)
	}
	return names
}

// partitioned reports whether a root is a partitioned table.
func (rs logicalRelations) partitioned() bool {
	return slices.ContainsFunc(rs.roots, func(r *logicalRel) bool { return r.kind == relPartitioned })
}

// unowned returns the names of the relations the role does not own.
func unowned(rels []*logicalRel) []string {
	var names []string
	for _, r := range rels {
		if !r.owned {
			names = append(names, r.name)
		}
	}
	return names
}

// createPublication adds the DDL that creates the publication, or the problem that
// the syncer may not.
func (p *logicalPlan) createPublication(rs logicalRelations, srv serverFacts) {
	name, all, unowned := srv.publication, rs.names(), unowned(rs.roots)
	create := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)", name, strings.Join(all, ", "))
	if len(all) == 0 {
		create = fmt.Sprintf("CREATE PUBLICATION %s WITH (publish_via_partition_root = true)", name)
	}
	if srv.mayCreate && len(unowned) == 0 {
		p.report.Pending = []string{create, fmt.Sprintf("COMMENT ON PUBLICATION %s IS '%s'", name, logicalComment)}
		return
	}
	var why []string
	if !srv.mayCreate {
		why = append(why, fmt.Sprintf("role %s lacks CREATE on database %s (GRANT CREATE ON DATABASE %s TO %s;)",
			srv.role, srv.database, srv.database, srv.role))
	}
	if len(unowned) > 0 {
		why = append(why, fmt.Sprintf("role %s does not own %s, and only a table's owner may publish it", srv.role, strings.Join(unowned, ", ")))
	}
	p.problem("publication %s does not exist and the syncer may not create it (%s): a DBA runs %s;", name, strings.Join(why, "; "), create)
}

// unpublished returns the roots the publication does not list. A relation counts as
// published when it, or one of its partitions, is listed.
func (p *logicalPlan) unpublished(ctx context.Context, tx pgx.Tx, rs logicalRelations, srv serverFacts) ([]*logicalRel, error) {
	var listed []uint32
	if err := tx.QueryRow(ctx, publishedRootsSQL, p.report.Publication).Scan(&listed); err != nil {
		return nil, fmt.Errorf("read the tables of publication %s: %w", srv.publication, err)
	}
	var missing []*logicalRel
	for _, r := range rs.roots {
		if !slices.Contains(listed, r.oid) {
			missing = append(missing, r)
		}
	}
	return missing, nil
}

// publishedRootsSQL lists the roots of the relations publication $1 lists.
const publishedRootsSQL = `SELECT coalesce(array_agg(DISTINCT coalesce(pg_partition_root(r), r)::oid), '{}')
	FROM (SELECT to_regclass(format('%I.%I', schemaname, tablename))::oid AS r FROM pg_publication_tables WHERE pubname = $1) t`

// filteredTablesSQL lists the tables publication $1 (an oid) publishes with a row
// filter or a column list (Postgres 15 and later).
const filteredTablesSQL = `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_publication_rel pr
	JOIN pg_class c ON c.oid = pr.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE pr.prpubid = $1 AND (pr.prqual IS NOT NULL OR pr.prattrs IS NOT NULL) ORDER BY 1`

// filtered adds a problem when the publication publishes one of the roots with a row
// filter or a column list, which would hide changes from the syncer.
func (p *logicalPlan) filtered(ctx context.Context, tx pgx.Tx, pub publicationFacts, rs logicalRelations, srv serverFacts) error {
	name, all := srv.publication, rs.names()
	rows, err := tx.Query(ctx, filteredTablesSQL, pub.oid)
	var filtered []string
	if err == nil {
		filtered, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return fmt.Errorf("read the tables of publication %s: %w", name, err)
	}
	if filtered = slices.DeleteFunc(filtered, func(t string) bool { return !slices.Contains(all, t) }); len(filtered) > 0 {
		p.problem("publication %s publishes %s with a row filter or a column list, which would hide changes from the syncer: "+
			"a DBA runs ALTER PUBLICATION %s SET TABLE ... without WHERE or column lists for them", name, strings.Join(filtered, ", "), name)
	}
	return nil
}

// addTables adds the DDL that adds the missing roots to the publication, or the
// problem that the syncer may not.
func (p *logicalPlan) addTables(pub publicationFacts, missing []*logicalRel, srv serverFacts) {
	name := srv.publication
	var names []string
	for _, r := range missing {
		names = append(names, r.name)
	}
	add := fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", name, strings.Join(names, ", "))
	var why string
	switch missingUnowned := unowned(missing); {
	case !pub.ours:
		why = fmt.Sprintf("the syncer changes only a publication it created, and this one is %s's", pub.owner)
	case !pub.owned:
		why = fmt.Sprintf("role %s does not own it (%s does)", srv.role, pub.owner)
	case len(missingUnowned) > 0:
		why = fmt.Sprintf("role %s does not own %s, and only a table's owner may publish it", srv.role, strings.Join(missingUnowned, ", "))
	default:
		p.report.Pending = append(p.report.Pending, add)
		return
	}
	p.problem("publication %s does not publish %s, which the collections read (%s): a DBA runs %s;", name, strings.Join(names, ", "), why, add)
}
