package store_test

import (
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/snapflip/snapflip/store"
)

// TestMinLife: the least life a GC rule guarantees a cell, for every kind of rule and
// their nestings.
func TestMinLife(t *testing.T) {
	const day = 24 * time.Hour
	age := bigtable.MaxAgePolicy
	versions := bigtable.MaxVersionsPolicy
	union := bigtable.UnionPolicy
	inter := bigtable.IntersectionPolicy
	for _, tt := range []struct {
		name   string
		policy bigtable.GCPolicy
		want   time.Duration
	}{
		{"max age", age(7 * day), 7 * day},
		{"max age of seconds", age(3 * time.Second), 3 * time.Second},
		{"max versions", versions(1), store.Forever},
		{"no rule", bigtable.NoGcPolicy(), store.Forever},
		{"nil", nil, store.Forever},
		{"snapflip's documents rule", union(age(time.Hour), versions(1)), time.Hour},
		{"union takes the shortest", union(age(2*day), age(day), age(3*day)), day},
		{"union of versions only", union(versions(1), versions(3)), store.Forever},
		{"empty union collects nothing", union(), store.Forever},
		{"intersection takes the longest", inter(age(day), age(3*day)), 3 * day},
		{"intersection with versions", inter(age(day), versions(1)), store.Forever},
		{"empty intersection guarantees nothing", inter(), 0},
		{"nested", union(inter(age(day), age(2*day)), union(age(5*day), versions(2))), 2 * day},
		{"nested intersection of unions", inter(union(age(time.Hour), versions(1)), union(age(2*time.Hour), versions(1))), 2 * time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := store.MinLife(tt.policy); got != tt.want {
				t.Errorf("MinLife(%v) = %s; want %s", tt.policy, store.FormatLife(got), store.FormatLife(tt.want))
			}
		})
	}
}

// TestFormatLife: lives print as the config writes durations, without zero trailing units.
func TestFormatLife(t *testing.T) {
	for _, tt := range []struct {
		life time.Duration
		want string
	}{
		{7 * 24 * time.Hour, "168h"},
		{25 * time.Hour, "25h"},
		{90 * time.Minute, "1h30m"},
		{time.Hour + time.Second, "1h0m1s"},
		{2 * time.Minute, "2m"},
		{45 * time.Second, "45s"},
		{0, "0s"},
		{1500 * time.Millisecond, "1.5s"},
		{store.Forever, "forever"},
	} {
		if got := store.FormatLife(tt.life); got != tt.want {
			t.Errorf("FormatLife(%d) = %q; want %q", tt.life, got, tt.want)
		}
	}
}
