package memstore_test

import (
	"testing"

	"github.com/snapflip/snapflip/internal/memstore"
	"github.com/snapflip/snapflip/internal/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(*testing.T) storetest.Store { return memstore.New() })
}

// TestContractCatchesAnUnfencedFlip runs the contract on a broken store, whose flip
// ignores the fence: the cases about fencing must fail, and only those.
func TestContractCatchesAnUnfencedFlip(t *testing.T) {
	failed := storetest.Failures(func() storetest.Store {
		st := memstore.New()
		st.IgnoreFence = true
		return st
	})
	for _, c := range []string{"FlipIsFenced", "AdvanceFence", "LeaseFencesFlips"} {
		if _, ok := failed[c]; !ok {
			t.Errorf("case %s passed on a store whose flip ignores the fence", c)
		}
	}
	for c, why := range failed {
		t.Logf("%s failed, as it should: %s", c, why)
	}
	if len(failed) > 3 {
		t.Errorf("%d cases failed; want the 3 about fencing: %v", len(failed), failed)
	}
}
