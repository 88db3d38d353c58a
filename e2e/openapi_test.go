package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/snapflip/snapflip/internal/testenv/stack"
)

// Every exchange the suite has with the metadata API is checked against the API's own
// OpenAPI document, api/openapi.yaml (the file the server embeds and serves at
// /openapi.yaml), with kin-openapi:
//
//   - The request. A request the document calls invalid (a malformed version, a limit
//     out of range, an oversized batch) is one the server must refuse with a 4xx; its
//     response is then checked like any other. Hostile tests send such requests on
//     purpose, and the rule needs no flag to tell them apart.
//   - The response: its status must be one the operation lists, and the headers the
//     document declares for that status, the content type and the body must match.
//     kin-openapi does not look at a 304 at all, so its declared headers are checked
//     here.
//   - A request the document has no operation for (an unknown path, a method a path
//     does not have) must be answered 404 or 405 with the document's Problem response;
//     a 405's Allow header must list the methods the document has for the path.
//
// A failure is a tb.Errorf naming the method, path, status and the validator's message.

// openapiSpec is the loaded document and what the checks need of it.
type openapiSpec struct {
	doc     *openapi3.T
	router  routers.Router
	problem *openapi3.ResponseRef // components/responses/Problem, for unrouted requests
}

// openapiDoc loads the document once per test binary.
var openapiDoc = sync.OnceValues(func() (*openapiSpec, error) {
	path := filepath.Join("..", "api", "openapi.yaml")
	doc, err := openapi3.NewLoader().LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("%s is not a valid OpenAPI document: %w", path, err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route %s: %w", path, err)
	}
	problem := doc.Components.Responses["Problem"]
	if problem == nil || problem.Value == nil {
		return nil, fmt.Errorf("%s has no components/responses/Problem", path)
	}
	return &openapiSpec{doc: doc, router: router, problem: problem}, nil
})

func init() { openapi3filter.RegisterBodyDecoder("text/event-stream", eventStreamDecoder) }

// eventSchemas names the schema of each event type a text/event-stream response may
// send: an event's data is JSON matching it.
var eventSchemas = map[string]string{"flip": "FlipEvent", "covered": "CoveredEvent"}

// eventStreamDecoder lets kin-openapi check a text/event-stream body, as much of it as
// the test read: every complete event's type must be in eventSchemas and its data must
// match that type's schema in the document. The body itself is the value checked
// against the media type's schema (a string).
func eventStreamDecoder(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	raw, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	spec, err := openapiDoc()
	if err != nil {
		return nil, err
	}
	events, _ := splitEvents(raw)
	for i, ev := range events {
		if !ev.hasData {
			continue // a comment or the retry hint
		}
		name, ok := eventSchemas[ev.event]
		if !ok {
			return nil, fmt.Errorf("event %d: type %q is not one the document describes", i, ev.event)
		}
		schema := spec.doc.Components.Schemas[name]
		if schema == nil || schema.Value == nil {
			return nil, fmt.Errorf("the document has no schema %s", name)
		}
		var v any
		if err := json.Unmarshal([]byte(ev.data), &v); err != nil {
			return nil, fmt.Errorf("event %d (%s, id %q): data is not JSON: %v", i, ev.event, ev.id, err)
		}
		if err := schema.Value.VisitJSON(v, openapi3.MultiErrors(), openapi3.VisitAsResponse()); err != nil {
			return nil, fmt.Errorf("event %d (%s, id %q): data does not match %s: %w", i, ev.event, ev.id, name, err)
		}
	}
	return string(raw), nil
}

// sseEvent is one block of a Server-Sent Events stream.
type sseEvent struct {
	id, event, data, retry string
	hasData                bool
	comments               []string
}

// splitEvents parses the complete blocks of a text/event-stream body (each ended by a
// blank line) and returns them with what follows the last one.
func splitEvents(raw []byte) ([]sseEvent, []byte) {
	var out []sseEvent
	for {
		i := bytes.Index(raw, []byte("\n\n"))
		if i < 0 {
			return out, raw
		}
		block := string(raw[:i])
		raw = raw[i+2:]
		var ev sseEvent
		for line := range strings.SplitSeq(block, "\n") {
			if c, ok := strings.CutPrefix(line, ":"); ok {
				ev.comments = append(ev.comments, strings.TrimPrefix(c, " "))
				continue
			}
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				ev.id = value
			case "event":
				ev.event = value
			case "retry":
				ev.retry = value
			case "data":
				if ev.hasData {
					ev.data += "\n"
				}
				ev.data += value
				ev.hasData = true
			}
		}
		out = append(out, ev)
	}
}

