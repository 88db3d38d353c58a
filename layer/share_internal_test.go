package layer

import (
	"context"
	"sync"
	"testing"
)

// mapCells are conditional cells in a map.
type mapCells struct {
	mu    sync.Mutex
	cells map[string][]byte
}

func (m *mapCells) ReadLease(_ context.Context, name string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cells[name], nil
}

func (m *mapCells) SwapLease(_ context.Context, name string, prev, next []byte) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if string(m.cells[name]) != string(prev) || (m.cells[name] == nil) != (prev == nil) {
		return false, nil
	}
	m.cells[name] = next
	return true, nil
}

// A claim taken over raises the part's fence before it is given: the claim before
// it, late, can no longer mark the part read, so its layer is never taken; a mark
// written before the fence rose stands, and an earlier claim's never replaces a
// later one's.
func TestAMarkBehindTheFenceIsRefused(t *testing.T) {
	ctx := context.Background()
	ps := &Parts{Marks: &mapCells{cells: map[string][]byte{}}}
	const name = "base-part-mark/ds/users/v1/3"
	mustMark := func(m partMark, want bool) {
		t.Helper()
		ok, err := ps.writeMark(ctx, name, m)
		if err != nil || ok != want {
			t.Fatalf("mark %+v: %v, %v; want %v", m, ok, err, want)
		}
	}
	read := func() *partMark {
		t.Helper()
		m, _, err := ps.readMark(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if taken(read()) {
		t.Fatal("a part no claim marked reads as taken")
	}
	if err := ps.fence(ctx, name, 1); err != nil {
		t.Fatal(err)
	}
	if err := ps.fence(ctx, name, 2); err != nil { // the claim of token 1 lapsed: 2 takes over
		t.Fatal(err)
	}
	mustMark(partMark{Claim: 1, Layer: "late", Rows: 5}, false)
	if taken(read()) {
		t.Fatalf("the late claim's mark reads as taken: %+v", read())
	}
	mustMark(partMark{Claim: 2, Layer: "v2", Rows: 7}, true)
	if m := read(); !taken(m) || m.Layer != "v2" || m.Fence != 2 {
		t.Fatalf("mark = %+v; want claim 2's", m)
	}
	if err := ps.fence(ctx, name, 3); err != nil { // a later claim finds it read
		t.Fatal(err)
	}
	if m := read(); !taken(m) || m.Layer != "v2" || m.Fence != 3 {
		t.Fatalf("mark = %+v; want claim 2's behind fence 3", m)
	}
	mustMark(partMark{Claim: 2, Layer: "again"}, false)
}
