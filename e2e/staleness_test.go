package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/cli"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
)

// TestIdleAPIServesTheNewVersion: an API replica that serves nothing for a while still
// answers its first request after a flip from the new version (bounded staleness, docs/design.md:
// no read resolves through a pointer older than the refresh interval plus one Bigtable
// timeout, however idle the replica). It once answered from the pointer it had cached
// before the quiet spell.
func TestIdleAPIServesTheNewVersion(t *testing.T) {
	t.Parallel()
	e := start(t)
	e.StopAPI()
	const refresh = 100 * time.Millisecond
	e.startAPI(t, cli.EnvRefresh, refresh.String())
	out, err := e.sync(t)
	if err != nil {
		t.Fatal(err)
	}
	e.awaitVersion(t, docPath("things", "plain"), stack.PublishedVersion(t, out))
	for round := range 3 {
		testenv.Exec(t, e.DSN, `UPDATE things SET gen = gen + 1 WHERE id = 'plain'`)
		out, err := e.sync(t)
		if err != nil {
			t.Fatal(err)
		}
		flipped := time.Now()
		want := stack.PublishedVersion(t, out)
		// Idle: no request for three refresh intervals (the quiet spell is the point of
		// the test; there is no condition to await).
		time.Sleep(3 * refresh)
		r := e.get(t, docPath("things", "plain"))
		if r.status != http.StatusOK || r.version != want {
			t.Errorf("round %d: the first read %s after the flip answered %d from %s; want 200 from %s",
				round, time.Since(flipped).Round(time.Millisecond), r.status, r.version, want)
		}
	}
}
