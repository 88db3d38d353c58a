package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gopkg.in/yaml.v3"

	sqlgen "github.com/snapflip/snapflip/internal/gen"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// The generative differential test: random schemas (every built-in type, custom types,
// hostile identifiers), random keys and random histories of changes, synced several
// times. After each sync, with no write in between, Postgres itself says what every
// collection holds (to_jsonb of each row, in UTC), and the API must serve exactly that
// by GET, by batchGet and on every page of the list, in id order, from the version the
// sync published, and answer 404 for every id that is gone; the version's changes to
// each collection (GET /v1/versions/{v}/changes/{c}) must be exactly the ids whose
// document differs between its parent and it (changes_test.go). When Postgres holds a key no
// id can be (NULL, empty, too long, duplicated), the sync must fail naming the
// collection, and the API keep serving the last version as it was. Half the histories
// sync the incremental deployment from Postgres's replication stream
// (gen_logical_test.go).
//
// Sizes and the seed come from the environment (names below); the short form runs in
// `go test ./e2e/`, the long form in `make chaos`. A failure prints its seed, the
// command that replays it, and a minimal schema that still fails. The bugs it found are
// in gen_known_test.go.
const (
	envGenSeed    = "SNAPFLIP_GEN_SEED"       // the first schema's seed; default from the clock
	envGenSchemas = "SNAPFLIP_GEN_SCHEMAS"    // schemas, each with its own history
	envGenSyncs   = "SNAPFLIP_GEN_SYNCS"      // syncs per history
	envGenTables  = "SNAPFLIP_GEN_TABLES"     // most tables per schema
	envGenColumns = "SNAPFLIP_GEN_COLUMNS"    // most columns a table starts with
	envGenRows    = "SNAPFLIP_GEN_ROWS"       // most rows a table starts with
	envGenFind    = "SNAPFLIP_GEN_FIND_SEEDS" // 1: list seeds that reach each bug's options again (gen_known_test.go)
)

// genDefault are the short form's sizes (about 20 s under -race on 2 cores); the long
// form (make chaos) sets SNAPFLIP_GEN_SCHEMAS=200.
var genDefault = genSizes{schemas: 12, syncs: 4, opt: sqlgen.Options{Tables: 2, Columns: 10, Rows: 25}}

type genSizes struct {
	schemas, syncs int
	opt            sqlgen.Options
	path           string // a bug's sub-test ("fixed/<name>", "known/<name>"); "" for the random schemas
	// filters declares random indexes before every sync and checks random filters
	// after it (gen_filter_test.go); such histories replay under TestGenerativeFilters.
	filters bool
}

func genEnvInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

// genBaseSeed returns the first schema's seed: SNAPFLIP_GEN_SEED, or the clock's.
func genBaseSeed(tb testing.TB) uint64 {
	tb.Helper()
	s := os.Getenv(envGenSeed)
	if s == "" {
		return uint64(time.Now().UnixNano())
	}
	base, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		tb.Fatalf("%s=%q: want an unsigned integer", envGenSeed, s)
	}
	return base
}

func genSizesFromEnv(tb testing.TB) genSizes {
	tb.Helper()
	return genSizes{
		schemas: genEnvInt(tb, envGenSchemas, genDefault.schemas),
		syncs:   genEnvInt(tb, envGenSyncs, genDefault.syncs),
		opt: sqlgen.Options{
			Tables:  genEnvInt(tb, envGenTables, genDefault.opt.Tables),
			Columns: genEnvInt(tb, envGenColumns, genDefault.opt.Columns),
			Rows:    genEnvInt(tb, envGenRows, genDefault.opt.Rows),
		},
	}
}

