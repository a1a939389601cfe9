package k8s_test

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// No container engine runs here: these tests check the Dockerfile's text and
// build what can be built, the binary, exactly as its go build line does.

// dockerInstr is one Dockerfile instruction, continuation lines joined.
type dockerInstr struct {
	Line int    // 1-based line of the instruction's start
	Cmd  string // upper case: FROM, RUN, ...
	Args string
}

func parseDockerfile(path string) ([]dockerInstr, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []dockerInstr
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(string(src), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue // blank line or comment (parser directives included)
		}
		if cur.Len() > 0 && strings.HasPrefix(trimmed, "#") {
			continue // comment inside a continued instruction
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\"))
			cur.WriteString(" ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, dockerInstr{Line: start, Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args)})
		cur.Reset()
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("%s: instruction at line %d ends with a continuation", path, start)
	}
	return out, nil
}

// dockerStage is one FROM ... block.
type dockerStage struct {
	Image, Name string
	Instrs      []dockerInstr
}

func dockerStages(instrs []dockerInstr) []dockerStage {
	var stages []dockerStage
	for _, in := range instrs {
		if in.Cmd == "FROM" {
			f := strings.Fields(in.Args)
			s := dockerStage{}
			for _, w := range f {
				if strings.HasPrefix(w, "--") {
					continue // --platform=...
				}
				if s.Image == "" {
					s.Image = w
				}
			}
			if len(f) >= 3 && strings.EqualFold(f[len(f)-2], "AS") {
				s.Name = f[len(f)-1]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].Instrs = append(stages[len(stages)-1].Instrs, in)
		}
	}
	return stages
}

// goBuildSpec is the Dockerfile's go build invocation.
type goBuildSpec struct {
	Env     []string // NAME=value assignments before `go build` (build-arg ones dropped)
	Flags   []string // go build flags, without -o
	Output  string   // -o value
	Package string
	Stage   string
}

// dockerGoBuild finds the single `RUN ... go build ...` of the Dockerfile and
// splits it like sh would (quotes, assignments).
func dockerGoBuild(path string) (*goBuildSpec, error) {
	instrs, err := parseDockerfile(path)
	if err != nil {
		return nil, err
	}
	var spec *goBuildSpec
	for _, st := range dockerStages(instrs) {
		for _, in := range st.Instrs {
			if in.Cmd != "RUN" || !strings.Contains(in.Args, "go build") {
				continue
			}
			if spec != nil {
				return nil, fmt.Errorf("Dockerfile:%d: more than one go build", in.Line)
			}
			words, err := shellWords(in.Args)
			if err != nil {
				return nil, fmt.Errorf("Dockerfile:%d: %v", in.Line, err)
			}
			for len(words) > 0 && strings.HasPrefix(words[0], "--") {
				words = words[1:] // RUN --mount=...
			}
			s := &goBuildSpec{Stage: st.Name}
			for len(words) > 0 && regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`).MatchString(words[0]) {
				if !strings.Contains(words[0], "$") {
					s.Env = append(s.Env, words[0])
				} // GOOS=$TARGETOS etc.: the builder's platform; here the host's
				words = words[1:]
			}
			if len(words) < 2 || words[0] != "go" || words[1] != "build" {
				return nil, fmt.Errorf("Dockerfile:%d: want [VAR=value ...] go build ..., got %q", in.Line, in.Args)
			}
			rest := words[2:]
			for i := 0; i < len(rest); i++ {
				w := rest[i]
				switch {
				case w == "&&" || w == ";" || w == "|":
					return nil, fmt.Errorf("Dockerfile:%d: keep the go build alone on its RUN line", in.Line)
				case w == "-o":
					if i+1 >= len(rest) {
						return nil, fmt.Errorf("Dockerfile:%d: -o without a value", in.Line)
					}
					s.Output = rest[i+1]
					i++
				case strings.HasPrefix(w, "-o="):
					s.Output = strings.TrimPrefix(w, "-o=")
				case strings.HasPrefix(w, "-"):
					s.Flags = append(s.Flags, w)
					if (w == "-ldflags" || w == "-tags" || w == "-gcflags") && i+1 < len(rest) {
						s.Flags = append(s.Flags, rest[i+1])
						i++
					}
				default:
					if s.Package != "" {
						return nil, fmt.Errorf("Dockerfile:%d: more than one package: %q, %q", in.Line, s.Package, w)
					}
					s.Package = w
				}
			}
			spec = s
		}
	}
	if spec == nil {
		return nil, fmt.Errorf("%s: no RUN ... go build", path)
	}
	return spec, nil
}

// shellWords splits s like a POSIX shell would for a simple command: blanks
// separate words, single and double quotes group, backslash escapes.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated \" in %q", s)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

func TestShellWords(t *testing.T) {
	got, err := shellWords(`CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o '/out/a b' ./cmd/x`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"CGO_ENABLED=0", "go", "build", "-trimpath", "-ldflags=-s -w", "-o", "/out/a b", "./cmd/x"}
	if !slices.Equal(got, want) {
		t.Errorf("shellWords = %q, want %q", got, want)
	}
}

// TestDockerfile checks the Dockerfile's stages: a golang builder matching
// go.mod's Go version, a CGO-free trimmed and stripped build of the sidecar
// command, and a final non-root distroless (or scratch) stage that copies
// that binary and runs it on the mounted Caddyfile.
func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	dockerfile := filepath.Join(root, "Dockerfile")
	instrs, err := parseDockerfile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	stages := dockerStages(instrs)
	if len(stages) < 2 {
		t.Fatalf("want a multi-stage Dockerfile, got %d stage(s)", len(stages))
	}
	spec, err := dockerGoBuild(dockerfile)
	if err != nil {
		t.Fatal(err)
	}

	// Builder: golang:<go.mod's major.minor>.
	var builder *dockerStage
	for i := range stages {
		if stages[i].Name != "" && stages[i].Name == spec.Stage {
			builder = &stages[i]
		}
	}
	if builder == nil {
		t.Fatalf("the go build is not in a named stage")
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+)\.(\d+)`).FindStringSubmatch(string(gomod))
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	if want := "golang:" + m[1] + "." + m[2]; builder.Image != want && !strings.HasPrefix(builder.Image, want+".") && !strings.HasPrefix(builder.Image, want+"-") {
		t.Errorf("builder image %q does not match go.mod's go %s.%s (want %s)", builder.Image, m[1], m[2], want)
	}

	// The build line.
	if !slices.Contains(spec.Env, "CGO_ENABLED=0") {
		t.Errorf("go build env %q lacks CGO_ENABLED=0 (static binary)", spec.Env)
	}
	if !slices.Contains(spec.Flags, "-trimpath") {
		t.Errorf("go build flags %q lack -trimpath", spec.Flags)
	}
	ldflags := ""
	for i, f := range spec.Flags {
		switch {
		case strings.HasPrefix(f, "-ldflags="):
			ldflags = strings.TrimPrefix(f, "-ldflags=")
		case f == "-ldflags" && i+1 < len(spec.Flags):
			ldflags = spec.Flags[i+1]
		}
	}
	if lf := strings.Fields(ldflags); !slices.Contains(lf, "-s") || !slices.Contains(lf, "-w") {
		t.Errorf("go build -ldflags %q: want -s -w", ldflags)
	}
	if spec.Package != "./cmd/supervaizer-sidecar" {
		t.Errorf("go build package %q, want ./cmd/supervaizer-sidecar", spec.Package)
	}
	if spec.Output == "" {
		t.Fatal("go build has no -o")
	}

	// Final stage.
	final := stages[len(stages)-1]
	switch final.Image {
	case "gcr.io/distroless/static-debian12:nonroot", "scratch":
	default:
		t.Errorf("final stage image %q, want gcr.io/distroless/static-debian12:nonroot or scratch", final.Image)
	}
	var user, entrypoint string
	var exposed []string
	binPath := ""
	for _, in := range final.Instrs {
		switch in.Cmd {
		case "USER":
			user = in.Args
		case "EXPOSE":
			exposed = append(exposed, strings.Fields(in.Args)...)
		case "ENTRYPOINT":
			entrypoint = in.Args
		case "COPY":
			f := strings.Fields(in.Args)
			if len(f) == 3 && f[0] == "--from="+spec.Stage && f[1] == spec.Output {
				binPath = f[2]
			}
		case "RUN":
			t.Errorf("Dockerfile:%d: RUN in the final stage (distroless has no shell)", in.Line)
		}
	}
	if user != "65532:65532" {
		t.Errorf("final stage USER %q, want 65532:65532", user)
	}
	if uid, _, _ := strings.Cut(user, ":"); uid == "" || uid == "root" || uid == "0" {
		t.Errorf("final stage runs as root (USER %q)", user)
	} else if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("final stage USER %q: want a numeric non-root UID (runAsNonRoot needs one)", user)
	}
	if !slices.Contains(exposed, "8080") && !slices.Contains(exposed, "8080/tcp") {
		t.Errorf("final stage EXPOSE %q lacks 8080", exposed)
	}
	if binPath == "" {
		t.Fatalf("final stage does not COPY --from=%s %s", spec.Stage, spec.Output)
	}
	var ep []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil {
		t.Fatalf("ENTRYPOINT %q is not exec (JSON) form: %v", entrypoint, err)
	}
	if want := []string{binPath, "run", "--config", "/etc/supervaizer/Caddyfile", "--adapter", "caddyfile"}; !slices.Equal(ep, want) {
		t.Errorf("ENTRYPOINT %q, want %q", ep, want)
	}
}

// TestDockerBinaryStatic builds the binary with the Dockerfile's go build
// line and checks it is a static, stripped ELF (it must run on
// distroless/static or scratch: no dynamic loader, no shared libraries).
func TestDockerBinaryStatic(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("ELF checks need a linux build, not %s", runtime.GOOS)
	}
	bin := sidecarBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("binary has a PT_INTERP program header: dynamically linked")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) != 0 {
		t.Errorf("binary needs shared libraries (DT_NEEDED): %q", libs)
	}
	if f.Section(".symtab") != nil {
		t.Errorf("binary has a symbol table: -ldflags=-s not applied")
	}
	// The binary runs (static, on this host) and is Caddy.
	if _, err := adapt(t, writeTemp(t, "Caddyfile", ":8080 {\n\trespond ok\n}\n"), false, adaptEnv(t)); err != nil {
		t.Errorf("built binary does not run: %v", err)
	}
}

