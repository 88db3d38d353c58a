package pgsource

import (
	"testing"

	"github.com/snapflip/snapflip/internal/configtest"
)

func TestZeroConfigsTakeTheDefaults(t *testing.T) {
	configtest.Check(t,
		configtest.Case{Name: "StreamConfig", Zero: StreamConfig{}.withDefaults(), Default: DefaultStreamConfig()},
		configtest.Case{Name: "WatchConfig", Zero: WatchConfig{}.withDefaults(), Default: DefaultWatchConfig()},
	)
}
