// Package stack runs a snapflip deployment in-process for tests, as the binaries run
// it: a Postgres database, a Bigtable server, the syncer's config file, the metadata
// API on a free port and `syncer once`. The client's tests and the end-to-end tests
// both start theirs here.
package stack

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/cli"
	"github.com/snapflip/snapflip/layer"
)

// Env is a deployment: the syncer and the API read its settings through Getenv.
type Env struct {
	// DSN is the Postgres database's; Bigtable the Bigtable server's address.
	DSN, Bigtable string
	// Dataset is the dataset the API serves (the config file names the syncer's).
	Dataset string
	// ConfigPath is the syncer's config file; Base the API's URL once started.
	ConfigPath, Base string
	// Runs, when set, is the run cache every sync of the Env shares, as in syncer run.
	Runs *layer.RunCache
	// StopAPI stops the API StartAPI started last; it also stops at the test's end.
	StopAPI func()
}

// New returns an Env of dataset on the database dsn and the Bigtable server at
// bigtable whose config file, in a directory of the test's, holds config ("" writes
// none). It starts nothing.
func New(tb testing.TB, dsn, bigtable, dataset, config string) *Env {
	tb.Helper()
	e := &Env{DSN: dsn, Bigtable: bigtable, Dataset: dataset}
	if config != "" {
		e.ConfigPath = filepath.Join(tb.TempDir(), "snapflip.yaml")
		if err := os.WriteFile(e.ConfigPath, []byte(config), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return e
}

// Getenv is the environment the syncer and the API see: the Env's Postgres, Bigtable,
// config and dataset, a pointer refresh of 20ms, and no authentication.
func (e *Env) Getenv(k string) string {
	switch k {
	case cli.EnvEmulatorHost:
		return e.Bigtable
	case cli.EnvPostgresDSN:
		return e.DSN
	case cli.EnvConfig:
		return e.ConfigPath
	case cli.EnvDataset:
		return e.Dataset
	case cli.EnvRefresh:
		return "20ms"
	case cli.EnvAuthConfig:
		return "none"
	}
	return ""
}

// StartAPI starts the metadata API in-process on a free port with the command-line
// arguments args and sets e.Base; overrides are environment variables as key, value
// pairs that replace Getenv's. The API stops at the test's end, or at e.StopAPI.
func (e *Env) StartAPI(tb testing.TB, args []string, overrides ...string) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	getenv := func(k string) string {
		for i := 0; i+1 < len(overrides); i += 2 {
			if overrides[i] == k {
				return overrides[i+1]
			}
		}
		return e.Getenv(k)
	}
	m := &cli.MetadataAPI{Getenv: getenv, Stderr: io.Discard, Listening: func(a string) { addrc <- a }}
	go func() { done <- m.Run(ctx, append([]string{"--addr", "127.0.0.1:0"}, args...)) }()
	select {
	case a := <-addrc:
		e.Base = "http://" + a
	case err := <-done:
		cancel()
		tb.Fatalf("metadata API did not start: %v", err)
	}
	var once sync.Once
	e.StopAPI = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("metadata API: %v", err)
			}
		})
	}
	tb.Cleanup(e.StopAPI)
}

// Sync runs `syncer once` in-process, with the global flags args, and returns what it
// printed and its error.
func (e *Env) Sync(args ...string) (string, error) {
	var out bytes.Buffer
	s := &cli.Syncer{Getenv: e.Getenv, Stdout: &out, Stderr: io.Discard, Runs: e.Runs}
	err := s.Run(context.Background(), append(args, "once"))
	return out.String(), err
}

// PublishedVersion returns the version `syncer once` said it published in out, and
// fails the test when it published none.
func PublishedVersion(tb testing.TB, out string) string {
	tb.Helper()
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != "published" {
		tb.Fatalf("syncer said %q; want it to publish", out)
	}
	return f[1]
}

// Quote returns s as an SQL string literal.
func Quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// SourceDocs returns what Postgres itself makes of each row: id → to_json text; query
// yields the id, then the document.
func SourceDocs(tb testing.TB, dsn, query string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	for _, row := range SourceRows(tb, dsn, query) {
		out[row[0]] = row[1]
	}
	return out
}

// SourceRows runs query on a connection whose time zone is UTC and returns every
// row, its columns as text.
func SourceRows(tb testing.TB, dsn, query string) [][]string {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET timezone = 'UTC'"); err != nil {
		tb.Fatal(err)
	}
	rows, err := conn.Query(ctx, query)
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]string
	for rows.Next() {
		vals := make([]string, len(rows.FieldDescriptions()))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			tb.Fatal(err)
		}
		out = append(out, vals)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}
