package resolver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/bench"
	"github.com/snapflip/snapflip/snapshot"
)

// demandStore counts raises of the demand counter.
type demandStore struct{ raises atomic.Uint64 }

func (d *demandStore) RaiseDemand(context.Context, string) (uint64, error) {
	return d.raises.Add(1), nil
}
func (d *demandStore) ReadDemand(context.Context, string) (uint64, error) {
	return d.raises.Load(), nil
}

func tokenOf(tb testing.TB, s string) snapshot.Token {
	tb.Helper()
	t, err := snapshot.ParseToken(s)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// setPointer replaces the store's pointer.
func (s *countingStore) setPointer(p snapshot.Pointer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ptr = p
}

func awaitStore() *countingStore {
	return &countingStore{ptr: snapshot.Pointer{Version: "v1", Source: snapshot.Position{LSN: 1, PgSnapshot: "100:105:101"}},
		states: map[snapshot.Version]snapshot.State{"v1": snapshot.StatePublished, "v2": snapshot.StatePublished}}
}

func TestAwait(t *testing.T) {
	st := awaitStore()
	ds := &demandStore{}
	r := mustNew(t, "ds", st, Config{Refresh: 5 * time.Millisecond, Demand: ds}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)

	if v, err := r.Await(ctx, tokenOf(t, "x:104")); err != nil || v.Version != "v1" {
		t.Fatalf("a covered token: %v, %v", v.Version, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := r.Await(wctx, tokenOf(t, "x:101"))
	wcancel()
	if !errors.Is(err, snapshot.ErrNotYetCovered) {
		t.Errorf("an uncovered token past its wait: %v; want ErrNotYetCovered", err)
	}
	testPoll(t, func() bool { return ds.raises.Load() > 0 }) // the raise is sent on its own goroutine

	// A flip that covers it releases the waiter.
	done := make(chan error, 1)
	go func() {
		v, err := r.Await(ctx, tokenOf(t, "x:101"))
		if err == nil && v.Version != "v2" {
			err = fmt.Errorf("answered from %s", v.Version)
		}
		done <- err
	}()
	st.setPointer(snapshot.Pointer{Version: "v2", Source: snapshot.Position{LSN: 2, PgSnapshot: "106:106:"}})
	if err := <-done; err != nil {
		t.Errorf("after a covering flip: %v", err)
	}

	// Coverage recorded for the version covers what its own snapshot does not.
	st.setPointer(snapshot.Pointer{Version: "v2", Source: snapshot.Position{LSN: 2, PgSnapshot: "106:106:"},
		Covered: snapshot.Coverage{Version: "v2", PgSnapshot: "120:120:", LSN: 3}})
	if _, err := r.Await(ctx, tokenOf(t, "x:110")); err != nil {
		t.Errorf("a token the recorded coverage holds: %v", err)
	}

	// A coverage recorded after this wait's demand, whose snapshot had not issued the
	// xid: refused. Before any such coverage, the same token waits.
	fut := make(chan error, 1)
	go func() { _, err := r.Await(ctx, tokenOf(t, "x:5000")); fut <- err }()
	testPoll(t, func() bool { return r.Waiting() > 0 })
	testPoll(t, func() bool { return ds.raises.Load() >= 3 })
	st.setPointer(snapshot.Pointer{Version: "v2", Source: snapshot.Position{LSN: 2, PgSnapshot: "106:106:"},
		Covered: snapshot.Coverage{Version: "v2", PgSnapshot: "130:130:", LSN: 4, NextXid: 132, Demand: ds.raises.Load() + 100}})

	select {
	case err = <-fut:
	case <-time.After(time.Minute):
		t.Fatal("the wait for an xid from the future never ended")
	}
	if !errors.Is(err, snapshot.ErrTokenRejected) || !errors.Is(err, snapshot.ErrInvalid) {
		t.Errorf("an xid from the future: %v; want ErrTokenRejected", err)
	}

	// Pinned at a version that does not cover it: at once.
	st.setPointer(snapshot.Pointer{Version: "v1", Pinned: true, Source: snapshot.Position{LSN: 1, PgSnapshot: "100:105:101"}})
	testPoll(t, func() bool { p, _ := r.Pointer(ctx); return p.Pinned })
	if _, err := r.Await(ctx, tokenOf(t, "x:103")); err != nil {
		t.Errorf("a token the pinned version covers: %v", err)
	}
	if _, err := r.Await(ctx, tokenOf(t, "x:110")); !errors.Is(err, snapshot.ErrNotCovered) {
		t.Errorf("a token the pinned version does not cover: %v; want ErrNotCovered", err)
	}
	if _, err := r.Await(ctx, tokenOf(t, "x:3@42")); err != nil {
		t.Errorf("a token naming a cluster when the source names none: %v", err)
	}
	if n := r.Waiting(); n != 0 {
		t.Errorf("%d waiters left behind", n)
	}
}

// testPoll waits for cond without sleeping on a clock of its own.
func testPoll(tb testing.TB, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatal("condition not met in a minute")
		}
		time.Sleep(time.Millisecond) // a poll, leaving the core to what it waits for
	}
}

// Waiters over MaxWaiters are refused at once; however many wait, demand is raised at
// most once per refresh interval (plus the first).
func TestAwaitCapAndDemandCoalesced(t *testing.T) {
	st := awaitStore()
	ds := &demandStore{}
	r := mustNew(t, "ds", st, Config{Refresh: 20 * time.Millisecond, Demand: ds, MaxWaiters: 300}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	start := time.Now()
	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var refused atomic.Int64
	wait := func() {
		defer wg.Done()
		if _, err := r.Await(wctx, tokenOf(t, "x:101")); errors.Is(err, snapshot.ErrNotYetCovered) && wctx.Err() == nil {
			refused.Add(1)
		}
	}
	for range 300 {
		wg.Add(1)
		go wait()
	}
	testPoll(t, func() bool { return r.Waiting() == 300 })
	for range 20 {
		wg.Add(1)
		go wait()
	}
	testPoll(t, func() bool { return refused.Load() == 20 })
	wcancel()
	wg.Wait()
	elapsed := time.Since(start)
	if max := uint64(elapsed/(20*time.Millisecond)) + 2; ds.raises.Load() > max {
		t.Errorf("%d raises of demand in %s; want at most %d (one per refresh)", ds.raises.Load(), elapsed, max)
	}
	if n := r.Waiting(); n != 0 {
		t.Errorf("%d waiters left behind", n)
	}
	// Five refreshes later, nobody has asked for demand: no waiter is left to ask.
	raised, reads := ds.raises.Load(), st.reads.Load()
	testPoll(t, func() bool { return st.reads.Load() >= reads+5 })
	if ds.raises.Load() > raised+1 {
		t.Errorf("demand raised %d more times with nobody waiting", ds.raises.Load()-raised)
	}
}

// BenchmarkAwaitWaiters reports the pointer reads per second of a replica with no
// waiter and with 1,000 waiting for a token, and the heap each waiter holds.
func BenchmarkAwaitWaiters(b *testing.B) {
	for range b.N {
		st := awaitStore()
		r := mustNew(b, "ds", st, Config{Refresh: 10 * time.Millisecond, Demand: &demandStore{}, MaxWaiters: 2000}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		go r.Run(ctx)
		rate := func() float64 {
			n0, t0 := st.reads.Load(), time.Now()
			time.Sleep(time.Second)
			return float64(st.reads.Load()-n0) / time.Since(t0).Seconds()
		}
		idle := rate()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var wg sync.WaitGroup
		for range 1000 {
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = r.Await(ctx, tokenOf(b, "x:101")) }()
		}
		for r.Waiting() < 1000 {
			runtime.Gosched()
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		busy := rate()
		cancel()
		wg.Wait()
		perWaiter := (float64(after.HeapAlloc) - float64(before.HeapAlloc) + float64(after.StackInuse) - float64(before.StackInuse)) / 1000
		b.ReportMetric(idle, "reads/s_idle")
		b.ReportMetric(busy, "reads/s_1000_waiting")
		b.ReportMetric(perWaiter, "bytes/waiter")
		if path := os.Getenv(bench.EnvFigures); path != "" {
			err := bench.AppendFigure(path, bench.Figure{Benchmark: "BenchmarkAwaitWaiters",
				Measurement: "pointer reads per second of an API replica (refresh 10 ms), none vs 1,000 requests waiting for a token",
				Figure:      fmt.Sprintf("%.1f vs %.1f; %.1f KB of heap and stack per waiter", idle, busy, perWaiter/1000),
				Target:      "reads unchanged", Missed: busy > idle*1.1+1})
			if err != nil {
				b.Error(err)
			}
		}
	}
}

// TestAwaitConfirmsAPinBeforeRefusing: a replica whose cached pointer still shows a
// pin that an unpin already lifted reads the pointer again before it refuses a token
// the pin does not cover, and answers from the version the fresh pointer names.
func TestAwaitConfirmsAPinBeforeRefusing(t *testing.T) {
	st := awaitStore()
	st.setPointer(snapshot.Pointer{Version: "v1", Pinned: true, Source: snapshot.Position{LSN: 1, PgSnapshot: "100:105:101"}})
	r := mustNew(t, "ds", st, Config{Refresh: time.Hour}, nil)
	ctx := context.Background()
	if p, err := r.Pointer(ctx); err != nil || !p.Pinned {
		t.Fatalf("the first pointer: %+v, %v; want the pinned one", p, err)
	}
	// Unpinned and flipped to a version that covers the token; the cache, an hour
	// fresh, still holds the pin.
	st.setPointer(snapshot.Pointer{Version: "v2", Source: snapshot.Position{LSN: 2, PgSnapshot: "106:106:"}})
	v, err := r.Await(ctx, tokenOf(t, "x:101"))
	if err != nil || v.Version != "v2" {
		t.Errorf("a token the stale pin does not cover, the fresh pointer does: %v, %v; want v2", v.Version, err)
	}
	// Still pinned when read again: refused, after one read of the pointer.
	st.setPointer(snapshot.Pointer{Version: "v1", Pinned: true, Source: snapshot.Position{LSN: 1, PgSnapshot: "100:105:101"}})
	r = mustNew(t, "ds", st, Config{Refresh: time.Hour}, nil)
	if _, err := r.Await(ctx, tokenOf(t, "x:103")); err != nil {
		t.Errorf("a token the pinned version covers: %v", err)
	}
	if _, err := r.Await(ctx, tokenOf(t, "x:110")); !errors.Is(err, snapshot.ErrNotCovered) {
		t.Errorf("a token the pin does not cover, confirmed: %v; want ErrNotCovered", err)
	}
}

// TestAwaitShortenedTokenByOwnSnapshot: a version's token cut to MaxTokenBytes claims
// the transactions it dropped ended. A coverage recorded later, while one of them
// still runs, does not cover it; the version's own snapshot does, and is asked too.
func TestAwaitShortenedTokenByOwnSnapshot(t *testing.T) {
	const base = 1 << 32
	var xip []string
	for x := base + 1; x < base+150; x++ {
		xip = append(xip, strconv.Itoa(x))
	}
	own := fmt.Sprintf("%d:%d:%d,%s", base, base+200, base, strings.Join(xip, ","))
	tok := tokenOf(t, snapshot.SnapshotToken(own, ""))
	if len(tok.Snapshot.Xip) >= len(xip)+1 {
		t.Fatalf("the token of %d in-progress transactions was not shortened", len(xip)+1)
	}
	later := fmt.Sprintf("%d:%d:%d,%s", base, base+300, base, strings.Join(xip, ",")) // they all still run
	st := awaitStore()
	st.setPointer(snapshot.Pointer{Version: "v1", Source: snapshot.Position{LSN: 1, PgSnapshot: own},
		Covered: snapshot.Coverage{Version: "v1", PgSnapshot: later, LSN: 2}})
	r := mustNew(t, "ds", st, Config{Refresh: 5 * time.Millisecond}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go r.Run(ctx)
	if v, err := r.Await(ctx, tok); err != nil || v.Version != "v1" {
		t.Errorf("the version's own shortened token, with a later coverage recorded: %v, %v; want v1", v.Version, err)
	}
}

// TestAwaitTieReadsThePointer: a token of version v2, read at the very position of
// the version v1 the replica's cached pointer names (a republish that added a
// collection), is answered from a pointer read after the request came, never from v1.
func TestAwaitTieReadsThePointer(t *testing.T) {
	const v1, v2 = snapshot.Version("00000000-0000-4000-8000-000000000000-1"), snapshot.Version("00000000-0000-4000-8000-000000000000-2")
	st := awaitStore()
	st.states[v1], st.states[v2] = snapshot.StatePublished, snapshot.StatePublished
	pos := snapshot.Position{LSN: 1, PgSnapshot: "100:105:101"}
	st.setPointer(snapshot.Pointer{Version: v1, Source: pos})
	r := mustNew(t, "ds", st, Config{Refresh: time.Hour}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go r.Run(ctx)
	if v, err := r.Await(ctx, tokenOf(t, pos.Token(v1))); err != nil || v.Version != v1 {
		t.Fatalf("v1's own token: %v, %v", v.Version, err)
	}
	st.setPointer(snapshot.Pointer{Version: v2, Previous: v1, Source: pos}) // the cache still names v1
	if v, err := r.Await(ctx, tokenOf(t, pos.Token(v2))); err != nil || v.Version != v2 {
		t.Errorf("v2's token, v1 cached at the same position: %v, %v; want v2", v.Version, err)
	}
	if v, err := r.Await(ctx, tokenOf(t, pos.Token(v1))); err != nil || v.Version != v2 {
		t.Errorf("v1's token once v2 is current: %v, %v; want v2", v.Version, err)
	}
}

// lookingDemand is a demand store whose syncer looks at once: each raise records a
// coverage taken after it, which covers what the snapshot sees.
type lookingDemand struct {
	demandStore
	st       *countingStore
	snapshot string
}

func (d *lookingDemand) RaiseDemand(ctx context.Context, ds string) (uint64, error) {
	n, _ := d.demandStore.RaiseDemand(ctx, ds)
	d.st.mu.Lock()
	d.st.ptr.Covered = snapshot.Coverage{Version: d.st.ptr.Version, PgSnapshot: d.snapshot, LSN: d.st.ptr.Source.LSN + n, Demand: n}
	d.st.mu.Unlock()
	return n, nil
}

// TestAwaitStopsRaisingForUnhelpedTokens: requests that send again and again a token
// of a transaction that stays open raise demand once, then back off: a look that did
// not cover it would not cover it a refresh later either. Another token still raises.
func TestAwaitStopsRaisingForUnhelpedTokens(t *testing.T) {
	st := awaitStore()
	ds := &lookingDemand{st: st, snapshot: "100:110:101"} // 101 stays open
	r := mustNew(t, "ds", st, Config{Refresh: 5 * time.Millisecond, Demand: ds}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	const requests = 20
	start := time.Now()
	for range requests {
		wctx, wcancel := context.WithTimeout(ctx, 40*time.Millisecond)
		_, err := r.Await(wctx, tokenOf(t, "x:101"))
		wcancel()
		if !errors.Is(err, snapshot.ErrNotYetCovered) {
			t.Fatalf("the token of an open transaction: %v; want ErrNotYetCovered", err)
		}
	}
	// After each look that did not help, the next raise waits 1 s, 2 s, 4 s…: on a
	// loaded machine the requests may span a few of those.
	elapsed := time.Since(start)
	if n, most := ds.raises.Load(), uint64(2+math.Log2(1+elapsed.Seconds())); n > most {
		t.Errorf("%d requests with the token of an open transaction raised demand %d times in %s; want at most %d: a back-off after a look",
			requests, n, elapsed.Round(time.Millisecond), most)
	}
	before := ds.raises.Load()
	st.mu.Lock()
	ds.snapshot = "100:120:101" // 112 committed since
	st.mu.Unlock()
	if v, err := r.Await(ctx, tokenOf(t, "x:112")); err != nil || v.Version != "v1" {
		t.Fatalf("a token the next look covers: %v, %v", v.Version, err)
	}
	if ds.raises.Load() == before {
		t.Errorf("a new token raised no demand")
	}
}
