package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/snapflip/snapflip/snapshot"
)

// Reader answers reads through the pointer.
type Reader interface {
	// Current returns a view of the current version; ErrNoVersion when none is
	// published.
	Current(ctx context.Context) (snapshot.View, error)
	// Get returns one document of the view's version; ErrNotFound when the collection
	// or id is unknown.
	Get(ctx context.Context, view snapshot.View, collection, id string) ([]byte, error)
	// Ready returns nil when the pointer resolves.
	Ready(ctx context.Context) error
}

// MaxIDBytes is the longest id a request may name, as in the source.
const MaxIDBytes = 1024

// HeaderVersion names the version a response was answered from.
const HeaderVersion = "Snapshot-Version"

// Server is the HTTP handler of the metadata API.
type Server struct {
	reader Reader
	log    *slog.Logger
	mux    *chi.Mux
}

// NewServer returns the API's handler.
func NewServer(reader Reader, log *slog.Logger) *Server {
	s := &Server{reader: reader, log: logger(log)}
	r := chi.NewRouter()
	r.Use(escapedRouting, s.recoverer)
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Get("/v1/data/{collection}/{id}", s.getDocument)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, Problem{Type: typeNotFound, Title: "Not found", Status: http.StatusNotFound,
			Detail: "no route " + r.Method + " " + r.URL.EscapedPath()})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, Problem{Type: typeBadRequest, Title: "Method not allowed", Status: http.StatusMethodNotAllowed,
			Detail: r.Method + " is not allowed on " + r.URL.EscapedPath()})
	})
	s.mux = r
	return s
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// escapedRouting makes chi route on the escaped path, so that an id holding "%2F" is
// one path segment, and every URL parameter is decoded exactly once, by pathParam.
func escapedRouting(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rctx := chi.RouteContext(r.Context()); rctx != nil {
			rctx.RoutePath = r.URL.EscapedPath()
		}
		next.ServeHTTP(w, r)
	})
}

// pathParam returns the decoded URL parameter, or an ErrInvalid error naming it.
func pathParam(r *http.Request, name string, maxBytes int) (string, error) {
	raw := chi.URLParam(r, name)
	v, err := url.PathUnescape(raw)
	switch {
	case err != nil:
		return "", fmt.Errorf("%w %s: bad percent-encoding", snapshot.ErrInvalid, name)
	case v == "":
		return "", fmt.Errorf("%w %s: empty", snapshot.ErrInvalid, name)
	case len(v) > maxBytes:
		return "", fmt.Errorf("%w %s: %d bytes, over the limit of %d", snapshot.ErrInvalid, name, len(v), maxBytes)
	case !utf8.ValidString(v):
		return "", fmt.Errorf("%w %s: not valid UTF-8", snapshot.ErrInvalid, name)
	case strings.IndexByte(v, 0) >= 0:
		return "", fmt.Errorf("%w %s: holds a NUL byte", snapshot.ErrInvalid, name)
	}
	return v, nil
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if err := s.reader.Ready(r.Context()); err != nil {
		detail := "the pointer cannot be read"
		if errors.Is(err, snapshot.ErrNoVersion) {
			detail = "no version has been published yet"
		}
		s.log.WarnContext(r.Context(), "not ready", "err", err)
		writeProblem(w, Problem{Type: typeUnavailable, Title: "Not ready", Status: http.StatusServiceUnavailable, Detail: detail})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ready\n"))
}

func (s *Server) getDocument(w http.ResponseWriter, r *http.Request) {
	collection, err := pathParam(r, "collection", 128)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id, err := pathParam(r, "id", MaxIDBytes)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	view, err := s.reader.Current(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set(HeaderVersion, string(view.Version))
	doc, err := s.reader.Get(r.Context(), view, collection, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(doc)
}

// recoverer turns a panic into a 500 problem document and logs it with its stack.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.ErrorContext(r.Context(), "panic serving request", "path", r.URL.EscapedPath(),
					"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				writeProblem(w, Problem{Type: typeInternal, Title: "Internal error", Status: http.StatusInternalServerError,
					Detail: "the request failed; the server log has the cause"})
			}
		}()
		next.ServeHTTP(w, r)
	})
}
