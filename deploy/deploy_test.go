// Package deploy checks snapflip's deployment files: every Kubernetes manifest decodes
// strictly into the Kubernetes API types (an unknown field is an error) and keeps the
// invariants that matter; the compose file names the variables the binaries read; the
// Dockerfile builds the binaries the way the Makefile does. It is its own module, so
// the Kubernetes dependencies never reach the binaries.
package deploy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// kustomization is the part of a kustomization.yaml we use, decoded strictly too.
type kustomization struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Namespace  string           `json:"namespace,omitempty"`
	Resources  []string         `json:"resources,omitempty"`
	Labels     []map[string]any `json:"labels,omitempty"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images,omitempty"`
	Patches []struct {
		Path string `json:"path"`
	} `json:"patches,omitempty"`
	ConfigMapGenerator []struct {
		Name     string   `json:"name"`
		Behavior string   `json:"behavior,omitempty"`
		Files    []string `json:"files,omitempty"`
	} `json:"configMapGenerator,omitempty"`
	GeneratorOptions *struct {
		DisableNameSuffixHash bool `json:"disableNameSuffixHash,omitempty"`
	} `json:"generatorOptions,omitempty"`
}

// objects holds every decoded manifest.
type objects struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	hpas        map[string]*autoscalingv2.HorizontalPodAutoscaler
	pdbs        map[string]*policyv1.PodDisruptionBudget
	configMaps  map[string]*corev1.ConfigMap
	accounts    map[string]*corev1.ServiceAccount
	netpols     map[string]*networkingv1.NetworkPolicy
	pods        map[string]*corev1.Pod
	kustomize   map[string]*kustomization
}

// strict decodes one YAML document into out, refusing unknown fields.
func strict(doc []byte, out any) error {
	j, err := sigsyaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(out)
}

func load(t *testing.T, dir string) objects {
	t.Helper()
	o := objects{
		deployments: map[string]*appsv1.Deployment{},
		services:    map[string]*corev1.Service{},
		hpas:        map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		pdbs:        map[string]*policyv1.PodDisruptionBudget{},
		configMaps:  map[string]*corev1.ConfigMap{},
		accounts:    map[string]*corev1.ServiceAccount{},
		netpols:     map[string]*networkingv1.NetworkPolicy{},
		pods:        map[string]*corev1.Pod{},
		kustomize:   map[string]*kustomization{},
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(files) == 0 {
		t.Fatalf("no manifests in %s", dir)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := sigsyaml.Unmarshal(doc, &head); err != nil {
				t.Fatalf("%s #%d: %v", f, i, err)
			}
			name := head.Metadata.Name
			var err error
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 Deployment":
				v := &appsv1.Deployment{}
				err, o.deployments[name] = strict(doc, v), v
			case "v1 Service":
				v := &corev1.Service{}
				err, o.services[name] = strict(doc, v), v
			case "autoscaling/v2 HorizontalPodAutoscaler":
				v := &autoscalingv2.HorizontalPodAutoscaler{}
				err, o.hpas[name] = strict(doc, v), v
			case "policy/v1 PodDisruptionBudget":
				v := &policyv1.PodDisruptionBudget{}
				err, o.pdbs[name] = strict(doc, v), v
			case "v1 ConfigMap":
				v := &corev1.ConfigMap{}
				err, o.configMaps[name] = strict(doc, v), v
			case "v1 ServiceAccount":
				v := &corev1.ServiceAccount{}
				err, o.accounts[name] = strict(doc, v), v
			case "networking.k8s.io/v1 NetworkPolicy":
				v := &networkingv1.NetworkPolicy{}
				err, o.netpols[name] = strict(doc, v), v
			case "v1 Pod":
				v := &corev1.Pod{}
				err, o.pods[name] = strict(doc, v), v
			case "kustomize.config.k8s.io/v1beta1 Kustomization":
				v := &kustomization{}
				err, o.kustomize[filepath.Base(f)] = strict(doc, v), v
			default:
				t.Errorf("%s #%d: unexpected %s %s", f, i, head.APIVersion, head.Kind)
			}
			if err != nil {
				t.Errorf("%s #%d (%s %s): %v", f, i, head.Kind, name, err)
			}
		}
	}
	return o
}

// binaryEnv returns the environment variables the binaries read, from their source.
func binaryEnv(t *testing.T) map[string]bool {
	t.Helper()
	src, err := os.ReadFile("../internal/cli/config.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`Env\w+\s*=\s*"([A-Z_]+)"`).FindAllSubmatch(src, -1) {
		out[string(m[1])] = true
	}
	if len(out) < 10 {
		t.Fatalf("found only %d environment variables in internal/cli/config.go", len(out))
	}
	for _, v := range []string{"GOGC", "GOMEMLIMIT", "GOMAXPROCS"} {
		out[v] = true // read by the Go runtime
	}
	return out
}

