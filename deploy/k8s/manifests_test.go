// Package k8s_test checks the Kubernetes manifests of deploy/k8s, the
// root Dockerfile and Caddyfile.example: every kustomization is rendered
// in-process with the kustomize API (render_test.go) and every rendered
// object is decoded strictly into its Kubernetes API type; the deployment
// invariants of the sidecar pattern are asserted on the rendered output;
// every Caddyfile is adapted (and validated: the module is provisioned) by
// the sidecar binary built as the Dockerfile builds it.
//
//	go test -count=1 -timeout 20m ./deploy/...
package k8s_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// Names the manifests agree on.
const (
	sidecarName     = "supervaizer-sidecar"
	agentName       = "agent"
	sidecarPort     = 8080
	metricsPort     = 9180
	metricsPortName = "metrics"
	metricsPath     = "/metrics"
	caddyfileKey    = "Caddyfile"
	caddyfileDir    = "/etc/supervaizer"
	dataDir         = "/var/lib/supervaizer" // the sidecar's writable data directory
	redisURLEnv     = "SUPERVAIZER_IDEMPOTENCY_REDIS_URL"
	agentLoopback   = "127.0.0.1"
	agentLoopAddr   = "127.0.0.1:8000"
	// The NetworkPolicy's namespace for Prometheus (kubernetes.io/metadata.name).
	monitoringNamespace = "monitoring"
)

// Probe paths, answered by the sidecar itself (gate/ops.go). The
// Deployment sets them in one commented block of the sidecar container.
const (
	livePath  = "/_sidecar/live"  // liveness and startup
	readyPath = "/_sidecar/ready" // readiness: keys loaded, agent cards read
)

// rendered is one kustomization's output, with the objects the checks use.
type rendered struct {
	dir        string
	docs       []doc
	deploy     *appsv1.Deployment
	service    *corev1.Service
	netpol     *networkingv1.NetworkPolicy
	pdbs       []*policyv1.PodDisruptionBudget
	configMaps []*corev1.ConfigMap
	caddyCM    *corev1.ConfigMap // the ConfigMap mounted at /etc/supervaizer
	sidecar    *corev1.Container
	native     bool // sidecar in initContainers with restartPolicy Always
}

func newRendered(t *testing.T, dir string, docs []doc) *rendered {
	t.Helper()
	r := &rendered{dir: dir, docs: docs}
	r.deploy = only[*appsv1.Deployment](t, docs, dir+": Deployment")
	r.service = only[*corev1.Service](t, docs, dir+": Service")
	r.netpol = only[*networkingv1.NetworkPolicy](t, docs, dir+": NetworkPolicy")
	r.pdbs = all[*policyv1.PodDisruptionBudget](docs)
	r.configMaps = all[*corev1.ConfigMap](docs)
	r.sidecar, r.native = sidecarOf(t, &r.deploy.Spec.Template.Spec)
	r.caddyCM = caddyfileConfigMap(t, r.deploy, r.sidecar, r.configMaps)
	return r
}

// sidecarOf finds the sidecar container: an initContainer (native sidecar)
// or a regular container (clusters before 1.29), never both.
func sidecarOf(t *testing.T, spec *corev1.PodSpec) (*corev1.Container, bool) {
	t.Helper()
	ic, c := findContainer(spec.InitContainers, sidecarName), findContainer(spec.Containers, sidecarName)
	switch {
	case ic != nil && c != nil:
		t.Fatalf("%s is both an initContainer and a container", sidecarName)
	case ic != nil:
		return ic, true
	case c != nil:
		return c, false
	}
	t.Fatalf("no container %q", sidecarName)
	return nil, false
}

// secretExamples are the example Secrets (*.example.yaml) the pods'
// secretKeyRefs must agree with.
func secretExamples(t *testing.T) []*corev1.Secret {
	return all[*corev1.Secret](examples(t))
}

// baseCaddyfile is the Caddyfile the base renders.
func baseCaddyfile(t *testing.T) string {
	t.Helper()
	return newRendered(t, "base", render(t, "base")).caddyCM.Data[caddyfileKey]
}

