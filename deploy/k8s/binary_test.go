package k8s_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The sidecar binary used by every adapt test is built once per `go test`
// run, exactly as the Dockerfile builds it (same environment and flags,
// parsed from the Dockerfile), so the configurations are checked against the
// binary that ships.

var (
	tmpDir string // removed by TestMain

	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "supervaizer-deploy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tmpDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error
)

// repoRoot is the directory of the module's go.mod (`go env GOMOD`).
func repoRoot(t testing.TB) string {
	t.Helper()
	rootOnce.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			rootErr = fmt.Errorf("go env GOMOD: %v", err)
			return
		}
		gomod := strings.TrimSpace(string(out))
		if gomod == "" || gomod == os.DevNull {
			rootErr = fmt.Errorf("go env GOMOD: not in a module")
			return
		}
		rootDir = filepath.Dir(gomod)
	})
	if rootErr != nil {
		t.Fatal(rootErr)
	}
	return rootDir
}

// sidecarBinary builds ./cmd/supervaizer-sidecar with the Dockerfile's go
// build line (once) and returns its path.
func sidecarBinary(t testing.TB) string {
	t.Helper()
	root := repoRoot(t)
	buildOnce.Do(func() {
		spec, err := dockerGoBuild(filepath.Join(root, "Dockerfile"))
		if err != nil {
			buildErr = err
			return
		}
		bin := filepath.Join(tmpDir, "supervaizer-sidecar")
		args := append([]string{"build"}, spec.Flags...)
		args = append(args, "-o", bin, spec.Package)
		var out []byte
		for attempt := 0; attempt < 2; attempt++ {
			cmd := exec.Command("go", args...)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), spec.Env...)
			out, err = cmd.CombinedOutput()
			// A build cache shared with concurrent go commands can lose an
			// entry under a running build ("could not import sort (open :
			// no such file or directory)"); one retry rebuilds it.
			if err == nil || !bytes.Contains(out, []byte("no such file or directory")) {
				break
			}
		}
		if err != nil {
			buildErr = fmt.Errorf("%s go %s: %v\n%s", strings.Join(spec.Env, " "), strings.Join(args, " "), err, out)
			return
		}
		buildBin = bin
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// adaptEnv is the environment the configurations are adapted with: the
// settings a deployment gives through the environment, a JWKS URL on a
// loopback port where nothing listens (the sidecar must start with the
// JWKS down and fail closed), and private Caddy data/config dirs. Inherited
// SUPERVAIZER_* and XDG_* variables are dropped so the result does not
// depend on the caller's shell.
func adaptEnv(t testing.TB, extra ...string) []string {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SUPERVAIZER_") || strings.HasPrefix(kv, "XDG_") {
			continue
		}
		env = append(env, kv)
	}
	dir := t.TempDir()
	env = append(env,
		"SUPERVAIZER_API_KEY=test",
		"SUPERVAIZER_SERVER_ID=srv",
		"SUPERVAIZER_WORKSPACE_AUTH_REQUIRED=true",
		"SUPERVAIZER_WORKSPACE_AUTH_ISSUER=https://studio.test",
		"SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL=http://127.0.0.1:9/jwks.json",
		"XDG_DATA_HOME="+filepath.Join(dir, "data"),
		"XDG_CONFIG_HOME="+filepath.Join(dir, "config"),
	)
	return append(env, extra...)
}

// adapt runs `<bin> adapt --config file --adapter caddyfile [--validate]`
// and returns the adapted JSON config, or an error carrying stderr.
func adapt(t testing.TB, file string, validate bool, env []string) (map[string]any, error) {
	t.Helper()
	bin := sidecarBinary(t)
	args := []string{"adapt", "--config", file, "--adapter", "caddyfile"}
	if validate {
		args = append(args, "--validate")
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Dir = filepath.Dir(file)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %v\nstderr:\n%s", bin, strings.Join(args, " "), err, stderr.String())
	}
	var cfg map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &cfg); err != nil {
		return nil, fmt.Errorf("adapt output is not JSON: %v\n%s", err, stdout.String())
	}
	return cfg, nil
}

