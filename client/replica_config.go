package client

import (
	"cmp"
	"fmt"
	"time"
)

// ReplicaConfig says what a Replica holds and how it follows the API. Name the
// collections and set what you need: a field left at zero takes its default, as
// DefaultReplicaConfig gives it (so ReplicaConfig{Collections: …} is a whole config).
type ReplicaConfig struct {
	// Collections are the collections the replica holds: at least one, each once. No
	// default.
	Collections []string
	// OnFlip, if set, is called after each version the replica swaps in, with that
	// version, from the replica's own goroutine, one call at a time: a slow OnFlip
	// delays the next flip, and one that calls Close never returns. Default nil.
	OnFlip func(version string)
	// PollInterval is how often the replica asks the API for the current version while
	// the flip stream is refused or broken. Default (0) 1s; negative is refused.
	PollInterval time.Duration
	// StreamRetry is how long the replica polls before it opens the flip stream again
	// after the stream was refused or ended. It doubles while the stream stays
	// refused, up to 30s. Default (0) 2s; negative is refused.
	StreamRetry time.Duration
	// StreamIdle drops a flip stream that sent nothing this long, not even a
	// heartbeat (the API sends one every 15s), and opens it again. Default (0) 45s;
	// negative is refused.
	StreamIdle time.Duration
	// MaxChain is how many versions a replica follows by their changes to reach a
	// newer or older one (flips that came too close together to be told apart, a
	// rollback to a recent version); farther than that it reloads. Default (0) 16;
	// negative is refused.
	MaxChain int
}

// ReplicaOptions is the former name of ReplicaConfig.
//
// Deprecated: use ReplicaConfig, the same type: a field left at zero takes its
// default under either name.
type ReplicaOptions = ReplicaConfig

// DefaultReplicaConfig returns the defaults; Collections is left for the caller.
func DefaultReplicaConfig() ReplicaConfig {
	return ReplicaConfig{PollInterval: time.Second, StreamRetry: 2 * time.Second, StreamIdle: 45 * time.Second,
		MaxChain: 16}
}

// withDefaults returns c with each zero field at its default.
func (c ReplicaConfig) withDefaults() ReplicaConfig {
	d := DefaultReplicaConfig()
	c.PollInterval = cmp.Or(c.PollInterval, d.PollInterval)
	c.StreamRetry = cmp.Or(c.StreamRetry, d.StreamRetry)
	c.StreamIdle = cmp.Or(c.StreamIdle, d.StreamIdle)
	c.MaxChain = cmp.Or(c.MaxChain, d.MaxChain)
	return c
}

// Validate reports the first field that is not usable, by name: no collection, an
// empty or repeated one, a negative duration or chain. A zero field is usable: it
// takes its default. The error matches ErrInvalidConfig and, as before it existed,
// ErrBadRequest.
func (c ReplicaConfig) Validate() error {
	c = c.withDefaults()
	if len(c.Collections) == 0 {
		return badReplicaConfig("replica config.Collections: none named; want at least one")
	}
	seen := make(map[string]bool, len(c.Collections))
	for _, name := range c.Collections {
		switch {
		case name == "":
			return badReplicaConfig("replica config.Collections: an empty collection name")
		case seen[name]:
			return badReplicaConfig("replica config.Collections: collection %q named twice", truncate(name, 128))
		}
		seen[name] = true
	}
	switch {
	case c.PollInterval <= 0:
		return badReplicaConfig("replica config.PollInterval %s: must not be negative (0: the default, 1s)", c.PollInterval)
	case c.StreamRetry <= 0:
		return badReplicaConfig("replica config.StreamRetry %s: must not be negative (0: the default, 2s)", c.StreamRetry)
	case c.StreamIdle <= 0:
		return badReplicaConfig("replica config.StreamIdle %s: must not be negative (0: the default, 45s)", c.StreamIdle)
	case c.MaxChain < 1:
		return badReplicaConfig("replica config.MaxChain %d: must not be negative (0: the default, 16)", c.MaxChain)
	}
	return nil
}

// badReplicaConfig is ReplicaConfig.Validate's error.
func badReplicaConfig(format string, args ...any) error {
	return fmt.Errorf("snapflip: %s: %w (%w)", fmt.Sprintf(format, args...), ErrInvalidConfig, ErrBadRequest)
}
