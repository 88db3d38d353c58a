package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/snapflip/snapflip/index"
	"github.com/snapflip/snapflip/internal/memstore"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

var bg = context.Background()

// at is a fixed time, in milliseconds, as stored times keep them.
var at = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// versions returns n versions in increasing order.
func versions(n int) []snapshot.Version {
	g := snapshot.NewVersionGen(uuid.New(), nil)
	out := make([]snapshot.Version, n)
	for i := range out {
		out[i] = g.Next()
	}
	return out
}

// flip is a flip of dataset to v by token at LSN lsn, expecting exp.
func flip(v, exp snapshot.Version, token, lsn uint64) snapshot.Flip {
	return snapshot.Flip{Version: v, Expected: exp, Fence: token, Source: snapshot.Position{LSN: lsn, PgSnapshot: fmt.Sprint(lsn)},
		By: "contract", At: at}
}

// want fails t unless err wraps target (nil for success).
func want(t TB, what string, err, target error) {
	t.Helper()
	if target == nil && err != nil || target != nil && !errors.Is(err, target) {
		t.Fatalf("%s: %v; want %v", what, err, target)
	}
}

// current fails t unless the pointer names v with fence fence.
func current(t TB, st Store, ds string, v snapshot.Version, fence uint64) snapshot.Pointer {
	t.Helper()
	p, err := st.ReadPointer(bg, ds)
	if err != nil || p.Version != v || p.Fence != fence {
		t.Fatalf("pointer = %s fence %d, %v; want %s fence %d", p.Version, p.Fence, err, v, fence)
	}
	return p
}

func pointerAbsent(t TB, st Store, ds string) {
	_, err := st.ReadPointer(bg, ds)
	want(t, "read pointer of a new dataset", err, snapshot.ErrNoVersion)
	n, err := st.ReadDemand(bg, ds)
	if err != nil || n != 0 {
		t.Errorf("demand of a new dataset = %d, %v; want 0", n, err)
	}
	ps, err := st.ListPointers(bg)
	if _, ok := ps[ds]; err != nil || ok {
		t.Errorf("list pointers = %v, %v; want none for %s", ps, err, ds)
	}
}

func firstFlip(t TB, st Store, ds string) {
	v := versions(1)[0]
	f := flip(v, "", 3, 10)
	f.Demand, f.Reason = 7, "first"
	got, err := st.FlipPointer(bg, ds, f)
	want(t, "first flip", err, nil)
	p := current(t, st, ds, v, 3)
	for _, q := range []snapshot.Pointer{got, p} {
		if q.Previous != "" || q.Source.LSN != 10 || q.Source.PgSnapshot != "10" || q.Pinned || !q.FlippedAt.Equal(at) || q.By != "contract" || q.Reason != "first" {
			t.Errorf("pointer = %+v; want the flip's fields", q)
		}
		if q.Covered.Version != v || q.Covered.LSN != 10 || q.Covered.PgSnapshot != "10" || q.Covered.Demand != 7 {
			t.Errorf("coverage = %+v; want the flip's", q.Covered)
		}
	}
	ps, err := st.ListPointers(bg)
	if err != nil || ps[ds].Version != v {
		t.Errorf("list pointers = %v, %v; want %s at %s", ps, err, ds, v)
	}
}

// flipWithContextDone: a flip whose context ended before it was sent has an unknown
// outcome, as any write whose reply never came; the re-read shows it did not apply.
func flipWithContextDone(t TB, st Store, ds string) {
	vs := versions(2)
	_, err := st.FlipPointer(bg, ds, flip(vs[0], "", 1, 1))
	want(t, "first flip", err, nil)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	_, err = st.FlipPointer(ctx, ds, flip(vs[1], vs[0], 1, 2))
	want(t, "flip with its context done", err, snapshot.ErrOutcomeUnknown)
	current(t, st, ds, vs[0], 1)
}

// flipRefusalsInOrder: a flip refused for several reasons at once names the first of
// fenced, pinned, source behind and conflict (snapshot.WhyRefused's order).
func flipRefusalsInOrder(t TB, st Store, ds string) {
	vs := versions(3)
	pinned := flip(vs[0], "", 5, 100)
	pinned.Pin = true
	_, err := st.FlipPointer(bg, ds, pinned)
	want(t, "a pinning flip", err, nil)
	f := flip(vs[1], "not-current", 4, 50) // fenced, pinned, behind and expecting another
	_, err = st.FlipPointer(bg, ds, f)
	want(t, "a flip refused for every reason", err, snapshot.ErrFenced)
	f.Fence = 5
	_, err = st.FlipPointer(bg, ds, f)
	want(t, "a flip pinned, behind and expecting another", err, snapshot.ErrPinned)
	f.Rollback = true // a rollback may move a pinned pointer back in source position
	_, err = st.FlipPointer(bg, ds, f)
	want(t, "a rollback expecting another", err, snapshot.ErrConflict)
	unpin := flip(vs[1], vs[0], 5, 100)
	unpin.Rollback = true
	_, err = st.FlipPointer(bg, ds, unpin)
	want(t, "a rollback that unpins", err, nil)
	_, err = st.FlipPointer(bg, ds, flip(vs[2], "not-current", 5, 50))
	want(t, "a flip behind and expecting another", err, snapshot.ErrSourceBehind)
	current(t, st, ds, vs[1], 5)
}

func flipIsFenced(t TB, st Store, ds string) {
	vs := versions(4)
	_, err := st.FlipPointer(bg, ds, flip(vs[0], "", 5, 1))
	want(t, "flip with token 5", err, nil)
	_, err = st.FlipPointer(bg, ds, flip(vs[1], vs[0], 4, 2))
	want(t, "flip with the older token 4", err, snapshot.ErrFenced)
	current(t, st, ds, vs[0], 5)
	_, err = st.FlipPointer(bg, ds, flip(vs[2], vs[0], 5, 3))
	want(t, "flip with the same token", err, nil)
	_, err = st.FlipPointer(bg, ds, flip(vs[3], vs[2], 9, 4))
	want(t, "flip with a newer token", err, nil)
	p := current(t, st, ds, vs[3], 9)
	if p.Previous != vs[2] {
		t.Errorf("previous = %s; want %s", p.Previous, vs[2])
	}
}

func flipExpectsCurrent(t TB, st Store, ds string) {
	vs := versions(3)
	_, err := st.FlipPointer(bg, ds, flip(vs[0], "", 1, 1))
	want(t, "first flip", err, nil)
	_, err = st.FlipPointer(bg, ds, flip(vs[1], "", 1, 2))
	want(t, "flip expecting no version", err, snapshot.ErrConflict)
	_, err = st.FlipPointer(bg, ds, flip(vs[1], vs[2], 1, 2))
	want(t, "flip expecting another version", err, snapshot.ErrConflict)
	current(t, st, ds, vs[0], 1)
}

