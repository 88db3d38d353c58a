package layer

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/snapshot"
)

// memRuns holds runs in memory, chunked as a store keeps them.
type memRuns map[snapshot.Version][][]byte

func (m memRuns) ScanRun(_ context.Context, _ string, layer snapshot.Version, _ string, fn func([]byte) bool) error {
	for _, c := range m[layer] {
		if !fn(c) {
			return nil
		}
	}
	return nil
}

func (m memRuns) ScanRunFrom(_ context.Context, ref snapshot.RunRef, from int64, fn func([]byte) bool) error {
	for i, c := range m[ref.Layer] {
		if int64(i) >= from && !fn(c) {
			return nil
		}
	}
	return nil
}

func encodeRun(t testing.TB, entries []RunEntry, max int) [][]byte {
	t.Helper()
	var chunks [][]byte
	enc := newRunEncoder(max, func(_ context.Context, c []byte) error { chunks = append(chunks, c); return nil })
	for _, e := range entries {
		if err := enc.add(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return chunks
}

func randomID(r *rand.Rand) string {
	const alphabet = "ab\x00%,#$é"
	var b strings.Builder
	for range 1 + r.IntN(6) {
		b.WriteString(string([]rune(alphabet)[r.IntN(len([]rune(alphabet)))]))
	}
	return b.String()
}

// Entries survive encoding, in order, whatever the chunk size; each chunk decodes
// on its own.
func TestRunRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		ids := map[string]bool{}
		for range r.IntN(300) {
			ids[randomID(r)] = true
		}
		var want []RunEntry
		for _, id := range slices.Sorted(maps.Keys(ids)) {
			e := RunEntry{ID: id, Deleted: r.IntN(4) == 0}
			if !e.Deleted {
				e.Len = r.Int64N(1 << 40)
				e.Sum = snapshot.Digest{r.Uint64(), r.Uint64()}
			}
			want = append(want, e)
		}
		chunks := encodeRun(t, want, 1+r.IntN(400))
		var got []RunEntry
		for _, c := range chunks {
			if err := DecodeRunChunk(c, func(e RunEntry) error { got = append(got, e); return nil }); err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: round trip differs: got %d entries, want %d", trial, len(got), len(want))
		}
	}
}

func TestRunRefusesDisorderAndDamage(t *testing.T) {
	enc := newRunEncoder(0, func(context.Context, []byte) error { return nil })
	ctx := context.Background()
	if err := enc.add(ctx, RunEntry{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := enc.add(ctx, RunEntry{ID: "a"}); err == nil {
		t.Error("an id out of order was accepted")
	}
	chunks := encodeRun(t, []RunEntry{{ID: "a", Len: 3}, {ID: "ab", Deleted: true}}, 0)
	for cut := range len(chunks[0]) {
		if err := DecodeRunChunk(chunks[0][:cut], func(RunEntry) error { return nil }); err == nil {
			t.Errorf("a chunk cut at %d of %d bytes decoded", cut, len(chunks[0]))
		}
	}
}

// A chain's merged run is the model's live map: newest layer wins, tombstones drop.
func TestChainRunMatchesAModel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 100 {
		runs := memRuns{}
		var layers []snapshot.LayerRef
		model := map[string]RunEntry{}
		nlayers := 1 + r.IntN(5)
		for l := range nlayers { // oldest (base) first
			v := snapshot.Version(fmt.Sprintf("layer-%d", l))
			touched := map[string]RunEntry{}
			for range r.IntN(60) {
				id := randomID(r)
				e := RunEntry{ID: id, Len: r.Int64N(100), Sum: snapshot.Digest{r.Uint64(), 1}}
				if l > 0 && r.IntN(3) == 0 {
					e = RunEntry{ID: id, Deleted: true}
				}
				touched[id] = e
			}
			var entries []RunEntry
			for _, id := range slices.Sorted(maps.Keys(touched)) {
				entries = append(entries, touched[id])
				if touched[id].Deleted {
					delete(model, id)
				} else {
					model[id] = touched[id]
				}
			}
			runs[v] = encodeRun(t, entries, 1+r.IntN(200))
			layers = append([]snapshot.LayerRef{{Version: v}}, layers...)
		}
		cr := openChainRun(context.Background(), chainSource{st: runs, dataset: "ds"}, layers, "c")
		var got []RunEntry
		for {
			e, ok, err := cr.next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			got = append(got, e)
		}
		var want []RunEntry
		for _, id := range slices.Sorted(maps.Keys(model)) {
			want = append(want, model[id])
		}
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: merged run has %d entries, the model %d", trial, len(got), len(want))
		}

		// Through a run cache: the same merge from decoded runs, the same live count
		// (the shorter chain's remembered first), and lookups newest layer first that
		// answer what the model holds.
		cache := NewRunCache(runs, 1<<30)
		cr = openChainRun(context.Background(), chainSource{cache: cache, dataset: "ds"}, layers, "c")
		var cached []RunEntry
		for {
			e, ok, err := cr.next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			cached = append(cached, e)
		}
		if !slices.Equal(cached, want) {
			t.Fatalf("trial %d: merged through the cache, %d entries; the model %d", trial, len(cached), len(want))
		}
		decoded := make([]*decodedRun, len(layers))
		for i, l := range layers {
			var err error
			if decoded[i], err = cache.run(context.Background(), "ds", l.Version, "c", 0); err != nil || decoded[i] == nil {
				t.Fatalf("trial %d: run %s: %v", trial, l.Version, err)
			}
		}
		cache.liveCount("ds", "c", layers[1:], decoded[1:])
		if n := cache.liveCount("ds", "c", layers, decoded); n != int64(len(model)) {
			t.Fatalf("trial %d: live count %d; the model holds %d", trial, n, len(model))
		}
		for range 50 {
			id := randomID(r)
			if len(want) > 0 && r.IntN(2) == 0 {
				id = want[r.IntN(len(want))].ID
			}
			var found RunEntry
			live := false
			for _, d := range decoded {
				if e, ok := d.find(id); ok {
					found, live = e, !e.Deleted
					break
				}
			}
			if m, ok := model[id]; ok != live || (live && found != m) {
				t.Fatalf("trial %d: lookup of %q found %+v (live %v); the model %+v (%v)", trial, id, found, live, m, ok)
			}
		}
	}
}

