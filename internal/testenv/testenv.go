// Package testenv gives tests real components: a fresh database on the throwaway
// Postgres server that `make test` starts, and a fresh Bigtable emulator process
// reached through the real client.
package testenv

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/jackc/pgx/v5"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/snapflip/snapflip/store"
)

// EnvPostgres names the variable holding the DSN of a Postgres server tests may create
// databases on. `make test` sets it.
const EnvPostgres = "SNAPFLIP_TEST_POSTGRES_DSN"

var dbSeq atomic.Int64

// Postgres creates a fresh, empty database for the test, drops it when the test ends,
// and returns its DSN. It fails the test, never skips it, when no server is configured.
func Postgres(tb testing.TB) string {
	tb.Helper()
	return database(tb, EnvPostgres)
}

// EnvReplicated and EnvStandby name the variables holding the DSNs of a second
// throwaway server and of its hot standby (streaming replication). `make test` sets
// them. Only one test at a time uses that pair, so the primary is quiet: no
// transaction but the test's own completes there.
const (
	EnvReplicated = "SNAPFLIP_TEST_REPLICATED_DSN"
	EnvStandby    = "SNAPFLIP_TEST_STANDBY_DSN"
)

var replicated sync.Mutex

// Replicated creates a fresh database on the replicated server and returns its DSN
// on the primary and on the standby, once the standby has replayed its creation. The
// test holds the pair alone until it ends. It fails the test, never skips it, when
// the pair is not configured.
func Replicated(tb testing.TB) (primary, standby string) {
	tb.Helper()
	if os.Getenv(EnvStandby) == "" {
		tb.Fatalf("%s is not set: run the tests with `make test`, which starts a primary and its standby", EnvStandby)
	}
	replicated.Lock()
	tb.Cleanup(replicated.Unlock)
	primary = database(tb, EnvReplicated)
	u, err := url.Parse(os.Getenv(EnvStandby))
	if err != nil {
		tb.Fatalf("%s must be a postgres:// URL", EnvStandby)
	}
	u.Path = "/" + Database(tb, primary)
	standby = u.String()
	Replayed(tb, primary, standby)
	return primary, standby
}

// Replayed waits until the standby at standby has replayed every WAL record the
// primary at primary had written when it was called.
func Replayed(tb testing.TB, primary, standby string) {
	tb.Helper()
	var lsn string
	QueryRow(tb, os.Getenv(EnvReplicated), `SELECT pg_current_wal_insert_lsn()::text`, &lsn)
	Eventually(tb, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, standby)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("the standby has not replayed up to %s", lsn)
		}
		return nil
	})
}

// database creates a fresh database on the server the variable env names, drops it
// when the test ends, and returns its DSN.
func database(tb testing.TB, env string) string {
	tb.Helper()
	admin := os.Getenv(env)
	if admin == "" {
		tb.Fatalf("%s is not set: run the tests with `make test`, which starts a throwaway Postgres", env)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatalf("connect to test postgres (%s): %v", EnvPostgres, err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("snapflip_test_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6, dbSeq.Add(1))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("create test database: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			tb.Errorf("drop test database: %v", err)
			return
		}
		defer conn.Close(ctx)
		// A backend of a process the test killed can outlive it a moment, holding a
		// temporary replication slot, which a drop, even forced, refuses: end the
		// database's backends, and try again until no slot is active.
		Eventually(tb, 30*time.Second, func() error {
			_, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, name)
			if err == nil {
				_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			}
			if err != nil {
				return fmt.Errorf("drop test database %s: %w", name, err)
			}
			return nil
		})
	})
	u, err := url.Parse(admin)
	if err != nil || !strings.HasPrefix(admin, "postgres") {
		tb.Fatalf("%s must be a postgres:// URL", env)
	}
	u.Path = "/" + name
	return u.String()
}

// Role creates a login role on the test server, named prefix plus a unique suffix,
// and drops it when the test ends. Call it before Postgres: cleanups run last first,
// so the role is dropped after the database that holds its objects and grants.
func Role(tb testing.TB, prefix string) string {
	tb.Helper()
	admin := os.Getenv(EnvPostgres)
	role := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), time.Now().UnixNano()%1e9)
	Exec(tb, admin, "CREATE ROLE "+role+" LOGIN")
	tb.Cleanup(func() { Exec(tb, admin, "DROP ROLE IF EXISTS "+role) })
	return role
}