// replay returns the command that runs seed again with these sizes.
func (sz genSizes) replay(seed uint64) string {
	const env = "  (with SNAPFLIP_TEST_POSTGRES_DSN and SNAPFLIP_TEST_EMULATOR set as `make test` sets them)"
	if sz.path != "" {
		run := fmt.Sprintf("%s/seed=%d", sz.path, seed)
		if seed == 0 { // a hand-written history
			run = sz.path
		}
		return fmt.Sprintf("go test -race -count=1 -run 'TestGenerative/%s$' -v ./e2e/%s", run, env)
	}
	test, schemas := "TestGenerative", envGenSchemas
	if sz.filters {
		test, schemas = "TestGenerativeFilters", envGenFilterSchemas
	}
	return fmt.Sprintf("%s=%d %s=1 %s=%d %s=%d %s=%d %s=%d go test -race -count=1 -run '%s/seed=%d$' -v ./e2e/%s",
		envGenSeed, seed, schemas, envGenSyncs, sz.syncs, envGenTables, sz.opt.Tables,
		envGenColumns, sz.opt.Columns, envGenRows, sz.opt.Rows, test, seed, env)
}

// genOptions turns on, by bits of the seed, the generator's options: each random
// history gets a mix of them, and a seed replays with the same.
func genOptions(seed uint64, opt sqlgen.Options) sqlgen.Options {
	h := seed * 0x9e3779b97f4a7c15
	h ^= h >> 29
	opt.TypeChanges = h&1 != 0
	opt.SettingChanges = h&2 != 0
	opt.PartitionedNullKeys = h&4 != 0
	opt.CommentAfterSemicolon = h&8 != 0
	opt.NondeterministicKeys = h&48 == 0 // a quarter: it skews tables towards text keys without a primary key
	return opt
}

func TestGenerative(t *testing.T) {
	t.Parallel()
	sz := genSizesFromEnv(t)
	base := genBaseSeed(t)
	t.Logf("seeds %d..%d: %d schemas × %d syncs (tables ≤ %d, columns ≤ %d, rows ≤ %d); replay the first with\n  %s",
		base, base+uint64(sz.schemas)-1, sz.schemas, sz.syncs, sz.opt.Tables, sz.opt.Columns, sz.opt.Rows, sz.replay(base))
	// Each history has a database and emulators of its own: they run in parallel, and
	// the total is logged once the last has ended.
	var mu sync.Mutex
	var total genStats
	add := func(s genStats) { mu.Lock(); defer mu.Unlock(); total.add(s) }
	start := time.Now()
	t.Cleanup(func() {
		t.Logf("covered in %v: %s", time.Since(start).Round(time.Millisecond), total)
		// A few logical histories publish deltas of table collections whose changes
		// the stream knows: if none was read from the stream, its path never ran.
		if total.logical >= 3 && total.stream == 0 {
			t.Errorf("%d histories synced from the replication stream, and not one layer was read from it (%s)", total.logical, snapshot.ModeStream)
		}
		if total.large >= 3 && total.spilled == 0 {
			t.Errorf("%d transactions over logical_decoding_work_mem, and the walsender spilled none to disk", total.large)
		}
	})
	for i := range sz.schemas {
		seed := base + uint64(i)
		szi := sz
		szi.opt = genOptions(seed, sz.opt)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { t.Parallel(); add(runGenerated(t, seed, szi)) })
	}
	// The long form runs every seed of the bugs found; the short form the first.
	long := sz.schemas > genDefault.schemas
	for _, b := range fixedBugs {
		t.Run("fixed/"+b.name, func(t *testing.T) { t.Parallel(); add(b.run(t, "fixed/"+b.name, long)) })
	}
}

// genStats counts what a run covered.
type genStats struct {
	schemas, tables, columns, collections, syncs, published, failed, rowsChecked, gone int
	// Of the incremental twin: layers written by kind, the longest chain, rollbacks.
	deltas, merged, changedOnly, bases, longestChain, rollbacks, crashes int
	mergedChangedOnly                                                    int // merges read from the changed rows alone
	cached                                                               int // histories synced with a run cache
	// Of logical histories: how many, their ModeStream layers, transactions over
	// logical_decoding_work_mem run and spilled by the walsender, syncs with commits
	// made while they read.
	logical, stream, large, spilled, during int
	types                                   map[string]int
	// Of filtered histories: filters answered (pinned to an earlier version, with
	// select), refused as they must be, indexes declared (composite).
	filtered, pinned, selected, choices, refused, indexes, composite int
}

