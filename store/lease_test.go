package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

func newLease(tb testing.TB, st *store.Store, holder string, d time.Duration) *store.Lease {
	tb.Helper()
	l, err := st.NewLease("publish/ds", store.LeaseConfig{Holder: holder, Duration: d, RetryMax: 20 * time.Millisecond})
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

func TestLeaseAcquireReleaseKeepsTokens(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	a, b := newLease(t, st, "a", 5*time.Second), newLease(t, st, "b", 5*time.Second)
	ha, err := a.TryAcquire(ctx)
	if err != nil || ha.Fence() != 1 {
		t.Fatalf("first TryAcquire = %v, %v; want token 1", ha, err)
	}
	if _, err := b.TryAcquire(ctx); !errors.Is(err, snapshot.ErrHeld) {
		t.Errorf("TryAcquire while held = %v; want ErrHeld", err)
	}
	if err := ha.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ha.Lost():
		t.Error("a released hold reports lost")
	default:
	}
	hb, err := b.TryAcquire(ctx)
	if err != nil || hb.Fence() != 2 {
		t.Fatalf("TryAcquire after release = %v, %v; want token 2", hb, err)
	}
	if err := hb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ha2, err := a.TryAcquire(ctx)
	if err != nil || ha2.Fence() != 3 {
		t.Fatalf("third acquire = %v, %v; want token 3 (tokens never restart)", ha2, err)
	}
	_ = ha2.Release(ctx)
}