func flipPinned(t TB, st Store, ds string) {
	vs := versions(3)
	_, err := st.FlipPointer(bg, ds, flip(vs[1], "", 1, 5))
	want(t, "first flip", err, nil)
	back := flip(vs[0], vs[1], 1, 2)
	back.Rollback, back.Pin = true, true
	_, err = st.FlipPointer(bg, ds, back)
	want(t, "rollback to an older source, pinning", err, nil)
	if p := current(t, st, ds, vs[0], 1); !p.Pinned {
		t.Fatalf("pointer after a pinning rollback is not pinned")
	}
	_, err = st.FlipPointer(bg, ds, flip(vs[2], vs[0], 2, 9))
	want(t, "flip of a pinned dataset", err, snapshot.ErrPinned)
	unpin := flip(vs[2], vs[0], 2, 9)
	unpin.Rollback = true
	_, err = st.FlipPointer(bg, ds, unpin)
	want(t, "rollback flip of a pinned dataset", err, nil)
	if p := current(t, st, ds, vs[2], 2); p.Pinned {
		t.Errorf("pointer is pinned after a flip without Pin")
	}
}

func flipSourceBehind(t TB, st Store, ds string) {
	vs := versions(3)
	_, err := st.FlipPointer(bg, ds, flip(vs[0], "", 1, 100))
	want(t, "first flip", err, nil)
	_, err = st.FlipPointer(bg, ds, flip(vs[1], vs[0], 1, 99))
	want(t, "flip from an older source", err, snapshot.ErrSourceBehind)
	_, err = st.FlipPointer(bg, ds, flip(vs[1], vs[0], 1, 100))
	want(t, "flip from the same source position", err, nil)
	_, err = st.FlipPointer(bg, ds, flip(vs[2], vs[1], 1, ^uint64(0)))
	want(t, "flip from the greatest position", err, nil)
}

func flipTokenZero(t TB, st Store, ds string) {
	_, err := st.FlipPointer(bg, ds, flip(versions(1)[0], "", 0, 1))
	want(t, "flip with token 0", err, snapshot.ErrInvalid)
	_, err = st.ReadPointer(bg, ds)
	want(t, "read pointer after a refused flip", err, snapshot.ErrNoVersion)
}

func advanceFence(t TB, st Store, ds string) {
	vs := versions(2)
	want(t, "advance the fence of a new dataset", st.AdvanceFence(bg, ds, 4), nil)
	_, err := st.ReadPointer(bg, ds)
	want(t, "read pointer after a fence alone", err, snapshot.ErrNoVersion)
	_, err = st.FlipPointer(bg, ds, flip(vs[0], "", 3, 1))
	want(t, "flip under the advanced fence", err, snapshot.ErrFenced)
	_, err = st.FlipPointer(bg, ds, flip(vs[0], "", 4, 1))
	want(t, "flip with the fence's token", err, nil)
	want(t, "advance the fence", st.AdvanceFence(bg, ds, 8), nil)
	want(t, "lower the fence", st.AdvanceFence(bg, ds, 6), nil)
	p := current(t, st, ds, vs[0], 8)
	if p.Previous != "" {
		t.Errorf("previous = %q after fences alone", p.Previous)
	}
	_, err = st.FlipPointer(bg, ds, flip(vs[1], vs[0], 7, 2))
	want(t, "flip under a fence never lowered", err, snapshot.ErrFenced)
}

func coverage(t TB, st Store, ds string) {
	vs := versions(2)
	_, err := st.FlipPointer(bg, ds, flip(vs[0], "", 2, 10))
	want(t, "first flip", err, nil)
	c := snapshot.Coverage{Version: vs[0], PgSnapshot: "20", LSN: 20, Demand: 3, At: at.Add(time.Second)}
	want(t, "coverage with an older token", st.RecordCoverage(bg, ds, 1, c), snapshot.ErrFenced)
	fenced := ds + "-fenced" // a fence advanced before any flip
	want(t, "advance a fence before any flip", st.AdvanceFence(bg, fenced, 5), nil)
	want(t, "coverage under that fence", st.RecordCoverage(bg, fenced, 3, c), snapshot.ErrFenced)
	other := c
	other.Version = vs[1]
	want(t, "coverage of another version", st.RecordCoverage(bg, ds, 2, other), snapshot.ErrConflict)
	want(t, "coverage without a version", st.RecordCoverage(bg, ds, 2, snapshot.Coverage{LSN: 30}), snapshot.ErrInvalid)
	want(t, "coverage", st.RecordCoverage(bg, ds, 2, c), nil)
	want(t, "the same coverage again", st.RecordCoverage(bg, ds, 2, c), nil)
	older := c
	older.LSN = 15
	want(t, "an older coverage", st.RecordCoverage(bg, ds, 2, older), snapshot.ErrSourceBehind)
	p := current(t, st, ds, vs[0], 2)
	if p.Covered.LSN != 20 || p.Covered.PgSnapshot != "20" || p.Covered.Demand != 3 || p.Source.LSN != 10 {
		t.Errorf("pointer = %+v; want coverage at 20 over a source at 10", p)
	}
	pin := flip(vs[1], vs[0], 2, 30)
	pin.Rollback, pin.Pin = true, true
	_, err = st.FlipPointer(bg, ds, pin)
	want(t, "pinning rollback", err, nil)
	c.Version, c.LSN = vs[1], 40
	want(t, "coverage of a pinned dataset", st.RecordCoverage(bg, ds, 2, c), snapshot.ErrPinned)
}

func demand(t TB, st Store, ds string) {
	for i := uint64(1); i <= 3; i++ {
		n, err := st.RaiseDemand(bg, ds)
		if err != nil || n != i {
			t.Fatalf("raise demand = %d, %v; want %d", n, err, i)
		}
	}
	_, err := st.ReadPointer(bg, ds)
	want(t, "read pointer with demand alone", err, snapshot.ErrNoVersion)
	v := versions(1)[0]
	_, err = st.FlipPointer(bg, ds, flip(v, "", 1, 1))
	want(t, "first flip", err, nil)
	if p := current(t, st, ds, v, 1); p.Demand != 3 {
		t.Errorf("pointer demand = %d; want 3 (kept across a flip)", p.Demand)
	}
	if n, err := st.ReadDemand(bg, ds); err != nil || n != 3 {
		t.Errorf("read demand = %d, %v; want 3", n, err)
	}
}

func manifest(ds string, v snapshot.Version, st snapshot.State) snapshot.Manifest {
	return snapshot.Manifest{Dataset: ds, Version: v, State: st, Writer: "contract", StartedAt: at,
		Collections: map[string]snapshot.CollectionStats{"c": {Rows: 2, Layers: []snapshot.LayerRef{{Version: v, Docs: 2}}}}}
}

