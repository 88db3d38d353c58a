package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/snapflip/snapflip/internal/memstore"
	"github.com/snapflip/snapflip/internal/storetest"
	"github.com/snapflip/snapflip/snapshot"
)

func TestPublishFlipsToACompleteVersion(t *testing.T) {
	r := newMemRig(t, 4)
	ctx := context.Background()
	res, err := r.pub.Publish(ctx, snapshot.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Manifest
	if m.State != snapshot.StatePublished || m.Collections["users"].Rows != 20 || m.Collections["orders"].Rows != 2 {
		t.Errorf("manifest = %+v; want published with 20 users and 2 orders", m)
	}
	if _, got := r.served(t); !sameContents(got, r.model()) {
		t.Errorf("the pointer's version holds %v; want %v", got, r.model())
	}
	if stored := r.manifest(t, m.Version); stored.State != snapshot.StatePublished || stored.Fence != 1 {
		t.Errorf("stored manifest = %+v; want published with token 1", stored)
	}
	if p := r.pointer(t); p.Version != m.Version || p.Fence != 1 || !cmp.Equal(p.Source, m.Source) {
		t.Errorf("pointer = %+v; want version %s, fence 1, source %+v", p, m.Version, m.Source)
	}

	// Unchanged source: nothing written.
	res2, err := r.pub.Publish(ctx, snapshot.PublishOptions{})
	if err != nil || !res2.NoOp {
		t.Fatalf("second publish = %+v, %v; want a no-op", res2, err)
	}
	if ms := r.manifests(t); len(ms) != 1 {
		t.Errorf("a publish of an unchanged source left %d manifests; want the first alone", len(ms))
	}

	// Changed source: a new version; the old one is retired but still readable.
	r.src.Put("users", "u01", `{"name":"renamed"}`)
	res3, err := r.pub.Publish(ctx, snapshot.PublishOptions{})
	if err != nil || res3.NoOp {
		t.Fatalf("third publish = %+v, %v", res3, err)
	}
	if p := r.pointer(t); res3.Previous != m.Version || p.Version != res3.Manifest.Version {
		t.Errorf("previous = %s, pointer = %s; want %s then %s", res3.Previous, p.Version, m.Version, res3.Manifest.Version)
	}
	if old := r.manifest(t, m.Version); old.State != snapshot.StateRetired {
		t.Errorf("replaced version is %s; want retired", old.State)
	}
	oldDoc, err := r.st.GetDocument(ctx, snapshot.ChainRef{Dataset: "ds", Chain: m.Chain("users"), Collection: "users"}, "u01")
	if err != nil || string(oldDoc) != `{"n":1}` {
		t.Errorf("old version's u01 = %s, %v; want the old body", oldDoc, err)
	}
	newDoc, err := r.st.GetDocument(ctx, snapshot.ChainRef{Dataset: "ds", Chain: res3.Manifest.Chain("users"), Collection: "users"}, "u01")
	if err != nil || string(newDoc) != `{"name":"renamed"}` {
		t.Errorf("new version's u01 = %s, %v; want the new body", newDoc, err)
	}
	if res3.Manifest.Collections["orders"].Digest != m.Collections["orders"].Digest {
		t.Error("unchanged collection's digest changed")
	}
	if res3.Manifest.Collections["users"].Digest == m.Collections["users"].Digest {
		t.Error("changed collection's digest did not change")
	}
}

// TestFailedSyncChangesNothingVisible: every way a sync can fail leaves the pointer,
// and the version it was writing is marked failed.
func TestFailedSyncChangesNothingVisible(t *testing.T) {
	tests := []struct {
		name string
		// breakIt makes the next sync fail, returning the context and options it runs
		// with.
		breakIt func(tb testing.TB, r *memRig) (context.Context, snapshot.PublishOptions)
		is      error
		want    string // in the error
	}{
		{name: "source fails in the second collection", is: snapshot.ErrSource, want: "orders",
			breakIt: func(_ testing.TB, r *memRig) (context.Context, snapshot.PublishOptions) {
				r.src.FailScans("orders", snapshot.ErrSource)
				return context.Background(), snapshot.PublishOptions{}
			}},
		{name: "oversized document", is: snapshot.ErrSource, want: "over the limit",
			breakIt: func(_ testing.TB, r *memRig) (context.Context, snapshot.PublishOptions) {
				r.src.Put("users", "big", `{"s":"`+strings.Repeat("x", 2_000_000)+`"}`)
				return context.Background(), snapshot.PublishOptions{}
			}},
		{name: "storage refuses a write", is: snapshot.ErrUnavailable, want: "write",
			breakIt: func(_ testing.TB, r *memRig) (context.Context, snapshot.PublishOptions) {
				r.st.FailNext(memstore.OpWrite, memstore.Refused)
				return context.Background(), snapshot.PublishOptions{}
			}},
		{name: "stale fencing token", is: snapshot.ErrFenced, want: "fenced",
			breakIt: func(tb testing.TB, r *memRig) (context.Context, snapshot.PublishOptions) {
				// A newer holder has raised the fence since this one took token 2.
				if err := r.st.AdvanceFence(context.Background(), "ds", 3); err != nil {
					tb.Fatal(err)
				}
				return context.Background(), snapshot.PublishOptions{Fence: 2}
			}},
		{name: "cancelled", is: context.Canceled, want: "canceled",
			breakIt: func(_ testing.TB, _ *memRig) (context.Context, snapshot.PublishOptions) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, snapshot.PublishOptions{}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newMemRig(t, 4)
			good, err := r.pub.Publish(context.Background(), snapshot.PublishOptions{})
			if err != nil {
				t.Fatal(err)
			}
			held := r.model()
			r.src.Put("users", "u05", `{"changed":true}`)
			ctx, opts := tt.breakIt(t, r)
			_, err = r.pub.Publish(ctx, opts)
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Publish = %v; want %v saying %q", err, tt.is, tt.want)
			}
			if m, got := r.served(t); m.Version != good.Manifest.Version || !sameContents(got, held) {
				t.Errorf("after a failed sync the pointer names %s holding %v; want %s as it was", m.Version, got, good.Manifest.Version)
			}
			if last := r.last(t); last.Version != good.Manifest.Version && last.State != snapshot.StateFailed {
				t.Errorf("failed sync's version %s is %s; want failed", last.Version, last.State)
			}
		})
	}
}

