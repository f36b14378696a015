// Package kubernetes_test checks the manifests in this directory: every document decodes
// strictly into the API type of its kind (an unknown or misspelled field fails, where
// kubectl apply would silently drop it), and the pieces fit together and fit the service.
package kubernetes_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// httpRoutes is the service's HTTP server, where /healthz, /readyz and /metrics are
// registered; the probes and the scrape must use the paths it serves.
const httpRoutes = "../../txmanager-service/internal/server/http.go"

// newObject returns the typed object a document of this apiVersion and kind decodes into.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, nil
	}
	return nil, fmt.Errorf("no Go type for apiVersion %q kind %q", apiVersion, kind)
}

// decodeStrict decodes one YAML document into the type of its kind, refusing unknown and
// duplicate fields.
func decodeStrict(doc []byte) (any, error) {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return nil, err
	}
	obj, err := newObject(meta.APIVersion, meta.Kind)
	if err != nil {
		return nil, err
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", meta.Kind, err)
	}
	return obj, nil
}

// splitDocuments returns the non-empty YAML documents of a multi-document stream.
func splitDocuments(stream []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

// manifests are the decoded documents of every *.yaml in this directory.
type manifests struct {
	statefulSets []*appsv1.StatefulSet
	services     []*corev1.Service
	configMaps   []*corev1.ConfigMap
	accounts     []*corev1.ServiceAccount
	pdbs         []*policyv1.PodDisruptionBudget
	monitors     []*monitoringv1.ServiceMonitor
}

func loadManifests(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var m manifests
	for _, file := range files {
		stream, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := splitDocuments(stream)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for i, doc := range docs {
			obj, err := decodeStrict(doc)
			if err != nil {
				t.Fatalf("%s document %d: %v", file, i, err)
			}
			switch o := obj.(type) {
			case *appsv1.StatefulSet:
				m.statefulSets = append(m.statefulSets, o)
			case *corev1.Service:
				m.services = append(m.services, o)
			case *corev1.ConfigMap:
				m.configMaps = append(m.configMaps, o)
			case *corev1.ServiceAccount:
				m.accounts = append(m.accounts, o)
			case *policyv1.PodDisruptionBudget:
				m.pdbs = append(m.pdbs, o)
			case *monitoringv1.ServiceMonitor:
				m.monitors = append(m.monitors, o)
			default:
				t.Fatalf("%s document %d: %T is not checked by this test", file, i, obj)
			}
		}
	}
	if len(m.statefulSets) != 1 || len(m.pdbs) != 1 || len(m.monitors) != 1 || len(m.configMaps) != 1 || len(m.services) != 2 || len(m.accounts) != 1 {
		t.Fatalf("want 1 StatefulSet, 2 Services, 1 ConfigMap, 1 ServiceAccount, 1 PDB, 1 ServiceMonitor; got %d, %d, %d, %d, %d, %d",
			len(m.statefulSets), len(m.services), len(m.configMaps), len(m.accounts), len(m.pdbs), len(m.monitors))
	}
	return m
}

func (m manifests) service(t *testing.T, name string) *corev1.Service {
	t.Helper()
	for _, s := range m.services {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no Service %q", name)
	return nil
}

func (m manifests) container(t *testing.T) (*appsv1.StatefulSet, corev1.Container) {
	t.Helper()
	sts := m.statefulSets[0]
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == "txmanager" {
			return sts, c
		}
	}
	t.Fatal("no txmanager container")
	return nil, corev1.Container{}
}

// servedPaths reads which handler the service registers on each path.
func servedPaths(t *testing.T) map[string]string {
	t.Helper()
	src, err := os.ReadFile(httpRoutes)
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	for _, m := range regexp.MustCompile(`srv\.Handle(?:Func)?\("(/[a-z]+)",\s*([\w.]+)`).FindAllSubmatch(src, -1) {
		paths[string(m[2])] = string(m[1])
	}
	for _, handler := range []string{"health.Live", "health.Ready", "auth.MetricsHandler"} {
		if paths[handler] == "" {
			t.Fatalf("%s: no path found for %s (routes: %v)", httpRoutes, handler, paths)
		}
	}
	return paths
}

func TestManifestsDecodeStrictly(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	t.Logf("%d StatefulSet, %d Services, %d ConfigMap, %d ServiceAccount, %d PodDisruptionBudget, %d ServiceMonitor decoded strictly",
		len(m.statefulSets), len(m.services), len(m.configMaps), len(m.accounts), len(m.pdbs), len(m.monitors))
}

// A misspelled or unknown field must fail the decoding, for each kind we ship.
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, doc, field string
	}{
		{"misspelled probe", `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: x}
spec:
  serviceName: x
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers:
        - name: x
          image: x
          readynessProbe:
            httpGet: {path: /readyz, port: 8080}
`, "readynessProbe"},
		{"misspelled PDB field", `
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: x}
spec:
  maxUnavailible: 1
`, "maxUnavailible"},
		{"misspelled Service field", `
apiVersion: v1
kind: Service
metadata: {name: x}
spec:
  selectr: {a: b}
`, "selectr"},
		{"misspelled ServiceMonitor field", `
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: x}
spec:
  selector: {matchLabels: {a: b}}
  endpoints:
    - port: http
      intervall: 15s
`, "intervall"},
		{"unknown kind", `
apiVersion: v1
kind: Pod
metadata: {name: x}
`, "no Go type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := decodeStrict([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("want an error naming %q, got %v", tc.field, err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

func TestProbesUseTheServicePaths(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	paths := servedPaths(t)
	_, c := m.container(t)
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, tc := range []struct {
		probe *corev1.Probe
		name  string
		want  string
	}{
		{c.ReadinessProbe, "readinessProbe", paths["health.Ready"]},
		{c.LivenessProbe, "livenessProbe", paths["health.Live"]},
		{c.StartupProbe, "startupProbe", paths["health.Live"]},
	} {
		if tc.probe == nil || tc.probe.HTTPGet == nil {
			t.Errorf("%s: want an httpGet probe", tc.name)
			continue
		}
		get := tc.probe.HTTPGet
		if get.Path != tc.want {
			t.Errorf("%s: path %q, the service serves %q", tc.name, get.Path, tc.want)
		}
		if _, ok := ports[get.Port.String()]; !ok {
			t.Errorf("%s: port %q is not a named container port (%v)", tc.name, get.Port.String(), ports)
		}
		// server.tls is on: the probes speak HTTPS.
		if get.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s: scheme %q, want HTTPS", tc.name, get.Scheme)
		}
	}
}

func TestNodeIdentity(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	sts, c := m.container(t)
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if ref := env["NODE_ID"].ValueFrom; ref == nil || ref.FieldRef == nil || ref.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("NODE_ID must come from the pod name (fieldRef metadata.name), got %+v", env["NODE_ID"])
	}
	headless := m.service(t, sts.Spec.ServiceName)
	if headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s governs the StatefulSet: want clusterIP None and publishNotReadyAddresses", headless.Name)
	}
	var grpcPort int32
	for _, p := range c.Ports {
		if p.Name == "grpc" {
			grpcPort = p.ContainerPort
		}
	}
	want := fmt.Sprintf("$(NODE_ID).%s.$(POD_NAMESPACE).svc:%d", headless.Name, grpcPort)
	if got := env["ADVERTISE_GRPC_ADDR"].Value; got != want {
		t.Errorf("ADVERTISE_GRPC_ADDR = %q, want %q (the pod's name under the headless Service)", got, want)
	}
	// $(VAR) expands only variables defined earlier in the list.
	defined := map[string]bool{}
	for _, e := range c.Env {
		for _, ref := range regexp.MustCompile(`\$\((\w+)\)`).FindAllStringSubmatch(e.Value, -1) {
			if !defined[ref[1]] {
				t.Errorf("env %s refers to $(%s), which is not defined before it", e.Name, ref[1])
			}
		}
		defined[e.Name] = true
	}
}

