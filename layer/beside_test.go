package layer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// gatedScanner is a chain scanner whose scans wait for the gate to open (a base
// held in flight), and can be made to fail.
type gatedScanner struct {
	layer.ChainScanner
	gate   chan struct{}
	fail   error
	flaky  atomic.Int32 // reads still to fail as unreachable
	reads  atomic.Int32
	tamper atomic.Bool // change the first document each read returns
}

func (g *gatedScanner) ScanSpan(ctx context.Context, in snapshot.ChainRef, span snapshot.Span, limit int) ([]snapshot.Document, bool, error) {
	if span.From == "" || span.Inclusive {
		select { // the gate is passed once per base, at its first span
		case <-g.gate:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	g.reads.Add(1)
	if g.fail != nil {
		return nil, false, g.fail
	}
	if g.flaky.Add(-1) >= 0 {
		return nil, false, fmt.Errorf("read span: %w", snapshot.ErrUnavailable)
	}
	docs, more, err := g.ChainScanner.ScanSpan(ctx, in, span, limit)
	if err == nil && len(docs) > 0 && g.tamper.Load() {
		docs[0].Body = []byte(`{"id":"` + docs[0].ID + `","name":"tampered"}`)
	}
	return docs, more, err
}

// besideRig is a rig whose writer builds bases beside the stream, with a full-copy
// twin to compare each version with.
type besideRig struct {
	*rig.Rig
	c    *layer.Compactor
	docs *gatedScanner
	full *snapshot.Publisher
}

func newBesideRig(t *testing.T) *besideRig { return newBesideRigOf(t, nil) }

// newBesideRigOf is newBesideRig over the collections cols, whose tables the test
// makes (nil: the rig's two, made).
func newBesideRigOf(t *testing.T, cols []pgsource.Collection) *besideRig {
	var r *rig.Rig
	if cols == nil {
		r = rig.New(t, rig.TwoCollections, rig.TwoTables...)
	} else {
		r = rig.New(t, cols)
	}
	r.Pub.Incremental, r.Writer.MaxLayers, r.Writer.RebaseRatio = true, 3, 0.5
	r.Writer.BesideMinRows = 1
	full := r.Twin()
	docs := &gatedScanner{ChainScanner: r.Store, gate: make(chan struct{})}
	c := &layer.Compactor{Dataset: rig.Dataset, Writer: r.Writer, Docs: docs, Versions: r.Pub.Versions, RowsPerSecond: -1}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); c.Wait() })
	c.Start(ctx)
	r.Writer.Compactor, r.Pub.Bases = c, c
	return &besideRig{Rig: r, c: c, docs: docs, full: full}
}

// publish publishes the rig's version and its twin's, and checks that they hold the
// same documents.
func (b *besideRig) publish(t *testing.T) snapshot.Manifest {
	t.Helper()
	m := b.Publish(t, b.Pub)
	f := b.Publish(t, b.full)
	for _, name := range []string{"users", "orders"} {
		got, want := m.Collections[name], f.Collections[name]
		if got.Rows != want.Rows || got.Digest != want.Digest {
			t.Fatalf("version %s %s: %d rows, digest %s; a full copy: %d, %s", m.Version, name, got.Rows, got.Digest, want.Rows, want.Digest)
		}
		if g, w := scanCollection(t, b.Store, rig.Dataset, m.Chain(name), name), scanCollection(t, b.Store, "full", f.Chain(name), name); !slices.Equal(g, w) {
			t.Fatalf("version %s %s reads %d documents, a full copy %d:\n%q\n%q", m.Version, name, len(g), len(w), g, w)
		}
	}
	return m
}

