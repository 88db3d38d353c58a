package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/snapflip/snapflip/internal/retry"
)

// Config tunes a Client. Start from DefaultConfig and change what you need. As with
// net/http's option structs, a zero field takes its default (BatchLimit,
// MaxBatchBytes, and Retry: a zero RetryPolicy is DefaultRetryPolicy), but for those
// whose zero says something of its own: Timeout (no bound but the context, as
// http.Client's), UserAgent (Go's own), CacheBytes (no cache) and, in a RetryPolicy
// otherwise set, MaxRetryAfter (honour no Retry-After).
type Config struct {
	// HTTPClient sends the requests. Default (nil): a client of its own on
	// http.DefaultTransport. Its Timeout, if set, bounds each attempt too.
	HTTPClient *http.Client
	// Timeout bounds one attempt: sending the request and reading the whole answer. A
	// request as a whole is bounded by its context and the retry policy. 0: no bound
	// but the context. Default 10s.
	Timeout time.Duration
	// UserAgent is sent with every request; empty sends net/http's own.
	// DefaultConfig sets "snapflip-go-client".
	UserAgent string
	// Retry says what is retried and how patiently.
	Retry RetryPolicy
	// CacheBytes bounds the ETag cache, in bytes of documents and URLs: reads of a
	// document revalidate the copy cached at the same URL with If-None-Match, and a 304
	// serves it. 0 (the default) turns the cache off. Named-version reads go through it
	// too (their URL names the version), but they are revalidated like the others.
	CacheBytes int64
	// BatchLimit is the most ids one batchGet request carries; BatchGet splits longer
	// lists. Default 1000, the API's default --batch-limit: set the server's value when
	// it runs with a lower one.
	BatchLimit int
	// MaxBatchBytes is the largest batchGet body BatchGet sends; it splits lists whose
	// JSON would be longer. Default 2 MiB, the API's limit on bodies.
	MaxBatchBytes int
	// NoSessionToken turns monotonic reads across replicas off. By default (false)
	// the client keeps the newest Snapshot-Token it was answered with and sends it as
	// Snapshot-After with every read of the current version that gives no After, so
	// that no read goes back to a version older than one it already read, whichever
	// replica of the API answers. Should an operator roll the dataset back below it,
	// the client drops it and reads again without it (it follows the rollback), once,
	// and says nothing. Off, reads send no token but the ones given with After.
	NoSessionToken bool
	// Token, when set, gives the bearer token every request is sent with (the API's
	// --auth); TokenFile reads a Kubernetes projected service-account token. Default
	// (nil): no Authorization header. Answers 401 and 403 match ErrUnauthorized and
	// ErrForbidden and are never retried.
	Token TokenSource
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Timeout:       10 * time.Second,
		UserAgent:     "snapflip-go-client",
		Retry:         DefaultRetryPolicy(),
		BatchLimit:    1000,
		MaxBatchBytes: 2 << 20,
	}
}

// withDefaults fills the zero fields that take a default.
func (c Config) withDefaults() Config {
	def := DefaultConfig()
	c.BatchLimit = cmp.Or(c.BatchLimit, def.BatchLimit)
	c.MaxBatchBytes = cmp.Or(c.MaxBatchBytes, def.MaxBatchBytes)
	c.Retry = c.Retry.withDefaults()
	return c
}

