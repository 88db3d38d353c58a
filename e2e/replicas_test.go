package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/internal/cli"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// helper starts this test binary as a helper process.
func helper(tb testing.TB, kind, btAddr string, env ...string) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{"SNAPFLIP_HELPER=" + kind, "HELPER_BIGTABLE=" + btAddr}, env...)...)
	cmd.Stderr = os.Stderr
	return cmd
}

// TestLeaseContentionAcrossProcesses: 4 processes × 8 goroutines × 10 rounds on one
// emulator. The shared O_APPEND history, not the lease, shows that holds never overlap;
// tokens are strictly increasing and gap-free; every contender finishes.
func TestLeaseContentionAcrossProcesses(t *testing.T) {
	t.Parallel()
	addr := testenv.Bigtable(t)
	testenv.Store(t, testenv.StoreConfig(addr)) // create the table
	logPath := filepath.Join(t.TempDir(), "history")
	const procs, goroutines, rounds = 4, 8, 10
	var cmds []*exec.Cmd
	for range procs {
		cmd := helper(t, "lease-rounds", addr, "HELPER_LOG="+logPath,
			fmt.Sprintf("HELPER_GOROUTINES=%d", goroutines), fmt.Sprintf("HELPER_ROUNDS=%d", rounds))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if got, want := len(lines), 2*procs*goroutines*rounds; got != want {
		t.Fatalf("history has %d lines; want %d", got, want)
	}
	var last uint64
	for i := 0; i < len(lines); i += 2 {
		var t1, t2 uint64
		var h1, h2 string
		if _, err := fmt.Sscanf(lines[i], "enter %d %s", &t1, &h1); err != nil {
			t.Fatalf("line %d %q: want an enter (two holders at once?)", i, lines[i])
		}
		if _, err := fmt.Sscanf(lines[i+1], "exit %d %s", &t2, &h2); err != nil || t1 != t2 || h1 != h2 {
			t.Fatalf("lines %d-%d %q, %q: another holder entered before %s left", i, i+1, lines[i], lines[i+1], h1)
		}
		if t1 != last+1 {
			t.Fatalf("token %d after %d: want strictly increasing and gap-free", t1, last)
		}
		last = t1
	}
	t.Logf("%d holds across %d processes, no overlap, tokens 1..%d", len(lines)/2, procs, last)
}

// holder is a helper process holding the lease.
type holder struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	token uint64
}

func startHolder(tb testing.TB, addr string, lease time.Duration) *holder {
	tb.Helper()
	cmd := helper(tb, "lease-hold", addr, "HELPER_LEASE="+lease.String())
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	h := &holder{cmd: cmd, in: in, out: bufio.NewScanner(outPipe)}
	if !h.out.Scan() {
		tb.Fatalf("holder said nothing: %v", h.out.Err())
	}
	if _, err := fmt.Sscanf(h.out.Text(), "held %d", &h.token); err != nil {
		tb.Fatalf("holder said %q", h.out.Text())
	}
	return h
}