func manifests(t TB, st Store, ds string) {
	vs := versions(2)
	_, err := st.ReadManifest(bg, ds, vs[0])
	want(t, "read an unknown manifest", err, snapshot.ErrNotFound)
	m := manifest(ds, vs[0], snapshot.StateWriting)
	want(t, "create", st.CreateManifest(bg, m), nil)
	want(t, "create again", st.CreateManifest(bg, m), snapshot.ErrConflict)
	m.State = snapshot.StateSealed
	want(t, "update from the wrong state", st.UpdateManifest(bg, m, snapshot.StateSealed), snapshot.ErrConflict)
	want(t, "seal", st.UpdateManifest(bg, m, snapshot.StateWriting), nil)
	m.State = snapshot.StateWriting
	want(t, "a transition back", st.UpdateManifest(bg, m, snapshot.StateSealed), snapshot.ErrInvalid)
	m.State = snapshot.StateSealed
	want(t, "update an unknown manifest", st.UpdateManifest(bg, manifest(ds, vs[1], snapshot.StateSealed), snapshot.StateWriting), snapshot.ErrNotFound)
	got, err := st.ReadManifest(bg, ds, vs[0])
	if err != nil || got.State != snapshot.StateSealed || !got.StartedAt.Equal(at) || got.Collections["c"].Layers[0].Version != vs[0] {
		t.Errorf("read manifest = %+v, %v; want it sealed, as written", got, err)
	}
	if other, err := st.ManifestsInState(bg, ds+"-other", snapshot.StateSealed, time.Time{}); err != nil || len(other) != 0 {
		t.Errorf("manifests of another dataset = %d, %v; want none", len(other), err)
	}
}

func manifestOrder(t TB, st Store, ds string) {
	vs := versions(5)
	states := []snapshot.State{snapshot.StateRetired, snapshot.StateFailed, snapshot.StateRetired, snapshot.StatePublished, snapshot.StateWriting}
	for _, i := range []int{3, 0, 4, 2, 1} { // created out of order
		want(t, "create", st.CreateManifest(bg, manifest(ds, vs[i], states[i])), nil)
	}
	names := func(ms []snapshot.Manifest) []snapshot.Version {
		var out []snapshot.Version
		for _, m := range ms {
			out = append(out, m.Version)
		}
		return out
	}
	check := func(what string, got []snapshot.Manifest, err error, want ...snapshot.Version) {
		t.Helper()
		if err != nil || !slices.Equal(names(got), want) {
			t.Errorf("%s = %v, %v; want %v", what, names(got), err, want)
		}
	}
	all, err := st.ListManifests(bg, ds)
	check("list", all, err, vs...)
	recent, err := st.RecentManifests(bg, ds, "", 2)
	check("recent 2", recent, err, vs[4], vs[3])
	recent, err = st.RecentManifests(bg, ds, vs[3], 10)
	check("recent before the fourth", recent, err, vs[2], vs[1], vs[0])
	_, err = st.RecentManifests(bg, ds, "", 0)
	want(t, "recent with limit 0", err, snapshot.ErrInvalid)
	_, err = st.RecentManifests(bg, ds, "not-a-version", 1)
	want(t, "recent before a malformed version", err, snapshot.ErrInvalid)
	retired, err := st.ManifestsInState(bg, ds, snapshot.StateRetired, time.Time{})
	check("retired", retired, err, vs[0], vs[2])
	since, err := st.ManifestsInState(bg, ds, snapshot.StateRetired, vs[1].Time())
	check("retired since the second", since, err, vs[2])
}

func slots(t TB, st Store, ds string) {
	won, owner, err := st.ClaimTick(bg, ds, 7, "a")
	if err != nil || !won || owner != "a" {
		t.Fatalf("first claim = %v %q %v; want won by a", won, owner, err)
	}
	won, owner, err = st.ClaimTick(bg, ds, 7, "b")
	if err != nil || won || owner != "a" {
		t.Errorf("second claim = %v %q %v; want lost to a", won, owner, err)
	}
	won, owner, err = st.ClaimTick(bg, ds, 7, "a")
	if err != nil || !won || owner != "a" {
		t.Errorf("the owner's claim again = %v %q %v; want won", won, owner, err)
	}
	// Many claimers of one slot: exactly one wins, and all agree who.
	var mu sync.Mutex
	var winners, owners []string
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			holder := fmt.Sprint("h", i)
			won, owner, err := st.ClaimTick(bg, ds, 8, holder)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("claim by %s: %v", holder, err)
			}
			if won {
				winners = append(winners, holder)
			}
			owners = append(owners, owner)
		})
	}
	wg.Wait()
	distinct := map[string]bool{}
	for _, o := range owners {
		distinct[o] = true
	}
	if len(winners) != 1 || len(distinct) != 1 || !distinct[winners[0]] {
		t.Errorf("concurrent claims: winners %v, owners %v; want one winner all name", winners, owners)
	}
}

// leaseConfig is a short lease for holder: long enough that a busy machine's slow
// calls (each renewal gets RenewEvery) do not lose it while it is renewed.
func leaseConfig(holder string) store.LeaseConfig {
	return store.LeaseConfig{Holder: holder, Duration: 2 * time.Second, RenewEvery: 250 * time.Millisecond, RetryMax: 20 * time.Millisecond}
}

func newLease(t TB, st Store, name, holder string, cfg func(*store.LeaseConfig)) *store.Lease {
	t.Helper()
	c := leaseConfig(holder)
	if cfg != nil {
		cfg(&c)
	}
	l, err := st.NewLease(name, c)
	if err != nil {
		t.Fatalf("new lease: %v", err)
	}
	return l
}

func leaseTokens(t TB, st Store, name string) {
	var before []uint64
	a := newLease(t, st, name, "a", func(c *store.LeaseConfig) {
		c.BeforeAcquire = func(_ context.Context, token uint64) error { before = append(before, token); return nil }
	})
	b := newLease(t, st, name, "b", nil)
	h, err := a.TryAcquire(bg)
	if err != nil || h.Fence() != 1 {
		t.Fatalf("first acquire = %v; want token 1", err)
	}
	_, err = b.TryAcquire(bg)
	want(t, "acquire a held lease", err, snapshot.ErrHeld)
	want(t, "release", h.Release(bg), nil)
	hb, err := b.TryAcquire(bg)
	if err != nil || hb.Fence() != 2 {
		t.Fatalf("acquire after a release = %v; want token 2", err)
	}
	want(t, "release", hb.Release(bg), nil)
	ha, err := a.Acquire(bg)
	if err != nil || ha.Fence() != 3 {
		t.Fatalf("acquire again = %v; want token 3", err)
	}
	want(t, "release", ha.Release(bg), nil)
	if !slices.Equal(before, []uint64{1, 3}) {
		t.Errorf("BeforeAcquire saw tokens %v; want [1 3]", before)
	}
}