// Validate reports the first field that is not usable, by name, in an error wrapping
// ErrInvalidConfig. A zero field that takes a default is usable.
func (c Config) Validate() error {
	if err := c.withDefaults().validate(); err != nil {
		return fmt.Errorf("snapflip: %w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func (c Config) validate() error {
	switch {
	case c.Timeout < 0:
		return fmt.Errorf("config.Timeout %s: must not be negative", c.Timeout)
	case c.CacheBytes < 0:
		return fmt.Errorf("config.CacheBytes %d: must not be negative", c.CacheBytes)
	case c.BatchLimit < 1:
		return fmt.Errorf("config.BatchLimit %d: must be at least 1 (0 takes the default)", c.BatchLimit)
	case c.MaxBatchBytes < 16<<10:
		// Room for the longest id the API takes, every byte escaped by JSON.
		return fmt.Errorf("config.MaxBatchBytes %d: must be at least 16384 (0 takes the default)", c.MaxBatchBytes)
	}
	return c.Retry.validate()
}

// Client reads a snapflip dataset through its metadata API. Reads through the Client
// itself are answered from the current version, which may change between two calls;
// a Snapshot reads one version until it is dropped. A Client is safe for concurrent
// use.
type Client struct {
	cfg    Config
	http   *http.Client
	base   url.URL // scheme and host
	prefix string  // the base URL's path, escaped, without a trailing slash
	cache  *etagCache
	tokens *lastToken // nil: monotonic reads are off

	sleep func(context.Context, time.Duration) error // tests replace it
	now   func() time.Time
}

// New returns a client of the metadata API at baseURL ("http://metadata-api:8080", or
// with a path prefix when a proxy mounts the API under one).
func New(baseURL string, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("snapflip client: %w", err)
	}
	cfg = cfg.withDefaults()
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("snapflip client: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("snapflip client: base URL %q: want http(s)://host[:port][/prefix]", baseURL)
	}
	c := &Client{cfg: cfg, http: cfg.HTTPClient, base: url.URL{Scheme: u.Scheme, Host: u.Host},
		prefix: strings.TrimRight(u.EscapedPath(), "/"), sleep: retry.Sleep, now: time.Now}
	if c.http == nil {
		c.http = &http.Client{Transport: http.DefaultTransport}
	}
	if cfg.CacheBytes > 0 {
		c.cache = newETagCache(cfg.CacheBytes)
	}
	if !cfg.NoSessionToken {
		c.tokens = &lastToken{}
	}
	return c, nil
}

// escapeSegment escapes s as one path segment. url.PathEscape leaves "." and "..",
// which a proxy (or a client library) may resolve as dot segments (RFC 3986 5.2.4);
// escaped, they are plain ids to every hop, and the API decodes them once.
func escapeSegment(s string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(s)
}

// request is one exchange to attempt until it succeeds or the policy gives up.
type request struct {
	method  string
	path    string // escaped, below the base URL's path
	query   url.Values
	body    []byte // JSON, or nil
	etag    string // sent as If-None-Match when not empty
	version string // the version the request names, for errors
	consistency
}

// consistency says which token a request sends as Snapshot-After.
type consistency struct {
	after     string // the caller's (After), honoured strictly; "" for none
	monotonic bool   // with no token of the caller's, send the last one answered (a read of the current version)
}

// answer is a response read in full.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// url returns the request's absolute URL, which also keys the ETag cache.
func (c *Client) url(path string, q url.Values) string {
	u := c.base
	u.RawPath = c.prefix + path
	u.Path, _ = url.PathUnescape(u.RawPath) // we escaped it: it unescapes
	u.RawQuery = q.Encode()
	return u.String()
}

// send exchanges r with the token its consistency asks for, and keeps the newest
// token the answer names. A kept token that the API says no version will
// cover (412: an operator rolled the dataset back; 400: the dataset's source is
// another cluster now), or that no version covered within the API's wait (503: a
// token cut to fit its size names a transaction that still runs), is dropped, and r
// sent again without it.
func (c *Client) send(ctx context.Context, r request) (answer, error) {
	after, auto := c.after(r.consistency)
	a, err := c.exchange(ctx, r, after)
	if auto && ctx.Err() == nil && (errors.Is(err, ErrNotCovered) || errors.Is(err, ErrTokenRejected) || errors.Is(err, ErrNotYetCovered)) {
		c.tokens.forget(after)
		a, err = c.exchange(ctx, r, "")
	}
	if err == nil && c.tokens != nil {
		c.tokens.learn(a.header.Get(HeaderToken))
	}
	return a, err
}

// after returns the token a request sends as Snapshot-After ("" for none), and
// whether it is the kept one.
func (c *Client) after(cons consistency) (string, bool) {
	switch {
	case cons.after != "":
		return cons.after, false
	case cons.monotonic && c.tokens != nil:
		tok := c.tokens.get()
		return tok, tok != ""
	}
	return "", false
}

// exchange attempts r, sending after as Snapshot-After unless it is "", until it is
// answered 200 or 304, or fails for good: an answer the retry policy does not retry
// (a token not yet covered is not: the API waited already), the last attempt, a
// Retry-After too long for the policy or for the context's deadline, or the context's
// end. Every failure but the context's is an *Error.
func (c *Client) exchange(ctx context.Context, r request, after string) (answer, error) {
	target := c.url(r.path, r.query)
	var last *Error
	for attempt := 1; ; attempt++ {
		a, err := c.attempt(ctx, r, target, after)
		if err == nil && (a.status == http.StatusOK || a.status == http.StatusNotModified) {
			return a, nil
		}
		if ctx.Err() != nil {
			return answer{}, c.ctxErr(ctx, r, err, last)
		}
		if err != nil {
			last = &Error{Method: r.method, Path: c.prefix + r.path, Version: r.version, Err: err}
		} else {
			last = c.problem(r, a)
		}
		last.Attempts = attempt
		if err == nil && (!retryableStatus(a.status) || last.Is(ErrNotYetCovered)) {
			return answer{}, last
		}
		if attempt >= c.cfg.Retry.MaxAttempts || last.RetryAfter > c.cfg.Retry.MaxRetryAfter {
			return answer{}, last
		}
		wait := max(c.cfg.Retry.backoff(attempt), last.RetryAfter)
		if deadline, ok := ctx.Deadline(); ok && c.now().Add(wait).After(deadline) {
			return answer{}, last // waiting would outlive the caller: say why now
		}
		if err := c.sleep(ctx, wait); err != nil {
			return answer{}, c.ctxErr(ctx, r, nil, last)
		}
	}
}

// ctxErr is the error of a request whose context ended; it matches ctx.Err() with
// errors.Is and says what the last attempt got.
func (c *Client) ctxErr(ctx context.Context, r request, err error, last *Error) error {
	switch {
	case last != nil:
		return fmt.Errorf("snapflip: %s %s: %w (last attempt: %v)", r.method, truncate(c.prefix+r.path, 200), context.Cause(ctx), last)
	case err != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("snapflip: %s %s: %w (%v)", r.method, truncate(c.prefix+r.path, 200), context.Cause(ctx), err)
	}
	return fmt.Errorf("snapflip: %s %s: %w", r.method, truncate(c.prefix+r.path, 200), context.Cause(ctx))
}

// serverWait is how long the API waits by default for a version covering a token.
const serverWait = 5 * time.Second

// preferWait returns the wait, in whole seconds, to ask the API for (RFC 7240's
// Prefer: wait) when an attempt has left to live, and whether to ask at all: only to
// wait less than the API would, a second short of the attempt's end, so that its
// answer, ErrNotYetCovered, comes before the caller gives up. It never asks for less
// than a second: the API's wait bounds its reading of the covering version too.
func preferWait(left time.Duration) (int, bool) {
	wait := (left - time.Second) / time.Second
	if wait >= serverWait/time.Second {
		return 0, false
	}
	return int(max(wait, 1)), true
}

// maxErrorBody bounds how much of an error answer is read (a proxy's page may be
// large; the API's problem documents are small).
const maxErrorBody = 64 << 10

// attempt sends r once and reads the whole answer; an error is a transport failure:
// no answer, or an answer cut short.
func (c *Client) attempt(ctx context.Context, r request, target, after string) (answer, error) {
	if c.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, body)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if err := c.authorize(ctx, req); err != nil {
		return answer{}, err
	}
	if c.cfg.UserAgent != "" {
		req.Header.Set("User-Agent", c.cfg.UserAgent)
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.etag != "" {
		req.Header.Set("If-None-Match", r.etag)
	}
	if after != "" {
		req.Header.Set(headerAfter, after)
		if deadline, ok := ctx.Deadline(); ok {
			if wait, ok := preferWait(time.Until(deadline)); ok {
				req.Header.Set("Prefer", "wait="+strconv.Itoa(wait))
			}
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	var rd io.Reader = resp.Body
	if resp.StatusCode != http.StatusOK {
		rd = io.LimitReader(resp.Body, maxErrorBody)
	}
	b, err := io.ReadAll(rd)
	if err != nil {
		return answer{}, fmt.Errorf("read the answer: %w", err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// problem turns an error answer into an *Error, from its problem document when it has
// one.
func (c *Client) problem(r request, a answer) *Error {
	e := &Error{Method: r.method, Path: c.prefix + r.path, StatusCode: a.status, Version: a.header.Get(HeaderVersion),
		RetryAfter: parseRetryAfter(a.header, c.now())}
	if e.Version == "" {
		e.Version = r.version
	}
	if mt, _, _ := mime.ParseMediaType(a.header.Get("Content-Type")); mt == "application/problem+json" {
		var p struct {
			Type   string `json:"type"`
			Title  string `json:"title"`
			Detail string `json:"detail"`
		}
		if json.Unmarshal(a.body, &p) == nil {
			e.Type, e.Title, e.Detail = p.Type, p.Title, p.Detail
		}
	}
	if e.Title == "" {
		e.Title = http.StatusText(a.status)
	}
	return e
}

// HeaderVersion is the header that names the version an answer came from.
const HeaderVersion = "Snapshot-Version"
