package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/snapflip/snapflip/resolver"
	"github.com/snapflip/snapflip/snapshot"
)

// Reader answers reads through the pointer; resolver.Resolver implements it.
type Reader interface {
	// Current returns a view of the current version; ErrNoVersion when none is
	// published, ErrCurrentExpired when it outlived its TTL.
	Current(ctx context.Context) (snapshot.View, error)
	// View returns a view of one version; ErrGone when it does not exist (any more).
	View(ctx context.Context, v snapshot.Version) (snapshot.View, error)
	// Get returns one document; ErrNotFound when the collection or id is unknown.
	Get(ctx context.Context, view snapshot.View, collection, id string) (resolver.Doc, error)
	// GetMany returns the documents found and the ids missing, all from the view.
	GetMany(ctx context.Context, view snapshot.View, collection string, ids []string) (map[string]resolver.Doc, []string, error)
	// Page returns up to limit documents after an id, in id order, and whether more
	// follow; ErrNotFound for an unknown collection.
	Page(ctx context.Context, view snapshot.View, collection, after string, limit int) ([]snapshot.Document, bool, error)
	// Filter returns a page of the documents whose entries in the scan's index fall
	// in its ranges, after the entry q.After ("" for the first page), in index order.
	Filter(ctx context.Context, view snapshot.View, q resolver.FilterQuery) (resolver.FilterPage, error)
	// Versions returns up to limit of the versions' manifests made before version
	// before ("" for the newest), newest first.
	Versions(ctx context.Context, before snapshot.Version, limit int) ([]snapshot.Manifest, error)
	// Manifest returns one version's manifest whatever its state; ErrNotFound when
	// there is none.
	Manifest(ctx context.Context, v snapshot.Version) (snapshot.Manifest, error)
	// Pointer returns the pointer (as of at most one refresh interval ago).
	Pointer(ctx context.Context) (snapshot.Pointer, error)
	// Ready returns nil when the pointer resolves.
	Ready(ctx context.Context) error

	// Await returns a view of the current version once it covers the token, waiting
	// until ctx ends: ErrNotCovered when the dataset is pinned at a version that does
	// not cover it, ErrTokenRejected for a token no version can cover,
	// ErrNotYetCovered when ctx ends first or too many wait.
	Await(ctx context.Context, tok snapshot.Token) (snapshot.View, error)
	// CoversNamed returns nil when the view (a version the request named) covers the
	// token, else an error wrapping ErrNotCovered or ErrTokenRejected.
	CoversNamed(ctx context.Context, view snapshot.View, tok snapshot.Token) error

	// ChangedIDs returns up to limit of the ids the view's version changed in a
	// collection against its parent, after the id after, in id order; ErrNotFound for
	// an unknown collection, ErrGone when they can no longer be told.
	ChangedIDs(ctx context.Context, view snapshot.View, collection, after string, limit int) (snapshot.Changes, error)
}

// MaxIDBytes is the longest id a request may name, as in the source.
const MaxIDBytes = 1024

// HeaderVersion names the version a response was answered from; a request may send it
// to read a given version.
const HeaderVersion = "Snapshot-Version"

