// Package k8s_test checks the Kubernetes manifests of deploy/k8s, the
// root Dockerfile and Caddyfile.example: every YAML document is decoded
// strictly into the Kubernetes API types, the deployment invariants of the
// sidecar pattern are asserted, and every Caddyfile is adapted (and
// validated: the module is provisioned) by the sidecar binary built as the
// Dockerfile builds it. kustomize is not needed: the overlay's two
// strategic-merge patches are applied by a small merge below that handles
// exactly the fields they use.
//
//	go test -count=1 -timeout 20m ./deploy/...
package k8s_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// Names the manifests agree on.
const (
	sidecarName   = "supervaizer-sidecar"
	agentName     = "agent"
	sidecarPort   = 8080
	caddyfileKey  = "Caddyfile"
	caddyfileDir  = "/etc/supervaizer"
	overlayRedis  = "overlays/redis-idempotency"
	kustomizeFile = "kustomization.yaml"
	exampleSuffix = ".example.yaml"
	redisURLEnv   = "SUPERVAIZER_IDEMPOTENCY_REDIS_URL"
	agentLoopback = "127.0.0.1"
	agentLoopAddr = "127.0.0.1:8000"
)

// Probe paths, answered by the sidecar itself (caddymodule/ops.go). The
// Deployment sets them in one commented block of the sidecar container.
const (
	livePath  = "/_sidecar/live"  // liveness and startup
	readyPath = "/_sidecar/ready" // readiness: keys loaded, agent cards read
)

// kustomization is the subset of kustomize.config.k8s.io/v1beta1
// Kustomization these manifests use; decoding is strict, so a new field
// must be added here (and checked) before it is used.
type kustomization struct {
	metav1.TypeMeta `json:",inline"`
	Resources       []string `json:"resources,omitempty"`
	Patches         []struct {
		Path string `json:"path"`
	} `json:"patches,omitempty"`
}

// doc is one decoded YAML document.
type doc struct {
	File string // relative to deploy/k8s
	Obj  any    // pointer to the typed object
}

func (d doc) String() string { return d.File }

