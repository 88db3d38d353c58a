package api_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/snapshot"
)

// TestOpenAPIMatchesRoutes: every route the server has is in the served OpenAPI
// document, and every operation the document describes is a route.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	s := newServer(t, &fakeReader{}, func(c *api.Config) { c.Registry = prometheus.NewRegistry(); c.AdminToken = "t"; c.Admin = fakeAdmin{} })
	res, body := do(t, s, http.MethodGet, "/openapi.yaml", "")
	if res.StatusCode != 200 {
		t.Fatalf("GET /openapi.yaml = %d", res.StatusCode)
	}
	var doc struct {
		OpenAPI string                               `yaml:"openapi"`
		Paths   map[string]map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(body, &doc); err != nil {
		t.Fatalf("openapi.yaml does not parse: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi version %q; want 3.x", doc.OpenAPI)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
			if _, ok := op["responses"]; !ok {
				t.Errorf("%s %s has no responses", method, path)
			}
		}
	}
	routes := s.Routes()
	slices.Sort(documented)
	slices.Sort(routes)
	if diff := cmp.Diff(documented, routes); diff != "" {
		t.Errorf("OpenAPI operations (-documented +routes):\n%s", diff)
	}
}

// TestOpenAPIDocumentIsValid: the served document loads with kin-openapi (every $ref
// resolves), validates as OpenAPI 3 (schemas, patterns, examples, parameters) and
// routes (the path templates parse), as the end-to-end suite needs it to.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	s := newServer(t, &fakeReader{}, func(c *api.Config) { c.Registry = prometheus.NewRegistry() })
	res, body := do(t, s, http.MethodGet, "/openapi.yaml", "")
	if res.StatusCode != 200 {
		t.Fatalf("GET /openapi.yaml = %d", res.StatusCode)
	}
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	doc, err := loader.LoadFromData(body)
	if err != nil {
		t.Fatalf("openapi.yaml does not load: %v", err)
	}
	if err := doc.Validate(context.Background(), openapi3.EnableExamplesValidation(), openapi3.EnableSchemaPatternValidation()); err != nil {
		t.Errorf("openapi.yaml is not valid OpenAPI: %v", err)
	}
	if _, err := gorillamux.NewRouter(doc); err != nil {
		t.Errorf("openapi.yaml does not route: %v", err)
	}
}

// TestMethodNotAllowedSaysAllow: a 405 names the methods the path has, as RFC 9110
// requires of it.
func TestMethodNotAllowedSaysAllow(t *testing.T) {
	s := newServer(t, &fakeReader{}, func(c *api.Config) { c.AdminToken = "t"; c.Admin = fakeAdmin{} })
	for _, tc := range []struct{ method, path, want string }{
		{http.MethodDelete, "/v1/data/c/a%2Fb", "GET"},
		{http.MethodPut, "/v1/versions/current", "GET"},
		{http.MethodPost, "/healthz", "GET"},
		{http.MethodGet, "/v1/admin/unpin", "POST"},
	} {
		res, body := do(t, s, tc.method, tc.path, "")
		if got := res.Header.Get("Allow"); res.StatusCode != http.StatusMethodNotAllowed || got != tc.want {
			t.Errorf("%s %s = %d, Allow %q (%s); want 405, Allow %q", tc.method, tc.path, res.StatusCode, got, body, tc.want)
		}
	}
}

type fakeAdmin struct{}

func (fakeAdmin) Rollback(context.Context, snapshot.RollbackRequest) (snapshot.RollbackResult, error) {
	return snapshot.RollbackResult{Message: "rolled back"}, nil
}

func (fakeAdmin) Unpin(context.Context, string, string) (snapshot.RollbackResult, error) {
	return snapshot.RollbackResult{}, fmt.Errorf("%w: not pinned", snapshot.ErrTargetRefused)
}

