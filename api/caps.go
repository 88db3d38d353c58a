package api

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/snapflip/snapflip/auth"
)

// perIdentity caps what one identity holds of a limit all callers share (watch
// streams, requests waiting for a token), so that no caller can use it up for the
// others. Without Auth there is no identity to count, and only the shared limit holds.
type perIdentity struct {
	what string // what is held, for errors: "watch streams"
	max  int

	mu   sync.Mutex
	held map[string]int
}

func newPerIdentity(what string, max int) *perIdentity {
	return &perIdentity{what: what, max: max, held: map[string]int{}}
}

// take holds one more for id, or returns a tooManyError when id holds max already;
// release gives it back. A nil id takes nothing.
func (p *perIdentity) take(id *auth.Identity) (release func(), err error) {
	if id == nil {
		return func() {}, nil
	}
	key := id.Issuer + "\x00" + id.Subject
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held[key] >= p.max {
		return nil, &tooManyError{what: p.what, max: p.max}
	}
	p.held[key]++
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.held[key]--; p.held[key] <= 0 {
			delete(p.held, key)
		}
	}, nil
}

// tooManyError is a caller over its own share of a shared limit: 429.
type tooManyError struct {
	what string
	max  int
}

func (e *tooManyError) Error() string {
	return fmt.Sprintf("your identity holds %d %s already, its limit; close one or retry later", e.max, e.what)
}

// writeTooMany answers 429 with a Retry-After.
func writeTooMany(w http.ResponseWriter, err *tooManyError) {
	w.Header().Set("Retry-After", strconv.Itoa(int(watchRetry.Seconds())))
	writeProblem(w, Problem{Type: typeTooMany, Title: "Too many requests", Status: http.StatusTooManyRequests, Detail: err.Error()})
}
