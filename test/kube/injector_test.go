package kube_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	injectLabel   = "sidecar.supervaizer.io/inject"
	annConfig     = "sidecar.supervaizer.io/config"
	annAgentPort  = "sidecar.supervaizer.io/agent-port"
	annSecret     = "sidecar.supervaizer.io/secret"
	injectedImage = "registry.test/supervaizer-sidecar:kube-test"
)

// injector is cmd/supervaizer-injector started on a loopback port with its
// own CA, and registered with the API server by the chart's webhook
// configuration, its clientConfig pointed at the loopback URL.
type injector struct {
	cmd  *exec.Cmd
	done chan struct{}
	url  string
}

func startInjector(t *testing.T, c *cluster) *injector {
	t.Helper()
	bin := c.goBuild(t, "./cmd/supervaizer-injector")
	ca, err := newPKI("supervaizer-injector-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := ca.serving("supervaizer-injector")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := writeFiles(dir, map[string][]byte{"tls.crt": crt, "tls.key": key}); err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "injector.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:"+strconv.Itoa(port), "--tls-cert", filepath.Join(dir, "tls.crt"),
		"--tls-key", filepath.Join(dir, "tls.key"), "--image", injectedImage)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inj := &injector{cmd: cmd, done: make(chan struct{}), url: "https://127.0.0.1:" + strconv.Itoa(port)}
	go func() { cmd.Wait(); logf.Close(); close(inj.done) }()
	t.Cleanup(func() {
		inj.stop()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "injector.log"))
			t.Logf("injector log:\n%s", b)
		}
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CAPEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if err := waitHTTP(inj.url+"/healthz", hc, 30*time.Second, &proc{cmd: cmd, done: inj.done}); err != nil {
		t.Fatalf("injector: %v", err)
	}

	w := c.chartWebhook(t)
	w.Name = "supervaizer-injector-kube-test"
	w.Webhooks[0].ClientConfig.Service = nil
	u := inj.url + "/mutate"
	w.Webhooks[0].ClientConfig.URL = &u
	w.Webhooks[0].ClientConfig.CABundle = ca.CAPEM
	ctx := context.Background()
	if _, err := c.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, w, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), w.Name, metav1.DeleteOptions{})
	})
	return inj
}

func (inj *injector) stop() {
	select {
	case <-inj.done:
		return
	default:
	}
	inj.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-inj.done:
	case <-time.After(10 * time.Second):
		inj.cmd.Process.Kill()
		<-inj.done
	}
}

// agentPod is an opted-in pod whose agent container passes Pod Security
// "restricted" (the pod itself sets no security context).
func agentPod(name string, ann map[string]string) *corev1.Pod {
	no, yes := false, true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{injectLabel: "true", "app": name}, Annotations: ann},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{
				Name: "agent", Image: "registry.test/agent:1",
				Env: []corev1.EnvVar{{Name: "SUPERVAIZER_HOST", Value: "127.0.0.1"}},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: &yes, AllowPrivilegeEscalation: &no,
					Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			}},
		},
	}
}

