package cli

import (
	"context"
	"errors"
	"testing"

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
