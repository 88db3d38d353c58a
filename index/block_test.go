package index

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// Sorted entries packed into blocks decode to themselves, each block alone, every
// block keyed by its last entry and full but the last.
func TestBlocksRoundTrip(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, BlockEntries - 1, BlockEntries, BlockEntries + 1, 3000} {
		set := map[string]bool{}
		for len(set) < n {
			// Shared prefixes of every length, and long entries that fill blocks by bytes.
			e := strings.Repeat("k", rnd.IntN(4)) + string(rune('a'+rnd.IntN(3))) + strings.Repeat("x", rnd.IntN(3)*rnd.IntN(200)) + "\x00" + string(rune(rnd.IntN(0x10000)))
			set[e] = true
		}
		var want []string
		for e := range set {
			want = append(want, e)
		}
		slices.Sort(want)
		var p Packer
		var got []string
		var blocks int
		check := func(key string, body []byte) {
			t.Helper()
			blocks++
			entries, err := BlockEntriesOf(body)
			if err != nil {
				t.Fatal(err)
			}
			if !IsBlock(body) || len(entries) == 0 || entries[len(entries)-1] != key {
				t.Fatalf("n=%d: a block keyed %q holds %d entries ending %q", n, key, len(entries), entries)
			}
			if len(entries) < BlockEntries && len(body) < BlockBytes && len(got)+len(entries) < n {
				t.Fatalf("n=%d: block %d holds %d entries, %d bytes, and is not the last", n, blocks, len(entries), len(body))
			}
			got = append(got, entries...)
		}
		for _, e := range want {
			if key, body, full := p.Add(e); full {
				check(key, body)
			}
		}
		if key, body, ok := p.Flush(); ok {
			check(key, body)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("n=%d: %d entries back of %d", n, len(got), len(want))
		}
	}
}

// A body that is not a whole block is an error, never a panic.
func TestBlockCorrupt(t *testing.T) {
	var p Packer
	p.Add("abc\x00x")
	p.Add("abd\x00y")
	_, body, _ := p.Flush()
	for i := range len(body) {
		if _, err := BlockEntriesOf(body[:i]); err == nil && i != 1 && i != len(body)-5 {
			t.Errorf("%d bytes of %d decoded", i, len(body))
		}
	}
	if _, err := BlockEntriesOf([]byte("1")); err == nil {
		t.Error("an entry's body decoded as a block")
	}
	if IsBlock(EntryBody) || IsBlock(nil) {
		t.Error("an entry or a tombstone taken for a block")
	}
}
