package cli

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// TestRollbackChecksRetention: rollback and unpin move the pointer and change no GC
// rule, whatever the config's ttl; a rollback whose ttl is longer than the table keeps
// documents is refused, naming both, because its expiry check would count with a TTL
// the table does not keep.
func TestRollbackChecksRetention(t *testing.T) {
	dsn := thingsSource(t)
	addr := testenv.Bigtable(t)
	getenv := env(map[string]string{EnvPostgresDSN: dsn, EnvEmulatorHost: addr})
	hour := writeFile(t, "hour.yaml", "dataset: rb\nttl: 1h\n"+thingsCollection)
	v1 := publish(t, getenv, hour)
	testenv.Exec(t, dsn, `UPDATE things SET n = 9 WHERE id = 'b'`)
	v2 := publish(t, getenv, hour)
	_, admin := bigtableClients(t, addr)
	table := store.DefaultConfig().Table
	before := gcRules(t, admin, table)
	st := testenv.Store(t, testenv.StoreConfig(addr))
	current := func() snapshot.Pointer {
		t.Helper()
		p, err := st.ReadPointer(context.Background(), "rb")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	week := writeFile(t, "week.yaml", "dataset: rb\nttl: 168h\n"+thingsCollection)
	_, _, err := run(t, false, getenv, "rollback", "--previous", "--reason", "test", "--config", week)
	if !errors.Is(err, snapshot.ErrRetention) {
		t.Fatalf("rollback with ttl 168h on a table that keeps documents 1h = %v; want refused", err)
	}
	mustContain(t, "the refusal", err.Error(), "ttl 168h", "documents 1h", rule1h, "syncer retention --apply --config "+week, "nothing changed")
	if p := current(); string(p.Version) != v2 || p.Pinned {
		t.Errorf("after a refused rollback the pointer is %s (pinned %v); want %s, unpinned", p.Version, p.Pinned, v2)
	}

	halfHour := writeFile(t, "half.yaml", "dataset: rb\nttl: 30m\n"+thingsCollection)
	if out, _, err := run(t, false, getenv, "rollback", "--previous", "--reason", "test", "--config", halfHour); err != nil {
		t.Fatalf("rollback with ttl 30m on a table that keeps documents 1h = %v\n%s", err, out)
	}
	if p := current(); string(p.Version) != v1 || !p.Pinned {
		t.Errorf("after the rollback the pointer is %s (pinned %v); want %s, pinned", p.Version, p.Pinned, v1)
	}
	if out, _, err := run(t, false, getenv, "unpin", "--reason", "test", "--config", week); err != nil {
		t.Fatalf("unpin = %v\n%s", err, out)
	}
	if p := current(); p.Pinned {
		t.Error("unpin left the dataset pinned")
	}
	if diff := cmp.Diff(before, gcRules(t, admin, table)); diff != "" {
		t.Errorf("rollback and unpin changed GC rules (-before +after):\n%s", diff)
	}
}

// TestRollbackToTime: history --at names the version current at a moment, through
// flips, a rollback and an unpin, and changes nothing; rollback --to-time rolls back
// to it and says which it chose; a time before the trail, in the future, or with
// another target is refused and changes nothing.
func TestRollbackToTime(t *testing.T) {
	dsn := thingsSource(t)
	addr := testenv.Bigtable(t)
	getenv := env(map[string]string{EnvPostgresDSN: dsn, EnvEmulatorHost: addr})
	cfg := writeFile(t, "c.yaml", "dataset: rt\nttl: 1h\n"+thingsCollection)
	st := testenv.Store(t, testenv.StoreConfig(addr))
	pointer := func() snapshot.Pointer {
		t.Helper()
		p, err := st.ReadPointer(context.Background(), "rt")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	before := time.Now()
	v1 := publish(t, getenv, cfg)
	afterV1 := time.Now()
	testenv.Exec(t, dsn, `UPDATE things SET n = 9 WHERE id = 'b'`)
	v2 := publish(t, getenv, cfg)
	afterV2 := time.Now()
	if out, _, err := run(t, false, getenv, "rollback", "--previous", "--reason", "bad", "--config", cfg); err != nil {
		t.Fatalf("rollback --previous = %v\n%s", err, out)
	}
	afterRollback := time.Now()
	if out, _, err := run(t, false, getenv, "unpin", "--reason", "fixed", "--config", cfg); err != nil {
		t.Fatalf("unpin = %v\n%s", err, out)
	}
	testenv.Exec(t, dsn, `UPDATE things SET n = 10 WHERE id = 'b'`)
	v3 := publish(t, getenv, cfg)
	afterV3 := time.Now()
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

	for _, tc := range []struct {
		at   time.Time
		want string
		why  string
	}{
		{afterV1, v1, "flip"}, {afterV2, v2, "flip"}, {afterRollback, v1, "rollback"}, {afterV3, v3, "flip"},
	} {
		out, _, err := run(t, false, getenv, "history", "--at", at(tc.at), "--config", cfg)
		if err != nil {
			t.Fatalf("history --at %s = %v", at(tc.at), err)
		}
		mustContain(t, "history --at", out, "the current version was "+tc.want, tc.why+" by", "now    ")
	}
	if p := pointer(); string(p.Version) != v3 || p.Pinned {
		t.Fatalf("history --at moved the pointer: %+v", p)
	}

	for _, bad := range [][]string{
		{"--to-time", at(before.Add(-time.Hour))},
		{"--to-time", at(time.Now().Add(time.Hour))},
		{"--to-time", at(afterV1), "--previous"},
		{"--to-time", "yesterday"},
	} {
		args := append([]string{"rollback", "--reason", "r", "--config", cfg}, bad...)
		if out, _, err := run(t, false, getenv, args...); err == nil {
			t.Errorf("%v = nil\n%s; want refused", bad, out)
		}
		if p := pointer(); string(p.Version) != v3 || p.Pinned {
			t.Fatalf("a refused %v moved the pointer: %+v", bad, p)
		}
	}

	// v2 was rolled back away from: refused as --to refuses it, unless --force.
	out, _, err := run(t, false, getenv, "rollback", "--to-time", at(afterV2), "--reason", "back to v2", "--config", cfg)
	if err == nil || !strings.Contains(err.Error(), "rolled back away from") {
		t.Fatalf("rollback --to-time to a version rolled back away from = %v\n%s; want refused", err, out)
	}
	mustContain(t, "the refused rollback --to-time", out, "chose "+v2)
	out, _, err = run(t, false, getenv, "rollback", "--to-time", at(afterV2), "--reason", "back to v2", "--force", "--config", cfg)
	if err != nil {
		t.Fatalf("rollback --to-time = %v\n%s", err, out)
	}
	mustContain(t, "rollback --to-time", out, "chose "+v2, "flip at")
	if p := pointer(); string(p.Version) != v2 || !p.Pinned {
		t.Errorf("after rollback --to-time the pointer is %+v; want %s, pinned", p, v2)
	}
}