func leaseTakeover(t TB, st Store, name string) {
	// A holder that renews keeps the lease past its duration. Renewals come every
	// 250ms and the contender watches for twice the 3s duration, so only a pause of
	// renewals longer than 3s, not a busy machine's jitter, would let it take over.
	longer := func(c *store.LeaseConfig) { c.Duration = 3 * time.Second }
	renewing := newLease(t, st, name+"-renewed", "renewing", longer)
	hr, err := renewing.TryAcquire(bg)
	want(t, "acquire", err, nil)
	other := newLease(t, st, name+"-renewed", "other", longer)
	ctx, cancel := context.WithTimeout(bg, 6*time.Second)
	_, err = other.Acquire(ctx)
	cancel()
	want(t, "acquire while the holder renews", err, context.DeadlineExceeded)
	want(t, "release", hr.Release(bg), nil)

	// A holder that stops renewing (this one renews hourly) is taken over once its
	// state has stayed the same for the contender's duration, with a greater token.
	slow := newLease(t, st, name, "slow", func(c *store.LeaseConfig) { c.Duration, c.RenewEvery = time.Hour, 59*time.Minute })
	hs, err := slow.TryAcquire(bg)
	want(t, "acquire", err, nil)
	fast := newLease(t, st, name, "fast", nil)
	_, err = fast.TryAcquire(bg)
	want(t, "acquire a held lease", err, snapshot.ErrHeld)
	start := time.Now()
	ctx, cancel = context.WithTimeout(bg, time.Minute)
	defer cancel()
	hf, err := fast.Acquire(ctx)
	if err != nil || hf.Fence() != hs.Fence()+1 {
		t.Fatalf("takeover = %v; want token %d", err, hs.Fence()+1)
	}
	if waited := time.Since(start); waited < leaseConfig("").Duration/2 {
		t.Errorf("taken over after %s; want no sooner than the lease's duration after the first sighting", waited)
	}
	want(t, "release by the holder taken over", hs.Release(bg), snapshot.ErrLeaseLost)
	want(t, "release", hf.Release(bg), nil)
}

func leaseFencesFlips(t TB, st Store, name string) {
	ds := name
	vs := versions(2)
	old := newLease(t, st, name, "old", nil)
	ho, err := old.TryAcquire(bg)
	want(t, "acquire", err, nil)
	want(t, "release", ho.Release(bg), nil)
	next := newLease(t, st, name, "new", func(c *store.LeaseConfig) {
		c.BeforeAcquire = snapshot.RaiseFence(st, ds)
	})
	hn, err := next.TryAcquire(bg)
	want(t, "acquire", err, nil)
	defer hn.Release(bg)
	_, err = st.FlipPointer(bg, ds, flip(vs[0], "", ho.Fence(), 1))
	want(t, "flip by the deposed holder", err, snapshot.ErrFenced)
	_, err = st.FlipPointer(bg, ds, flip(vs[1], "", hn.Fence(), 1))
	want(t, "flip by the holder", err, nil)
}

func audit(t TB, st Store, ds string) {
	_, err := st.AuditAt(bg, ds, at)
	want(t, "audit of an empty trail", err, snapshot.ErrNotFound)
	vs := versions(3)
	for i, v := range vs {
		e := snapshot.AuditEntry{Dataset: ds, At: at.Add(time.Duration(i) * time.Minute), Action: snapshot.ActionFlip, To: v, Fence: uint64(i + 1), By: "contract"}
		want(t, "append", st.AppendAudit(bg, e), nil)
	}
	all, err := st.ListAudit(bg, ds, 0)
	if err != nil || len(all) != 3 || all[0].To != vs[2] || all[2].To != vs[0] || !all[2].At.Equal(at) {
		t.Fatalf("list audit = %+v, %v; want the three entries newest first", all, err)
	}
	two, err := st.ListAudit(bg, ds, 2)
	if err != nil || len(two) != 2 || two[0].To != vs[2] || two[1].To != vs[1] {
		t.Errorf("list audit, limit 2 = %+v, %v; want the newest two", two, err)
	}
	e, err := st.AuditAt(bg, ds, at.Add(90*time.Second))
	if err != nil || e.To != vs[1] {
		t.Errorf("audit at 90 s = %+v, %v; want the entry at 60 s", e, err)
	}
	e, err = st.AuditAt(bg, ds, at.Add(time.Minute))
	if err != nil || e.To != vs[1] {
		t.Errorf("audit at 60 s = %+v, %v; want the entry at 60 s", e, err)
	}
	_, err = st.AuditAt(bg, ds, at.Add(-time.Second))
	want(t, "audit before the trail begins", err, snapshot.ErrNotFound)
}

// baseRecords: a collection's record of its base beside the stream replaces the one
// before; records list by collection name, each dataset its own, and a record names
// its collection.
func baseRecords(t TB, st Store, ds string) {
	recs, err := st.ListBases(bg, ds)
	if err != nil || len(recs) != 0 {
		t.Fatalf("bases of a dataset without any = %+v, %v; want none", recs, err)
	}
	b := snapshot.BaseStatus{Collection: "users#1", From: versions(1)[0], Why: "keep-alive", State: "building",
		Rows: 10, Expected: 100, Bytes: 1000, Started: at, Updated: at.Add(time.Second), Writer: "contract"}
	want(t, "record", st.RecordBase(bg, ds, b), nil)
	want(t, "record another", st.RecordBase(bg, ds, snapshot.BaseStatus{Collection: "a", State: "taken"}), nil)
	want(t, "record in another dataset", st.RecordBase(bg, ds+"-other", snapshot.BaseStatus{Collection: "b", State: "built"}), nil)
	b.State, b.Rows = "built", 100
	want(t, "record again", st.RecordBase(bg, ds, b), nil)
	recs, err = st.ListBases(bg, ds)
	if err != nil || len(recs) != 2 || recs[0].Collection != "a" || recs[1].Collection != "users#1" ||
		recs[1].State != "built" || recs[1].Rows != 100 || !recs[1].Started.Equal(at) || recs[1].From != b.From {
		t.Errorf("bases = %+v, %v; want a, then users#1 built with 100 rows", recs, err)
	}
	err = st.RecordBase(bg, ds, snapshot.BaseStatus{State: "building"})
	want(t, "record without a collection", err, snapshot.ErrInvalid)
	pos := snapshot.Position{LSN: 42, PgSnapshot: "10:12:11", Definitions: map[string]string{"users#1": "id int8"}}
	b.State, b.Position, b.Through, b.ThroughRows = "building", &pos, "id 7", 7
	want(t, "record where a base stands", st.RecordBase(bg, ds, b), nil)
	recs, err = st.ListBases(bg, ds)
	if err != nil || len(recs) != 2 || recs[1].Position == nil || recs[1].Position.PgSnapshot != pos.PgSnapshot ||
		recs[1].Position.Definitions["users#1"] != "id int8" || recs[1].Through != "id 7" || recs[1].ThroughRows != 7 {
		t.Errorf("bases = %+v, %v; want users#1 standing at id 7, 7 rows, read at %+v", recs, err, pos)
	}
}

