package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// TestLoadWithFlips: 16 readers load the API while the pointer flips every 100 ms
// between versions of different generations: no 5xx, no torn or mixed answer. 5 s
// here; SNAPFLIP_LOAD_SECONDS (make chaos: 60) in the long form.
func TestLoadWithFlips(t *testing.T) {
	t.Parallel()
	secs := 5
	if n, err := fmt.Sscan(os.Getenv("SNAPFLIP_LOAD_SECONDS"), &secs); n != 1 || err != nil || secs <= 0 {
		secs = 5
	}
	e := start(t)
	vs := e.publishGens(t, 1, 2, 3)
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	e.awaitVersion(t, docPath("things", "plain"), vs[2])

	var mu sync.Mutex
	var lat []time.Duration
	stop := e.readers(t, 16, func() (string, []int, error) {
		start := time.Now()
		r := e.get(t, docPath("things", "plain"))
		d := time.Since(start)
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
		if r.status != http.StatusOK {
			return "", nil, fmt.Errorf("status %d %s", r.status, r.body)
		}
		return r.version, []int{gen(t, r.body)}, nil
	})
	flips := 0
	// Flips for secs seconds, paced: the readers' load over time is what is under test.
	for end := time.Now().Add(time.Duration(secs) * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		flipToNext(t, st, vs)
		flips++
	}
	seen := stop()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	total := 0
	for _, n := range seen {
		total += n
	}
	if len(seen) != len(vs) {
		t.Errorf("readers saw %d versions; want all %d", len(seen), len(vs))
	}
	t.Logf("%d s, %d flips, %d reads (%.0f/s), 0 non-200, 0 mixed; latency p50 %s p99 %s max %s",
		secs, flips, total, float64(total)/float64(secs), lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
}

// flipToNext moves the pointer of dataset e2e to the version after the current one in
// vs, as an operator's flip does (it may go back in source position), fenced with the
// current fence, which leaves a syncer's next lease token valid. It returns the version.
func flipToNext(tb testing.TB, st *store.Store, vs []string) string {
	tb.Helper()
	ctx := context.Background()
	p, err := st.ReadPointer(ctx, "e2e")
	if err != nil {
		tb.Fatal(err)
	}
	next := vs[(slices.Index(vs, string(p.Version))+1)%len(vs)]
	m, err := st.ReadManifest(ctx, "e2e", snapshot.Version(next))
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := st.FlipPointer(ctx, "e2e", snapshot.Flip{Version: snapshot.Version(next), Expected: p.Version,
		Fence: p.Fence, Source: m.Source, Rollback: true, At: time.Now()}); err != nil {
		tb.Fatalf("flip from %s to %s: %v", p.Version, next, err)
	}
	return next
}
