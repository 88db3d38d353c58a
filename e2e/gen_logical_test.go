package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	sqlgen "github.com/snapflip/snapflip/internal/gen"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// Logical histories: the incremental deployment is synced as a syncer in watch.mode
// logical syncs it, in-process: a Publisher whose source reads the replication
// stream, so that its deltas read the ids the stream named alone (ModeStream) and
// deletions, truncates and key updates become tombstones without reading every id.
// The full twin is synced by `syncer once` as in every history, and the same checks
// prove each version. On top of the generator's steps a logical history has a
// transaction larger than logical_decoding_work_mem (the walsender spills it to
// disk), a truncate, and commits made while a sync reads, after which the next sync
// must publish them.

// genDecodingWorkMem is the stream connection's logical_decoding_work_mem: small, so
// that a history's large transaction is decoded from disk.
const genDecodingWorkMem = "64kB"

// genLogical syncs a history's incremental deployment from the replication stream.
type genLogical struct {
	r      *genRun
	src    *pgsource.Source
	pub    *snapshot.Publisher
	lease  *store.Lease // the syncer's publish lease, whose tokens fence flips
	slot   string
	cancel context.CancelFunc
	done   chan error // Stream's result once it returned
	// during, when set, runs once while the next publish reads (after its snapshot
	// is open).
	during func()
}

// startLogical gives every table a replica identity that carries its key, as a DBA
// would before turning logical mode on, and starts reading the replication stream.
func (r *genRun) startLogical() {
	r.replicaIdentities()
	dsn := withParam(r.e.DSN, "logical_decoding_work_mem", genDecodingWorkMem)
	src, err := pgsource.New(dsn, r.sources())
	if err != nil {
		r.fatalf("logical source: %v", err)
	}
	src.Readers, src.PartitionMinRows = r.readers()
	st := testenv.Store(r.t, testenv.StoreConfig(r.e.Bigtable))
	const holder = "gen-logical"
	lease, err := st.NewLease("publish/e2e", store.LeaseConfig{Holder: holder, Duration: 5 * time.Second,
		BeforeAcquire: snapshot.RaiseFence(st, "e2e")})
	if err != nil {
		r.fatalf("lease: %v", err)
	}
	l := &genLogical{lease: lease, r: r, src: src, slot: fmt.Sprintf("snapflip_gen_%d_%d", r.seed%1e9, time.Now().UnixNano()%1e9), done: make(chan error, 1)}
	w := &layer.Writer{Store: st, MaxDocumentBytes: 8 << 20, MaxLayers: r.maxLayers, RebaseRatio: r.rebaseRatio, Runs: r.e.Runs}
	l.pub = &snapshot.Publisher{
		Dataset: "e2e", Store: st, Source: src, Versions: snapshot.NewVersionGen(uuid.New(), nil), Writer: holder,
		TTL: time.Hour, Audit: st, Data: w,
		DefaultGate: &snapshot.Gate{MaxShrink: 1, AllowEmpty: true},
		Incremental: true,
		Crash: func(at snapshot.CrashPoint, _ int64) {
			if at == snapshot.CrashAfterOpen && l.during != nil {
				f := l.during
				l.during = nil
				f()
			}
		},
	}
	if w.Runs == nil {
		w.Runs = layer.NewRunCache(st, layer.DefaultRunCacheBytes)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go func() {
		l.done <- src.Stream(ctx, pgsource.StreamConfig{LogicalConfig: pgsource.LogicalConfig{Publication: l.slot, Slot: l.slot}}, nil, nil)
	}()
	r.t.Cleanup(func() {
		cancel()
		if err := <-l.done; !errors.Is(err, context.Canceled) {
			r.t.Errorf("%s: reading the replication stream: %v", r.label(), err)
		}
		_ = src.Close(context.Background())
		// A database with a slot cannot be dropped; the walsender lets go of it a moment
		// after the stream's connection closed.
		if err := testenv.Poll(time.Minute, func() error {
			conn, err := pgx.Connect(context.Background(), r.e.DSN)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			_, err = conn.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", l.slot)
			return err
		}); err != nil {
			r.t.Errorf("drop replication slot %s: %v", l.slot, err)
		}
	})
	if err := testenv.Poll(time.Minute, l.streaming); err != nil {
		r.fatalf("the replication stream: %v", err)
	}
	// The walsender's session takes the DSN's parameters as every session does.
	var mem string
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		r.fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), "SHOW logical_decoding_work_mem").Scan(&mem); err != nil || mem != genDecodingWorkMem {
		r.fatalf("the stream's sessions have logical_decoding_work_mem %q (%v); want %s", mem, err, genDecodingWorkMem)
	}
	r.logical = l
}