// allowed lists the methods the document has for req's path, as an Allow header.
func (s *openapiSpec) allowed(req *http.Request) string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions} {
		r := req.Clone(context.Background())
		r.Method = m
		if _, _, err := s.router.FindRoute(r); err == nil {
			out = append(out, m)
		}
	}
	return strings.Join(out, ", ")
}

func methodSet(allow string) []string {
	var out []string
	for m := range strings.SplitSeq(allow, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

// openapiOptions are the validators' options: every response status must be
// documented, and the admin endpoints' bearer scheme is checked for its shape (the
// server checks the token itself).
var openapiOptions = &openapi3filter.Options{
	IncludeResponseStatus: true,
	MultiError:            true,
	SkipSettingDefaults:   true, // validate the request as sent
	AuthenticationFunc:    bearerShape,
}

// bearerShape accepts a request whose Authorization header is "Bearer <token>".
func bearerShape(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if s := in.SecurityScheme; s == nil || s.Type != "http" || !strings.EqualFold(s.Scheme, "bearer") {
		return fmt.Errorf("security scheme %q: only http bearer is known to the suite", in.SecuritySchemeName)
	}
	scheme, token, _ := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return errors.New("no bearer token in the Authorization header")
	}
	return nil
}

// Labels of exchanges the document has no operation for.
const (
	unrouted    = "(no route)"
	notHTTPPath = "(not HTTP)"
)

// openapiSeen counts the checked exchanges by "METHOD route status".
var openapiSeen = struct {
	sync.Mutex
	n map[string]int
}{n: map[string]int{}}

func seenExchange(method, route string, status int) {
	openapiSeen.Lock()
	openapiSeen.n[fmt.Sprintf("%s %s %d", method, route, status)]++
	openapiSeen.Unlock()
}

// reportOpenAPI writes the (method, route, status) combinations checked against the
// document, and the documented ones no test reached. TestMain calls it.
func reportOpenAPI(w io.Writer) {
	openapiSeen.Lock()
	defer openapiSeen.Unlock()
	if len(openapiSeen.n) == 0 {
		return
	}
	var documented, other []string
	for k, n := range openapiSeen.n {
		line := fmt.Sprintf("  %-50s %d", k, n)
		if strings.Contains(k, unrouted) || strings.Contains(k, notHTTPPath) {
			other = append(other, line)
		} else {
			documented = append(documented, line)
		}
	}
	slices.Sort(documented)
	slices.Sort(other)
	fmt.Fprintf(w, "openapi: %d (method, route, status) combinations of documented operations validated (exchanges each):\n%s\n",
		len(documented), strings.Join(documented, "\n"))
	if len(other) > 0 {
		fmt.Fprintf(w, "openapi: %d more without a documented operation, checked as problem documents:\n%s\n",
			len(other), strings.Join(other, "\n"))
	}
	if spec, err := openapiDoc(); err == nil {
		var missed []string
		for _, path := range spec.doc.Paths.InMatchingOrder() {
			for method, op := range spec.doc.Paths.Value(path).Operations() {
				for status := range op.Responses.Map() {
					if k := method + " " + path + " " + status; openapiSeen.n[k] == 0 {
						missed = append(missed, "  "+k)
					}
				}
			}
		}
		slices.Sort(missed)
		fmt.Fprintf(w, "openapi: %d documented combinations no test reached:\n%s\n", len(missed), strings.Join(missed, "\n"))
	}
}

// callAPI sends req with the default client, reads the whole response and checks
// the exchange against the document. A transport error is fatal.
func callAPI(tb testing.TB, req *http.Request) (*http.Response, []byte) {
	tb.Helper()
	resp, body, err := sendAPI(tb, req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp, body
}

// sendAPI is callAPI for callers that handle a transport error themselves (readers
// on goroutines of their own): it returns it.
func sendAPI(tb testing.TB, req *http.Request) (*http.Response, []byte, error) {
	tb.Helper()
	var reqBody []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("%s %s: read request body: %w", req.Method, req.URL.RequestURI(), err)
		}
		reqBody = b
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.RequestURI(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: read body: %w", req.Method, req.URL.RequestURI(), err)
	}
	checkOpenAPI(tb, req, reqBody, resp, body)
	return resp, body, nil
}

// checkRawOpenAPI checks an exchange whose request was written to the connection as
// the bytes raw. A request line net/http cannot parse never reaches the API:
// net/http answers it 400 itself, which is all there is to check.
func checkRawOpenAPI(tb testing.TB, raw []byte, resp *http.Response, body []byte) {
	tb.Helper()
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		method, _, _ := strings.Cut(string(raw), " ")
		seenExchange(method, notHTTPPath, resp.StatusCode)
		if resp.StatusCode != http.StatusBadRequest {
			tb.Errorf("%s %.60q (%v) = %d; want net/http's 400", method, raw, err, resp.StatusCode)
		}
		return
	}
	reqBody, err := io.ReadAll(req.Body)
	if err != nil {
		tb.Fatalf("read the raw request's body: %v", err)
	}
	checkOpenAPI(tb, req, reqBody, resp, body)
}

