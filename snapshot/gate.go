package snapshot

import (
	"fmt"
	"math"
)

// Gate is a check a collection must pass before a version holding it is flipped to,
// so that a source that lost most of its rows by accident is never published.
type Gate struct {
	// MaxShrink refuses a collection that has lost more than this fraction of the
	// current version's rows: 0.5, the default (0), refuses losing over half; 1 (or
	// more) turns it off.
	MaxShrink float64
	// MinRows refuses a collection with fewer rows; 0 turns it off.
	MinRows int64
	// AllowEmpty lets a collection that had rows become empty.
	AllowEmpty bool
}

// DefaultGate refuses losing more than half of a collection, or all of it: the
// zero Gate's checks.
func DefaultGate() Gate { return Gate{MaxShrink: 0.5} }

// validate reports a field no gate can mean: a negative MaxShrink or MinRows.
func (g Gate) validate() error {
	switch {
	case g.MaxShrink < 0 || math.IsNaN(g.MaxShrink):
		return fmt.Errorf("MaxShrink %v: must not be negative (0 takes the default, 1 or more is off)", g.MaxShrink)
	case g.MinRows < 0:
		return fmt.Errorf("MinRows %d: must not be negative", g.MinRows)
	}
	return nil
}

// withDefaults fills the zero fields with DefaultGate's values.
func (g Gate) withDefaults() Gate {
	if g.MaxShrink == 0 {
		g.MaxShrink = DefaultGate().MaxShrink
	}
	return g
}

// Check returns an error wrapping ErrRefused when now fails the gate; before is the
// collection's row count in the current version, or -1 when it has none.
func (g Gate) Check(collection string, before, now int64) error {
	g = g.withDefaults()
	switch {
	case g.MinRows > 0 && now < g.MinRows:
		return fmt.Errorf("%w: collection %s has %d rows, under its minimum of %d", ErrRefused, collection, now, g.MinRows)
	case before > 0 && now == 0 && !g.AllowEmpty:
		return fmt.Errorf("%w: collection %s is empty; the current version has %d rows", ErrRefused, collection, before)
	case before > 0 && g.MaxShrink < 1 && float64(before-now) > g.MaxShrink*float64(before):
		return fmt.Errorf("%w: collection %s shrank from %d to %d rows, more than the allowed %.0f%%",
			ErrRefused, collection, before, now, 100*g.MaxShrink)
	}
	return nil
}

// invalid returns an error wrapping ErrInvalid about what: the formatted reason.
func invalid(what, format string, args ...any) error {
	return fmt.Errorf("%w %s: %s", ErrInvalid, what, fmt.Sprintf(format, args...))
}
