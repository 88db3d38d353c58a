package layer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// sharedParts shares bases on st as the replica holder, in parts of rows ids, its
// claims kept in cells and lapsing after claim.
func sharedParts(st *store.Store, holder string, rows int64, cells store.LeaseCell, claim time.Duration) *layer.Parts {
	return &layer.Parts{Rows: rows, Marks: st.Cells(), Lease: func(name string, before func(context.Context, uint64) error) (snapshot.Lease, error) {
		return store.NewLeaseOn(cells, name, store.LeaseConfig{Holder: holder, Duration: claim, BeforeAcquire: before})
	}}
}

// Two replicas share a base read from the source: the builder (the lease holder)
// and another that reads parts of it from the last down, while rows change. With
// the other replica killed inside a part (its claim lapses and the builder reads
// that part itself), with the builder killed inside its first chunk, just after
// it, and in a later part (the next builder goes on where it stood, with the same
// parts, and takes what the other replica read), and with neither killed, in both
// watch modes: the version that takes the base equals a full copy, no row is read
// twice but a killed replica's chunk or part in flight, and both replicas read a
// share.
func TestSharedBaseTwoReplicas(t *testing.T) {
	for _, mode := range []string{"stats", "logical"} {
		t.Run(mode+"/none killed", func(t *testing.T) { sharedBase(t, mode, false, 0) })
		t.Run(mode+"/other killed", func(t *testing.T) { sharedBase(t, mode, true, 0) })
		for _, at := range []int64{100, 151, 500} {
			t.Run(fmt.Sprintf("%s/builder killed at row %d", mode, at), func(t *testing.T) { sharedBase(t, mode, false, at) })
		}
	}
}