// checkOpenAPI checks one exchange (the request was sent with body reqBody; the
// response's body was read into body) against the document.
func checkOpenAPI(tb testing.TB, req *http.Request, reqBody []byte, resp *http.Response, body []byte) {
	tb.Helper()
	spec, err := openapiDoc()
	if err != nil {
		tb.Errorf("openapi: %v", err)
		return
	}
	status := resp.StatusCode
	what := fmt.Sprintf("%s %.120s = %d", req.Method, req.URL.RequestURI(), status)
	fail := func(format string, args ...any) {
		tb.Helper()
		msg := fmt.Sprintf(format, args...)
		if len(msg) > 2000 {
			msg = msg[:2000] + "…"
		}
		tb.Errorf("openapi: %s: %s", what, msg)
	}
	ctx := context.Background()
	vreq := req.Clone(ctx)
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))

	route, params, err := spec.router.FindRoute(vreq)
	if err != nil {
		// Nothing in the document describes this request, except that errors are
		// problem documents; the server must say it has no such route.
		want := http.StatusNotFound
		if errors.Is(err, routers.ErrMethodNotAllowed) {
			want = http.StatusMethodNotAllowed
		}
		seenExchange(req.Method, unrouted, status)
		if status != want {
			fail("the document has no operation for it (%v); want %d", err, want)
			return
		}
		if want == http.StatusMethodNotAllowed {
			if got, allow := resp.Header.Get("Allow"), spec.allowed(vreq); !slices.Equal(methodSet(got), methodSet(allow)) {
				fail("Allow %q; the document has %q for the path", got, allow)
			}
		}
		route = &routers.Route{Spec: spec.doc, Method: req.Method, Path: unrouted,
			Operation: &openapi3.Operation{Responses: openapi3.NewResponses(openapi3.WithStatus(want, spec.problem))}}
		in := &openapi3filter.RequestValidationInput{Request: vreq, Route: route, Options: openapiOptions}
		if err := openapi3filter.ValidateResponse(ctx, responseInput(in, resp, body)); err != nil {
			fail("response is not the document's Problem: %v", err)
		}
		return
	}
	seenExchange(req.Method, route.Path, status)

	// Path parameters are percent-decoded once, as the server does, so that the
	// document's constraints apply to the values and not to their escaped form.
	var reqErr error
	for name, v := range params {
		d, err := url.PathUnescape(v)
		if err != nil {
			reqErr = fmt.Errorf("path parameter %s: %v", name, err)
		}
		params[name] = d
	}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: openapiOptions}
	if reqErr == nil {
		reqErr = openapi3filter.ValidateRequest(ctx, in)
	}
	if reqErr != nil && (status < 400 || status > 499) {
		fail("the document calls the request invalid (%v), yet the server did not refuse it with a 4xx", reqErr)
	}

	ref := route.Operation.Responses.Status(status)
	if ref == nil {
		fail("status %d is not among the responses the document lists for %s %s", status, req.Method, route.Path)
		return
	}
	if status == http.StatusNotModified {
		// ValidateResponse passes any 304 unseen; check its declared headers here.
		for name, h := range ref.Value.Headers {
			if err := checkHeader(resp.Header, name, h.Value); err != nil {
				fail("%v", err)
			}
		}
		if len(body) != 0 {
			fail("a 304 with a body of %d bytes", len(body))
		}
		return
	}
	if err := openapi3filter.ValidateResponse(ctx, responseInput(in, resp, body)); err != nil {
		fail("%v", err)
	}
}

