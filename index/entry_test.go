package index

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"testing"
)

// randomBytes returns up to n bytes, mostly from a small alphabet with the bytes
// the escaping handles (0x00, 0x01, 0x02) so that collisions and prefixes are common.
func randomBytes(r *rand.Rand, n int) []byte {
	alphabet := []byte{0, 1, 2, 'a', 0xff}
	b := make([]byte, r.IntN(n+1))
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return b
}

// Entry ids sort as (key, id) tuples, parse back to both, and fall in EntrySpan(r)
// exactly when their key falls in r.
func TestEntryIDsOrderAsTuples(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		k1, k2 := randomBytes(r, 4), randomBytes(r, 4)
		id1, id2 := string(randomBytes(r, 3)), string(randomBytes(r, 3))
		e1, e2 := EntryID(k1, id1), EntryID(k2, id2)
		want := cmp.Or(bytes.Compare(k1, k2), cmp.Compare(id1, id2))
		if got := cmp.Compare(e1, e2); got != want {
			t.Fatalf("EntryID(%q,%q) vs EntryID(%q,%q) compares %d; want %d", k1, id1, k2, id2, got, want)
		}
		key, id, err := ParseEntryID(e1)
		if err != nil || !bytes.Equal(key, k1) || id != id1 {
			t.Fatalf("ParseEntryID(EntryID(%q, %q)) = %q, %q, %v", k1, id1, key, id, err)
		}
		rg := Range{Start: randomBytes(r, 3), End: randomBytes(r, 3)}
		if r.IntN(3) == 0 {
			rg.End = nil
		}
		in := bytes.Compare(k1, rg.Start) >= 0 && (rg.End == nil || bytes.Compare(k1, rg.End) < 0)
		sp := EntrySpan(rg)
		got := (e1 > sp.From || sp.Inclusive && e1 == sp.From) && (sp.To == "" || e1 < sp.To) && !sp.Empty()
		if got != in {
			t.Fatalf("entry of key %q in EntrySpan(%q..%q) = %v; want %v", k1, rg.Start, rg.End, got, in)
		}
	}
}

// ParseEntryID refuses what EntryID cannot make.
func TestParseEntryIDRefusesMalformed(t *testing.T) {
	for _, e := range []string{"", "abc", "\x01", "\x01\x03\x00x", "a\x01"} {
		if _, _, err := ParseEntryID(e); err == nil {
			t.Errorf("ParseEntryID(%q) = nil error", e)
		}
	}
}
