package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/cli"
	"github.com/snapflip/snapflip/internal/testenv"
)

// These tests run the real `syncer run` binary, let it publish, take Bigtable or
// Postgres away, and require that every tick from then on ends in a logged failure
// and that SIGTERM ends the process promptly with exit code 0. Once, a tick claim's
// re-read ran without any deadline: four syncers whose emulator and Postgres had
// stopped logged nothing for half an hour and ignored SIGTERM.

// shutdownConfig is a syncer config with a one-second schedule.
const shutdownConfig = `dataset: e2e
schedule: "@every 1s"
ttl: 1h
bigtable:
  op_timeout: 1s
collections:
  - name: items
    table: public.items
    key: id
`

// shutdownLimit is how long after SIGTERM the syncer may take to exit: its cleanup has
// a grace of 5s, even with Bigtable or Postgres gone.
const shutdownLimit = 10 * time.Second

// syncerRun is `syncer run` as a child process, its log collected line by line.
type syncerRun struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	logged chan struct{} // receives after each new line (capacity 1)
	exited chan struct{} // closed when the process has exited
	err    error         // the process's exit error, once exited is closed
}

// startSyncerRun starts `syncer run` on the config, Postgres at dsn and the emulator
// at btAddr, and kills it when the test ends if it still runs.
func startSyncerRun(tb testing.TB, config, dsn, btAddr string) *syncerRun {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "snapflip.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(builtSyncer(tb), "--log-level", "debug", "run")
	cmd.Env = append(os.Environ(), cli.EnvConfig+"="+path, cli.EnvPostgresDSN+"="+dsn,
		cli.EnvEmulatorHost+"="+btAddr, cli.EnvLogFormat+"=text")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	r := &syncerRun{cmd: cmd, logged: make(chan struct{}, 1), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			r.mu.Lock()
			r.lines = append(r.lines, sc.Text())
			r.mu.Unlock()
			select {
			case r.logged <- struct{}{}:
			default:
			}
		}
		r.err = cmd.Wait()
		close(r.exited)
	}()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-r.exited
	})
	return r
}