// checkFormatted fails unless `caddy fmt` leaves the Caddyfile unchanged
// (an unformatted Caddyfile makes the sidecar log a warning at every start).
func checkFormatted(t *testing.T, file string) {
	t.Helper()
	out, err := exec.Command(sidecarBinary(t), "fmt", file).Output()
	if err != nil {
		t.Fatalf("fmt %s: %v", file, err)
	}
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, src) {
		t.Errorf("%s is not caddy-fmt formatted; expected:\n%s", file, out)
	}
}

// writeTemp writes content to a new file in the test's temp dir.
func writeTemp(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// --- navigation in an adapted Caddy JSON config ---

func jpath(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// handlers lists every HTTP handler object of the config, in route order
// (subroutes flattened).
func handlers(cfg map[string]any) []map[string]any {
	var out []map[string]any
	var walkRoutes func(routes any)
	walkRoutes = func(routes any) {
		rs, _ := routes.([]any)
		for _, r := range rs {
			hs, _ := jpath(r, "handle").([]any)
			for _, h := range hs {
				hm, ok := h.(map[string]any)
				if !ok {
					continue
				}
				out = append(out, hm)
				if hm["handler"] == "subroute" {
					walkRoutes(hm["routes"])
				}
			}
		}
	}
	servers, _ := jpath(cfg, "apps", "http", "servers").(map[string]any)
	for _, s := range servers {
		walkRoutes(jpath(s, "routes"))
	}
	return out
}

// checkAdaptedGate checks the common shape of an adapted sidecar config:
// one gate server listening on :8080 (and at most a metrics server beside
// it, see checkMetricsServer), automatic HTTPS off, the supervaizer_auth
// handler before a reverse_proxy to 127.0.0.1:8000 without a flush_interval
// (Caddy streams event streams by itself; docs/streaming.md),
// the admin API off, and no transport key written into the config (it
// comes from the environment).
func checkAdaptedGate(t *testing.T, name string, cfg map[string]any) {
	t.Helper()
	servers, _ := jpath(cfg, "apps", "http", "servers").(map[string]any)
	gates := 0
	for sname, s := range servers {
		listen, _ := jpath(s, "listen").([]any)
		if isMetricsServer(s) {
			if slices.Contains(listen, any(":8080")) {
				t.Errorf("%s: the metrics server %s listens on the gate's port", name, sname)
			}
		} else {
			gates++
			if len(listen) != 1 || listen[0] != ":8080" {
				t.Errorf("%s: server %s listens on %v, want [:8080]", name, sname, listen)
			}
		}
		if tls := jpath(s, "tls_connection_policies"); tls != nil {
			t.Errorf("%s: server %s terminates TLS (%v); TLS is terminated before the pod", name, sname, tls)
		}
		if jpath(s, "automatic_https", "disable") != true {
			t.Errorf("%s: server %s: automatic HTTPS is not disabled (auto_https off)", name, sname)
		}
	}
	if gates != 1 {
		t.Errorf("%s: %d gate servers (besides a metrics server), want 1", name, gates)
	}
	if jpath(cfg, "admin", "disabled") != true {
		t.Errorf("%s: admin API is not disabled", name)
	}
	auth, proxy := -1, -1
	for i, h := range handlers(cfg) {
		switch h["handler"] {
		case "supervaizer_auth":
			if auth >= 0 {
				t.Errorf("%s: supervaizer_auth configured twice", name)
			}
			auth = i
			if _, ok := h["api_keys"]; ok {
				t.Errorf("%s: api_key written in the Caddyfile; leave it to $SUPERVAIZER_API_KEY (from the Secret)", name)
			}
			if lm, ok := h["local_mode"]; ok && lm == true {
				t.Errorf("%s: local_mode on in a deployment configuration", name)
			}
			agents, _ := h["agents"].(map[string]any)
			if len(agents) == 0 {
				t.Errorf("%s: supervaizer_auth serves no agent", name)
			}
			for slug, id := range agents {
				if s, _ := id.(string); s == "" {
					t.Errorf("%s: agent %q has no Studio agent id", name, slug)
				}
			}
			if h["upstream"] != "http://"+agentLoopAddr {
				t.Errorf("%s: supervaizer_auth upstream = %v, want http://%s (agent cards, readiness)", name, h["upstream"], agentLoopAddr)
			}
			if h["other_routes"] != "deny" {
				t.Errorf("%s: other_routes = %v, want deny", name, h["other_routes"])
			}
		case "reverse_proxy":
			if proxy >= 0 {
				t.Errorf("%s: more than one reverse_proxy", name)
			}
			proxy = i
			ups, _ := h["upstreams"].([]any)
			if len(ups) != 1 || jpath(ups[0], "dial") != agentLoopAddr {
				t.Errorf("%s: reverse_proxy upstreams = %v, want the agent on %s only", name, ups, agentLoopAddr)
			}
			if fi, set := h["flush_interval"]; set {
				t.Errorf("%s: reverse_proxy flush_interval = %v, want none: Caddy flushes event streams by itself, "+
					"and a fixed interval costs every JSON answer a second write (docs/streaming.md)", name, fi)
			}
		}
	}
	if auth < 0 || proxy < 0 || auth > proxy {
		t.Errorf("%s: want supervaizer_auth (at %d) before reverse_proxy (at %d)", name, auth, proxy)
	}
}

// serverHandlers lists the handler names of one server's routes
// (subroutes flattened).
func serverHandlers(server any) []string {
	var out []string
	var walk func(routes any)
	walk = func(routes any) {
		rs, _ := routes.([]any)
		for _, r := range rs {
			hs, _ := jpath(r, "handle").([]any)
			for _, h := range hs {
				name, _ := jpath(h, "handler").(string)
				out = append(out, name)
				if name == "subroute" {
					walk(jpath(h, "routes"))
				}
			}
		}
	}
	walk(jpath(server, "routes"))
	return out
}

// isMetricsServer: a server whose routes only serve metrics (and answer
// anything else with a static response).
func isMetricsServer(server any) bool {
	hs := serverHandlers(server)
	if !slices.Contains(hs, "metrics") {
		return false
	}
	for _, h := range hs {
		if h != "metrics" && h != "subroute" && h != "static_response" {
			return false
		}
	}
	return true
}

// checkMetricsServer checks the metrics site of a deployment Caddyfile: one
// server on :9180 (every interface: Prometheus scrapes the pod's address;
// no admin API needed), serving metrics under /metrics only.
func checkMetricsServer(t *testing.T, name string, cfg map[string]any) {
	t.Helper()
	servers, _ := jpath(cfg, "apps", "http", "servers").(map[string]any)
	n := 0
	for sname, s := range servers {
		if !isMetricsServer(s) {
			continue
		}
		n++
		listen, _ := jpath(s, "listen").([]any)
		if want := fmt.Sprintf(":%d", metricsPort); len(listen) != 1 || listen[0] != want {
			t.Errorf("%s: metrics server %s listens on %v, want [%s] (not loopback: Prometheus scrapes the pod)", name, sname, listen, want)
		}
		if j, _ := json.Marshal(s); !strings.Contains(string(j), `"path":["`+metricsPath+`"]`) {
			t.Errorf("%s: metrics server %s does not route %s: %s", name, sname, metricsPath, j)
		}
	}
	if n != 1 {
		t.Errorf("%s: %d metrics servers, want 1 (a site with the metrics handler on :%d)", name, n, metricsPort)
	}
}

// checkAccessLogFilters checks that every access log configured deletes the
// Supervaizer credentials, which Caddy does not redact by itself.
func checkAccessLogFilters(t *testing.T, name string, cfg map[string]any) (accessLogs int) {
	t.Helper()
	logs, _ := jpath(cfg, "logging", "logs").(map[string]any)
	for lname, l := range logs {
		incl, _ := jpath(l, "include").([]any)
		access := false
		for _, i := range incl {
			if s, _ := i.(string); strings.HasPrefix(s, "http.log.access") {
				access = true
			}
		}
		if !access {
			continue
		}
		accessLogs++
		if jpath(l, "encoder", "format") != "filter" {
			t.Errorf("%s: access log %s has no filter encoder", name, lname)
			continue
		}
		for _, h := range []string{"X-Api-Key", "X-Supervaize-Workspace-Authorization"} {
			if f := jpath(l, "encoder", "fields", "request>headers>"+h, "filter"); f != "delete" {
				t.Errorf("%s: access log %s does not delete request header %s (filter %v)", name, lname, h, f)
			}
		}
	}
	return accessLogs
}
