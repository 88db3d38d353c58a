package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/cli"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
)

// builtSyncer builds cmd/syncer once per test process.
func builtSyncer(tb testing.TB) string {
	tb.Helper()
	return testenv.Build(tb, "github.com/snapflip/snapflip/cmd/syncer")
}

// runKilled runs the syncer binary with args and env, expecting it to die by SIGKILL
// (from SNAPFLIP_CRASH_AT, or from the test after delay when delay >= 0).
func (e *env) runKilled(tb testing.TB, delay time.Duration, env []string, args ...string) (killed bool) {
	tb.Helper()
	cmd := exec.Command(builtSyncer(tb), args...)
	cmd.Env = append(os.Environ(), append([]string{cli.EnvConfig + "=" + e.ConfigPath, cli.EnvPostgresDSN + "=" + e.DSN,
		cli.EnvEmulatorHost + "=" + e.Bigtable, cli.EnvLogFormat + "=text"}, env...)...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	if delay >= 0 {
		time.AfterFunc(delay, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true
		}
	}
	if err != nil {
		tb.Fatalf("syncer %v: %v\n%s", args, err, out.String())
	}
	return false
}

// checkAfterCrash: the pointer names a complete, servable version and the API answers
// from it.
func (e *env) checkAfterCrash(tb testing.TB, what string) snapshot.Pointer {
	tb.Helper()
	st := testenv.Store(tb, testenv.StoreConfig(e.Bigtable))
	ctx := context.Background()
	p, err := st.ReadPointer(ctx, "e2e")
	if err != nil {
		tb.Fatalf("%s: pointer: %v", what, err)
	}
	m, err := st.ReadManifest(ctx, "e2e", p.Version)
	if err != nil || !m.State.Servable() || m.CheckComplete() != nil {
		tb.Fatalf("%s: the pointer names %s, %s (%v, %v); want a complete version", what, p.Version, m.State, err, m.CheckComplete())
	}
	e.awaitVersion(tb, docPath("things", "plain"), string(p.Version))
	return p
}

// TestCrashAtEveryPoint kills the syncer at each point of the publish and rollback
// protocols while readers watch; after each kill the pointer names a complete version,
// the API answers from it, no reader ever saw a partial version, and the next run
// publishes.
func TestCrashAtEveryPoint(t *testing.T) {
	t.Parallel()
	e := start(t)
	// A 3 s lease: renewals a stalled emulator delays past a 1 s lease lose the hold
	// (see TestCrashAtRandomTimes); each run after a kill waits it out.
	writeConfig(t, e, config+"lease:\n  duration: 3s\n")
	testenv.Exec(t, e.DSN, `INSERT INTO things (id) SELECT 'bulk-' || g FROM generate_series(1, 5000) g`)
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	e.awaitVersion(t, docPath("things", "plain"), "")
	stopReaders := e.watchReaders(t)

	gen := 0
	next := func() {
		gen++
		testenv.Exec(t, e.DSN, fmt.Sprintf(`UPDATE things SET gen = %d`, gen))
	}
	for _, point := range []string{"after-open", "mid-write@2000", "after-seal", "after-flip"} {
		next()
		if !e.runKilled(t, -1, []string{cli.EnvCrashAt + "=" + point}, "--force", "once") {
			t.Fatalf("crash point %s was never reached", point)
		}
		e.checkAfterCrash(t, "after a kill at "+point)
		out, err := e.sync(t)
		if err != nil {
			t.Fatalf("the run after a kill at %s: %v", point, err)
		}
		if point != "after-flip" && !strings.HasPrefix(out, "published") {
			t.Errorf("the run after a kill at %s said %q; want a publish", point, out)
		}
		e.checkAfterCrash(t, "after the next run")
	}
	// A rollback killed right after its flip: the pointer is on the target, pinned.
	next()
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if !e.runKilled(t, -1, []string{cli.EnvCrashAt + "=rollback-flip"}, "rollback", "--previous", "--reason", "crash test") {
		t.Fatal("rollback-flip was never reached")
	}
	if p := e.checkAfterCrash(t, "after a kill during rollback"); !p.Pinned {
		t.Error("a rollback killed after its flip left the dataset unpinned")
	}
	if _, err := e.syncerCmd(t, "unpin", "--reason", "after the crash"); err != nil {
		t.Fatal(err)
	}
	next()
	if out, err := e.sync(t); err != nil || !strings.HasPrefix(out, "published") {
		t.Fatalf("sync after the rollback crash = %q, %v", out, err)
	}
	stopReaders()
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	checkPublished(t, st, "e2e")
}

// TestCrashAtRandomTimes kills the syncer at random moments of syncs of 50,000 rows:
// 5 kills here, SNAPFLIP_CHAOS_KILLS (make chaos: 50) in the long form.
func TestCrashAtRandomTimes(t *testing.T) {
	t.Parallel()
	kills := 5
	if n, err := strconv.Atoi(os.Getenv("SNAPFLIP_CHAOS_KILLS")); err == nil && n > 0 {
		kills = n
	}
	e := start(t)
	// A 2 s lease: each run after a kill waits that long to take the dead holder's lease
	// over. With 1 s, the emulator — which walks every stored row about once a second
	// under its table lock, and keeps every version of this test — could stall a live
	// holder's renewals past its deadline late in the long form, and the holder then
	// rightly gave the lease up (failing its sync cleanly, which this test does not expect).
	writeConfig(t, e, config+"lease:\n  duration: 2s\n")
	testenv.Exec(t, e.DSN, `INSERT INTO things (id) SELECT 'bulk-' || g FROM generate_series(1, 50000) g`)
	start := time.Now()
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	full := time.Since(start)
	e.awaitVersion(t, docPath("things", "plain"), "")
	stopReaders := e.watchReaders(t)
	killed := 0
	for i := range kills {
		testenv.Exec(t, e.DSN, fmt.Sprintf(`UPDATE things SET gen = %d`, 1000+i))
		delay := time.Duration(rand.Int64N(int64(full + 200*time.Millisecond)))
		if e.runKilled(t, delay, nil, "once") {
			killed++
		}
		e.checkAfterCrash(t, fmt.Sprintf("after kill %d at %s", i, delay))
	}
	if _, err := e.sync(t); err != nil {
		t.Fatalf("sync after the kills: %v", err)
	}
	e.checkAfterCrash(t, "after the kills")
	stopReaders()
	checkPublished(t, testenv.Store(t, testenv.StoreConfig(e.Bigtable)), "e2e")
	t.Logf("%d of %d runs killed mid-way (full sync %s); the pointer always named a complete version", killed, kills, full.Round(time.Millisecond))
}

// watchReaders reads a document through the API until stopped, checking that every
// answer is 200 and that each version always answers with one generation.
func (e *env) watchReaders(tb testing.TB) func() {
	tb.Helper()
	stop := e.readers(tb, 2, func() (string, []int, error) {
		r := e.get(tb, docPath("things", "plain"))
		if r.status != http.StatusOK {
			return "", nil, fmt.Errorf("status %d %s", r.status, r.body)
		}
		return r.version, []int{gen(tb, r.body)}, nil
	})
	return func() { stop() }
}

// readers runs n goroutines calling read until the returned function is called, which
// returns how many reads each version answered. read returns the version an answer
// came from and the generations of the documents in it; every answer from one version
// must carry one and the same generation (a torn or mixed read fails the test).
func (e *env) readers(tb testing.TB, n int, read func() (string, []int, error)) func() map[string]int {
	tb.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	genOf := map[string]int{}
	count := map[string]int{}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, gens, err := read()
				if err != nil {
					tb.Errorf("a reader: %v", err)
					return
				}
				mu.Lock()
				for _, g := range gens {
					if prev, ok := genOf[v]; ok && prev != g {
						tb.Errorf("version %s answered generations %d and %d: a torn or mixed read", v, prev, g)
					}
					genOf[v] = g
				}
				count[v]++
				mu.Unlock()
			}
		}()
	}
	return func() map[string]int {
		close(stop)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return count
	}
}
