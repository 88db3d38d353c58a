package api

import (
	"net/http/httptest"
	"testing"
	"time"
)

// TestWaitBound: Prefer: wait is clamped to MaxWait before it becomes a duration, so
// a huge or infinite value waits MaxWait, and one that is no number (NaN) or negative
// takes the default, never a negative wait that answers 503 at once.
func TestWaitBound(t *testing.T) {
	for _, c := range []struct {
		prefer string
		want   time.Duration
	}{
		{"wait=3", 3 * time.Second}, {"wait=0.5", 500 * time.Millisecond}, {"wait=1e300", MaxWait},
		{"wait=Inf", MaxWait}, {"wait=+Inf", MaxWait}, {"wait=NaN", DefaultWait}, {"wait=-1", DefaultWait},
		{"wait=-Inf", DefaultWait}, {"", DefaultWait}, {"respond-async, wait=20", MaxWait},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if c.prefer != "" {
			r.Header.Set("Prefer", c.prefer)
		}
		if got := waitBound(r); got != c.want {
			t.Errorf("Prefer: %s: wait %s; want %s", c.prefer, got, c.want)
		}
	}
}