// Config tunes the server.
type Config struct {
	// Dataset names the dataset on the status page.
	Dataset string
	// BatchLimit is the most ids one batchGet may ask for; default 1000.
	BatchLimit int
	// PageLimit is the largest page; default 1000 (and 100 when a request says none).
	PageLimit int
	// MaxBodyBytes bounds a request body; default 2 MiB.
	MaxBodyBytes int64
	// Registry, when set, gets the API's metrics and is served at /metrics.
	Registry *prometheus.Registry
	// MetricsElsewhere keeps /metrics off this handler: the registry is served on a
	// port of its own (metadata-api --metrics-addr).
	MetricsElsewhere bool
	// CacheStats, when set, reports document cache hits and misses for /metrics.
	CacheStats func() (hits, misses int64)
	// PointerAge, when set, reports how old the cached pointer is, for /metrics.
	PointerAge func() time.Duration
	// ServedVersion, when set, reports the version unpinned reads get, for /metrics.
	ServedVersion func() snapshot.Version
	// AdminToken turns the admin endpoints on: they need "Authorization: Bearer
	// <AdminToken>". Empty: they do not exist.
	AdminToken string
	// Admin carries out the admin endpoints' rollbacks and unpins.
	Admin Admin
	// MaxWatchers is the most GET /v1/watch streams open at once; default 1000. Past
	// it, a watch answers 503.
	MaxWatchers int
	// MaxWatchersPerIdentity is the most of them one verified identity (issuer and
	// subject) may hold; default 250. Past it, its next watch answers 429.
	MaxWatchersPerIdentity int
	// MaxWaitersPerIdentity is the most requests one verified identity may have
	// waiting for a token (Snapshot-After) at once; default 1000. Past it, its next
	// such request answers 429. The Reader caps the waiters of all callers.
	MaxWaitersPerIdentity int
	// WatchHeartbeat is how often a watch stream with nothing to say gets a comment
	// line, so that proxies keep it open; default 15s.
	WatchHeartbeat time.Duration
	// WatchInterval is how often the watch looks at the pointer the Reader keeps;
	// default 250ms, half the resolver's default refresh, so that it sees every
	// pointer a refresh reads.
	WatchInterval time.Duration
	// Waiting, when set, reports how many requests wait for a token, for /metrics.
	Waiting func() int64
	// Auth, when set, verifies every caller and reads it only what its grants give;
	// nil serves anyone (metadata-api --auth none).
	Auth *Auth
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{BatchLimit: 1000, PageLimit: 1000, MaxBodyBytes: 2 << 20,
		MaxWatchers: 1000, MaxWatchersPerIdentity: 250, MaxWaitersPerIdentity: 1000, WatchHeartbeat: 15 * time.Second, WatchInterval: 250 * time.Millisecond}
}

// Server is the HTTP handler of the metadata API.
type Server struct {
	reader  Reader
	cfg     Config
	log     *slog.Logger
	mux     *chi.Mux
	metrics *metrics
	flips   *broadcaster
	tokens  tokenCache
	// watchers and waiters cap each identity's share of the watch streams and of
	// the requests waiting for a token.
	watchers, waiters *perIdentity
	// cursors seals a scoped caller's changes cursor.
	cursors *sealer
	// callers are the identities of the requests being served (with Auth).
	callers *callers
	// checked remembers the scoped filter pages found wholly in their scope.
	checked *lru.Cache[scopedPage, struct{}]
}

// checkedPages is how many scoped filter pages the server remembers as checked.
const checkedPages = 10_000

//go:embed openapi.yaml
var openapiDoc []byte

// withDefaults fills c's zero fields with DefaultConfig's.
func (c Config) withDefaults() Config {
	def := DefaultConfig()
	c.BatchLimit = cmp.Or(c.BatchLimit, def.BatchLimit)
	c.PageLimit = cmp.Or(c.PageLimit, def.PageLimit)
	c.MaxWatchers = cmp.Or(c.MaxWatchers, def.MaxWatchers)
	c.MaxWatchersPerIdentity = cmp.Or(c.MaxWatchersPerIdentity, def.MaxWatchersPerIdentity)
	c.MaxWaitersPerIdentity = cmp.Or(c.MaxWaitersPerIdentity, def.MaxWaitersPerIdentity)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, def.MaxBodyBytes)
	c.WatchHeartbeat = cmp.Or(c.WatchHeartbeat, def.WatchHeartbeat)
	c.WatchInterval = cmp.Or(c.WatchInterval, def.WatchInterval)
	return c
}

