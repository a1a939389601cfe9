package k8s_test

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The README's kustomizations (YAML blocks whose first line names a file
// under deploy/k8s/overlays/<name>/) are rendered too, on an in-memory copy
// of deploy/k8s, so what the README tells an operator to write works.

// snippetBlock matches a fenced yaml block of the README and its first
// line, `# deploy/k8s/<path>`.
var snippetBlock = regexp.MustCompile("(?ms)^```yaml\n# deploy/k8s/(overlays/[a-z0-9.-]+/[a-z0-9.-]+\\.yaml)\n(.*?)^```\n")

// readmeSnippets returns the README's files by path (relative to
// deploy/k8s).
func readmeSnippets(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range snippetBlock.FindAllStringSubmatch(readFile(t, filepath.Join(k8sDir(t), "README.md")), -1) {
		if _, dup := out[m[1]]; dup {
			t.Errorf("README: two blocks for %s", m[1])
		}
		out[m[1]] = "# " + m[1] + "\n" + m[2]
	}
	return out
}

// memCopy copies deploy/k8s's YAML files into an in-memory file system
// under /k8s, with extra files (relative paths) added.
func memCopy(t *testing.T, extra map[string]string) filesys.FileSystem {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	root := k8sDir(t)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || (!strings.HasSuffix(p, ".yaml") && !strings.HasSuffix(p, ".yml")) {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return fsys.WriteFile(path.Join("/k8s", filepath.ToSlash(rel)), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	for rel, content := range extra {
		if err := fsys.WriteFile(path.Join("/k8s", rel), []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	return fsys
}

// snippetChecks: what each README kustomization must render, beyond the
// invariants of every deployment (checkRendered with the base's expect).
var snippetChecks = map[string]func(t *testing.T, r *rendered){
	// Both images rewritten to a digest.
	"overlays/my-agent-pinned": func(t *testing.T, r *rendered) {
		spec := r.deploy.Spec.Template.Spec
		for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
			name, digest, ok := strings.Cut(c.Image, "@sha256:")
			if !ok || len(digest) != 64 || strings.Contains(name[strings.LastIndex(name, "/")+1:], ":") {
				t.Errorf("container %s: image %q is not pinned by digest (name@sha256:<64 hex>, no tag)", c.Name, c.Image)
			}
			if !strings.HasPrefix(name, "registry.example.com/") {
				t.Errorf("container %s: image %q not renamed", c.Name, c.Image)
			}
		}
	},
	// The data directory on the claim, one pod at a time.
	"overlays/my-agent-pvc": func(t *testing.T, r *rendered) {
		spec := r.deploy.Spec.Template.Spec
		m := mountAt(r.sidecar, dataDir)
		if m == nil {
			t.Fatalf("no mount at %s", dataDir)
		}
		v := volumeNamed(&spec, m.Name)
		if v == nil || v.PersistentVolumeClaim == nil || v.EmptyDir != nil {
			t.Fatalf("volume %s = %+v, want the PersistentVolumeClaim alone", m.Name, v)
		}
		pvcs := all[*corev1.PersistentVolumeClaim](r.docs)
		if len(pvcs) != 1 || pvcs[0].Name != v.PersistentVolumeClaim.ClaimName {
			t.Errorf("claim %q is not the rendered PersistentVolumeClaim (%d rendered)", v.PersistentVolumeClaim.ClaimName, len(pvcs))
		}
		if st := r.deploy.Spec.Strategy; st.Type != appsv1.RecreateDeploymentStrategyType || st.RollingUpdate != nil {
			t.Errorf("strategy %+v, want Recreate (a ReadWriteOnce volume, one writer)", st)
		}
		if len(pvcs) == 1 && (len(pvcs[0].Spec.AccessModes) != 1 || pvcs[0].Spec.AccessModes[0] != corev1.ReadWriteOnce) {
			t.Errorf("claim access modes %v, want [ReadWriteOnce]", pvcs[0].Spec.AccessModes)
		}
	},
}

// TestReadmeKustomizations renders every kustomization the README writes
// out, and checks each against the invariants and its purpose.
func TestReadmeKustomizations(t *testing.T) {
	files := readmeSnippets(t)
	dirs := map[string]bool{}
	for p := range files {
		dirs[path.Dir(p)] = true
	}
	var got, want []string
	for d := range dirs {
		got = append(got, d)
	}
	for d := range snippetChecks {
		want = append(want, d)
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("README kustomizations %q, checked %q: describe each in snippetChecks", got, want)
	}
	fsys := memCopy(t, files)
	for _, dir := range got {
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			if _, ok := kustomizations[dir]; ok {
				t.Fatalf("README block %s shadows a shipped kustomization", dir)
			}
			docs, err := renderFS(fsys, "/k8s/"+dir)
			if err != nil {
				t.Fatal(err)
			}
			checkRendered(t, dir, docs, kustomizations["base"])
			if check := snippetChecks[dir]; check != nil {
				check(t, newRendered(t, dir, docs))
			}
		})
	}
}

// onAnotherBase renders a shipped overlay with another kustomization in
// place of ../../base, as the overlays' comments and the README say to
// combine them.
func onAnotherBase(t *testing.T, overlay, other string) []doc {
	t.Helper()
	k := readFile(t, filepath.Join(k8sDir(t), filepath.FromSlash(overlay), "kustomization.yaml"))
	if strings.Count(k, "  - ../../base\n") != 1 {
		t.Fatalf("%s/kustomization.yaml does not list ../../base once", overlay)
	}
	k = strings.Replace(k, "  - ../../base\n", "  - ../../"+other+"\n", 1)
	extra := map[string]string{"overlays/combined/kustomization.yaml": k}
	// The overlay's own files, next to the copied kustomization.
	for _, f := range yamlFiles(t, filepath.Join(k8sDir(t), filepath.FromSlash(overlay))) {
		if f != "kustomization.yaml" {
			extra["overlays/combined/"+f] = readFile(t, filepath.Join(k8sDir(t), filepath.FromSlash(overlay), f))
		}
	}
	docs, err := renderFS(memCopy(t, extra), "/k8s/overlays/combined")
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// TestOverlaysCombine: before-1.29 and metrics on the Redis overlay.
func TestOverlaysCombine(t *testing.T) {
	t.Run("before-1.29 on redis-idempotency", func(t *testing.T) {
		exp := kustomizations["overlays/redis-idempotency"]
		exp.native = false
		checkRendered(t, "before-1.29 on redis", onAnotherBase(t, "overlays/before-1.29", "overlays/redis-idempotency"), exp)
	})
	t.Run("metrics on redis-idempotency", func(t *testing.T) {
		exp := kustomizations["overlays/redis-idempotency"]
		exp.monitoring = true
		checkRendered(t, "metrics on redis", onAnotherBase(t, "overlays/metrics", "overlays/redis-idempotency"), exp)
	})
}

// TestNamespaceExample: the example namespace enforces Pod Security
// "restricted" (the profile the pod is written for).
func TestNamespaceExample(t *testing.T) {
	nss := all[*corev1.Namespace](examples(t))
	if len(nss) != 1 {
		t.Fatalf("%d example Namespaces, want 1 (base/namespace.example.yaml)", len(nss))
	}
	if l := nss[0].Labels; l["pod-security.kubernetes.io/enforce"] != "restricted" || l["pod-security.kubernetes.io/enforce-version"] == "" {
		t.Errorf("namespace %s labels %v: want pod-security.kubernetes.io/enforce: restricted and an enforce-version", nss[0].Name, l)
	}
}
