package cli

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/store"
)

// bigtableClients connects a data and an admin client to the emulator at addr,
// bypassing everything snapflip does: the test's own view of the table.
func bigtableClients(tb testing.TB, addr string) (*bigtable.Client, *bigtable.AdminClient) {
	tb.Helper()
	ctx := context.Background()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	cfg := store.DefaultConfig()
	client, err := bigtable.NewClientWithConfig(ctx, cfg.Project, cfg.Instance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}, DisableSession: true}, option.WithGRPCConn(conn))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { client.Close() })
	admin, err := bigtable.NewAdminClient(ctx, cfg.Project, cfg.Instance, option.WithGRPCConn(conn))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { admin.Close() })
	return client, admin
}

// gcRules returns each column family of the table with its GC rule, as the admin
// client reads it.
func gcRules(tb testing.TB, admin *bigtable.AdminClient, table string) map[string]string {
	tb.Helper()
	info, err := admin.TableInfo(context.Background(), table)
	if err != nil {
		tb.Fatalf("read table %s: %v", table, err)
	}
	out := map[string]string{}
	for _, f := range info.FamilyInfos {
		out[f.Name] = f.FullGCPolicy.String()
	}
	return out
}

// cells returns every cell of the table: row key, family, column, timestamp and
// value, one line each.
func cells(tb testing.TB, client *bigtable.Client, table string) []string {
	tb.Helper()
	var out []string
	err := client.Open(table).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for _, fam := range slices.Sorted(maps.Keys(r)) {
			for _, c := range r[fam] {
				out = append(out, fmt.Sprintf("%q %s %d %q", r.Key(), c.Column, c.Timestamp, c.Value))
			}
		}
		return true
	})
	if err != nil {
		tb.Fatalf("read table %s: %v", table, err)
	}
	return out
}

// writeFile writes a config file into the test's directory and returns its path.
func writeFile(tb testing.TB, name, content string) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

var publishedRE = regexp.MustCompile(`published (\S+)`)

// publish runs `syncer once` and returns the version it published.
func publish(tb testing.TB, getenv func(string) string, config string, args ...string) string {
	tb.Helper()
	out, _, err := run(tb, false, getenv, append([]string{"once", "--config", config, "--log-level", "warn"}, args...)...)
	m := publishedRE.FindStringSubmatch(out)
	if err != nil || m == nil {
		tb.Fatalf("syncer once = %q, %v; want a version published", out, err)
	}
	return m[1]
}

