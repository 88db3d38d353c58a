package store

import (
	"math"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
)

// Forever is the life of a cell that no rule collects by age.
const Forever = time.Duration(math.MaxInt64)

// MinLife returns the least time a GC rule keeps a cell after its timestamp: how long
// a cell written now is guaranteed to be readable. A MaxAge rule keeps cells its age;
// a MaxVersions rule, or none, never collects a cell by age (Forever: snapflip writes
// each column of a version once, so a newer version of the same cell is not what
// collects it). A union collects a cell when any child would, so it keeps cells the
// shortest life of its children; an intersection collects it only when every child
// would, so the longest. An empty union collects nothing; an empty intersection, and
// a rule of a kind this function does not know, guarantee nothing (0).
func MinLife(p bigtable.GCPolicy) time.Duration {
	switch p := p.(type) {
	case nil:
		return Forever
	case bigtable.MaxAgeGCPolicy:
		return max(time.Duration(p), 0)
	case bigtable.MaxVersionsGCPolicy:
		return Forever
	case bigtable.UnionGCPolicy:
		life := Forever
		for _, c := range p.Children {
			life = min(life, MinLife(c))
		}
		return life
	case bigtable.IntersectionGCPolicy:
		var life time.Duration
		for _, c := range p.Children {
			life = max(life, MinLife(c))
		}
		return life
	}
	if bigtable.GetPolicyType(p) == bigtable.PolicyUnspecified {
		return Forever // no GC rule
	}
	return 0
}

// FormatLife writes a cell life as a duration is written in the config, without
// zero trailing units ("168h", "1h30m", "45s"), or "forever".
func FormatLife(d time.Duration) string {
	if d == Forever {
		return "forever"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
