package kube_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const chartDir = "deploy/helm/supervaizer-sidecar"

// splitYAML decodes a multi-document YAML stream into objects.
func splitYAML(t *testing.T, s string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(s)))
	var out []*unstructured.Unstructured
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if string(bytes.TrimSpace(j)) == "null" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		out = append(out, u)
	}
}

// decodeAs converts an object to its typed form, strictly.
func decodeAs(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	j, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(j, into); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

func kinds(objs []*unstructured.Unstructured) []string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, o.GetKind())
	}
	slices.Sort(ks)
	return ks
}

func findKind(objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind {
			return o
		}
	}
	return nil
}

// chartWebhook renders the chart and returns its webhook configuration.
func (c *cluster) chartWebhook(t *testing.T, args ...string) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	out := c.must(t, nil, "helm", append([]string{"template", "rel", chartDir, "-n", "supervaizer"}, args...)...)
	u := findKind(splitYAML(t, out), "MutatingWebhookConfiguration")
	if u == nil {
		t.Fatal("the chart renders no MutatingWebhookConfiguration")
	}
	var w admissionregistrationv1.MutatingWebhookConfiguration
	decodeAs(t, u, &w)
	return &w
}

// TestKubeHelmChart lints the chart, renders it with each TLS source, and
// applies it to the API server in a namespace enforcing Pod Security
// "restricted": a strict server-side dry run of `helm template`, then
// `helm install` and `helm upgrade` for real (the chart's CA, read back
// with lookup, must survive the upgrade), and the injector's pod created
// from the stored Deployment.
func TestKubeHelmChart(t *testing.T) {
	c := kube(t)
	metrics := []string{"--set", "metrics.podMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true"}
	c.must(t, nil, "helm", "lint", "--strict", chartDir)
	c.must(t, nil, "helm", append([]string{"lint", "--strict", chartDir}, metrics...)...)

	t.Run("TLS from the chart", func(t *testing.T) {
		objs := splitYAML(t, c.must(t, nil, "helm", "template", "rel", chartDir, "-n", "supervaizer"))
		want := []string{"Deployment", "MutatingWebhookConfiguration", "PodDisruptionBudget", "Secret", "Service", "ServiceAccount"}
		if got := kinds(objs); !slices.Equal(got, want) {
			t.Fatalf("kinds %v, want %v", got, want)
		}
		var w admissionregistrationv1.MutatingWebhookConfiguration
		decodeAs(t, findKind(objs, "MutatingWebhookConfiguration"), &w)
		checkWebhookInterface(t, &w)
		var sec corev1.Secret
		decodeAs(t, findKind(objs, "Secret"), &sec)
		if sec.Type != corev1.SecretTypeTLS || string(w.Webhooks[0].ClientConfig.CABundle) != string(sec.Data["ca.crt"]) {
			t.Fatal("the webhook's caBundle is not the generated Secret's ca.crt")
		}
		if w.Annotations["cert-manager.io/inject-ca-from"] != "" {
			t.Fatal("cert-manager annotation without cert-manager")
		}
	})
	for name, args := range map[string][]string{
		"TLS from cert-manager when installed": {"--api-versions", "cert-manager.io/v1"},
		"TLS from cert-manager when asked":     {"--set", "tls.source=certManager"},
	} {
		t.Run(name, func(t *testing.T) {
			objs := splitYAML(t, c.must(t, nil, "helm", append([]string{"template", "rel", chartDir, "-n", "supervaizer"}, args...)...))
			want := []string{"Certificate", "Certificate", "Deployment", "Issuer", "Issuer", "MutatingWebhookConfiguration", "PodDisruptionBudget", "Service", "ServiceAccount"}
			if got := kinds(objs); !slices.Equal(got, want) {
				t.Fatalf("kinds %v, want %v", got, want)
			}
			w := c.chartWebhook(t, args...)
			checkWebhookInterface(t, w)
			if len(w.Webhooks[0].ClientConfig.CABundle) != 0 || w.Annotations["cert-manager.io/inject-ca-from"] != "supervaizer/rel-supervaizer-sidecar" {
				t.Fatalf("cert-manager's CA injection not set up: %v", w.Annotations)
			}
		})
	}
	t.Run("refused values", func(t *testing.T) {
		for _, set := range []string{"tls.source=bogus", "webhook.timeoutSeconds=0", "webhook.timeoutSeconds=31", "sidecar.image.pullPolicy=Sometimes", "tls.helm.validityDays=0"} {
			_, errOut, err := c.run(t, nil, "helm", "template", "rel", chartDir, "--set", set)
			key, _, _ := strings.Cut(set, "=")
			if err == nil || !strings.Contains(errOut, key) {
				t.Errorf("--set %s: rendered (%v), or the error does not name %s: %s", set, err, key, errOut)
			}
		}
	})

	t.Run("applied in a restricted namespace", func(t *testing.T) {
		ns := c.namespace(t, "helm", true)
		c.installPrometheusCRDs(t)
		// The chart's webhook (no injector runs behind its Service here) is
		// confined to this namespace, and removed at the end, so that it
		// never sees the other tests' pods.
		scope := []string{"-n", ns, "--set", "webhook.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=" + ns}
		scope = append(scope, metrics...)
		t.Cleanup(func() {
			c.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), "rel-supervaizer-sidecar", metav1.DeleteOptions{})
		})
		rendered := c.must(t, nil, "helm", append([]string{"template", "rel", chartDir}, scope...)...)
		c.must(t, []byte(rendered), "kubectl", "apply", "--server-side", "--dry-run=server", "--field-manager=test", "-n", ns, "-f", "-")

		c.must(t, nil, "helm", append([]string{"install", "rel", chartDir}, scope...)...)
		ctx := context.Background()
		w1, err := c.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "rel-supervaizer-sidecar", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.must(t, nil, "helm", append([]string{"upgrade", "rel", chartDir}, scope...)...)
		w2, err := c.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "rel-supervaizer-sidecar", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(w1.Webhooks[0].ClientConfig.CABundle) == 0 || string(w1.Webhooks[0].ClientConfig.CABundle) != string(w2.Webhooks[0].ClientConfig.CABundle) {
			t.Fatal("helm upgrade replaced the webhook's CA (the Secret was not read back)")
		}
		sec, err := c.cs.CoreV1().Secrets(ns).Get(ctx, "rel-supervaizer-sidecar-tls", metav1.GetOptions{})
		if err != nil || string(sec.Data["ca.crt"]) != string(w2.Webhooks[0].ClientConfig.CABundle) {
			t.Fatalf("the stored Secret's ca.crt is not the webhook's caBundle: %v", err)
		}
		for _, kind := range []struct{ res, name string }{{"podmonitors", "rel-supervaizer-sidecar"}, {"prometheusrules", "rel-supervaizer-sidecar"},
			{"poddisruptionbudgets", "rel-supervaizer-sidecar"}, {"services", "rel-supervaizer-sidecar"}, {"serviceaccounts", "rel-supervaizer-sidecar"}} {
			c.must(t, nil, "kubectl", "get", "-n", ns, kind.res, kind.name)
		}
		var d *appsv1.Deployment
		if d, err = c.cs.AppsV1().Deployments(ns).Get(ctx, "rel-supervaizer-sidecar", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "injector", Labels: d.Spec.Template.Labels}, Spec: d.Spec.Template.Spec}
		if _, err := c.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatalf("the injector's pod is refused in a restricted namespace: %v", err)
		}
		args := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
		if !strings.Contains(args, "--image=ghcr.io/supervaize/supervaizer-sidecar:0.1.0") {
			t.Fatalf("injector args %s: not the chart's sidecar image", args)
		}
	})
}

