package k8s_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Every kustomization under deploy/k8s is rendered in-process with the
// kustomize API (krusty, what `kubectl kustomize` and `kubectl apply -k`
// run), with kustomize's default load restrictions, and every rendered
// object is decoded strictly into its Kubernetes API type.

// expect is what a kustomization must render; every kustomization directory
// under deploy/k8s has an entry (a new overlay fails TestRenderAll until it
// is described here).
type expect struct {
	replicasMin, replicasMax int32 // replicasMax 0: no upper bound
	native                   bool  // the sidecar is a native sidecar (initContainer, restartPolicy Always)
	redis                    bool  // idempotency through Redis: the Caddyfile is the base's plus the Redis block
	monitoring               bool  // PodMonitor and PrometheusRule rendered
}

var kustomizations = map[string]expect{
	"base":                       {replicasMin: 1, replicasMax: 1, native: true},
	"overlays/redis-idempotency": {replicasMin: 2, native: true, redis: true},
	"overlays/metrics":           {replicasMin: 1, replicasMax: 1, native: true, monitoring: true},
	"overlays/before-1.29":       {replicasMin: 1, replicasMax: 1, native: false},
}

// doc is one decoded object.
type doc struct {
	Source string // kustomization dir or file it came from
	Obj    any    // pointer to the typed object
}

func (d doc) String() string {
	if m, ok := d.Obj.(metav1.Object); ok {
		return fmt.Sprintf("%s: %T %s", d.Source, d.Obj, m.GetName())
	}
	return fmt.Sprintf("%s: %T", d.Source, d.Obj)
}

// k8sDir is deploy/k8s (the test's working directory).
func k8sDir(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// kustomizationDirs lists the directories under deploy/k8s that hold a
// kustomization file, relative, slash-separated.
func kustomizationDirs(t testing.TB) []string {
	t.Helper()
	root := k8sDir(t)
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !slices.Contains(konfig.RecognizedKustomizationFileNames(), d.Name()) {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		dirs = append(dirs, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(dirs)
	return dirs
}

// renderFS runs kustomize on dir of fsys, as `kubectl kustomize` does, and
// decodes every object strictly.
func renderFS(fsys filesys.FileSystem, dir string) ([]doc, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %v", dir, err)
	}
	var docs []doc
	for _, r := range rm.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %v", dir, r.CurId(), err)
		}
		obj, err := decodeStrict(y)
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %v", dir, r.CurId(), err)
		}
		docs = append(docs, doc{Source: dir, Obj: obj})
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("kustomize build %s: no object", dir)
	}
	return docs, nil
}

var (
	renderMu    sync.Mutex
	renderCache = map[string][]doc{}
)

// render renders the kustomization in deploy/k8s/<dir> (once per run).
func render(t testing.TB, dir string) []doc {
	t.Helper()
	renderMu.Lock()
	defer renderMu.Unlock()
	if docs, ok := renderCache[dir]; ok {
		return docs
	}
	docs, err := renderFS(filesys.MakeFsOnDisk(), filepath.Join(k8sDir(t), filepath.FromSlash(dir)))
	if err != nil {
		t.Fatal(err)
	}
	renderCache[dir] = docs
	return docs
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
	case "v1/Namespace":
		obj = &corev1.Namespace{}
	case "v1/PersistentVolumeClaim":
		obj = &corev1.PersistentVolumeClaim{}
	case "networking.k8s.io/v1/NetworkPolicy":
		obj = &networkingv1.NetworkPolicy{}
	case "policy/v1/PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "monitoring.coreos.com/v1/PodMonitor":
		obj = &podMonitor{}
	case "monitoring.coreos.com/v1/PrometheusRule":
		obj = &prometheusRule{}
	case "kustomize.config.k8s.io/v1beta1/Kustomization":
		obj = &kusttypes.Kustomization{}
	default:
		return nil, fmt.Errorf("unexpected apiVersion/kind %q/%q", tm.APIVersion, tm.Kind)
	}
	if err := decodeJSONStrict(j, obj); err != nil {
		return nil, fmt.Errorf("%s: %v", tm.Kind, err)
	}
	return obj, nil
}

