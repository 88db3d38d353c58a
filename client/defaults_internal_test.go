package client

import (
	"testing"

	"github.com/snapflip/snapflip/internal/configtest"
)

func TestZeroConfigsTakeTheDefaults(t *testing.T) {
	configtest.Check(t,
		configtest.Case{Name: "Config", Zero: Config{}.withDefaults(), Default: DefaultConfig(), Kept: map[string]string{
			"Timeout":   "0: no bound but the context",
			"UserAgent": "empty: net/http's own",
		}},
		configtest.Case{Name: "ReplicaConfig", Zero: ReplicaConfig{}.withDefaults(), Default: DefaultReplicaConfig()},
		configtest.Case{Name: "RetryPolicy", Zero: RetryPolicy{}.withDefaults(), Default: DefaultRetryPolicy()},
	)
}
