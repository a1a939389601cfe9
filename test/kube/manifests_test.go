package kube_test

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kustomizations is every kustomization shipped under deploy/, and what
// its admission needs; TestKubeManifests fails on one missing here.
var kustomizations = map[string]struct {
	crds   bool // the prometheus-operator CRDs (PodMonitor, PrometheusRule)
	redis  bool // the Caddyfile validates against a Redis
	native bool // the sidecar is a native sidecar
}{
	"deploy/k8s/base":                       {native: true},
	"deploy/k8s/overlays/before-1.29":       {},
	"deploy/k8s/overlays/metrics":           {crds: true, native: true},
	"deploy/k8s/overlays/redis-idempotency": {redis: true, native: true},
}

// shippedKustomizations walks deploy/ for kustomization files.
func shippedKustomizations(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(filepath.Join(root, "deploy"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch d.Name() {
		case "kustomization.yaml", "kustomization.yml", "Kustomization":
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)
	return dirs
}

// TestKubeManifests admits every shipped kustomization in a namespace
// enforcing Pod Security "restricted": a server-side dry run first (the
// server's validation, strict field checks, CRDs), then a real apply; each
// Deployment's pod template is then created as a Pod (dry run: Pod Security
// is enforced on pods, only warned about for Deployments), and the
// Caddyfile ConfigMap the sidecar mounts is read back from the server and
// validated by the sidecar binary with the environment the pod gives it.
func TestKubeManifests(t *testing.T) {
	c := kube(t)
	dirs := shippedKustomizations(t, c.root)
	for _, d := range dirs {
		if _, ok := kustomizations[d]; !ok {
			t.Errorf("%s: a kustomization this test does not know; add it to kustomizations", d)
		}
	}
	for d := range kustomizations {
		if !slices.Contains(dirs, d) {
			t.Errorf("%s: listed here but not found under deploy/", d)
		}
	}
	for _, dir := range dirs {
		need := kustomizations[dir]
		t.Run(strings.TrimPrefix(dir, "deploy/k8s/"), func(t *testing.T) {
			ns := c.namespace(t, "manifests", true)
			if need.crds {
				c.installPrometheusCRDs(t)
			}
			c.must(t, nil, "kubectl", "apply", "--server-side", "--dry-run=server", "--field-manager=test", "-k", dir, "-n", ns)
			c.must(t, nil, "kubectl", "apply", "--server-side", "--field-manager=test", "-k", dir, "-n", ns)
			ctx := context.Background()
			deps, err := c.cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(deps.Items) == 0 {
				t.Fatal("no Deployment stored")
			}
			for _, d := range deps.Items {
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: d.Name + "-pod", Labels: d.Spec.Template.Labels,
					Annotations: d.Spec.Template.Annotations}, Spec: d.Spec.Template.Spec}
				stored, err := c.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				if err != nil {
					t.Fatalf("Deployment %s: its pod is refused in a restricted namespace: %v", d.Name, err)
				}
				sc, native := sidecarContainer(&stored.Spec)
				if sc == nil || native != need.native {
					t.Fatalf("Deployment %s: stored pod's sidecar %v native=%v, want native=%v", d.Name, sc != nil, native, need.native)
				}
				c.validateCaddyfile(t, ns, &stored.Spec, sc, need.redis, nil)
			}
		})
	}
}

// sidecarContainer is the pod's supervaizer-sidecar container and whether it
// is a native sidecar (an init container with restartPolicy Always).
func sidecarContainer(spec *corev1.PodSpec) (*corev1.Container, bool) {
	for i, ic := range spec.InitContainers {
		if ic.Name == "supervaizer-sidecar" {
			return &spec.InitContainers[i], ic.RestartPolicy != nil && *ic.RestartPolicy == corev1.ContainerRestartPolicyAlways
		}
	}
	for i, ct := range spec.Containers {
		if ct.Name == "supervaizer-sidecar" {
			return &spec.Containers[i], false
		}
	}
	return nil, false
}