// TestAdminEndpointsNeedTheToken: off without a token; with one, 401 without or with a
// wrong bearer token, and the right one is let through.
func TestAdminEndpointsNeedTheToken(t *testing.T) {
	off := newServer(t, &fakeReader{}, func(c *api.Config) { c.Admin = fakeAdmin{} })
	if res, _ := do(t, off, http.MethodPost, "/v1/admin/rollback", `{"previous":true,"reason":"x"}`); res.StatusCode != 404 {
		t.Errorf("admin endpoint without a configured token = %d; want 404", res.StatusCode)
	}
	on := newServer(t, &fakeReader{}, func(c *api.Config) { c.Admin = fakeAdmin{}; c.AdminToken = "s3cret" })
	body := `{"previous":true,"reason":"x"}`
	for _, auth := range []string{"", "Bearer wrong", "Bearer s3cre", "s3cret", "Bearer s3cret2", "Basic s3cret"} {
		res, _ := do(t, on, http.MethodPost, "/v1/admin/rollback", body, "Authorization", auth)
		if res.StatusCode != 401 || res.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q = %d; want 401 with a challenge", auth, res.StatusCode)
		}
	}
	if res, b := do(t, on, http.MethodPost, "/v1/admin/rollback", body, "Authorization", "Bearer s3cret"); res.StatusCode != 200 || !strings.Contains(string(b), "rolled back") {
		t.Errorf("right token = %d %s; want 200", res.StatusCode, b)
	}
	if res, _ := do(t, on, http.MethodPost, "/v1/admin/unpin", `{"reason":"x"}`, "Authorization", "Bearer s3cret"); res.StatusCode != 422 {
		t.Errorf("refused unpin = %d; want 422", res.StatusCode)
	}
	if res, _ := do(t, on, http.MethodPost, "/v1/admin/rollback", `{"previous":true,"reason":"x","extra":1}`, "Authorization", "Bearer s3cret"); res.StatusCode != 400 {
		t.Errorf("unknown field = %d; want 400", res.StatusCode)
	}
}

func TestStatusPage(t *testing.T) {
	s := newServer(t, &fakeReader{}, func(c *api.Config) { c.Dataset = "demo" })
	res, body := do(t, s, http.MethodGet, "/", "")
	if res.StatusCode != 200 || !strings.Contains(string(body), "dataset <code>demo</code>") || strings.Contains(string(body), "<script") {
		t.Errorf("status page = %d:\n%.500s", res.StatusCode, body)
	}
}

// TestMetricsLabelsAreBounded: requests are counted by route pattern, never by path,
// and a made-up method is counted as "other", so clients cannot grow the series.
func TestMetricsLabelsAreBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newServer(t, &fakeReader{}, func(c *api.Config) { c.Registry = reg })
	for i := range 3 {
		do(t, s, http.MethodGet, "/v1/data/c/id"+strconv.Itoa(i), "")
		do(t, s, "XYZ"+strconv.Itoa(i), "/v1/data/c/a", "")
	}
	_, body := do(t, s, http.MethodGet, "/metrics", "")
	var series []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "snapflip_api_requests_total{") {
			series = append(series, line)
		}
	}
	want := []string{
		`snapflip_api_requests_total{method="GET",route="/v1/data/{collection}/{id}",status="404"} 3`,
		`snapflip_api_requests_total{method="other",route="unmatched",status="405"} 3`,
	}
	if diff := cmp.Diff(want, series); diff != "" {
		t.Errorf("request series (-want +got):\n%s", diff)
	}
}

// unknownAdmin's rollbacks end with an unknown flip outcome.
type unknownAdmin struct{ fakeAdmin }

func (unknownAdmin) Rollback(context.Context, snapshot.RollbackRequest) (snapshot.RollbackResult, error) {
	return snapshot.RollbackResult{}, fmt.Errorf("flip pointer to v: %w", snapshot.ErrOutcomeUnknown)
}

// TestAdminRollbackWithUnknownOutcome: a rollback whose flip was not confirmed answers
// 503 saying so, not 500 and not "nothing changed".
func TestAdminRollbackWithUnknownOutcome(t *testing.T) {
	s := newServer(t, &fakeReader{}, func(c *api.Config) { c.Admin = unknownAdmin{}; c.AdminToken = "t" })
	res, b := do(t, s, http.MethodPost, "/v1/admin/rollback", `{"previous":true,"reason":"x"}`, "Authorization", "Bearer t")
	if res.StatusCode != 503 || !strings.Contains(string(b), "may or may not") || res.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("rollback with an unknown outcome = %d %s; want a 503 problem saying the flip may or may not have happened", res.StatusCode, b)
	}
}
