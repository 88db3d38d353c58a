package layer_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// gatedSource is a source whose snapshots open once its gate lets them (a base read
// beside the stream held in flight); the publisher's own opens pass.
type gatedSource struct {
	snapshot.Source
	gate  chan struct{}
	reads chan struct{} // when set, a base's reads wait for a value on it
}

func (g *gatedSource) Open(ctx context.Context) (snapshot.SourceSnapshot, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Source.Open(ctx)
}

// OpenBase opens a base's snapshot as the source does, once the gate lets it; with
// reads set, its reads wait for a value on it.
func (g *gatedSource) OpenBase(ctx context.Context, collection string) (snapshot.SourceSnapshot, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	snap, err := g.Source.(snapshot.BaseOpener).OpenBase(ctx, collection)
	if err != nil || g.reads == nil {
		return snap, err
	}
	return &slowReads{DeltaSnapshot: snap.(snapshot.DeltaSnapshot), reads: g.reads}, nil
}

// slowReads is a snapshot whose reads wait for a value on reads: versions are
// published between a base's snapshot and its read.
type slowReads struct {
	snapshot.DeltaSnapshot
	reads chan struct{}
}

func (s *slowReads) ScanSince(ctx context.Context, collection string, since *snapshot.Position, fn func(snapshot.Document) error) (snapshot.LayerMode, error) {
	select {
	case <-s.reads:
	case <-ctx.Done():
		return snapshot.LayerMode{}, ctx.Err()
	}
	return s.DeltaSnapshot.ScanSince(ctx, collection, since, fn)
}

func (s *slowReads) Indexes(ctx context.Context, collection string) ([]snapshot.IndexDef, error) {
	if ix, ok := s.DeltaSnapshot.(snapshot.IndexedSnapshot); ok {
		return ix.Indexes(ctx, collection)
	}
	return nil, nil
}

// holdRig is a besideRig whose Compactor reads held and new collections' bases from
// the source, through a gate.
type holdRig struct {
	*besideRig
	src *gatedSource
}

func newHoldRig(t *testing.T) *holdRig { return newHoldRigOf(t, nil) }

// newHoldRigOf is newHoldRig over the collections cols (nil: the rig's two).
func newHoldRigOf(t *testing.T, cols []pgsource.Collection) *holdRig {
	b := newBesideRigOf(t, cols)
	src := &gatedSource{Source: b.Pub.Source, gate: make(chan struct{})}
	b.c.Source = src
	return &holdRig{besideRig: b, src: src}
}

// served returns what m holds of collection, as id=body lines.
func (h *holdRig) served(t *testing.T, m snapshot.Manifest, collection string) []string {
	t.Helper()
	return scanCollection(t, h.Store, rig.Dataset, m.Chain(collection), collection)
}

// full publishes the twin, a full copy, and returns what it holds of collection.
func (h *holdRig) full(t *testing.T, collection string) []string {
	t.Helper()
	f := h.Publish(t, h.besideRig.full)
	return scanCollection(t, h.Store, "full", f.Chain(collection), collection)
}

// A column added to a table holds its collection at its last state, whole and in
// its old shape, while its new base is read beside the stream; the other
// collections keep flowing. A later version takes the base and catches it up with
// the changes made while it was read: it then serves what a full copy of its
// snapshot serves.
func TestDefinitionChangeHoldsTheCollection(t *testing.T) {
	h := newHoldRig(t)
	v1 := h.publish(t)
	before := h.served(t, v1, "users")
	h.Exec(t, `ALTER TABLE users ADD COLUMN extra int DEFAULT 7`)
	h.Exec(t, `UPDATE orders SET user_id = 'u2' WHERE id = 1`, `UPDATE users SET name = 'during' WHERE id = 'u3'`)
	v2 := h.Publish(t, h.Pub)
	u2 := v2.Collections["users"]
	if u2.Held == nil || u2.Held.Source.LSN != v1.Source.LSN || !slices.Equal(v2.Chain("users"), v1.Chain("users")) {
		t.Fatalf("v2's users = %+v; want held at v1's position with v1's chain", u2)
	}
	if got := h.served(t, v2, "users"); !slices.Equal(got, before) {
		t.Errorf("held users serve %d documents; want v1's %d, unchanged", len(got), len(before))
	}
	if got, want := h.served(t, v2, "orders"), h.full(t, "orders"); !slices.Equal(got, want) {
		t.Errorf("orders flow on while users are held: v2 serves %q, a full copy %q", got, want)
	}
	if held := v2.HeldCollections(); !slices.Equal(held, []string{"users"}) {
		t.Errorf("v2's held collections = %v; want users", held)
	}

	// The base is read, at a position between v2's and v3's; changes made after it
	// are caught up by the version that takes it.
	close(h.src.gate)
	h.c.Wait()
	h.Exec(t, `UPDATE users SET name = 'after' WHERE id = 'u4'`, `DELETE FROM users WHERE id = 'u5'`)
	v3 := h.Publish(t, h.Pub)
	u3 := v3.Collections["users"]
	if u3.Held != nil || len(u3.Layers) != 2 || u3.Layers[1].Kind != snapshot.LayerBase || u3.Layers[1].Version == v1.Chain("users")[0] {
		t.Fatalf("v3's users = %+v; want the base read beside the stream under v3's catch-up delta", u3)
	}
	if got, want := h.served(t, v3, "users"), h.full(t, "users"); !slices.Equal(got, want) {
		t.Errorf("v3 serves users %q; a full copy %q", got, want)
	}
	if own := u3.Own; own == nil || own.Mode.Kind == snapshot.KindContent || own.Changed != 1 || own.Deleted != 1 {
		t.Errorf("v3's catch-up of users = %+v; want the one change and one deletion since the base, by row version", own)
	}
	if p := h.c.Progress(); len(p) != 1 || p[0].State != "taken" {
		t.Errorf("progress = %+v; want the users base taken", p)
	}
	h.Exec(t, `UPDATE users SET name = 'later' WHERE id = 'u6'`)
	h.publish(t) // and on from there, every collection equal to a full copy
}