// checkRendered asserts on one kustomization's output everything that must
// hold for every deployment of the sidecar, and what exp says this one is.
func checkRendered(t *testing.T, dir string, docs []doc, exp expect) {
	t.Helper()
	r := newRendered(t, dir, docs)
	d := r.deploy

	// Objects: named, unique per kind, no Secret and no Namespace (created
	// outside the kustomizations), every one labelled part-of supervaizer.
	seen := map[string]bool{}
	for _, o := range docs {
		m, ok := o.Obj.(metav1.Object)
		if !ok {
			t.Errorf("%s: not an object", o)
			continue
		}
		key := fmt.Sprintf("%T/%s", o.Obj, m.GetName())
		if m.GetName() == "" {
			t.Errorf("%s without a name", o)
		}
		if seen[key] {
			t.Errorf("%s rendered twice", key)
		}
		seen[key] = true
		switch o.Obj.(type) {
		case *corev1.Secret:
			t.Errorf("%s: a Secret is rendered; secrets must be created outside the kustomizations", o)
		case *corev1.Namespace:
			t.Errorf("%s: a Namespace is rendered; the namespace is yours (namespace.example.yaml)", o)
		}
		if m.GetLabels()["app.kubernetes.io/part-of"] != "supervaizer" {
			t.Errorf("%s: no app.kubernetes.io/part-of: supervaizer label", o)
		}
	}
	if m := all[*podMonitor](docs); (len(m) != 0) != exp.monitoring {
		t.Errorf("%d PodMonitor(s) rendered, want monitoring objects = %v", len(m), exp.monitoring)
	}
	if exp.monitoring {
		checkMonitoring(t, r)
	} else if len(all[*prometheusRule](docs)) != 0 {
		t.Errorf("PrometheusRule rendered outside the metrics overlay (it needs the Prometheus Operator's CRDs)")
	}

	// Deployment.
	podLabels := d.Spec.Template.Labels
	if !selects(d.Spec.Selector, podLabels) {
		t.Errorf("Deployment selector %v does not select its pod labels %v", d.Spec.Selector, podLabels)
	}
	if d.Spec.Replicas == nil {
		t.Fatalf("Deployment replicas unset")
	}
	replicas := *d.Spec.Replicas
	if replicas < exp.replicasMin || (exp.replicasMax > 0 && replicas > exp.replicasMax) {
		t.Errorf("replicas = %d, want %d..%d (0: no upper bound)", replicas, exp.replicasMin, exp.replicasMax)
	}
	if !exp.redis && replicas != 1 {
		t.Errorf("replicas = %d without a shared idempotency store: records live in one sidecar (2+ replicas: overlays/redis-idempotency)", replicas)
	}
	// Without a shared store, two pods must never serve at once: each would
	// have its own idempotency file (a rolling update starts the new pod
	// before the old one stops).
	if st := d.Spec.Strategy; !exp.redis && st.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %s without a shared idempotency store, want Recreate (old and new pod would each have their own store)", st.Type)
	}
	if r.native != exp.native {
		t.Errorf("native sidecar = %v, want %v", r.native, exp.native)
	}
	checkPod(t, r, secretExamples(t))

	// Service: the gate's port only (metrics are scraped by pod).
	svc := r.service
	if len(svc.Spec.Selector) == 0 || !selects(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, podLabels) {
		t.Errorf("Service selector %v does not match the pod labels %v", svc.Spec.Selector, podLabels)
	}
	if len(svc.Spec.Ports) != 1 {
		t.Errorf("Service exposes %d ports, want 1 (the sidecar's gate)", len(svc.Spec.Ports))
	}
	for _, p := range svc.Spec.Ports {
		target := p.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(p.Port)
		}
		if got := resolvePort(r.sidecar, target); got != sidecarPort {
			t.Errorf("Service port %d targets %s (= %d), not the gate port %d", p.Port, target.String(), got, sidecarPort)
		}
	}
	if svc.Spec.Type != "" && svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("Service type %s: expose the sidecar through an Ingress/Gateway that terminates TLS", svc.Spec.Type)
	}

	checkNetworkPolicy(t, r)
	checkPDB(t, r)

	// ServiceAccount, if any, mounts no token.
	for _, sa := range all[*corev1.ServiceAccount](docs) {
		if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
			t.Errorf("ServiceAccount %s: automountServiceAccountToken is not false", sa.Name)
		}
		if d.Spec.Template.Spec.ServiceAccountName != sa.Name {
			t.Errorf("ServiceAccount %s is not the pod's (%q)", sa.Name, d.Spec.Template.Spec.ServiceAccountName)
		}
	}

	// Caddyfile: the base's, plus the Redis block where Redis is used.
	cf := r.caddyCM.Data[caddyfileKey]
	if exp.redis {
		checkRedis(t, r)
	} else if dir != "base" && cf != baseCaddyfile(t) {
		t.Errorf("the Caddyfile differs from the base's: only overlays/redis-idempotency changes it")
	}
}

