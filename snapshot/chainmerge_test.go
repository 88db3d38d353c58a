package snapshot_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/snapflip/snapflip/snapshot"
)

// entry is a layer's entry that knows its layer, so that the winner of an id shows.
type entry struct {
	ID    string
	Dead  bool
	Layer int // index in the chain, newest first
}

func entryID(e entry) string { return e.ID }
func entryDead(e entry) bool { return e.Dead }

// failing is a layer that reports err after its entries.
type failing struct {
	snapshot.LayerSlice[entry]
	err error
}

func (f *failing) Peek() (entry, bool, error) {
	e, ok, _ := f.LayerSlice.Peek()
	if !ok {
		return e, false, f.err
	}
	return e, true, nil
}

// randomChain returns the layers of a random chain (newest first), some ids in many
// layers, some layers tombstones only, and the model of it: per id the newest layer's
// entry, tombstones included.
func randomChain(r *rand.Rand) ([][]entry, map[string]entry) {
	n := r.IntN(7)
	layers := make([][]entry, n)
	model := map[string]entry{}
	for l := n - 1; l >= 0; l-- { // oldest first, so that a newer layer overwrites
		dead := r.IntN(4)
		ids := map[string]bool{}
		for range r.IntN(30) {
			ids[fmt.Sprintf("id-%02d", r.IntN(40))] = true
		}
		for _, id := range slices.Sorted(maps.Keys(ids)) {
			e := entry{ID: id, Dead: dead == 3 || r.IntN(4) < dead, Layer: l}
			layers[l] = append(layers[l], e)
			model[id] = e
		}
	}
	return layers, model
}

func readers(layers [][]entry) []snapshot.LayerReader[entry] {
	rs := make([]snapshot.LayerReader[entry], len(layers))
	for i, l := range layers {
		s := snapshot.LayerSlice[entry](l)
		rs[i] = &s
	}
	return rs
}

// drain returns what m returns up to its end or its error.
func drain(tb testing.TB, m *snapshot.ChainMerge[entry]) ([]entry, error) {
	tb.Helper()
	var got []entry
	for {
		e, ok, err := m.Next()
		if err != nil || !ok {
			return got, err
		}
		if m.From() != e.Layer {
			tb.Fatalf("From() = %d after %+v", m.From(), e)
		}
		got = append(got, e)
	}
}

// A chain's merge is the model's: per id the newest layer's entry, in id order, with
// the tombstones when asked for and without them otherwise.
func TestChainMergeMatchesAModel(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for trial := range 2000 {
		layers, model := randomChain(r)
		for _, tombstones := range []bool{true, false} {
			var want []entry
			for _, id := range slices.Sorted(maps.Keys(model)) {
				if tombstones || !model[id].Dead {
					want = append(want, model[id])
				}
			}
			m := snapshot.NewChainMerge(readers(layers), entryID, entryDead)
			m.Tombstones = tombstones
			got, err := drain(t, m)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("trial %d (%d layers, tombstones %v): merge differs from the model (-want +got):\n%s",
					trial, len(layers), tombstones, diff)
			}
			if _, ok, err := m.Next(); ok || err != nil {
				t.Fatalf("trial %d: Next after the end = %v, %v", trial, ok, err)
			}
		}
	}
}

// A layer that fails ends the merge with its error, and what came before is the
// model's up to the failing layer's last entry: nothing it would have hidden.
func TestChainMergeStopsAtALayersError(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	boom := errors.New("boom")
	for trial := range 500 {
		layers, model := randomChain(r)
		if len(layers) == 0 {
			continue
		}
		bad := r.IntN(len(layers))
		cut := r.IntN(len(layers[bad]) + 1)
		rs := readers(layers)
		rs[bad] = &failing{snapshot.LayerSlice[entry](layers[bad][:cut]), boom}
		m := snapshot.NewChainMerge(rs, entryID, entryDead)
		m.Tombstones = true
		got, err := drain(t, m)
		if !errors.Is(err, boom) {
			t.Fatalf("trial %d: the merge ended with %v; want the layer's error", trial, err)
		}
		for _, e := range got {
			if cut == 0 || e.ID > layers[bad][cut-1].ID {
				t.Fatalf("trial %d: %+v returned past the failed layer's last entry", trial, e)
			}
			if model[e.ID] != e {
				t.Fatalf("trial %d: %+v returned; the model holds %+v", trial, e, model[e.ID])
			}
		}
		if _, _, again := m.Next(); !errors.Is(again, boom) {
			t.Fatalf("trial %d: Next after the error = %v", trial, again)
		}
	}
}

// Ids that do not increase are an error, not a wrong merge.
func TestChainMergeRefusesDisorder(t *testing.T) {
	layers := [][]entry{{{ID: "b"}}, {{ID: "a", Layer: 1}, {ID: "c", Layer: 1}, {ID: "b", Layer: 1}}}
	got, err := drain(t, snapshot.NewChainMerge(readers(layers), entryID, entryDead))
	if err == nil {
		t.Fatalf("merged %+v from layers out of order without an error", got)
	}
}

// A merge allocates nothing per entry: merging chains of 30 and of 30,000 entries
// costs the same allocations (those of building the merge and its readers).
func TestChainMergeAllocatesNothingPerEntry(t *testing.T) {
	chain := func(n int) [][]entry {
		layers := make([][]entry, 3)
		for i := range n {
			l := i % 3
			layers[l] = append(layers[l], entry{ID: fmt.Sprintf("id-%06d", i), Dead: i%7 == 0, Layer: l})
		}
		return layers
	}
	allocs := func(layers [][]entry, tombstones bool) float64 {
		return testing.AllocsPerRun(5, func() {
			m := snapshot.NewChainMerge(readers(layers), entryID, entryDead)
			m.Tombstones = tombstones
			for {
				if _, ok, err := m.Next(); err != nil || !ok {
					break
				}
			}
		})
	}
	small, large := chain(30), chain(30000)
	for _, tombstones := range []bool{false, true} {
		if a, b := allocs(small, tombstones), allocs(large, tombstones); b > a {
			t.Errorf("tombstones %v: %v allocations for 30 entries, %v for 30,000; want no more", tombstones, a, b)
		}
	}
}
