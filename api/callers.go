package api

import (
	"net/http"
	"sync"

	"github.com/snapflip/snapflip/auth"
)

// callers holds the verified identity of each request being served, from the moment
// authenticate verified its token until the request's handler returns: the handlers
// find it by the request, never verifying the token again. It spares every request a
// copy of itself with a new context (http.Request.WithContext), which costs a hot GET
// more than the verification. A request the chain copies loses its entry, so a
// handler of it finds no identity and refuses (403): never another caller's identity.
type callers struct {
	mu sync.RWMutex
	m  map[*http.Request]*auth.Identity
}

func newCallers() *callers { return &callers{m: map[*http.Request]*auth.Identity{}} }

// serve serves r with next, id being its caller.
func (c *callers) serve(next http.Handler, w http.ResponseWriter, r *http.Request, id *auth.Identity) {
	c.mu.Lock()
	c.m[r] = id
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.m, r)
		c.mu.Unlock()
	}()
	next.ServeHTTP(w, r)
}

// of returns r's caller; nil when authenticate did not admit r.
func (c *callers) of(r *http.Request) *auth.Identity {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.m[r]
}