func TestSelectorsMatchThePods(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	sts, c := m.container(t)
	pod := labels.Set(sts.Spec.Template.Labels)
	matches := func(what string, sel *metav1.LabelSelector) {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || s.Empty() || !s.Matches(pod) {
			t.Errorf("%s selector %v does not select the pods %v (%v)", what, sel, pod, err)
		}
	}
	matches("StatefulSet", sts.Spec.Selector)
	matches("PodDisruptionBudget", m.pdbs[0].Spec.Selector)
	containerPorts := map[string]bool{}
	for _, p := range c.Ports {
		containerPorts[p.Name] = true
	}
	for _, svc := range m.services {
		if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(pod) {
			t.Errorf("Service %s selector %v does not select the pods %v", svc.Name, svc.Spec.Selector, pod)
		}
		for _, p := range svc.Spec.Ports {
			if !containerPorts[p.TargetPort.String()] {
				t.Errorf("Service %s port %s targets %q, not a named container port", svc.Name, p.Name, p.TargetPort.String())
			}
		}
	}
}

func TestServiceMonitorScrapesTheMetricsPath(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	sm := m.monitors[0]
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	var selected []*corev1.Service
	for _, svc := range m.services {
		if sel.Matches(labels.Set(svc.Labels)) {
			selected = append(selected, svc)
		}
	}
	// One Service only: selecting both would scrape every pod twice.
	if len(selected) != 1 {
		t.Fatalf("ServiceMonitor selects %d Services, want exactly 1", len(selected))
	}
	metricsPath := servedPaths(t)["auth.MetricsHandler"]
	for _, ep := range sm.Spec.Endpoints {
		if !slices.ContainsFunc(selected[0].Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
			t.Errorf("endpoint port %q is not a port of Service %s", ep.Port, selected[0].Name)
		}
		if ep.Path != metricsPath {
			t.Errorf("endpoint path %q, the service serves metrics on %q", ep.Path, metricsPath)
		}
		if ep.Scheme == nil || *ep.Scheme != "https" {
			t.Errorf("endpoint scheme %v, want https (server.tls is on)", ep.Scheme)
		}
	}
}