// checkNetworkPolicy: ingress is admitted to the gate's port from one
// documented selector (Studio's traffic source: the ingress controller or
// gateway), to the metrics port from the monitoring namespace only, and to
// nothing else.
func checkNetworkPolicy(t *testing.T, r *rendered) {
	t.Helper()
	np, sc := r.netpol, r.sidecar
	if !selects(&np.Spec.PodSelector, r.deploy.Spec.Template.Labels) {
		t.Errorf("NetworkPolicy podSelector %v does not select the pod", np.Spec.PodSelector)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Errorf("NetworkPolicy policyTypes %v lacks Ingress", np.Spec.PolicyTypes)
	}
	admitted := map[int32]int{}
	for i, rule := range np.Spec.Ingress {
		if len(rule.Ports) != 1 {
			t.Errorf("NetworkPolicy ingress rule %d has %d ports, want one port per rule (one source per port)", i, len(rule.Ports))
			continue
		}
		p := rule.Ports[0]
		port := int32(-1)
		if p.Port != nil {
			port = resolvePort(sc, *p.Port)
		}
		if p.EndPort != nil {
			t.Errorf("NetworkPolicy ingress rule %d: a port range", i)
		}
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			t.Errorf("NetworkPolicy ingress rule %d: protocol %s", i, *p.Protocol)
		}
		if len(rule.From) != 1 {
			t.Errorf("NetworkPolicy ingress rule %d (port %d): %d sources, want exactly one (none = every pod of the cluster)", i, port, len(rule.From))
			continue
		}
		from := rule.From[0]
		if from.IPBlock != nil {
			t.Errorf("NetworkPolicy ingress rule %d: an ipBlock; the shipped policy names its sources by label", i)
		}
		switch port {
		case sidecarPort:
			// Studio's calls arrive through the ingress controller/gateway:
			// pods matching podSelector in namespaces matching
			// namespaceSelector (one peer, both selectors).
			if from.NamespaceSelector == nil || len(from.NamespaceSelector.MatchLabels) == 0 ||
				from.PodSelector == nil || len(from.PodSelector.MatchLabels) == 0 {
				t.Errorf("NetworkPolicy: the gate port is admitted from %+v, want one peer with a namespaceSelector and a podSelector (the ingress controller's pods)", from)
			}
		case metricsPort:
			if from.PodSelector != nil || from.NamespaceSelector == nil ||
				!maps1(from.NamespaceSelector.MatchLabels, "kubernetes.io/metadata.name", monitoringNamespace) ||
				len(from.NamespaceSelector.MatchExpressions) != 0 {
				t.Errorf("NetworkPolicy: the metrics port is admitted from %+v, want the namespace %s only", from, monitoringNamespace)
			}
		default:
			t.Errorf("NetworkPolicy ingress rule %d admits port %v (= %d): only %d (gate) and %d (metrics)", i, p.Port, port, sidecarPort, metricsPort)
		}
		admitted[port]++
	}
	if admitted[sidecarPort] != 1 || admitted[metricsPort] != 1 {
		t.Errorf("NetworkPolicy admits the gate port in %d rule(s) and the metrics port in %d, want one each", admitted[sidecarPort], admitted[metricsPort])
	}
}

// maps1 reports whether m is exactly {k: v}.
func maps1(m map[string]string, k, v string) bool { return len(m) == 1 && m[k] == v }

