package pgsource

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/testenv"
)

// A snapshot that does not see a transaction the stream delivered (its commit record
// decoded a moment before Postgres made it visible) reports a change again, so that
// the next version holds it; a snapshot that sees every held transaction reports
// nothing. Without the report, the transaction waited for the next scheduled sync.
func TestDeltaReportsTransactionsNotYetVisible(t *testing.T) {
	tests := []struct {
		name     string
		snapshot string // pg_current_snapshot(): xmin:xmax:xip
		want     int    // changes reported
	}{
		{"every held transaction visible", "106:106:", 0},
		{"one in progress for the snapshot", "100:110:105", 1},
		{"one at or past xmax", "100:105:", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []Change
			var log testenv.Log
			st := &stream{cfg: StreamConfig{CatchUp: time.Second, Observer: logEvents(slog.New(slog.NewTextHandler(&log, nil)))},
				moved: make(chan struct{}), fresh: true, rels: map[uint32]*streamRelation{}, recv: 1 << 20,
				held:    []*heldTxn{{xid: 99, commit: 10}, {xid: 105, commit: 20}},
				changed: func(c Change) { got = append(got, c) }}
			d, err := st.delta(context.Background(), tt.snapshot, 1<<16, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.want {
				t.Fatalf("reported %d changes, want %d: %+v", len(got), tt.want, got)
			}
			for _, c := range got {
				if c.Reason != ReasonStreamUnseen {
					t.Errorf("reason %q, want %q", c.Reason, ReasonStreamUnseen)
				}
			}
			if tt.want > 0 && d.pos.Resume != 20 {
				t.Errorf("resume %d, want the unseen transaction's commit 20", d.pos.Resume)
			}
		})
	}
}

// The stream's 32-bit ids get the epoch of the id within 2^31 of the last one, across
// the 2^32 boundary both ways; transactions let go are seen by a snapshot only when
// every id of their range ended and none was in progress.
func TestWidenAndLetGoSeen(t *testing.T) {
	st := &stream{xidRef: 1<<32 + 10}
	for _, c := range []struct {
		xid  uint32
		want uint64
	}{{5, 1<<32 + 5}, {20, 1<<32 + 20}, {0xfffffff0, 0xfffffff0}, {30, 1<<32 + 30}} {
		if got := st.widenLocked(c.xid); got != c.want {
			t.Errorf("widen(%d) = %d; want %d", c.xid, got, c.want)
		}
	}
	g := &letGo{lo: 100, hi: 100, base: 40, ids: []uint64{}}
	for _, x := range []uint64{100, 104, 107, 110} {
		g.add(x)
	}
	for _, c := range []struct {
		snap string
		want bool
	}{
		{"111:120:", true}, {"105:120:", true}, {"105:120:107", false}, {"105:120:115", true}, {"105:110:", false},
		{"105:120:106", true},       // 106 runs, but it is someone else's
		{"99:120:99,103,108", true}, // in progress, none let go
	} {
		vis, err := parseVisibility(c.snap)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.seenBy(vis); got != c.want {
			t.Errorf("seenBy(%s) = %v; want %v", c.snap, got, c.want)
		}
	}
}

// Ids far from the first one let go do not fit the bits: then any id in progress in
// the range counts, as if it were one of them.
func TestLetGoPastItsBits(t *testing.T) {
	g := &letGo{lo: 100, hi: 100, base: 90, ids: []uint64{}}
	g.add(100)
	g.add(90 + maxLetGoBits)
	if g.ids != nil {
		t.Fatal("the bits were kept past maxLetGoBits")
	}
	vis, _ := parseVisibility("99:200000000:150")
	if g.seenBy(vis) {
		t.Error("past its bits, an id in progress in the range was taken as someone else's")
	}
}
