// Package testenv gives tests real components: a fresh database on the throwaway
// Postgres server that `make test` starts, and an in-process Bigtable server (bttest)
// reached through the real client.
package testenv

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/bttest"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"

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
	admin := os.Getenv(EnvPostgres)
	if admin == "" {
		tb.Fatalf("%s is not set: run the tests with `make test`, which starts a throwaway Postgres", EnvPostgres)
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
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			tb.Errorf("drop test database: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			tb.Errorf("drop test database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil || !strings.HasPrefix(admin, "postgres") {
		tb.Fatalf("%s must be a postgres:// URL", EnvPostgres)
	}
	u.Path = "/" + name
	return u.String()
}

// Exec runs SQL statements on the database at dsn, failing the test on error.
func Exec(tb testing.TB, dsn string, sql ...string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	for _, s := range sql {
		if _, err := conn.Exec(ctx, s); err != nil {
			tb.Fatalf("exec %.80q: %v", s, err)
		}
	}
}

// Bigtable starts an in-process Bigtable server for the test and returns its address.
func Bigtable(tb testing.TB) string {
	tb.Helper()
	srv, err := bttest.NewServer("127.0.0.1:0", grpc.MaxRecvMsgSize(256<<20), grpc.MaxSendMsgSize(256<<20))
	if err != nil {
		tb.Fatalf("start bttest: %v", err)
	}
	tb.Cleanup(srv.Close)
	return srv.Addr
}

// StoreConfig returns a store config for the emulator at addr with test-friendly batch
// sizes.
func StoreConfig(addr string) store.Config {
	cfg := store.DefaultConfig()
	cfg.EmulatorHost = addr
	return cfg
}

// Store opens a store on the emulator at addr, creates its schema, and closes it when
// the test ends.
func Store(tb testing.TB, cfg store.Config) *store.Store {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, cfg)
	if err != nil {
		tb.Fatalf("open store: %v", err)
	}
	tb.Cleanup(func() { st.Close() })
	if err := st.EnsureSchema(ctx); err != nil {
		tb.Fatalf("ensure schema: %v", err)
	}
	return st
}
