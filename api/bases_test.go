package api_test

import (
	"testing"
	"time"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/snapshot"
)

// A base's line says how far it is and, from its pace so far, how long is left; a
// base in building whose record stopped being updated is said to be last heard of
// then; one that failed says why and when it is tried again. Bases that ended over
// an hour ago are not shown; those in hand always are.
func TestBaseLine(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		b    snapshot.BaseStatus
		want string
	}{
		{snapshot.BaseStatus{Collection: "big", State: "building", Rows: 250, Expected: 1000, Bytes: 4096,
			Started: now.Add(-10 * time.Second), Updated: now, Writer: "syncer-7", Why: "keep-alive"},
			"base of big: building, 250 of 1000 rows (25%), 4.0 KiB, started 10s ago, about 30s left, by syncer-7; why: keep-alive"},
		{snapshot.BaseStatus{Collection: "big", State: "building", Rows: 250, Expected: 1000,
			Started: now.Add(-10 * time.Minute), Updated: now.Add(-8 * time.Minute), Why: "x"},
			"base of big: building, 250 of 1000 rows (25%), 0 B, started 10m0s ago, about 0s left, last heard of 8m0s ago; why: x"},
		{snapshot.BaseStatus{Collection: "t", State: "failed", Err: "unreachable", RetryAt: now.Add(time.Minute),
			Started: now.Add(-time.Minute), Updated: now, Why: "y"},
			"base of t: failed, 0 of 0 rows, 0 B, started 1m0s ago (unreachable; tried again at 12:01:00); why: y"},
		{snapshot.BaseStatus{Collection: "n", State: "built", Rows: 5, Expected: 5, Started: now.Add(-time.Second), Updated: now, Why: "z"},
			"base of n: built, 5 of 5 rows (100%), 0 B, started 1s ago; why: z"},
	} {
		if got := api.BaseLine(tc.b, now); got != tc.want {
			t.Errorf("BaseLine =\n%s\nwant\n%s", got, tc.want)
		}
	}
	recs := []snapshot.BaseStatus{
		{Collection: "a", State: "taken", Updated: now.Add(-2 * time.Hour)},
		{Collection: "b", State: "taken", Updated: now.Add(-time.Minute)},
		{Collection: "c", State: "building", Updated: now.Add(-3 * time.Hour)},
		{Collection: "d", State: "dropped", Updated: now.Add(-api.BasesShownFor)},
	}
	shown := api.BasesShown(recs, now)
	if len(shown) != 2 || shown[0].Collection != "b" || shown[1].Collection != "c" {
		t.Errorf("shown = %+v; want b (ended a minute ago) and c (in hand)", shown)
	}
}
