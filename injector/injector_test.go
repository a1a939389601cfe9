package injector

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The webhook is tested end to end through a real API server in
// test/kube (TestInjector…); these tests pin the decisions and the patch.

var testCfg = Config{Image: "registry.example/supervaizer-sidecar:test"}

func optedIn(ann map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns",
			Labels: map[string]string{LabelInject: "true", "app": "a"}, Annotations: ann},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}},
	}
}

// applyAdds applies a JSON patch made of "add" operations (the only ones the
// injector writes; anything else fails the test) to pod.
func applyAdds(t *testing.T, pod *corev1.Pod, patch []byte) *corev1.Pod {
	t.Helper()
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("patch: %v", err)
	}
	raw, _ := json.Marshal(pod)
	var doc map[string]any
	json.Unmarshal(raw, &doc)
	spec := doc["spec"].(map[string]any)
	for _, op := range ops {
		if op.Op != "add" {
			t.Fatalf("patch op %q: the injector only adds", op.Op)
		}
		var v any
		json.Unmarshal(op.Value, &v)
		field, appendOne := strings.CutSuffix(strings.TrimPrefix(op.Path, "/spec/"), "/-")
		if field != "initContainers" && field != "volumes" {
			t.Fatalf("patch path %q: the injector only adds init containers and volumes", op.Path)
		}
		if appendOne {
			list, ok := spec[field].([]any)
			if !ok {
				t.Fatalf("patch appends to %s, which the pod does not have", field)
			}
			spec[field] = append(list, v)
		} else {
			if _, ok := spec[field]; ok {
				t.Fatalf("patch replaces the pod's %s", field)
			}
			spec[field] = v
		}
	}
	raw, _ = json.Marshal(doc)
	var out corev1.Pod
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func TestInjectorPatch(t *testing.T) {
	pod := optedIn(map[string]string{AnnotationConfig: "agent-caddyfile", AnnotationSecret: "agent-keys", AnnotationAgentPort: "9000"})
	pod.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: "m:1"}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	before, _ := json.Marshal(pod)
	patch, err := testCfg.Patch(pod)
	if err != nil || patch == nil {
		t.Fatalf("Patch = %s, %v", patch, err)
	}
	if after, _ := json.Marshal(pod); string(after) != string(before) {
		t.Fatal("Patch changed its argument")
	}
	got := applyAdds(t, pod, patch)
	if n := len(got.Spec.InitContainers); n != 2 || got.Spec.InitContainers[0].Name != "migrate" {
		t.Fatalf("init containers %v: want migrate kept first, the sidecar after it", names(got.Spec.InitContainers))
	}
	sc := got.Spec.InitContainers[1]
	if sc.Name != ContainerName || sc.Image != testCfg.Image || sc.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Fatalf("sidecar %s %s %s", sc.Name, sc.Image, sc.ImagePullPolicy)
	}
	if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatal("the sidecar is not a native sidecar (restartPolicy Always)")
	}
	if want := []string{"run", "--config", "/etc/supervaizer/Caddyfile", "--adapter", "caddyfile"}; fmt.Sprint(sc.Args) != fmt.Sprint(want) {
		t.Fatalf("args %v, want %v", sc.Args, want)
	}
	env := map[string]string{}
	for _, e := range sc.Env {
		env[e.Name] = e.Value
	}
	if env[EnvAgentPort] != "9000" {
		t.Fatalf("%s = %q, want the annotation's 9000", EnvAgentPort, env[EnvAgentPort])
	}
	for p, want := range map[*corev1.Probe]string{sc.StartupProbe: "/_sidecar/live", sc.ReadinessProbe: "/_sidecar/ready", sc.LivenessProbe: "/_sidecar/live"} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.StrVal != GatePortName {
			t.Fatalf("probe %+v, want GET %s on %s", p, want, GatePortName)
		}
	}
	ports := map[string]int32{}
	for _, p := range sc.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports[GatePortName] != GatePort || ports[MetricsPortName] != MetricsPort || len(ports) != 2 {
		t.Fatalf("ports %v", ports)
	}
	if sc.Resources.Limits.Memory().String() != "256Mi" || sc.Resources.Requests.Cpu().String() != "50m" {
		t.Fatalf("resources %v", sc.Resources)
	}
	s := sc.SecurityContext
	if s == nil || !*s.RunAsNonRoot || *s.RunAsUser != UID || !*s.ReadOnlyRootFilesystem || *s.AllowPrivilegeEscalation ||
		len(s.Capabilities.Drop) != 1 || s.Capabilities.Drop[0] != "ALL" || s.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Fatalf("security context %+v does not meet Pod Security restricted", s)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range sc.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m := mounts[ConfigDir]; !m.ReadOnly || m.Name == "" {
		t.Fatalf("config mount %+v", m)
	}
	if m := mounts[SecretDir]; !m.ReadOnly || m.Name == "" {
		t.Fatalf("secret mount %+v", m)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range got.Spec.Volumes {
		vols[v.Name] = v
	}
	if len(got.Spec.Volumes) != 5 || got.Spec.Volumes[0].Name != "tmp" {
		t.Fatalf("volumes %v: want tmp kept and four added", got.Spec.Volumes)
	}
	cm := vols[mounts[ConfigDir].Name].ConfigMap
	if cm == nil || cm.Name != "agent-caddyfile" || len(cm.Items) != 1 || cm.Items[0].Key != "Caddyfile" {
		t.Fatalf("config volume %+v", cm)
	}
	if sec := vols[mounts[SecretDir].Name].Secret; sec == nil || sec.SecretName != "agent-keys" {
		t.Fatalf("secret volume %+v", sec)
	}
	// Nothing else changed: the agent container and the pod's metadata.
	if len(got.Spec.Containers) != 1 || got.Spec.Containers[0].Name != "agent" || len(got.Spec.Containers[0].Env) != 0 {
		t.Fatalf("containers changed: %+v", got.Spec.Containers)
	}
	if got.Spec.SecurityContext != nil || len(got.Labels) != 2 || len(got.Annotations) != 3 {
		t.Fatal("the pod's own fields changed")
	}
	// Injected again: nothing (idempotent).
	if again, err := testCfg.Patch(got); err != nil || again != nil {
		t.Fatalf("second Patch = %s, %v: want none", again, err)
	}
}

