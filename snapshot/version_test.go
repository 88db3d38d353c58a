package snapshot

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestVersionGenUniqueWithinAMillisecond(t *testing.T) {
	frozen := time.UnixMilli(1_700_000_000_000)
	g := NewVersionGen(uuid.New(), func() time.Time { return frozen })
	var mu sync.Mutex
	seen := map[Version]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				v := g.Next()
				mu.Lock()
				if seen[v] {
					t.Errorf("version %s made twice", v)
				}
				seen[v] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != 800 {
		t.Errorf("made %d distinct versions; want 800", len(seen))
	}
}

func TestVersionGenMonotonicWhenClockStepsBack(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	g := NewVersionGen(uuid.New(), func() time.Time { return now })
	a := g.Next()
	now = now.Add(-time.Hour)
	b := g.Next()
	if b.Millis() <= a.Millis() {
		t.Errorf("after the clock stepped back: %d not after %d", b.Millis(), a.Millis())
	}
}

func TestParseVersion(t *testing.T) {
	id := uuid.New()
	good := NewVersionGen(id, nil).Next()
	got, err := ParseVersion(string(good))
	if err != nil || got != good {
		t.Fatalf("ParseVersion(%q) = %q, %v", good, got, err)
	}
	if got.ClientID() != id.String() {
		t.Errorf("ClientID = %s; want %s", got.ClientID(), id)
	}
	if d := time.Since(got.Time()); d < 0 || d > time.Minute {
		t.Errorf("Time = %s; want about now", got.Time())
	}
	bad := []string{
		"", "x", id.String(), id.String() + "-", id.String() + "-01", id.String() + "-12a",
		id.String() + "-12345678901234", "7B1E4C1A-3F7E-4C57-9D0C-0A5D2C1F8E21-1",
		"../../etc/passwd", id.String() + "-1\x00", "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz-1",
	}
	for _, s := range bad {
		if _, err := ParseVersion(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseVersion(%q) = %v; want ErrInvalid", s, err)
		}
	}
}

func FuzzParseVersion(f *testing.F) {
	f.Add("7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1763737200000")
	f.Add("")
	f.Add("7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		if err != nil {
			return
		}
		if string(v) != s || v.Millis() < 0 {
			t.Fatalf("ParseVersion(%q) = %q", s, v)
		}
		if again, err := ParseVersion(v.ClientID() + "-" + strconv.FormatInt(v.Millis(), 10)); err != nil || again != v {
			t.Fatalf("re-formatting %q gives %q, %v", v, again, err)
		}
	})
}

func TestDigestIsOrderIndependent(t *testing.T) {
	var a, b, c Digest
	a.AddDocument("1", []byte("x"))
	a.AddDocument("2", []byte("y"))
	b.AddDocument("2", []byte("y"))
	b.AddDocument("1", []byte("x"))
	if a != b {
		t.Errorf("digest depends on order: %s vs %s", a, b)
	}
	c.AddDocument("1", []byte("x"))
	c.AddDocument("2", []byte("z"))
	if a == c {
		t.Error("digest did not change with a document")
	}
	var p1, p2 Digest
	p1.AddDocument("1", []byte("x"))
	p2.AddDocument("2", []byte("y"))
	p1.Add(p2)
	if p1 != a {
		t.Error("combined partial digests differ from the whole")
	}
	// The id/body boundary is part of the hash.
	var d1, d2 Digest
	d1.AddDocument("ab", []byte("c"))
	d2.AddDocument("a", []byte("bc"))
	if d1 == d2 {
		t.Error("digest confuses id and body bytes")
	}
}

func TestTransitions(t *testing.T) {
	tests := []struct {
		from, to State
		want     bool
	}{
		{StateWriting, StateSealed, true},
		{StateWriting, StatePublished, false},
		{StateSealed, StatePublished, true},
		{StateSealed, StateWriting, false},
		{StatePublished, StateRetired, true},
		{StatePublished, StateRolledBack, true},
		{StateFailed, StateSealed, false},
		{StateRetired, StatePublished, true},
		{StateWriting, StateUnchanged, true},
		{StateUnchanged, StatePublished, false},
		{StateSealed, StateUnchanged, false},
	}
	for _, tt := range tests {
		if got := CanTransition(tt.from, tt.to); got != tt.want {
			t.Errorf("CanTransition(%s, %s) = %v; want %v", tt.from, tt.to, got, tt.want)
		}
	}
	for _, s := range []State{StateWriting, StateFailed, StateUnchanged} {
		if s.Servable() {
			t.Errorf("%s is servable", s)
		}
	}
}

// An equal WAL position alone does not prove the same contents: a commit record is
// written before its transaction becomes visible.
func TestSameContentsNeedsTheSameSnapshot(t *testing.T) {
	a := Position{LSN: 100, PgSnapshot: "10:12:10", Config: "c"}
	b := Position{LSN: 100, PgSnapshot: "12:12:", Config: "c"}
	if a.SameContents(b, []string{"x"}) {
		t.Error("positions with one LSN but different snapshots were called the same")
	}
	if !a.SameContents(a, []string{"x"}) {
		t.Error("a position is not the same as itself")
	}
	if b.SnapshotXmin() != 12 || (Position{}).SnapshotXmin() != 0 {
		t.Errorf("SnapshotXmin = %d, %d", b.SnapshotXmin(), (Position{}).SnapshotXmin())
	}
}

func TestDigestSubAndParse(t *testing.T) {
	var a, b Digest
	a.AddDocument("x", []byte(`{"a":1}`))
	a.AddDocument("y", []byte(`{"b":2}`))
	b.AddDocument("x", []byte(`{"a":1}`))
	a.Sub(Contribution("y", []byte(`{"b":2}`)))
	if a != b {
		t.Errorf("subtracting a pair's contribution: got %s, want %s", a, b)
	}
	p, err := ParseDigest(a.String())
	if err != nil || p != a {
		t.Errorf("ParseDigest(%s) = %s, %v", a, p, err)
	}
	if _, err := ParseDigest("zz"); err == nil {
		t.Error("ParseDigest accepted zz")
	}
}