// AsRole returns dsn with role as its user.
func AsRole(tb testing.TB, dsn, role string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("parse dsn: %v", err)
	}
	u.User = url.User(role)
	return u.String()
}

// Database returns the name of the database at dsn.
func Database(tb testing.TB, dsn string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("parse dsn: %v", err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// Exec runs SQL statements on the database at dsn, failing the test on error.
func Exec(tb testing.TB, dsn string, sql ...string) {
	tb.Helper()
	withConn(tb, dsn, func(ctx context.Context, conn *pgx.Conn) {
		for _, s := range sql {
			if _, err := conn.Exec(ctx, s); err != nil {
				tb.Fatalf("exec %.80q: %v", s, err)
			}
		}
	})
}

// QueryRow runs one query on the database at dsn and scans its single row into dest,
// failing the test on error.
func QueryRow(tb testing.TB, dsn, sql string, dest ...any) {
	tb.Helper()
	withConn(tb, dsn, func(ctx context.Context, conn *pgx.Conn) {
		if err := conn.QueryRow(ctx, sql).Scan(dest...); err != nil {
			tb.Fatalf("query %.80q: %v", sql, err)
		}
	})
}

// withConn runs f on a connection of its own to dsn, within a minute.
func withConn(tb testing.TB, dsn string, f func(ctx context.Context, conn *pgx.Conn)) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	f(ctx, conn)
}

// OpenTx begins a transaction on a session of its own, runs sql in it, and leaves it
// open: it holds what its statements locked until the test commits or rolls it back
// (tx.Conn() is its session). When the test ends it is rolled back if still open, and
// its session closed.
func OpenTx(tb testing.TB, dsn string, sql ...string) pgx.Tx {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(func() { conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		tb.Fatalf("begin: %v", err)
	}
	tb.Cleanup(func() { _ = tx.Rollback(ctx) }) // runs first; a no-op once the test ended it
	for _, s := range sql {
		if _, err := tx.Exec(ctx, s); err != nil {
			tb.Fatalf("exec %.80q: %v", s, err)
		}
	}
	return tx
}

// Log is a log that other goroutines write (a logger's output) and the test reads.
type Log struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Await waits up to 30 s until n lines of the log hold every one of want, and
// returns the first of them.
func (l *Log) Await(tb testing.TB, what string, n int, want ...string) string {
	tb.Helper()
	var found []string
	err := Poll(30*time.Second, func() error {
		found = found[:0]
		for _, line := range strings.Split(l.String(), "\n") {
			if !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(line, w) }) {
				found = append(found, line)
			}
		}
		if len(found) < n {
			return fmt.Errorf("%s: %d lines of the log hold %q; want %d", what, len(found), want, n)
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("%v. The log:\n%s", err, l.String())
	}
	return found[0]
}

// EnvEmulator names the variable holding the path of a built Bigtable emulator
// (cloud.google.com/go/bigtable/cmd/emulator). `make test` sets it; without it, the
// first test that needs one builds it.
const EnvEmulator = "SNAPFLIP_TEST_EMULATOR"

var (
	buildMu sync.Mutex
	built   = map[string]string{} // package → binary
)

// Build compiles a main package once per test process and returns the binary's path.
// In a test built with -race, so is the binary.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := built[pkg]; ok {
		return bin
	}
	dir, err := os.MkdirTemp("", "snapflip-bin")
	if err != nil {
		tb.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	args := []string{"build", "-o", bin}
	if raceEnabled {
		// As the test binary was: its packages are then in the build cache already,
		// and only main is compiled, instead of every dependency a second time.
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, pkg)...).CombinedOutput(); err != nil {
		tb.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	built[pkg] = bin
	return bin
}

// emulatorBuilding, appended to EnvEmulator's path, names a file that exists while
// the binary is being built: `make test` builds the emulator while the tests compile,
// and moves it into place when done.
const emulatorBuilding = ".building"

// emulatorPath returns the emulator binary: EnvEmulator, once it is built, or one
// built once.
func emulatorPath(tb testing.TB) string {
	tb.Helper()
	p := os.Getenv(EnvEmulator)
	if p == "" {
		return Build(tb, "cloud.google.com/go/bigtable/cmd/emulator")
	}
	Eventually(tb, 10*time.Minute, func() error {
		if _, err := os.Stat(p + emulatorBuilding); err == nil {
			return fmt.Errorf("%s is still being built", p)
		}
		return nil
	})
	return p
}

// Bigtable starts a fresh Bigtable emulator process for the test, stops it when the
// test ends, and returns its address. The emulator runs as its own process (not
// bttest in-process) so the race detector watches our code, not the emulator's.
func Bigtable(tb testing.TB) string {
	tb.Helper()
	addr, _ := StartEmulator(tb)
	return addr
}

// EmulatorBinary returns the path of the emulator binary (building it if needed).
func EmulatorBinary(tb testing.TB) string { return emulatorPath(tb) }

// StartEmulator is Bigtable, also returning the process so a test can stop it.
func StartEmulator(tb testing.TB) (string, *exec.Cmd) {
	tb.Helper()
	cmd := exec.Command(emulatorPath(tb), "-host", "127.0.0.1", "-port", "0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start the emulator: %v", err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	const prefix = "Cloud Bigtable emulator running on "
	if err != nil || !strings.HasPrefix(line, prefix) {
		tb.Fatalf("emulator said %q, %v; want %q", line, err, prefix+"<addr>")
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return strings.TrimSpace(strings.TrimPrefix(line, prefix)), cmd
}

// StoreConfig returns a store config for the emulator at addr with test-friendly batch
// sizes.
func StoreConfig(addr string) store.Config {
	cfg := store.DefaultConfig()
	cfg.EmulatorHost = addr
	return cfg
}

// Store opens a store on the emulator at addr, creates its table and column families
// where they are missing, and closes it when the test ends. An existing table's GC
// rules stay as they are, whatever cfg's TTL: a test that needs the table's rules to
// follow its TTL uses a table of its own.
func Store(tb testing.TB, cfg store.Config) *store.Store {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, cfg)
	if err != nil {
		tb.Fatalf("open store: %v", err)
	}
	tb.Cleanup(func() { st.Close() })
	if _, err := st.EnsureSchema(ctx); err != nil {
		tb.Fatalf("ensure schema: %v", err)
	}
	return st
}

// PostgresServer starts a Postgres server of the test's own, with the same script
// `make test` uses (deploy/local/postgres.sh, on a free port), for tests that restart
// the server, and removes it when the test ends. It returns the server's DSN and a
// function that restarts it with a fast shutdown, which terminates every session, and
// returns once it accepts connections again.
func PostgresServer(tb testing.TB) (dsn string, restart func()) {
	tb.Helper()
	p := StartPostgres(tb)
	return p.DSN, p.Restart
}

// PostgresProcess is a Postgres server of a test's own (StartPostgres).
type PostgresProcess struct {
	// DSN reaches the server's postgres database.
	DSN string

	tb     testing.TB
	script string
	port   string
	env    []string // the script's environment: os.Environ() and StartPostgresWith's
}

// StartPostgres starts a Postgres server of the test's own, as PostgresServer does,
// for tests that restart, stop or freeze it; it is removed when the test ends.
func StartPostgres(tb testing.TB) *PostgresProcess {
	tb.Helper()
	return StartPostgresWith(tb, nil)
}

// StartPostgresWith is StartPostgres with env set for deploy/local/postgres.sh, such
// as SNAPFLIP_PG_WAL_LEVEL=replica for a server without logical decoding.
func StartPostgresWith(tb testing.TB, env map[string]string) *PostgresProcess {
	tb.Helper()
	_, file, _, _ := runtime.Caller(0)
	for attempt := 1; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
		p := &PostgresProcess{
			DSN: "postgres://postgres@127.0.0.1:" + port + "/postgres?sslmode=disable",
			tb:  tb, port: port,
			script: filepath.Join(filepath.Dir(file), "..", "..", "deploy", "local", "postgres.sh"),
			env:    os.Environ(),
		}
		for k, v := range env {
			p.env = append(p.env, k+"="+v)
		}
		out, err := p.try("start")
		if err != nil && attempt < 5 && strings.Contains(out, "Address already in use") {
			// Another process took the free port between its finding and the server's
			// start: take another.
			p.try("stop")
			continue
		}
		if err != nil {
			tb.Fatalf("postgres.sh start %s: %v\n%s", port, err, out)
		}
		tb.Cleanup(func() { p.run("stop") })
		return p
	}
}

// try runs the script's command cmd and returns its output.
func (p *PostgresProcess) try(cmd string) (string, error) {
	c := exec.Command(p.script, cmd, p.port)
	c.Env = p.env
	out, err := c.CombinedOutput()
	return string(out), err
}

func (p *PostgresProcess) run(cmd string) {
	p.tb.Helper()
	if out, err := p.try(cmd); err != nil {
		p.tb.Fatalf("postgres.sh %s %s: %v\n%s", cmd, p.port, err, out)
	}
}

// Restart restarts the server with a fast shutdown, which terminates every session,
// and returns once it accepts connections again.
func (p *PostgresProcess) Restart() { p.tb.Helper(); p.run("restart") }

// Stop shuts the server down for good (fast: sessions are terminated); connections
// are refused from then on.
func (p *PostgresProcess) Stop() { p.tb.Helper(); p.run("stop") }

// Freeze stops the server's processes (SIGSTOP), its main process and every backend,
// until the test ends, like a host that went away without closing anything: new
// connections are accepted by the kernel and then never answered, and sessions
// already open answer nothing more.
func (p *PostgresProcess) Freeze() {
	p.tb.Helper()
	pidFile := filepath.Join("/tmp", "snapflip-pg-"+p.port, "data", "postmaster.pid") // where postgres.sh keeps it
	b, err := os.ReadFile(pidFile)
	if err != nil {
		p.tb.Fatalf("freeze postgres: %v", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		p.tb.Fatalf("freeze postgres: %s: %v", pidFile, err)
	}
	// The main process first, so that it starts no backend after its children are
	// listed.
	pids := []int{pid}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		p.tb.Fatalf("freeze postgres (pid %d): %v", pid, err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		p.tb.Fatalf("freeze postgres: %v", err)
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		stat := string(b)
		if f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:]); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			if syscall.Kill(child, syscall.SIGSTOP) == nil {
				pids = append(pids, child)
			}
		}
	}
	// Cleanups run last first: the server is thawed before it is stopped.
	p.tb.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
}