func TestInjectorPatchEmptyPod(t *testing.T) {
	pod := optedIn(map[string]string{AnnotationConfig: "cfg"})
	patch, err := testCfg.Patch(pod)
	if err != nil {
		t.Fatal(err)
	}
	got := applyAdds(t, pod, patch)
	if len(got.Spec.InitContainers) != 1 || len(got.Spec.Volumes) != 3 {
		t.Fatalf("init containers %v, %d volumes: want the sidecar and 3 volumes (no secret)", names(got.Spec.InitContainers), len(got.Spec.Volumes))
	}
	for _, e := range got.Spec.InitContainers[0].Env {
		if e.Name == EnvAgentPort && e.Value != strconv.Itoa(DefaultAgentPort) {
			t.Fatalf("%s = %s, want the default", e.Name, e.Value)
		}
	}
	for _, m := range got.Spec.InitContainers[0].VolumeMounts {
		if m.MountPath == SecretDir {
			t.Fatal("a secret mounted without the annotation")
		}
	}
}

func TestInjectorLeavesAlone(t *testing.T) {
	for name, pod := range map[string]*corev1.Pod{
		"no label":         {ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationConfig: "c"}}},
		"label false":      {ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelInject: "false"}}},
		"label True":       {ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelInject: "True"}}},
		"already injected": {ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelInject: "true"}}, Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: ContainerName}}}},
		"as plain container": {ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelInject: "true"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: ContainerName}}}},
	} {
		patch, err := testCfg.Patch(pod)
		if patch != nil || err != nil {
			t.Errorf("%s: Patch = %s, %v; want nothing", name, patch, err)
		}
	}
}