func (s *genStats) add(o genStats) {
	s.schemas += o.schemas
	s.tables += o.tables
	s.columns += o.columns
	s.collections += o.collections
	s.syncs += o.syncs
	s.published += o.published
	s.failed += o.failed
	s.rowsChecked += o.rowsChecked
	s.gone += o.gone
	s.deltas += o.deltas
	s.merged += o.merged
	s.changedOnly += o.changedOnly
	s.mergedChangedOnly += o.mergedChangedOnly
	s.cached += o.cached
	s.logical += o.logical
	s.stream += o.stream
	s.large += o.large
	s.spilled += o.spilled
	s.during += o.during
	s.bases += o.bases
	s.longestChain = max(s.longestChain, o.longestChain)
	s.rollbacks += o.rollbacks
	s.crashes += o.crashes
	s.filtered += o.filtered
	s.pinned += o.pinned
	s.selected += o.selected
	s.choices += o.choices
	s.refused += o.refused
	s.indexes += o.indexes
	s.composite += o.composite
	if s.types == nil {
		s.types = map[string]int{}
	}
	for k, v := range o.types {
		s.types[k] += v
	}
}

func (s genStats) String() string {
	kinds := map[string]int{}
	for k := range s.types {
		kinds[strings.SplitN(k, " ", 2)[0]]++
	}
	return fmt.Sprintf("%d schemas, %d tables, %d columns of %d distinct types %v, %d collections, %d syncs (%d published, "+
		"%d failed as they must), %d documents checked, %d gone ids checked; incremental (%d histories with a run cache): %d delta (%d merged, %d read from the changed rows alone, %d of them merges) and %d base layers, "+
		"chains up to %d layers, %d rollbacks, %d syncs killed; %d histories from the replication stream: %d stream layers, %d transactions over "+
		"logical_decoding_work_mem (%d spilled), %d syncs with commits while they read; each version equal to its full twin", s.schemas, s.tables, s.columns, len(s.types), kinds,
		s.collections, s.syncs, s.published, s.failed, s.rowsChecked, s.gone, s.cached, s.deltas, s.merged, s.changedOnly, s.mergedChangedOnly, s.bases, s.longestChain,
		s.rollbacks, s.crashes, s.logical, s.stream, s.large, s.spilled, s.during)
}

// genRun is one schema's history against one deployment, and its full-copy twin.
type genRun struct {
	t      *testing.T
	e      *env // versions: incremental, with the seed's layering
	full   *env // the twin: versions: full, the same Postgres, its own Bigtable
	layers string
	// maxLayers and rebaseRatio are layers' settings, for a Publisher in-process.
	maxLayers   int
	rebaseRatio float64
	// logical, for a logical history (gen_logical_test.go), syncs the incremental
	// deployment from the replication stream; nil for `syncer once`.
	logical *genLogical
	// wantLogical makes the history logical; g is its generator.
	wantLogical bool
	g           *sqlgen.Gen
	// counted holds the incremental versions whose layers the stats counted.
	counted map[snapshot.Version]bool
	seed    uint64
	sz      genSizes
	s       *sqlgen.Schema
	conn    *pgx.Conn
	colls   []genColl
	seen    map[string]map[string]bool // collection → every id it had at a sync
	good    map[string]genGood         // collection → what the last published version holds
	log     []string                   // every statement run, for the report
	stats   genStats
	failed  bool
	filters *genFilters // the indexes and versions of a filtered history; nil for others
}

// genColl is a collection and the SQL that asks Postgres what it must hold.
type genColl struct {
	pgsource.Collection
	oracle string
	table  *sqlgen.Table // the table whose rows it serves
	query  *sqlgen.Query // nil for a table collection
}

func genCollections(s *sqlgen.Schema) []genColl {
	var out []genColl
	for _, c := range s.Collections() {
		gc := genColl{Collection: c}
		for _, t := range s.Tables {
			if t.Collection == c.Name {
				gc.table = t
				gc.oracle = "SELECT (x." + sqlgen.Ident(c.Key) + ")::text, to_jsonb(x.*)::text FROM " + t.Ident() + " AS x"
			}
		}
		for _, q := range s.Queries {
			if q.Collection == c.Name {
				gc.table, gc.query = q.Table, q
				gc.oracle = "SELECT (x." + sqlgen.Ident(c.Key) + ")::text, to_jsonb(x.*)::text FROM (" + q.Plain + ") AS x"
			}
		}
		out = append(out, gc)
	}
	return out
}

