package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
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
		// the test; there is no condition to await). Then, without reading data, await
		// a pointer read begun after the flip: on a loaded machine the refresh in flight
		// may still be loading the new version, and serve the old one meanwhile.
		time.Sleep(3 * refresh)
		testenv.Eventually(t, time.Minute, func() error {
			if age := pointerAge(t, e); age < 0 || age >= time.Since(flipped) {
				return fmt.Errorf("the API's pointer was last read %s ago, before the flip %s ago", age, time.Since(flipped))
			}
			return nil
		})
		r := e.get(t, docPath("things", "plain"))
		if r.status != http.StatusOK || r.version != want {
			t.Errorf("round %d: the first read %s after the flip answered %d from %s; want 200 from %s",
				round, time.Since(flipped).Round(time.Millisecond), r.status, r.version, want)
		}
	}
}

// pointerAge is the snapflip_api_pointer_age_seconds gauge the API serves: how long
// ago it last read the pointer (negative: never). /metrics reads no data.
func pointerAge(tb testing.TB, e *env) time.Duration {
	tb.Helper()
	r := e.get(tb, "/metrics")
	for line := range strings.SplitSeq(string(r.body), "\n") {
		if v, ok := strings.CutPrefix(line, "snapflip_api_pointer_age_seconds "); ok {
			secs, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatalf("snapflip_api_pointer_age_seconds %q: %v", v, err)
			}
			return time.Duration(secs * float64(time.Second))
		}
	}
	tb.Fatalf("/metrics has no snapflip_api_pointer_age_seconds")
	return 0
}