// checkPDB: a PodDisruptionBudget is there exactly when it protects
// something. On one replica there is none (maxUnavailable 1 protects
// nothing, minAvailable 1 blocks every drain); on N >= 2 there is one that
// keeps at least one pod and lets at least one go: integer minAvailable or
// maxUnavailable in 1..N-1.
func checkPDB(t *testing.T, r *rendered) {
	t.Helper()
	replicas := *r.deploy.Spec.Replicas
	if replicas < 2 {
		if len(r.pdbs) != 0 {
			t.Errorf("%d PodDisruptionBudget(s) on %d replica: it protects nothing or blocks every drain; drop it", len(r.pdbs), replicas)
		}
		return
	}
	if len(r.pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets on %d replicas, want 1", len(r.pdbs), replicas)
	}
	pdb := r.pdbs[0]
	if !selects(pdb.Spec.Selector, r.deploy.Spec.Template.Labels) {
		t.Errorf("PodDisruptionBudget selector %v does not select the pod", pdb.Spec.Selector)
	}
	minA, maxU := pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable
	if (minA == nil) == (maxU == nil) {
		t.Fatalf("PodDisruptionBudget: set exactly one of minAvailable and maxUnavailable")
	}
	v := minA
	if v == nil {
		v = maxU
	}
	if v.Type != intstr.Int {
		t.Fatalf("PodDisruptionBudget %s: use an integer, checked against replicas %d", v.String(), replicas)
	}
	if v.IntVal < 1 || v.IntVal > replicas-1 {
		t.Errorf("PodDisruptionBudget %s = %d on %d replicas: want 1..%d (keep one pod serving, let a drain evict one)", map[bool]string{true: "minAvailable", false: "maxUnavailable"}[minA != nil], v.IntVal, replicas, replicas-1)
	}
}

// checkRedis: the sidecar gets the Redis URL from a Secret, no Redis is
// shipped, and the Caddyfile is the base's plus a Redis idempotency block
// and the limits block's Redis store, nothing else.
func checkRedis(t *testing.T, r *rendered) {
	t.Helper()
	if env := envOf(t, r.sidecar, r.configMaps); !strings.HasPrefix(env[redisURLEnv], "secret:") {
		t.Errorf("sidecar %s does not come from a Secret (got %q)", redisURLEnv, env[redisURLEnv])
	}
	spec := r.deploy.Spec.Template.Spec
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if strings.Contains(strings.ToLower(c.Image), "redis") {
			t.Errorf("container %q runs Redis: use an existing Redis", c.Name)
		}
	}
	// The overlay replaces the base's file store line by the Redis lines.
	base := strings.Replace(baseCaddyfile(t), "\t\t\tstore file "+baseStoreFile+"\n", "", 1)
	extra := extraLines(t, base, r.caddyCM.Data[caddyfileKey])
	want := []string{"store redis", "redis_url {$" + redisURLEnv + "}", "store redis {$" + redisURLEnv + "}"}
	if !slices.Equal(extra, want) {
		t.Errorf("Caddyfile adds %q to the base's, want exactly %q (plus comments)", extra, want)
	}
}

// TestBaseCaddyfile adapts and validates (provisions the module) the
// rendered base's Caddyfile with the built binary, with the JWKS down.
func TestBaseCaddyfile(t *testing.T) {
	file := writeTemp(t, "Caddyfile", baseCaddyfile(t))
	checkFormatted(t, file)
	cfg, err := adapt(t, file, true, adaptEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	checkAdaptedGate(t, "base Caddyfile", cfg)
	checkMetricsServer(t, "base Caddyfile", cfg)
	if n := checkAccessLogFilters(t, "base Caddyfile", cfg); n == 0 {
		t.Errorf("base Caddyfile: no access log (the deployment keeps one, with the credential filter)")
	}
	if jpath(cfg, "admin", "config", "persist") != false {
		t.Errorf("base Caddyfile: persist_config is not off (the adapted config would be written to disk)")
	}
	for _, h := range handlers(cfg) {
		if h["handler"] == "supervaizer_auth" && (jpath(h, "idempotency", "store") != "file" || jpath(h, "idempotency", "file_path") != baseStoreFile) {
			t.Errorf("base: the idempotency store is not the file %s on the data volume: %s", baseStoreFile, mustJSON(t, h["idempotency"]))
		}
	}
}

// baseStoreFile is the base's idempotency file store, on the emptyDir
// mounted at /var/lib/supervaizer (survives container restarts;
// docs/idempotency.md).
const baseStoreFile = "/var/lib/supervaizer/idempotency.db"

// TestRedisOverlayCaddyfile adapts the rendered Redis overlay's Caddyfile
// with the built binary and validates it against a real Redis.
func TestRedisOverlayCaddyfile(t *testing.T) {
	const dir = "overlays/redis-idempotency"
	r := newRendered(t, dir, render(t, dir))
	file := writeTemp(t, "Caddyfile", r.caddyCM.Data[caddyfileKey])
	checkFormatted(t, file)
	cfg, err := adapt(t, file, true, adaptEnv(t, redisURLEnv+"="+startRedis(t)))
	if err != nil {
		t.Fatal(err)
	}
	checkAdaptedGate(t, "overlay Caddyfile", cfg)
	checkMetricsServer(t, "overlay Caddyfile", cfg)
	checkAccessLogFilters(t, "overlay Caddyfile", cfg)
	for _, h := range handlers(cfg) {
		if h["handler"] == "supervaizer_auth" && jpath(h, "idempotency", "store") != "redis" {
			j, _ := json.Marshal(h)
			t.Errorf("overlay: adapted supervaizer_auth has no Redis store: %s", j)
		}
	}
}

func findContainer(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

// envOf resolves a container's environment: envFrom ConfigMaps, then env.
// Values from a Secret are reported as "secret:<name>/<key>".
func envOf(t *testing.T, c *corev1.Container, cms []*corev1.ConfigMap) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			cm := configMapNamed(cms, ef.ConfigMapRef.Name)
			if cm == nil {
				t.Errorf("container %s: envFrom ConfigMap %q is not in the manifests", c.Name, ef.ConfigMapRef.Name)
				continue
			}
			for k, v := range cm.Data {
				env[ef.Prefix+k] = v
			}
		default:
			t.Errorf("container %s: envFrom other than a ConfigMap; take secrets one by one with secretKeyRef", c.Name)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		case e.ValueFrom.ConfigMapKeyRef != nil:
			cm := configMapNamed(cms, e.ValueFrom.ConfigMapKeyRef.Name)
			if cm == nil {
				t.Errorf("container %s: env %s: ConfigMap %q is not in the manifests", c.Name, e.Name, e.ValueFrom.ConfigMapKeyRef.Name)
				continue
			}
			env[e.Name] = cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]
		default:
			env[e.Name] = "fieldref"
		}
	}
	return env
}

