package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
)

// TestFaultSlowBigtable: Bigtable answers slowly (a proxy holds every byte between
// the API and syncer and the emulator). Readers — cache hits and misses — get 200 from
// one version per answer while the pointer flips, and the API stays ready; a sync
// under moderate latency publishes; a sync whose writes outlast the batch timeout fails
// cleanly and publishes nothing; once Bigtable is fast again the next sync publishes.
func TestFaultSlowBigtable(t *testing.T) {
	t.Parallel()
	dsn := testenv.Postgres(t)
	emulator := testenv.Bigtable(t)
	proxy := testenv.LatencyProxy(t, emulator)
	e := newEnv(dsn, proxy.Addr())
	testenv.Exec(t, dsn, schema, `INSERT INTO things (id) SELECT 'bulk-' || g FROM generate_series(1, 2000) g`,
		`INSERT INTO things (id) VALUES ('plain')`)
	e.ConfigPath = t.TempDir() + "/snapflip.yaml"
	// A batch timeout of 700 ms: 400 ms each way makes every batch's round trip at least
	// 800 ms, so it must fail; batches of 250 rows with 20 ms each way, or none, must
	// pass even on a loaded machine (batches of 1,000 rows under a 450 ms timeout timed
	// out under the full suite with no delay at all).
	// Without the shared config's indexes: every sync here rewrites every row's gen,
	// which with them adds the cells a batch timeout is calibrated for.
	writeConfig(t, e, unindexed(config)+"bigtable:\n  batch_rows: 250\n  batch_timeout: 700ms\n  op_timeout: 5s\n")
	e.startAPI(t)
	direct := testenv.Store(t, testenv.StoreConfig(emulator)) // the test's own view, never slowed
	ctx := context.Background()
	vs := e.publishGens(t, 1, 2)
	e.awaitVersion(t, docPath("things", "plain"), vs[1])

	var mu sync.Mutex
	lat := map[bool][]time.Duration{} // by cache hit (plain) or miss (a random bulk id)
	stop := e.readers(t, 8, func() (string, []int, error) {
		hit := rand.IntN(2) == 0
		id := "plain"
		if !hit {
			id = fmt.Sprintf("bulk-%d", 1+rand.IntN(2000))
		}
		start := time.Now()
		r := e.get(t, docPath("things", id))
		d := time.Since(start)
		mu.Lock()
		lat[hit] = append(lat[hit], d)
		mu.Unlock()
		if r.status != http.StatusOK {
			return "", nil, fmt.Errorf("GET %s with Bigtable slow: status %d %s", id, r.status, r.body)
		}
		var doc struct{ Gen int }
		if err := json.Unmarshal(r.body, &doc); err != nil {
			return "", nil, fmt.Errorf("GET %s: %v: %s", id, err, r.body)
		}
		return r.version, []int{doc.Gen}, nil
	})

	// 1. The API under 150 ms each way while the pointer flips between the two versions.
	proxy.SetDelay(150 * time.Millisecond)
	for range 6 {
		next := flipToNext(t, direct, vs)
		e.awaitVersion(t, docPath("things", "plain"), next)
		if r := e.get(t, "/readyz"); r.status != http.StatusOK {
			t.Errorf("/readyz with Bigtable slow but answering = %d %s", r.status, r.body)
		}
	}

	// 2. A sync under 20 ms each way publishes.
	proxy.SetDelay(20 * time.Millisecond)
	testenv.Exec(t, dsn, `UPDATE things SET gen = 3`)
	out, err := e.sync(t)
	if err != nil || !strings.HasPrefix(out, "published") {
		t.Fatalf("sync with Bigtable 20 ms slow = %q, %v", out, err)
	}
	v3 := stack.PublishedVersion(t, out)
	e.awaitVersion(t, docPath("things", "plain"), v3)

	// 3. Writes slower than the batch timeout: the sync fails, the pointer stays.
	proxy.SetDelay(400 * time.Millisecond)
	testenv.Exec(t, dsn, `UPDATE things SET gen = 4`)
	began := time.Now()
	out, err = e.sync(t)
	if err == nil {
		t.Fatalf("a sync whose every batch outlasts the batch timeout published: %q", out)
	}
	t.Logf("sync with Bigtable 400 ms slow failed after %s: %v", time.Since(began).Round(time.Millisecond), err)
	if p, err := direct.ReadPointer(ctx, "e2e"); err != nil || string(p.Version) != v3 {
		t.Errorf("pointer after the failed sync = %v, %v; want %s", p.Version, err, v3)
	}

	// 4. Bigtable is fast again: the next sync publishes generation 4.
	proxy.SetDelay(0)
	out, err = e.sync(t)
	if err != nil || !strings.HasPrefix(out, "published") {
		t.Fatalf("sync after Bigtable recovered = %q, %v", out, err)
	}
	e.awaitVersion(t, docPath("things", "plain"), stack.PublishedVersion(t, out))
	seen := stop()
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range seen {
		total += n
	}
	for _, hit := range []bool{true, false} {
		l := lat[hit]
		slices.Sort(l)
		if len(l) == 0 {
			t.Fatalf("no reads (hit %t)", hit)
		}
		t.Logf("cache hit %t: %d reads, p50 %s p99 %s max %s", hit, len(l), l[len(l)/2], l[len(l)*99/100], l[len(l)-1])
	}
	t.Logf("%d reads from %d versions, all 200, none mixed", total, len(seen))
}
