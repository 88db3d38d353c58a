package testenv

import (
	"fmt"
	"testing"
	"time"
)

// Poll calls cond until it returns nil, and then returns nil; if cond has not returned
// nil within timeout, Poll returns its last error, which says why it had not. It waits
// 5 ms after the first failure, doubling up to 50 ms, so a condition met at once costs
// nothing and a slow one costs few calls. It may run on any goroutine.
func Poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		err := cond()
		if err == nil {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("still after %s: %w", timeout, err)
		}
		time.Sleep(min(wait, left))
	}
}

// Eventually is Poll on the test's goroutine: it fails the test now, with cond's last
// error, if cond has not returned nil within timeout. cond may itself fail the test
// for an error that waiting cannot cure.
func Eventually(tb testing.TB, timeout time.Duration, cond func() error) {
	tb.Helper()
	if err := Poll(timeout, cond); err != nil {
		tb.Fatal(err)
	}
}