// TestDockerignore checks the build context leaves out build outputs, VCS
// data and benchmark results.
func TestDockerignore(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot(t), ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(src), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		patterns = append(patterns, strings.TrimSuffix(strings.TrimPrefix(l, "/"), "/"))
	}
	for _, want := range []string{".git", "bin", "bench/results"} {
		if !slices.Contains(patterns, want) {
			t.Errorf(".dockerignore does not exclude %s (patterns %q)", want, patterns)
		}
	}
	// Key material, at any depth: keygen's private key (keys/), *.key,
	// *.pem.
	for _, p := range []string{"keys/studio-signing.key", "keys/jwks.json", "examples/keys/x.pub",
		"server_key.pem", "deploy/k8s/tls.key", "a/b/c.pem"} {
		if !dockerignored(patterns, p) {
			t.Errorf(".dockerignore lets %s into the build context (patterns %q)", p, patterns)
		}
	}
	for _, p := range patterns {
		if strings.HasPrefix(p, "!") {
			t.Errorf(".dockerignore re-includes %q: keep the context simple", p)
		}
		for _, needed := range []string{"go.mod", "go.sum", "cmd", "caddymodule"} {
			if p == needed || p == "*" || p == "**" {
				t.Errorf(".dockerignore excludes %q, which the build needs", p)
			}
		}
	}
}

