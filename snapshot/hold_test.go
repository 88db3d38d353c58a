package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/memstore"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/snapshot"
)

// gatedOpens is a memory source whose snapshots, opened by a base read beside the
// stream, are taken at once (and what the source held then recorded) but read only
// once released, or fail once their context ends (a killed syncer): versions are
// published between a base's snapshot and its end.
type gatedOpens struct {
	*memstore.Source
	release chan struct{}
	opened  chan uint64 // when set, receives each snapshot's LSN
	mu      sync.Mutex
	at      map[uint64]map[string]map[string]string // by LSN: what the source held
}

func (g *gatedOpens) Open(ctx context.Context) (snapshot.SourceSnapshot, error) {
	return g.gate(func() (snapshot.SourceSnapshot, error) { return g.Source.Open(ctx) })
}

// OpenBase opens a base read in chunks as the source does, recorded and gated as
// Open's snapshots are.
func (g *gatedOpens) OpenBase(ctx context.Context, collection string) (snapshot.SourceSnapshot, error) {
	return g.gate(func() (snapshot.SourceSnapshot, error) { return g.Source.OpenBase(ctx, collection) })
}

// gate opens a snapshot with open, never while the source changes, records what the
// source held at its position, and returns it gated.
func (g *gatedOpens) gate(open func() (snapshot.SourceSnapshot, error)) (snapshot.SourceSnapshot, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	snap, err := open()
	if err != nil {
		return nil, err
	}
	g.recordLocked(snap.Position().LSN, g.Source)
	if g.opened != nil {
		g.opened <- snap.Position().LSN
	}
	return &gatedSnapshot{DeltaSnapshot: snap.(snapshot.DeltaSnapshot), release: g.release}, nil
}

// ResumeBase goes on with a base as the source does, gated as Open's snapshots are.
func (g *gatedOpens) ResumeBase(ctx context.Context, collection string, at snapshot.Position, after string) (snapshot.SourceSnapshot, error) {
	snap, err := g.Source.ResumeBase(ctx, collection, at, after)
	if err != nil {
		return nil, err
	}
	return &gatedSnapshot{DeltaSnapshot: snap.(snapshot.DeltaSnapshot), release: g.release}, nil
}

// OnChunk passes fn on to a snapshot read in chunks.
func (g *gatedSnapshot) OnChunk(fn func(ctx context.Context, last string) error) {
	if cs, ok := g.DeltaSnapshot.(snapshot.ChunkedSnapshot); ok {
		cs.OnChunk(fn)
	}
}

// awaitOpened waits until a gated snapshot is opened.
func (g *gatedOpens) awaitOpened(t *testing.T) {
	t.Helper()
	select {
	case <-g.opened:
	case <-time.After(time.Minute):
		t.Fatal("no base's snapshot was opened in a minute")
	}
}

// releaseUntil lets every gated read through, one at a time, until wait returns:
// as many as are in flight, a base read again after a failure among them; none is
// left over to let a later read through.
func (g *gatedOpens) releaseUntil(wait func()) {
	done := make(chan struct{})
	go func() { defer close(done); wait() }()
	for {
		if len(g.release) == 0 { // the last release was taken: offer another
			select {
			case g.release <- struct{}{}:
				continue
			case <-done:
			}
		} else {
			select {
			case <-time.After(time.Millisecond):
				continue
			case <-done:
			}
		}
		for len(g.release) > 0 {
			<-g.release
		}
		return
	}
}

// gatedSnapshot is a snapshot whose reads wait for a release.
type gatedSnapshot struct {
	snapshot.DeltaSnapshot
	release chan struct{}
}

func (g *gatedSnapshot) ScanSince(ctx context.Context, collection string, since *snapshot.Position, fn func(snapshot.Document) error) (snapshot.LayerMode, error) {
	select {
	case <-g.release:
	case <-ctx.Done():
		return snapshot.LayerMode{}, ctx.Err()
	}
	return g.DeltaSnapshot.ScanSince(ctx, collection, since, fn)
}

// change makes a change to the source, never while a snapshot is opened and what
// it saw recorded.
func (g *gatedOpens) change(fn func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fn()
}

// record notes what src holds now, at lsn.
func (g *gatedOpens) record(lsn uint64, src *memstore.Source) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.recordLocked(lsn, src)
}