// flushAcknowledges: a writer's Flush returns once every row written so far can be
// read, however few they are, and the writer goes on.
func flushAcknowledges(t TB, st Store, ds string) {
	v := versions(1)[0]
	w := st.NewWriter(bg, ds, v)
	for _, id := range []string{"a", "b", "c"} {
		if err := w.Write(bg, "c", snapshot.Document{ID: id, Body: []byte(`{"id":"` + id + `"}`)}); err != nil {
			t.Fatalf("write %s: %v", id, err)
		}
	}
	want(t, "flush", w.Flush(bg), nil)
	docs, more, err := st.ScanSpan(bg, snapshot.ChainRef{Dataset: ds, Chain: []snapshot.Version{v}, Collection: "c"}, snapshot.Span{}, 10)
	if err != nil || more || len(docs) != 3 {
		t.Fatalf("after a flush, before close: %d documents (more %t), %v; want 3", len(docs), more, err)
	}
	if err := w.Write(bg, "c", snapshot.Document{ID: "d", Body: []byte(`{}`)}); err != nil {
		t.Fatalf("write after a flush: %v", err)
	}
	if counts, err := w.Close(bg); err != nil || counts["c"] != 4 {
		t.Errorf("close = %v, %v; want 4 written", counts, err)
	}
}