// dockerignored reports whether a slash-separated path of the build
// context is excluded by the patterns (Docker's rules for the forms used
// here: filepath.Match per pattern, "**/" for any leading directories, a
// directory pattern excluding everything under it).
func dockerignored(patterns []string, p string) bool {
	for _, pat := range patterns {
		cands := []string{pat}
		if rest, ok := strings.CutPrefix(pat, "**/"); ok {
			cands = []string{rest}
			for i := 0; i < len(p); i++ {
				if p[i] == '/' {
					cands = append(cands, p[:i+1]+rest)
				}
			}
		}
		for _, c := range cands {
			for q := p; q != "."; q = filepath.ToSlash(filepath.Dir(q)) {
				if ok, _ := filepath.Match(c, q); ok {
					return true
				}
			}
		}
	}
	return false
}

func TestDockerignored(t *testing.T) {
	pats := []string{"bin", "*.key", "**/*.pem", "keys"}
	for p, want := range map[string]bool{
		"bin/x": true, "a.key": true, "d/a.key": false, "a.pem": true, "d/e/a.pem": true,
		"keys/k": true, "cmd/main.go": false, "keysx": false,
	} {
		if got := dockerignored(pats, p); got != want {
			t.Errorf("dockerignored(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestDockerContextHasBuildInputs lists every file of this module the
// Dockerfile's go build reads (go.mod, go.sum, Go and embedded files of
// the packages it builds) and checks .dockerignore excludes none: the
// image builds without keys/, *.key or *.pem.
func TestDockerContextHasBuildInputs(t *testing.T) {
	root := repoRoot(t)
	spec, err := dockerGoBuild(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(readFile(t, filepath.Join(root, ".dockerignore")), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, strings.TrimSuffix(strings.TrimPrefix(l, "/"), "/"))
		}
	}
	cmd := exec.Command("go", "list", "-deps", "-f", `{{if .Module}}{{if .Module.Main}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}{{end}}{{end}}`, spec.Package)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), spec.Env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	files := []string{"go.mod", "go.sum"}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		rel, err := filepath.Rel(root, f[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range f[1:] {
			files = append(files, filepath.ToSlash(filepath.Join(rel, name)))
		}
	}
	if len(files) < 10 {
		t.Fatalf("go list found only %q", files)
	}
	for _, f := range files {
		if dockerignored(patterns, f) {
			t.Errorf(".dockerignore excludes %s, which the Dockerfile's go build reads", f)
		}
	}
}

// dockerImageArgv returns the final stage's ENTRYPOINT and CMD (exec form).
func dockerImageArgv(t testing.TB) (entrypoint, cmd []string) {
	t.Helper()
	instrs, err := parseDockerfile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages := dockerStages(instrs)
	for _, in := range stages[len(stages)-1].Instrs {
		var dst *[]string
		switch in.Cmd {
		case "ENTRYPOINT":
			dst = &entrypoint
		case "CMD":
			dst = &cmd
		default:
			continue
		}
		if err := json.Unmarshal([]byte(in.Args), dst); err != nil {
			t.Fatalf("Dockerfile:%d: %s is not in exec (JSON) form: %v", in.Line, in.Cmd, err)
		}
	}
	return entrypoint, cmd
}

// dockerBinPath is where the final stage puts the sidecar binary.
func dockerBinPath(t testing.TB) string {
	t.Helper()
	ep, _ := dockerImageArgv(t)
	if len(ep) == 0 {
		t.Fatal("Dockerfile: no ENTRYPOINT")
	}
	return ep[0]
}

// containerArgv is the argv a container of the sidecar image runs, by the
// Kubernetes rules: command replaces ENTRYPOINT and drops CMD; args
// replace CMD.
func containerArgv(t testing.TB, c *corev1.Container) []string {
	t.Helper()
	ep, cmd := dockerImageArgv(t)
	if len(c.Command) > 0 {
		ep, cmd = c.Command, nil
	}
	if len(c.Args) > 0 {
		cmd = c.Args
	}
	return append(slices.Clone(ep), cmd...)
}