// A chain that grows large against its base gets a base compacted from storage
// beside the stream: the versions meanwhile stay deltas, a merge never reaches into
// the chain the base replaces, and a later version takes the base under the layers
// published since, holding exactly what a full copy of its snapshot holds.
func TestRebaseBesideTheStream(t *testing.T) {
	b := newBesideRig(t)
	v1 := b.publish(t)
	b.Exec(t, `UPDATE users SET name = name || '!' WHERE id <= 'u4'`) // 34 of 50 rows: past rebase_ratio
	v2 := b.publish(t)
	b.Exec(t, `UPDATE users SET name = 'v3' WHERE id = 'u7'`)
	v3 := b.publish(t)
	if k := v3.Collections["users"].Own.Kind; k != snapshot.LayerDelta {
		t.Fatalf("v3's users layer is a %s; want a delta while a base is built beside the stream", k)
	}
	if p := b.c.Progress(); len(p) != 1 || p[0].Collection != "users" || p[0].From != v2.Version || p[0].State != "building" {
		t.Fatalf("progress = %+v; want users' base from %s building", p, v2.Version)
	}
	// The chain is at max_layers: the next delta merges, but only what lies above
	// the chain the base replaces.
	b.Exec(t, `UPDATE users SET name = 'v4' WHERE id = 'u8'`, `DELETE FROM users WHERE id = 'u9'`)
	v4 := b.publish(t)
	u4 := v4.Collections["users"]
	if want := []snapshot.Version{v4.Version, v2.Version, v1.Version}; !slices.Equal(versionsOf(u4.Layers), want) || u4.Layers[0].Merged != 1 {
		t.Fatalf("v4's users chain = %v (merged %d); want %v, merging v3 alone", versionsOf(u4.Layers), u4.Layers[0].Merged, want)
	}
	close(b.docs.gate)
	b.c.Wait()
	p := b.c.Progress()
	if len(p) != 1 || p[0].State != "built" || p[0].Rows != v2.Collections["users"].Rows {
		t.Fatalf("progress = %+v; want users' base built with %d rows", p, v2.Collections["users"].Rows)
	}

	b.Exec(t, `INSERT INTO users VALUES ('u99', 'v5')`, `UPDATE users SET name = 'v5' WHERE id = 'u2'`)
	v5 := b.publish(t)
	u5 := v5.Collections["users"]
	if len(u5.Layers) != 3 || u5.Layers[0].Version != v5.Version || u5.Layers[1].Version != v4.Version ||
		u5.Layers[2].Kind != snapshot.LayerBase || u5.Layers[2].Version == v1.Version || u5.Layers[0].Merged != 0 {
		t.Fatalf("v5's users chain = %+v; want [v5, v4, a new base]", u5.Layers)
	}
	if u5.Own.Inserted != 1 || u5.Own.Changed != 1 {
		t.Errorf("v5's users layer = %+v; want 1 inserted, 1 changed", u5.Own)
	}
	if o := v5.Collections["orders"]; !slices.Equal(versionsOf(o.Layers), []snapshot.Version{v1.Version}) {
		t.Errorf("orders' chain = %v; want v1's, untouched", versionsOf(o.Layers))
	}
	if p := b.c.Progress(); len(p) != 1 || p[0].State != "taken" {
		t.Fatalf("progress once v5 that took the base is current = %+v; want it taken", p)
	}
	b.Exec(t, `UPDATE users SET name = 'v6' WHERE id = 'u3'`)
	v6 := b.publish(t)
	if got := versionsOf(v6.Collections["users"].Layers); got[len(got)-1] != u5.Layers[2].Version {
		t.Errorf("v6's users chain = %v; want it on the new base", got)
	}
	if p := b.c.Progress(); len(p) != 1 || p[0].State != "taken" {
		t.Errorf("progress once v6 is published over the base = %+v; want it taken", p)
	}
	d, err := layer.Diff(context.Background(), b.Store, layer.DiffRequest{Dataset: rig.Dataset, From: v4.Version, To: v5.Version})
	if err != nil || d["users"].Added != 1 || d["users"].Changed != 1 || d["users"].Removed != 0 {
		t.Errorf("diff v4 → v5 = %+v, %v; want 1 added, 1 changed", d["users"], err)
	}
}

