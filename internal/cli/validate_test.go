package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/auth"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/resolver"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// TestValidateErrorsWrapErrInvalid: every config's Validate names what is wrong in an
// error wrapping snapshot.ErrInvalid, and a zero field that has a default is not
// wrong (the configs' one convention).
func TestValidateErrorsWrapErrInvalid(t *testing.T) {
	bad := map[string]error{
		"store.Config with a batch of no rows": store.Config{BatchRows: -1}.Validate(),
		"store.Config with a negative audit retention": func() error {
			c := store.DefaultConfig()
			c.Project, c.Instance, c.Table, c.AuditRetention = "p", "i", "t", -1
			return c.Validate()
		}(),
		"store.LeaseConfig without a holder":       store.LeaseConfig{}.Validate(),
		"api.Config with a negative page limit":    api.Config{PageLimit: -1}.Validate(),
		"resolver.Config with negative waiters":    resolver.Config{MaxWaiters: -1}.Validate(),
		"pgsource.WatchConfig with a bad mode":     pgsource.WatchConfig{Mode: 7}.Validate(),
		"pgsource.StreamConfig with a bad CatchUp": pgsource.StreamConfig{CatchUp: -1}.Validate(),
		"pgsource.LogicalConfig without a slot":    pgsource.LogicalConfig{Publication: "p"}.Validate(),
		"auth.Config without issuers":              auth.Config{}.Validate(),
		"SyncerConfig without a dataset":           SyncerConfig{}.Validate(),
	}
	for what, yaml := range map[string]string{
		"a YAML syntax error":     "dataset: [",
		"an unknown watch mode":   "dataset: ds\nschedule: \"@every 1m\"\nwatch: {mode: trigger}\n",
		"a field of a wrong type": "dataset: ds\nschedule: \"@every 1m\"\nttl: soon\n",
	} {
		_, err := ParseSyncerConfig(strings.NewReader(yaml), func(string) string { return "" })
		bad["a config file with "+what] = err
	}
	for what, err := range bad {
		if !errors.Is(err, snapshot.ErrInvalid) {
			t.Errorf("%s: %v; want an error wrapping snapshot.ErrInvalid", what, err)
		}
	}
	zero := map[string]error{
		"store.Config with only its names": store.Config{Project: "p", Instance: "i", Table: "t"}.Validate(),
		"api.Config{}":                     api.Config{}.Validate(),
		"resolver.Config{}":                resolver.Config{}.Validate(),
		"pgsource.WatchConfig{}":           pgsource.WatchConfig{}.Validate(),
		"store.LeaseConfig with a holder":  store.LeaseConfig{Holder: "h"}.Validate(),
	}
	for what, err := range zero {
		if err != nil {
			t.Errorf("%s: %v; want its zero fields to take their defaults", what, err)
		}
	}
}
