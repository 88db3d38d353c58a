package store

import (
	"testing"

	"github.com/snapflip/snapflip/internal/configtest"
)

func TestZeroConfigsTakeTheDefaults(t *testing.T) {
	configtest.Check(t,
		configtest.Case{Name: "Config", Zero: Config{}.withDefaults(), Default: DefaultConfig()},
		configtest.Case{Name: "LeaseConfig", Zero: LeaseConfig{}.withDefaults(), Default: DefaultLeaseConfig()},
	)
}
