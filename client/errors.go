package client

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Sentinel errors. Every error the client returns for a failed exchange is an *Error,
// which matches these with errors.Is (ErrPinned excepted: only a Replica returns it).
var (
	// ErrNotFound reports an unknown collection or id (404).
	ErrNotFound = errors.New("not found")
	// ErrGone reports that the version a request named never existed, is not complete,
	// or has expired (410). Retrying cannot help: take a new Snapshot.
	ErrGone = errors.New("version gone")
	// ErrUnavailable reports that the API could not answer: it said 503 (nothing
	// published yet, the current version expired, storage too slow), or a proxy in
	// front of it said 502 or 504, or no attempt got an answer at all (connection
	// refused or reset, per-attempt timeout). It is returned once the retry policy gives
	// up.
	ErrUnavailable = errors.New("unavailable")
	// ErrBadRequest reports a request the API refused as malformed (400): an id over
	// 1024 bytes or not UTF-8, a malformed version or page token, a page size out of
	// range. The client returns it without sending anything for an empty collection or
	// id, or a version that is not one.
	ErrBadRequest = errors.New("bad request")
	// ErrInvalidConfig is wrapped by every error of a Validate method (Config,
	// RetryPolicy, ReplicaConfig): a field out of range, named.
	ErrInvalidConfig = errors.New("invalid config")
	// ErrNotCovered reports that the version a read had to come from does not cover
	// the token it gave with After (412), and that no waiting can help: the read named
	// that version (a Snapshot's), or an operator pinned the dataset at it (rolled it
	// back). A Replica's WaitFor matches it too when the dataset is pinned.
	ErrNotCovered = errors.New("the version does not cover the token")
	// ErrNotYetCovered reports that no version covering the token a read gave was
	// served within the wait the API allowed (5s, less when the context's deadline is
	// sooner), or that too many reads were waiting already: a 503 of the problem type
	// token-not-yet-covered. It also matches ErrUnavailable, as every other 503 does:
	// the answer may come later. But the retry policy does not retry it: the API has
	// waited already, and a retry would only wait as long again, for every caller at
	// once. Retry when more waiting is worth it, or read without the token.
	ErrNotYetCovered = errors.New("no version covers the token yet")
	// ErrTokenRejected reports a token no version can ever cover: malformed, of
	// another Postgres cluster than the dataset's source, or naming a transaction the
	// source had not started. The API says so with a 400 of the problem type
	// token-rejected, which also matches ErrBadRequest; the client returns it, matching
	// ErrBadRequest too, without sending anything for a token that does not parse.
	ErrTokenRejected = errors.New("token rejected")
	// ErrPinned reports that the dataset is pinned (an operator rolled it back) at a
	// version that does not cover the token a Replica was asked to wait for: no version
	// will until an operator unpins the dataset or rolls it forward.
	ErrPinned = errors.New("pinned at a version that does not cover the token")
	// ErrUnauthorized reports a request the API did not authenticate (401): no bearer
	// token when the API needs one, or one it could not verify (expired, of another
	// issuer or audience). It is never retried.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden reports a verified caller whose grants do not give what it asked
	// for (403): a collection not granted, a row scope whose claim it lacks, the admin
	// endpoints. It is never retried.
	ErrForbidden = errors.New("forbidden")
)

// The problem types of the answers about tokens whose status alone does not tell them
// from others (the API answers 412 for a token alone).
const (
	problemNotYetCovered = "https://snapflip.dev/problems/token-not-yet-covered"
	problemTokenRejected = "https://snapflip.dev/problems/token-rejected"
)

// Error is a failed exchange with the API: an answer other than the one asked for, or
// none at all after every attempt. It matches ErrNotFound, ErrGone, ErrUnavailable,
// ErrBadRequest and ErrNotCovered with errors.Is, by StatusCode, and ErrNotYetCovered
// and ErrTokenRejected by StatusCode and Type; a transport failure unwraps to its
// cause.
type Error struct {
	// Method and Path are the request's, Path as sent (escaped, without the query).
	Method, Path string
	// StatusCode is the HTTP status; 0 when no attempt got an answer.
	StatusCode int
	// Type, Title and Detail are the problem document's (RFC 9457); Title is the status
	// text when the answer was not a problem document (a proxy's page, say).
	Type, Title, Detail string
	// Version is the version the answer came from (its Snapshot-Version header), else the
	// version the request named; empty when neither is known.
	Version string
	// RetryAfter is the wait the answer asked for in Retry-After; 0 when it sent none.
	RetryAfter time.Duration
	// Attempts is how many times the request was sent.
	Attempts int
	// Err is the transport error of the last attempt, when StatusCode is 0.
	Err error
}

// Error describes the exchange and what the server said about it.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "snapflip: %s %s: ", e.Method, truncate(e.Path, 200))
	if e.StatusCode == 0 {
		fmt.Fprintf(&b, "no answer after %d attempts: %v", e.Attempts, e.Err)
		return b.String()
	}
	fmt.Fprintf(&b, "%d %s", e.StatusCode, e.Title)
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if e.Version != "" {
		b.WriteString(" (version " + e.Version + ")")
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " after %d attempts", e.Attempts)
	}
	return b.String()
}

// Is matches the sentinel errors by status, and the token's by problem type too.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotCovered:
		return e.StatusCode == http.StatusPreconditionFailed
	case ErrNotYetCovered:
		return e.StatusCode == http.StatusServiceUnavailable && e.Type == problemNotYetCovered
	case ErrTokenRejected:
		return e.StatusCode == http.StatusBadRequest && e.Type == problemTokenRejected
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrGone:
		return e.StatusCode == http.StatusGone
	case ErrBadRequest:
		return e.StatusCode == http.StatusBadRequest
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized
	case ErrForbidden:
		return e.StatusCode == http.StatusForbidden
	case ErrUnavailable:
		return e.StatusCode == 0 || retryableStatus(e.StatusCode)
	}
	return false
}

// Unwrap returns the transport error of the last attempt, if any.
func (e *Error) Unwrap() error { return e.Err }

// invalid is an error for a request the client refuses to send.
func invalid(format string, args ...any) error {
	return fmt.Errorf("snapflip: %s: %w", fmt.Sprintf(format, args...), ErrBadRequest)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
