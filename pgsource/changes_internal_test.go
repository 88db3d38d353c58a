package pgsource

import (
	"strings"
	"testing"
)

// The read modes reach manifests as text: "row-version", or "content: <why>" for
// every mode that renders each row.
func TestReadModeText(t *testing.T) {
	if got, want := snapshotMode(readRowVersion).String(), "row-version"; got != want {
		t.Errorf("snapshotMode(readRowVersion) = %q; want %q", got, want)
	}
	for m := contentNoParent; m <= contentWraparound; m++ {
		if got := snapshotMode(m).String(); !strings.HasPrefix(got, "content: ") {
			t.Errorf("snapshotMode(%d) = %q; want content: <why>", int(m), got)
		}
	}
}