// The configuration's files are where the pod mounts them, the variables it requires are
// set, and the keystore directory is the keystore Secret.
func TestConfigFitsThePod(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	sts, c := m.container(t)
	cm := m.configMaps[0]
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	if i := slices.Index(c.Args, "-conf"); i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("args %v: want -conf <file>", c.Args)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		volumes[v.Name] = v
	}
	mountOf := func(path string) (corev1.VolumeMount, bool) {
		for _, vm := range c.VolumeMounts {
			if strings.HasPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/") || path == vm.MountPath {
				return vm, true
			}
		}
		return corev1.VolumeMount{}, false
	}
	confFile := c.Args[slices.Index(c.Args, "-conf")+1]
	paths := append([]string{confFile}, absolutePaths(cfg)...)
	for _, p := range paths {
		vm, ok := mountOf(p)
		if !ok {
			t.Errorf("%s is used by the configuration but no volume is mounted there", p)
			continue
		}
		v, ok := volumes[vm.Name]
		if !ok {
			t.Errorf("volume mount %s has no volume", vm.Name)
			continue
		}
		if v.ConfigMap != nil {
			if v.ConfigMap.Name != cm.Name {
				t.Errorf("volume %s mounts ConfigMap %s, the manifests define %s", v.Name, v.ConfigMap.Name, cm.Name)
			} else if key := filepath.Base(p); cm.Data[key] == "" {
				t.Errorf("%s: ConfigMap %s has no key %s", p, cm.Name, key)
			}
		}
		if vm.SubPath != "" {
			t.Errorf("%s: subPath mounts never see updated files (certificate renewals)", vm.MountPath)
		}
	}
	signers := cfg["signers"].(map[string]any)["keystore"].(map[string]any)
	vm, ok := mountOf(signers["dir"].(string) + "/key")
	if !ok || volumes[vm.Name].Secret == nil || volumes[vm.Name].Secret.SecretName != "txmanager-keystore" {
		t.Errorf("keystore dir %v must be the txmanager-keystore Secret volume", signers["dir"])
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	// ${NAME} without a default must be set; ${NAME:default} may be.
	for _, ref := range regexp.MustCompile(`\$\{(\w+)\}`).FindAllStringSubmatch(cm.Data["config.yaml"], -1) {
		if !env[ref[1]] {
			t.Errorf("config.yaml requires ${%s}, which the container does not set", ref[1])
		}
	}
}

