package snapshot_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/snapflip/snapflip/internal/memstore"
	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// memParts shares bases on st as the syncer replica holder, claims lapsing after d;
// cells, when set, keeps the claims instead of st.
func memParts(st *memstore.Store, holder string, d time.Duration, cells store.LeaseCell) *layer.Parts {
	if cells == nil {
		cells = st.Cells()
	}
	return &layer.Parts{Rows: 7, Marks: st.Cells(), Lease: func(name string, before func(context.Context, uint64) error) (snapshot.Lease, error) {
		return store.NewLeaseOn(cells, name, store.LeaseConfig{Holder: holder, Duration: d, BeforeAcquire: before})
	}}
}

// sharedRig is a memory rig whose held bases are shared: the rig's Compactor builds
// them as the replica "holder", and readers, other replicas, read parts of them.
type sharedRig struct {
	*memRig
	c     *layer.Compactor
	taken atomic.Int64 // documents the builder took from other replicas' parts
	mu    sync.Mutex
	byWho map[string]int // parts taken, by the replica that read them
}

func newSharedRig(t *testing.T) *sharedRig {
	r := &sharedRig{memRig: newMemRig(t, 4), byWho: map[string]int{}}
	r.c, _ = r.withCompactor(t, r.st)
	r.c.Source, r.c.Records, r.c.Syncer = r.src, r.st, "holder"
	r.c.Parts = memParts(r.st, "holder", time.Minute, nil)
	r.c.Writer.Observer = snapshot.ObserverFunc(func(_ context.Context, e snapshot.Event) {
		if e.Kind == snapshot.EventBasePartTaken {
			r.taken.Add(e.Attr("rows").(int64))
			r.mu.Lock()
			r.byWho[e.Attr("by").(string)]++
			r.mu.Unlock()
		}
	})
	return r
}

// reader returns a replica's part reader on the rig's store and source.
func (r *sharedRig) reader(name string, src snapshot.BaseSharer, parts *layer.Parts) *layer.PartReader {
	return &layer.PartReader{Dataset: "ds", Source: src, Writer: &layer.Writer{Store: r.st, MaxDocumentBytes: 1 << 20},
		Versions: snapshot.NewVersionGen(uuid.New(), nil), Records: r.st, Parts: parts, Syncer: name, RowsPerSecond: -1}
}

// betweenChunks makes the builder's base reads call change between two chunks
// (call counts from 1), and at the first, once the base's record names its parts,
// first; a part another replica reads there calls neither.
func (r *sharedRig) betweenChunks(t *testing.T, change func(call int), first func()) {
	var inReader atomic.Bool
	calls := 0
	r.src.BetweenChunks = func() {
		if inReader.Load() {
			return
		}
		calls++
		change(calls)
		if calls == 1 {
			r.awaitPlan(t, "users")
			inReader.Store(true)
			defer inReader.Store(false)
			first()
		}
	}
}