// streaming reports whether the stream is read: nil, or why not.
func (l *genLogical) streaming() error {
	select {
	case err := <-l.done:
		l.done <- err
		return fmt.Errorf("reading the replication stream ended: %w", err)
	default:
	}
	if !l.src.Streaming() {
		return errors.New("not reading the replication stream yet")
	}
	return nil
}

// sync publishes once, and says what it did as `syncer once` says it.
func (l *genLogical) sync() (string, error) {
	if err := l.streaming(); err != nil {
		l.r.fatalf("%v", err)
	}
	ctx := context.Background()
	hold, err := l.lease.Acquire(ctx)
	if err != nil {
		l.r.fatalf("acquire the publish lease: %v", err)
	}
	defer hold.Release(ctx)
	res, err := l.pub.Publish(hold.Context(), snapshot.PublishOptions{Fence: hold.Fence()})
	switch {
	case err != nil:
		return "", err
	case res.NoOp:
		return fmt.Sprintf("unchanged: source has not changed since %s\n", res.Previous), nil
	}
	return fmt.Sprintf("published %s (previous %s)\n", res.Manifest.Version, res.Previous), nil
}

// sources returns the collections as the syncer's config names them.
func (r *genRun) sources() []pgsource.Collection {
	out := make([]pgsource.Collection, len(r.colls))
	for i, gc := range r.colls {
		out[i] = gc.Collection
	}
	return out
}

// replicaIdentities gives every table of the database that has no primary key a
// replica identity: a unique index over NOT NULL columns on its key when it has one
// (REPLICA IDENTITY USING INDEX), otherwise FULL. Partitions each get their own.
func (r *genRun) replicaIdentities() {
	rows, err := r.conn.Query(context.Background(), `SELECT format('%I.%I', n.nspname, c.relname),
			(SELECT format('%I', ic.relname) FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
				WHERE i.indrelid = c.oid AND i.indisunique AND i.indisvalid AND i.indimmediate AND i.indpred IS NULL
				AND i.indexprs IS NULL AND NOT EXISTS (SELECT FROM generate_series(0, i.indnkeyatts - 1) AS k
					JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[k] WHERE NOT a.attnotnull)
				ORDER BY ic.relname LIMIT 1)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
			AND NOT EXISTS (SELECT FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)`)
	if err != nil {
		r.fatalf("read the tables without a primary key: %v", err)
	}
	var stmts []string
	var name string
	var index *string
	_, err = pgx.ForEachRow(rows, []any{&name, &index}, func() error {
		if index != nil {
			stmts = append(stmts, "ALTER TABLE "+name+" REPLICA IDENTITY USING INDEX "+*index)
		} else {
			stmts = append(stmts, "ALTER TABLE "+name+" REPLICA IDENTITY FULL")
		}
		return nil
	})
	if err != nil {
		r.fatalf("read the tables without a primary key: %v", err)
	}
	for _, stmt := range stmts {
		if err := r.exec(stmt); err != nil {
			r.fatalf("%s: %v", stmt, err)
		}
	}
}

// execLarge runs stmts in one transaction that also rewrites every row of every
// table many times and writes a filler table: more than logical_decoding_work_mem,
// so that the walsender decodes it from disk. A statement that fails with a unique
// violation is rolled back to its savepoint, as it fails alone elsewhere.
func (r *genRun) execLarge(stmts []string) {
	ctx := context.Background()
	var all []string
	for _, t := range r.s.Tables {
		k := sqlgen.Ident(t.Key.Name)
		for range 20 {
			all = append(all, "UPDATE "+t.Ident()+" SET "+k+" = "+k)
		}
	}
	all = append(all, "CREATE TABLE IF NOT EXISTS snapflip_gen_filler (n int, pad text)",
		"INSERT INTO snapflip_gen_filler SELECT g, repeat('x', 200) FROM generate_series(1, 2000) AS g")
	all = append(all, stmts...)
	all = append(all, "DELETE FROM snapflip_gen_filler")
	r.log = append(r.log, "BEGIN -- one transaction over logical_decoding_work_mem")
	tx, err := r.conn.Begin(ctx)
	if err != nil {
		r.fatalf("begin: %v", err)
	}
	defer tx.Rollback(ctx)
	for _, stmt := range all {
		r.log = append(r.log, stmt)
		if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
			r.fatalf("savepoint: %v", err)
		}
		if _, err := tx.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol); err != nil {
			if !isUniqueViolation(err) {
				r.fatalf("the generated statement fails: %v\n%s", err, genShort(stmt, 3000))
			}
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
				r.fatalf("rollback to savepoint: %v", err)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		r.fatalf("commit: %v", err)
	}
	r.log = append(r.log, "COMMIT")
	r.stats.large++
}