// TestInjectorWebhook creates pods through the API server, which calls the
// injector through the chart's webhook configuration; each case is asserted
// on the pod the server stored.
func TestInjectorWebhook(t *testing.T) {
	c := kube(t)
	inj := startInjector(t, c)
	ns := c.namespace(t, "inject", false)
	restricted := c.namespace(t, "inject-restricted", true)
	ctx := context.Background()
	pods := func(ns string) interface {
		Create(context.Context, *corev1.Pod, metav1.CreateOptions) (*corev1.Pod, error)
		Get(context.Context, string, metav1.GetOptions) (*corev1.Pod, error)
	} {
		return c.cs.CoreV1().Pods(ns)
	}
	// The API server starts calling a new webhook once its configuration
	// has reached the server's cache.
	eventually(t, 30*time.Second, "the API server calls the injector", func() error {
		p, err := pods(ns).Create(ctx, agentPod("probe", map[string]string{annConfig: "agent-caddyfile"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if s, _ := sidecarContainer(&p.Spec); s == nil {
			return errNotInjected
		}
		return nil
	})

	t.Run("opted-in pod stored with the native sidecar", func(t *testing.T) {
		ann := map[string]string{annConfig: "agent-caddyfile", annAgentPort: "9000", annSecret: "agent-keys"}
		got, err := pods(ns).Create(ctx, agentPod("injected", ann), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stored, err := pods(ns).Get(ctx, got.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(stored.Spec.InitContainers) != 1 {
			t.Fatalf("init containers %d, want the sidecar only", len(stored.Spec.InitContainers))
		}
		sc, native := sidecarContainer(&stored.Spec)
		if sc == nil || !native || sc.Image != injectedImage {
			t.Fatalf("sidecar %+v native=%v", sc, native)
		}
		checkInjectedSidecar(t, stored, sc, "agent-caddyfile", "9000", "agent-keys")
		// Nothing else changed: the same pod without the label, stored.
		twin := agentPod("twin", ann)
		delete(twin.Labels, injectLabel)
		twinStored, err := pods(ns).Create(ctx, twin, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rest := stored.Spec.DeepCopy()
		rest.InitContainers = nil
		var kept []corev1.Volume
		for _, v := range rest.Volumes {
			if !strings.HasPrefix(v.Name, "supervaizer-sidecar-") {
				kept = append(kept, v)
			}
		}
		rest.Volumes = kept
		if !reflect.DeepEqual(rest, &twinStored.Spec) {
			t.Fatalf("the injection changed more than the init containers and volumes:\ninjected %+v\nunlabelled %+v", rest, twinStored.Spec)
		}
		if !reflect.DeepEqual(stored.Annotations, twinStored.Annotations) {
			t.Fatalf("annotations changed: %v", stored.Annotations)
		}
	})

	t.Run("already injected pod left as it is", func(t *testing.T) {
		p := agentPod("by-hand", map[string]string{annConfig: "agent-caddyfile"})
		always := corev1.ContainerRestartPolicyAlways
		own := *p.Spec.Containers[0].DeepCopy()
		own.Name, own.Image, own.RestartPolicy, own.Env = "supervaizer-sidecar", "registry.test/own-sidecar:2", &always, nil
		p.Spec.InitContainers = []corev1.Container{own}
		stored, err := pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(stored.Spec.InitContainers) != 1 || stored.Spec.InitContainers[0].Image != "registry.test/own-sidecar:2" || len(stored.Spec.Volumes) != 0 {
			t.Fatalf("a pod with its own supervaizer-sidecar was changed: %+v, volumes %v", stored.Spec.InitContainers, stored.Spec.Volumes)
		}
	})

	t.Run("existing init containers kept, the sidecar after them", func(t *testing.T) {
		p := agentPod("with-init", map[string]string{annConfig: "agent-caddyfile"})
		always := corev1.ContainerRestartPolicyAlways
		migrate := *p.Spec.Containers[0].DeepCopy()
		migrate.Name, migrate.Image = "migrate", "registry.test/migrate:1"
		mesh := *p.Spec.Containers[0].DeepCopy()
		mesh.Name, mesh.Image, mesh.RestartPolicy = "mesh-proxy", "registry.test/mesh:1", &always
		p.Spec.InitContainers = []corev1.Container{migrate, mesh}
		stored, err := pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, ic := range stored.Spec.InitContainers {
			names = append(names, ic.Name)
		}
		if strings.Join(names, ",") != "migrate,mesh-proxy,supervaizer-sidecar" {
			t.Fatalf("init containers %v, want migrate,mesh-proxy,supervaizer-sidecar", names)
		}
		if stored.Spec.InitContainers[0].Image != "registry.test/migrate:1" || stored.Spec.InitContainers[1].RestartPolicy == nil {
			t.Fatal("the pod's own init containers changed")
		}
	})

	t.Run("restricted namespace admits the injected pod", func(t *testing.T) {
		stored, err := pods(restricted).Create(ctx, agentPod("restricted", map[string]string{annConfig: "agent-caddyfile"}), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("refused in a restricted namespace: %v", err)
		}
		sc, native := sidecarContainer(&stored.Spec)
		if sc == nil || !native {
			t.Fatal("stored without the native sidecar")
		}
		checkInjectedSidecar(t, stored, sc, "agent-caddyfile", "8000", "")
	})

	t.Run("bad annotations denied, naming the annotation", func(t *testing.T) {
		for i, tc := range []struct {
			ann  map[string]string
			want string
		}{
			{map[string]string{}, annConfig},
			{map[string]string{annConfig: ""}, annConfig},
			{map[string]string{annConfig: "agent-caddyfile", annAgentPort: "eighty"}, annAgentPort},
			{map[string]string{annConfig: "agent-caddyfile", annAgentPort: "8080"}, annAgentPort},
			{map[string]string{annConfig: "agent-caddyfile", annSecret: ""}, annSecret},
		} {
			name := "denied-" + strconv.Itoa(i)
			_, err := pods(ns).Create(ctx, agentPod(name, tc.ann), metav1.CreateOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "denied the request") {
				t.Errorf("annotations %v: %v; want a denial naming %s", tc.ann, err, tc.want)
			}
			if _, err := pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("annotations %v: the denied pod was stored (%v)", tc.ann, err)
			}
		}
	})

	t.Run("pods without the label untouched", func(t *testing.T) {
		for _, label := range []string{"", "false"} {
			p := agentPod("unlabelled"+label, map[string]string{annAgentPort: "not-a-port"}) // would be denied if seen
			if label == "" {
				delete(p.Labels, injectLabel)
			} else {
				p.Labels[injectLabel] = label
			}
			stored, err := pods(ns).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("label %q: %v", label, err)
			}
			if len(stored.Spec.InitContainers) != 0 || len(stored.Spec.Volumes) != 0 {
				t.Fatalf("label %q: the pod was changed: %+v", label, stored.Spec)
			}
		}
	})

	t.Run("the example agent: injected, its Caddyfile valid with what was injected", func(t *testing.T) {
		ns := c.namespace(t, "example", true)
		c.must(t, nil, "kubectl", "apply", "--server-side", "--field-manager=test", "-n", ns, "-f", "deploy/helm/examples/agent.yaml")
		d, err := c.cs.AppsV1().Deployments(ns).Get(ctx, "my-agent", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// No controller-manager runs here: the pod the ReplicaSet would
		// create, from the stored template.
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "my-agent-", Labels: d.Spec.Template.Labels,
			Annotations: d.Spec.Template.Annotations}, Spec: d.Spec.Template.Spec}
		stored, err := pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the example's pod is refused: %v", err)
		}
		sc, native := sidecarContainer(&stored.Spec)
		if sc == nil || !native {
			t.Fatal("the example's pod was stored without the native sidecar")
		}
		checkInjectedSidecar(t, stored, sc, "my-agent-sidecar-caddyfile", "8000", "my-agent-secrets")
		svc, err := c.cs.CoreV1().Services(ns).Get(ctx, "my-agent", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if tp := svc.Spec.Ports[0].TargetPort; len(svc.Spec.Ports) != 1 || tp.StrVal != "sidecar-http" {
			t.Fatalf("the example's Service targets %v, not the sidecar's port", tp)
		}
		// The Secret's files are at the injected mount path in the pod; here
		// in the test's directory, and the JWKS on a dead loopback port.
		c.validateCaddyfile(t, ns, &stored.Spec, sc, false, func(caddyfile, dir string) string {
			secrets := filepath.Join(dir, "secrets")
			os.Mkdir(secrets, 0o700)
			os.WriteFile(filepath.Join(secrets, "api-key"), []byte("test-api-key\n"), 0o600)
			if !strings.Contains(caddyfile, "/var/run/secrets/supervaizer/") {
				t.Fatal("the example's Caddyfile reads nothing from the injected Secret")
			}
			caddyfile = strings.ReplaceAll(caddyfile, "/var/run/secrets/supervaizer/", secrets+"/")
			return regexp.MustCompile(`jwks_url \S+`).ReplaceAllString(caddyfile, "jwks_url http://127.0.0.1:9/jwks.json")
		})
	})

	t.Run("injector down: labelled pods refused, others created", func(t *testing.T) {
		inj.stop()
		_, err := pods(ns).Create(ctx, agentPod("while-down", map[string]string{annConfig: "agent-caddyfile"}), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "inject.sidecar.supervaizer.io") {
			t.Fatalf("a labelled pod with the injector down: %v; want refused (failurePolicy Fail)", err)
		}
		if _, err := pods(ns).Get(ctx, "while-down", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("stored without its sidecar (%v)", err)
		}
		p := agentPod("plain-while-down", nil)
		delete(p.Labels, injectLabel)
		if _, err := pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("an unlabelled pod with the injector down: %v", err)
		}
	})
}

type notInjected struct{}

func (notInjected) Error() string { return "the pod was stored without the sidecar" }

var errNotInjected error = notInjected{}

// checkInjectedSidecar checks what the injector wrote, as stored.
func checkInjectedSidecar(t *testing.T, pod *corev1.Pod, sc *corev1.Container, config, port, secret string) {
	t.Helper()
	env := map[string]string{}
	for _, e := range sc.Env {
		env[e.Name] = e.Value
	}
	if env["SUPERVAIZER_AGENT_PORT"] != port {
		t.Errorf("SUPERVAIZER_AGENT_PORT %q, want %q", env["SUPERVAIZER_AGENT_PORT"], port)
	}
	if sc.StartupProbe == nil || sc.StartupProbe.HTTPGet.Path != "/_sidecar/live" || sc.ReadinessProbe == nil || sc.ReadinessProbe.HTTPGet.Path != "/_sidecar/ready" ||
		sc.LivenessProbe == nil || sc.LivenessProbe.HTTPGet.Path != "/_sidecar/live" {
		t.Error("probes not on /_sidecar/live and /_sidecar/ready")
	}
	if sc.Resources.Limits.Memory().IsZero() || sc.Resources.Requests.Cpu().IsZero() {
		t.Error("no resources")
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	var cm, sec string
	for _, m := range sc.VolumeMounts {
		v := vols[m.Name]
		switch {
		case m.MountPath == "/etc/supervaizer" && v.ConfigMap != nil && m.ReadOnly:
			cm = v.ConfigMap.Name
		case m.MountPath == "/var/run/secrets/supervaizer" && v.Secret != nil && m.ReadOnly:
			sec = v.Secret.SecretName
		}
	}
	if cm != config || sec != secret {
		t.Errorf("mounted ConfigMap %q Secret %q, want %q %q", cm, sec, config, secret)
	}
}
