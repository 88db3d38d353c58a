package layer_test

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/storetest"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/resolver"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// A delta holds only what changed, renders only the rows written since its parent,
// and its totals are exactly a full copy's.
//
// It has a Postgres server of its own: a transaction running elsewhere in a shared
// cluster when the parent's snapshot is taken widens the window of rows rendered
// (rightly), and the exact count of rendered rows below would not hold.
func TestIncrementalPublishWritesOnlyChanges(t *testing.T) {
	dsn, _ := testenv.PostgresServer(t)
	r := rig.NewOn(t, dsn, rig.TwoCollections, rig.TwoTables...)
	r.Pub.Incremental = true
	full := r.Twin()
	base := r.Publish(t, r.Pub)
	if base.Format != snapshot.FormatLayered || base.Collections["users"].Own.Kind != snapshot.LayerBase {
		t.Fatalf("first version: format %d, users %+v; want a layered base", base.Format, base.Collections["users"].Own)
	}
	r.Publish(t, full)
	r.Exec(t, `UPDATE users SET name = 'changed' WHERE id IN ('u1', 'u2')`,
		`UPDATE users SET name = name WHERE id = 'u3'`, // a new row version, the same document
		`DELETE FROM users WHERE id = 'u4'`, `INSERT INTO users VALUES ('u99', 'new')`)
	delta := r.Publish(t, r.Pub)
	f2 := r.Publish(t, full)
	u := delta.Collections["users"]
	want := snapshot.OwnLayer{Kind: snapshot.LayerDelta, Mode: snapshot.ModeRowVersion, Inserted: 1, Changed: 2, Deleted: 1, Rendered: 4,
		Emitted: 4, Written: 4, Chunks: 1, ChunksWritten: 1}
	if !reflect.DeepEqual(*u.Own, want) {
		t.Errorf("users' own layer = %+v;\nwant %+v", *u.Own, want)
	}
	if o := delta.Collections["orders"]; o.Own.Kind != "" || len(o.Layers) != 1 || o.Layers[0].Version != base.Version {
		t.Errorf("unchanged orders: own %+v, layers %+v; want no layer, the base's chain", o.Own, o.Layers)
	}
	if len(u.Layers) != 2 || u.Layers[0].Version != delta.Version || u.Layers[1].Version != base.Version {
		t.Errorf("users' chain = %+v; want [delta, base]", u.Layers)
	}
	for name, c := range f2.Collections {
		d := delta.Collections[name]
		if d.Rows != c.Rows || d.Bytes != c.Bytes || d.Digest != c.Digest {
			t.Errorf("%s: delta totals %d rows %d bytes %s; full copy %d rows %d bytes %s", name, d.Rows, d.Bytes, d.Digest, c.Rows, c.Bytes, c.Digest)
		}
	}
	if delta.BytesWritten <= 0 || delta.BytesWritten*10 > base.BytesWritten {
		t.Errorf("the delta sent %d bytes, the base %d: want a small fraction", delta.BytesWritten, base.BytesWritten)
	}
	// Reads through the chain: the deleted id is gone, the changed ones changed.
	ctx := context.Background()
	got, err := r.Store.GetDocuments(ctx, snapshot.ChainRef{Dataset: "ds", Chain: delta.Chain("users"), Collection: "users"}, []string{"u1", "u4", "u5", "u99"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["u4"]; ok || len(got) != 3 || string(got["u1"]) != `{"id":"u1","name":"changed"}` {
		t.Errorf("reads through the chain = %q", got)
	}

	// Diff between versions sharing the base reads only the delta's run, and agrees
	// with the full copies' scan.
	dl, err := layer.Diff(ctx, r.Store, layer.DiffRequest{Dataset: "ds", From: base.Version, To: delta.Version, Sample: 10})
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := r.Store.ListManifests(ctx, "full")
	df, err := layer.Diff(ctx, r.Store, layer.DiffRequest{Dataset: "full", From: ms[0].Version, To: ms[len(ms)-1].Version, Sample: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dl["users"].Sample, df["users"].Sample) || dl["users"].Changed != 2 || dl["users"].Added != 1 || dl["users"].Removed != 1 {
		t.Errorf("layered diff = %+v; the full copies' = %+v", dl["users"], df["users"])
	}
}

// A chain at max_layers gets a merged delta at the next change: its changes plus
// every id of the parent's deltas (documents copied, tombstones kept), over the base,
// so the chain never outgrows max_layers and no base is read from the source. Every
// version reads exactly what a full copy of the same source holds. Deltas large
// against their base (rebase_ratio) get a base.
func TestChainsStayBounded(t *testing.T) {
	// Without a run cache the parent chain's runs are merged; with one, the changed
	// ids are looked up. A merge with no row deleted reads the changed rows alone.
	// Each has a Postgres server of its own, for the exact count of rendered rows
	// (see TestIncrementalPublishWritesOnlyChanges).
	t.Run("merged runs", func(t *testing.T) { testChainsStayBounded(t, false) })
	t.Run("run cache lookups", func(t *testing.T) { testChainsStayBounded(t, true) })
}

func testChainsStayBounded(t *testing.T, cached bool) {
	dsn, _ := testenv.PostgresServer(t)
	r := rig.NewOn(t, dsn, rig.TwoCollections, rig.TwoTables...)
	r.Pub.Incremental, r.Writer.MaxLayers, r.Writer.RebaseRatio = true, 3, 100
	if cached {
		r.Writer.Runs = layer.NewRunCache(r.Store, 1<<20)
	}
	full := r.Twin()
	ctx := context.Background()
	base := r.Publish(t, r.Pub)
	steps := []struct {
		sql            string
		chain, merged  int
		copied, tombst int64
	}{
		{`UPDATE users SET name = 'one' WHERE id = 'u1'`, 2, 0, 0, 0},
		{`DELETE FROM users WHERE id = 'u10'; UPDATE users SET name = 'two' WHERE id = 'u2'`, 3, 0, 0, 1},
		// Merges [d2 d1]: u3 changed; u1, u2 copied; u10's tombstone kept.
		{`UPDATE users SET name = 'three' WHERE id = 'u3'`, 2, 2, 3, 1},
		// u10 comes back over the merged tombstone.
		{`INSERT INTO users VALUES ('u10', 'back')`, 3, 0, 0, 0},
		// Merges [d4 m3]: u2 deleted; u1, u3, u10 copied.
		{`DELETE FROM users WHERE id = 'u2'`, 2, 2, 3, 1},
		// Merges [m5] alone (chain [m5 b] is not at 3 yet, so first a plain delta).
		{`UPDATE users SET name = 'six' WHERE id = 'u1'`, 3, 0, 0, 0},
		// Merges [d6 m5]: u1 changed again (not copied); u3, u10 copied, u2's tombstone kept.
		{`UPDATE users SET name = 'seven' WHERE id = 'u1'`, 2, 2, 3, 1},
	}
	prev := base
	prevFull := r.Publish(t, full)
	for i, st := range steps {
		r.Exec(t, st.sql)
		m := r.Publish(t, r.Pub)
		f := r.Publish(t, full)
		// diff across a merge agrees with the full copies' diff.
		dl, err := layer.Diff(ctx, r.Store, layer.DiffRequest{Dataset: "ds", From: prev.Version, To: m.Version, Collection: "users", Sample: 10})
		if err != nil {
			t.Fatal(err)
		}
		df, err := layer.Diff(ctx, r.Store, layer.DiffRequest{Dataset: "full", From: prevFull.Version, To: f.Version, Collection: "users", Sample: 10})
		if err != nil {
			t.Fatal(err)
		}
		if a, b := dl["users"], df["users"]; a.Added != b.Added || a.Removed != b.Removed || a.Changed != b.Changed || !slices.Equal(a.Sample, b.Sample) {
			t.Errorf("step %d: layered diff %+v; full diff %+v", i, a, b)
		}
		prevFull = f
		u := m.Collections["users"]
		if u.Own.Kind != snapshot.LayerDelta || len(u.Layers) != st.chain || u.Layers[0].Merged != st.merged ||
			u.Own.Copied != st.copied || u.Layers[0].Tombstones != st.tombst || u.Layers[len(u.Layers)-1].Version != base.Version {
			t.Fatalf("step %d (%s): own %+v, chain %+v;\nwant a delta, chain %d, merged %d, copied %d, tombstones %d, over the base",
				i, st.sql, *u.Own, u.Layers, st.chain, st.merged, st.copied, st.tombst)
		}
		if wantMode := snapshot.ModeChangedOnly; !strings.Contains(st.sql, "DELETE") && u.Own.Mode != wantMode {
			t.Errorf("step %d (%s): read in mode %q; want %q", i, st.sql, u.Own.Mode, wantMode)
		}
		if pc := prev.Collections["users"]; st.merged > 0 && !slices.Equal(versionsOf(u.Layers[1:]), versionsOf(pc.Layers[st.merged:])) {
			t.Errorf("step %d: merged chain %+v does not end in the parent's %+v without its %d newest", i, u.Layers, pc.Layers, st.merged)
		}
		for name, c := range f.Collections {
			if d := m.Collections[name]; d.Rows != c.Rows || d.Bytes != c.Bytes || d.Digest != c.Digest {
				t.Errorf("step %d %s: totals %d rows %d bytes %s; full copy %d %d %s", i, name, d.Rows, d.Bytes, d.Digest, c.Rows, c.Bytes, c.Digest)
			}
		}
		if got, want := scanAll(t, r.Store, "ds", m.Chain("users")), scanAll(t, r.Store, "full", f.Chain("users")); !slices.Equal(got, want) {
			t.Errorf("step %d: the chain reads %d documents %v;\nthe full copy %d %v", i, len(got), got, len(want), want)
		}
		ids := []string{"u1", "u2", "u3", "u10", "u11"}
		got, err := r.Store.GetDocuments(ctx, snapshot.ChainRef{Dataset: "ds", Chain: m.Chain("users"), Collection: "users"}, ids)
		if err != nil {
			t.Fatal(err)
		}
		want, err := r.Store.GetDocuments(ctx, snapshot.ChainRef{Dataset: "full", Chain: f.Chain("users"), Collection: "users"}, ids)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("step %d: GET through the chain %q; the full copy %q", i, got, want)
		}
		prev = m
	}
	// A version on top of a merged delta is still computed from fingerprints alone.
	r.Exec(t, `UPDATE users SET name = 'eight' WHERE id = 'u3'`)
	if u := r.Publish(t, r.Pub).Collections["users"]; u.Own.Rendered != 1 || u.Own.Changed != 1 || len(u.Layers) != 3 {
		t.Errorf("a delta over the merged one: own %+v, chain %d", *u.Own, len(u.Layers))
	}

	r.Writer.MaxLayers = 1
	r.Exec(t, `UPDATE users SET name = 'nine' WHERE id = 'u3'`)
	if u := r.Publish(t, r.Pub).Collections["users"]; u.Own.Kind != snapshot.LayerBase || len(u.Layers) != 1 {
		t.Errorf("max_layers 1: own %+v, chain %d; want a base alone", *u.Own, len(u.Layers))
	}
	r.Writer.MaxLayers, r.Writer.RebaseRatio = 8, 0.1
	r.Exec(t, `UPDATE users SET name = 'many' WHERE id IN ('u1', 'u2', 'u3')`) // 3 of 50 users: under 10%
	if k := r.Publish(t, r.Pub).Collections["users"].Own.Kind; k != snapshot.LayerDelta {
		t.Errorf("a small change: %s layer; want delta", k)
	}
	r.Exec(t, `UPDATE users SET name = 'more' WHERE id IN ('u1', 'u2', 'u3', 'u4')`)
	if k := r.Publish(t, r.Pub).Collections["users"].Own.Kind; k != snapshot.LayerDelta {
		t.Errorf("deltas at 7 of 50 rows: %s layer; want delta", k)
	}
	r.Exec(t, `UPDATE users SET name = 'again' WHERE id = 'u1'`)
	if k := r.Publish(t, r.Pub).Collections["users"].Own.Kind; k != snapshot.LayerBase {
		t.Errorf("deltas past rebase_ratio: %s layer; want base", k)
	}
}

// A parent whose fingerprints disagree with its manifest makes the publish start
// again with bases, and the version published is right.
func TestInconsistentParentFallsBackToBase(t *testing.T) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	r.Pub.Incremental = true
	ctx := context.Background()
	m := r.Publish(t, r.Pub)
	broken := m
	u := broken.Collections["users"]
	u.Rows++
	broken.Collections = map[string]snapshot.CollectionStats{"users": u, "orders": m.Collections["orders"]}
	if err := r.Store.UpdateManifest(ctx, broken, m.State); err != nil {
		t.Fatal(err)
	}
	r.Exec(t, `UPDATE users SET name = 'x' WHERE id = 'u1'`)
	m2 := r.Publish(t, r.Pub)
	if k := m2.Collections["users"].Own.Kind; k != snapshot.LayerBase || m2.Collections["users"].Rows != 50 {
		t.Errorf("after an inconsistent parent: users %+v, %d rows; want a base of 50", m2.Collections["users"].Own, m2.Collections["users"].Rows)
	}
	failed := r.LastManifestBefore(t, m2.Version)
	if failed.State != snapshot.StateFailed {
		t.Errorf("the inconsistent attempt is %s; want failed", failed.State)
	}
}

// A parent whose manifest counts one row too few, with a row then deleted: the
// changed rows alone would balance the count and leave the deleted row served. Every
// way of matching the parent (merging its runs, looking ids up in the run cache, or
// reading them by id from a chain whose count the cache remembers) checks the chain's
// live ids against the manifest, fails the attempt, and writes a base; also when a
// version in between carried the collection unchanged.
func TestParentCountingTooFewFallsBackToBase(t *testing.T) {
	for _, tc := range []struct {
		budget  int64
		carried bool
	}{{0, false}, {16, false}, {1 << 20, false}, {16, true}, {1 << 20, true}} {
		budget, carried := tc.budget, tc.carried
		t.Run(fmt.Sprintf("run cache of %d bytes, carried %v", budget, carried), func(t *testing.T) {
			r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
			r.Pub.Incremental = true
			if budget > 0 {
				r.Writer.Runs = layer.NewRunCache(r.Store, budget)
			}
			ctx := context.Background()
			r.Exec(t, `UPDATE users SET name = 'x' WHERE id = 'u1'`)
			r.Publish(t, r.Pub)
			r.Exec(t, `UPDATE users SET name = 'y' WHERE id = 'u1'`)
			m := r.Publish(t, r.Pub) // a delta over the base: the count spans two layers
			broken := m
			u := broken.Collections["users"]
			u.Rows--
			broken.Collections = map[string]snapshot.CollectionStats{"users": u, "orders": m.Collections["orders"]}
			if err := r.Store.UpdateManifest(ctx, broken, m.State); err != nil {
				t.Fatal(err)
			}
			rebuilt := false
			if carried {
				// A version that carries users unchanged takes its count from the
				// manifest: the cache must not take that count for a checked one. (Rows
				// the parent saw fall in the row-version window when a transaction
				// elsewhere held the parent's snapshot xmin back: users is then read,
				// its count checked, and a base written at once.)
				r.Exec(t, `UPDATE orders SET user_id = 'u1' WHERE id = 1`)
				c := r.Publish(t, r.Pub).Collections["users"]
				switch {
				case c.Own != nil && c.Own.Mode == snapshot.ModeSameFingerprint:
				case c.Own != nil && c.Own.Kind == snapshot.LayerBase && c.Rows == 50:
					rebuilt = true
				default:
					t.Fatalf("users was neither carried nor rebuilt: %d rows, %+v", c.Rows, c.Own)
				}
			}
			r.Exec(t, `DELETE FROM users WHERE id = 'u2'`)
			m2 := r.Publish(t, r.Pub)
			if rebuilt {
				if m2.Collections["users"].Rows != 49 {
					t.Errorf("after a rebuilt base: users %d rows; want 49", m2.Collections["users"].Rows)
				}
				return
			}
			if k := m2.Collections["users"].Own.Kind; k != snapshot.LayerBase || m2.Collections["users"].Rows != 49 {
				t.Errorf("after a parent counting too few: users %+v, %d rows; want a base of 49", m2.Collections["users"].Own, m2.Collections["users"].Rows)
			}
			if failed := r.LastManifestBefore(t, m2.Version); failed.State != snapshot.StateFailed {
				t.Errorf("the inconsistent attempt is %s; want failed", failed.State)
			}
		})
	}
}

// A pinned version's refresh rewrites every layer of its chains, and its data time
// (and so its expiry) is then the refresh's.
func TestPinnedRefreshCoversTheChain(t *testing.T) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	r.Pub.Incremental = true
	ctx := context.Background()
	tk := r.Ticker(t, "admin")
	var m snapshot.Manifest
	for i, stmts := range [][]string{nil, {`UPDATE users SET name = 'x' WHERE id = 'u1'`, `DELETE FROM users WHERE id = 'u2'`},
		{`UPDATE users SET name = 'y' WHERE id = 'u1'`}} {
		r.Exec(t, stmts...)
		res, err := tk.Tick(ctx, int64(i+1), snapshot.PublishOptions{})
		if err != nil || res.Publish.NoOp {
			t.Fatalf("tick %d: %+v, %v", i, res, err)
		}
		if i == 1 {
			m = res.Publish.Manifest
		}
	}
	res, now := pinPreviousAndRefresh(t, r, tk)
	// The base's 50 + 120 rows, and the delta's document and tombstone.
	if res.Refreshed != 172 {
		t.Errorf("refreshed %d rows; want 172 (both layers, tombstone included)", res.Refreshed)
	}
	got, _ := r.Store.ReadManifest(ctx, "ds", m.Version)
	if !got.DataTime().Equal(now) {
		t.Errorf("data time after the refresh = %s; want %s", got.DataTime(), now)
	}
}

