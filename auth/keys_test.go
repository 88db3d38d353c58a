package auth

import (
	"testing"
	"time"
)

// planKeys: keys younger than 80% of every are used; from there a read begins behind
// the verification, unless one is in flight or the last failed less than 80% ago;
// keys every old are waited for, unless the last read failed, when the keys held
// stay in use.
func TestPlanKeys(t *testing.T) {
	const every = time.Minute
	t0 := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		name             string
		age, sinceTried  time.Duration
		failed, inflight bool
		want             keysStep
	}{
		{"young", 10 * time.Second, 10 * time.Second, false, false, useKeys},
		{"just under 80%", 47 * time.Second, 47 * time.Second, false, false, useKeys},
		{"80%", 48 * time.Second, 48 * time.Second, false, false, readAhead},
		{"80%, a read in flight", 50 * time.Second, time.Second, false, true, useKeys},
		{"every old", every, every, false, false, awaitRead},
		{"every old, a read in flight", 70 * time.Second, 10 * time.Second, false, true, awaitRead},
		{"never read", 0, 0, false, false, awaitRead},
		{"every old, the last read failed just now", 2 * every, 0, true, false, useKeys},
		{"every old, the last read failed 80% ago", 2 * every, 48 * time.Second, true, false, readAhead},
		{"every old, the last read failed, another in flight", 2 * every, 50 * time.Second, true, true, useKeys},
		{"young, the last read failed", 10 * time.Second, 5 * time.Second, true, false, useKeys},
	} {
		readAt, tried := t0.Add(-c.age), t0.Add(-c.sinceTried)
		if c.name == "never read" {
			readAt, tried = time.Time{}, time.Time{}
		}
		if got := planKeys(t0, readAt, tried, every, c.failed, c.inflight); got != c.want {
			t.Errorf("%s: planKeys = %d; want %d", c.name, got, c.want)
		}
	}
}