func runGenerated(t *testing.T, seed uint64, sz genSizes) genStats {
	g := sqlgen.New(seed)
	s := g.Schema(sz.opt)
	r := newGenRun(t, seed, sz, s, genCollections(s))
	r.g = g
	return r.history(append(s.Create(), g.Fill(s)...), func(k int) []string {
		stmts := g.Step(s, r.keys)
		if r.logical == nil || k < 2 {
			return stmts
		}
		if k == 2 && len(s.Tables) > 0 {
			// A truncate, and the table filled again in the same step.
			t := s.Tables[int(seed/2)%len(s.Tables)]
			stmts = append(stmts, "TRUNCATE "+t.Ident(), g.Insert(t, 1+int(seed%5)))
		}
		for _, t := range s.Tables {
			if u := t.Rescale(); u != "" { // numeric keys that change their id, not their value
				stmts = append(stmts, u)
			}
		}
		return stmts
	})
}

func newGenRun(t *testing.T, seed uint64, sz genSizes, s *sqlgen.Schema, colls []genColl) *genRun {
	r := &genRun{t: t, seed: seed, sz: sz, s: s, colls: colls, seen: map[string]map[string]bool{}}
	r.stats = genStats{schemas: 1, tables: len(s.Tables), collections: len(r.colls), types: map[string]int{}}
	r.e = newEnv(testenv.Postgres(t), testenv.Bigtable(t))
	r.full = newEnv(r.e.DSN, testenv.Bigtable(t))
	// Short chains and eager rebases in some histories, so bases, deltas on deltas
	// and chains at their bound all occur.
	h := seed * 0xbf58476d1ce4e5b9
	h ^= h >> 31
	r.maxLayers, r.rebaseRatio = []int{2, 3, 8, 8}[h%4], []float64{0.05, 0.5, 100}[(h>>2)%3]
	r.layers = fmt.Sprintf("versions: incremental\nmax_layers: %d\nrebase_ratio: %g\nlease: {duration: 3s}\n", r.maxLayers, r.rebaseRatio)
	if (h>>4)%2 == 0 {
		// Half the histories sync as syncer run does: a run cache across syncs, so
		// changed ids are looked up in the decoded runs rather than merged.
		r.e.Runs = layer.NewRunCache(testenv.Store(t, testenv.StoreConfig(r.e.Bigtable)), layer.DefaultRunCacheBytes)
		r.stats.cached = 1
	}
	// Half the random histories sync the incremental deployment from the replication
	// stream (gen_logical_test.go).
	// The stream's source holds its collections from the start, and filtered histories
	// change their indexes at every sync.
	r.wantLogical = sz.path == "" && !sz.filters && (h>>5)%2 == 0
	if sz.filters {
		r.filters = newGenFilters(seed)
	}
	return r
}