func (g *gatedOpens) recordLocked(lsn uint64, src *memstore.Source) {
	out := map[string]map[string]string{}
	for _, c := range src.Collections() {
		out[c] = src.Documents(c)
	}
	g.at[lsn] = out
}

func (g *gatedOpens) held(lsn uint64, collection string) (map[string]string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m, ok := g.at[lsn]
	return m[collection], ok
}

// Random histories on memory with definition changes, new collections and bases
// read from the source beside the stream in chunks (rows changing between them), let
// through, held back or killed with their syncer: every version holds each collection as the source held it at the
// version's position, but a held one, which it holds whole as the source held it at
// the position its hold names, and a new one not yet joined, which it leaves out.
// Every hold ends: once the bases are let through, a version holds none.
func TestHeldCollectionsOnMemory(t *testing.T) {
	changedBetween := 0 // rows changed between two chunks of a base, over every seed
	defer func() {
		if changedBetween == 0 && !t.Failed() {
			t.Error("no row changed between two chunks of a base in any history")
		}
	}()
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 55))
			r := newMemRig(t, 2+rng.IntN(3))
			opens := &gatedOpens{Source: r.src, release: make(chan struct{}, 100), at: map[uint64]map[string]map[string]string{}}
			// A base that failed (its definition changed while it was read) is read
			// again at the next version, not ten seconds later.
			c, stop := r.withCompactor(t, r.st)
			c.Source, c.RetryAfter = opens, time.Millisecond
			ctx := context.Background()
			held, joined, killed, rebased := 0, 0, 0, 0
			// A base is read in chunks, each from the source as it is then: between
			// two, rows change, as commits land between the transactions of a base
			// read from Postgres.
			// Only while the test waits for the bases it let through, so that what a
			// version is checked against is the source as of its position.
			between := 0
			var reading atomic.Bool
			hook := rand.New(rand.NewPCG(seed, 56))
			var hookMu sync.Mutex // bases of several collections read at once
			r.src.BetweenChunks = func() {
				if !reading.Load() {
					return
				}
				hookMu.Lock()
				defer hookMu.Unlock()
				between++
				names := r.src.Collections()
				name, id := names[hook.IntN(len(names))], fmt.Sprintf("u%02d", hook.IntN(30))
				del := hook.IntN(4) == 0
				opens.change(func() {
					if del {
						r.src.Delete(name, id)
					} else {
						r.src.Put(name, id, fmt.Sprintf(`{"between":%d}`, between))
					}
				})
			}
			check := func(step int) {
				t.Helper()
				m, got := r.served(t)
				for _, name := range r.src.Collections() {
					st, in := m.Collections[name]
					switch {
					case !in:
						if len(got[name]) != 0 {
							t.Fatalf("step %d: version %s leaves %s out, yet reads %d documents of it", step, m.Version, name, len(got[name]))
						}
					case st.Held != nil:
						held++
						want, ok := opens.held(st.Held.Source.LSN, name)
						if !ok {
							t.Fatalf("step %d: version %s holds %s at LSN %d, where nothing was read", step, m.Version, name, st.Held.Source.LSN)
						}
						if !maps.Equal(got[name], want) {
							t.Fatalf("step %d: version %s holds %s at LSN %d as %v; the source held %v", step, m.Version, name, st.Held.Source.LSN, got[name], want)
						}
					default:
						if want := r.src.Documents(name); !maps.Equal(got[name], want) {
							t.Fatalf("step %d: version %s holds %s as %v; the source holds %v", step, m.Version, name, got[name], want)
						}
					}
				}
			}
			for step := range 40 {
				names := r.src.Collections()
				for range 1 + rng.IntN(6) {
					name, id := names[rng.IntN(len(names))], fmt.Sprintf("u%02d", rng.IntN(30))
					del := rng.IntN(5) == 0
					opens.change(func() {
						if del {
							r.src.Delete(name, id)
						} else {
							r.src.Put(name, id, fmt.Sprintf(`{"n":%d}`, step))
						}
					})
				}
				switch rng.IntN(10) {
				case 0:
					name := names[rng.IntN(len(names))]
					opens.change(func() { r.src.Redefine(name) })
				case 1:
					if len(names) < 4 {
						opens.change(func() { r.src.AddCollection(fmt.Sprintf("new%d", step)) })
						joined++
					}
				case 2, 3:
					reading.Store(true)
					opens.releaseUntil(c.Wait)
					reading.Store(false)
				case 4:
					stop() // the syncer is killed; its successor starts with no base in hand
					killed++
					c, stop = r.withCompactor(t, r.st)
					c.Source, c.RetryAfter = opens, time.Millisecond
				}
				res, err := r.pub.Publish(ctx, snapshot.PublishOptions{})
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if !res.NoOp {
					opens.record(res.Manifest.Source.LSN, r.src)
					for name, st := range res.Manifest.Collections {
						if st.Own != nil && st.Own.Rebased {
							rebased++
							_ = name
						}
					}
				}
				check(step)
			}
			// Let every base through: the holds end, and every collection joins.
			// A base that failed is read again once its backoff (a few
			// milliseconds, doubled at each failure) has passed.
			deadline := time.Now().Add(30 * time.Second)
			for {
				opens.releaseUntil(c.Wait)
				if _, err := r.pub.Publish(ctx, snapshot.PublishOptions{}); err != nil {
					t.Fatal(err)
				}
				m, got := r.served(t)
				h := m.HeldCollections()
				if len(h) == 0 && sameContents(got, r.model()) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after every base was let through, version %s holds %v: %v; the source %v", m.Version, h, got, r.model())
				}
			}
			hookMu.Lock()
			n := between
			hookMu.Unlock()
			changedBetween += n
			t.Logf("%d held collections seen, %d collections added, %d syncers killed, %d bases read beside the stream taken, %d changes between their chunks",
				held, joined, killed, rebased, n)
		})
	}
}

