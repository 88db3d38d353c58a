package layer_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// A syncer killed while it reads a base in chunks (before the first chunk is in
// storage, at a chunk's last row, just after, and inside chunks) leaves a record of
// where the base stands; the next syncer goes on from there, reading the source
// only from the last chunk in storage, and the version that takes the base, caught
// up from the base's position over rows changed meanwhile, equals a full copy. In
// both watch modes.
func TestBaseResumesWhereItStood(t *testing.T) {
	const rows, chunk = 1500, 200
	for _, mode := range []string{"stats", "logical"} {
		for _, killAt := range []int64{150, chunk, chunk + 1, 999, 1400} {
			t.Run(fmt.Sprintf("%s/kill at row %d", mode, killAt), func(t *testing.T) {
				resumeAfterKill(t, mode, rows, chunk, killAt, false)
			})
		}
		// One chunk, its place said every chunk rows within it.
		t.Run(mode+"/one chunk, kill at row 999", func(t *testing.T) { resumeAfterKill(t, mode, rows, chunk, 999, true) })
	}
}

func resumeAfterKill(t *testing.T, mode string, rows, chunk int, killAt int64, marksWithin bool) {
	t.Cleanup(layer.SetReplayPage(70)) // what was written is read back in many spans
	h, ps := newAcctRig(t, rows, chunk)
	if marksWithin {
		ps.BaseChunkRows, ps.BaseMarkRows = -1, chunk
	}
	if mode == "logical" {
		h.Stream(t, fmt.Sprintf("snapflip_resume_%d_%v", killAt, marksWithin))
	}
	close(h.src.gate)
	v1 := h.Publish(t, h.Pub)

	// A syncer whose Compactor the source kills at the row killAt of a base.
	src := &rig.KillingSource{Source: h.Pub.Source, KillAt: killAt}
	c1, kill := h.StartCompactor(src)
	src.Kill = kill
	h.Exec(t, `ALTER TABLE acct ADD COLUMN note text DEFAULT 'x'`)
	v2 := h.Publish(t, h.Pub)
	if v2.Collections["acct"].Held == nil {
		t.Fatalf("v2's acct = %+v; want held while its base is read", v2.Collections["acct"])
	}
	c1.Wait()
	if src.Rows.Load() < killAt {
		t.Fatalf("the base read %d rows; want the kill at %d", src.Rows.Load(), killAt)
	}
	readBefore := src.Rows.Load()
	// Rows change while no syncer runs: the catch-up from the base's position finds them.
	h.Exec(t, `UPDATE acct SET v = -v WHERE id IN (3, 160, 700, 1450)`, `DELETE FROM acct WHERE id IN (5, 1200)`,
		`INSERT INTO acct VALUES (2000, 1), (99, 0) ON CONFLICT (id) DO UPDATE SET v = 7`)

	var resumed atomic.Int64
	h.Writer.Observer = snapshot.ObserverFunc(func(_ context.Context, e snapshot.Event) {
		if e.Kind == snapshot.EventBaseResumed {
			resumed.Add(1)
		}
	})
	c2, stop := h.StartCompactor(src)
	defer func() { stop(); c2.Wait() }()
	h.Exec(t, `UPDATE items SET n = n + 1`)
	if v3 := h.Publish(t, h.Pub); v3.Collections["acct"].Held == nil {
		t.Fatalf("v3's acct = %+v; want held until the base is read", v3.Collections["acct"])
	}
	c2.Wait()
	h.Exec(t, `UPDATE acct SET v = 0 WHERE id = 10`)
	v4 := h.Publish(t, h.Pub)
	if v4.Collections["acct"].Held != nil {
		t.Fatalf("v4's acct = %+v; want the base taken", v4.Collections["acct"])
	}
	if a := v4.Collections["acct"]; len(a.Layers) != 2 || a.Layers[1].Kind != snapshot.LayerBase || a.Own == nil || a.Own.Mode.Kind == snapshot.KindContent {
		t.Fatalf("v4's acct = %+v (own %+v); want the base read beside the stream under a catch-up delta", a, a.Own)
	}
	if got, want := h.served(t, v4, "acct"), h.full(t, "acct"); !slices.Equal(got, want) {
		t.Fatalf("v4 serves %d acct documents; a full copy %d", len(got), len(want))
	}
	// The source was read again from the last chunk in storage at most.
	read := src.Rows.Load()
	recorded := (readBefore - 1) / int64(chunk) * int64(chunk) // rows in chunks that ended before the kill
	if killAt <= int64(chunk) {
		recorded = 0
	}
	if max := int64(rows+2) + readBefore - recorded; read > max {
		t.Errorf("the source sent %d rows in all (%d before the kill); want at most %d: the base read again from its last chunk", read, readBefore, max)
	}
	if killAt > int64(chunk) && (read >= readBefore+int64(rows) || resumed.Load() != 1) {
		t.Errorf("the source sent %d rows in all (%d before the kill), %d resumed: the base was read again from the start", read, readBefore, resumed.Load())
	}
	if killAt <= int64(chunk) && resumed.Load() != 0 {
		t.Errorf("a base killed before its first chunk was in storage resumed")
	}
	t.Logf("%s, killed at row %d: %d rows read before, %d in all; v1 %s", mode, killAt, readBefore, read, v1.Version)
}

// acctCols are the collections of newAcctRig.
var acctCols = []pgsource.Collection{{Name: "acct", Table: "acct", Key: "id"}, {Name: "items", Table: "items", Key: "id"}}

// newAcctRig returns a hold rig over acct, rows accounts with integer ids whose
// bases are read in chunks of chunk rows, and items, one row; and its source.
func newAcctRig(t *testing.T, rows, chunk int) (*holdRig, *pgsource.Source) {
	h := newHoldRigOf(t, acctCols)
	h.Exec(t, `CREATE TABLE acct (id bigint PRIMARY KEY, v int NOT NULL)`,
		fmt.Sprintf(`INSERT INTO acct SELECT g, g FROM generate_series(1, %d) g`, rows),
		`CREATE TABLE items (id int PRIMARY KEY, n int)`, `INSERT INTO items VALUES (1, 1)`)
	ps := h.Pub.Source.(*pgsource.Source)
	ps.PartitionMinRows, ps.BaseChunkRows = 100, chunk
	return h, ps
}
