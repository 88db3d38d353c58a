package pgsource

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/retry"
	"github.com/snapflip/snapflip/snapshot"
)

// Watching for committed changes, cheaply and without DDL or privileges. Every poll
// reads, for the tables the collections read (a query's and a view's found with
// EXPLAIN, a partitioned table's partitions included), the cumulative statistics
// counters Postgres keeps per table (rows inserted, updated, deleted) and its file
// (a TRUNCATE gives it a new one, and moves none of the counters), plus the
// snapshot's xmax. A poll touches no table and costs a few function calls in shared
// memory; writes to other tables change nothing it reads, except xmax.
//
// Postgres publishes a session's counters when the session goes idle, at most once a
// second; a session that commits again within a second of its last report and then
// stays idle reports after 10 s (PGSTAT_IDLE_INTERVAL). So after the counters show a
// change, the watch stays "hot" for Hot: any commit anywhere (xmax moving) counts as a
// possible change, and the sync that follows finds out cheaply (its fingerprint) whether
// a configured table changed. Unrelated writes alone never make it hot.
//
// Every poll also reads a digest of the watched relations' definitions (catalog.go),
// in both modes: DDL moves no counter and the replication stream carries none. In
// logical mode the poll reads that digest alone; the stream reports the rows.

// WatchConfig tunes Watch. A zero field takes its default (DefaultWatchConfig).
type WatchConfig struct {
	// Interval is the time between polls; default 200ms.
	Interval time.Duration
	// Hot is how long after a counter change a commit elsewhere counts as a possible
	// change; default 11s (Postgres' idle statistics interval plus a second).
	Hot time.Duration
	// Resolve is how often the watched tables are found again (new partitions, a
	// changed view); default 1 minute.
	Resolve time.Duration
	// Mode is WatchModeStats (the zero value), or WatchModeLogical, in which Watch polls the
	// definitions alone (Stream reports the rows).
	Mode WatchMode
	// Observer hears the watch's events (snapshot.EventWatching,
	// EventWatchFailed); nil for none.
	Observer snapshot.Observer
	// Now is the watch's clock, which Hot is measured by; nil for time.Now.
	Now func() time.Time
}

// DefaultWatchConfig returns the values Watch takes for WatchConfig's zero fields.
func DefaultWatchConfig() WatchConfig {
	return WatchConfig{Interval: 200 * time.Millisecond, Hot: 11 * time.Second, Resolve: time.Minute, Mode: WatchModeStats}
}

// Validate reports the first unusable field, naming it: a negative duration, or an
// unknown mode. The error wraps snapshot.ErrInvalid.
func (c WatchConfig) Validate() error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"Interval", c.Interval}, {"Hot", c.Hot}, {"Resolve", c.Resolve}} {
		if f.d < 0 {
			return fmt.Errorf("%w WatchConfig.%s %s: must not be negative (0 takes the default)", snapshot.ErrInvalid, f.name, f.d)
		}
	}
	if c.Mode != WatchModeStats && c.Mode != WatchModeLogical {
		return fmt.Errorf("%w WatchConfig.Mode %d: want WatchModeStats or WatchModeLogical", snapshot.ErrInvalid, c.Mode)
	}
	return nil
}

// withDefaults returns c with its zero fields set to DefaultWatchConfig's.
func (c WatchConfig) withDefaults() WatchConfig {
	d := DefaultWatchConfig()
	c.Interval = cmp.Or(c.Interval, d.Interval)
	c.Hot = cmp.Or(c.Hot, d.Hot)
	c.Resolve = cmp.Or(c.Resolve, d.Resolve)
	return c
}

// WatchMode is how a watch notices commits.
type WatchMode int

// The watch's modes.
const (
	// WatchModeStats polls the statistics counters only: no DDL, no privilege.
	WatchModeStats WatchMode = iota
	// WatchModeLogical reads the source's logical replication stream (Stream), and polls
	// the definitions of the watched relations (Watch).
	WatchModeLogical
)