// gatedRig returns a rig with a Compactor whose bases read from the source are
// gated (gatedOpens): each snapshot is taken at once, its read let through later.
func gatedRig(t *testing.T) (*memRig, *gatedOpens, *layer.Compactor) {
	r := newMemRig(t, 4)
	opens := &gatedOpens{Source: r.src, release: make(chan struct{}, 1), opened: make(chan uint64, 1),
		at: map[uint64]map[string]map[string]string{}}
	c, _ := r.withCompactor(t, r.st)
	c.Source = opens
	return r, opens, c
}

// A base read beside the stream catches up from the position it was read at, not
// its parent's: a change made after the base's snapshot, published while the
// collection was still held, is in the version that takes the base.
func TestHeldBaseCatchesUpFromItsOwnPosition(t *testing.T) {
	r, opens, c := gatedRig(t)
	publish := func() snapshot.Manifest { return r.publish(t) }
	publish()
	r.src.Redefine("users")
	v2 := publish()
	if v2.Collections["users"].Held == nil {
		t.Fatalf("v2's users = %+v; want held", v2.Collections["users"])
	}
	opens.awaitOpened(t) // the base's snapshot is taken; its read waits
	r.src.Put("users", "u01", `{"n":"after the base's snapshot"}`)
	r.src.Put("orders", "9", `{"user":"u09"}`)
	v3 := publish()
	if v3.Collections["users"].Held == nil {
		t.Fatalf("v3's users = %+v; want still held", v3.Collections["users"])
	}
	opens.release <- struct{}{}
	c.Wait()
	v4 := publish()
	if u := v4.Collections["users"]; u.Held != nil || u.Own == nil || !u.Own.Rebased {
		t.Fatalf("v4's users = %+v; want the base read beside the stream, caught up", u)
	}
	if got := r.holds(t, v4); !sameContents(got, r.model()) {
		t.Fatalf("v4 holds %v; the source %v", got, r.model())
	}
}

// holdingOpens is a memory source that is told which collections a version holds
// (snapshot.HoldingOpener), and records it; opening, it calls opening when set.
type holdingOpens struct {
	*memstore.Source
	mu      sync.Mutex
	held    [][]string // each snapshot's held collections, nil for none
	opening func(held []string)
}

func (h *holdingOpens) OpenSince(ctx context.Context, _ *snapshot.Position) (snapshot.SourceSnapshot, error) {
	return h.OpenHolding(ctx, nil, nil)
}