// DropSlot drops the replication slot at dsn's server once its reader has gone (a
// walsender ends a moment after its client), if it exists: a database with a slot
// cannot be dropped.
func DropSlot(tb testing.TB, dsn, slot string) {
	tb.Helper()
	Eventually(tb, 30*time.Second, func() error {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(context.Background(), `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		return err
	})
}

// EmulatorCollects makes the emulator at addr apply the GC rules of snapflip's table
// from now on, as Bigtable always does. The emulator starts its collection only when
// a family's rule is modified, not when a table is created with its rules (which is
// how the syncer creates it), so this sets the documents family's rule again,
// unchanged. A test of TTL expiry calls it once the table exists.
func EmulatorCollects(tb testing.TB, addr string) {
	tb.Helper()
	SetDocumentsGCRule(tb, addr, nil)
}

// SetDocumentsGCRule sets the GC rule of snapflip's documents family (d) at the
// emulator at addr, as a DBA might; nil sets the family's rule again, unchanged.
func SetDocumentsGCRule(tb testing.TB, addr string, rule bigtable.GCPolicy) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	cfg := StoreConfig(addr)
	admin, err := bigtable.NewAdminClient(ctx, cfg.Project, cfg.Instance, option.WithGRPCConn(conn))
	if err != nil {
		tb.Fatal(err)
	}
	info, err := admin.TableInfo(ctx, cfg.Table)
	if err != nil {
		tb.Fatalf("read table %s: %v", cfg.Table, err)
	}
	for _, f := range info.FamilyInfos {
		if f.Name == "d" {
			if rule == nil {
				rule = f.FullGCPolicy
			}
			if err := admin.SetGCPolicy(ctx, cfg.Table, f.Name, rule); err != nil {
				tb.Fatalf("set the GC rule of family d: %v", err)
			}
			return
		}
	}
	tb.Fatalf("table %s has no family d", cfg.Table)
}

// ListPage is the body of a list page of the API (GET /v1/data/{collection}).
type ListPage struct {
	Version   string `json:"version"`
	Documents []struct {
		ID       string          `json:"id"`
		Document json.RawMessage `json:"document"`
	} `json:"documents"`
	NextPageToken string `json:"next_page_token"`
}

// Connect connects to the database at dsn, failing the test when it cannot. The
// caller closes the connection.
func Connect(tb testing.TB, ctx context.Context, dsn string) *pgx.Conn {
	tb.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	return conn
}
