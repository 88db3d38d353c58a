package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

func TestPublishFlipsToACompleteVersion(t *testing.T) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	ctx := context.Background()
	res, err := r.Pub.Publish(ctx, snapshot.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Manifest
	if m.State != snapshot.StatePublished || m.Collections["users"].Rows != 50 || m.Collections["orders"].Rows != 120 {
		t.Errorf("manifest = %+v; want published with 50 users and 120 orders", m)
	}
	stored, err := r.Store.ReadManifest(ctx, "ds", m.Version)
	if err != nil || stored.State != snapshot.StatePublished || stored.Token != 1 {
		t.Errorf("stored manifest = %+v, %v; want published with token 1", stored, err)
	}
	if p := r.Pointer(t); p.Version != m.Version || p.Fence != 1 || !cmp.Equal(p.Source, m.Source) {
		t.Errorf("pointer = %+v; want version %s, fence 1, source %+v", p, m.Version, m.Source)
	}

	// Unchanged source: nothing written.
	res2, err := r.Pub.Publish(ctx, snapshot.PublishOptions{})
	if err != nil || !res2.NoOp {
		t.Fatalf("second publish = %+v, %v; want a no-op", res2, err)
	}

	// Changed source: a new version; the old one is retired but still readable.
	testenv.Exec(t, r.DSN, `UPDATE users SET name = 'renamed' WHERE id = 'u1'`)
	res3, err := r.Pub.Publish(ctx, snapshot.PublishOptions{})
	if err != nil || res3.NoOp {
		t.Fatalf("third publish = %+v, %v", res3, err)
	}
	if res3.Previous != m.Version || r.Pointer(t).Version != res3.Manifest.Version {
		t.Errorf("previous = %s, pointer = %s; want %s then %s", res3.Previous, r.Pointer(t).Version, m.Version, res3.Manifest.Version)
	}
	old, _ := r.Store.ReadManifest(ctx, "ds", m.Version)
	if old.State != snapshot.StateRetired {
		t.Errorf("replaced version is %s; want retired", old.State)
	}
	oldDoc, err := r.Store.GetDocument(ctx, snapshot.ChainRef{Dataset: "ds", Chain: m.Chain("users"), Collection: "users"}, "u1")
	if err != nil || !strings.Contains(string(oldDoc), `"name 1"`) {
		t.Errorf("old version's u1 = %s, %v; want the old name", oldDoc, err)
	}
	newDoc, err := r.Store.GetDocument(ctx, snapshot.ChainRef{Dataset: "ds", Chain: res3.Manifest.Chain("users"), Collection: "users"}, "u1")
	if err != nil || !strings.Contains(string(newDoc), `"renamed"`) {
		t.Errorf("new version's u1 = %s, %v; want the new name", newDoc, err)
	}
	if res3.Manifest.Collections["orders"].Digest != m.Collections["orders"].Digest {
		t.Error("unchanged collection's digest changed")
	}
	if res3.Manifest.Collections["users"].Digest == m.Collections["users"].Digest {
		t.Error("changed collection's digest did not change")
	}
}