func configMapNamed(cms []*corev1.ConfigMap, name string) *corev1.ConfigMap {
	for _, cm := range cms {
		if cm.Name == name {
			return cm
		}
	}
	return nil
}

// sensitive reports whether an environment variable or data key holds a
// secret: API keys, private keys, PEM material, passwords, Redis URLs
// (which carry the password).
var sensitive = regexp.MustCompile(`(?i)(_API_KEY$|_PRIVATE_KEY$|_PUBLIC_KEY$|PEM|PASSWORD|TOKEN|REDIS_URL$|^api-key$|^private-key$)`)

// caddyfileConfigMap finds the ConfigMap the sidecar mounts read-only at
// /etc/supervaizer, which must hold the Caddyfile.
func caddyfileConfigMap(t *testing.T, d *appsv1.Deployment, sc *corev1.Container, cms []*corev1.ConfigMap) *corev1.ConfigMap {
	t.Helper()
	spec := d.Spec.Template.Spec
	for _, m := range sc.VolumeMounts {
		if m.MountPath != caddyfileDir {
			continue
		}
		if !m.ReadOnly {
			t.Errorf("the Caddyfile volume is not mounted readOnly")
		}
		if m.SubPath != "" {
			t.Errorf("the Caddyfile volume uses subPath: ConfigMap updates would never reach the pod")
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cm := configMapNamed(cms, v.ConfigMap.Name)
				if cm == nil {
					t.Fatalf("the Caddyfile ConfigMap %q is not in the manifests", v.ConfigMap.Name)
				}
				if _, ok := cm.Data[caddyfileKey]; !ok {
					t.Fatalf("ConfigMap %q has no %s key", cm.Name, caddyfileKey)
				}
				return cm
			}
		}
	}
	t.Fatalf("the sidecar mounts no ConfigMap at %s", caddyfileDir)
	return nil
}

// resolvePort turns a probe/Service port (number or name) into the
// sidecar's container port number.
func resolvePort(c *corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return -1
}