// log returns the lines logged so far.
func (r *syncerRun) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// count returns how many lines logged so far contain s.
func (r *syncerRun) count(s string) int {
	n := 0
	for _, l := range r.log() {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// await waits until at least n lines contain s, failing the test after timeout or
// when the process exits first.
func (r *syncerRun) await(tb testing.TB, s string, n int, timeout time.Duration) {
	tb.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for r.count(s) < n {
		select {
		case <-r.logged:
		case <-r.exited:
			if r.count(s) < n {
				tb.Fatalf("the syncer exited (%v) before logging %d lines with %q; its log:\n%s", r.err, n, s, strings.Join(r.log(), "\n"))
			}
		case <-deadline.C:
			tb.Fatalf("the syncer logged %d of %d lines with %q within %s; its log:\n%s", r.count(s), n, s, timeout, strings.Join(r.log(), "\n"))
		}
	}
}

// terminate sends SIGTERM and waits for the exit, at most shutdownLimit; it returns
// how long the exit took.
func (r *syncerRun) terminate(tb testing.TB) time.Duration {
	tb.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		tb.Fatal(err)
	}
	signalled := time.Now()
	select {
	case <-r.exited:
	case <-time.After(shutdownLimit):
		tb.Fatalf("the syncer still runs %s after SIGTERM; its log:\n%s", shutdownLimit, strings.Join(r.log(), "\n"))
	}
	took := time.Since(signalled)
	if r.err != nil {
		tb.Errorf("the syncer exited with %v after SIGTERM; want exit code 0 (docs/operations.md); its log:\n%s", r.err, strings.Join(r.log(), "\n"))
	}
	return took
}

// checkOutage lets the syncer publish, calls takeAway, waits for two failed ticks,
// sends SIGTERM while the next tick is in flight, and checks that the process exits
// promptly with code 0 and that every tick since the outage logged how it ended: a
// failure naming the cause (want), or its abandonment for the shutdown.
//
// With hung, every connect hangs until its connect_timeout; the tick in flight at
// SIGTERM must then be abandoned for the shutdown, not end by its connect timing out
// (which, being shorter than shutdownLimit, would hide a syncer deaf to SIGTERM).
func checkOutage(t *testing.T, r *syncerRun, takeAway func(), want string, hung bool) {
	r.await(t, "msg=published", 1, 60*time.Second)
	from := len(r.log())
	takeAway()
	began := time.Now()
	r.await(t, `msg="sync failed"`, 2, 60*time.Second)
	t.Logf("two ticks failed in the %s after the outage began", time.Since(began).Round(time.Millisecond))
	r.await(t, `msg="tick started"`, r.count(`msg="tick started"`)+1, 30*time.Second)
	took := r.terminate(t)
	t.Logf("exited %s after SIGTERM, sent while a tick was in flight", took.Round(time.Millisecond))

	var started []string
	ended := map[string]string{} // tick number → how the tick ended
	for _, l := range r.log()[from:] {
		switch tick := field(l, "tick"); {
		case strings.Contains(l, `msg="tick started"`):
			started = append(started, tick)
		case strings.Contains(l, `msg="sync failed"`), strings.Contains(l, `msg="sync abandoned for shutdown"`):
			if tick == "" || ended[tick] != "" {
				t.Errorf("tick %q ended twice, or its end names none: %s", tick, l)
			}
			ended[tick] = l
		}
	}
	for i, tick := range started {
		l, ok := ended[tick]
		switch {
		case i == 0:
			// In flight when the outage began: it may have succeeded, or failed
			// otherwise (a terminated session, say).
		case !ok:
			t.Errorf("tick %s ended without saying how", tick)
		case strings.Contains(l, `msg="sync failed"`) && !strings.Contains(l, want):
			t.Errorf("a failed tick does not say %q: %s", want, l)
		}
	}
	if last := started[len(started)-1]; hung && !strings.Contains(ended[last], `msg="sync abandoned for shutdown"`) {
		t.Errorf("tick %s, hung connecting at SIGTERM, was not abandoned for the shutdown: %q", last, ended[last])
	}
	if r.count("msg=stopped") != 1 {
		t.Errorf("the syncer did not log that it stopped")
	}
	if t.Failed() {
		t.Logf("the syncer's log:\n%s", strings.Join(r.log(), "\n"))
	}
}

// field returns the value of key=value in a text log line.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// itemsSource creates the table the config's one collection reads, with 100 rows.
func itemsSource(tb testing.TB, dsn string) {
	tb.Helper()
	testenv.Exec(tb, dsn, `CREATE TABLE items (id text PRIMARY KEY, n int)`,
		`INSERT INTO items SELECT 'item-' || g, g FROM generate_series(1, 100) g`)
}

// TestShutdownAfterBigtableStops: the emulator dies under a running `syncer run`.
func TestShutdownAfterBigtableStops(t *testing.T) {
	t.Parallel()
	dsn := testenv.Postgres(t)
	itemsSource(t, dsn)
	addr, emu := testenv.StartEmulator(t)
	r := startSyncerRun(t, shutdownConfig, dsn, addr)
	checkOutage(t, r, func() {
		_ = emu.Process.Kill()
		_ = emu.Wait()
	}, "unreachable", false)
}

// TestShutdownAfterPostgresStops: Postgres goes away under a running `syncer run`,
// either shut down (connections are refused) or frozen (connections are accepted and
// never answered, as by a host that vanished). The frozen server's DSN sets a
// connect_timeout of 2 s, so that each tick fails in seconds rather than after the
// default 10 s (pgsource's TestConnectTimeoutByDefault covers the default).
func TestShutdownAfterPostgresStops(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"stopped", "frozen"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			pg := testenv.StartPostgres(t)
			itemsSource(t, pg.DSN)
			dsn := pg.DSN
			if how == "frozen" {
				dsn += "&connect_timeout=2"
			}
			r := startSyncerRun(t, shutdownConfig, dsn, testenv.Bigtable(t))
			takeAway := pg.Stop
			if how == "frozen" {
				takeAway = pg.Freeze
			}
			checkOutage(t, r, takeAway, "connect to postgres at 127.0.0.1", how == "frozen")
		})
	}
}