// history runs create, syncs, and checks; then sz.syncs-1 times runs a step, syncs
// and checks. It stops at the first failure.
func (r *genRun) history(create []string, step func(k int) []string) genStats {
	t := r.t
	r.connect()
	defer func() { r.conn.Close(context.Background()) }()
	for _, stmt := range create {
		if err := r.exec(stmt); err != nil {
			r.fatalf("the generated statement fails: %v\n%s", err, genShort(stmt, 3000))
		}
	}
	r.e.ConfigPath = filepath.Join(t.TempDir(), "snapflip.yaml")
	r.writeConfig(r.e.ConfigPath, r.colls, r.layers)
	r.full.ConfigPath = filepath.Join(t.TempDir(), "snapflip-full.yaml")
	r.writeConfig(r.full.ConfigPath, r.colls, "versions: full\n")
	r.e.startAPI(t)
	r.full.startAPI(t)
	if r.wantLogical {
		r.startLogical()
		r.stats.logical = 1
	}
	var version string
	for k := range r.sz.syncs {
		if k > 0 && r.logical != nil && k == 1 {
			r.execLarge(step(k))
			r.conn.Close(context.Background())
			r.connect()
		} else if k > 0 {
			for _, stmt := range step(k) {
				if err := r.exec(stmt); err != nil && !isUniqueViolation(err) {
					r.fatalf("the generated statement fails: %v\n%s", err, genShort(stmt, 3000))
				}
			}
			// A step may change the database's settings, which new sessions see.
			r.conn.Close(context.Background())
			r.connect()
		}
		if r.filters != nil {
			r.declareIndexes()
		}
		if k == 1 && r.seed%4 == 1 {
			if _, invalid := r.states(); len(invalid) == 0 {
				// Kill the incremental syncer at a point of the publish protocol first:
				// the sync after it must publish what a full copy holds.
				if v := r.crash(); v != "" {
					version = v
				}
			}
		}
		if k == 2 && r.stats.published >= 2 && r.seed%3 == 0 {
			// Roll the incremental deployment back and unpin it: its next delta is
			// computed against the version rolled back to. Not before a sync that must
			// fail: what it then still serves is the rolled-back-to version, which the
			// history's record of the last good version does not describe.
			if _, invalid := r.states(); len(invalid) == 0 {
				version = r.rollBack()
			}
		}
		out, err := r.syncIncremental(k)
		fout, ferr := r.full.sync(t)
		if (err == nil) != (ferr == nil) {
			r.report(fmt.Sprintf("sync %d of %d: incremental said %q (%v), full said %q (%v)", k+1, r.sz.syncs,
				strings.TrimSpace(out), err, strings.TrimSpace(fout), ferr), nil)
			return r.done()
		}
		r.stats.syncs++
		states, invalid := r.states()
		switch {
		case len(invalid) > 0 && err == nil:
			r.report(fmt.Sprintf("sync %d of %d (%s) succeeded; it must fail, as %s", k+1, r.sz.syncs, strings.TrimSpace(out),
				strings.Join(invalid, "; ")), nil)
			return r.done()
		case len(invalid) > 0:
			// Failed as it must: nothing visible changed. Then the history repairs the keys.
			r.stats.failed++
			if !genNamesOne(err.Error(), invalid) {
				r.report(fmt.Sprintf("sync %d of %d failed with %q, which names none of the collections with invalid keys: %s",
					k+1, r.sz.syncs, err, strings.Join(invalid, "; ")), nil)
				return r.done()
			}
			if version == "" {
				continue
			}
			if ms := r.checkUnchanged(version, k); len(ms) > 0 {
				r.report(fmt.Sprintf("after sync %d of %d failed (%v), the API no longer serves the last version as it was", k+1, r.sz.syncs, err), ms)
				return r.done()
			}
			for _, stmt := range r.s.Repair() {
				if err := r.exec(stmt); err != nil {
					r.fatalf("the repair fails: %v\n%s", err, stmt)
				}
			}
			continue
		case err != nil:
			r.report(fmt.Sprintf("sync %d of %d failed: %v", k+1, r.sz.syncs, err), nil)
			return r.done()
		}
		if !strings.HasPrefix(out, "unchanged") {
			version = stack.PublishedVersion(t, out)
			r.stats.published++
		} else if version == "" {
			t.Fatalf("the first sync said %q", out)
		}
		if ms := r.check(version, k, states); len(ms) > 0 {
			r.report(fmt.Sprintf("after sync %d of %d (%s), the API disagrees with Postgres", k+1, r.sz.syncs, strings.TrimSpace(out)), ms)
			return r.done()
		}
		if ms := r.checkTwin(); len(ms) > 0 {
			r.report(fmt.Sprintf("after sync %d of %d (%s), the incremental version differs from the full copy", k+1, r.sz.syncs, strings.TrimSpace(out)), ms)
			return r.done()
		}
		if r.filters != nil {
			if ms := r.checkFilters(version, k, states); len(ms) > 0 {
				r.report(fmt.Sprintf("after sync %d of %d (%s), a filter's answer differs from Postgres'", k+1, r.sz.syncs, strings.TrimSpace(out)), ms)
				return r.done()
			}
		}
		if !strings.HasPrefix(out, "unchanged") {
			if _, ms := checkChanges(t, r.e, version, 1+int(r.seed%3)); len(ms) > 0 {
				r.report(fmt.Sprintf("after sync %d of %d (%s), the version's changes are not the diff of its parent and it", k+1, r.sz.syncs, strings.TrimSpace(out)), ms)
				return r.done()
			}
		}
	}
	return r.done()
}

