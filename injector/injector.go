// Package injector is the mutating admission webhook that adds
// supervaizer-sidecar to a pod as a native sidecar (an init container with
// restartPolicy: Always). It depends on k8s.io/api and k8s.io/apimachinery
// only: no Caddy, no gate. The interface (label, annotations, what is written
// into the pod, what is denied) is described in docs/kubernetes.md; the
// command is cmd/supervaizer-injector.
package injector

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The opt-in label and the annotations a pod is injected from.
const (
	// LabelInject set to "true" opts a pod in; any other value, or none,
	// leaves the pod untouched.
	LabelInject = "sidecar.supervaizer.io/inject"
	// AnnotationConfig (required) names the ConfigMap holding the sidecar's
	// Caddyfile under the key "Caddyfile".
	AnnotationConfig = "sidecar.supervaizer.io/config"
	// AnnotationAgentPort is the agent's port on 127.0.0.1 (default 8000),
	// given to the sidecar as $SUPERVAIZER_AGENT_PORT.
	AnnotationAgentPort = "sidecar.supervaizer.io/agent-port"
	// AnnotationSecret (optional) names a Secret mounted read-only at
	// SecretDir.
	AnnotationSecret = "sidecar.supervaizer.io/secret"
)

// What the injector writes into the pod.
const (
	// ContainerName is the injected init container's name; a pod with a
	// container (init or not) of this name is left as it is.
	ContainerName = "supervaizer-sidecar"
	// ConfigKey is the ConfigMap key holding the Caddyfile.
	ConfigKey = "Caddyfile"
	// ConfigDir is where the ConfigMap is mounted: the Caddyfile is
	// ConfigDir + "/Caddyfile".
	ConfigDir = "/etc/supervaizer"
	// SecretDir is where the optional Secret is mounted, read-only: a key
	// "api-key" is read in the Caddyfile as {file./var/run/secrets/supervaizer/api-key}.
	SecretDir = "/var/run/secrets/supervaizer"
	// StateDir holds Caddy's data and config dirs (XDG_*: the root
	// filesystem is read-only); DataDir the sidecar's writable data (an
	// idempotency file). Both are emptyDirs.
	StateDir = "/var/lib/supervaizer-sidecar"
	DataDir  = "/var/lib/supervaizer"
	// EnvAgentPort carries the agent port annotation to the sidecar; the
	// Caddyfile reads it as {$SUPERVAIZER_AGENT_PORT}.
	EnvAgentPort = "SUPERVAIZER_AGENT_PORT"
	// DefaultAgentPort is the agent port without the annotation (the SDK's).
	DefaultAgentPort = 8000
	// GatePort is the port the ConfigMap's Caddyfile serves calls on (the
	// probes' port; a Service targets it by the name GatePortName), and
	// MetricsPort its Prometheus metrics site.
	GatePort        = 8080
	GatePortName    = "sidecar-http"
	MetricsPort     = 9180
	MetricsPortName = "sidecar-metrics"
	// UID and GID the sidecar runs as (the image's distroless nonroot user).
	UID = 65532

	volConfig = "supervaizer-sidecar-config"
	volSecret = "supervaizer-sidecar-secret"
	volState  = "supervaizer-sidecar-state"
	volData   = "supervaizer-sidecar-data"
)

// Config is what the injector is started with.
type Config struct {
	// Image is the sidecar image (required), e.g.
	// ghcr.io/supervaize/supervaizer-sidecar:0.1.0 or pinned by digest.
	Image string
	// PullPolicy is the sidecar's imagePullPolicy; empty: IfNotPresent.
	PullPolicy corev1.PullPolicy
}

// Validate refuses a configuration the injector cannot run with.
func (c Config) Validate() error {
	if strings.TrimSpace(c.Image) == "" {
		return fmt.Errorf("--image is required: the supervaizer-sidecar image to inject")
	}
	if strings.ContainsAny(c.Image, " \t\r\n") {
		return fmt.Errorf("--image %q: an image reference has no white space", c.Image)
	}
	switch c.PullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("--image-pull-policy %q: want Always, IfNotPresent or Never", c.PullPolicy)
	}
	return nil
}

// DenyError is a labelled pod that cannot be injected safely: the webhook
// answers allowed: false with its message (which names the annotation).
type DenyError struct{ Msg string }

func (e *DenyError) Error() string { return e.Msg }

func deny(format string, a ...any) error { return &DenyError{Msg: fmt.Sprintf(format, a...)} }

