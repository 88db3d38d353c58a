package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
)

// probe returns the status and body of GET url (0 and the error when none came).
func probe(url string) (int, string) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// awaitProbe waits until GET url answers status with a body that contains want.
func awaitProbe(tb testing.TB, url string, status int, want string) {
	tb.Helper()
	testenv.Eventually(tb, 30*time.Second, func() error {
		if got, body := probe(url); got != status || !strings.Contains(body, want) {
			return fmt.Errorf("GET %s = %d %q; want %d with %q", url, got, body, status, want)
		}
		return nil
	})
}

// The syncer's /healthz and /readyz through its states: ready once it runs; not
// ready while Postgres refuses it, ready again when it is back; not live once a sync
// hangs on a frozen Postgres for longer than --max-sync-duration; not ready while
// Bigtable is gone.
func TestSyncerHealth(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	e := startOn(t, pg.DSN)
	btAddr, emulator := testenv.StartEmulator(t)
	e.Bigtable = btAddr // the syncer's own Bigtable, to take away
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := "watch: {enabled: false}\n" + strings.Replace(config, `schedule: "@every 1h"`, `schedule: "@every 1s"`, 1)
	defer e.runSyncerWith(t, cfg, "--metrics-addr", addr, "--max-sync-duration", "3s")()
	healthz, readyz := "http://"+addr+"/healthz", "http://"+addr+"/readyz"

	awaitProbe(t, readyz, http.StatusOK, "ok")
	awaitProbe(t, healthz, http.StatusOK, "ok")

	// Postgres refuses the syncer's database (run from another database).
	admin := strings.Replace(pg.DSN, "/postgres?", "/template1?", 1)
	testenv.Exec(t, admin, `ALTER DATABASE postgres ALLOW_CONNECTIONS false`)
	awaitProbe(t, readyz, http.StatusServiceUnavailable, "postgres")
	if got, body := probe(healthz); got != http.StatusOK {
		t.Errorf("/healthz while Postgres is down = %d %q; want 200 (failing syncs are not a wedged process)", got, body)
	}
	testenv.Exec(t, admin, `ALTER DATABASE postgres ALLOW_CONNECTIONS true`)
	awaitProbe(t, readyz, http.StatusOK, "ok")

	pg.Freeze()
	awaitProbe(t, healthz, http.StatusServiceUnavailable, "wedged")
	awaitProbe(t, readyz, http.StatusServiceUnavailable, "postgres")

	_ = emulator.Process.Kill()
	awaitProbe(t, readyz, http.StatusServiceUnavailable, "bigtable")
}