// checkPod asserts the invariants of the sidecar pattern on a rendered
// Deployment. secretExamples are the example Secrets the references must
// agree with.
func checkPod(t *testing.T, r *rendered, secretExamples []*corev1.Secret) {
	t.Helper()
	d, cms, sc := r.deploy, r.configMaps, r.sidecar
	spec := d.Spec.Template.Spec

	// The sidecar: a native sidecar (initContainer, restartPolicy Always)
	// or, before 1.29, a plain second container; the agent is the only
	// other container, and there is no other initContainer.
	wantContainers, wantInit := []string{agentName}, []string{sidecarName}
	if r.native {
		if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			t.Errorf("initContainer %s: restartPolicy must be Always (native sidecar, Kubernetes >= 1.29)", sidecarName)
		}
	} else {
		if sc.RestartPolicy != nil {
			t.Errorf("container %s: restartPolicy %s is for native sidecars (initContainers, Kubernetes >= 1.29) only", sidecarName, *sc.RestartPolicy)
		}
		wantContainers, wantInit = []string{agentName, sidecarName}, nil
	}
	names := func(cs []corev1.Container) (out []string) {
		for _, c := range cs {
			out = append(out, c.Name)
		}
		slices.Sort(out)
		return out
	}
	if got := names(spec.Containers); !slices.Equal(got, wantContainers) {
		t.Errorf("containers %q, want %q", got, wantContainers)
	}
	if got := names(spec.InitContainers); !slices.Equal(got, wantInit) {
		t.Errorf("initContainers %q, want %q", got, wantInit)
	}
	// What the container runs: Kubernetes command replaces the image's
	// ENTRYPOINT (and drops its CMD), args replace CMD.
	argv := containerArgv(t, sc)
	if want := []string{dockerBinPath(t), "run", "--config", caddyfileDir + "/" + caddyfileKey, "--adapter", "caddyfile"}; !slices.Equal(argv, want) {
		t.Errorf("sidecar runs %q (command/args over the image's ENTRYPOINT/CMD), want %q", argv, want)
	}
	// Ports: the gate and the metrics site, by name; no hostPort.
	if len(sc.Ports) != 2 || portNamed(sc, "http") != sidecarPort || portNamed(sc, metricsPortName) != metricsPort {
		t.Errorf("sidecar ports = %v, want exactly http %d and %s %d", sc.Ports, sidecarPort, metricsPortName, metricsPort)
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				t.Errorf("container %s: hostPort %d (Pod Security restricted forbids it)", c.Name, p.HostPort)
			}
		}
	}
	// Volumes a restricted namespace admits (no hostPath); the sidecar's
	// data directory is writable and survives container restarts.
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %s is a hostPath (Pod Security restricted forbids it)", v.Name)
		}
	}
	if m := mountAt(sc, dataDir); m == nil || m.ReadOnly || m.SubPath != "" {
		t.Errorf("sidecar: no writable mount at %s (the sidecar's data directory)", dataDir)
	} else if v := volumeNamed(&spec, m.Name); v == nil || (v.EmptyDir == nil && v.PersistentVolumeClaim == nil) {
		t.Errorf("sidecar: %s is not on an emptyDir or a PersistentVolumeClaim", dataDir)
	}

	// Probes: HTTP GET on the sidecar port, on the sidecar's own paths.
	// A startupProbe must not need the agent: with a native sidecar the
	// agent only starts once it passes.
	for _, pr := range []struct {
		name, path string
		p          *corev1.Probe
		optional   bool
	}{
		{"liveness", livePath, sc.LivenessProbe, false},
		{"readiness", readyPath, sc.ReadinessProbe, false},
		{"startup", livePath, sc.StartupProbe, true},
	} {
		switch {
		case pr.p == nil:
			if !pr.optional {
				t.Errorf("sidecar has no %s probe", pr.name)
			}
		case pr.p.HTTPGet == nil:
			t.Errorf("sidecar %s probe is not an HTTP GET", pr.name)
		case pr.p.HTTPGet.Path != pr.path:
			t.Errorf("sidecar %s probe path %q, want %q", pr.name, pr.p.HTTPGet.Path, pr.path)
		case resolvePort(sc, pr.p.HTTPGet.Port) != sidecarPort:
			t.Errorf("sidecar %s probe port %v is not the sidecar port %d", pr.name, pr.p.HTTPGet.Port.String(), sidecarPort)
		}
	}

	// The agent: loopback only, no pod port.
	agent := findContainer(spec.Containers, agentName)
	if agent == nil {
		t.Fatalf("no container %q (the agent)", agentName)
	}
	if len(agent.Ports) != 0 {
		t.Errorf("agent declares ports %v: it listens on loopback only and is reached through the sidecar", agent.Ports)
	}
	agentEnv := envOf(t, agent, cms)
	var binding []string
	for _, e := range agent.Env {
		if strings.Contains(e.Value, agentLoopback) {
			binding = append(binding, e.Name+"="+e.Value)
		}
		if strings.Contains(e.Value, "0.0.0.0") {
			t.Errorf("agent env %s=%s binds all interfaces", e.Name, e.Value)
		}
	}
	for _, a := range append(slices.Clone(agent.Command), agent.Args...) {
		if strings.Contains(a, agentLoopback) {
			binding = append(binding, a)
		}
		if strings.Contains(a, "0.0.0.0") {
			t.Errorf("agent argument %q binds all interfaces", a)
		}
	}
	if len(binding) == 0 {
		t.Errorf("agent env/args never name %s: it would listen on the SDK default 0.0.0.0", agentLoopback)
	}
	if h, p := agentEnv["SUPERVAIZER_HOST"], agentEnv["SUPERVAIZER_PORT"]; h+":"+p != agentLoopAddr {
		t.Errorf("agent SUPERVAIZER_HOST:SUPERVAIZER_PORT = %s:%s, want %s (the Caddyfile's reverse_proxy upstream)", h, p, agentLoopAddr)
	}

	// Settings the sidecar needs (grants are bound to the server id).
	scEnv := envOf(t, sc, cms)
	for _, k := range []string{"SUPERVAIZER_SERVER_ID", "SUPERVAIZER_WORKSPACE_AUTH_ISSUER"} {
		if scEnv[k] == "" {
			t.Errorf("sidecar: %s is not set", k)
		}
	}
	if scEnv["SUPERVAIZER_WORKSPACE_AUTH_REQUIRED"] != "true" {
		t.Errorf("sidecar: SUPERVAIZER_WORKSPACE_AUTH_REQUIRED = %q, want true", scEnv["SUPERVAIZER_WORKSPACE_AUTH_REQUIRED"])
	}
	if (scEnv["SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL"] == "") == (scEnv["SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY"] == "") {
		t.Errorf("sidecar: set exactly one of SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL and _PUBLIC_KEY")
	}
	if u := scEnv["SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL"]; u != "" && !strings.HasPrefix(u, "https://") {
		t.Errorf("sidecar: JWKS URL %q is not https", u)
	}
	if v := scEnv["SUPERVAIZER_LOCAL_MODE"]; v != "" && v != "false" {
		t.Errorf("sidecar: SUPERVAIZER_LOCAL_MODE=%s in a deployment", v)
	}
	if v := agentEnv["SUPERVAIZER_LOCAL_MODE"]; v != "" && v != "false" {
		t.Errorf("agent: SUPERVAIZER_LOCAL_MODE=%s in a deployment", v)
	}
	if !strings.HasPrefix(scEnv["SUPERVAIZER_API_KEY"], "secret:") {
		t.Errorf("sidecar: SUPERVAIZER_API_KEY does not come from a Secret")
	}
	// The agent checks X-API-Key and the grants too: same key, same server id.
	for _, k := range []string{"SUPERVAIZER_API_KEY", "SUPERVAIZER_SERVER_ID", "SUPERVAIZER_WORKSPACE_AUTH_ISSUER"} {
		if agentEnv[k] != scEnv[k] {
			t.Errorf("%s differs between agent (%q) and sidecar (%q)", k, agentEnv[k], scEnv[k])
		}
	}

	// Caddy's data/config dirs on a writable emptyDir.
	for _, k := range []string{"XDG_DATA_HOME", "XDG_CONFIG_HOME"} {
		dir := scEnv[k]
		if dir == "" {
			t.Errorf("sidecar: %s not set (the root filesystem is read-only)", k)
			continue
		}
		ok := false
		for _, m := range sc.VolumeMounts {
			if (dir == m.MountPath || strings.HasPrefix(dir, strings.TrimSuffix(m.MountPath, "/")+"/")) && !m.ReadOnly {
				for _, v := range spec.Volumes {
					if v.Name == m.Name && v.EmptyDir != nil {
						ok = true
					}
				}
			}
		}
		if !ok {
			t.Errorf("sidecar: %s=%s is not on a writable emptyDir mount", k, dir)
		}
	}

	// Secrets never inlined; every Secret reference exists in an example.
	podSC := spec.SecurityContext
	if podSC == nil || podSC.RunAsNonRoot == nil || !*podSC.RunAsNonRoot {
		t.Errorf("pod securityContext.runAsNonRoot is not true")
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("pod mounts a service account token it does not need")
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("pod shares a host namespace")
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, e := range c.Env {
			if strings.Contains(e.Value, "-----BEGIN") {
				t.Errorf("container %s: env %s inlines PEM material", c.Name, e.Name)
			}
			if !sensitive.MatchString(e.Name) {
				continue
			}
			if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Errorf("container %s: env %s must come from a Secret (secretKeyRef), not a value", c.Name, e.Name)
				continue
			}
			ref := e.ValueFrom.SecretKeyRef
			if !secretExampleHas(secretExamples, ref.Name, ref.Key) {
				t.Errorf("container %s: env %s refers to Secret %s key %s, absent from the *.example.yaml Secrets", c.Name, e.Name, ref.Name, ref.Key)
			}
		}
		checkContainer(t, &c, podSC)
	}
	for _, cm := range cms {
		for k, v := range cm.Data {
			if k != caddyfileKey && sensitive.MatchString(k) {
				t.Errorf("ConfigMap %s: key %s looks secret; use a Secret", cm.Name, k)
			}
			if strings.Contains(v, "-----BEGIN") {
				t.Errorf("ConfigMap %s: key %s inlines PEM material", cm.Name, k)
			}
		}
		if cf, ok := cm.Data[caddyfileKey]; ok && regexp.MustCompile(`(?m)^\s*api_key\s`).MatchString(cf) {
			t.Errorf("ConfigMap %s: the Caddyfile sets api_key; leave it to $SUPERVAIZER_API_KEY from the Secret", cm.Name)
		}
	}
}