func contender(tb testing.TB, st *store.Store, retry time.Duration, lease time.Duration) *store.Lease {
	tb.Helper()
	l, err := st.NewLease("publish/ds", store.LeaseConfig{Holder: "contender", Duration: lease, RetryMax: retry,
		BeforeAcquire: snapshot.RaiseFence(st, "ds")})
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// TestKilledHolderIsReplaced: SIGKILL the holder; a contender takes over within the
// lease duration plus one retry period.
func TestKilledHolderIsReplaced(t *testing.T) {
	// Not parallel: it bounds the takeover's delay, which other tests' load stretches.
	addr := testenv.Bigtable(t)
	st := testenv.Store(t, testenv.StoreConfig(addr))
	const lease, retry = time.Second, 100 * time.Millisecond
	h := startHolder(t, addr, lease)
	l := contender(t, st, retry, lease)
	if _, err := l.TryAcquire(context.Background()); !errors.Is(err, snapshot.ErrHeld) {
		t.Fatalf("TryAcquire while the holder lives = %v; want ErrHeld", err)
	}
	killed := time.Now()
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hold, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(killed)
	// Not before the lease ran out; and far sooner than the 30 s the wait allows,
	// with room for the RPCs of a machine running other packages' tests (-race).
	// The takeover's own delay is make bench's figure.
	if took < lease {
		t.Errorf("takeover %s after SIGKILL; want not before the lease (%s) ran out", took, lease)
	}
	if limit := lease + retry + 10*time.Second; took > limit {
		t.Errorf("takeover %s after SIGKILL; want within %s", took, limit)
	}
	if hold.Fence() != h.token+1 {
		t.Errorf("token %d; want %d", hold.Fence(), h.token+1)
	}
	t.Logf("takeover %s after SIGKILL (lease %s, retry %s)", took.Round(time.Millisecond), lease, retry)
	_ = hold.Release(context.Background())
}

// TestStoppedHolderCannotFlip: SIGSTOP the holder past its lease; a contender takes the
// lease and flips; SIGCONT the holder, which flips with its old token: Bigtable refuses
// and the pointer is unchanged.
func TestStoppedHolderCannotFlip(t *testing.T) {
	t.Parallel()
	addr := testenv.Bigtable(t)
	st := testenv.Store(t, testenv.StoreConfig(addr))
	const lease = 500 * time.Millisecond
	h := startHolder(t, addr, lease)
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	hold, err := contender(t, st, 50*time.Millisecond, lease).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gen := snapshot.NewVersionGen([16]byte{9}, nil)
	v1, v2 := gen.Next(), gen.Next()
	if _, err := st.FlipPointer(ctx, "ds", snapshot.Flip{Version: v1, Fence: hold.Fence(), At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(h.in, "flip %s %s\n", v2, v1)
	if !h.out.Scan() {
		t.Fatal("holder did not answer")
	}
	if got := h.out.Text(); !strings.Contains(got, "fenced") {
		t.Errorf("resumed holder's flip: %q; want it fenced", got)
	}
	if p, _ := st.ReadPointer(ctx, "ds"); p.Version != v1 || p.Fence != hold.Fence() {
		t.Errorf("pointer = %s fence %d; want %s fence %d", p.Version, p.Fence, v1, hold.Fence())
	}
	_ = hold.Release(ctx)
}

// TestReplicasPublishEachSlotOnce: 4 syncer replicas receive the same 100 scheduled
// ticks while the source changes before each; every slot is claimed once and
// published at most once, the pointer's source position never goes backwards, and
// every published version is complete.
func TestReplicasPublishEachSlotOnce(t *testing.T) {
	t.Parallel()
	e := start(t)
	// The schedule alone: TestReplicasPublishEachChangeOnce covers the watch.
	cfg := "watch: {enabled: false}\n" + strings.Replace(config, `schedule: "@every 1h"`, `schedule: "@every 1m"`, 1)
	if err := os.WriteFile(e.ConfigPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	const replicas, ticks = 4, 100
	type outcome struct {
		replica int
		res     snapshot.TickResult
		err     error
	}
	results := make(chan outcome, replicas*ticks)
	var tickChans []chan time.Time
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for r := range replicas {
		ch := make(chan time.Time)
		tickChans = append(tickChans, ch)
		s := &cli.Syncer{Getenv: e.Getenv, Stdout: io.Discard, Stderr: io.Discard, Ticks: ch,
			OnTick: func(res snapshot.TickResult, err error) { results <- outcome{r, res, err} }}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Run(ctx, []string{"run"}); err != nil {
				t.Errorf("replica %d: %v", r, err)
			}
		}()
	}
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	base := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	var lastLSN uint64
	claimedBy := map[int64]int{}
	for k := range ticks {
		if k%3 != 2 { // leave some ticks with nothing to publish
			testenv.Exec(t, e.DSN, fmt.Sprintf(`UPDATE things SET gen = %d WHERE id = 'plain'`, k+1))
		}
		tick := base.Add(time.Duration(k) * time.Minute)
		for _, ch := range tickChans {
			ch <- tick
		}
		for range replicas {
			o := <-results
			if o.err != nil {
				t.Errorf("tick %d replica %d: %v", k, o.replica, o.err)
			}
			if o.res.Claimed {
				claimedBy[o.res.Tick]++
			}
		}
		p, err := st.ReadPointer(context.Background(), "e2e")
		if err != nil {
			t.Fatal(err)
		}
		if p.Source.LSN < lastLSN {
			t.Errorf("tick %d: pointer source went back from %d to %d", k, lastLSN, p.Source.LSN)
		}
		lastLSN = p.Source.LSN
	}
	cancel()
	wg.Wait()

	if len(claimedBy) != ticks {
		t.Errorf("%d slots claimed; want %d", len(claimedBy), ticks)
	}
	for slot, n := range claimedBy {
		if n != 1 {
			t.Errorf("slot %d claimed by %d replicas", slot, n)
		}
	}
	publishedPerSlot, published := checkPublished(t, st, "e2e")
	if want := ticks * 2 / 3; len(publishedPerSlot) < want {
		t.Errorf("%d slots published; want at least %d (the ticks after a change)", len(publishedPerSlot), want)
	}
	t.Logf("%d ticks × %d replicas: %d slots claimed once each, %d published, %d versions in all",
		ticks, replicas, len(claimedBy), len(publishedPerSlot), published)
}

// checkPublished checks that no slot was published twice and that every published
// version is complete, manifest and stored documents alike. It returns the number of
// publishes per slot and of published versions.
func checkPublished(tb testing.TB, st *store.Store, dataset string) (map[int64]int, int) {
	tb.Helper()
	ms, err := st.ListManifests(context.Background(), dataset)
	if err != nil {
		tb.Fatal(err)
	}
	publishedPerSlot := map[int64]int{}
	published := 0
	byVersion := map[snapshot.Version]snapshot.Manifest{}
	for _, m := range ms {
		byVersion[m.Version] = m
	}
	for _, m := range ms {
		if m.State != snapshot.StatePublished && m.State != snapshot.StateRetired {
			continue
		}
		published++
		if m.Tick != 0 {
			publishedPerSlot[m.Tick]++
		}
		if err := m.CheckComplete(); err != nil {
			tb.Errorf("published version incomplete: %v", err)
		}
		for name, c := range m.Collections {
			// Every layer a chain reads is a version that was sealed: a killed or
			// failed sync's rows are never reachable, also not through a later version.
			for _, l := range c.Layers {
				lm, ok := byVersion[l.Version]
				if !ok || !lm.State.Servable() {
					tb.Errorf("version %s %s reads layer %s, whose manifest is %v (state %q)", m.Version, name, l.Version, ok, lm.State)
				}
			}
			n := int64(0)
			if err := st.ScanDocuments(context.Background(), snapshot.ChainRef{Dataset: dataset, Chain: m.Chain(name), Collection: name}, func(snapshot.Document) bool { n++; return true }); err != nil {
				tb.Fatal(err)
			}
			if n != c.Rows {
				tb.Errorf("version %s %s: %d documents stored; manifest says %d", m.Version, name, n, c.Rows)
			}
			checkIndexes(tb, st, dataset, m, name)
		}
	}
	for slot, n := range publishedPerSlot {
		if n > 1 {
			tb.Errorf("slot %d published %d times", slot, n)
		}
	}
	return publishedPerSlot, published
}

// TestSyncerProcesses: 4 real syncer processes on a 1s schedule while the source
// changes, until three ticks have published (however long a loaded machine takes);
// SIGTERM stops each cleanly; no slot was published twice, every published version is
// complete, and the pointer's source position only moved forward.
func TestSyncerProcesses(t *testing.T) {
	t.Parallel()
	e := start(t)
	// The schedule alone: TestReplicasPublishEachChangeOnce covers the watch.
	cfg := "watch: {enabled: false}\n" + strings.Replace(config, `schedule: "@every 1h"`, `schedule: "@every 1s"`, 1)
	if err := os.WriteFile(e.ConfigPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	procs, logs := e.startSyncers(t, 4)
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	var lastLSN uint64
	g := 0
	testenv.Eventually(t, 90*time.Second, func() error {
		g++
		testenv.Exec(t, e.DSN, fmt.Sprintf(`UPDATE things SET gen = %d WHERE id = 'plain'`, g))
		if p, err := st.ReadPointer(context.Background(), "e2e"); err == nil {
			if p.Source.LSN < lastLSN {
				t.Errorf("pointer source went back from %d to %d", lastLSN, p.Source.LSN)
			}
			lastLSN = p.Source.LSN
		}
		ms, err := st.ListManifests(context.Background(), "e2e")
		if err != nil {
			t.Fatal(err)
		}
		slots := map[int64]bool{}
		for _, m := range ms {
			if m.Tick != 0 && (m.State == snapshot.StatePublished || m.State == snapshot.StateRetired) {
				slots[m.Tick] = true
			}
		}
		if len(slots) < 3 {
			return fmt.Errorf("%d scheduled publishes after %d changes; want 3", len(slots), g)
		}
		return nil
	})
	for _, cmd := range procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for i, cmd := range procs {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("syncer %d exited with %v after SIGTERM; log:\n%s", i, err, logs[i])
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("syncer %d did not stop within 15s of SIGTERM", i)
		}
	}
	perSlot, published := checkPublished(t, st, "e2e")
	t.Logf("4 syncer processes: %d scheduled publishes, %d versions published in all, none twice per slot", len(perSlot), published)
}

// TestReplicasPublishEachChangeOnce: 3 `syncer run` processes, the schedule hourly so
// only their watches publish, under a stream of commits, one of them SIGKILLed midway:
// the pointer never goes back, no version repeats its predecessor's contents (each
// change is published once, not once per replica), every layer read is sealed, and
// the last commit is served.
func TestReplicasPublishEachChangeOnce(t *testing.T) {
	t.Parallel()
	e := start(t)
	procs, logs := e.startSyncers(t, 3)
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	var lastLSN uint64
	const commits = 25
	for g := 1; g <= commits; g++ {
		testenv.Exec(t, e.DSN, fmt.Sprintf(`UPDATE things SET gen = %d WHERE id = 'plain'`, g))
		if g == commits/2 {
			_ = procs[0].Process.Kill()
			_ = procs[0].Wait()
		}
		if p, err := st.ReadPointer(context.Background(), "e2e"); err == nil {
			if p.Source.LSN < lastLSN {
				t.Errorf("pointer source went back from %d to %d", lastLSN, p.Source.LSN)
			}
			lastLSN = p.Source.LSN
		}
		time.Sleep(250 * time.Millisecond) // pacing the source's changes, not awaiting anything
	}
	e.awaitServed(t, docPath("things", "plain"), fmt.Sprintf(`"gen":%d`, commits), time.Now(), time.Minute)
	for _, cmd := range procs[1:] {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for i, cmd := range procs[1:] {
		if err := cmd.Wait(); err != nil {
			t.Errorf("syncer %d exited with %v after SIGTERM; log:\n%s", i+1, err, logs[i+1])
		}
	}
	_, published := checkPublished(t, st, "e2e")
	ms, err := st.ListManifests(context.Background(), "e2e")
	if err != nil {
		t.Fatal(err)
	}
	var prev *snapshot.Manifest
	for _, m := range ms {
		if m.State != snapshot.StatePublished && m.State != snapshot.StateRetired {
			continue
		}
		if prev != nil && prev.Collections["things"].Digest == m.Collections["things"].Digest &&
			prev.Collections["flags"].Digest == m.Collections["flags"].Digest {
			t.Errorf("versions %s and %s hold the same contents: a change published twice", prev.Version, m.Version)
		}
		if prev != nil && m.Source.LSN < prev.Source.LSN {
			t.Errorf("version %s was read before its predecessor %s", m.Version, prev.Version)
		}
		prev = &m
	}
	t.Logf("3 replicas (one killed midway), %d commits: %d versions published", commits, published)
}

// startSyncers starts n `syncer run` processes on e's config and returns them with
// their logs.
func (e *env) startSyncers(tb testing.TB, n int) ([]*exec.Cmd, []*strings.Builder) {
	tb.Helper()
	bin := builtSyncer(tb)
	var procs []*exec.Cmd
	var logs []*strings.Builder
	for range n {
		cmd := exec.Command(bin, "run")
		cmd.Env = append(os.Environ(), cli.EnvConfig+"="+e.ConfigPath, cli.EnvPostgresDSN+"="+e.DSN, cli.EnvEmulatorHost+"="+e.Bigtable)
		var log strings.Builder
		cmd.Stderr = &log
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		procs, logs = append(procs, cmd), append(logs, &log)
	}
	return procs, logs
}

// checkIndexes fails tb unless each index of a collection in version m holds, read
// through its chain, exactly the entries the version's documents make.
func checkIndexes(tb testing.TB, st *store.Store, dataset string, m snapshot.Manifest, collection string) {
	tb.Helper()
	ctx := context.Background()
	c := m.Collections[collection]
	for _, decl := range c.Indexes {
		def, err := index.Typed(decl)
		if err != nil {
			tb.Fatal(err)
		}
		var want, got []string
		err = st.ScanDocuments(ctx, snapshot.ChainRef{Dataset: dataset, Chain: m.Chain(collection), Collection: collection}, func(d snapshot.Document) bool {
			k, err := index.Key(def, d.Body)
			if err != nil {
				tb.Fatalf("version %s %s: %v", m.Version, collection, err)
			}
			want = append(want, index.EntryID(k, d.ID))
			return true
		})
		if err != nil {
			tb.Fatal(err)
		}
		err = st.ScanIndex(ctx, snapshot.ChainRef{Dataset: dataset, Chain: m.Chain(collection), Collection: index.Collection(collection, decl.Name)}, func(e string) bool {
			got = append(got, e)
			return true
		})
		if err != nil {
			tb.Fatal(err)
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			tb.Errorf("version %s %s index %s: %d entries through the chain, %d made by its documents", m.Version, collection, decl.Name, len(got), len(want))
		}
	}
}