// benchChain returns the runs of a chain of a 100,000-entry base and three deltas of
// 1,000 entries each (a quarter of them tombstones), newest first.
func benchChain(b *testing.B) (memRuns, []snapshot.LayerRef) {
	b.Helper()
	r := rand.New(rand.NewPCG(5, 6))
	runs := memRuns{}
	var layers []snapshot.LayerRef
	for l, n := range []int{100_000, 1_000, 1_000, 1_000} {
		v := snapshot.Version(fmt.Sprintf("layer-%d", l))
		ids := map[string]bool{}
		for len(ids) < n {
			ids[fmt.Sprintf("id-%07d", r.IntN(200_000))] = true
		}
		var entries []RunEntry
		for _, id := range slices.Sorted(maps.Keys(ids)) {
			e := RunEntry{ID: id, Len: 100, Sum: snapshot.Digest{r.Uint64(), 1}}
			if l > 0 && r.IntN(4) == 0 {
				e = RunEntry{ID: id, Deleted: true}
			}
			entries = append(entries, e)
		}
		runs[v] = encodeRun(b, entries, 0)
		layers = append([]snapshot.LayerRef{{Version: v, Docs: int64(n)}}, layers...)
	}
	return runs, layers
}

// Merging a chain's runs, decoded in a run cache (a syncer's steady state) and
// streamed from the store.
func BenchmarkChainRun(b *testing.B) {
	runs, layers := benchChain(b)
	scan := func(b *testing.B, open func() *chainRun) {
		for b.Loop() {
			cr := open()
			for {
				_, ok, err := cr.next()
				if err != nil {
					b.Fatal(err)
				}
				if !ok {
					break
				}
			}
		}
	}
	b.Run("cached", func(b *testing.B) {
		cache := NewRunCache(runs, 1<<30)
		for _, l := range layers { // decoded before the clock starts
			if r, err := cache.run(context.Background(), "ds", l.Version, "c", l.Docs); err != nil || r == nil {
				b.Fatalf("run %s: %v", l.Version, err)
			}
		}
		b.ReportAllocs()
		scan(b, func() *chainRun {
			return openChainRun(context.Background(), chainSource{cache: cache, dataset: "ds"}, layers, "c")
		})
	})
	b.Run("streamed", func(b *testing.B) {
		b.ReportAllocs()
		scan(b, func() *chainRun {
			return openChainRun(context.Background(), chainSource{st: runs, dataset: "ds"}, layers, "c")
		})
	})
}