func (h *holdingOpens) OpenHolding(ctx context.Context, _ *snapshot.Position, held []string) (snapshot.SourceSnapshot, error) {
	h.mu.Lock()
	h.held = append(h.held, held)
	fn := h.opening
	h.mu.Unlock()
	if fn != nil {
		fn(held)
	}
	return h.Open(ctx)
}

func (h *holdingOpens) last() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held[len(h.held)-1]
}

// A version whose snapshot was opened holding a collection (its changes not
// counted) holds it still, even when its base is built by the time the version
// would take it: the next version, opened with nothing held, takes it and catches
// it up.
func TestAVersionOpenedHoldingKeepsTheHold(t *testing.T) {
	r, opens, c := gatedRig(t)
	src := &holdingOpens{Source: r.src}
	r.pub.Source = src
	publish := func() snapshot.Manifest { return r.publish(t) }
	publish()
	r.src.Redefine("users")
	if v2 := publish(); v2.Collections["users"].Held == nil || src.last() != nil {
		t.Fatalf("v2's users = %+v, opened holding %v; want held, opened holding nothing", v2.Collections["users"], src.last())
	}
	opens.awaitOpened(t) // the base's snapshot is taken; its read waits
	r.src.Put("orders", "9", `{"user":"u09"}`)
	if v3 := publish(); v3.Collections["users"].Held == nil || !slices.Equal(src.last(), []string{"users"}) {
		t.Fatalf("v3's users = %+v, opened holding %v; want held, opened holding users", v3.Collections["users"], src.last())
	}
	// The base is built after v4's snapshot is opened holding users.
	src.opening = func(held []string) {
		opens.release <- struct{}{}
		c.Wait()
	}
	r.src.Put("users", "u01", `{"n":"after the base's snapshot"}`)
	r.src.Put("orders", "8", `{"user":"u08"}`)
	v4 := publish()
	if v4.Collections["users"].Held == nil || !slices.Equal(src.last(), []string{"users"}) {
		t.Fatalf("v4's users = %+v, opened holding %v; want held, opened holding users", v4.Collections["users"], src.last())
	}
	src.opening = nil
	v5 := publish()
	if u := v5.Collections["users"]; u.Held != nil || u.Own == nil || !u.Own.Rebased || src.last() != nil {
		t.Fatalf("v5's users = %+v, opened holding %v; want the base read beside the stream, caught up", u, src.last())
	}
	if got := r.holds(t, v5); !sameContents(got, r.model()) {
		t.Fatalf("v5 holds %v; the source %v", got, r.model())
	}
}

// A syncer killed at any point of the version that takes a held collection's base
// leaves readers the held collection whole, or the version that took it whole, never
// a part; its successor, with no base in hand, holds the collection, reads its base
// again, and catches it up.
func TestHeldSwapAtEveryCrashPoint(t *testing.T) {
	points := []snapshot.CrashPoint{snapshot.CrashAfterOpen, snapshot.CrashMidWrite, snapshot.CrashAfterSeal, snapshot.CrashAfterFlip}
	for _, at := range points {
		t.Run(string(at), func(t *testing.T) {
			r := newMemRig(t, 4)
			c, stop := r.withCompactor(t, r.st)
			c.Source = r.src
			ctx := context.Background()
			if _, err := r.pub.Publish(ctx, snapshot.PublishOptions{}); err != nil {
				t.Fatal(err)
			}
			before := r.model()
			r.src.Redefine("users")
			v2, err := r.pub.Publish(ctx, snapshot.PublishOptions{})
			if err != nil || v2.Manifest.Collections["users"].Held == nil {
				t.Fatalf("v2 = %+v, %v; want users held", v2.Manifest.Collections["users"], err)
			}
			c.Wait() // the base is built
			r.src.Put("users", "u03", `{"changed":true}`)
			after := r.model()

			r.freezeAt(t, at)
			m, got := r.served(t)
			if at == snapshot.CrashAfterFlip {
				if m.Collections["users"].Held != nil || !sameContents(got, after) {
					t.Fatalf("frozen %s: %s holds %v (held %v); want the source whole", at, m.Version, got, m.HeldCollections())
				}
			} else if m.Version != v2.Manifest.Version || !maps.Equal(got["users"], before["users"]) {
				t.Fatalf("frozen %s: %s holds users as %v; want v2's held users %v", at, m.Version, got["users"], before["users"])
			}
			stop() // the syncer is killed

			// Its successor: its own publisher and Compactor, no base in hand.
			next := newMemPublisher(r.st, r.src, "writer-2", 4)
			r.pub = next
			c2, _ := r.withCompactor(t, r.st)
			c2.Source = r.src
			for i := 0; ; i++ {
				if _, err := next.Publish(ctx, snapshot.PublishOptions{}); err != nil {
					t.Fatalf("successor's publish: %v", err)
				}
				c2.Wait()
				m, got := r.served(t)
				if len(m.HeldCollections()) == 0 && sameContents(got, after) {
					break
				}
				if i == 3 {
					t.Fatalf("the successor serves %v (held %v); want the source %v", got, m.HeldCollections(), after)
				}
			}
		})
	}
}