// Mutate decides one AdmissionReview request and returns its response (UID
// set). A request for anything but a pod CREATE, a pod without the label, and
// a pod that already has the sidecar are allowed without a patch.
func (c Config) Mutate(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create || req.SubResource != "" {
		return resp
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		// Refused, not let through: the label cannot be read.
		resp.Allowed = false
		resp.Result = &metav1.Status{Code: 400, Reason: metav1.StatusReasonBadRequest,
			Message: "supervaizer-injector: the pod in the request does not decode: " + err.Error()}
		return resp
	}
	patch, err := c.Patch(&pod)
	if err != nil {
		resp.Allowed = false
		resp.Result = &metav1.Status{Code: 403, Reason: metav1.StatusReasonForbidden,
			Message: "supervaizer-injector: " + err.Error()}
		return resp
	}
	if patch != nil {
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch = patch
		resp.PatchType = &pt
	}
	return resp
}

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Patch returns the JSON patch injecting the sidecar into pod, nil when the
// pod is not opted in or already has the sidecar, or a *DenyError.
func (c Config) Patch(pod *corev1.Pod) ([]byte, error) {
	if pod.Labels[LabelInject] != "true" {
		return nil, nil
	}
	if hasContainer(pod, ContainerName) {
		return nil, nil // idempotent: reinvocation, or injected by hand
	}
	sc, vols, err := c.Sidecar(pod)
	if err != nil {
		return nil, err
	}
	var ops []patchOp
	if len(pod.Spec.InitContainers) == 0 {
		ops = append(ops, patchOp{Op: "add", Path: "/spec/initContainers", Value: []corev1.Container{sc}})
	} else {
		ops = append(ops, patchOp{Op: "add", Path: "/spec/initContainers/-", Value: sc})
	}
	if len(pod.Spec.Volumes) == 0 {
		ops = append(ops, patchOp{Op: "add", Path: "/spec/volumes", Value: vols})
	} else {
		for _, v := range vols {
			ops = append(ops, patchOp{Op: "add", Path: "/spec/volumes/-", Value: v})
		}
	}
	return json.Marshal(ops)
}

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Name == name {
				return true
			}
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// AgentPort reads the agent port annotation: absent, DefaultAgentPort; else
// decimal digits naming a port 1-65535 that is not one of the sidecar's.
func AgentPort(annotations map[string]string) (int, error) {
	v, ok := annotations[AnnotationAgentPort]
	if !ok {
		return DefaultAgentPort, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != v {
		return 0, deny("annotation %s: %q is not a port number (1-65535)", AnnotationAgentPort, v)
	}
	if n == GatePort || n == MetricsPort {
		return 0, deny("annotation %s: %d is the sidecar's own port (%d calls, %d metrics); the agent must listen on another", AnnotationAgentPort, n, GatePort, MetricsPort)
	}
	return n, nil
}

// objectName reads an annotation naming a ConfigMap or Secret.
func objectName(annotations map[string]string, key string, required bool) (string, error) {
	v, ok := annotations[key]
	if !ok || v == "" {
		if required {
			return "", deny("annotation %s is required: the name of the ConfigMap holding the sidecar's Caddyfile under the key %q", key, ConfigKey)
		}
		if ok {
			return "", deny("annotation %s is empty: remove it or name a Secret", key)
		}
		return "", nil
	}
	if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
		return "", deny("annotation %s: %q is not an object name: %s", key, v, strings.Join(errs, "; "))
	}
	return v, nil
}