// A built base whose chain the current version no longer ends with is dropped,
// never swapped in; a failed one is tried again only after its backoff, and leaves
// the versions as they were.
func TestBaseBesideDroppedOrRetried(t *testing.T) {
	b := newBesideRig(t)
	b.publish(t)
	b.Exec(t, `UPDATE users SET name = name || '!' WHERE id <= 'u4'`)
	v2 := b.publish(t)
	b.docs.fail = errors.New("storage unavailable")
	now := time.Now()
	b.c.Now = func() time.Time { return now }
	b.c.RetryAfter = time.Minute
	b.c.Want(v2, "users", "test")
	close(b.docs.gate)
	b.c.Wait()
	if p := b.c.Progress(); len(p) != 1 || p[0].State != "failed" || !p[0].RetryAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("progress = %+v; want failed, retried in a minute", p)
	}
	if _, swapped := b.c.Swap(v2, nil); swapped != nil {
		t.Fatalf("a failed base swapped %v", swapped)
	}
	b.c.Want(v2, "users", "test") // within the backoff: nothing
	if p := b.c.Progress(); p[0].State != "failed" {
		t.Fatalf("wanted again within the backoff: %+v", p)
	}
	b.docs.fail = nil
	now = now.Add(time.Minute)
	b.c.Want(v2, "users", "test")
	b.c.Wait()
	// A base from storage changes no document: a version that did not count the
	// collection's rows (held) takes it as well.
	if _, swapped := b.c.Swap(v2, []string{"users"}); !slices.Equal(swapped, []string{"users"}) {
		t.Fatalf("after the retry, Swap(v2, held users) swapped %v; want users", swapped)
	}
	if _, swapped := b.c.Swap(v2, nil); !slices.Equal(swapped, []string{"users"}) {
		t.Fatalf("after the retry, Swap(v2) swapped %v; want users", swapped)
	}
	// A version whose chain does not end with v2's (here: the chain replaced by a
	// new base) drops the built base.
	other := v2
	other.Collections = map[string]snapshot.CollectionStats{"users": {Layers: []snapshot.LayerRef{{Version: "other-1", Kind: snapshot.LayerBase}}},
		"orders": v2.Collections["orders"]}
	if _, swapped := b.c.Swap(other, nil); swapped != nil {
		t.Fatalf("Swap of another chain swapped %v", swapped)
	}
	if _, swapped := b.c.Swap(v2, nil); swapped != nil || len(b.c.Progress()) != 0 {
		t.Fatalf("the dropped base still swaps %v; progress %+v", swapped, b.c.Progress())
	}
}

