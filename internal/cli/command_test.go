package cli

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestReport: main prints each error once, as "prog: error" ending in exactly one
// newline, and exits 2 for usage mistakes, 1 for failures, 0 otherwise.
func TestReport(t *testing.T) {
	for _, tt := range []struct {
		err    error
		code   int
		stderr string
	}{
		{nil, 0, ""},
		{fmt.Errorf("%w: unknown flag: --nope", ErrUsage), 2, "syncer: usage: unknown flag: --nope\n"},
		{fmt.Errorf("sync: %w", errors.New("postgres is down")), 1, "syncer: sync: postgres is down\n"},
		{errors.New("ends in newlines\n\n"), 1, "syncer: ends in newlines\n"},
	} {
		var w strings.Builder
		if code := Report(&w, "syncer", tt.err); code != tt.code || w.String() != tt.stderr {
			t.Errorf("Report(%v) = %d, printed %q; want %d, %q", tt.err, code, w.String(), tt.code, tt.stderr)
		}
	}
}