// binaryDefault returns a flag's default from the binaries' source, e.g. the API's
// listen address.
func binaryDefault(t *testing.T, file, pattern string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("../internal/cli", file))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(pattern).FindSubmatch(src)
	if m == nil {
		t.Fatalf("%s: no match for %s", file, pattern)
	}
	return string(m[1])
}

func TestKubernetesManifests(t *testing.T) {
	o := load(t, "k8s/base")
	env := binaryEnv(t)

	k := o.kustomize["kustomization.yaml"]
	files, _ := filepath.Glob("k8s/base/*.yaml")
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(k.Resources, b) {
			t.Errorf("k8s/base/%s is not listed in kustomization.yaml", b)
		}
	}
	for _, r := range k.Resources {
		if _, err := os.Stat(filepath.Join("k8s/base", r)); err != nil {
			t.Errorf("kustomization resource %s: %v", r, err)
		}
	}

	api := o.deployments["snapflip-api"]
	syncer := o.deployments["snapflip-syncer"]
	if api == nil || syncer == nil {
		t.Fatal("want Deployments snapflip-api and snapflip-syncer")
	}
	apiPort := binaryDefault(t, "metadataapi.go", `EnvAddr, ":(\d+)"`)
	c := api.Spec.Template.Spec.Containers[0]
	if got := fmt.Sprint(c.Ports[0].ContainerPort); got != apiPort {
		t.Errorf("API container port %s; the binary listens on :%s", got, apiPort)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != c.Ports[0].Name {
		t.Errorf("API readiness probe %+v; want GET /readyz on the http port", p)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("API liveness probe %+v; want GET /healthz", p)
	}
	// The probed paths are real routes: the API's OpenAPI document (itself checked
	// against the router by the api package's tests) lists them.
	var openapi struct {
		Paths map[string]any `yaml:"paths"`
	}
	spec, err := os.ReadFile("../api/openapi.yaml")
	if err != nil || yaml.Unmarshal(spec, &openapi) != nil {
		t.Fatalf("read api/openapi.yaml: %v", err)
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p != nil && p.HTTPGet != nil {
			if _, ok := openapi.Paths[p.HTTPGet.Path]; !ok {
				t.Errorf("probe path %s is not a route of the API", p.HTTPGet.Path)
			}
		}
	}
	// The grace period must cover the preStop wait and the server's drain.
	drain := 25 * time.Second
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--shutdown-timeout="); ok {
			drain, _ = time.ParseDuration(v)
		}
	}
	var preStop time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	if grace := time.Duration(*api.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second; grace < drain+preStop {
		t.Errorf("API grace period %s < preStop %s + drain %s", grace, preStop, drain)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Error("API container needs CPU requests and a memory limit")
	}

	hpa := o.hpas["snapflip-api"]
	if hpa == nil || hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != api.Name {
		t.Errorf("HPA %+v; want one scaling the API Deployment", hpa)
	}
	pdb := o.pdbs["snapflip-api"]
	if pdb == nil || !matches(pdb.Spec.Selector.MatchLabels, api.Spec.Template.Labels) {
		t.Error("want a PodDisruptionBudget selecting the API's pods")
	}
	svc := o.services["snapflip-api"]
	if svc == nil || !matches(svc.Spec.Selector, api.Spec.Template.Labels) || svc.Spec.Ports[0].TargetPort.String() != c.Ports[0].Name {
		t.Error("want a Service selecting the API's pods on its http port")
	}

	if *syncer.Spec.Replicas != 2 {
		t.Errorf("syncer replicas %d; want 2", *syncer.Spec.Replicas)
	}
	sc := syncer.Spec.Template.Spec.Containers[0]
	metricsAddr := syncerMetricsAddr(sc)
	if metricsAddr != fmt.Sprintf(":%d", sc.Ports[0].ContainerPort) || syncer.Spec.Template.Annotations["prometheus.io/port"] != fmt.Sprint(sc.Ports[0].ContainerPort) {
		t.Errorf("syncer metrics on %q, port %d, scrape annotation %q: want them to agree", metricsAddr, sc.Ports[0].ContainerPort,
			syncer.Spec.Template.Annotations["prometheus.io/port"])
	}
	if api.Spec.Template.Annotations["prometheus.io/port"] != apiPort {
		t.Error("the API's scrape annotation must name its port")
	}

	for _, d := range []*appsv1.Deployment{api, syncer} {
		spec := d.Spec.Template.Spec
		if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot ||
			spec.SecurityContext.RunAsUser == nil || *spec.SecurityContext.RunAsUser == 0 {
			t.Errorf("%s must run as a non-root user", d.Name)
		}
		if o.accounts[spec.ServiceAccountName] == nil || o.accounts[spec.ServiceAccountName].Annotations["iam.gke.io/gcp-service-account"] == "" {
			t.Errorf("%s: service account %q with a Workload Identity annotation", d.Name, spec.ServiceAccountName)
		}
		for _, c := range spec.Containers {
			for _, e := range c.Env {
				if !env[e.Name] {
					t.Errorf("%s sets %s, which no binary reads", d.Name, e.Name)
				}
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef == nil {
					t.Errorf("%s: %s comes from something other than a Secret", d.Name, e.Name)
				}
			}
			if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
				t.Errorf("%s: read-only root filesystem", d.Name)
			}
		}
	}
	// The DSN comes from a Secret, never a literal.
	for _, e := range sc.Env {
		if e.Name == "SNAPFLIP_POSTGRES_DSN" && (e.Value != "" || e.ValueFrom == nil) {
			t.Error("the Postgres DSN must come from a Secret")
		}
	}
	checkSyncerConfig(t, o, syncer)
}