// write writes docs (id → body; "" for a tombstone) of collection c through w, a
// layer's writer, and closes it.
func write(t TB, w snapshot.DocumentWriter, c string, docs map[string]string) {
	t.Helper()
	for _, id := range slices.Sorted(mapsKeys(docs)) {
		if err := w.Write(bg, c, snapshot.Document{ID: id, Body: []byte(docs[id])}); err != nil {
			t.Fatalf("write %s: %v", id, err)
		}
	}
	counts, err := w.Close(bg)
	if err != nil || counts[c] != int64(len(docs)) {
		t.Fatalf("close = %v, %v; want %d written", counts, err, len(docs))
	}
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// chainOfTwo writes a base and a delta over it and returns the chain, newest first,
// and what reads through it must find.
func chainOfTwo(t TB, st Store, ds string) ([]snapshot.Version, map[string]string) {
	vs := versions(2)
	base := map[string]string{}
	for i := range 30 {
		base[fmt.Sprintf("id%02d", i)] = fmt.Sprintf(`{"n":%d}`, i)
	}
	base["a b/é\x01"] = `{"odd":true}` // ids escaped in row keys
	write(t, st.NewWriter(bg, ds, vs[0]), "c", base)
	write(t, st.NewWriter(bg, ds, vs[1]), "c", map[string]string{"id03": `{"n":"new"}`, "id04": "", "id05": "", "zz": `{"added":1}`, "never": ""})
	want := map[string]string{}
	for id, b := range base {
		want[id] = b
	}
	want["id03"], want["zz"] = `{"n":"new"}`, `{"added":1}`
	delete(want, "id04")
	delete(want, "id05")
	return []snapshot.Version{vs[1], vs[0]}, want
}

func chainReads(t TB, st Store, ds string) {
	chain, wantDocs := chainOfTwo(t, st, ds)
	body, err := st.GetDocument(bg, snapshot.ChainRef{Dataset: ds, Chain: chain, Collection: "c"}, "id03")
	if err != nil || string(body) != `{"n":"new"}` {
		t.Errorf("get id03 = %s, %v; want the delta's", body, err)
	}
	_, err = st.GetDocument(bg, snapshot.ChainRef{Dataset: ds, Chain: chain, Collection: "c"}, "id04")
	want(t, "get a deleted id", err, snapshot.ErrNotFound)
	_, err = st.GetDocument(bg, snapshot.ChainRef{Dataset: ds, Chain: chain[1:], Collection: "c"}, "missing")
	want(t, "get a missing id from one layer", err, snapshot.ErrNotFound)
	body, err = st.GetDocument(bg, snapshot.ChainRef{Dataset: ds, Chain: chain[1:], Collection: "c"}, "id04")
	if err != nil || string(body) != `{"n":4}` {
		t.Errorf("get id04 from the base alone = %s, %v", body, err)
	}
	got, err := st.GetDocuments(bg, snapshot.ChainRef{Dataset: ds, Chain: chain, Collection: "c"}, []string{"id01", "id03", "id04", "zz", "never", "missing", "a b/é\x01"})
	if err != nil || len(got) != 4 || string(got["id01"]) != `{"n":1}` || string(got["zz"]) != `{"added":1}` || string(got["a b/é\x01"]) != `{"odd":true}` {
		t.Errorf("get documents = %q, %v", got, err)
	}
	loc, err := st.LocateDocuments(bg, snapshot.ChainRef{Dataset: ds, Chain: chain, Collection: "c"}, []string{"id01", "id03", "id05"})
	if err != nil || len(loc) != 2 || loc["id01"].Layer != 1 || loc["id03"].Layer != 0 {
		t.Errorf("locate = %+v, %v; want id01 in layer 1, id03 in layer 0", loc, err)
	}
	var scanned []string
	err = st.ScanDocuments(bg, snapshot.ChainRef{Dataset: ds, Chain: chain, Collection: "c"}, func(d snapshot.Document) bool {
		if string(d.Body) != wantDocs[d.ID] {
			t.Errorf("scan: %s = %s; want %s", d.ID, d.Body, wantDocs[d.ID])
		}
		scanned = append(scanned, d.ID)
		return true
	})
	if ids := slices.Sorted(mapsKeys(wantDocs)); err != nil || !slices.Equal(scanned, ids) {
		t.Errorf("scan = %v, %v; want %v", scanned, err, ids)
	}
	n := 0
	err = st.ScanDocuments(bg, snapshot.ChainRef{Dataset: ds, Chain: chain, Collection: "c"}, func(snapshot.Document) bool { n++; return n < 3 })
	if err != nil || n != 3 {
		t.Errorf("a scan stopped after 3 saw %d, %v", n, err)
	}
	if got, err := st.GetDocuments(bg, snapshot.ChainRef{Dataset: ds, Chain: chain, Collection: "other"}, []string{"id01"}); err != nil || len(got) != 0 {
		t.Errorf("get from another collection = %q, %v; want nothing", got, err)
	}
}

func chainPages(t TB, st Store, ds string) {
	chain, wantDocs := chainOfTwo(t, st, ds)
	ids := slices.Sorted(mapsKeys(wantDocs))
	for _, limit := range []int{1, 4, 7, len(ids), len(ids) + 1} {
		var got []string
		after, more := "", true
		for more {
			page, m, err := st.ScanPage(bg, snapshot.ChainRef{Dataset: ds, Chain: chain, Collection: "c"}, after, limit)
			if err != nil || len(page) > limit || (m && len(page) == 0) {
				t.Fatalf("page after %q, limit %d = %d docs, more %v, %v", after, limit, len(page), m, err)
			}
			for _, d := range page {
				got = append(got, d.ID)
			}
			if len(page) > 0 {
				after = page[len(page)-1].ID
			}
			more = m
		}
		if !slices.Equal(got, ids) {
			t.Errorf("pages of %d = %v; want %v", limit, got, ids)
		}
	}
	spans := []snapshot.Span{
		{From: "id02", Inclusive: true, To: "id07"},
		{From: "id02", To: "id07"},
		{From: "id28"},
		{From: "id09", To: "id01"},
		{From: "", Inclusive: true, To: "id00"},
	}
	for _, sp := range spans {
		var wantIDs []string
		for _, id := range ids {
			if sp.Contains(id) && !sp.Empty() {
				wantIDs = append(wantIDs, id)
			}
		}
		page, more, err := st.ScanSpan(bg, snapshot.ChainRef{Dataset: ds, Chain: chain, Collection: "c"}, sp, 100)
		var got []string
		for _, d := range page {
			got = append(got, d.ID)
		}
		if err != nil || more || !slices.Equal(got, wantIDs) {
			t.Errorf("span %+v = %v, more %v, %v; want %v", sp, got, more, err, wantIDs)
		}
		if len(wantIDs) > 1 {
			page, more, err := st.ScanSpan(bg, snapshot.ChainRef{Dataset: ds, Chain: chain, Collection: "c"}, sp, 1)
			if err != nil || !more || len(page) != 1 || page[0].ID != wantIDs[0] {
				t.Errorf("span %+v, limit 1 = %v, more %v, %v; want %s and more", sp, page, more, err, wantIDs[0])
			}
		}
	}
	in := snapshot.ChainRef{Dataset: ds, Chain: chain, Collection: "c"}
	_, _, err := st.ScanSpan(bg, in, snapshot.Span{Inclusive: true}, -1)
	want(t, "a span scan with a negative limit", err, snapshot.ErrInvalid)
	_, _, err = st.ScanEntries(bg, in, snapshot.Span{Inclusive: true}, -1)
	want(t, "an entries scan with a negative limit", err, snapshot.ErrInvalid)
	for _, limit := range []int{store.MaxScanLimit + 1, math.MaxInt} {
		_, _, err = st.ScanSpan(bg, in, snapshot.Span{Inclusive: true}, limit)
		want(t, fmt.Sprintf("a span scan with limit %d", limit), err, snapshot.ErrInvalid)
		_, _, err = st.ScanEntries(bg, in, snapshot.Span{Inclusive: true}, limit)
		want(t, fmt.Sprintf("an entries scan with limit %d", limit), err, snapshot.ErrInvalid)
	}
}

// corruptIndexBlock: an index block that does not decode is an error naming it, not
// an entry.
func corruptIndexBlock(t TB, st Store, ds string) {
	v := versions(1)[0]
	coll := index.Collection("c", "by_n")
	var p index.Packer
	p.Add("e1")
	key, body, _ := p.Flush()
	w := st.NewWriter(bg, ds, v)
	if err := w.Write(bg, coll, snapshot.Document{ID: key, Body: append(slices.Clone(body), 0xff)}); err != nil {
		t.Fatalf("write block: %v", err)
	}
	if _, err := w.Close(bg); err != nil {
		t.Fatalf("close: %v", err)
	}
	in := snapshot.ChainRef{Dataset: ds, Chain: []snapshot.Version{v}, Collection: coll}
	_, _, err := st.ScanEntries(bg, in, snapshot.Span{Inclusive: true}, 10)
	if err == nil || !strings.Contains(err.Error(), "block") {
		t.Errorf("entries of a corrupt block: %v; want an error naming the block", err)
	}
	err = st.ScanIndex(bg, in, func(string) bool { return true })
	if err == nil || !strings.Contains(err.Error(), "block") {
		t.Errorf("scan of a corrupt block: %v; want an error naming the block", err)
	}
}

func indexEntries(t TB, st Store, ds string) {
	vs := versions(2)
	coll := index.Collection("c", "by_n")
	var entries []string
	for i := range 600 { // more than two blocks
		entries = append(entries, fmt.Sprintf("e%04d", i))
	}
	w := st.NewWriter(bg, ds, vs[0])
	var p index.Packer
	put := func(key string, body []byte, ok bool) {
		if ok {
			if err := w.Write(bg, coll, snapshot.Document{ID: key, Body: append([]byte{}, body...)}); err != nil {
				t.Fatalf("write block: %v", err)
			}
		}
	}
	for _, e := range entries {
		put(p.Add(e))
	}
	put(p.Flush())
	if _, err := w.Close(bg); err != nil {
		t.Fatalf("close: %v", err)
	}
	write(t, st.NewWriter(bg, ds, vs[1]), coll, map[string]string{"e0003": "", "e0300": "", "e0300x": string(index.EntryBody), "e9999": string(index.EntryBody)})
	chain := []snapshot.Version{vs[1], vs[0]}
	var wantEntries []string
	for _, e := range append(entries, "e0300x", "e9999") {
		if e != "e0003" && e != "e0300" {
			wantEntries = append(wantEntries, e)
		}
	}
	slices.Sort(wantEntries)
	var scanned []string
	err := st.ScanIndex(bg, snapshot.ChainRef{Dataset: ds, Chain: chain, Collection: coll}, func(e string) bool { scanned = append(scanned, e); return true })
	if err != nil || !slices.Equal(scanned, wantEntries) {
		t.Errorf("scan index = %d entries, %v; want %d", len(scanned), err, len(wantEntries))
	}
	sp := snapshot.Span{From: "e0002", Inclusive: true, To: "e0302"}
	page, more, err := st.ScanEntries(bg, snapshot.ChainRef{Dataset: ds, Chain: chain, Collection: coll}, sp, 1000)
	var got []string
	for _, d := range page {
		if string(d.Body) != string(index.EntryBody) {
			t.Errorf("entry %s body %q; want %q", d.ID, d.Body, index.EntryBody)
		}
		got = append(got, d.ID)
	}
	var wantSpan []string
	for _, e := range wantEntries {
		if sp.Contains(e) {
			wantSpan = append(wantSpan, e)
		}
	}
	if err != nil || more || !slices.Equal(got, wantSpan) {
		t.Errorf("entries in %+v = %d, more %v, %v; want %d", sp, len(got), more, err, len(wantSpan))
	}
	page, more, err = st.ScanEntries(bg, snapshot.ChainRef{Dataset: ds, Chain: chain, Collection: coll}, sp, 10)
	if err != nil || !more || len(page) != 10 || page[9].ID != wantSpan[9] {
		t.Errorf("10 entries in %+v = %d, more %v, %v", sp, len(page), more, err)
	}
	page, more, err = st.ScanEntries(bg, snapshot.ChainRef{Dataset: ds, Chain: nil, Collection: coll}, sp, 10)
	if err != nil || more || len(page) != 0 {
		t.Errorf("entries through no layer = %d, more %v, %v; want none", len(page), more, err)
	}
	none := snapshot.ChainRef{Dataset: ds, Collection: coll}
	_, err = st.GetDocument(bg, none, "e0001")
	want(t, "a document through no layer", err, snapshot.ErrNotFound)
	if got, err := st.GetDocuments(bg, none, []string{"e0001"}); err != nil || len(got) != 0 {
		t.Errorf("documents through no layer = %d, %v; want none", len(got), err)
	}
}

func runs(t TB, st Store, ds string) {
	vs := versions(2)
	w := st.NewWriter(bg, ds, vs[0])
	for i := range 5 {
		if err := w.WriteChunk(bg, "c", int64(i), []byte(fmt.Sprint("chunk", i))); err != nil {
			t.Fatalf("write chunk: %v", err)
		}
	}
	if err := w.Write(bg, "c", snapshot.Document{ID: "a", Body: []byte(`{}`)}); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := w.WriteLive(bg, "c", 42); err != nil {
		t.Fatalf("write live: %v", err)
	}
	counts, err := w.Close(bg)
	if err != nil || counts["c"] != 1 || w.ChunksWritten()["c"] != 5 || w.BytesWritten() == 0 {
		t.Fatalf("close = %v, %v; chunks %v, bytes %d", counts, err, w.ChunksWritten(), w.BytesWritten())
	}
	var chunks []string
	err = st.ScanRun(bg, ds, vs[0], "c", func(c []byte) bool { chunks = append(chunks, string(c)); return true })
	if err != nil || !slices.Equal(chunks, []string{"chunk0", "chunk1", "chunk2", "chunk3", "chunk4"}) {
		t.Errorf("scan run = %v, %v", chunks, err)
	}
	chunks = nil
	err = st.(interface {
		ScanRunFrom(ctx context.Context, ref snapshot.RunRef, from int64, fn func([]byte) bool) error
	}).ScanRunFrom(bg, snapshot.RunRef{Dataset: ds, Layer: vs[0], Collection: "c"}, 3, func(c []byte) bool { chunks = append(chunks, string(c)); return true })
	if err != nil || !slices.Equal(chunks, []string{"chunk3", "chunk4"}) {
		t.Errorf("scan run from 3 = %v, %v", chunks, err)
	}
	if n, ok, err := st.RecordedLive(bg, ds, vs[0], "c"); err != nil || !ok || n != 42 {
		t.Errorf("recorded live = %d %v %v; want 42", n, ok, err)
	}
	if _, ok, err := st.RecordedLive(bg, ds, vs[1], "c"); err != nil || ok {
		t.Errorf("recorded live of an unwritten layer = %v, %v; want none", ok, err)
	}
	if err := st.ScanRun(bg, ds, vs[1], "c", func([]byte) bool { t.Errorf("a chunk of no run"); return true }); err != nil {
		t.Errorf("scan an absent run: %v", err)
	}
	n, err := st.RefreshVersion(bg, ds, map[string][]snapshot.Version{"c": {vs[0]}})
	if err != nil || n != 1 {
		t.Errorf("refresh = %d, %v; want 1 document", n, err)
	}
	if n, ok, _ := st.RecordedLive(bg, ds, vs[0], "c"); !ok || n != 42 {
		t.Errorf("recorded live after a refresh = %d %v; want 42", n, ok)
	}
	if body, err := st.GetDocument(bg, snapshot.ChainRef{Dataset: ds, Chain: vs[:1], Collection: "c"}, "a"); err != nil || string(body) != `{}` {
		t.Errorf("document after a refresh = %s, %v", body, err)
	}
}

// flipUnder returns the case of a flip after a first one, made under fault: it returns
// wantErr, and the pointer then names the new version when the fault applied the
// flip, the first otherwise.
func flipUnder(fault memstore.Fault, what string, wantErr error) func(t TB, st Store, ds string) {
	return func(t TB, st Store, ds string) {
		vs := versions(2)
		_, err := st.FlipPointer(bg, ds, flip(vs[0], "", 1, 1))
		want(t, "first flip", err, nil)
		st.FailNext(memstore.OpFlip, fault)
		p, err := st.FlipPointer(bg, ds, flip(vs[1], vs[0], 1, 2))
		want(t, what, err, wantErr)
		if err == nil && p.Version != vs[1] {
			t.Errorf("flip returned %s; want %s", p.Version, vs[1])
		}
		if fault == memstore.Refused {
			current(t, st, ds, vs[0], 1)
		} else {
			current(t, st, ds, vs[1], 1)
		}
	}
}

func manifestReplyLost(t TB, st Store, ds string) {
	vs := versions(2)
	st.FailNext(memstore.OpCreateManifest, memstore.ReplyLost)
	want(t, "create whose reply was lost", st.CreateManifest(bg, manifest(ds, vs[0], snapshot.StateWriting)), nil)
	st.FailNext(memstore.OpCreateManifest, memstore.Refused)
	err := st.CreateManifest(bg, manifest(ds, vs[1], snapshot.StateWriting))
	if err == nil || errors.Is(err, snapshot.ErrConflict) {
		t.Errorf("create that did not apply = %v; want an error, not a conflict", err)
	}
	_, err = st.ReadManifest(bg, ds, vs[1])
	want(t, "read the manifest a failed create did not write", err, snapshot.ErrNotFound)
	m := manifest(ds, vs[0], snapshot.StateSealed)
	st.FailNext(memstore.OpUpdateManifest, memstore.ReplyLost)
	want(t, "update whose reply was lost", st.UpdateManifest(bg, m, snapshot.StateWriting), nil)
	if got, err := st.ReadManifest(bg, ds, vs[0]); err != nil || got.State != snapshot.StateSealed {
		t.Errorf("manifest = %s, %v; want sealed", got.State, err)
	}
}

func slotReplyLost(t TB, st Store, ds string) {
	st.FailNext(memstore.OpClaimTick, memstore.ReplyLost)
	won, owner, err := st.ClaimTick(bg, ds, 1, "a")
	if err != nil || !won || owner != "a" {
		t.Errorf("claim whose reply was lost = %v %q %v; want won", won, owner, err)
	}
	st.FailNext(memstore.OpClaimTick, memstore.Refused)
	won, owner, err = st.ClaimTick(bg, ds, 2, "a")
	if err == nil || won {
		t.Errorf("claim that failed = %v %q %v; want an error", won, owner, err)
	}
	won, owner, err = st.ClaimTick(bg, ds, 2, "b")
	if err != nil || !won || owner != "b" {
		t.Errorf("claim after a failed one = %v %q %v; want won by b", won, owner, err)
	}
}

func leaseReplyLost(t TB, st Store, name string) {
	a := newLease(t, st, name, "a", nil)
	st.FailNext(memstore.OpSwapLease, memstore.ReplyLost)
	h, err := a.TryAcquire(bg)
	if err != nil || h.Fence() != 1 {
		t.Fatalf("acquire whose reply was lost = %v; want token 1", err)
	}
	want(t, "release", h.Release(bg), nil)
	st.FailNext(memstore.OpSwapLease, memstore.Refused)
	if _, err := a.TryAcquire(bg); err == nil || errors.Is(err, snapshot.ErrHeld) {
		t.Fatalf("acquire that failed = %v; want an error that is not ErrHeld", err)
	}
	h, err = a.TryAcquire(bg)
	if err != nil || h.Fence() != 2 {
		t.Fatalf("acquire after a failed one = %v; want token 2", err)
	}
	want(t, "release", h.Release(bg), nil)
}

// manifestFailedCallDecided: a create or update whose call fails, applied or not, is
// decided by re-reading: the manifest as the call would leave it is a success,
// whoever wrote it; anything else is an unavailable store, never a conflict nor a
// missing manifest.
func manifestFailedCallDecided(t TB, st Store, ds string) {
	vs := versions(2)
	m := manifest(ds, vs[0], snapshot.StateWriting)
	want(t, "create", st.CreateManifest(bg, m), nil)
	for _, fault := range []memstore.Fault{memstore.Refused, memstore.ReplyLost} {
		st.FailNext(memstore.OpCreateManifest, fault)
		want(t, fmt.Sprintf("create again, fault %d (the manifest is as it would write it)", fault), st.CreateManifest(bg, m), nil)
	}
	other := m
	other.Writer = "another"
	st.FailNext(memstore.OpCreateManifest, memstore.ReplyLost)
	want(t, "create of another writer's manifest, its reply lost", st.CreateManifest(bg, other), snapshot.ErrUnavailable)
	want(t, "create again, no fault", st.CreateManifest(bg, m), snapshot.ErrConflict)

	m.State = snapshot.StateSealed
	want(t, "seal", st.UpdateManifest(bg, m, snapshot.StateWriting), nil)
	for _, fault := range []memstore.Fault{memstore.Refused, memstore.ReplyLost} {
		st.FailNext(memstore.OpUpdateManifest, fault)
		want(t, fmt.Sprintf("seal again, fault %d (it is sealed)", fault), st.UpdateManifest(bg, m, snapshot.StateWriting), nil)
	}
	st.FailNext(memstore.OpUpdateManifest, memstore.ReplyLost)
	want(t, "update of an unknown manifest, its reply lost", st.UpdateManifest(bg, manifest(ds, vs[1], snapshot.StateSealed), snapshot.StateWriting), snapshot.ErrUnavailable)
	m.State = snapshot.StatePublished
	st.FailNext(memstore.OpUpdateManifest, memstore.Refused)
	want(t, "publish, refused", st.UpdateManifest(bg, m, snapshot.StateSealed), snapshot.ErrUnavailable)
	if got, err := st.ReadManifest(bg, ds, vs[0]); err != nil || got.State != snapshot.StateSealed {
		t.Errorf("after a refused update, manifest = %s, %v; want still sealed", got.State, err)
	}
}

// slotFailedCallDecided: a claim whose call fails is decided by the claim a re-read
// finds, whoever made it.
func slotFailedCallDecided(t TB, st Store, ds string) {
	if won, _, err := st.ClaimTick(bg, ds, 1, "a"); err != nil || !won {
		t.Fatalf("claim = %v %v; want won", won, err)
	}
	st.FailNext(memstore.OpClaimTick, memstore.Refused)
	if won, owner, err := st.ClaimTick(bg, ds, 1, "b"); err != nil || won || owner != "a" {
		t.Errorf("b's claim of a's slot, refused = %v %q %v; want lost to a", won, owner, err)
	}
	st.FailNext(memstore.OpClaimTick, memstore.ReplyLost)
	if won, owner, err := st.ClaimTick(bg, ds, 1, "a"); err != nil || !won || owner != "a" {
		t.Errorf("a's claim of its own slot, its reply lost = %v %q %v; want won", won, owner, err)
	}
}

// rereadFaultEndsWithItsCall: a failing re-read fails that call's re-read alone; the
// reads after it are answered.
func rereadFaultEndsWithItsCall(t TB, st Store, ds string) {
	vs := versions(2)
	want(t, "create", st.CreateManifest(bg, manifest(ds, vs[0], snapshot.StateWriting)), nil)
	st.FailNext(memstore.OpUpdateManifest, memstore.ReplyLostAndRereadFails)
	want(t, "update of an unknown manifest, its reply and re-read lost", st.UpdateManifest(bg, manifest(ds, vs[1], snapshot.StateSealed), snapshot.StateWriting), snapshot.ErrUnavailable)
	if _, err := st.ReadManifest(bg, ds, vs[0]); err != nil {
		t.Errorf("a read after the failed update: %v", err)
	}
	if won, _, err := st.ClaimTick(bg, ds, 1, "a"); err != nil || !won {
		t.Fatalf("claim = %v %v; want won", won, err)
	}
	st.FailNext(memstore.OpClaimTick, memstore.ReplyLostAndRereadFails)
	if _, _, err := st.ClaimTick(bg, ds, 1, "b"); !errors.Is(err, snapshot.ErrUnavailable) {
		t.Errorf("a claim of a taken slot whose reply and re-read were lost = %v; want ErrUnavailable", err)
	}
	if won, owner, err := st.ClaimTick(bg, ds, 1, "b"); err != nil || won || owner != "a" {
		t.Errorf("the claim again = %v %q %v; want lost to a", won, owner, err)
	}
}

// malformedVersion: a version that is not one is refused, naming it, by every
// manifest operation; nothing is written.
func malformedVersion(t TB, st Store, ds string) {
	for _, v := range []snapshot.Version{"", "v1", "not-a-uuid-at-all-but-long-enough-000-1", snapshot.Version(uuid.NewString())} {
		m := manifest(ds, v, snapshot.StateWriting)
		errs := map[string]error{"create": st.CreateManifest(bg, m)}
		m.State = snapshot.StateSealed
		errs["update"] = st.UpdateManifest(bg, m, snapshot.StateWriting)
		_, errs["read"] = st.ReadManifest(bg, ds, v)
		if v != "" {
			_, errs["recent"] = st.RecentManifests(bg, ds, v, 1)
		}
		for op, err := range errs {
			if !errors.Is(err, snapshot.ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("%q", v)) {
				t.Errorf("%s of version %q = %v; want ErrInvalid naming it", op, v, err)
			}
		}
	}
	if all, err := st.ListManifests(bg, ds); err != nil || len(all) != 0 {
		t.Errorf("manifests after malformed versions = %d, %v; want none", len(all), err)
	}
}
