package snapshot_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/snapflip/snapflip/internal/memstore"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/snapshot"
)

// withCompactor gives the rig's publisher bases beside the stream, built by a
// Compactor that runs until the returned stop is called (a killed syncer's), and
// returns it.
func (r *memRig) withCompactor(tb testing.TB, docs layer.ChainScanner) (*layer.Compactor, func()) {
	tb.Helper()
	w := r.pub.Data.(*layer.Writer)
	w.BesideMinRows = 1
	c := &layer.Compactor{Dataset: "ds", Writer: w, Docs: docs, Versions: r.pub.Versions, RowsPerSecond: -1}
	ctx, cancel := context.WithCancel(context.Background())
	c.Start(ctx)
	w.Compactor, r.pub.Bases = c, c
	stop := func() { cancel(); c.Wait() }
	tb.Cleanup(stop)
	return c, stop
}

// blockingScans is a chain scanner whose reads wait until released, or fail once
// their context ends (a killed syncer).
type blockingScans struct {
	*memstore.Store
	release chan struct{}
}

func (b *blockingScans) ScanSpan(ctx context.Context, in snapshot.ChainRef, span snapshot.Span, limit int) ([]snapshot.Document, bool, error) {
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	return b.Store.ScanSpan(ctx, in, span, limit)
}

// Random histories on memory with bases beside the stream: builds let through,
// held back, or killed with their syncer and started again by another; every
// version holds what the source held when it was published, and a killed build
// leaves nothing any version names.
func TestBasesBesideOnMemory(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 54))
			r := newMemRig(t, 2+rng.IntN(3))
			r.pub.Data.(*layer.Writer).RebaseRatio = 0.2 + rng.Float64()/2
			scans := &blockingScans{Store: r.st, release: make(chan struct{}, 100)}
			c, stop := r.withCompactor(t, scans)
			ctx := context.Background()
			swapped, killed := map[snapshot.Version]bool{}, 0
			for step := range 40 {
				for range 1 + rng.IntN(8) {
					id := fmt.Sprintf("u%02d", rng.IntN(30))
					if rng.IntN(5) == 0 {
						r.src.Delete("users", id)
					} else {
						r.src.Put("users", id, fmt.Sprintf(`{"n":%d}`, step))
					}
				}
				switch rng.IntN(8) {
				case 0, 1:
					scans.release <- struct{}{}
					c.Wait()
				case 2:
					// The syncer is killed mid-build; its successor starts with no
					// build in hand.
					stop()
					killed++
					c, stop = r.withCompactor(t, scans)
				}
				want := r.model()
				res, err := r.pub.Publish(ctx, snapshot.PublishOptions{})
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				m, got := r.served(t)
				if !res.NoOp && m.Version != res.Manifest.Version {
					t.Fatalf("step %d: the pointer names %s, not the version published", step, m.Version)
				}
				if !sameContents(got, want) {
					t.Fatalf("step %d: version %s holds %v; the source held %v", step, m.Version, got, want)
				}
				for _, l := range m.Collections["users"].Layers {
					if _, err := r.st.ReadManifest(ctx, "ds", l.Version); err != nil {
						swapped[l.Version] = true // a layer no publish wrote: a base built beside
					}
				}
			}
			t.Logf("%d bases built beside the stream taken, %d builds killed", len(swapped), killed)
		})
	}
}