// Sidecar builds the container and the volumes injected into pod, or a
// *DenyError naming the annotation (or the pod's field) that prevents it.
func (c Config) Sidecar(pod *corev1.Pod) (corev1.Container, []corev1.Volume, error) {
	cfg, err := objectName(pod.Annotations, AnnotationConfig, true)
	if err != nil {
		return corev1.Container{}, nil, err
	}
	secret, err := objectName(pod.Annotations, AnnotationSecret, false)
	if err != nil {
		return corev1.Container{}, nil, err
	}
	agentPort, err := AgentPort(pod.Annotations)
	if err != nil {
		return corev1.Container{}, nil, err
	}
	if err := checkConflicts(pod, agentPort); err != nil {
		return corev1.Container{}, nil, err
	}

	pull := c.PullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	always := corev1.ContainerRestartPolicyAlways
	probe := gateProbe
	mounts := []corev1.VolumeMount{
		{Name: volConfig, MountPath: ConfigDir, ReadOnly: true},
		{Name: volState, MountPath: StateDir},
		{Name: volData, MountPath: DataDir},
	}
	if secret != "" {
		mounts = append(mounts, corev1.VolumeMount{Name: volSecret, MountPath: SecretDir, ReadOnly: true})
	}
	sc := corev1.Container{
		Name:            ContainerName,
		Image:           c.Image,
		ImagePullPolicy: pull,
		RestartPolicy:   &always,
		Command:         []string{"/usr/bin/supervaizer-sidecar"},
		Args:            []string{"run", "--config", ConfigDir + "/" + ConfigKey, "--adapter", "caddyfile"},
		Ports: []corev1.ContainerPort{
			{Name: GatePortName, ContainerPort: GatePort, Protocol: corev1.ProtocolTCP},
			{Name: MetricsPortName, ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP},
		},
		Env: []corev1.EnvVar{
			{Name: EnvAgentPort, Value: strconv.Itoa(agentPort)},
			{Name: "XDG_DATA_HOME", Value: StateDir + "/data"},
			{Name: "XDG_CONFIG_HOME", Value: StateDir + "/config"},
		},
		VolumeMounts: mounts,
		// As in deploy/k8s/base/deployment.yaml: the startup probe stays on
		// /_sidecar/live, since the agent starts only once it passes and
		// /_sidecar/ready needs the agent's cards.
		StartupProbe:             probe("/_sidecar/live", 1, 1, 30),
		ReadinessProbe:           probe("/_sidecar/ready", 5, 2, 3),
		LivenessProbe:            probe("/_sidecar/live", 10, 2, 3),
		Resources:                sidecarResources(),
		SecurityContext:          restrictedSecurityContext(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	vols := sidecarVolumes(cfg, secret)
	return sc, vols, nil
}

// gateProbe is a probe on the sidecar's gate port at path.
func gateProbe(path string, period, timeout, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intOrName(GatePortName), Scheme: corev1.URISchemeHTTP}},
		PeriodSeconds: period, TimeoutSeconds: timeout, FailureThreshold: failures, SuccessThreshold: 1,
	}
}

// sidecarResources are the sidecar's requests and limits (its memory limit
// is what body_memory's default is sized for: deploy/k8s/README.md).
func sidecarResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("50m"),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("500m"),
			corev1.ResourceMemory: resource.MustParse("256Mi"),
		},
	}
}

// restrictedSecurityContext passes Pod Security "restricted" on its own,
// whatever the pod's own securityContext says.
func restrictedSecurityContext() *corev1.SecurityContext {
	yes, no := true, false
	uid := int64(UID)
	return &corev1.SecurityContext{
		RunAsNonRoot:             &yes,
		RunAsUser:                &uid,
		RunAsGroup:               &uid,
		ReadOnlyRootFilesystem:   &yes,
		AllowPrivilegeEscalation: &no,
		Privileged:               &no,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// sidecarVolumes are the volumes the sidecar mounts: the ConfigMap cfg
// (its Caddyfile only), its state and data directories, and the Secret
// secret when one is named.
func sidecarVolumes(cfg, secret string) []corev1.Volume {
	mode := int32(0o444)
	vols := []corev1.Volume{
		{Name: volConfig, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: cfg},
			// Only the Caddyfile, and a ConfigMap without it does not mount:
			// the pod waits instead of starting a sidecar without its config.
			Items:       []corev1.KeyToPath{{Key: ConfigKey, Path: ConfigKey}},
			DefaultMode: &mode,
		}}},
		{Name: volState, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptrQuantity("16Mi")}}},
		{Name: volData, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptrQuantity("64Mi")}}},
	}
	if secret != "" {
		smode := int32(0o440)
		vols = append(vols, corev1.Volume{Name: volSecret, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: secret, DefaultMode: &smode,
		}}})
	}
	return vols
}

// checkConflicts refuses a pod whose own containers or volumes would collide
// with the sidecar's ports, port names or volume names.
func checkConflicts(pod *corev1.Pod, agentPort int) error {
	for _, v := range pod.Spec.Volumes {
		switch v.Name {
		case volConfig, volSecret, volState, volData:
			return deny("the pod already has a volume named %q, which the sidecar's injection adds; rename it", v.Name)
		}
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, ctr := range cs {
			for _, p := range ctr.Ports {
				if p.Name == GatePortName || p.Name == MetricsPortName {
					return deny("container %q declares a port named %q, the sidecar's; rename it", ctr.Name, p.Name)
				}
				if (p.ContainerPort == GatePort || p.ContainerPort == MetricsPort) && p.Protocol != corev1.ProtocolUDP && p.Protocol != corev1.ProtocolSCTP {
					return deny("container %q declares port %d, on which the sidecar listens (%d calls, %d metrics): the agent listens on 127.0.0.1:%d (annotation %s)",
						ctr.Name, p.ContainerPort, GatePort, MetricsPort, agentPort, AnnotationAgentPort)
				}
			}
		}
	}
	return nil
}

func intOrName(name string) intstr.IntOrString { return intstr.FromString(name) }

func ptrQuantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}
