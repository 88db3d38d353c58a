package pgsource

import (
	"math"
	"strconv"
	"testing"
)

// What is left of a digit range after an id is exactly its ids whose text sorts
// after that id's bytes: checked against every id of the ranges over -1200..1200,
// and at the ends of int8.
func TestRangeAfterAnID(t *testing.T) {
	ranges := digitRanges(-1200, 1200)
	lasts := []string{"-", "-0", "-1", "-10", "-1000", "-11", "-119", "-2", "-5", "-9", "-99", "-999",
		"0", "1", "10", "100", "1000", "1199", "12", "2", "5", "55", "9", "99", "999", "99999", ":"}
	for _, last := range lasts {
		for _, rg := range ranges {
			left := rg.after(last)
			for v := rg.lo; v <= rg.hi; v++ {
				want := strconv.FormatInt(v, 10) > last
				if got := left.lo <= v && v <= left.hi; got != want {
					t.Fatalf("range %+v after %q = %+v: holds %d is %t; want %t", rg, last, left, v, got, want)
				}
			}
		}
	}
	top := digitRanges(math.MinInt64, math.MaxInt64)
	for _, tc := range []struct {
		last   string
		lo, hi int64
	}{
		{"9223372036854775806", math.MaxInt64, math.MaxInt64},
		{"9223372036854775807", 1, 0},
		{"-9223372036854775807", math.MinInt64, math.MinInt64},
		{"-9223372036854775808", 1, 0},
	} {
		var got idRange
		for _, rg := range top {
			if rg.lo == math.MinInt64 || rg.hi == math.MaxInt64 {
				if l := rg.after(tc.last); (rg.hi == math.MaxInt64) == (tc.last[0] != '-') {
					got = l
				}
			}
		}
		if got.lo != tc.lo || got.hi != tc.hi {
			t.Errorf("the last range after %s = %d..%d; want %d..%d", tc.last, got.lo, got.hi, tc.lo, tc.hi)
		}
	}
}
