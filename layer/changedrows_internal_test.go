package layer

import "testing"

// A keyed read reads up to a tenth of the parent's rows by id, at least
// maxChangedOnly and at most maxKeyed.
func TestKeyedLimit(t *testing.T) {
	for _, c := range []struct{ rows, want int64 }{
		{0, 20_000}, {60, 20_000}, {200_000, 20_000}, {200_010, 20_001},
		{1_000_000, 100_000}, {2_000_000, 200_000}, {5_000_000, 200_000},
	} {
		if got := keyedLimit(c.rows); got != c.want {
			t.Errorf("keyedLimit(%d) = %d; want %d", c.rows, got, c.want)
		}
	}
}
