package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/snapflip/snapflip/internal/memstore"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// The protocol's tests on the in-memory store (internal/memstore, which the contract
// suite holds equal to the Bigtable store) and an in-memory source: every history and
// crash point in milliseconds. What only Postgres can do wrong (its keys, its types,
// its partitioned reads) is published from Postgres in package pgsource's tests.

// memRig is a publisher of dataset "ds" on a memory store and source.
type memRig struct {
	st  *memstore.Store
	src *memstore.Source
	pub *snapshot.Publisher
}

// newMemRig returns a rig whose source holds 20 users, u00 to u19, and 2 orders.
func newMemRig(tb testing.TB, maxLayers int) *memRig {
	tb.Helper()
	src := memstore.NewSource("users", "orders")
	for i := range 20 {
		src.Put("users", fmt.Sprintf("u%02d", i), fmt.Sprintf(`{"n":%d}`, i))
	}
	src.Put("orders", "1", `{"user":"u01"}`)
	src.Put("orders", "2", `{"user":"u02"}`)
	return newMemRigOn(src, maxLayers)
}

// newMemRigOn returns a rig publishing src into an empty store.
func newMemRigOn(src *memstore.Source, maxLayers int) *memRig {
	st := memstore.New()
	return &memRig{st: st, src: src, pub: newMemPublisher(st, src, "writer-1", maxLayers)}
}

func newMemPublisher(st *memstore.Store, src snapshot.Source, writer string, maxLayers int) *snapshot.Publisher {
	return &snapshot.Publisher{Dataset: "ds", Store: st, Source: src, Writer: writer, Incremental: true,
		Versions: snapshot.NewVersionGen(uuid.New(), nil),
		Data:     &layer.Writer{Store: st, MaxDocumentBytes: 1 << 20, MaxLayers: maxLayers}}
}

// lease returns a lease of the dataset's publishing as cfg says, which raises the
// pointer's fence to its token when it is taken.
func (r *memRig) lease(tb testing.TB, cfg store.LeaseConfig) *store.Lease {
	tb.Helper()
	cfg.BeforeAcquire = snapshot.RaiseFence(r.st, "ds")
	l, err := r.st.NewLease("publish/ds", cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// ticker returns a Ticker of the rig's publisher for holder, under its own lease.
func (r *memRig) ticker(tb testing.TB, holder string) *snapshot.Ticker {
	tb.Helper()
	return &snapshot.Ticker{Publisher: r.pub, Lease: r.lease(tb, store.LeaseConfig{Holder: holder}), Ticks: r.st, Holder: holder}
}

// pointer reads the dataset's pointer.
func (r *memRig) pointer(tb testing.TB) snapshot.Pointer {
	tb.Helper()
	p, err := r.st.ReadPointer(context.Background(), "ds")
	if err != nil {
		tb.Fatalf("read pointer: %v", err)
	}
	return p
}

// manifest reads version v's manifest.
func (r *memRig) manifest(tb testing.TB, v snapshot.Version) snapshot.Manifest {
	tb.Helper()
	m, err := r.st.ReadManifest(context.Background(), "ds", v)
	if err != nil {
		tb.Fatalf("read manifest %s: %v", v, err)
	}
	return m
}

// manifests returns the dataset's manifests, oldest first.
func (r *memRig) manifests(tb testing.TB) []snapshot.Manifest {
	tb.Helper()
	ms, err := r.st.ListManifests(context.Background(), "ds")
	if err != nil {
		tb.Fatalf("list manifests: %v", err)
	}
	return ms
}

// last returns the dataset's newest manifest.
func (r *memRig) last(tb testing.TB) snapshot.Manifest {
	tb.Helper()
	ms := r.manifests(tb)
	if len(ms) == 0 {
		tb.Fatal("no manifest")
	}
	return ms[len(ms)-1]
}

// served returns what the pointer's version holds of every collection.
func (r *memRig) served(tb testing.TB) (snapshot.Manifest, map[string]map[string]string) {
	tb.Helper()
	m := r.manifest(tb, r.pointer(tb).Version)
	return m, r.holds(tb, m)
}

// holds returns what version m holds of every collection, read through its chains.
func (r *memRig) holds(tb testing.TB, m snapshot.Manifest) map[string]map[string]string {
	tb.Helper()
	out := map[string]map[string]string{}
	for _, c := range r.src.Collections() {
		out[c] = map[string]string{}
		err := r.st.ScanDocuments(context.Background(), snapshot.ChainRef{Dataset: "ds", Chain: m.Chain(c), Collection: c}, func(d snapshot.Document) bool {
			out[c][d.ID] = string(d.Body)
			return true
		})
		if err != nil {
			tb.Fatalf("scan %s at %s: %v", c, m.Version, err)
		}
	}
	return out
}

// model returns what the source holds now.
func (r *memRig) model() map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, c := range r.src.Collections() {
		out[c] = r.src.Documents(c)
	}
	return out
}

func sameContents(a, b map[string]map[string]string) bool {
	return maps.EqualFunc(a, b, func(x, y map[string]string) bool { return maps.Equal(x, y) })
}

// TestLayeredHistoriesOnMemory publishes random histories and holds every version,
// the current one and each earlier one read through its pinned chain, to what the
// source held when it was published.
func TestLayeredHistoriesOnMemory(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 43))
			r := newMemRig(t, 2+int(seed%4))
			ctx := context.Background()
			published := map[snapshot.Version]map[string]map[string]string{}
			longest := 0
			for round := range 30 {
				for range rng.IntN(6) {
					c := r.src.Collections()[rng.IntN(2)]
					id := fmt.Sprintf("u%02d", rng.IntN(30))
					if rng.IntN(3) == 0 {
						r.src.Delete(c, id)
					} else {
						r.src.Put(c, id, fmt.Sprintf(`{"round":%d,"v":%d}`, round, rng.IntN(1000)))
					}
				}
				res, err := r.pub.Publish(ctx, snapshot.PublishOptions{})
				if err != nil {
					t.Fatalf("round %d: publish: %v", round, err)
				}
				m, got := r.served(t)
				if !sameContents(got, r.model()) {
					t.Fatalf("round %d: version %s (no-op %v) holds %v; the source holds %v", round, m.Version, res.NoOp, got, r.model())
				}
				if !res.NoOp {
					published[m.Version] = got
				}
				for _, c := range r.src.Collections() {
					longest = max(longest, len(m.Chain(c)))
					if n := len(m.Chain(c)); n > r.pub.Data.(*layer.Writer).MaxLayers {
						t.Fatalf("round %d: %s's chain has %d layers; MaxLayers is %d", round, c, n, r.pub.Data.(*layer.Writer).MaxLayers)
					}
				}
			}
			if longest < 2 {
				t.Errorf("no version had a delta: the history tested full copies alone")
			}
			for v, want := range published {
				m, err := r.st.ReadManifest(ctx, "ds", v)
				if err != nil {
					t.Fatal(err)
				}
				if got := r.holds(t, m); !sameContents(got, want) {
					t.Errorf("version %s now holds %v; when published it held %v", v, got, want)
				}
			}
		})
	}
}

