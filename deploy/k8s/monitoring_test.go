package k8s_test

import (
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The Prometheus Operator's types (monitoring.coreos.com/v1) are not in
// k8s.io/api, and its Go module would upgrade k8s.io/* here: these are the
// subsets of PodMonitor and PrometheusRule the metrics overlay uses, with the
// operator's field names. Decoding is strict, so a field must be added here
// (and checked) before a manifest uses it.

type podMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector            metav1.LabelSelector `json:"selector"`
		NamespaceSelector   *namespaceSelector   `json:"namespaceSelector,omitempty"`
		PodMetricsEndpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path,omitempty"`
			Scheme   string `json:"scheme,omitempty"`
			Interval string `json:"interval,omitempty"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

type namespaceSelector struct {
	Any        bool     `json:"any,omitempty"`
	MatchNames []string `json:"matchNames,omitempty"`
}

type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ruleFile `json:"spec"`
}

// ruleFile is a Prometheus rules file (and a PrometheusRule's spec).
type ruleFile struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval,omitempty"`
		Rules    []struct {
			Alert       string            `json:"alert,omitempty"`
			Record      string            `json:"record,omitempty"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

// rulesFile is deploy/observability/alerts.rules.yml, decoded strictly.
func rulesFile(t testing.TB) ruleFile {
	t.Helper()
	y := readFile(t, filepath.Join(repoRoot(t), "deploy", "observability", "alerts.rules.yml"))
	var rf ruleFile
	if err := yaml.UnmarshalStrict([]byte(y), &rf); err != nil {
		t.Fatalf("alerts.rules.yml: %v", err)
	}
	if len(rf.Groups) == 0 {
		t.Fatal("alerts.rules.yml: no rule group")
	}
	return rf
}

// checkMonitoring checks the metrics overlay's objects: a PodMonitor that
// scrapes the sidecar's metrics port of this Deployment's pods on the path
// the Caddyfile serves, in their own namespace, and a PrometheusRule whose
// groups are exactly those of the plain rules file.
func checkMonitoring(t *testing.T, r *rendered) {
	t.Helper()
	pms := all[*podMonitor](r.docs)
	prs := all[*prometheusRule](r.docs)
	if len(pms) != 1 || len(prs) != 1 {
		t.Fatalf("want one PodMonitor and one PrometheusRule, got %d and %d", len(pms), len(prs))
	}
	pm := pms[0]
	if !selects(&pm.Spec.Selector, r.deploy.Spec.Template.Labels) {
		t.Errorf("PodMonitor selector %v does not select the pod labels %v", pm.Spec.Selector, r.deploy.Spec.Template.Labels)
	}
	if ns := pm.Spec.NamespaceSelector; ns != nil && (ns.Any || len(ns.MatchNames) != 0) {
		t.Errorf("PodMonitor namespaceSelector %+v: scrape the pods of its own namespace only", ns)
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("PodMonitor has %d endpoints, want 1", len(pm.Spec.PodMetricsEndpoints))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	if ep.Port != metricsPortName {
		t.Errorf("PodMonitor endpoint port %q, want the sidecar's container port %q", ep.Port, metricsPortName)
	}
	if got := portNamed(r.sidecar, ep.Port); got != metricsPort {
		t.Errorf("PodMonitor port %q is %d on the sidecar, want %d", ep.Port, got, metricsPort)
	}
	if ep.Path != metricsPath {
		t.Errorf("PodMonitor path %q, want %s (the Caddyfile's metrics route)", ep.Path, metricsPath)
	}
	if ep.Scheme != "" && ep.Scheme != "http" {
		t.Errorf("PodMonitor scheme %q: the metrics site is plain HTTP", ep.Scheme)
	}
	pr := prs[0]
	if want := rulesFile(t); !reflect.DeepEqual(pr.Spec, want) {
		t.Errorf("PrometheusRule %s spec differs from deploy/observability/alerts.rules.yml: keep them equal (the rules file is checked by promtool)\nrule: %s\nfile: %s",
			pr.Name, mustJSON(t, pr.Spec), mustJSON(t, want))
	}
	for _, o := range []metav1.Object{pm, pr} {
		if o.GetLabels()["app.kubernetes.io/part-of"] != "supervaizer" {
			t.Errorf("%s: no app.kubernetes.io/part-of: supervaizer label", o.GetName())
		}
	}
}

// portNamed is the number of the container port with that name, or -1.
func portNamed(c *corev1.Container, name string) int32 {
	i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == name })
	if i < 0 {
		return -1
	}
	return c.Ports[i].ContainerPort
}