// pinPreviousAndRefresh rolls back to the previous version, which pins it, and has
// the publisher keep it alive an hour later, its TTL an hour: it returns the refresh
// and when it ran.
func pinPreviousAndRefresh(t *testing.T, r *rig.Rig, tk *snapshot.Ticker) (snapshot.PublishResult, time.Time) {
	t.Helper()
	ctx := context.Background()
	admin := &snapshot.Admin{Dataset: "ds", Store: r.Store, Lease: tk.Lease}
	if _, err := admin.Rollback(ctx, snapshot.RollbackRequest{Previous: true, Reason: "hold", By: "test"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Hour)
	r.Pub.TTL, r.Pub.Now = time.Hour, func() time.Time { return now }
	_, res, done, err := r.Pub.KeepAlive(ctx, snapshot.PublishOptions{})
	if err != nil || !done {
		t.Fatalf("KeepAlive = %+v, %v, %v", res, done, err)
	}
	return res, now
}

func TestDataTimeIsTheChainsOldest(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := snapshot.Manifest{StartedAt: t0.Add(5 * time.Hour), TTL: 10 * time.Hour,
		Collections: map[string]snapshot.CollectionStats{"c": {Layers: []snapshot.LayerRef{
			{Version: "v3", DataTime: t0.Add(5 * time.Hour)}, {Version: "v1", DataTime: t0}}}}}
	if !m.DataTime().Equal(t0) || !m.ExpiresAt(0).Equal(t0.Add(10*time.Hour)) {
		t.Errorf("data time %s, expiry %s; want the base's %s", m.DataTime(), m.ExpiresAt(0), t0)
	}
	if !m.Expired(t0.Add(10 * time.Hour)) {
		t.Error("a version whose base has outlived the TTL is not expired")
	}
}

// A flip keeps the document cache: after it, only the ids the new version's layer
// changed are read from storage; the others are the parent's cached answers, also two
// flips back, and a deleted id is not carried.

// A flip is loaded (the new version's manifest, and what its layer changed) by the
// pointer refresh before requests see it: the first requests after it read neither
// from the store, and still carry every unchanged answer.
func TestFlipsAreLoadedBeforeTheyAreServed(t *testing.T) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	r.Pub.Incremental = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v1 := r.Publish(t, r.Pub)
	st := storetest.NewCounting(r.Store)
	res, err := resolver.New("ds", st, resolver.Config{Refresh: 20 * time.Millisecond, Layers: layer.NewReader(st, "ds")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	go res.Run(ctx)
	// serving waits until the pointer names v (Pointer reads no manifest), then
	// returns the current view.
	serving := func(v snapshot.Version, before func()) snapshot.View {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, func() error {
			if p, err := res.Pointer(ctx); err != nil || p.Version != v {
				return fmt.Errorf("the resolver does not serve %s (pointer %s, %v)", v, p.Version, err)
			}
			return nil
		})
		before()
		view, err := res.Current(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return view
	}
	readAll := func(view snapshot.View) {
		t.Helper()
		for i := 1; i <= 50; i++ {
			if _, err := res.Get(ctx, view, "users", fmt.Sprintf("u%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	readAll(serving(v1.Version, func() {}))
	r.Exec(t, `UPDATE users SET name = 'changed' WHERE id = 'u7'`)
	v2 := r.Publish(t, r.Pub)
	_, missesBefore := res.CacheStats()
	carriedBefore := res.CarriedHits()
	// Counted from when the pointer names v2, until every user was read at it.
	var m0, r0 int64
	readAll(serving(v2.Version, func() { m0, r0 = st.Manifests(), st.RunsRead() }))
	if m, n := st.Manifests()-m0, st.RunsRead()-r0; m != 0 || n != 0 {
		t.Errorf("requests after the flip read %d manifests and %d runs from the store; want none (the refresh loaded them)", m, n)
	}
	if _, misses := res.CacheStats(); misses-missesBefore != 1 || res.CarriedHits()-carriedBefore != 49 {
		t.Errorf("after the flip: %d misses, %d carried; want 1 (u7), 49", misses-missesBefore, res.CarriedHits()-carriedBefore)
	}
}

func TestCacheSurvivesFlips(t *testing.T) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	r.Pub.Incremental = true
	ctx := context.Background()
	v1 := r.Publish(t, r.Pub)
	res, err := resolver.New("ds", r.Store, resolver.Config{Layers: layer.NewReader(r.Store, "ds")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 50)
	for i := range ids {
		ids[i] = fmt.Sprintf("u%d", i+1)
	}
	readAll := func(m snapshot.Manifest) map[string]string {
		view, err := res.View(ctx, m.Version)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, id := range ids {
			d, err := res.Get(ctx, view, "users", id)
			if err == nil {
				out[id] = string(d.Body)
			}
		}
		return out
	}
	orig := readAll(v1)
	r.Exec(t, `UPDATE users SET name = 'changed' WHERE id = 'u7'`, `DELETE FROM users WHERE id = 'u8'`)
	v2 := r.Publish(t, r.Pub)
	r.Exec(t, `UPDATE orders SET user_id = 'u1' WHERE id = 1`) // users unchanged: no layer
	v3 := r.Publish(t, r.Pub)
	_, missesBefore := res.CacheStats()
	got := readAll(v3) // two flips on, nothing read at v2
	_, misses := res.CacheStats()
	if n := misses - missesBefore; n != 2 {
		t.Errorf("reading 50 users after two flips missed %d times; want 2 (the changed and the deleted id)", n)
	}
	if c := res.CarriedHits(); c != 48 {
		t.Errorf("carried %d answers across the flips; want 48", c)
	}
	if got["u7"] != `{"id":"u7","name":"changed"}` || got["u8"] != "" || len(got) != 49 {
		t.Errorf("after the flips: u7 = %s, u8 = %q, %d users", got["u7"], got["u8"], len(got))
	}
	_ = v2

	// A merged delta (the chain was at max_layers) holds every id of the deltas it
	// replaced: only those miss.
	r.Writer.MaxLayers = 2
	r.Exec(t, `UPDATE users SET name = 'merged' WHERE id = 'u9'`)
	v4 := r.Publish(t, r.Pub)
	if l := v4.Collections["users"].Layers; len(l) != 2 || l[0].Merged != 1 {
		t.Fatalf("users' chain at v4 = %+v; want a merged delta over the base", l)
	}
	_, missesBefore = res.CacheStats()
	carriedBefore := res.CarriedHits()
	got = readAll(v4)
	_, misses = res.CacheStats()
	if n := misses - missesBefore; n != 3 {
		t.Errorf("reading 50 users after a merging flip missed %d times; want 3 (u7, u8 copied, u9 changed)", n)
	}
	if c := res.CarriedHits() - carriedBefore; c != 47 {
		t.Errorf("carried %d answers across the merging flip; want 47", c)
	}
	if got["u7"] != `{"id":"u7","name":"changed"}` || got["u9"] != `{"id":"u9","name":"merged"}` || got["u8"] != "" || len(got) != 49 {
		t.Errorf("after the merge: u7 = %s, u9 = %s, u8 = %q, %d users", got["u7"], got["u9"], got["u8"], len(got))
	}

	// Entries now at v4 answer a read at v1 only for the ids nothing since changed:
	// the others are read again, at v1.
	_, missesBefore = res.CacheStats()
	if got := readAll(v1); !maps.Equal(got, orig) {
		t.Errorf("reading v1 after v4: %d users, u7 = %s, u8 = %s, u9 = %s; want v1's %d, %s, %s, %s",
			len(got), got["u7"], got["u8"], got["u9"], len(orig), orig["u7"], orig["u8"], orig["u9"])
	}
	if _, misses = res.CacheStats(); misses-missesBefore != 3 {
		t.Errorf("reading v1 after v4 missed %d times; want 3 (u7, u8, u9)", misses-missesBefore)
	}
}

// Switching modes is safe at any time (docs/operations.md): the first incremental sync after a
// full copy writes a base, and a full copy after layered versions is a full copy; the
// totals agree throughout.
func TestSwitchingModes(t *testing.T) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	full := r.Publish(t, r.Pub)
	r.Pub.Incremental = true
	r.Exec(t, `UPDATE users SET name = 'x' WHERE id = 'u1'`)
	first := r.Publish(t, r.Pub)
	if k := first.Collections["users"].Own.Kind; first.Format != snapshot.FormatLayered || k != snapshot.LayerBase {
		t.Errorf("the first incremental sync after a full copy: format %d, %s layer; want a layered base", first.Format, k)
	}
	r.Exec(t, `UPDATE users SET name = 'y' WHERE id = 'u1'`)
	delta := r.Publish(t, r.Pub)
	r.Pub.Incremental = false
	r.Exec(t, `UPDATE users SET name = 'z' WHERE id = 'u1'`)
	back := r.Publish(t, r.Pub)
	if back.Format != snapshot.FormatFull || len(back.Collections["users"].Layers) != 0 {
		t.Errorf("full mode after layered versions: format %d, layers %v", back.Format, back.Collections["users"].Layers)
	}
	if delta.Collections["orders"].Digest != full.Collections["orders"].Digest ||
		back.Collections["orders"].Digest != full.Collections["orders"].Digest {
		t.Error("the unchanged collection's digest moved across the mode switches")
	}
}

func versionsOf(ls []snapshot.LayerRef) []snapshot.Version {
	out := make([]snapshot.Version, len(ls))
	for i, l := range ls {
		out[i] = l.Version
	}
	return out
}

// scanAll returns every document of a collection through a chain, as "id=body".
func scanAll(tb testing.TB, st *store.Store, dataset string, chain []snapshot.Version) []string {
	tb.Helper()
	return scanCollection(tb, st, dataset, chain, "users")
}

// scanCollection returns every "id=document" of collection through chain.
func scanCollection(tb testing.TB, st *store.Store, dataset string, chain []snapshot.Version, collection string) []string {
	tb.Helper()
	var out []string
	if err := st.ScanDocuments(context.Background(), snapshot.ChainRef{Dataset: dataset, Chain: chain, Collection: collection}, func(d snapshot.Document) bool {
		out = append(out, d.ID+"="+string(d.Body))
		return true
	}); err != nil {
		tb.Fatal(err)
	}
	return out
}

// A syncer's run cache reads each layer's run from the store once, however many
// deltas are computed against it (merges included), and the versions are what they
// are without it; a run over the cache's budget is streamed every time.
func TestRunCacheReadsEachRunOnce(t *testing.T) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	r.Pub.Incremental, r.Writer.MaxLayers, r.Writer.RebaseRatio = true, 3, 100
	full := r.Twin()
	counted := storetest.NewCounting(r.Store)
	cache := layer.NewRunCache(counted, 1<<20)
	r.Writer.Runs = cache
	base := r.Publish(t, r.Pub)
	for i := range 6 {
		r.Exec(t, fmt.Sprintf(`UPDATE users SET name = 'gen %d' WHERE id = 'u%d'`, i, i+1), fmt.Sprintf(`DELETE FROM users WHERE id = 'u%d'`, 20+i))
		m := r.Publish(t, r.Pub)
		f := r.Publish(t, full)
		if d, c := m.Collections["users"], f.Collections["users"]; d.Digest != c.Digest || d.Rows != c.Rows {
			t.Fatalf("delta %d with the run cache: %d rows, digest %s; the full copy %d, %s", i, d.Rows, d.Digest, c.Rows, c.Digest)
		}
		if got, want := scanAll(t, r.Store, "ds", m.Chain("users")), scanAll(t, r.Store, "full", f.Chain("users")); !slices.Equal(got, want) {
			t.Fatalf("delta %d with the run cache reads %d documents; the full copy %d", i, len(got), len(want))
		}
	}
	for layer, n := range counted.Runs() {
		if n != 1 {
			t.Errorf("layer %s's run was read from the store %d times; want once", layer, n)
		}
	}
	if counted.Runs()[base.Version] != 1 {
		t.Errorf("the base's run was read %d times; want once", counted.Runs()[base.Version])
	}
	if runs, bytes := cache.Cached(); runs == 0 || bytes <= 0 || bytes > 1<<20 {
		t.Errorf("the cache holds %d runs, %d bytes; want some, within its budget", runs, bytes)
	}

	// A budget smaller than a run keeps none, as in a new process. The parent chain's
	// count is the one recorded beside its newest layer's run, so every delta reads
	// its changed ids' parent documents by id and no run to its end, and the versions
	// are still a full copy's. Without records (layers written before them, or a
	// record aged out), the first delta reads the chain to its end, which checks its
	// count, and the next ones, whose parents this process wrote, read by id.
	for _, recorded := range []bool{true, false} {
		tiny := layer.NewRunCache(counted, 16)
		pub := *withWriter(r.Pub, r.Writer, func(w *layer.Writer) {
			w.Runs = tiny
			if !recorded {
				w.Store = unrecorded{w.Store}
			}
		})
		before := counted.Runs()[base.Version]
		for i := range 3 {
			r.Exec(t, fmt.Sprintf(`UPDATE users SET name = 'tiny %d %v' WHERE id = 'u40'`, i, recorded), fmt.Sprintf(`INSERT INTO users (id, name) VALUES ('tiny%d%v', 't')`, i, recorded))
			m := r.Publish(t, &pub)
			f := r.Publish(t, full)
			if got, want := scanAll(t, r.Store, "ds", m.Chain("users")), scanAll(t, r.Store, "full", f.Chain("users")); !slices.Equal(got, want) {
				t.Fatalf("delta %d with a 16-byte cache (recorded counts %v) reads %d documents; the full copy %d", i, recorded, len(got), len(want))
			}
		}
		// (Its layer's entry count tells it is over the budget without reading it.)
		want := 1
		if recorded {
			want = 0
		}
		if runs, _ := tiny.Cached(); runs != 0 || counted.Runs()[base.Version]-before != want {
			t.Errorf("recorded counts %v: a 16-byte cache holds %d runs, and the base's run was read %d more times; want none, %d",
				recorded, runs, counted.Runs()[base.Version]-before, want)
		}
	}
}

// unrecorded is a store without recorded chain counts.
type unrecorded struct{ layer.Store }

func (unrecorded) RecordedLive(context.Context, string, snapshot.Version, string) (int64, bool, error) {
	return 0, false, nil
}

// Merges are size-tiered: under a stream of small changes some merges leave an older,
// larger delta below them, and every version still reads what a full copy does.
func TestTieredMergesKeepOlderTiers(t *testing.T) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	r.Pub.Incremental, r.Writer.MaxLayers, r.Writer.RebaseRatio = true, 4, 100
	full := r.Twin()
	r.Publish(t, r.Pub)
	var tiered, copied int64
	for i := range 16 {
		r.Exec(t, fmt.Sprintf(`UPDATE users SET name = 'tier %d' WHERE id = 'u%d'`, i, i+1))
		m := r.Publish(t, r.Pub)
		f := r.Publish(t, full)
		u := m.Collections["users"]
		if len(u.Layers) > 4 {
			t.Fatalf("publish %d: a chain of %d layers; max_layers is 4", i, len(u.Layers))
		}
		if l := u.Layers[0]; l.Merged > 0 && len(u.Layers) > 2 {
			tiered++
		}
		copied += u.Own.Copied
		if d, c := u, f.Collections["users"]; d.Digest != c.Digest || d.Rows != c.Rows {
			t.Fatalf("publish %d: %d rows, digest %s; the full copy %d, %s", i, d.Rows, d.Digest, c.Rows, c.Digest)
		}
		if got, want := scanAll(t, r.Store, "ds", m.Chain("users")), scanAll(t, r.Store, "full", f.Chain("users")); !slices.Equal(got, want) {
			t.Fatalf("publish %d: the chain reads %d documents; the full copy %d", i, len(got), len(want))
		}
	}
	if tiered == 0 {
		t.Error("no merge left an older delta below it: merges are not tiered")
	}
	t.Logf("16 one-row changes at max_layers 4: %d merges over an older tier, %d documents copied", tiered, copied)
}

// A delta with no row deleted reads the changed rows alone (the source counts the
// rest), when Postgres guarantees the key unique; one with a deletion, or a key not
// guaranteed unique, reads every id.
// Either way the version is exactly a full copy's.
func TestDeltaReadsChangedRowsOnly(t *testing.T) {
	// The changed ids' parent entries come from merging the chain's runs, or, with a
	// run cache, from lookups in its decoded runs.
	t.Run("merged runs", func(t *testing.T) { testDeltaReadsChangedRowsOnly(t, false) })
	t.Run("run cache lookups", func(t *testing.T) { testDeltaReadsChangedRowsOnly(t, true) })
}

func testDeltaReadsChangedRowsOnly(t *testing.T, cached bool) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	r.Pub.Incremental = true
	if cached {
		r.Writer.Runs = layer.NewRunCache(r.Store, 1<<20)
	}
	full := r.Twin()
	r.Publish(t, r.Pub)
	r.Publish(t, full)
	check := func(what string, wantMode snapshot.LayerMode, stmts ...string) {
		t.Helper()
		r.Exec(t, stmts...)
		m := r.Publish(t, r.Pub)
		f := r.Publish(t, full)
		for name, c := range f.Collections {
			if d := m.Collections[name]; d.Rows != c.Rows || d.Bytes != c.Bytes || d.Digest != c.Digest {
				t.Errorf("%s: %s holds %d rows %d bytes %s; the full copy %d %d %s", what, name, d.Rows, d.Bytes, d.Digest, c.Rows, c.Bytes, c.Digest)
			}
		}
		if got, want := scanAll(t, r.Store, "ds", m.Chain("users")), scanAll(t, r.Store, "full", f.Chain("users")); !slices.Equal(got, want) {
			t.Errorf("%s: the chain reads %d users; the full copy %d", what, len(got), len(want))
		}
		if u := m.Collections["users"].Own; u.Mode != wantMode {
			t.Errorf("%s: users read in mode %q; want %q (own %+v)", what, u.Mode, wantMode, *u)
		}
	}
	check("updates and an insert", snapshot.ModeChangedOnly,
		`UPDATE users SET name = 'a' WHERE id IN ('u1', 'u2')`, `INSERT INTO users VALUES ('u100', 'new')`)
	check("the same value written again", snapshot.ModeChangedOnly, `UPDATE users SET name = name WHERE id = 'u3'`,
		`UPDATE users SET name = 'b' WHERE id = 'u4'`)
	check("a delete", snapshot.ModeRowVersion, `DELETE FROM users WHERE id = 'u5'`, `UPDATE users SET name = 'c' WHERE id = 'u6'`)
	check("a delete and an insert (the count alone would balance)", snapshot.ModeRowVersion,
		`DELETE FROM users WHERE id = 'u7'`, `INSERT INTO users VALUES ('u101', 'new')`)
	// u5's newest entry is the tombstone over the base's: it comes back as a new id.
	check("an id deleted by an earlier delta inserted again", snapshot.ModeChangedOnly,
		`INSERT INTO users VALUES ('u5', 'back')`, `UPDATE users SET name = 'd' WHERE id = 'u100'`)

	// orders has no unique key: a duplicate id added is caught, not published, even
	// when a deletion balances the count.
	r.Exec(t, `DELETE FROM orders WHERE id = 5`, `INSERT INTO orders VALUES (1, 'u1')`)
	if _, err := r.Pub.Publish(context.Background(), snapshot.PublishOptions{}); err == nil || !strings.Contains(err.Error(), "duplicate key") {
		t.Errorf("a duplicate id added to orders and a row deleted: publish = %v; want the duplicate key named", err)
	}
}

// A merge read from the changed rows alone keeps (copies) a merged delta's document
// that the source wrote again with the same value: its row version changed, its
// content did not, and the merged delta it lived in is replaced.
func TestSparseMergeKeepsRewrittenUnchangedRows(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("run cache %v", cached), func(t *testing.T) {
			r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
			r.Pub.Incremental, r.Writer.MaxLayers, r.Writer.RebaseRatio = true, 3, 100
			if cached {
				r.Writer.Runs = layer.NewRunCache(r.Store, 1<<20)
			}
			full := r.Twin()
			r.Publish(t, r.Pub)
			var m snapshot.Manifest
			for _, stmt := range []string{
				`UPDATE users SET name = 'one' WHERE id = 'u1'`,
				`UPDATE users SET name = 'two' WHERE id = 'u2'`,
				// The merge: u1 (in the merged deltas) written again unchanged, u3 changed.
				`UPDATE users SET name = name WHERE id = 'u1'; UPDATE users SET name = 'three' WHERE id = 'u3'`,
			} {
				r.Exec(t, stmt)
				m = r.Publish(t, r.Pub)
				f := r.Publish(t, full)
				if got, want := scanAll(t, r.Store, "ds", m.Chain("users")), scanAll(t, r.Store, "full", f.Chain("users")); !slices.Equal(got, want) {
					t.Fatalf("after %q the chain reads %v;\nthe full copy %v", stmt, got, want)
				}
				if d, c := m.Collections["users"], f.Collections["users"]; d.Digest != c.Digest || d.Rows != c.Rows {
					t.Fatalf("after %q: %d rows %s; the full copy %d %s", stmt, d.Rows, d.Digest, c.Rows, c.Digest)
				}
			}
			if u := m.Collections["users"]; u.Layers[0].Merged != 2 || u.Own.Mode != snapshot.ModeChangedOnly || u.Own.Copied != 2 {
				t.Errorf("the merge: layer %+v, own %+v; want two deltas merged from the changed rows alone, u1 and u2 copied", u.Layers[0], *u.Own)
			}
		})
	}
}