// String returns the mode as the configuration names it: "stats" or "logical".
func (m WatchMode) String() string {
	switch m {
	case WatchModeStats:
		return "stats"
	case WatchModeLogical:
		return "logical"
	}
	return fmt.Sprintf("WatchMode(%d)", int(m))
}

// MarshalText returns the mode as the configuration names it.
func (m WatchMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText parses a mode as the configuration names it, "stats" or "logical";
// an empty one, or the removed "notify", is refused naming what to write instead.
func (m *WatchMode) UnmarshalText(b []byte) error {
	switch string(b) {
	case "notify":
		return fmt.Errorf(`%w watch mode "notify": it was removed: use %q (the replication stream; no triggers on your tables), `+
			"see docs/freshness.md", snapshot.ErrInvalid, WatchModeLogical)
	case "":
		return fmt.Errorf(`%w watch mode "": must be %q or %q`, snapshot.ErrInvalid, WatchModeStats, WatchModeLogical)
	}
	parsed, err := ParseWatchMode(string(b))
	if err == nil {
		*m = parsed
	}
	return err
}

// ParseWatchMode parses a mode as the configuration names it; "" is WatchModeStats.
func ParseWatchMode(s string) (WatchMode, error) {
	switch s {
	case "", "stats":
		return WatchModeStats, nil
	case "logical":
		return WatchModeLogical, nil
	}
	return 0, fmt.Errorf("%w watch mode %q: must be %q or %q", snapshot.ErrInvalid, s, WatchModeStats, WatchModeLogical)
}

// Change is a possible committed change to a watched table.
type Change struct {
	// LSN is the WAL position read with the observation (for logs).
	LSN uint64
	// Xmax is the snapshot xmax read with the observation: the change's transaction
	// is below it, so a version whose snapshot's xmin is at or above it includes the
	// change. (A WAL position would not do: a commit record is written before its
	// transaction becomes visible, so a version can be read at a later position
	// without it.)
	Xmax uint64
	// At is when the watch saw it (this process's clock).
	At time.Time
	// Reason says why the watch reported it.
	Reason ChangeReason
}

// ChangeReason says why the watch or the stream reported a Change. Its String is
// what logs and the changes metric's reason label print.
type ChangeReason int

// The reasons for a Change.
const (
	// ReasonStatistics: a watched table's statistics counters moved.
	ReasonStatistics ChangeReason = iota + 1
	// ReasonCommitWhileHot: a transaction committed elsewhere while a watched table's
	// counters had moved within WatchConfig.Hot.
	ReasonCommitWhileHot
	// ReasonWatchStarted: a new baseline (start, reconnect, a new set of tables).
	ReasonWatchStarted
	// ReasonTablesChanged: the tables the collections read are others than when the
	// watch last found them (a table dropped and created again, a view redefined to
	// read others); the replication stream must follow the new ones.
	ReasonTablesChanged
	// ReasonDefinitions: the definitions of a watched relation changed (DDL, a
	// rewrite; see catalog.go).
	ReasonDefinitions
	// ReasonStream: the replication stream delivered a committed change to a watched
	// table.
	ReasonStream
	// ReasonStreamUnseen: a snapshot opened for a version did not yet see a committed
	// change the stream delivered (Postgres makes a commit visible a moment after
	// logging it), so the version after it must hold it.
	ReasonStreamUnseen
	// ReasonDemand: a reader waits for a read-your-writes token that the current
	// version does not cover: look at the source now, whatever its statistics say.
	ReasonDemand
	// ReasonBaseBuilt: the base of a held or new collection, read beside the stream
	// of versions, waits to join a version.
	ReasonBaseBuilt
)

var reasonText = map[ChangeReason]string{
	ReasonStatistics:     "statistics",
	ReasonCommitWhileHot: "commit while hot",
	ReasonWatchStarted:   "watch started",
	ReasonTablesChanged:  "tables changed",
	ReasonDefinitions:    "definitions",
	ReasonStream:         "stream",
	ReasonStreamUnseen:   "committed, not yet visible",
	ReasonDemand:         "demand",
	ReasonBaseBuilt:      "base built",
}

// String returns the reason's words, as logs and metric labels print them.
func (r ChangeReason) String() string {
	if t, ok := reasonText[r]; ok {
		return t
	}
	return fmt.Sprintf("ChangeReason(%d)", int(r))
}

// MarshalText is String's words, so that a JSON log prints them too.
func (r ChangeReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// WatchStats counts what the watch did, for metrics.
type WatchStats struct {
	Polls    int64
	PollTime time.Duration // the last poll's round trip
	Tables   int
}

// watchRetry is the wait before the watch connects again after its connection failed.
const watchRetry = 3 * time.Second

// Watch polls until ctx ends, calling changed for each possible change and polled
// after each poll, both from one goroutine. A failing connection is retried every few
// seconds and reported (EventWatchFailed), and each new connection reports a new
// baseline ("watch started"). The error returned is ctx's, or one wrapping
// snapshot.ErrInvalid for an invalid config (WatchConfig.Validate).
func (s *Source) Watch(ctx context.Context, cfg WatchConfig, changed func(Change), polled func(WatchStats)) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	w := &watch{src: s, cfg: cfg, mode: cfg.Mode, changed: changed, polled: polled}
	for {
		err := w.run(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		observe(ctx, cfg.Observer, snapshot.EventWatchFailed, "err", err)
		if retry.Sleep(ctx, watchRetry) != nil {
			return ctx.Err()
		}
	}
}

type watch struct {
	src     *Source
	cfg     WatchConfig // with its defaults
	mode    WatchMode
	changed func(Change)
	polled  func(WatchStats)

	polls int64
	// watched is the set of tables the last run watched, kept across reconnects.
	watched string
	// found, if set, is called after each find (a test's way into the moment
	// between finding the set and reading its baseline).
	found func()
}

// now reads the watch's clock.
func (w *watch) now() time.Time {
	if w.cfg.Now != nil {
		return w.cfg.Now()
	}
	return time.Now()
}

// run polls on one connection until it fails or ctx ends.
func (w *watch) run(ctx context.Context) error {
	cfg := w.src.cfg.Copy()
	// The poll's catalog digest is estimated dear enough for JIT compilation, which
	// costs a hundred times what running it does; and planning it anew each time,
	// as Postgres does for a custom plan, costs more than running it (0.77 ms
	// against 0.47 ms): the generic plan, made once, serves every poll.
	cfg.RuntimeParams["jit"] = "off"
	cfg.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return w.src.connectError(err)
	}
	defer closeConn(ctx, conn)
	l := &watchLoop{w: w, conn: conn, first: true}
	ticker := time.NewTicker(w.cfg.Interval)
	defer ticker.Stop()
	for {
		if err := l.step(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

// watchLoop is one run's polling: the set it watches and the last poll's readings,
// which the next poll is compared with.
type watchLoop struct {
	w    *watch
	conn *pgx.Conn

	set        watchedSet
	resolvedAt time.Time
	relations  string // the set's relations when it was last found
	first      bool   // the next poll is a new baseline
	moved      bool   // the tables the collections read are others now
	last       pollReading
	hotUntil   time.Time
}

// pollReading is what one poll read, as text.
type pollReading struct {
	sig, catalog, lsn, xmax string
}

// step polls once, finding the watched set first when it is due, and reports a
// possible change. When the set changed while its baseline was read, it reports
// nothing, and the next step finds the set again (a poll interval later, so that DDL
// that never stops costs a poll's round trips, not a busy loop).
func (l *watchLoop) step(ctx context.Context) error {
	w := l.w
	resolving := l.resolvedAt.IsZero() || time.Since(l.resolvedAt) >= w.cfg.Resolve
	if resolving {
		if err := l.resolve(ctx); err != nil {
			return err
		}
	}
	start := time.Now()
	p, err := w.poll(ctx, l.conn, l.set, w.mode == WatchModeStats)
	if err != nil {
		return fmt.Errorf("poll: %w", err)
	}
	if resolving {
		// The set is found by name, and the digest read by oid: a table dropped
		// and created again between the two would leave a baseline that no longer
		// names it, and its later changes unseen. So the set is found again after
		// the baseline, until the two agree.
		found, err := w.find(ctx, l.conn)
		if err != nil {
			return err
		}
		if !found.equal(l.set) {
			l.resolvedAt = time.Time{}
			return nil
		}
	}
	w.polls++
	if w.polled != nil {
		w.polled(WatchStats{Polls: w.polls, PollTime: time.Since(start), Tables: len(l.set.tables)})
	}
	lsn, xmax, err := parsePosition(p.lsn, p.xmax)
	if err != nil {
		return err
	}
	l.report(p, lsn, xmax, w.now())
	l.first, l.moved, l.last = false, false, p
	return nil
}

// resolve finds the watched set again; a new set of relations is a new baseline.
func (l *watchLoop) resolve(ctx context.Context) error {
	w := l.w
	set, err := w.find(ctx, l.conn)
	if err != nil {
		return err
	}
	l.set, l.resolvedAt = set, time.Now()
	if key := fmt.Sprint(set.relations); key != l.relations {
		observe(ctx, w.cfg.Observer, snapshot.EventWatching, "tables", len(set.tables), "relations", len(set.relations),
			"interval", w.cfg.Interval.String(), "mode", w.cfg.Mode)
		l.relations, l.first = key, true // a new set of tables: a new baseline
	}
	if tables := fmt.Sprint(set.tables); tables != w.watched {
		l.moved, w.watched = w.watched != "", tables
	}
	return nil
}

// report calls changed when the poll p, read at lsn and xmax, is a possible change
// against the last one.
func (l *watchLoop) report(p pollReading, lsn, xmax uint64, now time.Time) {
	change := func(reason ChangeReason) {
		l.w.changed(Change{LSN: lsn, Xmax: xmax, At: now, Reason: reason})
	}
	switch {
	case l.moved:
		// A table dropped and created again, a view that reads others: a new
		// baseline, and the replication stream must follow the new tables.
		change(ReasonTablesChanged)
	case l.first:
		// A new baseline (start, reconnect, a new set of tables): a change reported
		// before it, but after the last sync read, would otherwise wait for the
		// schedule. One sync finds out; it is cheap when nothing changed.
		change(ReasonWatchStarted)
	case p.catalog != l.last.catalog:
		change(ReasonDefinitions)
		// A view may read other tables now: find them at the next poll.
		l.resolvedAt = time.Time{}
	case p.sig != l.last.sig:
		l.hotUntil = now.Add(l.w.cfg.Hot)
		change(ReasonStatistics)
	case p.xmax != l.last.xmax && now.Before(l.hotUntil):
		change(ReasonCommitWhileHot)
	}
}

// watchedSet is what the watch polls: the tables the collections read (their
// counters), those and the views over them (their definitions), and the types the
// collections' statements return.
type watchedSet struct {
	tables, relations, results []uint32
}

func (s watchedSet) equal(o watchedSet) bool {
	return slices.Equal(s.tables, o.tables) && slices.Equal(s.relations, o.relations) && slices.Equal(s.results, o.results)
}

// find finds the watchedSet of the collections.
func (w *watch) find(ctx context.Context, conn *pgx.Conn) (watchedSet, error) {
	var set watchedSet
	var err error
	if set.tables, err = w.tables(ctx, conn); err != nil {
		return set, err
	}
	if set.relations, err = withViews(ctx, conn, set.tables); err != nil {
		return set, err
	}
	set.results, err = resultTypes(ctx, conn, w.src.collections)
	if w.found != nil {
		w.found()
	}
	return set, err
}

// poll reads the counters' signature (with stats, else ""), the definitions' digest,
// the WAL position and the snapshot's xmax, in one round trip.
func (w *watch) poll(ctx context.Context, conn *pgx.Conn, set watchedSet, stats bool) (pollReading, error) {
	var p pollReading
	var err error
	if stats {
		err = conn.QueryRow(ctx, watchSQL, set.tables, set.relations, set.results).Scan(&p.sig, &p.catalog, &p.lsn, &p.xmax)
	} else {
		err = conn.QueryRow(ctx, definitionsWatchSQL, set.relations, set.results).Scan(&p.catalog, &p.lsn, &p.xmax)
	}
	return p, err
}

// parsePosition parses the WAL position and snapshot xmax read as text.
func parsePosition(lsnText, xmaxText string) (lsn, xmax uint64, err error) {
	if lsn, err = ParseLSN(lsnText); err != nil {
		return 0, 0, err
	}
	if xmax, err = strconv.ParseUint(xmaxText, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("%w snapshot xmax %q", snapshot.ErrInvalid, xmaxText)
	}
	return lsn, xmax, nil
}

// watchSQL reads the watched tables' ($1) counters (one text signature), the digest
// of the definitions of the watched relations ($2) and the collections' result types
// ($3), the WAL position and the snapshot's xmax. It reads no table.
var watchSQL = `SELECT coalesce(string_agg(r::text || ':' || pg_stat_get_tuples_inserted(r) || ':' ||
		pg_stat_get_tuples_updated(r) || ':' || pg_stat_get_tuples_deleted(r) || ':' || coalesce(pg_relation_filenode(r), 0), ',' ORDER BY r), ''),
	(` + catalogDigest("$2", "$3") + `),
	` + positionSQL + `
	FROM unnest($1::oid[]) AS r`

// definitionsWatchSQL is watchSQL without the counters (logical mode): the digest of
// the relations $1 and the result types $2, the WAL position and the snapshot's xmax.
var definitionsWatchSQL = `SELECT (` + catalogDigest("$1", "$2") + `),
	` + positionSQL

// positionSQL reads the WAL position and the snapshot's xmax.
const positionSQL = `(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_insert_lsn() END)::text,
	pg_snapshot_xmax(pg_current_snapshot())::text`

// tables returns the oids of the tables the collections read.
func (w *watch) tables(ctx context.Context, conn *pgx.Conn) ([]uint32, error) {
	return watchedTables(ctx, conn, w.src.collections)
}

// watchedTables returns the oids of the tables the collections read, from the plans of
// their statements (EXPLAIN without ANALYZE runs nothing).
func watchedTables(ctx context.Context, conn *pgx.Conn, collections []Collection) ([]uint32, error) {
	seen := map[uint32]bool{}
	for _, c := range collections {
		from := c.rowsSQL()
		var plan string
		if err := conn.QueryRow(ctx, explainSQL(from)).Scan(&plan); err != nil {
			return nil, fmt.Errorf("collection %s: find the tables it reads: %w", c.Name, err)
		}
		rels, err := planRelations(plan)
		if err != nil {
			return nil, fmt.Errorf("collection %s: %w", c.Name, err)
		}
		for _, r := range rels {
			var oid *uint32
			if err := conn.QueryRow(ctx, regclassSQL, r).Scan(&oid); err != nil {
				return nil, err
			}
			if oid != nil {
				seen[*oid] = true
			}
		}
	}
	out := make([]uint32, 0, len(seen))
	for o := range seen {
		out = append(out, o)
	}
	slices.Sort(out)
	return out, nil
}

// explainSQL plans the statement stmt without running it, as JSON that names the
// relations it scans.
func explainSQL(stmt string) string { return "EXPLAIN (FORMAT JSON, VERBOSE) " + stmt }

// regclassSQL reads the oid of the relation named $1; NULL when there is none.
const regclassSQL = "SELECT to_regclass($1)::oid"

// planRelations returns every relation an EXPLAIN (FORMAT JSON) plan scans, as
// quoted schema-qualified names.
func planRelations(plan string) ([]string, error) {
	var doc []struct {
		Plan map[string]any `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan), &doc); err != nil {
		return nil, fmt.Errorf("%w plan: %v", snapshot.ErrInvalid, err)
	}
	var out []string
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if rel, ok := n["Relation Name"].(string); ok {
			schema, _ := n["Schema"].(string)
			name := pgx.Identifier{rel}.Sanitize()
			if schema != "" {
				name = pgx.Identifier{schema, rel}.Sanitize()
			}
			out = append(out, name)
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				if m, ok := k.(map[string]any); ok {
					walk(m)
				}
			}
		}
	}
	for _, d := range doc {
		walk(d.Plan)
	}
	return out, nil
}