// Validate reports the first bad value of c as an error naming its field, wrapping
// snapshot.ErrInvalid. A zero field takes its default (DefaultConfig's).
func (c Config) Validate() error {
	c = c.withDefaults()
	for _, f := range []struct {
		name string
		ok   bool
	}{
		{"BatchLimit", c.BatchLimit > 0}, {"PageLimit", c.PageLimit > 0}, {"MaxBodyBytes", c.MaxBodyBytes > 0},
		{"MaxWatchers", c.MaxWatchers > 0}, {"MaxWatchersPerIdentity", c.MaxWatchersPerIdentity > 0},
		{"MaxWaitersPerIdentity", c.MaxWaitersPerIdentity > 0}, {"WatchHeartbeat", c.WatchHeartbeat > 0}, {"WatchInterval", c.WatchInterval > 0},
	} {
		if !f.ok {
			return fmt.Errorf("%w api config: %s must not be negative (0 takes the default)", snapshot.ErrInvalid, f.name)
		}
	}
	if c.Auth != nil && (c.Auth.Verifier == nil || c.Auth.Policy == nil) {
		return fmt.Errorf("%w api config: Auth needs a Verifier and a Policy", snapshot.ErrInvalid)
	}
	if c.AdminToken != "" && c.Admin == nil {
		return fmt.Errorf("%w api config: AdminToken is set but Admin is nil: the admin endpoints would not exist", snapshot.ErrInvalid)
	}
	return nil
}

// NewServer returns the API's handler for cfg (start from DefaultConfig), or
// cfg.Validate's error.
func NewServer(reader Reader, cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{reader: reader, cfg: cfg, log: logger(log)}
	if cfg.Auth != nil {
		s.cursors = newSealer(cfg.Auth.CursorKey)
	}
	s.callers = newCallers()
	s.checked, _ = lru.New[scopedPage, struct{}](checkedPages)
	s.watchers = newPerIdentity("watch streams", cfg.MaxWatchersPerIdentity)
	s.waiters = newPerIdentity("requests waiting for a token", cfg.MaxWaitersPerIdentity)
	s.flips = newBroadcaster(reader, cfg.WatchInterval, cfg.MaxWatchers, s.log.WarnContext)
	r := chi.NewRouter()
	if cfg.Registry != nil {
		s.metrics = newMetrics(cfg.Registry, cfg, s.flips.count)
		r.Use(s.metrics.middleware)
	}
	r.Use(escapedRouting, s.recoverer, s.accessLog, s.strictQuery)
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Get("/openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(openapiDoc)
	})
	if cfg.Registry != nil && !cfg.MetricsElsewhere {
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	}
	if cfg.Admin != nil && (cfg.AdminToken != "" || cfg.Auth != nil) {
		r.Post("/v1/admin/rollback", s.requireAdmin(s.handle(s.adminRollback)))
		r.Post("/v1/admin/unpin", s.requireAdmin(s.handle(s.adminUnpin)))
	}
	r.Group(func(r chi.Router) {
		r.Use(s.authenticate)
		r.Get("/", s.statusPage)
		r.Get("/v1/data/{collection}/{id}", s.handle(s.getDocument))
		r.Post("/v1/data/{collection}:batchGet", s.handle(s.batchGet))
		r.Get("/v1/data/{collection}", s.handle(s.listDocuments))
		r.Get("/v1/collections", s.handle(s.collections))
		r.Get("/v1/versions", s.handle(s.versions))
		r.Get("/v1/versions/current", s.handle(s.currentVersion))
		r.Get("/v1/versions/{version}", s.handle(s.version))
		r.Get(changesRoute, s.handle(s.changes))
		r.Get("/v1/watch", s.watch)
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, Problem{Type: typeNotFound, Title: "Not found", Status: http.StatusNotFound,
			Detail: "no route " + r.Method + " " + truncate(r.URL.EscapedPath(), 200)})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		if allow := s.allowed(r.URL.EscapedPath()); allow != "" {
			w.Header().Set("Allow", allow) // a 405 must say what is allowed (RFC 9110 15.5.6)
		}
		writeProblem(w, Problem{Type: typeBadRequest, Title: "Method not allowed", Status: http.StatusMethodNotAllowed,
			Detail: r.Method + " is not allowed on " + truncate(r.URL.EscapedPath(), 200)})
	})
	s.mux = r
	return s, nil
}