// The keep-alive of a layered dataset past half its TTL builds each old chain's base
// from storage beside the stream and republishes only once every one is built: the
// republish takes them, renders no source row, and its data is fresh.
func TestKeepAliveBesideReadsNoSource(t *testing.T) {
	b := newBesideRig(t)
	b.Pub.TTL = time.Hour
	ctx := context.Background()
	tk := b.Ticker(t, "a")
	// A version compares the rows whose xmin is in its parent's window (from the
	// oldest transaction running when the parent's snapshot was taken) again: a
	// transaction of another test, in another database of the server, still
	// running when v1 is read would put the rows just written in it. Wait until
	// every transaction older than them has ended.
	testenv.Eventually(t, time.Minute, func() error {
		var settled bool
		testenv.QueryRow(t, b.DSN, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint % 4294967296 >
			(SELECT max(x) FROM (SELECT xmin::text::bigint AS x FROM users UNION ALL SELECT xmin::text::bigint FROM orders) AS w)`, &settled)
		if !settled {
			return fmt.Errorf("a transaction older than the rows written is still running")
		}
		return nil
	})
	first, err := tk.Tick(ctx, 1, snapshot.PublishOptions{})
	if err != nil || first.Publish.NoOp {
		t.Fatalf("first tick: %+v, %v", first, err)
	}
	v1 := first.Publish.Manifest
	now := time.Now().Add(31 * time.Minute)
	clock := func() time.Time { return now }
	b.Pub.Now, b.Writer.Now, b.c.Now = clock, clock, clock
	waiting, err := tk.Tick(ctx, 2, snapshot.PublishOptions{})
	if err != nil || !waiting.Publish.NoOp {
		t.Fatalf("tick past half the TTL, bases in flight: %+v, %v; want a no-op", waiting.Publish, err)
	}
	if p := b.c.Progress(); len(p) != 2 || p[0].State != "building" || p[1].State != "building" {
		t.Fatalf("progress = %+v; want a base of each collection building", p)
	}
	close(b.docs.gate)
	b.c.Wait()
	res, err := tk.Tick(ctx, 3, snapshot.PublishOptions{})
	if err != nil || res.Publish.NoOp || res.Publish.Reason != snapshot.ReasonTTL {
		t.Fatalf("tick once the bases are built: %+v, %v; want a republish", res.Publish, err)
	}
	m := res.Publish.Manifest
	for name, c := range m.Collections {
		old := v1.Collections[name]
		if len(c.Layers) != 1 || c.Layers[0].Kind != snapshot.LayerBase || c.Layers[0].Version == old.Layers[0].Version ||
			!c.Layers[0].DataTime.Equal(now) || c.Rows != old.Rows || c.Digest != old.Digest {
			t.Errorf("%s: chain %+v, %d rows %s; want one new base of v1's %d rows %s, data time %s", name, c.Layers, c.Rows, c.Digest, old.Rows, old.Digest, now)
		}
		if c.Own == nil || c.Own.Rendered != 0 || c.Own.Mode != snapshot.ModeSameFingerprint {
			t.Errorf("%s: own layer %+v; want nothing read from the source", name, c.Own)
		}
	}
	if age := now.Sub(m.DataTime()); age != 0 {
		t.Errorf("the republished version's data is %s old; want fresh", age)
	}
}

// A chain whose base is small gets its base in the version that needs it: building
// it beside the stream would save that version nothing.
func TestSmallBaseInTheVersion(t *testing.T) {
	b := newBesideRig(t)
	b.Writer.BesideMinRows = 51
	b.publish(t)
	b.Exec(t, `UPDATE users SET name = name || '!' WHERE id <= 'u4'`)
	b.publish(t)
	b.Exec(t, `UPDATE users SET name = 'v3' WHERE id = 'u7'`)
	v3 := b.publish(t)
	if k := v3.Collections["users"].Own.Kind; k != snapshot.LayerBase || len(b.c.Progress()) != 0 {
		t.Fatalf("users' layer of 50 documents is a %s, bases beside %+v; want a base in the version", k, b.c.Progress())
	}
}

// Random histories of row changes, column changes and bases beside the stream built,
// held back or let through at random: every version holds exactly what a full copy
// of its snapshot holds, whichever chains took which bases.
func TestBesideRandomHistories(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 54))
			b := newBesideRig(t)
			b.Writer.MaxLayers = 2 + rng.IntN(4)
			b.Writer.RebaseRatio = 0.1 + rng.Float64()
			allow := make(chan struct{}, 64)
			b.docs.gate = allow
			b.publish(t)
			swaps, extra := 0, 0
			for step := range 30 {
				n := 1 + rng.IntN(20)
				switch rng.IntN(10) {
				case 0:
					extra++
					b.Exec(t, fmt.Sprintf(`ALTER TABLE users ADD COLUMN extra%d int DEFAULT %d`, extra, step))
				case 1, 2:
					b.Exec(t, fmt.Sprintf(`DELETE FROM users WHERE id IN (SELECT id FROM users ORDER BY md5(id || '%d') LIMIT %d)`, step, n/4+1))
				case 3:
					b.Exec(t, fmt.Sprintf(`INSERT INTO users SELECT 'n%d-' || g, 'new' FROM generate_series(1, %d) g`, step, n))
				default:
					b.Exec(t, fmt.Sprintf(`UPDATE users SET name = 's%d' WHERE id IN (SELECT id FROM users ORDER BY md5(id || '%d') LIMIT %d)`, step, step, n),
						fmt.Sprintf(`UPDATE orders SET user_id = 's%d' WHERE id %% %d = 0`, step, 2+rng.IntN(30)))
				}
				if rng.IntN(3) == 0 {
					for range 1 + rng.IntN(2) {
						allow <- struct{}{}
					}
					if rng.IntN(2) == 0 {
						b.c.Wait()
					}
				}
				m := b.publish(t)
				for _, c := range m.Collections {
					if l := c.Layers[len(c.Layers)-1]; l.Kind == snapshot.LayerBase && l.Version != m.Version && !slices.ContainsFunc(c.Layers[:len(c.Layers)-1], func(r snapshot.LayerRef) bool { return r.Version == l.Version }) {
						if _, err := b.Store.ReadManifest(context.Background(), rig.Dataset, l.Version); err != nil {
							swaps++ // a base no publish wrote: built beside the stream
						}
					}
				}
			}
			close(allow)
			t.Logf("seed %d: max_layers %d, rebase_ratio %.2f: %d versions on a base built beside the stream", seed, b.Writer.MaxLayers, b.Writer.RebaseRatio, swaps)
		})
	}
}

// A span of a base's chain that finds storage unreachable is read again, and the
// base completes.
func TestBaseBesideReadsASpanAgain(t *testing.T) {
	b := newBesideRig(t)
	b.publish(t)
	b.Exec(t, `UPDATE users SET name = name || '!' WHERE id <= 'u4'`)
	v2 := b.publish(t)
	b.docs.flaky.Store(2)
	close(b.docs.gate)
	b.c.Want(v2, "users", "test")
	b.c.Wait()
	if p := b.c.Progress(); len(p) != 1 || p[0].State != "built" || p[0].Rows != v2.Collections["users"].Rows {
		t.Fatalf("progress = %+v; want the base built", p)
	}
	if n := b.docs.reads.Load(); n != 3 {
		t.Errorf("%d span reads; want 3 (two unreachable, then the one span)", n)
	}
}

// A long base beside the stream logs its progress against the rows of the chain it
// is built from: rows, bytes, percent and an ETA.
func TestBaseBesideReportsProgress(t *testing.T) {
	b := newBesideRig(t)
	b.Exec(t, `INSERT INTO users SELECT 'p' || g, 'n' FROM generate_series(1, 3000) g`)
	v1 := b.publish(t)
	var mu sync.Mutex
	var seen []snapshot.Event
	b.Writer.ProgressEvery = time.Nanosecond
	b.Writer.Observer = snapshot.ObserverFunc(func(_ context.Context, e snapshot.Event) {
		if e.Kind == snapshot.EventCopying {
			mu.Lock()
			seen = append(seen, e)
			mu.Unlock()
		}
	})
	close(b.docs.gate)
	b.c.Want(v1, "users", "test")
	b.c.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 || seen[0].Attr("expected") != v1.Collections["users"].Rows || seen[0].Attr("eta") == nil {
		t.Fatalf("progress events = %+v; want them against %d expected rows, with an ETA", seen, v1.Collections["users"].Rows)
	}
}

// A base whose documents differ from what the chain it replaces holds (here: one
// document changed on its way from storage) fails on its digest and is never taken.
func TestBaseBesideThatDisagreesIsNeverTaken(t *testing.T) {
	b := newBesideRig(t)
	b.publish(t)
	b.Exec(t, `UPDATE users SET name = name || '!' WHERE id <= 'u4'`)
	v2 := b.publish(t)
	b.docs.tamper.Store(true)
	close(b.docs.gate)
	b.c.Want(v2, "users", "test")
	b.c.Wait()
	p := b.c.Progress()
	if len(p) != 1 || p[0].State != "failed" || p[0].Err == nil || !strings.Contains(p[0].Err.Error(), "digest") {
		t.Fatalf("progress = %+v; want the base failed on its digest", p)
	}
	if _, swapped := b.c.Swap(v2, nil); swapped != nil {
		t.Fatalf("a base that disagrees with its chain swapped %v", swapped)
	}
	b.Exec(t, `UPDATE users SET name = 'v3' WHERE id = 'u7'`)
	v3 := b.publish(t) // holds what a full copy holds: the tampered base is in no chain
	if last := v3.Collections["users"].Layers; last[len(last)-1].Version != v2.Collections["users"].Layers[len(v2.Collections["users"].Layers)-1].Version {
		t.Errorf("v3's users chain %v does not end with v2's base", versionsOf(last))
	}
}

// A chain that waits for a base beside the stream waits only so long: at three
// quarters of the TTL, or with deltas of twice rebase_ratio, the version writes the
// base itself, as without a Compactor.
func TestBaseBesideGivesWay(t *testing.T) {
	t.Run("age", func(t *testing.T) {
		b := newBesideRig(t)
		b.Pub.TTL = time.Hour
		tk := b.Ticker(t, "a")
		ctx := context.Background()
		if _, err := tk.Tick(ctx, 1, snapshot.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
		now := time.Now().Add(46 * time.Minute) // the gate stays shut: no base is built beside
		clock := func() time.Time { return now }
		b.Pub.Now, b.Writer.Now, b.c.Now = clock, clock, clock
		res, err := tk.Tick(ctx, 2, snapshot.PublishOptions{})
		if err != nil || res.Publish.NoOp || res.Publish.Reason != snapshot.ReasonTTL {
			t.Fatalf("tick at 46 minutes of a 1 h TTL: %+v, %v; want a republish", res.Publish, err)
		}
		for name, c := range res.Publish.Manifest.Collections {
			if c.Own == nil || c.Own.Kind != snapshot.LayerBase || c.Own.Rendered == 0 {
				t.Errorf("%s: own layer %+v; want a base read from the source", name, c.Own)
			}
		}
	})
	t.Run("deltas", func(t *testing.T) {
		b := newBesideRig(t)
		b.publish(t)
		b.Exec(t, `UPDATE users SET name = name || '!' WHERE id <= 'u4'`) // 34 of 50: past 0.5
		b.publish(t)
		b.Exec(t, `UPDATE users SET name = name || '?'`) // 50 more: past twice 0.5
		v3 := b.publish(t)
		if k := v3.Collections["users"].Own.Kind; k != snapshot.LayerDelta {
			t.Fatalf("users' layer over deltas of 34 rows is a %s; want a delta while the base is built beside", k)
		}
		b.Exec(t, `UPDATE users SET name = 'v4' WHERE id = 'u1'`)
		v4 := b.publish(t)
		if k := v4.Collections["users"].Own.Kind; k != snapshot.LayerBase {
			t.Fatalf("users' layer over deltas of 84 rows on a base of 50 is a %s; want a base", k)
		}
	})
}

// A base's record in storage tells an operator, from any process, where it stands:
// building while its reads wait, with the rows written and expected; built once
// written; taken once a version holds it; dropped when the chain moves away first.
func TestBaseBesideIsRecorded(t *testing.T) {
	b := newBesideRig(t)
	b.c.Records, b.c.Syncer, b.c.RecordEvery = b.Store, "syncer-1", time.Millisecond
	ctx := context.Background()
	record := func(want string) snapshot.BaseStatus {
		t.Helper()
		var rec snapshot.BaseStatus
		testenv.Eventually(t, 30*time.Second, func() error {
			recs, err := b.Store.ListBases(ctx, rig.Dataset)
			if err != nil {
				return err
			}
			if len(recs) != 1 || recs[0].State != want {
				return fmt.Errorf("records = %+v; want one, %s", recs, want)
			}
			rec = recs[0]
			return nil
		})
		return rec
	}
	v1 := b.publish(t)
	b.c.Want(v1, "users", "keep-alive test")
	rec := record("building")
	if rec.Collection != "users" || rec.From != v1.Version || rec.Why != "keep-alive test" || rec.Expected != v1.Collections["users"].Rows ||
		rec.Writer != "syncer-1" || rec.Layer == "" || rec.Started.IsZero() {
		t.Errorf("record while building = %+v; want users from %s, why, %d expected, by syncer-1, its layer", rec, v1.Version, v1.Collections["users"].Rows)
	}
	close(b.docs.gate)
	b.c.Wait()
	built := record("built")
	if built.Rows != built.Expected || built.Bytes == 0 || built.Layer != rec.Layer {
		t.Errorf("record once built = %+v; want every row written, their bytes, the same layer", built)
	}
	b.Exec(t, `UPDATE users SET name = 'taken' WHERE id = 'u1'`)
	v2 := b.publish(t)
	b.c.Wait()
	if taken := record("taken"); taken.Layer != v2.Chain("users")[len(v2.Chain("users"))-1] {
		t.Errorf("taken record names layer %s; v2's chain ends with %s", taken.Layer, v2.Chain("users")[len(v2.Chain("users"))-1])
	}

	// A base whose chain the current version no longer ends with (a rollback to v1)
	// is dropped.
	b.c.Want(v2, "users", "again")
	b.c.Wait()
	record("built")
	if _, swapped := b.c.Swap(v1, nil); swapped != nil {
		t.Fatalf("v1 took a base built from v2's chain: %v", swapped)
	}
	b.c.Wait()
	record("dropped")
}
