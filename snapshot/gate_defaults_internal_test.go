package snapshot

import (
	"errors"
	"testing"

	"github.com/snapflip/snapflip/internal/configtest"
)

func TestZeroConfigsTakeTheDefaults(t *testing.T) {
	configtest.Check(t, configtest.Case{Name: "Gate", Zero: Gate{}.withDefaults(), Default: DefaultGate()})
}

// The zero Gate checks what DefaultGate does; MaxShrink 1 turns the shrink check off.
func TestZeroGateRefusesAShrink(t *testing.T) {
	if err := (Gate{}).Check("c", 100, 40); !errors.Is(err, ErrRefused) {
		t.Errorf("the zero gate let 100 rows fall to 40: %v", err)
	}
	if err := (Gate{MaxShrink: 1}).Check("c", 100, 40); err != nil {
		t.Errorf("a gate with MaxShrink 1 refused a shrink: %v", err)
	}
}
