package api

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// noPointer is a Reader that has no pointer yet: the broadcaster's loop records
// nothing of its own.
type noPointer struct{ Reader }

func (noPointer) Pointer(context.Context) (snapshot.Pointer, error) {
	return snapshot.Pointer{}, snapshot.ErrNoVersion
}

// TestBroadcasterSkipsToTheKept: a watcher further behind than flipsKept changes skips
// to the oldest kept, in order, and the first it gets is a base, never a child of a
// version it does not hold; after that, each is a child of the one before.
func TestBroadcasterSkipsToTheKept(t *testing.T) {
	b := newBroadcaster(noPointer{}, time.Hour, 10, nil)
	w, err := b.join()
	if err != nil {
		t.Fatal(err)
	}
	defer b.leave(w)
	version := func(i int) snapshot.Version {
		return snapshot.Version(fmt.Sprintf("7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-%d", 1763737200000+i))
	}
	const flips = flipsKept + 36
	for i := 1; i <= flips; i++ {
		rec, err := newFlipRecord(flipEvent{Version: version(i), Parent: version(i - 1), Previous: version(i - 1)})
		if err != nil {
			t.Fatal(err)
		}
		b.add(context.Background(), rec)
	}
	recs, changed := b.since(w)
	if len(recs) != flipsKept || recs[0].event.Version != version(flips-flipsKept+1) || recs[len(recs)-1].event.Version != version(flips) {
		t.Fatalf("%d records from %s; want the last %d, from %s", len(recs), recs[0].event.Version, flipsKept, version(flips-flipsKept+1))
	}
	last := version(0) // what the watcher held before it fell behind
	for i, rec := range recs {
		want := FlipChild
		if i == 0 {
			want = FlipBase
		}
		if got := flipKind(last, rec.event); got != want {
			t.Errorf("record %d (%s) to a stream holding %s: kind %s; want %s", i, rec.event.Version, last, got, want)
		}
		last = rec.event.Version
	}
	if again, _ := b.since(w); len(again) != 0 {
		t.Errorf("%d records again; want none until the next change", len(again))
	}
	select {
	case <-changed:
		t.Fatal("changed closed with nothing new")
	default:
	}
	rec, err := newFlipRecord(flipEvent{Version: version(flips + 1), Parent: version(flips)})
	if err != nil {
		t.Fatal(err)
	}
	b.add(context.Background(), rec)
	select {
	case <-changed:
	default:
		t.Fatal("changed still open after a change")
	}
	if next, _ := b.since(w); len(next) != 1 || next[0].event.Version != version(flips+1) {
		t.Errorf("after one more change: %d records; want it alone", len(next))
	}
}