// errFrozen marks a publisher frozen at a crash point.
var errFrozen = errors.New("frozen at a crash point")

// freezeAt starts a publish of the rig's publisher and returns once it is frozen at
// crash point at, as a killed process stops there; it stays frozen until the test
// ends.
func (r *memRig) freezeAt(t *testing.T, at snapshot.CrashPoint) {
	t.Helper()
	frozen, thaw := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r.pub.Crash = func(p snapshot.CrashPoint, _ int64) {
		if p == at {
			once.Do(func() { close(frozen); <-thaw })
		}
	}
	var crashErr error
	finished := make(chan struct{})
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		defer close(finished)
		_, crashErr = r.pub.Publish(ctx, snapshot.PublishOptions{})
	}()
	t.Cleanup(func() { cancel(errFrozen); close(thaw); <-finished })
	select {
	case <-frozen:
	case <-finished:
		t.Fatalf("the publish ended (%v) before reaching %s", crashErr, at)
	}
}

// TestCrashPointsOnMemory freezes a publisher at each crash point, as a killed
// process stops, and checks what readers see then and after a second writer
// publishes: the old version or the new one whole, never a part.
func TestCrashPointsOnMemory(t *testing.T) {
	points := []snapshot.CrashPoint{snapshot.CrashAfterOpen, snapshot.CrashMidWrite, snapshot.CrashAfterSeal, snapshot.CrashAfterFlip}
	for _, at := range points {
		t.Run(string(at), func(t *testing.T) {
			r := newMemRig(t, 4)
			ctx := context.Background()
			first, err := r.pub.Publish(ctx, snapshot.PublishOptions{})
			if err != nil {
				t.Fatal(err)
			}
			before := r.model()
			r.src.Put("users", "u03", `{"changed":true}`)
			r.src.Delete("orders", "1")
			after := r.model()

			r.freezeAt(t, at)

			m, got := r.served(t)
			want, wantVersion := before, first.Manifest.Version
			if at == snapshot.CrashAfterFlip {
				want, wantVersion = after, m.Version // the flip applied: the new version, whole
			}
			if m.Version != wantVersion || !sameContents(got, want) {
				t.Fatalf("frozen %s: pointer names %s holding %v; want %s holding %v", at, m.Version, got, wantVersion, want)
			}

			// A second writer publishes meanwhile (its own versions, no lease: the
			// fence moves on by one) and what it serves is the source, whole.
			second := newMemPublisher(r.st, r.src, "writer-2", 4)
			if _, err := second.Publish(ctx, snapshot.PublishOptions{}); err != nil {
				t.Fatalf("publish after a writer froze %s: %v", at, err)
			}
			if m2, got := r.served(t); !sameContents(got, after) {
				t.Fatalf("after the second writer: %s holds %v; want %v", m2.Version, got, after)
			}
		})
	}
}