// spilled returns how many transactions the slot's walsender decoded from disk.
func (r *genRun) spilled() int64 {
	var n int64
	if err := r.conn.QueryRow(context.Background(), "SELECT coalesce(sum(spill_txns), 0)::bigint FROM pg_stat_replication_slots WHERE slot_name = $1",
		r.logical.slot).Scan(&n); err != nil {
		r.fatalf("read the slot's statistics: %v", err)
	}
	return n
}

// concurrentDML returns statements that change rows of every table, and take no lock
// a reading snapshot holds: inserts, an update and a delete.
func (r *genRun) concurrentDML() []string {
	var out []string
	for _, t := range r.s.Tables {
		out = append(out, r.g.Insert(t, 2))
		ks := r.keys(t)
		if len(ks) == 0 {
			continue
		}
		in := func(k string) string {
			return "(" + sqlgen.Ident(t.Key.Name) + ")::text COLLATE \"C\" = " + sqlgen.Quote(k)
		}
		if len(t.Cols) > 0 {
			c := t.Cols[0]
			out = append(out, "UPDATE "+t.Ident()+" SET "+sqlgen.Ident(c.Name)+" = "+c.Type.ValueOrNull(r.g, 0.3)+" WHERE "+in(ks[0]))
		}
		out = append(out, "DELETE FROM "+t.Ident()+" WHERE "+in(ks[len(ks)-1]))
	}
	return out
}

// syncDuring publishes the incremental deployment while other sessions commit
// changes the sync's snapshot does not see: one transaction in progress when the
// snapshot is taken (in its list of running transactions), and statements run after
// it. Then it publishes again: that second version must hold them, which the history
// checks. The first version must hold what Postgres held before them.
func (r *genRun) syncDuring(k int) (string, error) {
	ctx := context.Background()
	stmts := r.concurrentDML()
	if len(stmts) == 0 {
		return r.logical.sync()
	}
	before, _ := r.states()
	r.log = append(r.log, "-- (in progress while the next sync opens its snapshot, committed while it reads:)", stmts[0],
		"-- (committed while the sync reads:)")
	r.log = append(r.log, stmts[1:]...)
	tx := testenv.OpenTx(r.t, r.e.DSN, stmts[0])
	r.logical.during = func() {
		if err := tx.Commit(ctx); err != nil {
			r.fatalf("commit: %v", err)
		}
		conn, err := pgx.Connect(ctx, r.e.DSN)
		if err != nil {
			r.fatalf("connect: %v", err)
		}
		defer conn.Close(ctx)
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for _, stmt := range stmts[1:] {
			if _, err := conn.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol); err != nil && !isUniqueViolation(err) {
				r.fatalf("a statement committed during a sync fails: %v\n%s", err, genShort(stmt, 3000))
			}
		}
	}
	out, err := r.logical.sync()
	if r.logical.during != nil {
		r.logical.during = nil // the sync ended before its snapshot was open
		if cerr := tx.Commit(ctx); cerr != nil {
			r.fatalf("commit: %v", cerr)
		}
		return out, err
	}
	r.stats.during++
	if err != nil {
		return out, err
	}
	if strings.HasPrefix(out, "published") {
		v := stack.PublishedVersion(r.t, out)
		if ms := r.check(v, k, before); len(ms) > 0 {
			r.report(fmt.Sprintf("the version published while other sessions committed (%s) is not what Postgres held before them", strings.TrimSpace(out)), ms)
			r.t.FailNow()
		}
	}
	r.log = append(r.log, "-- (the sync after it)")
	return r.logical.sync()
}

// withParam returns dsn with a query parameter added.
func withParam(dsn, k, v string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}