// k8sDir is deploy/k8s (the test's working directory).
func k8sDir(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// loadAll reads every *.yaml / *.yml under deploy/k8s, splits multi-document
// files and decodes each document strictly into its Kubernetes type.
func loadAll(t *testing.T) []doc {
	t.Helper()
	root := k8sDir(t)
	var docs []doc
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || (!strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".yml")) {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n := 0
		for i, part := range docSep.Split(string(src), -1) {
			if onlyComments(part) {
				continue
			}
			obj, err := decodeStrict([]byte(part))
			if err != nil {
				return fmt.Errorf("%s (document %d): %v", rel, i+1, err)
			}
			docs = append(docs, doc{File: filepath.ToSlash(rel), Obj: obj})
			n++
		}
		if n == 0 {
			return fmt.Errorf("%s: no document", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no manifest found")
	}
	return docs
}

func onlyComments(s string) bool {
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// decodeStrict converts YAML to JSON and decodes it into the type named by
// apiVersion/kind, refusing unknown fields and trailing data.
func decodeStrict(y []byte) (any, error) {
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		return nil, err
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(j, &tm); err != nil {
		return nil, err
	}
	var obj any
	switch tm.APIVersion + "/" + tm.Kind {
	case "apps/v1/Deployment":
		obj = &appsv1.Deployment{}
	case "v1/Service":
		obj = &corev1.Service{}
	case "v1/ConfigMap":
		obj = &corev1.ConfigMap{}
	case "v1/Secret":
		obj = &corev1.Secret{}
	case "v1/ServiceAccount":
		obj = &corev1.ServiceAccount{}
	case "networking.k8s.io/v1/NetworkPolicy":
		obj = &networkingv1.NetworkPolicy{}
	case "policy/v1/PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "kustomize.config.k8s.io/v1beta1/Kustomization":
		obj = &kustomization{}
	default:
		return nil, fmt.Errorf("unexpected apiVersion/kind %q/%q", tm.APIVersion, tm.Kind)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return nil, fmt.Errorf("%s: %v", tm.Kind, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: trailing data after the object", tm.Kind)
	}
	return obj, nil
}

// inDir returns the documents of files directly in dir (relative, "." for
// deploy/k8s itself).
func inDir(docs []doc, dir string) []doc {
	var out []doc
	for _, d := range docs {
		if filepath.ToSlash(filepath.Dir(d.File)) == dir {
			out = append(out, d)
		}
	}
	return out
}

func only[T any](t *testing.T, docs []doc, what string) (T, string) {
	t.Helper()
	var found []doc
	for _, d := range docs {
		if _, ok := d.Obj.(T); ok {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want exactly one %s, found %d: %v", what, len(found), found)
		return zero, ""
	}
	return found[0].Obj.(T), found[0].File
}

func all[T any](docs []doc) []T {
	var out []T
	for _, d := range docs {
		if o, ok := d.Obj.(T); ok {
			out = append(out, o)
		}
	}
	return out
}

// base is the rendered base: the documents of the files its kustomization
// lists.
type base struct {
	docs       []doc
	deploy     *appsv1.Deployment
	service    *corev1.Service
	netpol     *networkingv1.NetworkPolicy
	pdb        *policyv1.PodDisruptionBudget
	configMaps []*corev1.ConfigMap
	caddyCM    *corev1.ConfigMap // the ConfigMap mounted at /etc/supervaizer
	examples   []*corev1.Secret  // secret.example.yaml (not rendered)
}

func loadBase(t *testing.T, docs []doc) *base {
	t.Helper()
	k, _ := only[*kustomization](t, inDir(docs, "."), "base kustomization")
	b := &base{}
	for _, d := range inDir(docs, ".") {
		if slices.Contains(k.Resources, d.File) {
			b.docs = append(b.docs, d)
		}
		if strings.HasSuffix(d.File, exampleSuffix) {
			if s, ok := d.Obj.(*corev1.Secret); ok {
				b.examples = append(b.examples, s)
			}
		}
	}
	b.deploy, _ = only[*appsv1.Deployment](t, b.docs, "Deployment")
	b.service, _ = only[*corev1.Service](t, b.docs, "Service")
	b.netpol, _ = only[*networkingv1.NetworkPolicy](t, b.docs, "NetworkPolicy")
	b.pdb, _ = only[*policyv1.PodDisruptionBudget](t, b.docs, "PodDisruptionBudget")
	b.configMaps = all[*corev1.ConfigMap](b.docs)
	b.caddyCM = caddyfileConfigMap(t, b.deploy, b.configMaps)
	return b
}

// yamlFiles lists the *.yaml files directly in dir (relative names).
func yamlFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && (strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// TestKustomizations checks that the base lists exactly the manifest files
// present (the *.example.yaml secrets excluded: no secret value is rendered),
// and the overlay builds on the base and lists exactly its patch files.
func TestKustomizations(t *testing.T) {
	docs := loadAll(t)
	dir := k8sDir(t)

	k, _ := only[*kustomization](t, inDir(docs, "."), "base kustomization")
	var want []string
	for _, f := range yamlFiles(t, dir) {
		if f != kustomizeFile && !strings.HasSuffix(f, exampleSuffix) {
			want = append(want, f)
		}
	}
	got := slices.Clone(k.Resources)
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("base kustomization resources = %q, want exactly the manifest files %q", got, want)
	}
	if !slices.Contains(yamlFiles(t, dir), "secret.example.yaml") {
		t.Errorf("secret.example.yaml is missing")
	}
	if len(k.Patches) != 0 {
		t.Errorf("the base has patches %v: keep the base plain", k.Patches)
	}
	for _, d := range inDir(docs, ".") {
		if _, ok := d.Obj.(*corev1.Secret); ok && slices.Contains(k.Resources, d.File) {
			t.Errorf("%s: a Secret is rendered by the base; secrets must be created outside it", d.File)
		}
	}

	ok, _ := only[*kustomization](t, inDir(docs, overlayRedis), "overlay kustomization")
	if !slices.Equal(ok.Resources, []string{"../.."}) {
		t.Errorf("overlay resources = %q, want [../..] (the base, and no Redis)", ok.Resources)
	}
	var patches []string
	for _, p := range ok.Patches {
		patches = append(patches, p.Path)
	}
	sort.Strings(patches)
	var wantPatches []string
	for _, f := range yamlFiles(t, filepath.Join(dir, overlayRedis)) {
		if f != kustomizeFile && !strings.HasSuffix(f, exampleSuffix) {
			wantPatches = append(wantPatches, f)
		}
	}
	if !slices.Equal(patches, wantPatches) {
		t.Errorf("overlay patches = %q, want exactly the patch files %q", patches, wantPatches)
	}
}

// TestManifestsStrict loads every document (the decoding is the test) and
// checks the names are not duplicated per kind.
func TestManifestsStrict(t *testing.T) {
	docs := loadAll(t)
	seen := map[string]string{}
	for _, d := range inDir(docs, ".") {
		m, ok := d.Obj.(metav1.Object)
		if !ok {
			continue
		}
		key := fmt.Sprintf("%T/%s", d.Obj, m.GetName())
		if m.GetName() == "" {
			t.Errorf("%s: %T without a name", d.File, d.Obj)
		}
		if prev, dup := seen[key]; dup {
			t.Errorf("%s and %s both define %s", prev, d.File, key)
		}
		seen[key] = d.File
	}
}

// --- pod checks, shared by the base and the patched overlay ---

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
func caddyfileConfigMap(t *testing.T, d *appsv1.Deployment, cms []*corev1.ConfigMap) *corev1.ConfigMap {
	t.Helper()
	spec := d.Spec.Template.Spec
	sc := findContainer(spec.InitContainers, sidecarName)
	if sc == nil {
		t.Fatalf("no initContainer %q", sidecarName)
	}
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

// checkPod asserts the invariants of the sidecar pattern on a Deployment.
// secretExamples are the example Secrets the references must agree with.
func checkPod(t *testing.T, d *appsv1.Deployment, cms []*corev1.ConfigMap, secretExamples []*corev1.Secret) {
	t.Helper()
	spec := d.Spec.Template.Spec

	// The sidecar: a native sidecar, running the mounted Caddyfile.
	sc := findContainer(spec.InitContainers, sidecarName)
	if sc == nil {
		t.Fatalf("no initContainer %q (native sidecar)", sidecarName)
	}
	if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("initContainer %s: restartPolicy must be Always (native sidecar, Kubernetes >= 1.29)", sidecarName)
	}
	if findContainer(spec.Containers, sidecarName) != nil {
		t.Errorf("%s is both an initContainer and a container", sidecarName)
	}
	// What the container runs: Kubernetes command replaces the image's
	// ENTRYPOINT (and drops its CMD), args replace CMD.
	argv := containerArgv(t, sc)
	if want := []string{dockerBinPath(t), "run", "--config", caddyfileDir + "/" + caddyfileKey, "--adapter", "caddyfile"}; !slices.Equal(argv, want) {
		t.Errorf("sidecar runs %q (command/args over the image's ENTRYPOINT/CMD), want %q", argv, want)
	}
	if len(sc.Ports) != 1 || sc.Ports[0].ContainerPort != sidecarPort {
		t.Errorf("sidecar ports = %v, want exactly %d", sc.Ports, sidecarPort)
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
	if len(spec.Containers) != 1 || spec.Containers[0].Name != agentName {
		t.Fatalf("want exactly one container %q (the agent), got %d", agentName, len(spec.Containers))
	}
	agent := &spec.Containers[0]
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

// TestBase checks the base: the pod invariants, a Service and a
// NetworkPolicy that expose the sidecar port only, and a PodDisruptionBudget
// that does not block drains.
func TestBase(t *testing.T) {
	b := loadBase(t, loadAll(t))
	d := b.deploy
	podLabels := d.Spec.Template.Labels
	if !selects(d.Spec.Selector, podLabels) {
		t.Errorf("Deployment selector %v does not select its pod labels %v", d.Spec.Selector, podLabels)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("base replicas must be 1: idempotency records live in one sidecar's memory (2+ replicas: overlays/redis-idempotency)")
	}
	checkPod(t, d, b.configMaps, b.examples)
	sc := findContainer(d.Spec.Template.Spec.InitContainers, sidecarName)

	// Service: the sidecar port only.
	svc := b.service
	for k, v := range svc.Spec.Selector {
		if podLabels[k] != v {
			t.Errorf("Service selector %v does not match the pod labels %v", svc.Spec.Selector, podLabels)
			break
		}
	}
	if len(svc.Spec.Selector) == 0 {
		t.Errorf("Service has no selector")
	}
	if len(svc.Spec.Ports) != 1 {
		t.Errorf("Service exposes %d ports, want 1 (the sidecar)", len(svc.Spec.Ports))
	}
	for _, p := range svc.Spec.Ports {
		target := p.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(p.Port)
		}
		if got := resolvePort(sc, target); got != sidecarPort {
			t.Errorf("Service port %d targets %s (= %d), not the sidecar port %d", p.Port, target.String(), got, sidecarPort)
		}
	}
	if svc.Spec.Type != "" && svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("Service type %s: expose the sidecar through an Ingress/Gateway that terminates TLS", svc.Spec.Type)
	}

	// NetworkPolicy: ingress to the sidecar port only.
	np := b.netpol
	if !selects(&np.Spec.PodSelector, podLabels) {
		t.Errorf("NetworkPolicy podSelector %v does not select the pod", np.Spec.PodSelector)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Errorf("NetworkPolicy policyTypes %v lacks Ingress", np.Spec.PolicyTypes)
	}
	if len(np.Spec.Ingress) == 0 {
		t.Errorf("NetworkPolicy has no ingress rule: nothing could reach the sidecar")
	}
	for i, r := range np.Spec.Ingress {
		if len(r.Ports) == 0 {
			t.Errorf("NetworkPolicy ingress rule %d allows every port", i)
		}
		for _, p := range r.Ports {
			if p.Port == nil || resolvePort(sc, *p.Port) != sidecarPort || p.EndPort != nil {
				t.Errorf("NetworkPolicy ingress rule %d allows port %v, want only %d", i, p.Port, sidecarPort)
			}
			if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
				t.Errorf("NetworkPolicy ingress rule %d: protocol %s", i, *p.Protocol)
			}
		}
	}

	// PodDisruptionBudget.
	pdb := b.pdb
	if !selects(pdb.Spec.Selector, podLabels) {
		t.Errorf("PodDisruptionBudget selector %v does not select the pod", pdb.Spec.Selector)
	}
	if (pdb.Spec.MinAvailable == nil) == (pdb.Spec.MaxUnavailable == nil) {
		t.Errorf("PodDisruptionBudget: set exactly one of minAvailable and maxUnavailable")
	}
	if m := pdb.Spec.MinAvailable; m != nil && m.Type == intstr.Int && m.IntVal >= *d.Spec.Replicas {
		t.Errorf("PodDisruptionBudget minAvailable %d >= replicas %d: node drains would block", m.IntVal, *d.Spec.Replicas)
	}
	if m := pdb.Spec.MaxUnavailable; m != nil && m.Type == intstr.Int && m.IntVal < 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %d: node drains would block", m.IntVal)
	}

	// ServiceAccount, if any, mounts no token.
	for _, sa := range all[*corev1.ServiceAccount](b.docs) {
		if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
			t.Errorf("ServiceAccount %s: automountServiceAccountToken is not false", sa.Name)
		}
		if d.Spec.Template.Spec.ServiceAccountName != sa.Name {
			t.Errorf("ServiceAccount %s is not the pod's (%q)", sa.Name, d.Spec.Template.Spec.ServiceAccountName)
		}
	}

	// No manifest mentions the agent's port as something to reach.
	for _, p := range d.Spec.Template.Spec.InitContainers {
		for _, cp := range p.Ports {
			if cp.ContainerPort == 8000 {
				t.Errorf("initContainer %s exposes 8000", p.Name)
			}
		}
	}
}

// TestBaseCaddyfile adapts and validates (provisions the module) the
// ConfigMap's Caddyfile with the built binary, with the JWKS down.
func TestBaseCaddyfile(t *testing.T) {
	b := loadBase(t, loadAll(t))
	file := writeTemp(t, "Caddyfile", b.caddyCM.Data[caddyfileKey])
	checkFormatted(t, file)
	cfg, err := adapt(t, file, true, adaptEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	checkAdaptedGate(t, "base Caddyfile", cfg)
	if n := checkAccessLogFilters(t, "base Caddyfile", cfg); n == 0 {
		t.Errorf("base Caddyfile: no access log (the deployment keeps one, with the credential filter)")
	}
	if jpath(cfg, "admin", "config", "persist") != false {
		t.Errorf("base Caddyfile: persist_config is not off (the adapted config would be written to disk)")
	}
}

// --- the Redis overlay ---

// applyOverlay applies the overlay's strategic-merge patches to copies of
// the base objects, for the fields the patches use: ConfigMap data keys
// (replaced), Deployment replicas and topologySpreadConstraints (replaced),
// and containers/initContainers merged by name with env merged by name.
// Any other field in a patch fails the test, so the merge cannot silently
// differ from kustomize's.
func applyOverlay(t *testing.T, b *base, patches []doc) (*appsv1.Deployment, []*corev1.ConfigMap) {
	t.Helper()
	d := b.deploy.DeepCopy()
	var cms []*corev1.ConfigMap
	for _, cm := range b.configMaps {
		cms = append(cms, cm.DeepCopy())
	}
	for _, p := range patches {
		switch o := p.Obj.(type) {
		case *corev1.ConfigMap:
			target := configMapNamed(cms, o.Name)
			if target == nil {
				t.Fatalf("%s: patches ConfigMap %q, absent from the base", p.File, o.Name)
			}
			if len(o.BinaryData) != 0 || o.Immutable != nil {
				t.Fatalf("%s: only data is handled in ConfigMap patches", p.File)
			}
			for k, v := range o.Data {
				target.Data[k] = v
			}
		case *appsv1.Deployment:
			if o.Name != d.Name {
				t.Fatalf("%s: patches Deployment %q, the base has %q", p.File, o.Name, d.Name)
			}
			rest := o.DeepCopy()
			if o.Spec.Replicas != nil {
				d.Spec.Replicas = o.Spec.Replicas
			}
			if o.Spec.Template.Spec.TopologySpreadConstraints != nil {
				d.Spec.Template.Spec.TopologySpreadConstraints = o.Spec.Template.Spec.TopologySpreadConstraints
			}
			mergeContainers(t, p.File, d.Spec.Template.Spec.InitContainers, o.Spec.Template.Spec.InitContainers)
			mergeContainers(t, p.File, d.Spec.Template.Spec.Containers, o.Spec.Template.Spec.Containers)
			// Whatever is left must be empty: nothing unhandled.
			rest.TypeMeta, rest.ObjectMeta = metav1.TypeMeta{}, metav1.ObjectMeta{}
			rest.Spec.Replicas = nil
			rest.Spec.Template.Spec.TopologySpreadConstraints = nil
			rest.Spec.Template.Spec.InitContainers = nil
			rest.Spec.Template.Spec.Containers = nil
			if j, z := mustJSON(t, rest), mustJSON(t, &appsv1.Deployment{}); j != z {
				t.Fatalf("%s: fields this test's merge does not handle: %s", p.File, j)
			}
		default:
			t.Fatalf("%s: unexpected patch kind %T", p.File, p.Obj)
		}
	}
	return d, cms
}

func mergeContainers(t *testing.T, file string, dst, patch []corev1.Container) {
	t.Helper()
	for _, pc := range patch {
		c := findContainer(dst, pc.Name)
		if c == nil {
			t.Fatalf("%s: patches container %q, absent from the base (kustomize would add a broken one)", file, pc.Name)
		}
		rest := pc.DeepCopy()
		rest.Name, rest.Env = "", nil
		if j, z := mustJSON(t, rest), mustJSON(t, &corev1.Container{}); j != z {
			t.Fatalf("%s: container %s: fields this test's merge does not handle: %s", file, pc.Name, j)
		}
		for _, e := range pc.Env {
			replaced := false
			for i := range c.Env {
				if c.Env[i].Name == e.Name {
					c.Env[i], replaced = e, true
				}
			}
			if !replaced {
				c.Env = append(c.Env, e)
			}
		}
	}
}

// TestRedisOverlay checks the overlay's result: the base invariants still
// hold, 2+ replicas, the sidecar gets the Redis URL from a Secret, no Redis
// is shipped, and the Caddyfile is the base's plus a Redis idempotency
// block and nothing else.
func TestRedisOverlay(t *testing.T) {
	docs := loadAll(t)
	b := loadBase(t, docs)
	var patches, examples []doc
	for _, d := range inDir(docs, overlayRedis) {
		switch {
		case strings.HasSuffix(d.File, exampleSuffix):
			examples = append(examples, d)
		case strings.HasSuffix(d.File, "/"+kustomizeFile):
		default:
			patches = append(patches, d)
		}
	}
	secretExamples := slices.Clone(b.examples)
	for _, e := range examples {
		s, ok := e.Obj.(*corev1.Secret)
		if !ok {
			t.Fatalf("%s: example is not a Secret", e.File)
		}
		secretExamples = append(secretExamples, s)
	}
	d, cms := applyOverlay(t, b, patches)

	checkPod(t, d, cms, secretExamples)
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("overlay replicas = %v, want 2 or more", ptrString(d.Spec.Replicas))
	}
	sc := findContainer(d.Spec.Template.Spec.InitContainers, sidecarName)
	if env := envOf(t, sc, cms); !strings.HasPrefix(env[redisURLEnv], "secret:") {
		t.Errorf("overlay: sidecar %s does not come from a Secret (got %q)", redisURLEnv, env[redisURLEnv])
	}
	for _, c := range append(slices.Clone(d.Spec.Template.Spec.InitContainers), d.Spec.Template.Spec.Containers...) {
		if strings.Contains(strings.ToLower(c.Image), "redis") {
			t.Errorf("overlay runs a Redis container %q: it must use an existing Redis", c.Name)
		}
	}
	if m := b.pdb.Spec.MinAvailable; m != nil && m.Type == intstr.Int && m.IntVal >= *d.Spec.Replicas {
		t.Errorf("PodDisruptionBudget minAvailable %d >= overlay replicas %d", m.IntVal, *d.Spec.Replicas)
	}

	baseCF := b.caddyCM.Data[caddyfileKey]
	overlayCF := configMapNamed(cms, b.caddyCM.Name).Data[caddyfileKey]
	extra := extraLines(t, baseCF, overlayCF)
	want := []string{"idempotency {", "store redis", "redis_url {$" + redisURLEnv + "}", "}"}
	if !slices.Equal(extra, want) {
		t.Errorf("overlay Caddyfile adds %q to the base's, want exactly %q (plus comments)", extra, want)
	}
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

// TestRedisOverlayCaddyfile adapts the overlay's Caddyfile with the built
// binary and, once the module knows the idempotency block, validates it
// against a real Redis.
func TestRedisOverlayCaddyfile(t *testing.T) {
	docs := loadAll(t)
	b := loadBase(t, docs)
	var patches []doc
	for _, d := range inDir(docs, overlayRedis) {
		if !strings.HasSuffix(d.File, exampleSuffix) && !strings.HasSuffix(d.File, "/"+kustomizeFile) {
			patches = append(patches, d)
		}
	}
	_, cms := applyOverlay(t, b, patches)
	file := writeTemp(t, "Caddyfile", configMapNamed(cms, b.caddyCM.Name).Data[caddyfileKey])
	checkFormatted(t, file)

	// Plain adapt first: it parses the directive. Until caddymodule parses
	// `idempotency { store redis; redis_url ... }` this fails with
	// "unrecognized supervaizer_auth option"; the test then skips (the
	// manifest checks above still ran) and becomes a full check, against a
	// real Redis, as soon as the module has the block.
	env := adaptEnv(t, redisURLEnv+"=redis://127.0.0.1:9/0")
	if _, err := adapt(t, file, false, env); err != nil {
		if strings.Contains(err.Error(), `unrecognized supervaizer_auth option "idempotency"`) {
			t.Skipf("caddymodule does not parse the idempotency block yet: %v", firstLine(err))
		}
		t.Fatal(err)
	}
	cfg, err := adapt(t, file, true, adaptEnv(t, redisURLEnv+"="+startRedis(t)))
	if err != nil {
		t.Fatal(err)
	}
	checkAdaptedGate(t, "overlay Caddyfile", cfg)
	checkAccessLogFilters(t, "overlay Caddyfile", cfg)
	for _, h := range handlers(cfg) {
		if h["handler"] == "supervaizer_auth" {
			if j, _ := json.Marshal(h); !strings.Contains(string(j), "redis") {
				t.Errorf("overlay: adapted supervaizer_auth has no Redis store: %s", j)
			}
		}
	}
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
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

func ptrString[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}
