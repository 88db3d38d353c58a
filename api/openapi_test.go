package api_test

import (
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/snapflip/snapflip/api"
)

// TestOpenAPIMatchesRoutes: every route the server has is in the served OpenAPI
// document, and every operation the document describes is a route.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	s := api.NewServer(&fakeReader{}, api.Config{Registry: prometheus.NewRegistry()}, slog.New(slog.DiscardHandler))
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