// checkSyncerConfig: the syncer's config is a generated ConfigMap, whose name carries a
// hash of its content, so that a change rolls the syncers; the Deployment mounts it
// under the name kustomize rewrites, at the path SNAPFLIP_CONFIG names, and the file is
// YAML with collections.
func checkSyncerConfig(t *testing.T, o objects, syncer *appsv1.Deployment) {
	t.Helper()
	k := o.kustomize["kustomization.yaml"]
	if k.GeneratorOptions != nil && k.GeneratorOptions.DisableNameSuffixHash {
		t.Error("generatorOptions.disableNameSuffixHash: a config change would not roll the syncers")
	}
	sc := syncer.Spec.Template.Spec.Containers[0]
	configPath := ""
	for _, e := range sc.Env {
		if e.Name == "SNAPFLIP_CONFIG" {
			configPath = e.Value
		}
	}
	found := false
	for _, v := range syncer.Spec.Template.Spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		if o.configMaps[v.ConfigMap.Name] != nil {
			t.Errorf("ConfigMap %s is a plain resource: its name has no content hash", v.ConfigMap.Name)
		}
		for _, g := range k.ConfigMapGenerator {
			if g.Name != v.ConfigMap.Name {
				continue
			}
			for _, f := range g.Files {
				key, file, ok := strings.Cut(f, "=")
				if !ok {
					key, file = filepath.Base(f), f
				}
				for _, m := range sc.VolumeMounts {
					if m.Name == v.Name && filepath.Join(m.MountPath, key) == configPath {
						found = true
						checkSyncerConfigFile(t, filepath.Join("k8s/base", file))
					}
				}
			}
		}
	}
	if !found {
		t.Errorf("want SNAPFLIP_CONFIG (%q) to be a key of a configMapGenerator the syncer mounts", configPath)
	}
}

