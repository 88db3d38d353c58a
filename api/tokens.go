package api

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/snapflip/snapflip/snapshot"
)

// Reading your own writes (docs/freshness.md): a request may name a Postgres position
// (a token) that its answer must hold; every answer names its own position.
const (
	// HeaderToken names the snapshot the answer's version was read at, as a token
	// ("s:…"): handing it to any replica as Snapshot-After never gets an older answer.
	HeaderToken = "Snapshot-Token"
	// HeaderAfter asks for an answer from a version that covers a token; the query
	// parameter "after" says the same.
	HeaderAfter = "Snapshot-After"
	// DefaultWait is how long a request with a token waits for a covering version
	// when it sends no "Prefer: wait=N"; MaxWait bounds what it may ask for.
	DefaultWait = 5 * time.Second
	MaxWait     = 10 * time.Second
)

// afterToken returns the token a request carries (Snapshot-After or ?after=), and
// whether it carries one; a malformed one, or two that disagree, is a bad request.
// On the changes route "after" is the page cursor: the header alone carries a token.
func afterToken(r *http.Request) (snapshot.Token, bool, error) {
	var q string
	query := r.URL.RawQuery != "" && !isChangesRoute(r)
	if query {
		q = r.URL.Query().Get("after")
	}
	hs := r.Header.Values(HeaderAfter)
	if len(hs) > 1 {
		return snapshot.Token{}, false, tokenError(badRequest("%s: sent %d times; send one token", HeaderAfter, len(hs)))
	}
	h := ""
	if len(hs) == 1 {
		h = hs[0]
		if h == "" {
			return snapshot.Token{}, false, tokenError(badRequest("%s: empty", HeaderAfter))
		}
	}
	switch {
	case q != "" && h != "" && q != h:
		return snapshot.Token{}, false, tokenError(badRequest("after: the query says %q and the %s header %q",
			truncate(q, 80), HeaderAfter, truncate(h, 80)))
	case h == "" && q == "":
		if query && r.URL.Query().Has("after") {
			return snapshot.Token{}, false, tokenError(badRequest("after: empty"))
		}
		return snapshot.Token{}, false, nil
	case h == "":
		h = q
	}
	tok, err := snapshot.ParseToken(h)
	if err != nil {
		return snapshot.Token{}, false, err
	}
	return tok, true, nil
}

// tokenError marks a request mistake as a token's, for its problem type.
func tokenError(err error) error { return &rejectedError{err} }

type rejectedError struct{ error }

func (e *rejectedError) Unwrap() []error { return []error{e.error, snapshot.ErrTokenRejected} }

// waitBound is how long a request may wait for a covering version: its
// "Prefer: wait=N" (RFC 7240), at most MaxWait, else DefaultWait.
func waitBound(r *http.Request) time.Duration {
	for _, h := range r.Header.Values("Prefer") {
		for _, pref := range strings.Split(h, ",") {
			name, val, ok := strings.Cut(strings.TrimSpace(pref), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			n, err := strconv.ParseFloat(strings.Trim(strings.TrimSpace(val), `"`), 64)
			if err != nil || !(n >= 0) { // NaN too
				continue
			}
			// Clamped as a number: a duration made of 1e300 or Inf seconds overflows.
			return time.Duration(min(n, MaxWait.Seconds()) * float64(time.Second))
		}
	}
	return DefaultWait
}

// tokenCache keeps the Snapshot-Token of the version answers came from last, so that
// a hot read formats none.
type tokenCache struct{ last atomic.Pointer[tokenOf] }

type tokenOf struct {
	v   snapshot.Version
	tok string
}

// of returns the token of the view's version: its manifest's snapshot.
func (c *tokenCache) of(view snapshot.View) string {
	if l := c.last.Load(); l != nil && l.v == view.Version {
		return l.tok
	}
	tok := view.Manifest.Source.Token(view.Version)
	c.last.Store(&tokenOf{v: view.Version, tok: tok})
	return tok
}

// stamp names the view's version and its token on the answer.
func (s *Server) stamp(w http.ResponseWriter, view snapshot.View) {
	h := w.Header()
	h["Snapshot-Version"] = []string{string(view.Version)}
	if tok := s.tokens.of(view); tok != "" {
		h["Snapshot-Token"] = []string{tok}
	}
}

// isChangesRoute reports whether r is GET /v1/versions/{version}/changes/{collection},
// whose "after" parameter is its page cursor.
func isChangesRoute(r *http.Request) bool {
	rctx := chi.RouteContext(r.Context())
	return rctx != nil && rctx.RoutePattern() == changesRoute
}

// changesRoute is the changes endpoint's route pattern.
const changesRoute = "/v1/versions/{version}/changes/{collection}"
