package client

import (
	"time"
)

// ReplicaConfig says what a Replica holds and how it follows the API. Start from
// DefaultReplicaConfig, name the collections, and change what you need.
type ReplicaConfig struct {
	// Collections are the collections the replica holds: at least one, each once. No
	// default.
	Collections []string
	// OnFlip, if set, is called after each version the replica swaps in, with that
	// version, from the replica's own goroutine, one call at a time: a slow OnFlip
	// delays the next flip, and one that calls Close never returns. Default nil.
	OnFlip func(version string)
	// PollInterval is how often the replica asks the API for the current version while
	// the flip stream is refused or broken; positive. Default 1s.
	PollInterval time.Duration
	// StreamRetry is how long the replica polls before it opens the flip stream again
	// after the stream was refused or ended; positive. It doubles while the stream
	// stays refused, up to 30s. Default 2s.
	StreamRetry time.Duration
	// StreamIdle drops a flip stream that sent nothing this long, not even a
	// heartbeat (the API sends one every 15s), and opens it again; positive. Default
	// 45s.
	StreamIdle time.Duration
	// MaxChain is how many versions a replica follows by their changes to reach a
	// newer or older one (flips that came too close together to be told apart, a
	// rollback to a recent version); farther than that it reloads. At least 1.
	// Default 16.
	MaxChain int
}

// ReplicaOptions is the former name of ReplicaConfig.
//
// Deprecated: use ReplicaConfig, starting from DefaultReplicaConfig: a field left at
// zero is refused by Validate, not read as its default.
type ReplicaOptions = ReplicaConfig

// DefaultReplicaConfig returns the defaults; Collections is left for the caller.
func DefaultReplicaConfig() ReplicaConfig {
	return ReplicaConfig{PollInterval: time.Second, StreamRetry: 2 * time.Second, StreamIdle: 45 * time.Second,
		MaxChain: 16}
}

// Validate reports the first field that is not usable, by name. The error matches
// ErrBadRequest.
func (c ReplicaConfig) Validate() error {
	if len(c.Collections) == 0 {
		return invalid("replica config.Collections: none named; want at least one")
	}
	seen := make(map[string]bool, len(c.Collections))
	for _, name := range c.Collections {
		switch {
		case name == "":
			return invalid("replica config.Collections: an empty collection name")
		case seen[name]:
			return invalid("replica config.Collections: collection %q named twice", truncate(name, 128))
		}
		seen[name] = true
	}
	switch {
	case c.PollInterval <= 0:
		return invalid("replica config.PollInterval %s: must be positive", c.PollInterval)
	case c.StreamRetry <= 0:
		return invalid("replica config.StreamRetry %s: must be positive", c.StreamRetry)
	case c.StreamIdle <= 0:
		return invalid("replica config.StreamIdle %s: must be positive", c.StreamIdle)
	case c.MaxChain < 1:
		return invalid("replica config.MaxChain %d: must be at least 1", c.MaxChain)
	}
	return nil
}