func sharedBase(t *testing.T, mode string, kill bool, killBuilder int64) {
	const rows, part = 3000, 400
	h, _ := newAcctRig(t, rows, 150)
	if mode == "logical" {
		h.Stream(t, fmt.Sprintf("snapflip_shared_%v_%d", kill, killBuilder))
	}
	close(h.src.gate)
	h.Publish(t, h.Pub)

	// The other replica: a source, writer and claims of its own.
	other, err := pgsource.New(h.DSN, acctCols)
	if err != nil {
		t.Fatal(err)
	}
	other.PartitionMinRows, other.BaseChunkRows = 100, 150
	t.Cleanup(func() { _ = other.Close(context.Background()) })
	cells := &rig.KillableCells{LeaseCell: h.Store.Cells()}
	// Claims lapse only when their holder stops renewing them: a replica slowed
	// by a loaded machine keeps its parts. Where the other replica is killed, its
	// claim lapses soon for the builder, which takes it over and judges the lapse
	// by its own duration; the other replica's own claims stay a minute long, so
	// that a slow renewal never makes it drop a part before it is killed.
	claim := time.Minute
	if kill {
		claim = 300 * time.Millisecond
	}
	otherSrc := &rig.KillingSource{Source: other}
	ctx, stopOther := context.WithCancel(context.Background())
	var read atomic.Int64 // parts the other replica read
	holderSrc := &rig.KillingSource{Source: h.Pub.Source, FirstPart: make(chan struct{})}
	var goOnce sync.Once
	// Rows change while the base is read, in the parts either replica reads.
	goOn := func() {
		goOnce.Do(func() {
			h.Exec(t, `UPDATE acct SET v = -v WHERE id IN (3, 160, 700, 2950)`, `DELETE FROM acct WHERE id IN (5, 1200)`,
				`INSERT INTO acct VALUES (5000, 1), (99, 0) ON CONFLICT (id) DO UPDATE SET v = 7`)
			close(holderSrc.FirstPart)
		})
	}
	reader := &layer.PartReader{Dataset: rig.Dataset, Source: otherSrc, Records: h.Store, Syncer: "syncer-2", Every: 5 * time.Millisecond,
		Versions: snapshot.NewVersionGen(uuid.New(), nil), Parts: sharedParts(h.Store, "syncer-2", part, cells, time.Minute),
		Writer: &layer.Writer{Store: h.Store, MaxDocumentBytes: 1 << 20, Observer: snapshot.ObserverFunc(func(_ context.Context, e snapshot.Event) {
			if e.Kind == snapshot.EventBasePartRead && read.Add(1) == 2 {
				goOn() // the builder goes on once the other replica read two parts
				if killBuilder > 0 {
					stopOther() // and reads the rest itself, to be killed in a later part
				}
			}
		})}}
	if kill {
		otherSrc.KillAt = part + part/2 // inside its second part
		otherSrc.Kill = func() { cells.Killed.Store(true); stopOther(); goOn() }
	}
	done := make(chan struct{})
	go func() { defer close(done); reader.Run(ctx) }()
	t.Cleanup(func() { stopOther(); <-done })

	var taken, resumed atomic.Int64 // documents the builder took from the other replica's parts; bases resumed
	h.Writer.Observer = snapshot.ObserverFunc(func(_ context.Context, e snapshot.Event) {
		switch e.Kind {
		case snapshot.EventBasePartTaken:
			taken.Add(e.Attr("rows").(int64))
		case snapshot.EventBaseResumed:
			resumed.Add(1)
		}
	})
	c, stop := h.StartCompactor(holderSrc)
	c.Parts = sharedParts(h.Store, "syncer-1", part, h.Store.Cells(), claim)
	defer func() { stop(); c.Wait() }()
	if killBuilder > 0 {
		holderSrc.KillAt, holderSrc.Kill = killBuilder, stop
	}
	h.Exec(t, `ALTER TABLE acct ADD COLUMN note text DEFAULT 'x'`)
	if v := h.Publish(t, h.Pub); v.Collections["acct"].Held == nil {
		t.Fatalf("acct = %+v; want held while its base is read", v.Collections["acct"])
	}
	c.Wait()
	builderRows := holderSrc.Rows.Load()
	if killBuilder > 0 && builderRows < killBuilder {
		t.Fatalf("the builder read %d rows: not killed at %d", builderRows, killBuilder)
	}
	if killBuilder > 0 {
		// The next builder, with no base in hand, goes on where the record says.
		next := &rig.KillingSource{Source: h.Pub.Source}
		c2, stop2 := h.StartCompactor(next)
		c2.Parts = sharedParts(h.Store, "syncer-3", part, h.Store.Cells(), time.Minute)
		defer func() { stop2(); c2.Wait() }()
		h.Exec(t, `UPDATE items SET n = n + 1`)
		if v := h.Publish(t, h.Pub); v.Collections["acct"].Held == nil {
			t.Fatalf("acct = %+v; want held until the base is read", v.Collections["acct"])
		}
		c2.Wait()
		if resumed.Load() != 1 {
			t.Errorf("%d bases resumed; want the killed builder's", resumed.Load())
		}
		builderRows += next.Rows.Load()
	}
	stopOther()
	<-done
	h.Exec(t, `UPDATE items SET n = n + 1`)
	v := h.Publish(t, h.Pub)
	// The catch-up may be empty: a part read after a change already holds it.
	if a := v.Collections["acct"]; a.Held != nil || len(a.Layers) > 2 || a.Layers[len(a.Layers)-1].Kind != snapshot.LayerBase {
		t.Fatalf("acct = %+v; want the shared base, caught up", a)
	}
	if got, want := h.served(t, v, "acct"), h.full(t, "acct"); !slices.Equal(got, want) {
		t.Fatalf("%s serves %d acct documents; a full copy %d", v.Version, len(got), len(want))
	}
	parts, otherRows := reader.PartsRead()
	otherSent := otherSrc.Rows.Load()
	t.Logf("%s, other killed=%v, builder killed at %d: the other replica read %d parts, %d rows (%d sent by its source); the builder read %d rows from the source, took %d",
		mode, kill, killBuilder, parts, otherRows, otherSent, builderRows, taken.Load())
	// A builder killed after it took parts takes them again, from storage.
	if (parts == 0 && !kill) || taken.Load() < otherRows || (killBuilder == 0 && taken.Load() != otherRows) || builderRows == 0 {
		t.Fatalf("the other replica read %d parts (%d rows), the builder took %d rows and read %d: want a share each, all taken",
			parts, otherRows, taken.Load(), builderRows)
	}
	// Every row is read once from the source, but a killed replica's part or chunk
	// in flight.
	lost := otherSent - otherRows
	if kill && (lost == 0 || lost > part*3/2) {
		t.Errorf("the killed replica lost %d rows; want its part in flight", lost)
	}
	if !kill && lost != 0 {
		t.Errorf("%d rows the other replica read were not taken", lost)
	}
	inFlight := int64(0)
	if killBuilder > 0 {
		inFlight = 150 // the builder's chunk
	}
	if total := builderRows + otherRows; total > rows+2+inFlight {
		t.Errorf("the builder and the other replica read %d rows that were taken, of %d", total, rows+2)
	}
}
