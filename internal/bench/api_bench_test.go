package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/snapflip/snapflip/internal/testenv"
)

// load is the result of one load run.
type load struct {
	requests int
	errors   int
	rps      float64
	p50, p99 time.Duration
	cpu      time.Duration // wrk's own CPU time (user + system), where wrk made the load
}

func (l load) String() string {
	return fmt.Sprintf("%9.0f req/s  p50 %6.2fms  p99 %6.2fms  (%d requests, %d errors)",
		l.rps, ms(l.p50), ms(l.p99), l.requests, l.errors)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// runLoad runs conns workers for d, each calling do in a loop, and measures.
func runLoad(conns int, d time.Duration, do func(worker, i int) error) load {
	var mu sync.Mutex
	var all []time.Duration
	errs := 0
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	start := time.Now()
	for w := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 1<<16)
			e := 0
			for i := 0; time.Now().Before(deadline); i++ {
				t := time.Now()
				if err := do(w, i); err != nil {
					e++
				}
				lat = append(lat, time.Since(t))
			}
			mu.Lock()
			all = append(all, lat...)
			errs += e
			mu.Unlock()
		}()
	}
	wg.Wait()
	took := time.Since(start)
	slices.Sort(all)
	l := load{requests: len(all), errors: errs, rps: float64(len(all)) / took.Seconds()}
	if len(all) > 0 {
		l.p50, l.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	return l
}

// wrk runs the wrk load generator (C, so it takes little of the CPU the servers need)
// at conns connections for d against url, and reads its figures.
// One wrk thread leaves the other core to the server. script, if set, is a Lua file
// that chooses each request.
func wrk(tb testing.TB, conns int, d time.Duration, cpu int, url, script string) load {
	tb.Helper()
	path, err := exec.LookPath("wrk")
	if err != nil {
		tb.Fatal("wrk is not installed: make bench installs it (apt-get install wrk)")
	}
	args := []string{"-t1", fmt.Sprintf("-c%d", conns), fmt.Sprintf("-d%ds", int(d.Seconds())), "--latency"}
	if script != "" {
		args = append(args, "-s", script)
	}
	cmd := pinned(cpu, exec.Command(path, append(args, url)...))
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("wrk: %v\n%s", err, out)
	}
	l := load{cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "Requests/sec:":
			fmt.Sscanf(f[1], "%f", &l.rps)
		case len(f) == 2 && f[0] == "50%":
			l.p50 = parseWrkDuration(f[1])
		case len(f) == 2 && f[0] == "99%":
			l.p99 = parseWrkDuration(f[1])
		case len(f) >= 4 && f[1] == "requests" && f[2] == "in":
			fmt.Sscanf(f[0], "%d", &l.requests)
		case len(f) >= 4 && f[0] == "Non-2xx":
			fmt.Sscanf(f[len(f)-1], "%d", &l.errors)
		}
	}
	if l.rps == 0 {
		tb.Fatalf("could not read wrk's output:\n%s", out)
	}
	return l
}

// Where taskset exists, the cache-hit runs put the server on CPU serverCPU and wrk on
// CPU loadCPU, so that they do not preempt each other: a client and a server share no
// cores in production, and the shared core's scheduling noise otherwise dominates p99.
// The bare handler and the API are pinned alike. anyCPU leaves a process unpinned.
const (
	anyCPU    = -1
	serverCPU = 0
	loadCPU   = 1
)

// pinned makes cmd run on one CPU (when cpu >= 0, the machine has two or more, and
// taskset is installed).
func pinned(cpu int, cmd *exec.Cmd) *exec.Cmd {
	taskset, err := exec.LookPath("taskset")
	if cpu < 0 || err != nil || runtime.NumCPU() < 2 {
		return cmd
	}
	cmd.Args = append([]string{taskset, "-c", strconv.Itoa(cpu)}, cmd.Args...)
	cmd.Path = taskset
	return cmd
}

// parseWrkDuration parses wrk's "1.23ms", "456.00us", "1.01s".
func parseWrkDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		return -1
	}
	return d
}

// httpGetter returns a load function that GETs base+path(i) with keep-alive.
func httpGetter(conns int, base string, path func(i int) string) func(w, i int) error {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}, Timeout: 10 * time.Second}
	return func(w, i int) error {
		resp, err := client.Get(base + path(w*1_000_003+i))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
}