// syncIncremental syncs the incremental deployment: `syncer once`, or for a logical
// history in-process from the replication stream, at the last sync of a long enough
// history while another session commits changes.
func (r *genRun) syncIncremental(k int) (string, error) {
	switch {
	case r.logical == nil:
		return r.e.sync(r.t)
	case k == r.sz.syncs-1 && k >= 2:
		if _, invalid := r.states(); len(invalid) == 0 {
			return r.syncDuring(k)
		}
	}
	return r.logical.sync()
}

func (r *genRun) done() genStats {
	if r.logical != nil {
		r.stats.spilled = int(r.spilled())
	}
	for _, t := range r.s.Tables {
		r.stats.columns += 1 + len(t.Cols)
	}
	for k, v := range r.s.TypeUses() {
		r.stats.types[k] += v
	}
	return r.stats
}

// genPinned are the settings the oracle's session pins: the syncer pins the time zone
// so that documents and ids do not depend on the server's defaults, and these change
// the text of values just as much (see the bug output-settings-not-pinned, fixed).
const genPinned = "SET timezone = 'UTC'; SET DateStyle = 'ISO, MDY'; SET IntervalStyle = 'postgres'; " +
	"SET bytea_output = 'hex'; SET extra_float_digits = 1"

func (r *genRun) connect() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, r.e.DSN)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, genPinned, pgx.QueryExecModeSimpleProtocol); err != nil {
		r.t.Fatal(err)
	}
	r.conn = conn
}

// exec runs one generated statement on its own. One that Postgres chose as a
// deadlock's victim (a DDL against the syncer's reads of the tables it locks) is
// rolled back whole, and runs again, as an application retries it.
func (r *genRun) exec(stmt string) error {
	r.log = append(r.log, stmt)
	for try := 1; ; try++ {
		_, err := r.conn.Exec(context.Background(), stmt, pgx.QueryExecModeSimpleProtocol)
		var pe *pgconn.PgError
		if try == 5 || !errors.As(err, &pe) || pe.Code != "40P01" {
			return err
		}
		r.log = append(r.log, "-- a deadlock's victim: again")
	}
}

// genNamesOne reports whether a sync's error names one of the collections that
// invalid descriptions ("name has …") start with, and what is wrong with a key.
func genNamesOne(msg string, invalid []string) bool {
	for _, inv := range invalid {
		name, _, _ := strings.Cut(inv, " has ")
		if !strings.Contains(msg, "collection "+name+": ") {
			continue
		}
		for _, what := range []string{"NULL key", "empty key", "over the limit", "duplicate key"} {
			if strings.Contains(msg, what) {
				return true
			}
		}
	}
	return false
}

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

func (r *genRun) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("%s: %s\nreplay: %s", r.label(), fmt.Sprintf(format, args...), r.sz.replay(r.seed))
}

// label names the run in a failure: its seed, or the bug of a hand-written case.
func (r *genRun) label() string {
	if len(r.s.Tables) == 0 && r.sz.path != "" {
		return r.sz.path
	}
	return fmt.Sprintf("seed %d", r.seed)
}

// keys returns a table's keys as text, in byte order, without NULLs.
func (r *genRun) keys(t *sqlgen.Table) []string {
	rows, err := r.conn.Query(context.Background(), "SELECT ("+sqlgen.Ident(t.Key.Name)+")::text FROM "+t.Ident()+" ORDER BY ("+sqlgen.Ident(t.Key.Name)+")::text COLLATE \"C\"")
	if err != nil {
		r.fatalf("read the keys of %s: %v", t.Ident(), err)
	}
	ks, err := pgx.CollectRows(rows, pgx.RowTo[*string])
	if err != nil {
		r.fatalf("read the keys of %s: %v", t.Ident(), err)
	}
	var out []string
	for _, k := range ks {
		if k != nil { // a NULL key, in a table no collection reads
			out = append(out, *k)
		}
	}
	return out
}