func secretExampleHas(examples []*corev1.Secret, name, key string) bool {
	for _, s := range examples {
		if s.Name != name {
			continue
		}
		if _, ok := s.StringData[key]; ok {
			return true
		}
		if _, ok := s.Data[key]; ok {
			return true
		}
	}
	return false
}

// checkContainer asserts resources and the hardened securityContext
// (fields a container may inherit from the pod are accepted from there).
func checkContainer(t *testing.T, c *corev1.Container, pod *corev1.PodSecurityContext) {
	t.Helper()
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
			t.Errorf("container %s: no %s request", c.Name, r)
		}
		if q, ok := c.Resources.Limits[r]; !ok || q.IsZero() {
			t.Errorf("container %s: no %s limit", c.Name, r)
		}
	}
	sc := c.SecurityContext
	if sc == nil {
		t.Errorf("container %s: no securityContext", c.Name)
		return
	}
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	nonRoot := sc.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = pod.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		t.Errorf("container %s: runAsNonRoot is not true", c.Name)
	}
	uid := sc.RunAsUser
	if uid == nil {
		uid = pod.RunAsUser
	}
	if uid == nil || *uid == 0 {
		t.Errorf("container %s: no non-root runAsUser", c.Name)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container %s: readOnlyRootFilesystem is not true", c.Name)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container %s: allowPrivilegeEscalation is not false", c.Name)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("container %s: privileged", c.Name)
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) != 0 {
		t.Errorf("container %s: capabilities must drop ALL and add none", c.Name)
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil {
		seccomp = pod.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container %s: seccompProfile is not RuntimeDefault", c.Name)
	}
}