func TestInjectorDenies(t *testing.T) {
	cases := []struct {
		name string
		ann  map[string]string
		mod  func(*corev1.Pod)
		want string
	}{
		{"no config", map[string]string{}, nil, AnnotationConfig + " is required"},
		{"empty config", map[string]string{AnnotationConfig: ""}, nil, AnnotationConfig + " is required"},
		{"config not a name", map[string]string{AnnotationConfig: "My_Config"}, nil, AnnotationConfig + `: "My_Config" is not an object name`},
		{"empty secret", map[string]string{AnnotationConfig: "c", AnnotationSecret: ""}, nil, AnnotationSecret + " is empty"},
		{"secret not a name", map[string]string{AnnotationConfig: "c", AnnotationSecret: "../x"}, nil, AnnotationSecret + `: "../x"`},
		{"port word", map[string]string{AnnotationConfig: "c", AnnotationAgentPort: "http"}, nil, AnnotationAgentPort + `: "http" is not a port number`},
		{"port 0", map[string]string{AnnotationConfig: "c", AnnotationAgentPort: "0"}, nil, AnnotationAgentPort + `: "0"`},
		{"port 65536", map[string]string{AnnotationConfig: "c", AnnotationAgentPort: "65536"}, nil, AnnotationAgentPort + `: "65536"`},
		{"port sign", map[string]string{AnnotationConfig: "c", AnnotationAgentPort: "+80"}, nil, AnnotationAgentPort + `: "+80"`},
		{"port leading zero", map[string]string{AnnotationConfig: "c", AnnotationAgentPort: "080"}, nil, AnnotationAgentPort + `: "080"`},
		{"port space", map[string]string{AnnotationConfig: "c", AnnotationAgentPort: " 80"}, nil, AnnotationAgentPort + `: " 80"`},
		{"port empty", map[string]string{AnnotationConfig: "c", AnnotationAgentPort: ""}, nil, AnnotationAgentPort + `: ""`},
		{"port the sidecar's", map[string]string{AnnotationConfig: "c", AnnotationAgentPort: "8080"}, nil, AnnotationAgentPort + `: 8080 is the sidecar's own port`},
		{"port the metrics'", map[string]string{AnnotationConfig: "c", AnnotationAgentPort: "9180"}, nil, AnnotationAgentPort + `: 9180 is the sidecar's own port`},
		{"agent declares 8080", map[string]string{AnnotationConfig: "c"}, func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
		}, `container "agent" declares port 8080`},
		{"port name taken", map[string]string{AnnotationConfig: "c"}, func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: GatePortName, ContainerPort: 8000}}
		}, `port named "sidecar-http"`},
		{"volume name taken", map[string]string{AnnotationConfig: "c"}, func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: volData}}
		}, `volume named "supervaizer-sidecar-data"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := optedIn(tc.ann)
			if tc.mod != nil {
				tc.mod(pod)
			}
			patch, err := testCfg.Patch(pod)
			var d *DenyError
			if patch != nil || err == nil || !asDeny(err, &d) || !strings.Contains(d.Msg, tc.want) {
				t.Fatalf("Patch = %s, %v; want a denial containing %q", patch, err, tc.want)
			}
			// Through Mutate: allowed false, 403, the same message.
			raw, _ := json.Marshal(pod)
			resp := testCfg.Mutate(&admissionv1.AdmissionRequest{UID: "u1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
				Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}})
			if resp.Allowed || resp.UID != "u1" || resp.Patch != nil || resp.Result == nil || resp.Result.Code != 403 || !strings.Contains(resp.Result.Message, tc.want) {
				t.Fatalf("Mutate = %+v", resp)
			}
		})
	}
}

func asDeny(err error, d **DenyError) bool {
	v, ok := err.(*DenyError)
	*d = v
	return ok
}

func TestInjectorMutateScope(t *testing.T) {
	raw, _ := json.Marshal(optedIn(map[string]string{})) // would be denied if considered
	podKind := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	for name, req := range map[string]*admissionv1.AdmissionRequest{
		"update":      {Kind: podKind, Operation: admissionv1.Update, Object: runtime.RawExtension{Raw: raw}},
		"subresource": {Kind: podKind, Operation: admissionv1.Create, SubResource: "binding", Object: runtime.RawExtension{Raw: raw}},
		"not a pod":   {Kind: metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}},
	} {
		if resp := testCfg.Mutate(req); !resp.Allowed || resp.Patch != nil {
			t.Errorf("%s: %+v, want allowed without a patch", name, resp)
		}
	}
	resp := testCfg.Mutate(&admissionv1.AdmissionRequest{Kind: podKind, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(`{"metadata":`)}})
	if resp.Allowed {
		t.Fatal("a pod that does not decode was allowed")
	}
}

func TestInjectorConfigValidate(t *testing.T) {
	for _, c := range []Config{{}, {Image: " "}, {Image: "a b"}, {Image: "x", PullPolicy: "Sometimes"}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := (Config{Image: "x", PullPolicy: corev1.PullAlways}).Validate(); err != nil {
		t.Fatal(err)
	}
	p, err := (Config{Image: "x", PullPolicy: corev1.PullNever}).Patch(optedIn(map[string]string{AnnotationConfig: "c"}))
	if err != nil || !strings.Contains(string(p), `"imagePullPolicy":"Never"`) {
		t.Fatalf("pull policy not written: %s %v", p, err)
	}
}

func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}