func decodeJSONStrict(j []byte, obj any) error {
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("trailing data after the object")
	}
	return nil
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeFile decodes every document of a YAML file strictly.
func decodeFile(t testing.TB, file string) []doc {
	t.Helper()
	var docs []doc
	for i, part := range docSep.Split(readFile(t, file), -1) {
		if onlyComments(part) {
			continue
		}
		obj, err := decodeStrict([]byte(part))
		if err != nil {
			t.Fatalf("%s (document %d): %v", file, i+1, err)
		}
		docs = append(docs, doc{Source: file, Obj: obj})
	}
	if len(docs) == 0 {
		t.Fatalf("%s: no document", file)
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

// yamlFiles lists the *.yaml / *.yml files directly in dir (names).
func yamlFiles(t testing.TB, dir string) []string {
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

const exampleSuffix = ".example.yaml"

// examples decodes every *.example.yaml under deploy/k8s: the Secrets the
// pod's secretKeyRefs must agree with, and the Namespace.
func examples(t testing.TB) []doc {
	t.Helper()
	root := k8sDir(t)
	var docs []doc
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, exampleSuffix) {
			docs = append(docs, decodeFile(t, p)...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
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

func only[T any](t testing.TB, docs []doc, what string) T {
	t.Helper()
	found := all[T](docs)
	if len(found) != 1 {
		var zero T
		t.Fatalf("want exactly one %s, found %d", what, len(found))
		return zero
	}
	return found[0]
}

// TestRenderAll renders every kustomization under deploy/k8s and checks the
// invariants of the sidecar pattern on each result (checkRendered), plus
// what that kustomization is for (kustomizations).
func TestRenderAll(t *testing.T) {
	dirs := kustomizationDirs(t)
	var known []string
	for d := range kustomizations {
		known = append(known, d)
	}
	sort.Strings(known)
	if !slices.Equal(dirs, known) {
		t.Errorf("kustomizations under deploy/k8s = %q, described in the test = %q: describe every one in kustomizations", dirs, known)
	}
	for _, dir := range dirs {
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			exp, ok := kustomizations[dir]
			if !ok {
				t.Fatalf("%s is not described in kustomizations", dir)
			}
			checkRendered(t, dir, render(t, dir), exp)
		})
	}
}

// TestKustomizationFiles checks each kustomization file against its
// directory: it decodes strictly as a kustomize Kustomization, lists every
// manifest of its directory as a resource or a patch (*.example.yaml
// excluded: no secret value is ever rendered) and nothing else there, and
// every overlay builds on the base.
func TestKustomizationFiles(t *testing.T) {
	root := k8sDir(t)
	for _, dir := range kustomizationDirs(t) {
		abs := filepath.Join(root, filepath.FromSlash(dir))
		var k *kusttypes.Kustomization
		for _, name := range konfig.RecognizedKustomizationFileNames() {
			if _, err := os.Stat(filepath.Join(abs, name)); err == nil {
				if k != nil {
					t.Errorf("%s: more than one kustomization file", dir)
				}
				k = only[*kusttypes.Kustomization](t, decodeFile(t, filepath.Join(abs, name)), dir+" kustomization")
			}
		}
		local := map[string]bool{}
		var bases []string
		for _, r := range k.Resources {
			if strings.Contains(r, "/") {
				bases = append(bases, r)
				continue
			}
			local[r] = true
		}
		for _, p := range k.Patches {
			if p.Path != "" {
				local[p.Path] = true
			}
		}
		if len(k.PatchesStrategicMerge) != 0 || len(k.PatchesJson6902) != 0 || len(k.Bases) != 0 || len(k.CommonLabels) != 0 {
			t.Errorf("%s: deprecated kustomize fields (bases, patchesStrategicMerge, patchesJson6902, commonLabels); use resources, patches, labels", dir)
		}
		var want, got []string
		for _, f := range yamlFiles(t, abs) {
			if slices.Contains(konfig.RecognizedKustomizationFileNames(), f) || strings.HasSuffix(f, exampleSuffix) {
				continue
			}
			want = append(want, f)
		}
		for f := range local {
			got = append(got, f)
		}
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: kustomization lists %q, want exactly the manifest files of its directory %q", dir, got, want)
		}
		for _, f := range yamlFiles(t, abs) {
			if strings.HasSuffix(f, exampleSuffix) && local[f] {
				t.Errorf("%s: %s is rendered; examples must stay out of the kustomization", dir, f)
			}
		}
		if dir == "base" {
			if len(bases) != 0 || len(k.Patches) != 0 {
				t.Errorf("base: resources %q patches %v: keep the base plain and self-contained", bases, k.Patches)
			}
			continue
		}
		if len(bases) != 1 {
			t.Errorf("%s: builds on %q, want exactly one base", dir, bases)
			continue
		}
		if target := path.Clean(path.Join(dir, bases[0])); target != "base" {
			t.Errorf("%s: builds on %s (%s), want ../../base", dir, bases[0], target)
		}
	}
}

// kubectlPaths finds `kubectl apply -k <path>` and `kubectl kustomize <path>`
// in a text.
var kubectlPaths = regexp.MustCompile(`kubectl (?:apply -k|kustomize|delete -k) +(deploy/k8s[A-Za-z0-9._/-]*)`)

// TestDocumentedKustomizations checks that every kustomization the READMEs
// and the kustomization files name with `kubectl apply -k` exists (and is
// rendered by TestRenderAll), and every kustomization is named somewhere.
func TestDocumentedKustomizations(t *testing.T) {
	root := repoRoot(t)
	files := []string{filepath.Join(root, "README.md"), filepath.Join(k8sDir(t), "README.md")}
	for _, dir := range kustomizationDirs(t) {
		files = append(files, filepath.Join(k8sDir(t), filepath.FromSlash(dir), "kustomization.yaml"))
	}
	named := map[string]bool{}
	for _, f := range files {
		for _, m := range kubectlPaths.FindAllStringSubmatch(readFile(t, f), -1) {
			p := strings.TrimSuffix(strings.TrimPrefix(m[1], "deploy/k8s/"), "/")
			if _, ok := kustomizations[p]; !ok {
				t.Errorf("%s: %q names %s, which is not a kustomization of deploy/k8s", f, m[0], m[1])
			}
			named[p] = true
		}
	}
	for dir := range kustomizations {
		if !named[dir] {
			t.Errorf("no README or kustomization comment says `kubectl apply -k deploy/k8s/%s`", dir)
		}
	}
}
