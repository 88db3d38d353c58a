package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestReplicaConfigValidate(t *testing.T) {
	valid := DefaultReplicaConfig()
	valid.Collections = []string{"tenants", "plans"}
	if err := valid.Validate(); err != nil {
		t.Fatalf("the defaults with collections: Validate() = %v", err)
	}
	for _, tc := range []struct {
		field string
		edit  func(*ReplicaConfig)
	}{
		{"config.Collections", func(c *ReplicaConfig) { c.Collections = nil }},
		{"config.Collections", func(c *ReplicaConfig) { c.Collections = []string{"tenants", ""} }},
		{"config.Collections", func(c *ReplicaConfig) { c.Collections = []string{"tenants", "tenants"} }},
		{"config.PollInterval", func(c *ReplicaConfig) { c.PollInterval = 0 }},
		{"config.PollInterval", func(c *ReplicaConfig) { c.PollInterval = -time.Second }},
		{"config.StreamRetry", func(c *ReplicaConfig) { c.StreamRetry = 0 }},
		{"config.StreamIdle", func(c *ReplicaConfig) { c.StreamIdle = 0 }},
		{"config.MaxChain", func(c *ReplicaConfig) { c.MaxChain = 0 }},
	} {
		cfg := valid
		cfg.Collections = append([]string(nil), valid.Collections...)
		tc.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) || !errors.Is(err, ErrBadRequest) {
			t.Errorf("bad %s: Validate() = %v; want an error naming it, matching ErrBadRequest", tc.field, err)
		}
		if _, err := NewReplica(context.Background(), nil, cfg); err == nil {
			t.Errorf("bad %s: NewReplica succeeded", tc.field)
		}
	}
}