// awaitPlan waits until the collection's base record names its parts.
func (r *sharedRig) awaitPlan(t *testing.T, collection string) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		recs, err := r.st.ListBases(context.Background(), "ds")
		if err != nil {
			t.Error(err)
			return
		}
		for _, rec := range recs {
			if rec.Collection == collection && rec.Plan != "" && rec.State == "building" {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Error("the base's record never named its parts")
}

// A held collection's base is shared: another replica reads parts of it (the last
// ones first) while the builder reads the first, rows changing between every two
// chunks; the version that takes the base equals the source, and both replicas
// read a share.
func TestSharedBaseOnMemory(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			r := newSharedRig(t)
			helper := r.reader("helper", r.src, memParts(r.st, "helper", time.Minute, nil))
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(seed, 61))
			r.betweenChunks(t, func(call int) {
				id := fmt.Sprintf("u%02d", rng.IntN(30))
				if rng.IntN(4) == 0 {
					r.src.Delete("users", id)
				} else {
					r.src.Put("users", id, fmt.Sprintf(`{"between":%d}`, call))
				}
			}, func() {
				if _, err := helper.Once(ctx); err != nil {
					t.Error(err)
				}
				// Another replica looking at the parts read takes no claim.
				cells := &countingCells{LeaseCell: r.st.Cells()}
				again := r.reader("helper-2", r.src, memParts(r.st, "helper-2", time.Minute, cells))
				if n, err := again.Once(ctx); n != 0 || err != nil || cells.swaps.Load() != 0 {
					t.Errorf("a replica read %d parts (%v) and wrote %d claims where every free part was read", n, err, cells.swaps.Load())
				}
			})
			r.publish(t)
			r.src.Redefine("users")
			if v := r.publish(t); v.Collections["users"].Held == nil {
				t.Fatalf("users = %+v; want held", v.Collections["users"])
			}
			r.c.Wait()
			v := r.publish(t)
			if u := v.Collections["users"]; u.Held != nil || u.Own == nil || !u.Own.Rebased {
				t.Fatalf("users = %+v; want the shared base, caught up", u)
			}
			if got := r.holds(t, v); !maps.Equal(got["users"], r.model()["users"]) {
				t.Fatalf("version %s holds users as %v; the source %v", v.Version, got["users"], r.model()["users"])
			}
			parts, rows := helper.PartsRead()
			if parts == 0 || r.taken.Load() != rows || r.byWho["helper"] != parts {
				t.Fatalf("the helper read %d parts, %d rows; the builder took %d rows, %v parts by replica", parts, rows, r.taken.Load(), r.byWho)
			}
			if rows >= int64(len(r.model()["users"])) {
				t.Fatalf("the helper read %d of %d rows: the builder read none", rows, len(r.model()["users"]))
			}
			t.Logf("helper: %d parts, %d rows; builder: the rest of %d", parts, rows, len(r.model()["users"]))
		})
	}
}

// countingCells are lease cells that count their writes.
type countingCells struct {
	store.LeaseCell
	swaps atomic.Int64
}

func (c *countingCells) SwapLease(ctx context.Context, name string, prev, next []byte) (bool, error) {
	c.swaps.Add(1)
	return c.LeaseCell.SwapLease(ctx, name, prev, next)
}

// stalledParts is a source whose part reads wait, once claimed, until released.
type stalledParts struct {
	*memstore.Source
	claimed chan struct{}
	release chan struct{}
}

func (s *stalledParts) ReadBasePart(ctx context.Context, collection string, at snapshot.Position, after, through string) (snapshot.SourceSnapshot, error) {
	s.claimed <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Source.ReadBasePart(ctx, collection, at, after, through)
}

// A replica killed while it reads a part loses that part only: its claim lapses,
// the builder takes it over and reads it itself, and what the killed replica
// writes after is never taken: its mark is refused, the version equals the source.
func TestSharedBasePartOfAKilledReplica(t *testing.T) {
	r := newSharedRig(t)
	r.c.Parts = memParts(r.st, "holder", 50*time.Millisecond, nil)
	cells := &rig.KillableCells{LeaseCell: r.st.Cells()}
	src := &stalledParts{Source: r.src, claimed: make(chan struct{}, 1), release: make(chan struct{})}
	killed := r.reader("killed", src, memParts(r.st, "killed", 50*time.Millisecond, cells))
	ctx := context.Background()
	var once sync.Once
	var late sync.WaitGroup
	r.src.BetweenChunks = func() {
		once.Do(func() {
			r.awaitPlan(t, "users")
			late.Add(1)
			go func() {
				defer late.Done()
				_, err := killed.Once(ctx)
				if err == nil {
					t.Error("the killed replica's part read succeeded")
				}
			}()
			select {
			case <-src.claimed:
			case <-time.After(time.Minute):
				t.Error("the killed replica claimed no part in a minute")
			}
			cells.Killed.Store(true) // its claim stops renewing; it lapses
		})
	}
	r.publish(t)
	r.src.Redefine("users")
	r.publish(t)
	r.c.Wait()
	close(src.release) // the killed replica's read goes on, late
	late.Wait()
	v := r.publish(t)
	if u := v.Collections["users"]; u.Held != nil || u.Own == nil || !u.Own.Rebased {
		t.Fatalf("users = %+v; want the base, caught up", u)
	}
	if got := r.holds(t, v); !maps.Equal(got["users"], r.model()["users"]) {
		t.Fatalf("version %s holds users as %v; the source %v", v.Version, got["users"], r.model()["users"])
	}
	if parts, _ := killed.PartsRead(); parts != 0 || r.taken.Load() != 0 {
		t.Fatalf("the killed replica read %d parts; the builder took %d rows from replicas", parts, r.taken.Load())
	}
}