// writeConfig writes the syncer's config for colls. Strings are YAML double-quoted
// scalars with every byte outside printable ASCII escaped (yaml.v3's own encoder writes
// a literal block starting with a tab, which its decoder then refuses); the file must
// decode back to the same collections.
func (r *genRun) writeConfig(path string, colls []genColl, extra string) {
	readers, minRows := r.readers()
	var b strings.Builder
	fmt.Fprintf(&b, "dataset: e2e\nschedule: \"@every 1h\"\nttl: 1h\n%s", extra)
	// Histories delete and truncate at will: no gate may refuse them.
	fmt.Fprintf(&b, "validation: {max_shrink: 0, allow_empty: true}\n")
	fmt.Fprintf(&b, "postgres: {readers: %d, partition_min_rows: %d}\ncollections:\n", readers, minRows)
	var want []genYAMLColl
	for _, gc := range colls {
		c := gc.Collection
		want = append(want, genYAMLColl{c.Name, c.Table, c.Query, c.Key, genYAMLIndexes(c.Indexes)})
		fmt.Fprintf(&b, "  - name: %s\n    key: %s\n", genYAMLString(c.Name), genYAMLString(c.Key))
		if len(c.Indexes) > 0 {
			fmt.Fprintf(&b, "    indexes: %s\n", genYAMLIndexList(c.Indexes))
		}
		if c.Table != "" {
			fmt.Fprintf(&b, "    table: %s\n", genYAMLString(c.Table))
		} else {
			fmt.Fprintf(&b, "    query: %s\n", genYAMLString(c.Query))
		}
	}
	var got struct {
		Collections []genYAMLColl `yaml:"collections"`
	}
	if err := yaml.Unmarshal([]byte(b.String()), &got); err != nil || !reflect.DeepEqual(got.Collections, want) {
		r.t.Fatalf("the test's config does not decode to its collections (%v):\n%s", err, b.String())
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		r.t.Fatal(err)
	}
}

// readers returns the syncer's postgres.readers and partition_min_rows: above 1
// reader, every table is read in hash partitions; with 1, on every other seed, every
// table is a large one, read by one index scan per digit count when keyed by an
// integer.
func (r *genRun) readers() (int, int64) {
	switch {
	case r.s.Readers > 1:
		return r.s.Readers, 1
	case r.seed%2 == 1:
		return 1, 1
	}
	return 1, 200000
}

// genYAMLColl is a collection as the config file spells it.
type genYAMLColl struct {
	Name  string `yaml:"name"`
	Table string `yaml:"table,omitempty"`
	Query string `yaml:"query,omitempty"`
	Key   string `yaml:"key"`
	// Indexes are lists of fields, always written as lists.
	Indexes [][]string `yaml:"indexes,omitempty"`
}

func genYAMLIndexes(ixs []pgsource.Columns) [][]string {
	var out [][]string
	for _, ix := range ixs {
		out = append(out, []string(ix))
	}
	return out
}

// genYAMLIndexList returns indexes as a YAML flow sequence of sequences.
func genYAMLIndexList(ixs []pgsource.Columns) string {
	lists := make([]string, len(ixs))
	for i, ix := range ixs {
		fields := make([]string, len(ix))
		for j, f := range ix {
			fields[j] = genYAMLString(f)
		}
		lists[i] = "[" + strings.Join(fields, ", ") + "]"
	}
	return "[" + strings.Join(lists, ", ") + "]"
}

// genYAMLString returns s as a YAML double-quoted scalar in printable ASCII.
func genYAMLString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		case r <= 0xffff:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			fmt.Fprintf(&b, "\\U%08X", r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// report fails the test with the seed, the replay command, what disagreed, and a
// minimal schema that still fails.
func (r *genRun) report(what string, ms []genMismatch) {
	r.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n", r.label(), what)
	for i, m := range ms {
		if i == 8 {
			fmt.Fprintf(&b, "  … and %d more\n", len(ms)-i)
			break
		}
		fmt.Fprintf(&b, "  %s\n", m)
	}
	fmt.Fprintf(&b, "replay: %s\n", r.sz.replay(r.seed))
	// A hand-written case is minimal already; a filtered history's failure needs its
	// indexes and versions, which the shrinker's single sync does not have.
	if len(r.s.Tables) > 0 && r.filters == nil {
		b.WriteString(r.shrink(ms))
	}
	r.failed = true
	r.t.Error(b.String())
}