// A base read beside the stream that waited half the TTL for a version is dropped,
// never taken (its cells would expire before the chain that took it); the version
// holds the collection on and reads its base again, which the next one takes.
func TestHeldBaseTooOldIsReadAgain(t *testing.T) {
	r := newMemRig(t, 4)
	r.pub.TTL = time.Hour
	c, _ := r.withCompactor(t, r.st)
	c.Source = r.src
	var skew atomic.Int64
	c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	publish := func() snapshot.Manifest { return r.publish(t) }
	publish()
	r.src.Redefine("users")
	publish()
	c.Wait()
	first := c.Progress()[0]
	skew.Store(int64(31 * time.Minute))
	r.src.Put("orders", "3", `{"user":"u03"}`)
	if v3 := publish(); v3.Collections["users"].Held == nil {
		t.Fatalf("v3 took a base built over half the TTL ago: %+v", v3.Collections["users"])
	}
	c.Wait()
	if p := c.Progress(); len(p) != 1 || !p[0].Started.After(first.Started) || p[0].State != "built" {
		t.Fatalf("progress = %+v; want users' base read again after %v", p, first.Started)
	}
	v4 := publish()
	if v4.Collections["users"].Held != nil || !sameContents(r.holds(t, v4), r.model()) {
		t.Fatalf("v4 holds %v (held %v); want the source %v", r.holds(t, v4), v4.HeldCollections(), r.model())
	}
}

// publish publishes a version, which must not be a no-op, and returns it.
func (r *memRig) publish(tb testing.TB) snapshot.Manifest {
	tb.Helper()
	res, err := r.pub.Publish(context.Background(), snapshot.PublishOptions{})
	if err != nil || res.NoOp {
		tb.Fatalf("publish = %+v, %v", res, err)
	}
	return res.Manifest
}

// A held collection whose base read failed is read again after its backoff by the
// Compactor itself: no version need ask (none does while the source stays as it
// is), and the next one takes the base.
func TestHeldBaseFailedIsReadAgain(t *testing.T) {
	r := newMemRig(t, 4)
	c, _ := r.withCompactor(t, r.st)
	built := make(chan struct{}, 1)
	c.Source, c.RetryAfter = r.src, 10*time.Millisecond
	c.Built = func() {
		select {
		case built <- struct{}{}:
		default:
		}
	}
	r.publish(t)
	r.src.Redefine("users")
	r.src.FailScans("users", errors.New("the disk is on fire"))
	if v := r.publish(t); v.Collections["users"].Held == nil {
		t.Fatalf("users = %+v; want held", v.Collections["users"])
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, p := range c.Progress() {
			if p.Collection == "users" && p.State == "failed" {
				return nil
			}
		}
		return fmt.Errorf("users' base has not failed: %+v", c.Progress())
	})
	r.src.FailScans("users", nil)
	select {
	case <-built:
	case <-time.After(30 * time.Second):
		t.Fatalf("the failed base was not read again: %+v", c.Progress())
	}
	v := r.publish(t)
	if u := v.Collections["users"]; u.Held != nil || u.Own == nil || !u.Own.Rebased {
		t.Fatalf("users = %+v; want the base read again, taken", u)
	}
	if got := r.holds(t, v); !sameContents(got, r.model()) {
		t.Fatalf("%s holds %v; the source %v", v.Version, got, r.model())
	}
}