// TestFailedSyncChangesNothingVisible: every way a sync can fail leaves the pointer.
func TestFailedSyncChangesNothingVisible(t *testing.T) {
	tests := []struct {
		name   string
		break_ string // SQL that makes the next sync fail
		opts   func(*rig.Rig) snapshot.PublishOptions
		ctx    func() (context.Context, context.CancelFunc)
		want   string
	}{
		{name: "duplicate key in the second collection", break_: `INSERT INTO orders VALUES (7, 'u1')`, want: `duplicate key "7"`},
		{name: "NULL key", break_: `INSERT INTO orders VALUES (NULL, 'u1')`, want: "NULL key"},
		{name: "oversized document", break_: `INSERT INTO users VALUES ('big', repeat('x', 2000000))`, want: "over the limit"},
		{name: "table dropped", break_: `DROP TABLE orders`, want: "orders"},
		{name: "stale fencing token", break_: `UPDATE users SET name = 'x'`,
			opts: func(r *rig.Rig) snapshot.PublishOptions {
				// A newer holder has raised the fence since this one took token 2.
				if err := r.Store.AdvanceFence(context.Background(), "ds", 3); err != nil {
					t.Fatal(err)
				}
				return snapshot.PublishOptions{Token: 2}
			}, want: "fenced"},
		{name: "cancelled", break_: `UPDATE users SET name = 'y'`,
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, cancel
			}, want: "canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
			good, err := r.Pub.Publish(context.Background(), snapshot.PublishOptions{})
			if err != nil {
				t.Fatal(err)
			}
			testenv.Exec(t, r.DSN, tt.break_)
			ctx := context.Background()
			if tt.ctx != nil {
				var cancel context.CancelFunc
				ctx, cancel = tt.ctx()
				defer cancel()
			}
			var opts snapshot.PublishOptions
			if tt.opts != nil {
				opts = tt.opts(r)
			}
			_, err = r.Pub.Publish(ctx, opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Publish = %v; want an error saying %q", err, tt.want)
			}
			if p := r.Pointer(t); p.Version != good.Manifest.Version {
				t.Errorf("pointer moved to %s after a failed sync; want %s", p.Version, good.Manifest.Version)
			}
			if last := r.LastManifest(t); last.Version != good.Manifest.Version && last.State != snapshot.StateFailed {
				t.Errorf("failed sync's version %s is %s; want failed", last.Version, last.State)
			}
		})
	}
}

