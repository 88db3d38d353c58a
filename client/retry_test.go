package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapflip/snapflip/internal/retry"
)

// These are unit tests of the retry policy against a scripted httptest server (the
// real API always sends Retry-After: 1; these need other values). The behaviour
// against the real API is in client_test.go and transport_test.go.

// scripted answers the i-th request with script[i] (the last one thereafter): a status
// and a Retry-After value ("" for none).
type scripted struct {
	status     []int
	retryAfter []string
	n          atomic.Int64
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := min(int(s.n.Add(1))-1, len(s.status)-1)
	if ra := s.retryAfter[i]; ra != "" {
		w.Header().Set("Retry-After", ra)
	}
	w.Header().Set(HeaderVersion, "7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1700000000000")
	if s.status[i] != http.StatusOK {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(s.status[i])
		_, _ = w.Write([]byte(`{"type":"https://snapflip.dev/problems/x","title":"T","status":` + strconv.Itoa(s.status[i]) + `,"detail":"D"}`))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"id":"x"}`))
}

// sleeps records the waits a client asks for instead of waiting.
type sleeps struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	return ctx.Err()
}

func scriptedClient(t *testing.T, s *scripted, edit func(*Config)) (*Client, *sleeps) {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, edit)
	rec := &sleeps{}
	c.sleep = rec.sleep
	return c, rec
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name       string
		status     []int
		retryAfter []string
		attempts   int // the policy's
		wantErr    error
		wantSent   int64
		wantWaits  []time.Duration // lower bounds; 0: just the backoff (at most 2s by default)
	}{
		{"503s with Retry-After in seconds, then 200", []int{503, 503, 200}, []string{"3", "5", ""}, 4, nil, 3, []time.Duration{3 * time.Second, 5 * time.Second}},
		{"Retry-After as an HTTP date", []int{503, 200}, []string{now.Add(7 * time.Second).Format(http.TimeFormat), ""}, 4, nil, 2, []time.Duration{7 * time.Second}},
		{"no Retry-After: backoff", []int{503, 502, 504, 200}, []string{"", "", "", ""}, 4, nil, 4, []time.Duration{0, 0, 0}},
		{"gives up after the attempts", []int{503}, []string{"1"}, 3, ErrUnavailable, 3, []time.Duration{time.Second, time.Second}},
		{"a Retry-After over MaxRetryAfter ends it", []int{503}, []string{"120"}, 4, ErrUnavailable, 1, nil},
		{"400 is not retried", []int{400}, []string{""}, 4, ErrBadRequest, 1, nil},
		{"404 is not retried", []int{404}, []string{""}, 4, ErrNotFound, 1, nil},
		{"410 is not retried", []int{410}, []string{""}, 4, ErrGone, 1, nil},
		{"429 is not retried (a 4xx)", []int{429}, []string{"1"}, 4, nil, 1, nil},
		{"500 is not retried", []int{500}, []string{""}, 4, nil, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &scripted{status: tt.status, retryAfter: tt.retryAfter}
			c, rec := scriptedClient(t, s, func(c *Config) { c.Retry.MaxAttempts = tt.attempts })
			c.now = func() time.Time { return now }
			_, err := c.Get(context.Background(), "c", "x")
			wantOK := tt.status[len(tt.status)-1] == http.StatusOK
			switch {
			case wantOK && err != nil:
				t.Errorf("Get = %v; want success", err)
			case !wantOK && tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Errorf("Get = %v; want %v", err, tt.wantErr)
			case !wantOK:
				var e *Error
				if !errors.As(err, &e) || e.StatusCode != tt.status[0] || e.Title != "T" || e.Detail != "D" || int64(e.Attempts) != tt.wantSent {
					t.Errorf("Get = %#v; want an *Error with status %d, the problem's title and detail, %d attempts", err, tt.status[0], tt.wantSent)
				}
			}
			if got := s.n.Load(); got != tt.wantSent {
				t.Errorf("sent %d requests; want %d", got, tt.wantSent)
			}
			if len(rec.waits) != len(tt.wantWaits) {
				t.Fatalf("waited %v; want %d waits", rec.waits, len(tt.wantWaits))
			}
			for i, w := range rec.waits {
				if atLeast := tt.wantWaits[i]; w < atLeast || atLeast == 0 && w > 2*time.Second {
					t.Errorf("wait %d = %s; want at least %s and no more than the backoff", i+1, w, atLeast)
				}
			}
		})
	}
}

// TestZeroMaxRetryAfterRetriesNoRetryAfter: MaxRetryAfter is the one retry field
// whose zero is not its default: a policy that leaves it zero honours no Retry-After,
// so a 503 asking for a second ends the retries, while one without Retry-After is
// retried.
func TestZeroMaxRetryAfterRetriesNoRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		retryAfter string
		wantSent   int64
	}{{"1", 1}, {"", 3}} {
		s := &scripted{status: []int{503}, retryAfter: []string{tt.retryAfter}}
		c, _ := scriptedClient(t, s, func(c *Config) { c.Retry = RetryPolicy{MaxAttempts: 3} })
		if _, err := c.Get(context.Background(), "c", "x"); !errors.Is(err, ErrUnavailable) {
			t.Errorf("Retry-After %q: Get = %v; want ErrUnavailable", tt.retryAfter, err)
		}
		if got := s.n.Load(); got != tt.wantSent {
			t.Errorf("Retry-After %q: sent %d requests; want %d", tt.retryAfter, got, tt.wantSent)
		}
	}
}

// TestRetryBoundedByContext: a wait that would outlive the context's deadline is not
// begun (the 503 is returned at once); a context cancelled during a wait ends it.
func TestRetryBoundedByContext(t *testing.T) {
	s := &scripted{status: []int{503}, retryAfter: []string{"1"}}
	c, rec := scriptedClient(t, s, func(c *Config) { c.Retry.MaxAttempts = 100 })
	ctx, cancel := context.WithTimeout(context.Background(), 900*time.Millisecond)
	defer cancel()
	_, err := c.Get(ctx, "c", "x")
	if !errors.Is(err, ErrUnavailable) || s.n.Load() != 1 || len(rec.waits) != 0 {
		t.Errorf("Get with a deadline sooner than Retry-After = %v after %d requests, waits %v; want the 503 at once", err, s.n.Load(), rec.waits)
	}

	s = &scripted{status: []int{503}, retryAfter: []string{"1"}}
	c, _ = scriptedClient(t, s, func(c *Config) { c.Retry.MaxAttempts = 100 })
	ctx, cancel = context.WithCancel(context.Background())
	c.sleep = func(ctx context.Context, d time.Duration) error {
		if s.n.Load() == 3 {
			cancel()
		}
		return retry.Sleep(ctx, time.Millisecond)
	}
	_, err = c.Get(ctx, "c", "x")
	var e *Error
	if !errors.Is(err, context.Canceled) || errors.As(err, &e) || s.n.Load() != 3 {
		t.Errorf("Get cancelled during the third wait = %v after %d requests; want context.Canceled after 3", err, s.n.Load())
	}
}

func TestBackoffBounds(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 10, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	for attempt, step := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond,
		3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 9: time.Second, 60: time.Second} {
		var seen []time.Duration
		for range 2000 {
			d := p.backoff(attempt)
			if d < step/2 || d > step {
				t.Fatalf("backoff(%d) = %s; want within [%s, %s]", attempt, d, step/2, step)
			}
			seen = append(seen, d)
		}
		slices.Sort(seen)
		if seen[len(seen)-1]-seen[0] < step/4 {
			t.Errorf("backoff(%d) ranged over %s..%s in 2000 draws; want jitter over [%s, %s]", attempt, seen[0], seen[len(seen)-1], step/2, step)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"": 0, "0": 0, "1": time.Second, " 30 ": 30 * time.Second, "-5": 0, "soon": 0, "1.5": 0,
		"99999999999": 24 * time.Hour,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
	} {
		h := http.Header{}
		if v != "" {
			h.Set("Retry-After", v)
		}
		if got := parseRetryAfter(h, now); got != want {
			t.Errorf("Retry-After %q = %s; want %s", v, got, want)
		}
	}
}
