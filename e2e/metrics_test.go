package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/snapflip/snapflip/internal/testenv"
)

// documentedMetric is a row of docs/operations.md's metric table.
type documentedMetric struct {
	binary, kind string
	labels       []string
	values       []string // the values of the last label
}

var backticked = regexp.MustCompile("`([^`]*)`")

// metricTable reads docs/operations.md's metric table.
func metricTable(tb testing.TB) map[string]documentedMetric {
	tb.Helper()
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]documentedMetric{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `snapflip_") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 6 {
			tb.Fatalf("metric table row %q has %d cells; want 6", line, len(cells))
		}
		name := strings.Trim(cells[0], "`")
		m := documentedMetric{binary: cells[1], kind: cells[2]}
		for _, l := range backticked.FindAllStringSubmatch(cells[3], -1) {
			m.labels = append(m.labels, l[1])
		}
		for _, v := range backticked.FindAllStringSubmatch(cells[4], -1) {
			m.values = append(m.values, v[1])
		}
		out[name] = m
	}
	if len(out) == 0 {
		tb.Fatal("docs/operations.md has no metric table")
	}
	return out
}

// scrape returns the snapflip families of the exposition at url.
func scrape(tb testing.TB, url string) map[string]*dto.MetricFamily {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		tb.Fatalf("parse %s: %v", url, err)
	}
	for name := range fams {
		if !strings.HasPrefix(name, "snapflip_") {
			delete(fams, name)
		}
	}
	return fams
}

// labelsOf returns a family's label names (a histogram's le apart) and the values of
// label.
func labelsOf(f *dto.MetricFamily, label string) (names, values []string) {
	for _, m := range f.Metric {
		for _, l := range m.Label {
			if !slices.Contains(names, l.GetName()) {
				names = append(names, l.GetName())
			}
			if l.GetName() == label && !slices.Contains(values, l.GetValue()) {
				values = append(values, l.GetValue())
			}
		}
	}
	slices.Sort(names)
	return names, values
}

// Both binaries export exactly the metrics docs/operations.md's table lists, with its
// types, labels and label values; the alerting rules and the dashboard name only
// metrics they export.
func TestMetricsAreDocumented(t *testing.T) {
	t.Parallel()
	e := start(t)
	testenv.Exec(t, e.DSN, `ALTER TABLE flags REPLICA IDENTITY FULL`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	// A TTL of seconds: the keep-alive builds bases beside the stream (snapflip_base_*).
	cfg := strings.NewReplacer(`schedule: "@every 1h"`, `schedule: "@every 1s"`, "ttl: 1h", "ttl: 8s").Replace(logicalConfig(t, e))
	defer e.runSyncerWith(t, cfg, "--metrics-addr", addr)()
	e.awaitServed(t, docPath("things", "plain"), `"id":"plain"`, time.Now(), 30*time.Second)
	testenv.Exec(t, e.DSN, `UPDATE things SET note = 'metrics' WHERE id = 'plain'`)
	e.awaitServed(t, docPath("things", "plain"), `"note":"metrics"`, time.Now(), 30*time.Second)
	table := metricTable(t)
	want := func(binary string) []string {
		var names []string
		for name, m := range table {
			if m.binary == binary {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		return names
	}
	scraped := map[string]map[string]*dto.MetricFamily{}
	// Every documented metric of the syncer appears once it has acted on each (a tick
	// claimed, a lease acquired, a change seen, a version published).
	testenv.Eventually(t, 30*time.Second, func() error {
		scraped["syncer"] = scrape(t, "http://"+addr+"/metrics")
		var missing []string
		for _, name := range want("syncer") {
			if scraped["syncer"][name] == nil {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("the syncer exports no %v (yet)", missing)
		}
		return nil
	})
	scraped["metadata-api"] = scrape(t, e.Base+"/metrics")
	for binary, fams := range scraped {
		for name, f := range fams {
			doc, ok := table[name]
			switch {
			case !ok:
				t.Errorf("%s exports %s, which docs/operations.md's metric table does not list", binary, name)
				continue
			case doc.binary != binary:
				t.Errorf("%s: exported by %s; the table says %s", name, binary, doc.binary)
			case !strings.EqualFold(doc.kind, f.GetType().String()):
				t.Errorf("%s: a %s; the table says %s", name, strings.ToLower(f.GetType().String()), doc.kind)
			}
			last := ""
			if len(doc.labels) > 0 {
				last = doc.labels[len(doc.labels)-1]
			}
			names, values := labelsOf(f, last)
			if !slices.Equal(names, slices.Sorted(slices.Values(doc.labels))) {
				t.Errorf("%s: labels %v; the table says %v", name, names, doc.labels)
			}
			if len(doc.values) > 0 {
				for _, v := range values {
					if !slices.Contains(doc.values, v) {
						t.Errorf("%s: %s=%q, which the table does not list among %v", name, last, v, doc.values)
					}
				}
			}
		}
		for _, name := range want(binary) {
			if fams[name] == nil {
				t.Errorf("the table lists %s for %s, which does not export it", name, binary)
			}
		}
	}
	// The alerting rules and the dashboard name only exported metrics.
	metric := regexp.MustCompile(`\bsnapflip_[a-z_]+`)
	for _, file := range []string{"../deploy/monitoring/alerts.yaml", "../deploy/monitoring/dashboard.json"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range metric.FindAllString(string(b), -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if trimmed, ok := strings.CutSuffix(name, suffix); ok && table[trimmed].kind == "histogram" {
					base = trimmed
				}
			}
			if _, ok := table[base]; !ok {
				t.Errorf("%s names %s, which neither binary exports", file, name)
			}
		}
	}
}

// TestAPIMetricsAddr: with --metrics-addr the API serves /metrics there, on a port a
// NetworkPolicy can keep internal, and not on the data port.
func TestAPIMetricsAddr(t *testing.T) {
	t.Parallel()
	e := start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	e.StopAPI()
	e.startAPIWith(t, []string{"--metrics-addr", addr})
	res, err := http.Get(e.Base + "/metrics") // not the documented API: no OpenAPI check
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("/metrics on the data port: %d; want 404", res.StatusCode)
	}
	if fams := scrape(t, "http://"+addr+"/metrics"); len(fams) == 0 {
		t.Errorf("--metrics-addr %s serves no metrics", addr)
	}
}