// allowed lists the methods that have a route for the escaped path, for the Allow
// header of a 405.
func (s *Server) allowed(path string) string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions} {
		if s.mux.Match(chi.NewRouteContext(), m, path) {
			out = append(out, m)
		}
	}
	return strings.Join(out, ", ")
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Routes returns "METHOD pattern" for every route (for the OpenAPI check).
func (s *Server) Routes() []string {
	var out []string
	_ = chi.Walk(s.mux, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		out = append(out, method+" "+route)
		return nil
	})
	return out
}

// handle adapts a handler that returns its error: the error becomes the response's
// problem document, written in one place.
func (s *Server) handle(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	}
}

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

// strictQuery refuses a malformed query string, which net/url would silently drop.
func (s *Server) strictQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery == "" {
			next.ServeHTTP(w, r)
			return
		}
		if err := checkQuery(r.URL.RawQuery); err != nil {
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkQuery refuses a query string net/url cannot read, naming the first parameter
// it cannot (as sent, truncated) and why.
func checkQuery(raw string) error {
	if _, err := url.ParseQuery(raw); err == nil {
		return nil
	}
	for _, kv := range strings.Split(raw, "&") {
		if _, err := url.ParseQuery(kv); err != nil {
			return badRequest("query string: parameter %q: %v", truncate(kv, 80), err)
		}
	}
	return badRequest("query string: malformed")
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

// accessLog logs every request at debug level (run with --log-level debug to see them).
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.log.Enabled(r.Context(), slog.LevelDebug) {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		s.log.DebugContext(r.Context(), "request", "method", r.Method, "path", truncate(r.URL.EscapedPath(), 200),
			"status", sw.status, "version", w.Header().Get(HeaderVersion), "duration", time.Since(start).String())
	})
}

// statusWriter records the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

// Unwrap lets http.ResponseController reach the connection (a watch stream flushes
// and sets deadlines through it).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// pathParam returns the decoded URL parameter, or an ErrInvalid error naming it.
func pathParam(r *http.Request, name string, maxBytes int) (string, error) {
	v, err := url.PathUnescape(chi.URLParam(r, name))
	if err != nil {
		return "", badRequest("%s: bad percent-encoding", name)
	}
	return v, checkID(name, v, maxBytes)
}

// checkID validates an id (or a collection name) from a request.
func checkID(name, v string, maxBytes int) error {
	switch {
	case v == "":
		return badRequest("%s: empty", name)
	case len(v) > maxBytes:
		return badRequest("%s: %d bytes, over the limit of %d", name, len(v), maxBytes)
	case !utf8.ValidString(v):
		return badRequest("%s: not valid UTF-8", name)
	case strings.IndexByte(v, 0) >= 0:
		return badRequest("%s: holds a NUL byte", name)
	}
	return nil
}

// view resolves the version a request reads: the one it names (query "version" or the
// Snapshot-Version header), else the current one. pinned reports whether it named one.
// With a token (Snapshot-After), a named version must cover it, and the current one
// is waited for until one does (Reader.Await), up to the request's wait bound.
func (s *Server) view(r *http.Request) (snapshot.View, bool, error) {
	tok, has, err := afterToken(r)
	if err != nil {
		return snapshot.View{}, false, err
	}
	view, pinned, err := s.named(r, has)
	if !has {
		return view, pinned, err
	}
	if pinned {
		if err == nil {
			err = s.reader.CoversNamed(r.Context(), view, tok)
		}
		return view, true, err
	}
	if !errors.Is(err, errNoneNamed) {
		return view, false, err
	}
	view, err = s.await(r, tok)
	return view, false, err
}

// current returns the current version, or with a token the first current version
// that covers it (Reader.Await), waiting up to the request's bound.
func (s *Server) current(r *http.Request) (snapshot.View, error) {
	tok, has, err := afterToken(r)
	switch {
	case err != nil:
		return snapshot.View{}, err
	case !has:
		return s.reader.Current(r.Context())
	}
	return s.await(r, tok)
}