func checkSyncerConfigFile(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Collections []map[string]any `yaml:"collections"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil || len(cfg.Collections) == 0 {
		t.Errorf("%s: want YAML with collections (%v)", path, err)
	}
}

func TestOverlayDecodes(t *testing.T) {
	o := load(t, "k8s/overlays/example")
	k := o.kustomize["kustomization.yaml"]
	if k == nil || k.Namespace == "" || len(k.Images) != 2 {
		t.Fatalf("overlay kustomization %+v", k)
	}
	for _, p := range k.Patches {
		if _, err := os.Stat(filepath.Join("k8s/overlays/example", p.Path)); err != nil {
			t.Errorf("patch %s: %v", p.Path, err)
		}
	}
}

// TestHPAOwnsReplicas: a Deployment an HPA scales sets no replicas, in the base or in
// a patch of the overlay, or every apply would reset the count the HPA chose.
func TestHPAOwnsReplicas(t *testing.T) {
	base, overlay := load(t, "k8s/base"), load(t, "k8s/overlays/example")
	for _, hpas := range []map[string]*autoscalingv2.HorizontalPodAutoscaler{base.hpas, overlay.hpas} {
		for _, h := range hpas {
			if h.Spec.ScaleTargetRef.Kind != "Deployment" {
				continue
			}
			for _, deployments := range []map[string]*appsv1.Deployment{base.deployments, overlay.deployments} {
				if d := deployments[h.Spec.ScaleTargetRef.Name]; d != nil && d.Spec.Replicas != nil {
					t.Errorf("Deployment %s sets replicas %d, but HPA %s scales it", d.Name, *d.Spec.Replicas, h.Name)
				}
			}
		}
	}
}

// TestWorkloadIdentityBindings: deploy/bigtable/README.md's commands let each Kubernetes
// service account, in the overlay's namespace, act as the Google service account its
// annotation names, give that account a role on the table, and let it write the
// Bigtable client's built-in metrics.
func TestWorkloadIdentityBindings(t *testing.T) {
	base, overlay := load(t, "k8s/base"), load(t, "k8s/overlays/example")
	readme, err := os.ReadFile("bigtable/README.md")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"PROJECT": "PROJECT_ID"} // the placeholder the manifests use
	var cmds []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		for _, cmd := range strings.Split(strings.ReplaceAll(block[1], "\\\n", " "), "\n") {
			cmd, _, _ = strings.Cut(cmd, "#")
			if regexp.MustCompile(`^\s*(\w+=\S+\s*)+$`).MatchString(cmd) { // VAR=value ...
				for _, a := range strings.Fields(cmd) {
					if k, v, _ := strings.Cut(a, "="); k != "PROJECT" {
						vars[k] = v
					}
				}
				continue
			}
			cmd = os.Expand(cmd, func(k string) string {
				if v, ok := vars[k]; ok {
					return v
				}
				return "$" + k // set nowhere: left as written, and matching nothing
			})
			cmds = append(cmds, strings.Join(strings.Fields(cmd), " "))
		}
	}
	for _, k := range []string{"NAMESPACE", "TABLE", "INSTANCE"} {
		if vars[k] == "" {
			t.Fatalf("README's commands set no %s", k)
		}
	}
	if ns := overlay.kustomize["kustomization.yaml"].Namespace; vars["NAMESPACE"] != ns {
		t.Errorf("README sets NAMESPACE=%s; the overlay's namespace is %s", vars["NAMESPACE"], ns)
	}
	// granted reports whether a command starting with prefix grants role to member.
	granted := func(prefix, role, member string) bool {
		for _, c := range cmds {
			if strings.HasPrefix(c, prefix) && strings.Contains(c, "--role="+role+" ") &&
				(strings.Contains(c, `--member="`+member+`"`) || strings.Contains(c, "--member="+member+" ") || strings.HasSuffix(c, "--member="+member)) {
				return true
			}
		}
		return false
	}
	for _, sa := range base.accounts {
		gsa := sa.Annotations["iam.gke.io/gcp-service-account"]
		if gsa == "" {
			continue
		}
		if !granted("gcloud iam service-accounts add-iam-policy-binding "+gsa+" ", "roles/iam.workloadIdentityUser",
			fmt.Sprintf("serviceAccount:%s.svc.id.goog[%s/%s]", vars["PROJECT"], vars["NAMESPACE"], sa.Name)) {
			t.Errorf("README: no roles/iam.workloadIdentityUser binding on %s for %s/%s", gsa, vars["NAMESPACE"], sa.Name)
		}
		tableRole := false
		for _, role := range []string{"roles/bigtable.reader", "roles/bigtable.user"} {
			tableRole = tableRole || granted("gcloud bigtable instances tables add-iam-policy-binding "+vars["TABLE"]+" ", role, "serviceAccount:"+gsa)
		}
		if !tableRole {
			t.Errorf("README: %s gets no Bigtable role on table %s", gsa, vars["TABLE"])
		}
		if !granted("gcloud projects add-iam-policy-binding "+vars["PROJECT"]+" ", "roles/monitoring.metricWriter", "serviceAccount:"+gsa) {
			t.Errorf("README: %s may not write the Bigtable client's built-in metrics (roles/monitoring.metricWriter)", gsa)
		}
	}
}

// syncerMetricsAddr returns the address the syncer container serves metrics on: its
// --metrics-addr argument, else SNAPFLIP_METRICS_ADDR.
func syncerMetricsAddr(c corev1.Container) string {
	for i, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--metrics-addr="); ok {
			return v
		}
		if a == "--metrics-addr" && i+1 < len(c.Args) {
			return c.Args[i+1]
		}
	}
	for _, e := range c.Env {
		if e.Name == "SNAPFLIP_METRICS_ADDR" {
			return e.Value
		}
	}
	return ""
}

// TestSyncerProbes: the syncer is probed on the port it serves metrics on, /readyz for
// readiness and /healthz for liveness, and liveness gives a busy process at least two
// minutes before a restart, so that a long full sync is not killed.
func TestSyncerProbes(t *testing.T) {
	o := load(t, "k8s/base")
	d := o.deployments["snapflip-syncer"]
	if d == nil {
		t.Fatal("no Deployment snapflip-syncer")
	}
	c := d.Spec.Template.Spec.Containers[0]
	addr := syncerMetricsAddr(c)
	var port *corev1.ContainerPort
	for i := range c.Ports {
		if addr == fmt.Sprintf(":%d", c.Ports[i].ContainerPort) {
			port = &c.Ports[i]
		}
	}
	if port == nil {
		t.Fatalf("the syncer serves metrics on %q, which no container port names", addr)
	}
	for _, tc := range []struct {
		kind  string
		probe *corev1.Probe
		path  string
	}{
		{"readiness", c.ReadinessProbe, "/readyz"},
		{"liveness", c.LivenessProbe, "/healthz"},
	} {
		p := tc.probe
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != tc.path ||
			(p.HTTPGet.Port.String() != port.Name && p.HTTPGet.Port.IntValue() != int(port.ContainerPort)) {
			t.Errorf("syncer %s probe %+v; want GET %s on port %s", tc.kind, p, tc.path, port.Name)
		}
	}
	if p := c.LivenessProbe; p != nil {
		period, failures := max(p.PeriodSeconds, 10), max(p.FailureThreshold, 3) // the API server's defaults
		if patience := time.Duration(period*failures) * time.Second; patience < 2*time.Minute {
			t.Errorf("syncer liveness restarts after %s of failures; want at least 2m", patience)
		}
	}
}

// TestWorkloadsSpread: each workload's pods spread over nodes and zones, by constraints
// that select the workload's own pods (a selector that matches nothing spreads nothing).
func TestWorkloadsSpread(t *testing.T) {
	o := load(t, "k8s/base")
	for _, name := range []string{"snapflip-api", "snapflip-syncer"} {
		d := o.deployments[name]
		if d == nil {
			t.Fatalf("no Deployment %s", name)
		}
		spread := map[string]bool{}
		for _, c := range d.Spec.Template.Spec.TopologySpreadConstraints {
			if c.LabelSelector != nil && len(c.LabelSelector.MatchExpressions) == 0 && matches(c.LabelSelector.MatchLabels, d.Spec.Template.Labels) {
				spread[c.TopologyKey] = true
			}
		}
		if a := d.Spec.Template.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
			for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
				if s := w.PodAffinityTerm.LabelSelector; s != nil && matches(s.MatchLabels, d.Spec.Template.Labels) {
					spread[w.PodAffinityTerm.TopologyKey] = true
				}
			}
			for _, term := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				if s := term.LabelSelector; s != nil && matches(s.MatchLabels, d.Spec.Template.Labels) {
					spread[term.TopologyKey] = true
				}
			}
		}
		for _, key := range []string{"kubernetes.io/hostname", "topology.kubernetes.io/zone"} {
			if !spread[key] {
				t.Errorf("%s: no topology spread constraint or pod anti-affinity over %s selecting its pods", name, key)
			}
		}
	}
}

// TestDisruptionBudgets: each workload has a PodDisruptionBudget selecting its pods that
// still lets a drain evict one of them at the fewest replicas it runs.
func TestDisruptionBudgets(t *testing.T) {
	o := load(t, "k8s/base")
	for _, d := range o.deployments {
		fewest := int32(1)
		if d.Spec.Replicas != nil {
			fewest = *d.Spec.Replicas
		}
		for _, h := range o.hpas {
			if h.Spec.ScaleTargetRef.Kind == "Deployment" && h.Spec.ScaleTargetRef.Name == d.Name && h.Spec.MinReplicas != nil {
				fewest = *h.Spec.MinReplicas
			}
		}
		var pdb *policyv1.PodDisruptionBudget
		for _, p := range o.pdbs {
			if p.Spec.Selector != nil && matches(p.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
				pdb = p
			}
		}
		if pdb == nil {
			t.Errorf("no PodDisruptionBudget selects the pods of %s", d.Name)
			continue
		}
		var evictable int
		switch s := pdb.Spec; {
		case s.MaxUnavailable != nil && s.MinAvailable == nil:
			evictable = s.MaxUnavailable.IntValue()
		case s.MinAvailable != nil && s.MaxUnavailable == nil:
			evictable = int(fewest) - s.MinAvailable.IntValue()
		default:
			t.Errorf("PodDisruptionBudget %s: want exactly one of minAvailable and maxUnavailable, as a number", pdb.Name)
			continue
		}
		if evictable < 1 {
			t.Errorf("PodDisruptionBudget %s lets no pod of %s be evicted at %d replicas", pdb.Name, d.Name, fewest)
		}
	}
}

// TestGoMemoryLimit: every container with a memory limit sets GOMEMLIMIT a little under
// it, so that the collector works harder before the container is killed.
func TestGoMemoryLimit(t *testing.T) {
	o := load(t, "k8s/base")
	for _, d := range o.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			limit := c.Resources.Limits.Memory().Value()
			if limit == 0 {
				t.Errorf("%s/%s: no memory limit", d.Name, c.Name)
				continue
			}
			var soft int64 = -1
			for _, e := range c.Env {
				if e.Name == "GOMEMLIMIT" {
					soft = goMemLimit(t, e.Value)
				}
			}
			if soft < limit*80/100 || soft > limit*95/100 {
				t.Errorf("%s/%s: GOMEMLIMIT %d bytes; want 80–95%% of the memory limit %d", d.Name, c.Name, soft, limit)
			}
		}
	}
}

// goMemLimit parses a GOMEMLIMIT value (a number of bytes with an optional B, KiB, MiB,
// GiB or TiB suffix), or returns -1.
func goMemLimit(t *testing.T, v string) int64 {
	t.Helper()
	m := regexp.MustCompile(`^(\d+)(B|KiB|MiB|GiB|TiB)?$`).FindStringSubmatch(v)
	if m == nil {
		t.Errorf("GOMEMLIMIT %q is not a byte count Go reads", v)
		return -1
	}
	var n int64
	fmt.Sscan(m[1], &n)
	shift := map[string]int{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[m[2]]
	return n << shift
}

// monitoringNamespace selects the namespace Prometheus runs in: Kubernetes labels every
// namespace with its name.
var monitoringNamespace = map[string]string{"kubernetes.io/metadata.name": "monitoring"}

// TestNetworkPolicies: ingress to each workload is restricted; the API's port is open
// to every client (its /metrics shares it), and the syncer's metrics port, which also
// serves /debug/pprof, admits only the monitoring namespace.
func TestNetworkPolicies(t *testing.T) {
	o := load(t, "k8s/base")
	for _, tc := range []struct {
		deployment, port string
		open             bool // any client, or only the monitoring namespace
	}{
		{"snapflip-api", "http", true},
		{"snapflip-syncer", "metrics", false},
	} {
		d := o.deployments[tc.deployment]
		if d == nil {
			t.Fatalf("no Deployment %s", tc.deployment)
		}
		var port *corev1.ContainerPort
		for _, c := range d.Spec.Template.Spec.Containers {
			for i := range c.Ports {
				if c.Ports[i].Name == tc.port {
					port = &c.Ports[i]
				}
			}
		}
		if port == nil {
			t.Fatalf("%s has no port %s", d.Name, tc.port)
		}
		selected := false
		var rules []networkingv1.NetworkPolicyIngressRule
		for _, p := range o.netpols {
			if !selects(p.Spec.PodSelector, d.Spec.Template.Labels) || !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
				continue
			}
			selected = true
			for _, r := range p.Spec.Ingress {
				if admitsPort(r, *port) {
					rules = append(rules, r)
				}
			}
		}
		if !selected {
			t.Errorf("no NetworkPolicy restricts ingress to %s", d.Name)
			continue
		}
		if len(rules) == 0 {
			t.Errorf("%s: no NetworkPolicy admits port %s", d.Name, tc.port)
		}
		open := false
		for _, r := range rules {
			if len(r.From) == 0 {
				open = true
			}
			for _, peer := range r.From {
				if peer.IPBlock != nil || peer.NamespaceSelector == nil || len(peer.NamespaceSelector.MatchExpressions) > 0 ||
					!maps.Equal(peer.NamespaceSelector.MatchLabels, monitoringNamespace) {
					open = true
				}
			}
		}
		if open != tc.open {
			t.Errorf("%s: port %s open to any client: %t; want %t", d.Name, tc.port, open, tc.open)
		}
	}
}

// selects reports whether a NetworkPolicy's pod selector picks pods with these labels.
func selects(s metav1.LabelSelector, labels map[string]string) bool {
	if len(s.MatchExpressions) > 0 {
		return false // none of ours: treat as not understood
	}
	return len(s.MatchLabels) == 0 || matches(s.MatchLabels, labels)
}

// admitsPort reports whether an ingress rule admits traffic to a container port.
func admitsPort(r networkingv1.NetworkPolicyIngressRule, port corev1.ContainerPort) bool {
	if len(r.Ports) == 0 {
		return true
	}
	for _, p := range r.Ports {
		if p.Port == nil || p.Port.String() == port.Name || p.Port.IntValue() == int(port.ContainerPort) {
			return true
		}
	}
	return false
}

func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestComposeNamesTheBinariesEnvironment(t *testing.T) {
	data, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
			Build       *struct {
				Context    string `yaml:"context"`
				Dockerfile string `yaml:"dockerfile"`
				Target     string `yaml:"target"`
			} `yaml:"build"`
			Volumes []string `yaml:"volumes"`
		} `yaml:"services"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	env := binaryEnv(t)
	docker, _ := os.ReadFile("docker/Dockerfile")
	for _, name := range []string{"postgres", "bigtable", "syncer", "metadata-api"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("compose.yaml lacks service %s", name)
		}
	}
	for name, s := range c.Services {
		if s.Build == nil {
			continue
		}
		for k := range s.Environment {
			if !env[k] {
				t.Errorf("compose service %s sets %s, which no binary reads", name, k)
			}
		}
		if !strings.Contains(string(docker), "AS "+s.Build.Target+"\n") {
			t.Errorf("compose service %s builds target %q, which the Dockerfile lacks", name, s.Build.Target)
		}
		for _, v := range s.Volumes {
			if src, _, ok := strings.Cut(v, ":"); ok {
				if _, err := os.Stat(src); err != nil {
					t.Errorf("compose service %s mounts %s: %v", name, src, err)
				}
			}
		}
	}
}

