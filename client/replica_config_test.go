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
		{"config.PollInterval", func(c *ReplicaConfig) { c.PollInterval = -time.Second }},
		{"config.StreamRetry", func(c *ReplicaConfig) { c.StreamRetry = -1 }},
		{"config.StreamIdle", func(c *ReplicaConfig) { c.StreamIdle = -time.Minute }},
		{"config.MaxChain", func(c *ReplicaConfig) { c.MaxChain = -1 }},
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

// A config naming only its collections, under either name, is whole: each zero field
// takes its default, as the former ReplicaOptions did.
func TestReplicaConfigZeroMeansDefault(t *testing.T) {
	for _, cfg := range []ReplicaConfig{{Collections: []string{"a"}}, ReplicaOptions{Collections: []string{"a"}}} {
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Validate() = %v; want the zero fields to take their defaults", err)
		}
		d := DefaultReplicaConfig()
		d.Collections = cfg.Collections
		if got := cfg.withDefaults(); got.PollInterval != d.PollInterval || got.StreamRetry != d.StreamRetry ||
			got.StreamIdle != d.StreamIdle || got.MaxChain != d.MaxChain {
			t.Errorf("withDefaults() = %+v; want the defaults %+v", got, d)
		}
	}
}