func TestPublishRefusesToGoBackInSource(t *testing.T) {
	r := newMemRig(t, 4)
	ctx := context.Background()
	// Open a snapshot first, then publish a newer one through another publisher; the
	// older snapshot must then not be flipped to.
	first, err := r.pub.Publish(ctx, snapshot.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slow := &slowSource{Source: r.src, opened: make(chan struct{}), release: make(chan struct{})}
	slowPub := newMemPublisher(r.st, slow, "writer-2", 4)
	r.src.Put("users", "u01", `{"name":"a"}`)
	errc := make(chan error, 1)
	go func() {
		_, err := slowPub.Publish(ctx, snapshot.PublishOptions{Fence: 100})
		errc <- err
	}()
	<-slow.opened
	r.src.Put("users", "u01", `{"name":"b"}`)
	newer, err := r.pub.Publish(ctx, snapshot.PublishOptions{Fence: 50})
	close(slow.release)
	if err != nil {
		t.Fatal(err)
	}
	err = <-errc
	if !errors.Is(err, snapshot.ErrSourceBehind) && !errors.Is(err, snapshot.ErrConflict) {
		t.Fatalf("publishing an older snapshot = %v; want ErrSourceBehind or ErrConflict", err)
	}
	if m, got := r.served(t); m.Version != newer.Manifest.Version || !sameContents(got, r.model()) {
		t.Errorf("pointer = %s holding %v; want the newer %s holding %v (first was %s)",
			m.Version, got, newer.Manifest.Version, r.model(), first.Manifest.Version)
	}
}

// slowSource holds its snapshot open until released, so a newer one can overtake it.
type slowSource struct {
	snapshot.Source
	opened, release chan struct{}
}

func (s *slowSource) Open(ctx context.Context) (snapshot.SourceSnapshot, error) {
	snap, err := s.Source.Open(ctx)
	if err != nil {
		return nil, err
	}
	// The snapshot is taken: whatever changes from now on, it does not see.
	close(s.opened)
	<-s.release
	return snap, nil
}

func TestPublishManyCollectionsAndRows(t *testing.T) {
	var names []string
	for i := range 5 {
		names = append(names, fmt.Sprintf("c%d", i))
	}
	src := memstore.NewSource(names...)
	for i, c := range names {
		for n := range 1000 * (i + 1) {
			src.Put(c, fmt.Sprint(n+1), fmt.Sprintf(`{"h":"%x"}`, n+1))
		}
	}
	r := newMemRigOn(src, 4)
	res, err := r.pub.Publish(context.Background(), snapshot.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range names {
		c := res.Manifest.Collections[name]
		if c.Rows != int64(1000*(i+1)) || c.Written != c.Rows {
			t.Errorf("%s = %+v; want %d rows read and written", name, c, 1000*(i+1))
		}
	}
	if _, got := r.served(t); !sameContents(got, r.model()) {
		t.Error("the pointer's version does not hold what the source holds")
	}
}

// TestTickerFailsAbandonedVersions: a version left writing under an older lease token
// is marked failed by the next holder's tick, which then publishes under its own token.
func TestTickerFailsAbandonedVersions(t *testing.T) {
	r := newMemRig(t, 4)
	ctx := context.Background()
	abandoned := snapshot.Manifest{Dataset: "ds", Version: r.pub.Versions.Next(), State: snapshot.StateWriting, Fence: 0, Writer: "dead"}
	if err := r.st.CreateManifest(ctx, abandoned); err != nil {
		t.Fatal(err)
	}
	res, err := r.ticker(t, "me").Tick(ctx, 12345, snapshot.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Claimed || res.Fence != 1 || res.Publish.Manifest.Tick != 12345 || res.Publish.Manifest.Fence != 1 {
		t.Errorf("tick = %+v; want slot 12345 claimed and published under token 1", res)
	}
	if got := r.manifest(t, abandoned.Version); got.State != snapshot.StateFailed || !strings.Contains(got.Reason, "abandoned") {
		t.Errorf("abandoned version = %s %q; want failed as abandoned", got.State, got.Reason)
	}
	// A second replica's tick for the same slot does nothing.
	res2, err := r.ticker(t, "other").Tick(ctx, 12345, snapshot.PublishOptions{})
	if err != nil || res2.Claimed || res2.Owner != "me" {
		t.Errorf("second tick of the slot = %+v, %v; want not claimed, owner me", res2, err)
	}
}

// A replica looks for abandoned versions in its first cycle and then once every
// AbandonCheckEvery, not in every cycle; its first look reads every version still
// writing, later ones only those made since AbandonLookback before the last look.
func TestAbandonedVersionsAreLookedForOnceAMinute(t *testing.T) {
	r := newMemRig(t, 4)
	ctx := context.Background()
	now := time.Now()
	r.pub.Now = func() time.Time { return now }
	tk := r.ticker(t, "me")
	abandon := func() snapshot.Version {
		t.Helper()
		m := snapshot.Manifest{Dataset: "ds", Version: r.pub.Versions.Next(), State: snapshot.StateWriting, Fence: 0, Writer: "dead"}
		if err := r.st.CreateManifest(ctx, m); err != nil {
			t.Fatal(err)
		}
		return m.Version
	}
	state := func(v snapshot.Version) snapshot.State {
		t.Helper()
		return r.manifest(t, v).State
	}
	cycle := func() {
		t.Helper()
		if _, _, err := tk.PublishLeased(ctx, snapshot.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	first := abandon()
	cycle()
	if got := state(first); got != snapshot.StateFailed {
		t.Errorf("after the first cycle the abandoned version is %s; want failed", got)
	}
	second := abandon()
	now = now.Add(snapshot.AbandonCheckEvery - time.Second)
	cycle()
	if got := state(second); got != snapshot.StateWriting {
		t.Errorf("a cycle within %s of the last look marked the version %s; want it left writing", snapshot.AbandonCheckEvery, got)
	}
	// A version made, by its writer's clock, long before the last look.
	made := now.Add(-snapshot.AbandonLookback - time.Minute)
	old := snapshot.Manifest{Dataset: "ds", Version: snapshot.NewVersionGen(uuid.New(), func() time.Time { return made }).Next(),
		State: snapshot.StateWriting, Fence: 0, Writer: "dead"}
	if err := r.st.CreateManifest(ctx, old); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	cycle()
	if got := state(second); got != snapshot.StateFailed {
		t.Errorf("a cycle %s after the last look left the abandoned version %s; want failed", snapshot.AbandonCheckEvery, got)
	}
	if got := state(old.Version); got != snapshot.StateWriting {
		t.Errorf("a later look marked a version made %s before the last one %s; want it left to the next first look", snapshot.AbandonLookback, got)
	}
	// Another replica's (or a restarted one's) first look reads them all.
	tk = &snapshot.Ticker{Publisher: r.pub, Lease: tk.Lease, Ticks: r.st, Holder: "me"}
	cycle()
	if got := state(old.Version); got != snapshot.StateFailed {
		t.Errorf("a replica's first look left the old abandoned version %s; want failed", got)
	}
}

func TestValidationGatesRefuseAndLeaveThePointer(t *testing.T) {
	tests := []struct {
		name    string
		gates   map[string]snapshot.Gate
		breakIt func(src *memstore.Source)
		want    string
	}{
		{"shrink over half", nil, func(src *memstore.Source) {
			for id := range src.Documents("users") {
				if id != "u01" {
					src.Delete("users", id)
				}
			}
		}, "shrank from 20 to 1"},
		{"emptied", map[string]snapshot.Gate{"orders": {}}, func(src *memstore.Source) {
			for id := range src.Documents("orders") {
				src.Delete("orders", id)
			}
		}, "orders is empty"},
		{"under minimum", map[string]snapshot.Gate{"users": {MinRows: 60}}, func(src *memstore.Source) {
			src.Put("users", "u20", `{"n":20}`)
		}, "under its minimum of 60"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newMemRig(t, 4)
			ctx := context.Background()
			good, err := r.pub.Publish(ctx, snapshot.PublishOptions{Force: true})
			if err != nil {
				t.Fatal(err)
			}
			held := r.model()
			r.pub.Gates = tt.gates
			tt.breakIt(r.src)
			_, err = r.pub.Publish(ctx, snapshot.PublishOptions{})
			if !errors.Is(err, snapshot.ErrRefused) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Publish = %v; want ErrRefused saying %q", err, tt.want)
			}
			if m, got := r.served(t); m.Version != good.Manifest.Version || !sameContents(got, held) {
				t.Errorf("pointer moved to %s after a refusal", m.Version)
			}
			if last := r.last(t); last.State != snapshot.StateFailed || !strings.Contains(last.Reason, "refused") {
				t.Errorf("refused version is %s (%q); want failed, refused", last.State, last.Reason)
			}
			// --force overrides the gate for one run.
			forced, err := r.pub.Publish(ctx, snapshot.PublishOptions{Force: true})
			if err != nil || r.pointer(t).Version != forced.Manifest.Version {
				t.Errorf("forced publish = %v; want it to publish", err)
			}
		})
	}
}

func TestPublishWhilePinnedIsRefusedEarly(t *testing.T) {
	r := newMemRig(t, 4)
	ctx := context.Background()
	good, err := r.pub.Publish(ctx, snapshot.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := r.pointer(t)
	if _, err := r.st.FlipPointer(ctx, "ds", snapshot.Flip{Version: p.Version, Expected: p.Version, Fence: p.Fence + 1,
		Source: p.Source, Rollback: true, Pin: true, Reason: "test pin", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	before := r.manifests(t)
	r.src.Put("users", "u01", `{"name":"z"}`)
	_, err = r.pub.Publish(ctx, snapshot.PublishOptions{})
	if !errors.Is(err, snapshot.ErrPinned) || !strings.Contains(err.Error(), "test pin") {
		t.Errorf("Publish while pinned = %v; want ErrPinned with the reason", err)
	}
	if after := r.manifests(t); len(after) != len(before) || r.pointer(t).Version != good.Manifest.Version {
		t.Errorf("a pinned publish wrote %d manifests or moved the pointer", len(after)-len(before))
	}
}

// TestPublishPartitioned: a collection read in parts, in parallel, is published with
// the rows, digest and bytes of the same collection read whole.
func TestPublishPartitioned(t *testing.T) {
	src := memstore.NewSource("big")
	for n := range 2000 {
		src.Put("big", fmt.Sprint(n+1), fmt.Sprintf(`{"h":"%x"}`, n+1))
	}
	r := newMemRigOn(src, 4)
	parted := &partitionedSource{Source: src, parts: 3}
	r.pub.Source, r.pub.Incremental = parted, false
	res, err := r.pub.Publish(context.Background(), snapshot.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := parted.scans.Load(); got != 3 {
		t.Fatalf("the collection was read in %d parts; want 3", got)
	}
	if _, got := r.served(t); !sameContents(got, r.model()) {
		t.Error("the version read in parts does not hold what the source holds")
	}
	whole := newMemPublisher(r.st, src, "writer-2", 4)
	whole.Incremental = false
	res2, err := whole.Publish(context.Background(), snapshot.PublishOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	a, b := res.Manifest.Collections["big"], res2.Manifest.Collections["big"]
	if a.Rows != 2000 || a.Digest != b.Digest || a.Bytes != b.Bytes {
		t.Errorf("partitioned read %+v; whole read %+v; want the same rows and digest", a, b)
	}
}

// partitionedSource reads every collection in parts: part p of n holds the documents
// at positions p, p+n, p+2n… of the collection's id order.
type partitionedSource struct {
	*memstore.Source
	parts int
	scans atomic.Int64 // parts read
}

func (s *partitionedSource) Open(ctx context.Context) (snapshot.SourceSnapshot, error) {
	snap, err := s.Source.Open(ctx)
	if err != nil {
		return nil, err
	}
	return partitionedSnapshot{SourceSnapshot: snap, src: s}, nil
}

// partitionedSnapshot is a partitionedSource's snapshot. It reads whole only through
// Scan: it cannot leave out unchanged rows, so every version is a full copy.
type partitionedSnapshot struct {
	snapshot.SourceSnapshot
	src *partitionedSource
}

func (s partitionedSnapshot) Partitions(string) int     { return s.src.parts }
func (s partitionedSnapshot) Rows(string) (int64, bool) { return 0, false }

func (s partitionedSnapshot) ScanPartition(ctx context.Context, collection string, part, parts int, fn func(snapshot.Document) error) error {
	s.src.scans.Add(1)
	n := 0
	return s.Scan(ctx, collection, func(d snapshot.Document) error {
		mine := n%parts == part
		n++
		if !mine {
			return nil
		}
		return fn(d)
	})
}

// TestFlipWithUnknownOutcome: when a flip's outcome is unknown, the publish fails but
// its version is left sealed, not marked failed — the pointer may name it, and a
// version the pointer names must stay servable. Whether the flip applied or not, the
// next publish sees which and goes on: it marks an applied one published (then
// retires it on its own flip).
func TestFlipWithUnknownOutcome(t *testing.T) {
	// Refused: the flip never applied. ReplyLostAndRereadFails: it applied, and
	// neither its reply nor the re-read that would show it came back.
	for _, fault := range []memstore.Fault{memstore.Refused, memstore.ReplyLostAndRereadFails} {
		applied := fault == memstore.ReplyLostAndRereadFails
		t.Run(fmt.Sprint("applied=", applied), func(t *testing.T) {
			r := newMemRig(t, 4)
			ctx := context.Background()
			first, err := r.pub.Publish(ctx, snapshot.PublishOptions{})
			if err != nil {
				t.Fatal(err)
			}
			r.src.Put("users", "u01", `{"name":"second"}`)
			r.st.FailNext(memstore.OpFlip, fault)
			_, err = r.pub.Publish(ctx, snapshot.PublishOptions{})
			if !errors.Is(err, snapshot.ErrOutcomeUnknown) {
				t.Fatalf("publish with an unknown flip outcome = %v; want ErrOutcomeUnknown", err)
			}
			second := r.last(t)
			if second.State != snapshot.StateSealed {
				t.Fatalf("version of the unknown flip is %s; want sealed (servable)", second.State)
			}
			want := first.Manifest.Version
			if applied {
				want = second.Version
			}
			if p := r.pointer(t); p.Version != want {
				t.Fatalf("pointer = %s; want %s", p.Version, want)
			}

			r.src.Put("users", "u01", `{"name":"third"}`)
			third, err := r.pub.Publish(ctx, snapshot.PublishOptions{})
			if err != nil || third.NoOp || third.Previous != want {
				t.Fatalf("next publish = %+v, %v; want a new version replacing %s", third, err, want)
			}
			if _, got := r.served(t); !sameContents(got, r.model()) {
				t.Errorf("the pointer's version holds %v; want %v", got, r.model())
			}
			wantState := snapshot.StateSealed // never current: left to expire
			if applied {
				wantState = snapshot.StateRetired // confirmed published, then replaced
			}
			if after := r.manifest(t, second.Version); after.State != wantState {
				t.Errorf("version of the unknown flip ends %s; want %s", after.State, wantState)
			}
		})
	}
}

// TestTickReadsTheCurrentStateOnce: a scheduled tick's keep-alive check and publish
// share one read of the pointer and the current manifest.
func TestTickReadsTheCurrentStateOnce(t *testing.T) {
	r := newMemRig(t, 4)
	ctx := context.Background()
	r.pub.TTL = time.Hour
	if _, err := r.pub.Publish(ctx, snapshot.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	tk := r.ticker(t, "me")
	c := storetest.NewCounting(r.st)
	r.pub.Store = c
	res, _, err := tk.PublishLeased(ctx, snapshot.PublishOptions{})
	if err != nil || !res.NoOp {
		t.Fatalf("publish of an unchanged source = %+v, %v; want a no-op", res, err)
	}
	if p, m := c.Pointers(), c.Manifests(); p != 1 || m != 1 {
		t.Errorf("a tick read the pointer %d times and manifests %d times; want once each", p, m)
	}
}