func TestPublishRefusesToGoBackInSource(t *testing.T) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	ctx := context.Background()
	// Open a snapshot first, then publish a newer one through another publisher; the
	// older snapshot must then not be flipped to.
	first, err := r.Pub.Publish(ctx, snapshot.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slow := &slowSource{Source: r.Pub.Source, opened: make(chan struct{}), release: make(chan struct{})}
	slowPub := *r.Pub
	slowPub.Source = slow
	slowPub.Versions = snapshot.NewVersionGen(uuid.New(), nil)
	testenv.Exec(t, r.DSN, `UPDATE users SET name = 'a'`)
	errc := make(chan error, 1)
	go func() {
		_, err := slowPub.Publish(ctx, snapshot.PublishOptions{Token: 100})
		errc <- err
	}()
	<-slow.opened
	testenv.Exec(t, r.DSN, `UPDATE users SET name = 'b'`)
	newer, err := r.Pub.Publish(ctx, snapshot.PublishOptions{Token: 50})
	if err != nil {
		t.Fatal(err)
	}
	close(slow.release)
	err = <-errc
	if !errors.Is(err, snapshot.ErrSourceBehind) && !errors.Is(err, snapshot.ErrConflict) {
		t.Fatalf("publishing an older snapshot = %v; want ErrSourceBehind or ErrConflict", err)
	}
	if p := r.Pointer(t); p.Version != newer.Manifest.Version {
		t.Errorf("pointer = %s; want the newer %s (first was %s)", p.Version, newer.Manifest.Version, first.Manifest.Version)
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
	// Read one collection inside the snapshot so it is taken now.
	close(s.opened)
	<-s.release
	return snap, nil
}

func TestPublishManyCollectionsAndRows(t *testing.T) {
	var cols []pgsource.Collection
	var schema []string
	for i := range 5 {
		name := fmt.Sprintf("c%d", i)
		cols = append(cols, pgsource.Collection{Name: name, Query: fmt.Sprintf("SELECT g AS id, md5(g::text) AS h FROM generate_series(1, %d) g", 1000*(i+1)), Key: "id"})
	}
	r := rig.New(t, cols, schema...)
	res, err := r.Pub.Publish(context.Background(), snapshot.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		c := res.Manifest.Collections[fmt.Sprintf("c%d", i)]
		if c.Rows != int64(1000*(i+1)) || c.Written != c.Rows {
			t.Errorf("c%d = %+v; want %d rows read and written", i, c, 1000*(i+1))
		}
	}
}

// TestTickerFailsAbandonedVersions: a version left writing under an older lease token
// is marked failed by the next holder's tick, which then publishes under its own token.
func TestTickerFailsAbandonedVersions(t *testing.T) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	ctx := context.Background()
	abandoned := snapshot.Manifest{Dataset: "ds", Version: r.Pub.Versions.Next(), State: snapshot.StateWriting, Token: 0, Writer: "dead"}
	if err := r.Store.CreateManifest(ctx, abandoned); err != nil {
		t.Fatal(err)
	}
	lease, err := r.Store.NewLease("publish/ds", store.LeaseConfig{Holder: "me"})
	if err != nil {
		t.Fatal(err)
	}
	tk := &snapshot.Ticker{Publisher: r.Pub, Lease: lease, Slots: r.Store, Holder: "me"}
	res, err := tk.Tick(ctx, 12345, snapshot.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Claimed || res.Token != 1 || res.Publish.Manifest.Slot != 12345 || res.Publish.Manifest.Token != 1 {
		t.Errorf("tick = %+v; want slot 12345 claimed and published under token 1", res)
	}
	got, err := r.Store.ReadManifest(ctx, "ds", abandoned.Version)
	if err != nil || got.State != snapshot.StateFailed || !strings.Contains(got.Reason, "abandoned") {
		t.Errorf("abandoned version = %s %q, %v; want failed as abandoned", got.State, got.Reason, err)
	}
	// A second replica's tick for the same slot does nothing.
	other, _ := r.Store.NewLease("publish/ds", store.LeaseConfig{Holder: "other"})
	tk2 := &snapshot.Ticker{Publisher: r.Pub, Lease: other, Slots: r.Store, Holder: "other"}
	res2, err := tk2.Tick(ctx, 12345, snapshot.PublishOptions{})
	if err != nil || res2.Claimed || res2.Owner != "me" {
		t.Errorf("second tick of the slot = %+v, %v; want not claimed, owner me", res2, err)
	}
}

// A replica looks for abandoned versions in its first cycle and then once every
// AbandonCheckEvery, not in every cycle; its first look reads every version still
// writing, later ones only those made since AbandonLookback before the last look.
func TestAbandonedVersionsAreLookedForOnceAMinute(t *testing.T) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	ctx := context.Background()
	now := time.Now()
	r.Pub.Now = func() time.Time { return now }
	lease, err := r.Store.NewLease("publish/ds", store.LeaseConfig{Holder: "me"})
	if err != nil {
		t.Fatal(err)
	}
	tk := &snapshot.Ticker{Publisher: r.Pub, Lease: lease, Slots: r.Store, Holder: "me"}
	abandon := func() snapshot.Version {
		t.Helper()
		m := snapshot.Manifest{Dataset: "ds", Version: r.Pub.Versions.Next(), State: snapshot.StateWriting, Token: 0, Writer: "dead"}
		if err := r.Store.CreateManifest(ctx, m); err != nil {
			t.Fatal(err)
		}
		return m.Version
	}
	state := func(v snapshot.Version) snapshot.State {
		t.Helper()
		m, err := r.Store.ReadManifest(ctx, "ds", v)
		if err != nil {
			t.Fatal(err)
		}
		return m.State
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
		State: snapshot.StateWriting, Token: 0, Writer: "dead"}
	if err := r.Store.CreateManifest(ctx, old); err != nil {
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
	tk = &snapshot.Ticker{Publisher: r.Pub, Lease: lease, Slots: r.Store, Holder: "me"}
	cycle()
	if got := state(old.Version); got != snapshot.StateFailed {
		t.Errorf("a replica's first look left the old abandoned version %s; want failed", got)
	}
}

func TestValidationGatesRefuseAndLeaveThePointer(t *testing.T) {
	tests := []struct {
		name   string
		gates  map[string]snapshot.Gate
		break_ string
		want   string
	}{
		{"shrink over half", nil, `DELETE FROM users WHERE id <> 'u1'`, "shrank from 50 to 1"},
		{"emptied", map[string]snapshot.Gate{"orders": {}}, `DELETE FROM orders`, "orders is empty"},
		{"under minimum", map[string]snapshot.Gate{"users": {MinRows: 60}}, `INSERT INTO users VALUES ('u51', 'x')`, "under its minimum of 60"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
			ctx := context.Background()
			good, err := r.Pub.Publish(ctx, snapshot.PublishOptions{Force: true})
			if err != nil {
				t.Fatal(err)
			}
			r.Pub.Gates = tt.gates
			testenv.Exec(t, r.DSN, tt.break_)
			_, err = r.Pub.Publish(ctx, snapshot.PublishOptions{})
			if !errors.Is(err, snapshot.ErrRefused) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Publish = %v; want ErrRefused saying %q", err, tt.want)
			}
			if p := r.Pointer(t); p.Version != good.Manifest.Version {
				t.Errorf("pointer moved to %s after a refusal", p.Version)
			}
			last := r.LastManifest(t)
			if last.State != snapshot.StateFailed || !strings.Contains(last.Reason, "refused") {
				t.Errorf("refused version is %s (%q); want failed, refused", last.State, last.Reason)
			}
			// --force overrides the gate for one run.
			forced, err := r.Pub.Publish(ctx, snapshot.PublishOptions{Force: true})
			if err != nil || r.Pointer(t).Version != forced.Manifest.Version {
				t.Errorf("forced publish = %v; want it to publish", err)
			}
		})
	}
}