// TestReadOnlyCommandsChangeNothing: versions, inspect, diff, history and retention
// without --apply, run with a config whose ttl differs from the table's GC rules and
// that names no Postgres (nor does the environment), answer through a Bigtable that
// grants them only reads (of rows; retention also reads the table's schema), and
// leave the table's GC rules and every cell as they were.
func TestReadOnlyCommandsChangeNothing(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `CREATE TABLE things (id text PRIMARY KEY, n int)`, `INSERT INTO things VALUES ('a', 1), ('b', 2)`)
	addr := testenv.Bigtable(t)
	writer := env(map[string]string{EnvPostgresDSN: dsn, EnvEmulatorHost: addr})
	// The table is made for the default ttl of 168h.
	const collections = "collections: [{name: things, table: public.things, key: id}]\n"
	config := writeFile(t, "writer.yaml", "dataset: ro\n"+collections)
	v1 := publish(t, writer, config)
	testenv.Exec(t, dsn, `UPDATE things SET n = 3 WHERE id = 'a'`)
	v2 := publish(t, writer, config)

	client, admin := bigtableClients(t, addr)
	table := store.DefaultConfig().Table
	rulesBefore, cellsBefore := gcRules(t, admin, table), cells(t, client, table)
	t.Logf("GC rules before: %v", rulesBefore)

	gate := testenv.Gate(t, addr, testenv.MethodReadRows, testenv.MethodSampleRowKeys, testenv.MethodGetTable)
	reader := env(map[string]string{EnvEmulatorHost: gate.Addr()}) // no SNAPFLIP_POSTGRES_DSN
	readConfig := writeFile(t, "reader.yaml", "dataset: ro\nttl: 1h\n"+collections)
	for _, tt := range []struct {
		args []string
		want string
		// readsSchema: the command reads the table's GC rules (TableInfo), the one
		// admin read it may make; the others read rows only.
		readsSchema bool
	}{
		{[]string{"versions"}, v2, false},
		{[]string{"versions", "--json"}, `"version": "` + v1, false},
		{[]string{"inspect", v2}, `"version": "` + v2, false},
		{[]string{"inspect", "--table", v1}, "collection things", false},
		{[]string{"diff", v1, v2}, "~1 changed", false},
		{[]string{"history"}, "flip", false},
		// This dataset's current version needs the 168h its manifest says: the 1h
		// rules would be refused.
		{[]string{"retention"}, "refused: dataset ro needs documents kept 168h", true},
	} {
		args := append(tt.args, "--config", readConfig, "--log-level", "warn")
		out, _, err := run(t, false, reader, args...)
		if err != nil || !strings.Contains(out, tt.want) {
			t.Errorf("syncer %q = %q, %v; want %q in the output", tt.args, out, err, tt.want)
		}
		calls := gate.Calls()
		rowRead := func(m string) bool { return m == testenv.MethodReadRows || m == testenv.MethodSampleRowKeys }
		if len(calls) == 0 || slices.ContainsFunc(calls, func(m string) bool { return !rowRead(m) && !(tt.readsSchema && m == testenv.MethodGetTable) }) {
			t.Errorf("syncer %q called %v; want reads of rows only (and of the table's schema: %v)", tt.args, calls, tt.readsSchema)
		}
		rulesAfter := gcRules(t, admin, table)
		t.Logf("GC rules after syncer %s: %v", tt.args[0], rulesAfter)
		if diff := cmp.Diff(rulesBefore, rulesAfter); diff != "" {
			t.Errorf("syncer %q changed GC rules (-before +after):\n%s", tt.args, diff)
		}
		if diff := cmp.Diff(cellsBefore, cells(t, client, table)); diff != "" {
			t.Errorf("syncer %q changed cells (-before +after):\n%s", tt.args, diff)
		}
	}

	// A command that reads Postgres still needs it named.
	if _, _, err := run(t, false, reader, "once", "--config", readConfig); err == nil || !strings.Contains(err.Error(), "postgres.dsn: required") {
		t.Errorf("syncer once without a Postgres = %v; want postgres.dsn required", err)
	}
	// The gate refuses what a reader may not do: a command that writes fails through it.
	rowsOnly := env(map[string]string{EnvEmulatorHost: testenv.Gate(t, addr, testenv.MethodReadRows).Addr()})
	if _, _, err := run(t, false, rowsOnly, "rollback", "--previous", "--reason", "x", "--config", readConfig); err == nil ||
		!strings.Contains(err.Error(), "PermissionDenied") {
		t.Errorf("syncer rollback through a read-only Bigtable = %v; want permission denied", err)
	}
}

// TestVersionsOfNothing: on a table nothing was ever published to (not even made),
// versions says so, and its JSON is an empty list; it makes no table.
func TestVersionsOfNothing(t *testing.T) {
	addr := testenv.Bigtable(t)
	getenv := env(map[string]string{EnvEmulatorHost: addr})
	config := writeFile(t, "empty.yaml", "dataset: none\ncollections: [{name: things, table: things, key: id}]\n")
	out, _, err := run(t, false, getenv, "versions", "--config", config)
	if want := "no versions of dataset none in table snapflip"; err != nil || !strings.Contains(out, want) {
		t.Errorf("versions = %q, %v; want it to say %q", out, err, want)
	}
	out, _, err = run(t, false, getenv, "versions", "--json", "--config", config)
	if err != nil || strings.TrimSpace(out) != "[]" {
		t.Errorf("versions --json = %q, %v; want []", out, err)
	}
	_, admin := bigtableClients(t, addr)
	if tables, err := admin.Tables(context.Background()); err != nil || len(tables) != 0 {
		t.Errorf("tables after versions: %v, %v; want none", tables, err)
	}
}
