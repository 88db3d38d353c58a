package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
)

// TestPinnedUnderWrites: with watch.mode logical, the dataset pinned by a rollback
// while four sessions update rows as fast as they can for SNAPFLIP_PIN_SECONDS (20),
// with watch.hold_bytes small enough to be passed many times, and the syncer restarted
// halfway. The reader lets the held transactions go, so the slot is confirmed onwards
// while nothing publishes; after the unpin, the first version covering every commit
// serves every row as Postgres holds it. (BenchmarkLogicalPinned measures the same at full size.)
func TestPinnedUnderWrites(t *testing.T) {
	seconds := loops("SNAPFLIP_PIN_SECONDS", 20)
	e := start(t)
	testenv.Exec(t, e.DSN, `ALTER TABLE flags REPLICA IDENTITY FULL`)
	slot := fmt.Sprintf("snapflip_e2e_%d", time.Now().UnixNano()%1e12)
	t.Cleanup(func() { testenv.DropSlot(t, e.DSN, slot) })
	cfg := config + "watch: {mode: logical, slot: " + slot + ", hold_bytes: 262144}\nlease: {duration: 2s}\n"
	stop := e.runSyncer(t, cfg)
	defer func() { stop() }()
	e.awaitServed(t, docPath("things", "plain"), `"id":"plain"`, time.Now(), 20*time.Second)
	testenv.Exec(t, e.DSN, `UPDATE things SET gen = 1 WHERE id = 'plain'`)
	e.awaitServed(t, docPath("things", "plain"), `"gen":1`, time.Now(), 20*time.Second)
	if out, err := e.syncerCmd(t, "rollback", "--previous", "--reason", "pinned under writes"); err != nil {
		t.Fatalf("rollback: %v: %s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds)*time.Second)
	defer cancel()
	// Where the WAL was halfway through the writes: without letting go, the slot
	// would stay confirmed before the first transaction held.
	// The syncer restarts there too: the new reading starts from where the slot was
	// confirmed, and holds no more than the bound either.
	var halfway string
	restarted := make(chan struct{})
	half := time.AfterFunc(time.Duration(seconds)*time.Second/2, func() {
		defer close(restarted)
		testenv.QueryRow(t, e.DSN, `SELECT pg_current_wal_insert_lsn()::text`, &halfway)
		stop()
		stop = e.runSyncer(t, cfg)
	})
	defer half.Stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	commits := 0
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pgx.Connect(context.Background(), e.DSN)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close(context.Background())
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for ctx.Err() == nil {
				id := awkwardIDs[rng.IntN(len(awkwardIDs))]
				if _, err := conn.Exec(ctx, `UPDATE things SET gen = gen + 1 WHERE id = $1`, id); err != nil && ctx.Err() == nil {
					t.Error(err)
					return
				}
				mu.Lock()
				commits++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	<-restarted
	// While pinned, the slot was confirmed past the transactions let go.
	testenv.Eventually(t, time.Minute, func() error {
		var past bool
		testenv.QueryRow(t, e.DSN, fmt.Sprintf(`SELECT confirmed_flush_lsn > '%s'::pg_lsn FROM pg_replication_slots WHERE slot_name = '%s'`, halfway, slot), &past)
		if !past {
			return fmt.Errorf("after %d commits while pinned, the slot is still confirmed before the writes' halfway point", commits)
		}
		return nil
	})
	if out, err := e.syncerCmd(t, "unpin", "--reason", "the investigation is over"); err != nil {
		t.Fatalf("unpin: %v: %s", err, out)
	}
	var token string
	testenv.QueryRow(t, e.DSN, `SELECT 's:' || pg_current_snapshot()::text`, &token)
	a := e.readCovered(t, docPath("things", "plain"), token)
	if a.status != http.StatusOK {
		t.Fatalf("after the unpin, a read with a token of every commit: %d %s", a.status, a.body)
	}
	want := stack.SourceDocs(t, e.DSN, `SELECT id, to_json(t)::text FROM things t`)
	if d := e.servedDiff(t, "things", a.version, want); d != "" {
		t.Errorf("after %d commits while pinned, version %s: %s", commits, a.version, d)
	}
}