func TestPublishWhilePinnedIsRefusedEarly(t *testing.T) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	ctx := context.Background()
	good, err := r.Pub.Publish(ctx, snapshot.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := r.Pointer(t)
	if _, err := r.Store.FlipPointer(ctx, "ds", snapshot.Flip{Version: p.Version, Expected: p.Version, Token: p.Fence + 1,
		Source: p.Source, Rollback: true, Pin: true, Reason: "test pin", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	before, _ := r.Store.ListManifests(ctx, "ds")
	testenv.Exec(t, r.DSN, `UPDATE users SET name = 'z'`)
	_, err = r.Pub.Publish(ctx, snapshot.PublishOptions{})
	if !errors.Is(err, snapshot.ErrPinned) || !strings.Contains(err.Error(), "test pin") {
		t.Errorf("Publish while pinned = %v; want ErrPinned with the reason", err)
	}
	after, _ := r.Store.ListManifests(ctx, "ds")
	if len(after) != len(before) || r.Pointer(t).Version != good.Manifest.Version {
		t.Errorf("a pinned publish wrote %d manifests or moved the pointer", len(after)-len(before))
	}
}

func TestPublishPartitioned(t *testing.T) {
	r := rig.New(t, []pgsource.Collection{{Name: "big", Table: "big", Key: "id"}},
		`CREATE TABLE big AS SELECT g AS id, md5(g::text) AS h FROM generate_series(1, 20000) g`)
	src := r.Pub.Source.(*pgsource.Source)
	src.Readers, src.PartitionMinRows = 3, 1000
	res, err := r.Pub.Publish(context.Background(), snapshot.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src.Readers = 1
	whole := *r.Pub
	whole.Versions = snapshot.NewVersionGen(uuid.New(), nil)
	res2, err := whole.Publish(context.Background(), snapshot.PublishOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	a, b := res.Manifest.Collections["big"], res2.Manifest.Collections["big"]
	if a.Rows != 20000 || a.Digest != b.Digest || a.Bytes != b.Bytes {
		t.Errorf("partitioned read %+v; whole read %+v; want the same rows and digest", a, b)
	}
}

// unknownFlips is a store whose pointer flips report an unknown outcome, after
// applying (apply) or not.
type unknownFlips struct {
	snapshot.PublishStore
	apply bool
}

func (u unknownFlips) FlipPointer(ctx context.Context, dataset string, f snapshot.Flip) (snapshot.Pointer, error) {
	if u.apply {
		if _, err := u.PublishStore.FlipPointer(ctx, dataset, f); err != nil {
			return snapshot.Pointer{}, err
		}
	}
	return snapshot.Pointer{}, fmt.Errorf("injected: %w", snapshot.ErrOutcomeUnknown)
}

// TestFlipWithUnknownOutcome: when a flip's outcome is unknown, the publish fails but
// its version is left sealed, not marked failed — the pointer may name it, and a
// version the pointer names must stay servable. Whether the flip applied or not, the
// next publish sees which and goes on: it marks an applied one published (then
// retires it on its own flip).
func TestFlipWithUnknownOutcome(t *testing.T) {
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprint("applied=", applied), func(t *testing.T) {
			r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
			ctx := context.Background()
			first, err := r.Pub.Publish(ctx, snapshot.PublishOptions{})
			if err != nil {
				t.Fatal(err)
			}
			testenv.Exec(t, r.DSN, `UPDATE users SET name = 'second' WHERE id = 'u1'`)
			real := r.Pub.Store
			r.Pub.Store = unknownFlips{PublishStore: real, apply: applied}
			_, err = r.Pub.Publish(ctx, snapshot.PublishOptions{})
			r.Pub.Store = real
			if !errors.Is(err, snapshot.ErrOutcomeUnknown) {
				t.Fatalf("publish with an unknown flip outcome = %v; want ErrOutcomeUnknown", err)
			}
			second := r.LastManifest(t)
			if second.State != snapshot.StateSealed {
				t.Fatalf("version of the unknown flip is %s; want sealed (servable)", second.State)
			}
			want := first.Manifest.Version
			if applied {
				want = second.Version
			}
			if p := r.Pointer(t); p.Version != want {
				t.Fatalf("pointer = %s; want %s", p.Version, want)
			}

			testenv.Exec(t, r.DSN, `UPDATE users SET name = 'third' WHERE id = 'u1'`)
			third, err := r.Pub.Publish(ctx, snapshot.PublishOptions{})
			if err != nil || third.NoOp || third.Previous != want {
				t.Fatalf("next publish = %+v, %v; want a new version replacing %s", third, err, want)
			}
			after, err := r.Store.ReadManifest(ctx, "ds", second.Version)
			wantState := snapshot.StateSealed // never current: left to expire
			if applied {
				wantState = snapshot.StateRetired // confirmed published, then replaced
			}
			if err != nil || after.State != wantState {
				t.Errorf("version of the unknown flip ends %s (%v); want %s", after.State, err, wantState)
			}
		})
	}
}

// countingStore counts pointer and manifest reads.
type countingStore struct {
	snapshot.PublishStore
	pointers, manifests int
}

func (c *countingStore) ReadPointer(ctx context.Context, dataset string) (snapshot.Pointer, error) {
	c.pointers++
	return c.PublishStore.ReadPointer(ctx, dataset)
}

func (c *countingStore) ReadManifest(ctx context.Context, dataset string, v snapshot.Version) (snapshot.Manifest, error) {
	c.manifests++
	return c.PublishStore.ReadManifest(ctx, dataset, v)
}

// TestTickReadsTheCurrentStateOnce: a scheduled tick's keep-alive check and publish
// share one read of the pointer and the current manifest.
func TestTickReadsTheCurrentStateOnce(t *testing.T) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	ctx := context.Background()
	r.Pub.TTL = time.Hour
	if _, err := r.Pub.Publish(ctx, snapshot.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	lease, err := r.Store.NewLease("publish/ds", store.LeaseConfig{Holder: "me"})
	if err != nil {
		t.Fatal(err)
	}
	tk := &snapshot.Ticker{Publisher: r.Pub, Lease: lease, Slots: r.Store, Holder: "me"}
	c := &countingStore{PublishStore: r.Pub.Store}
	r.Pub.Store = c
	res, _, err := tk.PublishLeased(ctx, snapshot.PublishOptions{})
	if err != nil || !res.NoOp {
		t.Fatalf("publish of an unchanged source = %+v, %v; want a no-op", res, err)
	}
	if c.pointers != 1 || c.manifests != 1 {
		t.Errorf("a tick read the pointer %d times and manifests %d times; want once each", c.pointers, c.manifests)
	}
}
