package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/snapflip/snapflip/snapshot"
)

// Problem is an RFC 9457 problem document. Type is a stable identifier clients may
// switch on.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// Problem types.
const (
	typeNotFound     = "https://snapflip.dev/problems/not-found"
	typeGone         = "https://snapflip.dev/problems/version-gone"
	typeNoVersion    = "https://snapflip.dev/problems/no-version"
	typeBadRequest   = "https://snapflip.dev/problems/bad-request"
	typeTooLarge     = "https://snapflip.dev/problems/too-large"
	typeUnavailable  = "https://snapflip.dev/problems/unavailable"
	typeInternal     = "https://snapflip.dev/problems/internal"
	typeUnauthorized = "https://snapflip.dev/problems/unauthorized"
	typeForbidden    = "https://snapflip.dev/problems/forbidden"
	typeRefused      = "https://snapflip.dev/problems/refused"
	typeConflict     = "https://snapflip.dev/problems/conflict"
	typeTooMany      = "https://snapflip.dev/problems/too-many"
	// The read-your-writes problems (docs/freshness.md).
	typeTokenRejected      = "https://snapflip.dev/problems/token-rejected"
	typeTokenNotCovered    = "https://snapflip.dev/problems/token-not-covered"
	typeTokenNotYetCovered = "https://snapflip.dev/problems/token-not-yet-covered"
)

func writeProblem(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Del("ETag")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeError maps an error to a problem document. Internals are logged, not shown.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var p Problem
	var tooLarge *http.MaxBytesError
	var forbidden *forbiddenError
	var tooMany *tooManyError
	var unserved *unservedScopeError
	switch {
	case errors.As(err, &tooMany):
		writeTooMany(w, tooMany)
		return
	case errors.As(err, &unserved) && unserved.named:
		p = Problem{Type: typeForbidden, Title: "Forbidden", Status: http.StatusForbidden, Detail: unserved.Error()}
	case errors.As(err, &unserved):
		s.log.ErrorContext(r.Context(), "row scope without an index", "err", err)
		p = Problem{Type: typeInternal, Title: "Row scope not served", Status: http.StatusInternalServerError, Detail: unserved.Error()}
	case errors.As(err, &forbidden):
		p = Problem{Type: typeForbidden, Title: "Forbidden", Status: http.StatusForbidden, Detail: forbidden.msg}
	case errors.As(err, &tooLarge):
		p = Problem{Type: typeTooLarge, Title: "Request body too large", Status: http.StatusRequestEntityTooLarge, Detail: err.Error()}
	case errors.Is(err, snapshot.ErrTokenRejected):
		p = Problem{Type: typeTokenRejected, Title: "Token rejected", Status: http.StatusBadRequest, Detail: err.Error()}
	case errors.Is(err, snapshot.ErrNotCovered) && errors.Is(err, errHeld):
		p = Problem{Type: typeTokenNotCovered, Title: "Token not covered", Status: http.StatusPreconditionFailed,
			Detail: err.Error() + "; the version named holds the collection read before the write: read the current version, which takes the collection's new base once it is built"}
	case errors.Is(err, snapshot.ErrNotCovered):
		p = Problem{Type: typeTokenNotCovered, Title: "Token not covered", Status: http.StatusPreconditionFailed,
			Detail: err.Error() + "; a rollback chose an older position of the source: read without the token, or wait for an unpin"}
	case errors.Is(err, snapshot.ErrNotYetCovered) && r.Context().Err() == nil:
		if s.metrics != nil {
			s.metrics.tokenTimeouts.Inc()
		}
		p = Problem{Type: typeTokenNotYetCovered, Title: "Token not yet covered", Status: http.StatusServiceUnavailable,
			Detail: err.Error() + "; retry, or ask for a longer wait with Prefer: wait=N (at most 10)"}
	case errors.Is(err, snapshot.ErrInvalid):
		p = Problem{Type: typeBadRequest, Title: "Bad request", Status: http.StatusBadRequest, Detail: err.Error()}
	case errors.Is(err, snapshot.ErrTargetRefused):
		p = Problem{Type: typeRefused, Title: "Refused", Status: http.StatusUnprocessableEntity, Detail: err.Error() + "; nothing changed"}
	case errors.Is(err, snapshot.ErrConflict), errors.Is(err, snapshot.ErrFenced), errors.Is(err, snapshot.ErrPinned):
		p = Problem{Type: typeConflict, Title: "Conflict", Status: http.StatusConflict, Detail: err.Error() + "; nothing changed"}
	case errors.Is(err, snapshot.ErrGone):
		p = Problem{Type: typeGone, Title: "Version gone", Status: http.StatusGone, Detail: err.Error()}
	case errors.Is(err, snapshot.ErrNotFound):
		p = Problem{Type: typeNotFound, Title: "Not found", Status: http.StatusNotFound, Detail: err.Error()}
	case errors.Is(err, snapshot.ErrNoVersion):
		p = Problem{Type: typeNoVersion, Title: "No version published yet", Status: http.StatusServiceUnavailable,
			Detail: "the syncer has not published a version of this dataset yet"}
	case errors.Is(err, snapshot.ErrCurrentExpired):
		s.log.ErrorContext(r.Context(), "current version expired", "err", err)
		p = Problem{Type: typeUnavailable, Title: "Current version expired", Status: http.StatusServiceUnavailable,
			Detail: "the current version has outlived its TTL: the syncer has not published or refreshed it in time"}
	case errors.Is(err, snapshot.ErrOutcomeUnknown):
		s.log.ErrorContext(r.Context(), "pointer flip outcome unknown", "err", err)
		p = Problem{Type: typeUnavailable, Title: "Outcome unknown", Status: http.StatusServiceUnavailable,
			Detail: "storage did not confirm the flip; it may or may not have happened: check GET /v1/versions/current before retrying"}
	case r.Context().Err() != nil:
		return // the client went away; nobody is listening
	default:
		s.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.EscapedPath(), "err", err)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, snapshot.ErrUnavailable) {
			p = Problem{Type: typeUnavailable, Title: "Storage unavailable", Status: http.StatusServiceUnavailable,
				Detail: "storage did not answer in time; retry"}
		} else {
			p = Problem{Type: typeInternal, Title: "Internal error", Status: http.StatusInternalServerError,
				Detail: "the request failed; the server log has the cause"}
		}
	}
	if p.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeProblem(w, p)
}

func badRequest(format string, args ...any) error {
	return &invalidError{msg: sprintf(format, args...)}
}

// invalidError is a request mistake; it wraps snapshot.ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return snapshot.ErrInvalid }

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}