// TestTickersShareSlotsOnMemory runs three replicas' tickers over the same slots at
// once: each slot is published by the replica that claimed it, under the lease, with
// fencing tokens that only grow, and the last version holds the source.
func TestTickersShareSlotsOnMemory(t *testing.T) {
	r := newMemRig(t, 4)
	ctx := context.Background()
	var tickers []*snapshot.Ticker
	for i := range 3 {
		holder := fmt.Sprint("replica-", i)
		lease := r.lease(t, store.LeaseConfig{Holder: holder, Duration: 2 * time.Second, RetryMax: 10 * time.Millisecond})
		tickers = append(tickers, &snapshot.Ticker{Publisher: newMemPublisher(r.st, r.src, holder, 4), Lease: lease, Ticks: r.st, Holder: holder})
	}
	var last uint64
	for slot := int64(1); slot <= 12; slot++ {
		r.src.Put("users", fmt.Sprintf("s%02d", slot), `{}`)
		results := make([]snapshot.TickResult, len(tickers))
		errs := make([]error, len(tickers))
		var wg sync.WaitGroup
		for i, tk := range tickers {
			wg.Go(func() { results[i], errs[i] = tk.Tick(ctx, slot, snapshot.PublishOptions{}) })
		}
		wg.Wait()
		claimed := 0
		for i, res := range results {
			if errs[i] != nil {
				t.Fatalf("slot %d, replica %d: %v", slot, i, errs[i])
			}
			if res.Claimed {
				claimed++
				if res.Publish.NoOp || res.Publish.Manifest.Fence != res.Fence || res.Publish.Manifest.Tick != slot {
					t.Errorf("slot %d: the claimer's publish = %+v under token %d", slot, res.Publish, res.Fence)
				}
				if res.Fence <= last {
					t.Errorf("slot %d published under token %d after %d; tokens must grow", slot, res.Fence, last)
				}
				last = res.Fence
			}
			if res.Owner != results[0].Owner {
				t.Errorf("slot %d: replicas name owners %s and %s", slot, res.Owner, results[0].Owner)
			}
		}
		if claimed != 1 {
			t.Fatalf("slot %d claimed by %d replicas; want 1", slot, claimed)
		}
	}
	if _, got := r.served(t); !sameContents(got, r.model()) {
		t.Errorf("after every slot the pointer's version holds %v; want %v", got, r.model())
	}
}

// TestRollbackPinsAndUnpinResumesOnMemory: a rollback moves the pointer back and pins
// it, a publish then changes nothing, and an unpin lets the next publish through;
// the audit trail records all three.
func TestRollbackPinsAndUnpinResumesOnMemory(t *testing.T) {
	r := newMemRig(t, 4)
	ctx := context.Background()
	r.pub.Audit = r.st
	syncer := r.ticker(t, "syncer")
	publish := func() (snapshot.PublishResult, error) {
		res, _, err := syncer.PublishLeased(ctx, snapshot.PublishOptions{})
		return res, err
	}
	first, err := publish()
	if err != nil {
		t.Fatal(err)
	}
	held := r.model()
	r.src.Put("users", "u01", `{"second":true}`)
	if _, err := publish(); err != nil {
		t.Fatal(err)
	}
	admin := &snapshot.Admin{Dataset: "ds", Store: r.st, Lease: r.lease(t, store.LeaseConfig{Holder: "admin"})}
	rb, err := admin.Rollback(ctx, snapshot.RollbackRequest{Previous: true, Reason: "bad data", By: "op"})
	if err != nil || rb.To != first.Manifest.Version || !rb.Pinned {
		t.Fatalf("rollback = %+v, %v; want back to %s, pinned", rb, err, first.Manifest.Version)
	}
	if _, got := r.served(t); !sameContents(got, held) {
		t.Fatalf("after the rollback the pointer's version holds %v; want %v", got, held)
	}
	r.src.Put("users", "u02", `{"third":true}`)
	res, err := publish()
	if err != nil || !res.Pinned {
		t.Fatalf("publish while pinned = %+v, %v; want refused as pinned", res, err)
	}
	if _, err := admin.Unpin(ctx, "fixed", "op"); err != nil {
		t.Fatal(err)
	}
	if res, err := publish(); err != nil || res.NoOp {
		t.Fatalf("publish after unpin = %+v, %v", res, err)
	}
	if _, got := r.served(t); !sameContents(got, r.model()) {
		t.Errorf("after unpin the pointer's version holds %v; want %v", got, r.model())
	}
	trail, err := r.st.ListAudit(ctx, "ds", 0)
	var actions []snapshot.Action
	for _, e := range trail {
		actions = append(actions, e.Action)
	}
	if err != nil || len(actions) < 3 || actions[0] != snapshot.ActionFlip || actions[1] != snapshot.ActionUnpin || actions[2] != snapshot.ActionRollback {
		t.Errorf("audit trail, newest first = %v, %v; want flip, unpin, rollback", actions, err)
	}
}
