package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sqlgen "github.com/snapflip/snapflip/internal/gen"
	"github.com/snapflip/snapflip/internal/testenv"
)

// Watched histories: random schemas whose steps interleave DDL alone (columns added,
// dropped, renamed, retyped with a rewrite; enum labels and composite attributes
// changed) with the generator's row changes, under `syncer run` with the schedule
// hourly, so that only the watch can publish them; half in watch.mode stats, half in
// logical. After every step, every collection the API serves must become equal to
// Postgres's own to_jsonb of its rows, one version for every page, within
// genWatchLimit.

// genWatchLimit bounds the time from a step's commit to its being served: far below
// the hourly schedule, far above the freshness budget (and the 3 s a watch waits to
// connect again), for a machine that runs the whole suite at once.
const genWatchLimit = 30 * time.Second

// envGenWatchSchemas sets how many watched histories run; default 4.
const envGenWatchSchemas = "SNAPFLIP_GEN_WATCH_SCHEMAS"

func TestGenerativeWatch(t *testing.T) {
	t.Parallel()
	sz := genSizesFromEnv(t)
	sz.schemas = genEnvInt(t, envGenWatchSchemas, 4)
	sz.syncs = max(sz.syncs, 8)
	base := genBaseSeed(t)
	t.Logf("seeds %d..%d; replay one with %s=<seed> %s=1 go test -race -count=1 -run 'TestGenerativeWatch' ./e2e/",
		base, base+uint64(sz.schemas)-1, envGenSeed, envGenWatchSchemas)
	for i := range sz.schemas {
		seed := base + uint64(i)
		mode := []string{"stats", "logical"}[seed%2]
		szi := sz
		szi.opt = genOptions(seed, sz.opt)
		t.Run(fmt.Sprintf("seed=%d/%s", seed, mode), func(t *testing.T) {
			t.Parallel()
			runWatched(t, seed, szi, mode)
		})
	}
}

// runWatched runs one watched history.
func runWatched(t *testing.T, seed uint64, sz genSizes, mode string) {
	g := sqlgen.New(seed)
	s := g.Schema(sz.opt)
	r := newGenRun(t, seed, sz, s, genCollections(s))
	r.g = g
	r.connect()
	defer func() { r.conn.Close(context.Background()) }()
	for _, stmt := range append(s.Create(), g.Fill(s)...) {
		if err := r.exec(stmt); err != nil {
			r.fatalf("the generated statement fails: %v\n%s", err, genShort(stmt, 3000))
		}
	}
	extra := r.layers
	if mode == "logical" {
		r.replicaIdentities()
		slot := fmt.Sprintf("snapflip_genwatch_%d", seed%1e12)
		t.Cleanup(func() { testenv.DropSlot(t, r.e.DSN, slot) })
		extra += "watch: {mode: logical, slot: " + slot + "}\n"
	}
	r.e.ConfigPath = filepath.Join(t.TempDir(), "snapflip.yaml")
	r.writeConfig(r.e.ConfigPath, r.colls, extra)
	cfg, err := os.ReadFile(r.e.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	r.e.startAPI(t)
	r.repair()
	defer r.e.runSyncer(t, string(cfg))()
	r.awaitWatched(0, nil)
	for k := 1; k < sz.syncs; k++ {
		var stmts []string
		if k%2 == 1 {
			stmts = g.DDL(s) // alone: no row change announces it
		} else {
			stmts = g.Step(s, r.keys)
		}
		for _, stmt := range stmts {
			if err := r.exec(stmt); err != nil && !isUniqueViolation(err) {
				r.fatalf("the generated statement fails: %v\n%s", err, genShort(stmt, 3000))
			}
		}
		r.conn.Close(context.Background())
		r.connect()
		r.repair()
		r.awaitWatched(k, stmts)
	}
}

// repair makes every key valid again (a sync with invalid keys must fail, and the
// watch would retry it until then).
func (r *genRun) repair() {
	if _, invalid := r.states(); len(invalid) == 0 {
		return
	}
	for _, stmt := range r.s.Repair() {
		if err := r.exec(stmt); err != nil {
			r.fatalf("the repair fails: %v\n%s", err, stmt)
		}
	}
}

// awaitWatched waits until the API serves what Postgres holds now, every collection
// from one version, and fails the history if that takes over genWatchLimit.
func (r *genRun) awaitWatched(k int, stmts []string) {
	r.t.Helper()
	states, _ := r.states()
	at := time.Now()
	err := testenv.Poll(genWatchLimit, func() error {
		resp := r.e.get(r.t, "/v1/collections")
		if resp.status != http.StatusOK {
			return fmt.Errorf("GET /v1/collections: %d %s", resp.status, genShort(string(resp.body), 300))
		}
		for _, gc := range r.colls {
			if d := r.e.servedDiff(r.t, gc.Name, resp.version, states[gc.Name].docs); d != "" {
				return fmt.Errorf("version %s: %s", resp.version, d)
			}
		}
		return nil
	})
	if err != nil {
		r.fatalf("step %d was not served (seed %d):\n%s\nits statements:\n%s", k, r.seed, err, genShort(strings.Join(stmts, ";\n"), 3000))
	}
	r.stats.syncs++
	r.t.Logf("step %d served after %s (%d statements)", k, time.Since(at).Round(time.Millisecond), len(stmts))
}