func responseInput(in *openapi3filter.RequestValidationInput, resp *http.Response, body []byte) *openapi3filter.ResponseValidationInput {
	return &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
		Header: resp.Header, Body: io.NopCloser(bytes.NewReader(body)), Options: openapiOptions}
}

// checkHeader checks a response header against its declaration (a required header is
// present; a present one matches its schema).
func checkHeader(h http.Header, name string, decl *openapi3.Header) error {
	values := h.Values(name)
	if len(values) == 0 {
		if decl.Required {
			return fmt.Errorf("response header %q missing", name)
		}
		return nil
	}
	if decl.Schema == nil || decl.Schema.Value == nil {
		return nil
	}
	if err := decl.Schema.Value.VisitJSON(values[0]); err != nil {
		return fmt.Errorf("response header %q doesn't match schema: %v", name, err)
	}
	return nil
}

// TestOpenAPIStatuses reaches the documented responses the rest of the suite does
// not, so that what the document says of them is checked against the server too:
// 503s before anything is published, a 304, 410s, a 413 and the document itself.
func TestOpenAPIStatuses(t *testing.T) {
	t.Parallel()
	e := start(t)
	call := func(method, path, body string, header ...string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, e.Base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, _ := callAPI(t, req)
		return resp
	}
	type exchange struct {
		method, path, body string
		header             []string
		want               int
	}
	check := func(what string, exchanges []exchange) {
		t.Helper()
		for _, x := range exchanges {
			if got := call(x.method, x.path, x.body, x.header...).StatusCode; got != x.want {
				t.Errorf("%s: %s %.80s = %d; want %d", what, x.method, x.path, got, x.want)
			}
		}
	}
	batch := `{"ids": ["plain", "nope"]}`
	never := "7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1700000000000"
	// Before the first sync the table does not exist: reads that do not go through the
	// pointer (/v1/versions, a named version) once answered 500 for it.
	check("before any sync", []exchange{
		{method: "GET", path: "/v1/versions", want: 200},
		{method: "GET", path: "/v1/versions/" + never, want: 404},
		{method: "GET", path: docPath("things", "plain") + "?version=" + never, want: 410},
		{method: "GET", path: "/v1/collections", want: 503},
		{method: "GET", path: "/v1/versions/current", want: 503},
		{method: "GET", path: "/v1/data/things", want: 503},
		{method: "POST", path: "/v1/data/things:batchGet", body: batch, want: 503},
		{method: "GET", path: "/openapi.yaml", want: 200},
	})

	out, err := e.sync(t)
	if err != nil {
		t.Fatal(err)
	}
	v := stack.PublishedVersion(t, out)
	e.awaitVersion(t, docPath("things", "plain"), v)
	etag := call("GET", docPath("things", "plain"), "").Header.Get("ETag")
	check("after a sync", []exchange{
		{method: "GET", path: docPath("things", "plain"), header: []string{"If-None-Match", etag}, want: 304},
		{method: "GET", path: docPath("things", "plain") + "?version=" + v, header: []string{"If-None-Match", etag}, want: 304},
		{method: "GET", path: docPath("things", "plain") + "?version=" + v, header: []string{"Snapshot-Version", never}, want: 400},
		{method: "GET", path: "/v1/collections?version=" + v, want: 200},
		{method: "GET", path: "/v1/collections?version=" + never, want: 410},
		{method: "GET", path: "/v1/data/things?limit=2&version=" + v, want: 200},
		{method: "GET", path: "/v1/data/things?version=" + never, want: 410},
		{method: "GET", path: "/v1/data/nope", want: 404},
		{method: "POST", path: "/v1/data/things:batchGet?version=" + never, body: batch, want: 410},
		{method: "POST", path: "/v1/data/nope:batchGet", body: batch, want: 404},
		{method: "POST", path: "/v1/data/things:batchGet", body: `{"ids": ["` + strings.Repeat("x", 2<<20) + `"]}`, want: 413},
		{method: "GET", path: "/v1/versions?limit=0", want: 400},
		{method: "GET", path: "/v1/versions/current", want: 200},
	})
}