func (s *Server) await(r *http.Request, tok snapshot.Token) (snapshot.View, error) {
	release, err := s.waiters.take(s.identity(r))
	if err != nil {
		return snapshot.View{}, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), waitBound(r))
	defer cancel()
	return s.reader.Await(ctx, tok)
}

// withToken checks a view a request named some other way (a page token) against the
// request's token, if it carries one, for a read of collection, unless it is the
// token the first page was judged with (judged, from the page token): every page of
// one read comes from the version the first page used.
func (s *Server) withToken(r *http.Request, view snapshot.View, collection, judged string) error {
	tok, has, err := afterToken(r)
	if err != nil || !has {
		return err
	}
	if judged != "" && judged == tokenKey(tok) {
		return nil
	}
	if err := s.reader.CoversNamed(r.Context(), view, tok); err != nil {
		return err
	}
	if !view.Manifest.CollectionCovers(collection, tok) {
		return fmt.Errorf("version %s holds collection %s at an earlier position, which does not cover token %s: %w (%w)",
			view.Version, collection, snapshot.Truncate(tok.String(), 80), snapshot.ErrNotCovered, errHeld)
	}
	return nil
}

// judgedKey is the key of the token a request carries, judged covered by the version
// that answered it, for its next page's token; "" when it carries none.
func judgedKey(r *http.Request) string {
	tok, has, err := afterToken(r)
	if err != nil || !has {
		return ""
	}
	return tokenKey(tok)
}

// tokenKey names a token briefly: the first 12 bytes of the SHA-256 of its text.
func tokenKey(tok snapshot.Token) string {
	sum := sha256.Sum256([]byte(tok.String()))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// errNoneNamed is named's answer for a request that names no version.
var errNoneNamed = errors.New("no version named")

// named resolves the version a request names, or the current one: pinned reports
// whether it named one. With has, a request that names none gets errNoneNamed instead
// of the current version.
func (s *Server) named(r *http.Request, has bool) (snapshot.View, bool, error) {
	var named string
	if r.URL.RawQuery != "" {
		named = r.URL.Query().Get("version")
	}
	if h := r.Header.Get(HeaderVersion); h != "" {
		if named != "" && named != h {
			return snapshot.View{}, false, badRequest("version: the query says %q and the %s header %q", truncate(named, 80), HeaderVersion, truncate(h, 80))
		}
		named = h
	}
	if named == "" {
		if has {
			return snapshot.View{}, false, errNoneNamed
		}
		v, err := s.reader.Current(r.Context())
		return v, false, err
	}
	v, err := snapshot.ParseVersion(named)
	if err != nil {
		return snapshot.View{}, true, err
	}
	view, err := s.reader.View(r.Context(), v)
	return view, true, err
}

// cacheHeaders says how long a response may be cached: a response from a named
// version never changes; one from the current version must be revalidated.
// The header values are shared, never modified; keys are written already canonical,
// which spares net/http canonicalising them on every request.
var (
	cacheImmutable = []string{"public, max-age=31536000, immutable"}
	// With Auth an answer depends on who asked: no shared cache may keep it.
	cachePrivate    = []string{"private, max-age=31536000, immutable"}
	cacheRevalidate = []string{"no-cache"}
	varyVersion     = []string{HeaderVersion + ", " + HeaderAfter}
	contentJSON     = []string{"application/json"}
)

func (s *Server) cacheHeaders(w http.ResponseWriter, view snapshot.View, pinned bool) {
	s.stamp(w, view)
	h := w.Header()
	if pinned {
		h["Cache-Control"] = s.immutable()
	} else {
		h["Cache-Control"] = cacheRevalidate
	}
	h["Vary"] = varyVersion
}

// immutable is the Cache-Control of an answer from a named version: public, or
// private with Auth.
func (s *Server) immutable() []string {
	if s.cfg.Auth != nil {
		return cachePrivate
	}
	return cacheImmutable
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