func selects(sel *metav1.LabelSelector, labels map[string]string) bool {
	if sel == nil || len(sel.MatchExpressions) != 0 || len(sel.MatchLabels) == 0 {
		return false
	}
	for k, v := range sel.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// extraLines checks that every line of base appears, in order, in overlay,
// and returns the overlay's other non-comment lines, trimmed.
func extraLines(t *testing.T, base, overlay string) []string {
	t.Helper()
	bl := strings.Split(base, "\n")
	var extra []string
	i := 0
	for _, l := range strings.Split(overlay, "\n") {
		if i < len(bl) && l == bl[i] {
			i++
			continue
		}
		tl := strings.TrimSpace(l)
		if tl != "" && !strings.HasPrefix(tl, "#") {
			extra = append(extra, tl)
		}
	}
	if i != len(bl) {
		t.Errorf("overlay Caddyfile drifted from the base: base line %d %q is missing", i+1, bl[i])
	}
	return extra
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(j)
}

// startRedis runs a throw-away redis-server on loopback (test/redistest)
// and returns its URL.
func startRedis(t *testing.T) string {
	t.Helper()
	return redistest.Start(t).URL()
}

// mountAt is the container's volume mount at path, or nil.
func mountAt(c *corev1.Container, path string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == path {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

// volumeNamed is the pod's volume with that name, or nil.
func volumeNamed(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}
