package client

import (
	"cmp"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/snapflip/snapflip/internal/retry"
)

// RetryPolicy says how often and how patiently a request is retried. Every request the
// client sends is a read, so every one may be retried (batchGet is a POST, but a read);
// what is retried is a 503 (and a proxy's 502 or 504) and a failure to get an answer at
// all. A 4xx is never retried, nor a 500, nor the 503 of a token no version covers yet
// (ErrNotYetCovered), for which the API waited already.
type RetryPolicy struct {
	// MaxAttempts is how many times a request is sent at most, the first included;
	// 1 turns retrying off. Default 4.
	MaxAttempts int
	// InitialBackoff is the wait before the first retry; each further retry waits
	// twice as long, up to MaxBackoff. A wait is drawn at random between half of it and
	// all of it (jitter), so that clients turned away together do not come back
	// together. Default 100ms.
	InitialBackoff time.Duration
	// MaxBackoff caps the exponential wait. Default 2s.
	MaxBackoff time.Duration
	// MaxRetryAfter is the longest Retry-After the client honours: an answer asking for
	// a longer wait ends the retries with its error at once. Within it, a retry never
	// comes sooner than Retry-After asks (the metadata API sends 1s with every 503).
	// Unlike the other fields, zero is a setting of its own, not the default: it
	// honours no Retry-After, so no 503 is retried. DefaultRetryPolicy sets 30s, and
	// so does a RetryPolicy left wholly zero.
	MaxRetryAfter time.Duration
}

// DefaultRetryPolicy returns the defaults: 4 attempts, 100ms doubling up to 2s.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: 4, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second,
		MaxRetryAfter: 30 * time.Second}
}

// withDefaults fills the zero fields that take a default (all but MaxRetryAfter); a
// policy left wholly zero is DefaultRetryPolicy, MaxRetryAfter included.
func (p RetryPolicy) withDefaults() RetryPolicy {
	def := DefaultRetryPolicy()
	if p == (RetryPolicy{}) {
		return def
	}
	p.MaxAttempts = cmp.Or(p.MaxAttempts, def.MaxAttempts)
	p.InitialBackoff = cmp.Or(p.InitialBackoff, def.InitialBackoff)
	p.MaxBackoff = cmp.Or(p.MaxBackoff, max(def.MaxBackoff, p.InitialBackoff))
	return p
}

// Validate reports the first field that is not usable, by name, in an error wrapping
// ErrInvalidConfig. A zero field that takes a default is usable.
func (p RetryPolicy) Validate() error {
	if err := p.withDefaults().validate(); err != nil {
		return fmt.Errorf("snapflip: %w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func (p RetryPolicy) validate() error {
	switch {
	case p.MaxAttempts < 1:
		return fmt.Errorf("config.Retry.MaxAttempts %d: must be at least 1 (0 takes the default)", p.MaxAttempts)
	case p.InitialBackoff <= 0:
		return fmt.Errorf("config.Retry.InitialBackoff %s: must be positive", p.InitialBackoff)
	case p.MaxBackoff < p.InitialBackoff:
		return fmt.Errorf("config.Retry.MaxBackoff %s: must be at least InitialBackoff (%s)", p.MaxBackoff, p.InitialBackoff)
	case p.MaxRetryAfter < 0:
		return fmt.Errorf("config.Retry.MaxRetryAfter %s: must not be negative", p.MaxRetryAfter)
	}
	return nil
}

// backoff returns the wait after the given failed attempt (1 for the first): the
// exponential step capped at MaxBackoff, with "equal jitter" (between half of the
// step and all of it).
func (p RetryPolicy) backoff(attempt int) time.Duration {
	return retry.Backoff{Initial: p.InitialBackoff, Max: p.MaxBackoff, Jitter: retry.EqualJitter}.Delay(attempt - 1)
}

// retryableStatus reports the statuses worth another attempt: the API's 503, and the
// 502 and 504 a load balancer answers when the API did not.
func retryableStatus(code int) bool {
	return code == http.StatusServiceUnavailable || code == http.StatusBadGateway || code == http.StatusGatewayTimeout
}

// parseRetryAfter reads a Retry-After header: seconds, or an HTTP date. It returns 0
// when there is none or it cannot be read.
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0
		}
		if n > int64(24*time.Hour/time.Second) {
			return 24 * time.Hour
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
