package bench

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
)

// record adds f, a row of the table of figures `make bench` prints
// (docs/performance.md), to the file EnvFigures names; without one it does nothing.
// The row belongs to the top-level benchmark b is, or is under.
func record(b *testing.B, f Figure) {
	b.Helper()
	path := os.Getenv(EnvFigures)
	if path == "" {
		return
	}
	f.Benchmark, _, _ = strings.Cut(b.Name(), "/")
	if err := AppendFigure(path, f); err != nil {
		b.Errorf("record %q: %v", f.Measurement, err)
	}
}

// thousands formats x rounded to an integer, with commas between thousands: 52,528.
func thousands[N ~int | ~int64 | ~float64](n N) string {
	x := float64(n)
	s := fmt.Sprintf("%.0f", math.Abs(x))
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if x <= -0.5 {
		s = "-" + s
	}
	return s
}

// sizeSI formats a byte count in decimal units, with one decimal below ten: 44 KB,
// 4.4 MB, 404 MB.
func sizeSI(n int64) string {
	x, unit := float64(n), "B"
	for _, u := range []string{"KB", "MB", "GB", "TB"} {
		if x < 999.5 {
			break
		}
		x, unit = x/1000, u
	}
	if x < 9.95 && unit != "B" {
		return fmt.Sprintf("%.1f %s", x, unit)
	}
	return fmt.Sprintf("%.0f %s", x, unit)
}

// underMB says whether mib mebibytes are under limit megabytes (the targets are in MB).
func underMB(mib, limit float64) bool { return mib*(1<<20) < limit*1e6 }

func TestThousands(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{{0, "0"}, {999.4, "999"}, {1000, "1,000"}, {52528.3, "52,528"}, {1234567, "1,234,567"}, {-4321, "-4,321"}} {
		if got := thousands(c.in); got != c.want {
			t.Errorf("thousands(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestSizeSI(t *testing.T) {
	for _, c := range []struct {
		in   int64
		want string
	}{{512, "512 B"}, {44_310, "44 KB"}, {443_000, "443 KB"}, {4_420_000, "4.4 MB"}, {40_100_000, "40 MB"}, {404_000_000, "404 MB"}, {999_700, "1.0 MB"}} {
		if got := sizeSI(c.in); got != c.want {
			t.Errorf("sizeSI(%d) = %q, want %q", c.in, got, c.want)
		}
	}
}
