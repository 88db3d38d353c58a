package client

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestReplicaCollApply: random changes applied flip after flip, many enough to fold
// the changes into new bases several times, leave each version's collection and its
// index equal to a plain map built alongside, and every older version as it was.
func TestReplicaCollApply(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	doc := func(id string, g int) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"id":%q,"g":%d,"x":%d}`, id, g, rnd.IntN(1000)))
	}
	want := map[string]json.RawMessage{}
	for i := range 500 {
		id := fmt.Sprintf("k%d", i)
		want[id] = doc(id, i%7)
	}
	c := newReplicaColl(maps.Clone(want), []string{"g"})
	type version struct {
		c    *replicaColl
		want map[string]json.RawMessage
	}
	var past []version
	folds := 0
	for flip := range 300 {
		past = append(past, version{c, maps.Clone(want)})
		changes := map[string]json.RawMessage{}
		for range 1 + rnd.IntN(40) {
			id := fmt.Sprintf("k%d", rnd.IntN(3000))
			if rnd.IntN(3) == 0 {
				changes[id] = nil
				delete(want, id)
			} else {
				changes[id] = doc(id, rnd.IntN(7))
				want[id] = changes[id]
			}
		}
		c = c.apply(changes)
		if c.over == nil {
			folds++
		}
		if flip%10 == 0 || flip == 299 {
			checkColl(t, flip, c, want)
		}
	}
	if folds < 2 {
		t.Errorf("the changes were folded into a base %d times; want the test to fold several times", folds)
	}
	// Versions held by older views are untouched by the flips after them.
	for i, v := range past {
		if i%25 == 0 {
			checkColl(t, i, v.c, v.want)
		}
	}
}

// TestIndexKeys: values equal as JSON values share a key; values of different kinds
// do not.
func TestIndexKeys(t *testing.T) {
	same := [][]any{
		{1, 1.0, json.Number("1.0"), json.RawMessage("1e0"), int64(1), uint8(1)},
		{"é", json.RawMessage(`"\u00e9"`)},
		{nil, json.RawMessage("null")},
		{true, json.RawMessage("true")},
		{map[string]int{"a": 1, "b": 2}, json.RawMessage(`{"b": 2, "a": 1.0}`)},
		{int64(1) << 60, json.RawMessage("1152921504606846976")},
	}
	keys := map[string]int{}
	for group, vs := range same {
		for _, v := range vs {
			k, err := lookupKey(v)
			if err != nil {
				t.Fatalf("%#v: %v", v, err)
			}
			if g, ok := keys[k]; ok && g != group {
				t.Errorf("%#v has the key of group %d; want group %d's", v, g, group)
			}
			keys[k] = group
		}
	}
	if len(keys) != len(same) {
		t.Errorf("%d keys for %d groups of equal values: %q", len(keys), len(same), slices.Collect(maps.Keys(keys)))
	}
	for _, pair := range [][2]any{{"1", 1}, {"true", true}, {"null", nil}, {int64(1)<<60 + 1, int64(1) << 60}} {
		a, _ := lookupKey(pair[0])
		b, _ := lookupKey(pair[1])
		if a == b {
			t.Errorf("%#v and %#v share a key", pair[0], pair[1])
		}
	}
	if _, err := lookupKey(func() {}); err == nil {
		t.Error("a func has a key; want an error")
	}
}

func checkColl(t *testing.T, flip int, c *replicaColl, want map[string]json.RawMessage) {
	t.Helper()
	if c.n != len(want) {
		t.Fatalf("flip %d: %d documents; want %d", flip, c.n, len(want))
	}
	for id, body := range want {
		if got, ok := c.get(id); !ok || string(got) != string(body) {
			t.Fatalf("flip %d: %s = %s (%t); want %s", flip, id, got, ok, body)
		}
	}
	seen := 0
	c.each(func(id string, body []byte) bool {
		seen++
		if _, ok := want[id]; !ok {
			t.Fatalf("flip %d: %s held; want it deleted", flip, id)
		}
		return true
	})
	if seen != len(want) {
		t.Fatalf("flip %d: each visited %d documents; want %d", flip, seen, len(want))
	}
	byG := map[string][]string{}
	for id, body := range want {
		k, _ := fieldKey(body, "g")
		byG[k] = append(byG[k], id)
	}
	for g := range 7 {
		k, _ := lookupKey(g)
		w := byG[k]
		slices.Sort(w)
		if got := c.indexes["g"].ids(k); !slices.Equal(got, w) {
			t.Fatalf("flip %d: index g=%d holds %q; want %q", flip, g, got, w)
		}
	}
}

// TestReplicaGetDoesNotAllocate: Get, hit or miss, with changes beside the base or
// without, allocates nothing.
func TestReplicaGetDoesNotAllocate(t *testing.T) {
	docs := map[string]json.RawMessage{"a": json.RawMessage(`{"g":1}`), "b": json.RawMessage(`{"g":2}`)}
	c := newReplicaColl(docs, []string{"g"})
	r := &Replica{}
	for _, coll := range []*replicaColl{c, c.apply(map[string]json.RawMessage{"b": nil, "c": json.RawMessage(`{}`)})} {
		r.state.Store(&replicaState{version: "v", colls: replicaColls{{"items", coll}}})
		id := string([]byte("a")) // not a constant: as a request's id would be
		if n := testing.AllocsPerRun(1000, func() {
			if _, ok := r.Get("items", id); !ok {
				t.Fatal("missed")
			}
			r.Get("items", "zz")
			r.Get("nope", id)
		}); n != 0 {
			t.Errorf("Get allocates %.1f times a call; want none", n)
		}
	}
}