// A collection added to the config joins a later version once its base is read
// beside the stream; the versions meanwhile leave it out and publish the others.
func TestNewCollectionJoinsLater(t *testing.T) {
	h := newHoldRig(t)
	h.publish(t)
	h.Exec(t, `CREATE TABLE tags (id int PRIMARY KEY, tag text)`, `INSERT INTO tags SELECT g, 't' || g FROM generate_series(1, 30) g`)
	three := append(slices.Clone(rig.TwoCollections), pgsource.Collection{Name: "tags", Table: "tags", Key: "id"})
	src, err := pgsource.New(h.DSN, three)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	h.Pub.Source, h.src.Source, h.besideRig.full.Source = src, src, src
	h.Exec(t, `UPDATE orders SET user_id = 'u9' WHERE id = 2`)
	v2 := h.Publish(t, h.Pub)
	if _, ok := v2.Collections["tags"]; ok {
		t.Fatalf("v2 holds tags before its base is read: %+v", v2.Collections["tags"])
	}
	if got, want := h.served(t, v2, "orders"), h.full(t, "orders"); !slices.Equal(got, want) {
		t.Errorf("orders flow on while tags wait: v2 serves %q, a full copy %q", got, want)
	}
	close(h.src.gate)
	h.c.Wait()
	h.Exec(t, `UPDATE tags SET tag = 'x' WHERE id = 3`)
	v3 := h.Publish(t, h.Pub)
	if got, want := h.served(t, v3, "tags"), h.full(t, "tags"); len(got) != 30 || !slices.Equal(got, want) {
		t.Errorf("v3 serves tags %q; a full copy %q", got, want)
	}
}

// With the replication stream read by this process, the version that takes a base
// read beside the stream catches it up by the keys the stream logged since the
// base's snapshot: changes made after it, while the collection was held, are read
// by id, not by comparing the table, and the version equals a full copy.
func TestHeldBaseCatchesUpByStreamKeys(t *testing.T) {
	h := newHoldRig(t)
	h.besideRig.full.Source = plainSource{h.Pub.Source}
	h.Exec(t, `ALTER TABLE orders REPLICA IDENTITY FULL`)
	h.Stream(t, fmt.Sprintf("snapflip_hold_%d", time.Now().UnixNano()%1e12))
	h.publish(t)
	h.Exec(t, `ALTER TABLE users ADD COLUMN extra int DEFAULT 7`)
	h.Exec(t, `UPDATE orders SET user_id = 'u3' WHERE id = 4`)
	v2 := h.Publish(t, h.Pub)
	if v2.Collections["users"].Held == nil {
		t.Fatalf("v2's users = %+v; want held", v2.Collections["users"])
	}
	close(h.src.gate)
	h.c.Wait()
	h.Exec(t, `UPDATE users SET name = 'after' WHERE id = 'u7'`, `DELETE FROM users WHERE id = 'u8'`, `INSERT INTO users VALUES ('u99', 'new', 1)`)
	v3 := h.Publish(t, h.Pub)
	u := v3.Collections["users"]
	if u.Held != nil || u.Own == nil || !u.Own.Rebased || u.Own.Mode != snapshot.ModeStream || u.Own.Inserted != 1 || u.Own.Changed != 1 || u.Own.Deleted != 1 {
		t.Fatalf("v3's users = %+v, own %+v; want the base caught up by the stream's keys: 1 inserted, changed, deleted", u, u.Own)
	}
	if got, want := h.served(t, v3, "users"), h.full(t, "users"); !slices.Equal(got, want) {
		t.Errorf("v3 serves users %q; a full copy %q", got, want)
	}
}

// A collection smaller than BesideMinRows whose definition changed gets its new
// base in the version, which costs it less than a hold: no version holds it.
func TestSmallCollectionIsNotHeld(t *testing.T) {
	h := newHoldRig(t)
	h.Writer.BesideMinRows = 51 // users has 50 rows
	h.publish(t)
	h.Exec(t, `ALTER TABLE users ADD COLUMN extra int DEFAULT 7`)
	v2 := h.publish(t) // equal to a full copy
	if u := v2.Collections["users"]; u.Held != nil || u.Own == nil || u.Own.Kind != snapshot.LayerBase {
		t.Fatalf("v2's users = %+v; want its new base written in the version", u)
	}
}
