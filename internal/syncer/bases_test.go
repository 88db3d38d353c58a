package syncer

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/snapflip/snapflip/layer"
)

// The bases built beside the stream show per collection: documents written of
// expected, state, and start; a collection whose base is taken stops showing.
func TestBaseMetricsShowProgress(t *testing.T) {
	m := NewMetrics("ds")
	started := time.Unix(1700000000, 0)
	progress := []layer.BaseProgress{
		{Collection: "orders", State: "building", Rows: 1500, Expected: 3000, Started: started},
		{Collection: "users", State: "failed", Rows: 10, Expected: 50, Started: started},
	}
	m.ObserveBases(func() []layer.BaseProgress { return progress })
	want := `
# HELP snapflip_base_expected_rows Documents the chain a base beside the stream is built from holds.
# TYPE snapflip_base_expected_rows gauge
snapflip_base_expected_rows{collection="orders",dataset="ds"} 3000
snapflip_base_expected_rows{collection="users",dataset="ds"} 50
# HELP snapflip_base_rows Documents written of each collection's base built beside the stream of versions.
# TYPE snapflip_base_rows gauge
snapflip_base_rows{collection="orders",dataset="ds",state="building"} 1500
snapflip_base_rows{collection="users",dataset="ds",state="failed"} 10
`
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), "snapflip_base_rows", "snapflip_base_expected_rows"); err != nil {
		t.Error(err)
	}
	progress = progress[:0]
	if n, err := testutil.GatherAndCount(m.reg, "snapflip_base_rows", "snapflip_base_state"); err != nil || n != 0 {
		t.Errorf("with no base: %d series, %v; want none", n, err)
	}
}