// A table with inheritance children: its primary key does not cover theirs, so a
// duplicate id in a child with a row deleted (a balanced count) is still caught.
func TestChangedRowsOnlyNotForInheritance(t *testing.T) {
	r := rig.New(t, []pgsource.Collection{{Name: "items", Table: "items", Key: "id"}},
		`CREATE TABLE items (id int PRIMARY KEY, v text)`, `CREATE TABLE items_more () INHERITS (items)`,
		`INSERT INTO items SELECT g, 'x' FROM generate_series(1, 20) g`)
	r.Pub.Incremental = true
	r.Publish(t, r.Pub)
	r.Exec(t, `DELETE FROM items WHERE id = 5`, `INSERT INTO items_more VALUES (1, 'dup')`)
	if _, err := r.Pub.Publish(context.Background(), snapshot.PublishOptions{}); err == nil || !strings.Contains(err.Error(), "duplicate key") {
		t.Errorf("a duplicate id in an inheritance child and a row deleted: publish = %v; want the duplicate key named", err)
	}
}

// A version past half its TTL on an unpinned dataset is published again by the next
// tick, though nothing changed, and both the result and the audit entry say why (ttl);
// a tick before that is a no-op with no reason.
func TestTTLRepublishSaysWhy(t *testing.T) {
	r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
	r.Pub.Incremental = true
	r.Pub.Audit = r.Store
	ctx := context.Background()
	tk := r.Ticker(t, "a")
	first, err := tk.Tick(ctx, 1, snapshot.PublishOptions{})
	if err != nil || first.Publish.NoOp {
		t.Fatalf("first tick: %+v, %v", first, err)
	}
	r.Pub.TTL = time.Hour
	quiet, err := tk.Tick(ctx, 2, snapshot.PublishOptions{})
	if err != nil || !quiet.Publish.NoOp || quiet.Publish.Reason != "" {
		t.Fatalf("tick within half the TTL: %+v, %v; want a no-op with no reason", quiet.Publish, err)
	}
	now := time.Now().Add(31 * time.Minute)
	r.Pub.Now = func() time.Time { return now }
	r.Writer.Now = r.Pub.Now
	res, err := tk.Tick(ctx, 3, snapshot.PublishOptions{})
	if err != nil || res.Publish.NoOp || res.Publish.Reason != snapshot.ReasonTTL {
		t.Fatalf("tick past half the TTL: %+v, %v; want a publish with reason %q", res.Publish, err, snapshot.ReasonTTL)
	}
	entries, err := r.Store.ListAudit(ctx, "ds", 1)
	if err != nil || len(entries) != 1 || entries[0].To != res.Publish.Manifest.Version || entries[0].Reason != string(snapshot.ReasonTTL) {
		t.Errorf("newest audit entry = %+v, %v; want the republish of %s with reason %q", entries, err, res.Publish.Manifest.Version, snapshot.ReasonTTL)
	}
}

// withWriter returns a copy of p writing with a copy of w that change made.
func withWriter(p *snapshot.Publisher, w *layer.Writer, change func(*layer.Writer)) *snapshot.Publisher {
	wc, pc := *w, *p
	change(&wc)
	pc.Data = &wc
	return &pc
}