// checkWebhookInterface pins the webhook's documented interface.
func checkWebhookInterface(t *testing.T, w *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	if len(w.Webhooks) != 1 {
		t.Fatalf("%d webhooks, want 1", len(w.Webhooks))
	}
	h := w.Webhooks[0]
	if h.FailurePolicy == nil || *h.FailurePolicy != admissionregistrationv1.Fail {
		t.Error("failurePolicy is not Fail")
	}
	if h.ReinvocationPolicy == nil || *h.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy {
		t.Error("reinvocationPolicy is not IfNeeded")
	}
	if h.SideEffects == nil || *h.SideEffects != admissionregistrationv1.SideEffectClassNone {
		t.Error("sideEffects is not None")
	}
	if h.ObjectSelector == nil || len(h.ObjectSelector.MatchLabels) != 1 || h.ObjectSelector.MatchLabels["sidecar.supervaizer.io/inject"] != "true" || len(h.ObjectSelector.MatchExpressions) != 0 {
		t.Errorf("objectSelector %+v: want sidecar.supervaizer.io/inject=true only", h.ObjectSelector)
	}
	if len(h.Rules) != 1 || !slices.Equal(h.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) ||
		!slices.Equal(h.Rules[0].Resources, []string{"pods"}) || !slices.Equal(h.Rules[0].APIGroups, []string{""}) {
		t.Errorf("rules %+v: want pods CREATE", h.Rules)
	}
	if s := h.ClientConfig.Service; s == nil || s.Path == nil || *s.Path != "/mutate" {
		t.Errorf("clientConfig %+v: want the Service at /mutate", h.ClientConfig)
	}
	if !slices.Equal(h.AdmissionReviewVersions, []string{"v1"}) {
		t.Errorf("admissionReviewVersions %v", h.AdmissionReviewVersions)
	}
}
