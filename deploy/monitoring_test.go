package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// promtool returns the path of Prometheus's promtool; `make test` installs it
// (deploy/local/promtool.sh), so a missing one fails rather than skips.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (%v): run the tests with `make test`, which installs it (deploy/local/promtool.sh)", err)
	}
	return p
}

func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// ruleFile is the part of a Prometheus rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// The alerting rules pass promtool's check and its unit tests.
func TestAlertRulesPassPromtool(t *testing.T) {
	runPromtool(t, "monitoring", "check", "rules", "alerts.yaml")
	runPromtool(t, "monitoring", "test", "rules", "alerts_test.yaml")
}

// The PrometheusRule holds exactly the groups of alerts.yaml.
func TestPrometheusRuleHoldsTheAlerts(t *testing.T) {
	var plain ruleFile
	readYAML(t, "monitoring/alerts.yaml", &plain)
	var crd struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Spec       ruleFile `yaml:"spec"`
	}
	readYAML(t, "monitoring/prometheusrule.yaml", &crd)
	if crd.APIVersion != "monitoring.coreos.com/v1" || crd.Kind != "PrometheusRule" {
		t.Errorf("prometheusrule.yaml is a %s %s; want a monitoring.coreos.com/v1 PrometheusRule", crd.APIVersion, crd.Kind)
	}
	if !reflect.DeepEqual(plain, crd.Spec) {
		t.Error("prometheusrule.yaml's groups differ from alerts.yaml's")
	}
}

// Every alert has a unit test that fires it, a severity, and a runbook section in
// docs/operations.md that its runbook_url names.
func TestEveryAlertIsTestedAndHasARunbook(t *testing.T) {
	var rules ruleFile
	readYAML(t, "monitoring/alerts.yaml", &rules)
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, "monitoring/alerts_test.yaml", &tests)
	fired := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fired[a.Alertname] = true
			}
		}
	}
	ops, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			if !fired[r.Alert] {
				t.Errorf("%s: no test in alerts_test.yaml fires it", r.Alert)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q; want critical or warning", r.Alert, s)
			}
			want := "https://github.com/snapflip/snapflip/blob/main/docs/operations.md#alert-" + strings.ToLower(r.Alert)
			if r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q; want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !strings.Contains(string(ops), "\n#### Alert: "+r.Alert+"\n") {
				t.Errorf("%s: docs/operations.md has no section \"#### Alert: %s\"", r.Alert, r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatal("alerts.yaml holds no alerts")
	}
}

// dashboard is the part of the Grafana dashboard the tests read.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// DashboardExprs returns every query of the Grafana dashboard, with its variables
// replaced as Grafana would ($dataset by its "all" value).
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$dataset", ".*")
	var out []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, vars.Replace(tg.Expr))
		}
	}
	return out
}

// Every query of the dashboard parses as PromQL (promtool checks it as a recording
// rule), and names only metrics that the alerting rules or the binaries export
// (e2e's TestMetricsAreDocumented scrapes both binaries and checks the names).
func TestDashboardQueriesParse(t *testing.T) {
	exprs := dashboardExprs(t)
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, e := range exprs {
		if strings.Contains(e, "$") {
			t.Errorf("query %q uses a variable the dashboard does not define", e)
		}
		rules = append(rules, rule{Record: "dashboard:query_" + string(rune('a'+i/26)) + string(rune('a'+i%26)), Expr: e})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []map[string]any{{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.rules.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, dir, "check", "rules", "dashboard.rules.yaml")
	metric := regexp.MustCompile(`\bsnapflip_[a-z_]+`)
	for _, e := range exprs {
		if len(metric.FindAllString(e, -1)) == 0 {
			t.Errorf("query %q names no snapflip metric", e)
		}
	}
}