// A builder of a shared base killed at every row it reads (every chunk boundary
// and inside each chunk, the parts' ends included), with another replica reading
// parts and without, rows changing between chunks: the next builder goes on from
// the record with the same parts, and the version that takes the base equals the
// source.
func TestSharedBaseBuilderKilledAtEveryRow(t *testing.T) {
	for _, helped := range []bool{false, true} {
		most := int64(20) // the users
		if helped {
			most = 7 // the first part: the other replica reads the rest
		}
		for killAt := int64(1); killAt <= most; killAt++ {
			t.Run(fmt.Sprintf("helped=%v/kill at row %d", helped, killAt), func(t *testing.T) {
				builderKilledAt(t, helped, killAt)
			})
		}
	}
}

func builderKilledAt(t *testing.T, helped bool, killAt int64) {
	r := newSharedRig(t)
	w := r.c.Writer
	killing := &rig.KillingSource{Source: r.src, KillAt: killAt}
	start := func(src snapshot.Source, name string) (*layer.Compactor, context.CancelFunc) {
		c := &layer.Compactor{Dataset: "ds", Writer: w, Docs: r.st, Versions: r.pub.Versions, RowsPerSecond: -1,
			Source: src, Records: r.st, Syncer: name, Parts: memParts(r.st, name, time.Minute, nil)}
		ctx, cancel := context.WithCancel(context.Background())
		c.Start(ctx)
		w.Compactor, r.pub.Bases = c, c
		t.Cleanup(func() { cancel(); c.Wait() })
		return c, cancel
	}
	helper := r.reader("helper", r.src, memParts(r.st, "helper", time.Minute, nil))
	ctx := context.Background()
	r.betweenChunks(t, func(call int) {
		r.src.Put("users", fmt.Sprintf("u%02d", (call*7)%21), fmt.Sprintf(`{"between":%d}`, call))
	}, func() {
		if !helped {
			return
		}
		if _, err := helper.Once(ctx); err != nil {
			t.Error(err)
		}
	})
	r.publish(t)
	c1, kill := start(killing, "holder")
	killing.Kill = kill
	r.src.Redefine("users")
	r.publish(t)
	c1.Wait()
	if killing.Rows.Load() < killAt {
		t.Fatalf("the builder read %d rows: not killed at row %d", killing.Rows.Load(), killAt)
	}
	c2, _ := start(r.src, "holder-2")
	r.src.Put("orders", "3", `{"user":"u03"}`)
	if v := r.publish(t); v.Collections["users"].Held == nil {
		t.Fatalf("users = %+v; want held until the base is read", v.Collections["users"])
	}
	c2.Wait()
	r.src.Put("orders", "4", `{"user":"u04"}`)
	v := r.publish(t)
	if u := v.Collections["users"]; u.Held != nil || u.Own == nil || !u.Own.Rebased {
		t.Fatalf("users = %+v; want the base, caught up", u)
	}
	if got := r.holds(t, v); !sameContents(got, r.model()) {
		t.Fatalf("version %s holds %v; the source %v", v.Version, got, r.model())
	}
}