// TestComposeWaitsForTheEmulator: the emulator has a health check that connects to the
// port it listens on, in a shell that can (/dev/tcp is bash's, not sh's); the syncer
// starts once it is healthy and restarts when it fails.
func TestComposeWaitsForTheEmulator(t *testing.T) {
	data, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Command     []string `yaml:"command"`
			Restart     string   `yaml:"restart"`
			Healthcheck *struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
			DependsOn dependsOn `yaml:"depends_on"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	emulator := c.Services["bigtable"]
	port := ""
	for i, a := range emulator.Command {
		if a == "-port" && i+1 < len(emulator.Command) {
			port = emulator.Command[i+1]
		}
	}
	hc := emulator.Healthcheck
	switch {
	case port == "":
		t.Error("compose service bigtable: no -port in its command")
	case hc == nil || len(hc.Test) < 2:
		t.Error("compose service bigtable: no healthcheck")
	default:
		cmd := strings.Join(hc.Test[1:], " ")
		if !strings.Contains(cmd, port) {
			t.Errorf("bigtable healthcheck %q does not check port %s", cmd, port)
		}
		if strings.Contains(cmd, "/dev/tcp/") && (hc.Test[0] != "CMD" || hc.Test[1] != "bash") {
			t.Errorf("bigtable healthcheck %q uses /dev/tcp outside bash", hc.Test)
		}
	}
	syncer := c.Services["syncer"]
	if got := syncer.DependsOn["bigtable"]; got != "service_healthy" {
		t.Errorf("syncer waits for bigtable until %q; want service_healthy", got)
	}
	if r := syncer.Restart; r != "unless-stopped" && r != "always" && !strings.HasPrefix(r, "on-failure") {
		t.Errorf("syncer restart %q; want it restarted when it fails", r)
	}
}

// dependsOn is a compose service's depends_on: the condition each service it names
// must meet, in either form compose takes (a list means service_started).
type dependsOn map[string]string

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	*d = dependsOn{}
	if n.Kind == yaml.SequenceNode {
		var names []string
		if err := n.Decode(&names); err != nil {
			return err
		}
		for _, name := range names {
			(*d)[name] = "service_started"
		}
		return nil
	}
	var long map[string]struct {
		Condition string `yaml:"condition"`
	}
	if err := n.Decode(&long); err != nil {
		return err
	}
	for name, dep := range long {
		(*d)[name] = cmp.Or(dep.Condition, "service_started")
	}
	return nil
}

// TestDockerfileBuildsWhatMakeBuilds: the Dockerfile's go build commands are the
// Makefile's build-static commands, output directory aside.
func TestDockerfileBuildsWhatMakeBuilds(t *testing.T) {
	docker, err := os.ReadFile("docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	norm := func(line string) string {
		line = strings.ReplaceAll(line, "$(GO)", "go")
		line = regexp.MustCompile(`\$\((\w+)\)`).ReplaceAllString(line, "$${$1}") // make's $(V) is the shell's ${V}
		line = regexp.MustCompile(`-o \S*/`).ReplaceAllString(line, "-o ")
		return strings.Join(strings.Fields(line), " ")
	}
	var fromDocker, fromMake []string
	for _, l := range strings.Split(string(docker), "\n") {
		if cmd, ok := strings.CutPrefix(l, "RUN "); ok && strings.Contains(cmd, "go build") {
			fromDocker = append(fromDocker, norm(cmd))
		}
	}
	inTarget := false
	for _, l := range strings.Split(string(makefile), "\n") {
		switch {
		case strings.HasPrefix(l, "build-static:"):
			inTarget = true
		case inTarget && strings.HasPrefix(l, "\t"):
			if strings.Contains(l, "go build") || strings.Contains(l, "$(GO) build") {
				fromMake = append(fromMake, norm(strings.TrimSpace(l)))
			}
		case inTarget:
			inTarget = false
		}
	}
	slices.Sort(fromDocker)
	slices.Sort(fromMake)
	if len(fromDocker) != 2 || !slices.Equal(fromDocker, fromMake) {
		t.Errorf("Dockerfile builds\n  %s\nMakefile build-static builds\n  %s", strings.Join(fromDocker, "\n  "), strings.Join(fromMake, "\n  "))
	}
	for _, want := range []string{"USER 65532:65532", "distroless/static", "CGO_ENABLED=0"} {
		if !strings.Contains(string(docker), want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	checkVersionStamp(t, string(docker), fromDocker)
}

// checkVersionStamp: the image's binaries report the version and commit given as build
// arguments (the build context has no .git for Go to record them from): each go build
// sets internal/cli's Version and Commit, which exist, from ARGs the Dockerfile declares.
func checkVersionStamp(t *testing.T, docker string, builds []string) {
	t.Helper()
	src, err := os.ReadFile("../internal/cli/version.go")
	if err != nil {
		t.Fatal(err)
	}
	for v, arg := range map[string]string{"Version": "VERSION", "Commit": "COMMIT"} {
		if !regexp.MustCompile(`(?m)^var ` + v + ` string$`).Match(src) {
			t.Errorf("internal/cli/version.go declares no string variable %s for -X to set", v)
		}
		if !regexp.MustCompile(`(?m)^ARG ` + arg + `\b`).MatchString(docker) {
			t.Errorf("Dockerfile declares no build argument %s", arg)
		}
		for _, b := range builds {
			if !strings.Contains(b, "-X github.com/snapflip/snapflip/internal/cli."+v+"=${"+arg+"}") {
				t.Errorf("Dockerfile build %q does not set cli.%s from ${%s}", b, v, arg)
			}
		}
	}
}

// The API reads the auth file the base ships, and the example caller's projected token
// is one that file accepts: its audience, and a grant of its service account.
func TestAuthWiring(t *testing.T) {
	base, overlay := load(t, "k8s/base"), load(t, "k8s/overlays/example")
	api := base.deployments["snapflip-api"]
	if api == nil {
		t.Fatal("no snapflip-api Deployment")
	}
	c := api.Spec.Template.Spec.Containers[0]
	var path string
	for _, e := range c.Env {
		if e.Name == "SNAPFLIP_AUTH_CONFIG" {
			path = e.Value
		}
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || m.Name == "auth" && strings.HasPrefix(path, m.MountPath+"/")
	}
	if path == "" || !mounted {
		t.Fatalf("the API's SNAPFLIP_AUTH_CONFIG %q is not in a mounted volume", path)
	}
	var file struct {
		Issuers []struct{ Audience string } `yaml:"issuers"`
		Grants  []struct{ Subject string }  `yaml:"grants"`
	}
	b, err := os.ReadFile("k8s/base/config/auth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	pod := overlay.pods["snapflip-example-caller"]
	if pod == nil {
		t.Fatal("no example caller")
	}
	var audience string
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ServiceAccountToken != nil {
					audience = src.ServiceAccountToken.Audience
				}
			}
		}
	}
	subject := "system:serviceaccount:snapflip:" + pod.Spec.ServiceAccountName
	okAud, okSub := false, false
	for _, is := range file.Issuers {
		okAud = okAud || is.Audience == audience
	}
	for _, g := range file.Grants {
		okSub = okSub || g.Subject == subject
	}
	if !okAud || !okSub {
		t.Errorf("the example caller's token (audience %q, subject %q) is not one the auth file accepts and grants", audience, subject)
	}
}