// validateCaddyfile reads the ConfigMap the sidecar mounts at its --config
// path back from the server and runs `supervaizer-sidecar adapt --validate`
// on it with the container's environment, resolved from the stored
// ConfigMaps (Secret values and the JWKS URL replaced by test values: no
// secret is stored here and nothing leaves loopback). rewrite, when not
// nil, edits the Caddyfile first (given the test's directory).
func (c *cluster) validateCaddyfile(t *testing.T, ns string, spec *corev1.PodSpec, sc *corev1.Container, redis bool, rewrite func(caddyfile, dir string) string) {
	t.Helper()
	ctx := context.Background()
	cfgPath := ""
	for i, a := range sc.Args {
		if a == "--config" && i+1 < len(sc.Args) {
			cfgPath = sc.Args[i+1]
		}
	}
	if cfgPath == "" {
		t.Fatalf("sidecar args %v: no --config", sc.Args)
	}
	var cmName, key string
	for _, m := range sc.VolumeMounts {
		if filepath.Dir(cfgPath) != m.MountPath {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cmName, key = v.ConfigMap.Name, filepath.Base(cfgPath)
			}
		}
	}
	if cmName == "" {
		t.Fatalf("no ConfigMap volume mounted at %s", filepath.Dir(cfgPath))
	}
	cm, err := c.cs.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	caddyfile, ok := cm.Data[key]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cmName, key)
	}
	env := map[string]string{}
	for _, ef := range sc.EnvFrom {
		if ef.ConfigMapRef == nil {
			t.Fatalf("envFrom %+v: only ConfigMaps are resolved here", ef)
		}
		ecm, err := c.cs.CoreV1().ConfigMaps(ns).Get(ctx, ef.ConfigMapRef.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range ecm.Data {
			env[ef.Prefix+k] = v
		}
	}
	for _, e := range sc.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "test-secret-" + e.ValueFrom.SecretKeyRef.Key
		default:
			t.Fatalf("env %s: valueFrom %+v not resolved here", e.Name, e.ValueFrom)
		}
	}
	if _, ok := env["SUPERVAIZER_SERVER_ID"]; !ok && !strings.Contains(caddyfile, "server_id ") {
		t.Fatal("the sidecar gets no SUPERVAIZER_SERVER_ID, and its Caddyfile sets no server_id")
	}
	if _, ok := env["SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL"]; ok {
		env["SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL"] = "http://127.0.0.1:9/jwks.json" // fails closed, never fetched outside
	}
	if redis {
		if _, ok := env["SUPERVAIZER_IDEMPOTENCY_REDIS_URL"]; !ok {
			t.Fatal("the Redis overlay's sidecar gets no SUPERVAIZER_IDEMPOTENCY_REDIS_URL")
		}
		env["SUPERVAIZER_IDEMPOTENCY_REDIS_URL"] = startRedis(t)
	}
	dir := t.TempDir()
	if rewrite != nil {
		caddyfile = rewrite(caddyfile, dir)
	}
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(caddyfile), 0o644); err != nil {
		t.Fatal(err)
	}
	env["XDG_DATA_HOME"] = filepath.Join(dir, "data")
	env["XDG_CONFIG_HOME"] = filepath.Join(dir, "config")
	bin := c.goBuild(t, "./cmd/supervaizer-sidecar")
	cmd := exec.Command(bin, "adapt", "--config", file, "--adapter", "caddyfile", "--validate")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the stored Caddyfile of ConfigMap %s does not validate: %v\n%s", cmName, err, out)
	}
	if !strings.Contains(string(out), `"supervaizer_auth"`) {
		t.Fatalf("the adapted config has no supervaizer_auth handler:\n%s", out)
	}
}

var crdOnce sync.Once

// installPrometheusCRDs applies PodMonitor and PrometheusRule's CRDs (from
// the prometheus-operator module, copied by setup.sh) and waits until they
// are served.
func (c *cluster) installPrometheusCRDs(t *testing.T) {
	t.Helper()
	crdOnce.Do(func() {
		for _, f := range []string{"monitoring.coreos.com_podmonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"} {
			c.must(t, nil, "kubectl", "apply", "--server-side", "--field-manager=test", "-f", filepath.Join(c.crds, f))
		}
		c.must(t, nil, "kubectl", "wait", "--for=condition=Established", "--timeout=60s",
			"crd/podmonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")
		// Discovery (kubectl's cache, the server's aggregated list) follows.
		eventually(t, 30*time.Second, "monitoring.coreos.com/v1 served", func() error {
			_, _, err := c.run(t, nil, "kubectl", "get", "podmonitors,prometheusrules", "-A")
			return err
		})
	})
}

// startRedis runs a throw-away redis-server on a loopback port, for the
// Redis overlay's Caddyfile to validate against.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not on PATH (make test-deps installs it): %v", err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	eventually(t, 20*time.Second, "redis-server answers PING", func() error {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(time.Second))
		if _, err := conn.Write([]byte("PING\r\n")); err != nil {
			return err
		}
		buf := make([]byte, 7)
		n, _ := conn.Read(buf)
		if string(buf[:n]) != "+PONG\r\n" {
			return fmt.Errorf("PING answered %q", buf[:n])
		}
		return nil
	})
	return "redis://" + addr + "/0"
}
