package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/cli"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
)

// runSyncer starts `syncer run` in-process with cfg and returns a stop function. When
// the test fails, the end of the syncer's log is printed with it.
func (e *env) runSyncer(tb testing.TB, cfg string) func() {
	tb.Helper()
	return e.runSyncerWith(tb, cfg)
}

// runSyncerWith is runSyncer with more arguments for `syncer run`.
func (e *env) runSyncerWith(tb testing.TB, cfg string, args ...string) func() {
	tb.Helper()
	if err := os.WriteFile(e.ConfigPath, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	var log testenv.Log
	tb.Cleanup(func() {
		if tb.Failed() {
			lines := strings.Split(strings.TrimSpace(log.String()), "\n")
			tb.Logf("the last lines of syncer run's log:\n%s", strings.Join(lines[max(0, len(lines)-60):], "\n"))
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	s := &cli.Syncer{Getenv: e.Getenv, Stdout: io.Discard, Stderr: &log}
	go func() { done <- s.Run(ctx, append([]string{"run"}, args...)) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("syncer run: %v", err)
		}
	}
}

// readFor reads path through the API every 25ms for d and fails on any answer but
// 200; it returns the versions seen. (Reading for a span of time is the point: the
// current version must stay readable across several TTLs.)
func (e *env) readFor(tb testing.TB, path string, d time.Duration) map[string]int {
	tb.Helper()
	seen := map[string]int{}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(25 * time.Millisecond) {
		r := e.get(tb, path)
		if r.status != http.StatusOK {
			tb.Fatalf("GET %s = %d %s after %d good reads; the current version expired", path, r.status, r.body, len(seen))
		}
		seen[r.version]++
	}
	return seen
}

// TestTTLKeepAlive: with a TTL of 10s, the current version stays readable for 30s
// (three TTLs) because the syncer republishes it past half the TTL, though the source
// never changes; the first version, no longer current, really does expire.
func TestTTLKeepAlive(t *testing.T) {
	// Not parallel: its TTL of seconds leaves little room for a loaded machine. A
	// republish starts past half the TTL (5s), leaving it 5s to be served.
	e := start(t)
	cfg := strings.NewReplacer(`schedule: "@every 1h"`, `schedule: "@every 1s"`, "ttl: 1h", "ttl: 10s").Replace(config)
	stop := e.runSyncer(t, cfg)
	defer stop()
	first := e.awaitVersion(t, docPath("things", "plain"), "").version
	testenv.EmulatorCollects(t, e.Bigtable)
	seen := e.readFor(t, docPath("things", "plain"), 30*time.Second)
	if len(seen) < 3 {
		t.Errorf("saw %d versions in 30s with a 10s TTL; want a republish at least every 10s: %v", len(seen), seen)
	}
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	testenv.Eventually(t, time.Minute, func() error {
		if _, err := st.GetDocument(context.Background(), snapshot.ChainRef{Dataset: "e2e", Chain: []snapshot.Version{snapshot.Version(first)}, Collection: "things"}, "plain"); !errors.Is(err, snapshot.ErrNotFound) {
			return fmt.Errorf("the first version's document = %v; want it expired (else this test proves nothing)", err)
		}
		return nil
	})
}

// TestTTLKeepAlivePinned: a pinned version is not replaced but refreshed in place, and
// stays readable for three TTLs.
func TestTTLKeepAlivePinned(t *testing.T) {
	// Not parallel: its TTL of seconds leaves no room for a loaded machine.
	e := start(t)
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	ctx := context.Background()
	p, err := st.ReadPointer(ctx, "e2e")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.FlipPointer(ctx, "e2e", snapshot.Flip{Version: p.Version, Expected: p.Version, Fence: p.Fence + 1,
		Source: p.Source, Rollback: true, Pin: true, Reason: "test", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	e.awaitVersion(t, docPath("things", "plain"), string(p.Version)) // the API has read the pointer
	testenv.Exec(t, e.DSN, `UPDATE things SET gen = 99`)             // a change that must not be published while pinned
	cfg := strings.NewReplacer(`schedule: "@every 1h"`, `schedule: "@every 1s"`, "ttl: 1h", "ttl: 10s").Replace(config)
	stop := e.runSyncer(t, cfg)
	defer stop()
	seen := e.readFor(t, docPath("things", "plain"), 30*time.Second)
	if len(seen) != 1 || seen[string(p.Version)] == 0 {
		t.Errorf("versions served while pinned: %v; want only %s", seen, p.Version)
	}
	m, err := st.ReadManifest(ctx, "e2e", p.Version)
	if err != nil || time.Since(m.RefreshedAt) > 10*time.Second {
		t.Errorf("pinned manifest refreshed at %s (%v); want within the last TTL", m.RefreshedAt, err)
	}
}

// TestSIGTERMMidSync: SIGTERM while `syncer run` copies a large table: the process
// exits 0 promptly, the pointer still names the previous version, the half-written
// version is marked failed, and the lease is free for the next replica.
func TestSIGTERMMidSync(t *testing.T) {
	t.Parallel()
	e := start(t)
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	before, err := st.ReadPointer(context.Background(), "e2e")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Exec(t, e.DSN, `INSERT INTO things (id, gen) SELECT 'bulk-' || g, 1 FROM generate_series(1, 400000) g`)
	cfg := strings.Replace(config, `schedule: "@every 1h"`, `schedule: "@every 1s"`, 1) + "progress_interval: 50ms\n"
	if err := os.WriteFile(e.ConfigPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := builtSyncer(t)
	cmd := exec.Command(bin, "run")
	cmd.Env = append(os.Environ(), cli.EnvConfig+"="+e.ConfigPath, cli.EnvPostgresDSN+"="+e.DSN, cli.EnvEmulatorHost+"="+e.Bigtable)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	copying := make(chan struct{})
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			fmt.Fprintln(&log, sc.Text())
			if !signalled && strings.Contains(sc.Text(), "msg=copying") {
				signalled = true
				close(copying)
			}
		}
	}()
	select {
	case <-copying:
	case <-time.After(60 * time.Second):
		t.Fatal("the syncer never reported copying")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	signalled := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("syncer exited with %v after SIGTERM; want 0", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("syncer still running a minute after SIGTERM")
	}
	took := time.Since(signalled)
	after, err := st.ReadPointer(context.Background(), "e2e")
	if err != nil || after.Version != before.Version {
		t.Errorf("pointer after SIGTERM mid-sync = %s, %v; want %s", after.Version, err, before.Version)
	}
	ms, _ := st.ListManifests(context.Background(), "e2e")
	if last := ms[len(ms)-1]; last.Version == before.Version || last.State != snapshot.StateFailed {
		t.Errorf("the interrupted version %s is %s; want failed", last.Version, last.State)
	}
	l, err := st.NewLease("publish/e2e", storeLeaseConfig("next"))
	if err != nil {
		t.Fatal(err)
	}
	if h, err := l.TryAcquire(context.Background()); err != nil {
		t.Errorf("lease after a clean shutdown: %v; want it released", err)
	} else {
		_ = h.Release(context.Background())
	}
	t.Logf("exited %s after SIGTERM mid-copy", took.Round(time.Millisecond))
}

// writeConfig replaces the syncer's config file.
func writeConfig(tb testing.TB, e *env, cfg string) {
	tb.Helper()
	if err := os.WriteFile(e.ConfigPath, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
}