// Keys in a cloud KMS are reached with the pod's cloud identity, never with credentials in
// a Secret or the image: the pods run as the ServiceAccount that carries the IAM role
// (EKS) and the Google service account (GKE Workload Identity), without a Kubernetes API
// token, and the keystore Secrets are optional so a KMS deployment creates none.
func TestPodsSignWithTheirCloudIdentity(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	sts, c := m.container(t)
	sa := m.accounts[0]
	pod := sts.Spec.Template.Spec
	if pod.ServiceAccountName != sa.Name {
		t.Errorf("pods run as service account %q, the manifests define %q", pod.ServiceAccountName, sa.Name)
	}
	for key, shape := range map[string]*regexp.Regexp{
		"eks.amazonaws.com/role-arn":     regexp.MustCompile(`^arn:aws:iam::\d{12}:role/[\w+=,.@/-]+$`),
		"iam.gke.io/gcp-service-account": regexp.MustCompile(`^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z][a-z0-9-]+\.iam\.gserviceaccount\.com$`),
	} {
		if !shape.MatchString(sa.Annotations[key]) {
			t.Errorf("ServiceAccount annotation %s = %q, want the shape %s", key, sa.Annotations[key], shape)
		}
	}
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Error("the ServiceAccount must not mount a Kubernetes API token: the service never calls the API")
	}
	for _, v := range pod.Volumes {
		if v.Secret != nil && strings.HasPrefix(v.Secret.SecretName, "txmanager-keystore") && (v.Secret.Optional == nil || !*v.Secret.Optional) {
			t.Errorf("volume %s: the keystore Secret must be optional (a KMS or clef deployment has none)", v.Name)
		}
	}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "AWS_") || strings.HasPrefix(e.Name, "GOOGLE_") {
			t.Errorf("env %s: cloud credentials come from the pod's identity, not the container's environment", e.Name)
		}
	}
}

// The image holds the binary alone: its last stage copies nothing but the built binary, so
// no key, passphrase or configuration can be baked into it.
func TestImageHoldsOnlyTheBinary(t *testing.T) {
	t.Parallel()
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages := regexp.MustCompile(`(?m)^FROM\s`).Split(string(dockerfile), -1)
	final := stages[len(stages)-1]
	copies := regexp.MustCompile(`(?m)^(COPY|ADD)\s.*$`).FindAllString(final, -1)
	if len(copies) == 0 {
		t.Fatal("the final stage copies nothing: where is the binary?")
	}
	for _, line := range copies {
		if !regexp.MustCompile(`^COPY --from=\w+ /out/txmanager-service /usr/local/bin/txmanager-service$`).MatchString(line) {
			t.Errorf("the final stage copies more than the binary: %q", line)
		}
	}
}

// absolutePaths returns the configuration's string values that are absolute file paths.
func absolutePaths(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for _, x := range v {
			out = append(out, absolutePaths(x)...)
		}
	case []any:
		for _, x := range v {
			out = append(out, absolutePaths(x)...)
		}
	case string:
		if strings.HasPrefix(v, "/") {
			out = append(out, v)
		}
	}
	return out
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}