// TestLeaseContention: 32 goroutines, each its own contender, 10 rounds each. An
// independent counter (not the lease) checks that no two ever hold at once; tokens
// are strictly increasing and gap-free; every contender finishes all its rounds.
func TestLeaseContention(t *testing.T) {
	st := newStore(t)
	const contenders, rounds = 32, 10
	var inside atomic.Int32
	var mu sync.Mutex
	var tokens []uint64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for c := range contenders {
		l := newLease(t, st, fmt.Sprintf("c%d", c), 10*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				h, err := l.Acquire(ctx)
				if err != nil {
					t.Errorf("contender %d: Acquire: %v", c, err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				mu.Lock()
				tokens = append(tokens, h.Fence())
				mu.Unlock()
				inside.Add(-1)
				if err := h.Release(ctx); err != nil {
					t.Errorf("contender %d: Release: %v", c, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(tokens) != contenders*rounds {
		t.Fatalf("%d acquires; want %d", len(tokens), contenders*rounds)
	}
	for i, tok := range tokens {
		if tok != uint64(i+1) {
			t.Fatalf("token #%d = %d; want %d (strictly increasing, gap-free)", i, tok, i+1)
		}
	}
}

// TestPausedHolderIsFenced: a holder that stops renewing (paused) loses the lease to a
// contender that watched it stay unchanged for the lease duration; when it resumes and
// flips with its old token, Bigtable refuses, and the pointer is unchanged.
func TestPausedHolderIsFenced(t *testing.T) {
	addr := testenv.Bigtable(t)
	st := testenv.Store(t, testenv.StoreConfig(addr))
	// The paused holder talks through its own connection, whose calls hang while
	// paused: to everyone else it looks exactly like a stopped process.
	var paused atomic.Bool
	resumed := make(chan struct{}) // closed when the pause ends
	pcfg := testenv.StoreConfig(addr)
	pcfg.DialOptions = []grpc.DialOption{grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if paused.Load() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-resumed:
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})}
	pst := testenv.Store(t, pcfg)
	ctx := context.Background()
	const d = 300 * time.Millisecond
	mk := func(st *store.Store, holder string) *store.Lease {
		l, err := st.NewLease("publish/ds", store.LeaseConfig{Holder: holder, Duration: d, RetryMax: 20 * time.Millisecond,
			BeforeAcquire: snapshot.RaiseFence(st, "ds")})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	old, err := mk(pst, "paused").TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	paused.Store(true)
	start := time.Now()
	winner, err := mk(st, "winner").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < d {
		t.Errorf("takeover after %s; want no sooner than the lease duration %s", took, d)
	}
	if winner.Fence() != old.Fence()+1 {
		t.Errorf("winner token %d; want %d", winner.Fence(), old.Fence()+1)
	}
	gen := snapshot.NewVersionGen([16]byte{1}, nil)
	v1, v2 := gen.Next(), gen.Next()
	if _, err := st.FlipPointer(ctx, "ds", snapshot.Flip{Version: v1, Fence: winner.Fence(), At: time.Now()}); err != nil {
		t.Fatalf("winner's flip: %v", err)
	}
	// The paused holder learns, on its own clock, that its lease is gone.
	select {
	case <-old.Lost():
	case <-time.After(5 * time.Second):
		t.Error("the paused holder never learned it lost the lease")
	}
	// It resumes and flips anyway, with its old token: Bigtable refuses.
	paused.Store(false)
	close(resumed)
	_, err = pst.FlipPointer(ctx, "ds", snapshot.Flip{Version: v2, Expected: v1, Fence: old.Fence(), At: time.Now()})
	if !errors.Is(err, snapshot.ErrFenced) {
		t.Errorf("paused holder's flip = %v; want ErrFenced", err)
	}
	if p, _ := st.ReadPointer(ctx, "ds"); p.Version != v1 {
		t.Errorf("pointer = %s; want the winner's %s", p.Version, v1)
	}
	if err := old.Release(ctx); !errors.Is(err, snapshot.ErrLeaseLost) {
		t.Errorf("Release of a lost hold = %v; want ErrLeaseLost", err)
	}
	_ = winner.Release(ctx)
}

func TestFenceRaisedBeforeTakeoverRefusesOldHolder(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	gen := snapshot.NewVersionGen([16]byte{2}, nil)
	v1, v2 := gen.Next(), gen.Next()
	if _, err := st.FlipPointer(ctx, "ds", snapshot.Flip{Version: v1, Fence: 3, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := st.AdvanceFence(ctx, "ds", 4); err != nil {
		t.Fatal(err)
	}
	if err := st.AdvanceFence(ctx, "ds", 2); err != nil {
		t.Fatal(err) // never lowers, never fails
	}
	if p, _ := st.ReadPointer(ctx, "ds"); p.Fence != 4 || p.Version != v1 {
		t.Errorf("pointer = %+v; want v1 with fence 4", p)
	}
	if _, err := st.FlipPointer(ctx, "ds", snapshot.Flip{Version: v2, Expected: v1, Fence: 3, At: time.Now()}); !errors.Is(err, snapshot.ErrFenced) {
		t.Errorf("flip with token 3 after the fence reached 4 = %v; want ErrFenced", err)
	}
	if _, err := st.FlipPointer(ctx, "ds", snapshot.Flip{Version: v2, Expected: v1, Fence: 4, At: time.Now()}); err != nil {
		t.Errorf("flip by the fence's own token: %v", err)
	}
}

// dropper injects lost replies and lost requests into CheckAndMutateRow calls.
type dropper struct {
	mode   atomic.Int32 // 0 pass, 1 drop the reply (the write applies), 2 drop the request, 3 time out now and apply later
	calls  atomic.Int32 // CheckAndMutateRow calls seen
	landed atomic.Int32 // late writes (mode 3) that have landed
}

func (d *dropper) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method != "/google.bigtable.v2.Bigtable/CheckAndMutateRow" {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	d.calls.Add(1)
	switch d.mode.Swap(0) {
	case 1:
		if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "injected: reply lost")
	case 2:
		return status.Error(codes.Unavailable, "injected: request lost")
	case 3:
		// The client gives up, the re-read still finds the old state, and then the
		// write lands (a server that stalled).
		time.AfterFunc(100*time.Millisecond, func() {
			_ = invoker(context.Background(), method, req, proto.Clone(reply.(proto.Message)), cc, opts...)
			d.landed.Add(1)
		})
		return status.Error(codes.DeadlineExceeded, "injected: timed out")
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func TestLostRepliesAreResolvedByRereading(t *testing.T) {
	d := &dropper{}
	cfg := testenv.StoreConfig(testenv.Bigtable(t))
	cfg.DialOptions = []grpc.DialOption{grpc.WithUnaryInterceptor(d.intercept)}
	st := testenv.Store(t, cfg)
	ctx := context.Background()
	l := newLease(t, st, "me", 5*time.Second)

	// Acquire whose reply is lost: it did apply, and re-reading says so.
	d.mode.Store(1)
	h, err := l.TryAcquire(ctx)
	if err != nil || h.Fence() != 1 {
		t.Fatalf("TryAcquire with a lost reply = %v, %v; want the lease with token 1", h, err)
	}
	// Release whose request is lost: it did not apply, and the hold reports the error.
	d.mode.Store(2)
	if err := h.Release(ctx); err == nil {
		t.Error("Release with a lost request = nil; want an error (the lease is still held)")
	}
	other := newLease(t, st, "other", 5*time.Second)
	if _, err := other.TryAcquire(ctx); !errors.Is(err, snapshot.ErrHeld) {
		t.Errorf("after a lost release request the lease is free (%v); want still held", err)
	}

	// Flip whose reply is lost: applied, reported as applied.
	gen := snapshot.NewVersionGen([16]byte{3}, nil)
	v1, v2 := gen.Next(), gen.Next()
	d.mode.Store(1)
	if _, err := st.FlipPointer(ctx, "ds", snapshot.Flip{Version: v1, Fence: 1, At: time.Now()}); err != nil {
		t.Errorf("flip with a lost reply = %v; want success", err)
	}
	// Flip whose request is lost: not applied, reported as an error.
	d.mode.Store(2)
	// Flip whose request is lost: not applied, and a re-read cannot prove that (the
	// flip might have applied and been flipped over since): the outcome is unknown.
	if _, err := st.FlipPointer(ctx, "ds", snapshot.Flip{Version: v2, Expected: v1, Fence: 1, At: time.Now()}); !errors.Is(err, snapshot.ErrOutcomeUnknown) {
		t.Errorf("flip with a lost request = %v; want ErrOutcomeUnknown", err)
	}
	if p, _ := st.ReadPointer(ctx, "ds"); p.Version != v1 {
		t.Errorf("pointer = %s; want %s", p.Version, v1)
	}

	// Slot claim whose reply is lost: won, and re-reading says so.
	d.mode.Store(1)
	won, owner, err := st.ClaimTick(ctx, "ds", 42, "me")
	if err != nil || !won || owner != "me" {
		t.Errorf("ClaimTick with a lost reply = %v, %q, %v; want won by me", won, owner, err)
	}
	// Manifest transition whose reply is lost: applied, reported as applied.
	m := snapshot.Manifest{Dataset: "ds", Version: v2, State: snapshot.StateWriting, StartedAt: time.Now()}
	if err := st.CreateManifest(ctx, m); err != nil {
		t.Fatal(err)
	}
	m.State = snapshot.StateSealed
	d.mode.Store(1)
	if err := st.UpdateManifest(ctx, m, snapshot.StateWriting); err != nil {
		t.Errorf("UpdateManifest with a lost reply = %v; want success", err)
	}
}

// TestLostRenewalRequestKeepsTheLease: a renewal whose request never reached Bigtable
// (the state is still the one the holder expected), or whose call timed out and which
// then landed late (the state has the holder's token and name and a later seq), is not
// taken for a takeover: the holder keeps the lease and can release it.
// renewLease is the lease of the renewal tests: renewed every 1.5 s, each renewal
// call bounded by that, which a slow emulator call on a loaded machine stays within.
const renewLease = 4500 * time.Millisecond

func TestLostRenewalRequestKeepsTheLease(t *testing.T) {
	for _, mode := range []int32{2, 3} {
		t.Run(fmt.Sprint("mode ", mode), func(t *testing.T) {
			d := &dropper{}
			cfg := testenv.StoreConfig(testenv.Bigtable(t))
			cfg.DialOptions = []grpc.DialOption{grpc.WithUnaryInterceptor(d.intercept)}
			st := testenv.Store(t, cfg)
			ctx := context.Background()
			h, err := newLease(t, st, "me", renewLease).TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			d.mode.Store(mode) // the next renewal meets the fault
			testenv.Eventually(t, time.Minute, func() error {
				if d.mode.Load() != 0 || (mode == 3 && d.landed.Load() == 0) {
					return errors.New("no renewal met the fault (or no late write landed)")
				}
				return nil
			})
			seen := d.calls.Load()
			testenv.Eventually(t, time.Minute, func() error {
				select {
				case <-h.Lost():
					t.Fatalf("the hold was lost after one faulty renewal: %v", h.Release(ctx))
				default:
				}
				if n := d.calls.Load() - seen; n < 3 {
					return fmt.Errorf("%d renewals since the faulty one; want 3", n)
				}
				return nil
			})
			if _, err := newLease(t, st, "other", renewLease).TryAcquire(ctx); !errors.Is(err, snapshot.ErrHeld) {
				t.Errorf("another contender's TryAcquire = %v; want ErrHeld", err)
			}
			if err := h.Release(ctx); err != nil {
				t.Errorf("Release after a faulty renewal: %v", err)
			}
		})
	}
}

func TestSlotClaimedOnce(t *testing.T) {
	st := newStore(t)
	const n = 16
	var wg sync.WaitGroup
	var winners atomic.Int32
	owners := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			won, owner, err := st.ClaimTick(context.Background(), "ds", 7, fmt.Sprintf("r%d", i))
			if err != nil {
				t.Error(err)
				return
			}
			if won {
				winners.Add(1)
			}
			owners <- owner
		}()
	}
	wg.Wait()
	close(owners)
	if winners.Load() != 1 {
		t.Errorf("%d replicas won slot 7; want exactly 1", winners.Load())
	}
	first := ""
	for o := range owners {
		if first == "" {
			first = o
		}
		if o != first {
			t.Errorf("replicas disagree on the owner: %q vs %q", o, first)
		}
	}
	if won, _, _ := st.ClaimTick(context.Background(), "ds", 8, "late"); !won {
		t.Error("a fresh slot could not be claimed")
	}
}

// TestAcquireSaysWhoItWaitsFor: a contender that waits for a held lease reports the
// holder and when it would take over, at once and not only when it finally acquires.
func TestAcquireSaysWhoItWaitsFor(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	a := newLease(t, st, "holder-a", 5*time.Second)
	ha, err := a.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ha.Release(ctx)
	// The waiter stops once it has said whom it waits for, however long that takes
	// on a busy machine (within the holder's renewals).
	actx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	events := make(chan snapshot.Event, 100)
	b, err := st.NewLease("publish/ds", store.LeaseConfig{Holder: "waiter-b", Duration: 5 * time.Second,
		Observer: snapshot.ObserverFunc(func(_ context.Context, e snapshot.Event) { events <- e; cancel() })})
	if err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	if _, err := b.Acquire(actx); err == nil {
		t.Fatal("acquired a lease that is held and renewed")
	}
	returned := time.Now() // the first sighting, and so the takeover time, lies between
	select {
	case e := <-events:
		at, _ := e.Attr("takeover_at").(time.Time)
		if e.Kind != snapshot.EventLeaseWaiting || e.Attr("held_by") != "holder-a" || at.Before(asked) || at.After(returned.Add(6*time.Second)) {
			t.Errorf("first event = %+v; want waiting for holder-a, takeover within the lease duration", e)
		}
	default:
		t.Error("Acquire waited without saying for whom")
	}
}

// A lease config's bad value is refused with an error naming its field; zero fields
// take their defaults.
func TestLeaseConfigRefusesBadValues(t *testing.T) {
	st := newStore(t)
	for field, cfg := range map[string]store.LeaseConfig{
		"Holder":     {},
		"Duration":   {Holder: "h", Duration: -time.Second},
		"RenewEvery": {Holder: "h", Duration: time.Second, RenewEvery: time.Second},
		"RetryMax":   {Holder: "h", RetryMax: -1},
	} {
		if _, err := st.NewLease("publish/ds", cfg); !errors.Is(err, snapshot.ErrInvalid) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s bad: NewLease = %v; want ErrInvalid naming %s", field, err, field)
		}
	}
	if _, err := st.NewLease("publish/ds", store.LeaseConfig{Holder: "h"}); err != nil {
		t.Errorf("zero fields: %v", err)
	}
}