func freePort(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startAPI starts the metadata-api binary and waits until it is ready.
func startAPI(tb testing.TB, bin, emulator string, cpu int, args ...string) string {
	tb.Helper()
	base, _ := startAPIProc(tb, bin, emulator, cpu, args...)
	return base
}

// startAPIProc is startAPI that also returns the process id.
func startAPIProc(tb testing.TB, bin, emulator string, cpu int, args ...string) (string, int) {
	tb.Helper()
	addr := freePort(tb)
	cmd := pinned(cpu, exec.Command(bin, append([]string{"--addr", addr, "--dataset", "bench", "--log-level", "warn", "--auth", "none"}, args...)...))
	cmd.Env = append(os.Environ(), "BIGTABLE_EMULATOR_HOST="+emulator)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testenv.Eventually(tb, 30*time.Second, func() error {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return fmt.Errorf("metadata-api not ready: %w", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("metadata-api not ready: /readyz answers %s", resp.Status)
		}
		return nil
	})
	return "http://" + addr, cmd.Process.Pid
}

// BenchmarkAPI measures, at 32 connections from wrk: cache-hit reads
// of the metadata API against a bare chi handler writing the same bytes, and cache-miss
// reads against the Bigtable client's own ReadRow on the same emulator.
// Run it with -benchtime 1x.
func BenchmarkAPI(b *testing.B) {
	const rows, hot, conns = 20_000, 1000, 32
	const dur = 5 * time.Second
	dsn := testenv.Postgres(b)
	loadItems(b, dsn, "items", rows)
	dir := b.TempDir()
	syncer := build(b, dir, "github.com/snapflip/snapflip/cmd/syncer")
	apiBin := build(b, dir, "github.com/snapflip/snapflip/cmd/metadata-api")
	bare := build(b, dir, "github.com/snapflip/snapflip/internal/bench/barechi")
	addr, stop := freshEmulator(b)
	defer stop()
	cfg := filepath.Join(dir, "api.yaml")
	if err := os.WriteFile(cfg, []byte("dataset: bench\ncollections:\n  - {name: items, table: items, key: id}\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	out := runProc(b, []string{"SNAPFLIP_POSTGRES_DSN=" + dsn, "BIGTABLE_EMULATOR_HOST=" + addr}, syncer, "--config", cfg, "--log-level", "warn", "once")
	version := strings.Fields(out.out)[1]

	cached := startAPI(b, apiBin, addr, serverCPU)
	uncached := startAPI(b, apiBin, addr, anyCPU, "--cache-size", "-1")
	hotPath := func(i int) string { return fmt.Sprintf("/v1/data/items/%d", 1+i%hot) }
	// Warm the cache with the hot ids, and take one document for the bare handler.
	resp, err := http.Get(cached + hotPath(0))
	if err != nil {
		b.Fatal(err)
	}
	doc, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	runLoad(conns, time.Second, httpGetter(conns, cached, hotPath))

	bareCmd := pinned(serverCPU, exec.Command(bare, "-body", string(doc)))
	bareOut, _ := bareCmd.StdoutPipe()
	if err := bareCmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = bareCmd.Process.Kill(); _ = bareCmd.Wait() }()
	line := make([]byte, 64)
	n, _ := bareOut.Read(line)
	bareBase := "http://" + strings.TrimSpace(string(line[:n]))

	// ReadRow on the same keys, with the real client.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	client, err := bigtable.NewClientWithConfig(context.Background(), "local", "local",
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}, DisableSession: true}, option.WithGRPCConn(conn))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	tbl := client.Open("snapflip")
	readRow := func(w, i int) error {
		row, err := tbl.ReadRow(context.Background(), fmt.Sprintf("d#bench#%s#items#%d", version, 1+((w*1_000_003+i)*7919)%rows))
		if err == nil && len(row) == 0 {
			err = fmt.Errorf("no row")
		}
		return err
	}

	// Misses: every request a different id, as missPath chooses them.
	script := filepath.Join(dir, "miss.lua")
	lua := fmt.Sprintf("counter = 0\nrequest = function()\n  counter = counter + 7919\n  return wrk.format(\"GET\", \"/v1/data/items/\" .. (1 + counter %% %d))\nend\n", rows)
	if err := os.WriteFile(script, []byte(lua), 0o600); err != nil {
		b.Fatal(err)
	}
	for range b.N {
		bareHit := wrk(b, conns, dur, loadCPU, bareBase+hotPath(0), "")
		apiHit := wrk(b, conns, dur, loadCPU, cached+hotPath(0), "")
		rr := runLoad(conns, dur, readRow)
		apiMiss := wrk(b, conns, dur, anyCPU, uncached, script)
		b.ReportMetric(apiHit.rps, "hit_req/s")
		b.ReportMetric(apiHit.rps/bareHit.rps, "hit/bare")
		b.ReportMetric(ms(apiHit.p99), "hit_p99_ms")
		b.ReportMetric(apiMiss.rps/rr.rps, "miss/readrow")
		fmt.Printf(`
metadata API at %d connections, %s each (HTTP: wrk, one thread; ReadRow: 32 goroutines on one client;
cache hits: server on CPU 0, wrk on CPU 1; cache misses: unpinned, as the emulator needs both)
  bare chi handler, same bytes   %s
  API, cache hit                 %s  (%.0f%% of bare; target >= 50%%, p99 < 5ms)
  Bigtable client ReadRow        %s
  API, cache miss (cache off)    %s  (%.0f%% of ReadRow; target >= 80%%)
`, conns, dur, bareHit, apiHit, 100*apiHit.rps/bareHit.rps, rr, apiMiss, 100*apiMiss.rps/rr.rps)
		hitShare, missShare := apiHit.rps/bareHit.rps, apiMiss.rps/rr.rps
		record(b, Figure{Measurement: "bare chi handler writing the same bytes",
			Figure: fmt.Sprintf("%s req/s, p99 %.2f ms", thousands(bareHit.rps), ms(bareHit.p99))})
		record(b, Figure{Measurement: "API, cache hit",
			Figure: fmt.Sprintf("%s req/s (%.0f%% of bare), p99 %.2f ms", thousands(apiHit.rps), 100*hitShare, ms(apiHit.p99)),
			Target: "≥ 50% of bare, p99 < 5 ms", Missed: hitShare < 0.5 || apiHit.p99 >= 5*time.Millisecond})
		record(b, Figure{Measurement: fmt.Sprintf("Bigtable client `ReadRow`, %d goroutines", conns),
			Figure: fmt.Sprintf("%s req/s", thousands(rr.rps))})
		record(b, Figure{Measurement: "API, cache miss (cache off)",
			Figure: fmt.Sprintf("%s req/s (%.0f%% of `ReadRow`)", thousands(apiMiss.rps), 100*missShare),
			Target: "≥ 80% of `ReadRow`", Missed: missShare < 0.8})
		if apiHit.errors+apiMiss.errors+bareHit.errors+rr.errors > 0 {
			b.Errorf("errors under load: %d %d %d %d", bareHit.errors, apiHit.errors, rr.errors, apiMiss.errors)
		}
	}
}
