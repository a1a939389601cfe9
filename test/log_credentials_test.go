package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The shipped configurations must keep the transport key and the workspace
// token out of every log line, whoever writes it (docs/logging.md): Caddy's
// error log when the agent is unreachable, reverse_proxy's "aborting with
// incomplete response" when a proxied stream ends early, the access log, the
// gate's own lines. These tests run each shipped Caddyfile, as shipped, in
// the real binary (this test binary re-executed as Caddy's main), with only
// what a deployment changes: listen ports and the agent's address moved to
// free loopback ports, the agent line a user edits, file paths, and HTTP/2
// without TLS (h2c) switched on so that streams can end early over HTTP/2
// too. Every byte the process writes (stdout and stderr: the default,
// access and audit logs) is searched for the credentials.

// shippedConfig is one shipped Caddyfile and how to run it here.
type shippedConfig struct {
	name string
	// text returns the Caddyfile to run with the gate on port, the metrics
	// site (if any) on mport, the agent at agentAddr, files under dir.
	text func(t *testing.T, port, mport int, agentAddr, dir string) string
	// env is the environment the configuration expects.
	env func(jwksURL, apiKey, dir string) []string
	// claims: the issuer, server id, agent slug and agent id its tokens carry.
	issuer, serverID, agentID string
	local                     bool // local mode: /a2a needs no token
	jwks                      bool // the key source is a JWKS URL (POST /_sidecar/refresh can fail)
}

// shippedFile reads a file of the repository.
func shippedFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// configMapCaddyfile extracts the Caddyfile of a ConfigMap manifest
// (data: Caddyfile: |, indented four spaces).
func configMapCaddyfile(t *testing.T, rel string) string {
	t.Helper()
	src := shippedFile(t, rel)
	_, after, ok := strings.Cut(src, "  Caddyfile: |\n")
	if !ok {
		t.Fatalf("%s: no Caddyfile key", rel)
	}
	var out strings.Builder
	for _, l := range strings.Split(after, "\n") {
		if l != "" && !strings.HasPrefix(l, "    ") {
			break
		}
		out.WriteString(strings.TrimPrefix(l, "    ") + "\n")
	}
	return out.String()
}

// replaceAll replaces each old (which must be present) by its new value.
func replaceAll(t *testing.T, name, s string, pairs ...string) string {
	t.Helper()
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("%s: no %q", name, pairs[i])
		}
		s = strings.ReplaceAll(s, pairs[i], pairs[i+1])
	}
	return s
}

// withH2C switches on HTTP/2 without TLS (h1 and h2 stay on), in the
// config's global servers block if it has one.
func withH2C(t *testing.T, name, cf string) string {
	if strings.Contains(cf, "\n\tservers {\n") {
		return strings.Replace(cf, "\n\tservers {\n", "\n\tservers {\n\t\tprotocols h1 h2 h2c\n", 1)
	}
	return replaceAll(t, name, cf, "\tpersist_config off\n", "\tpersist_config off\n\tservers {\n\t\tprotocols h1 h2 h2c\n\t}\n")
}

func deploymentConfig(name, rel string) shippedConfig {
	return shippedConfig{
		name: name, issuer: testIssuer, serverID: testServerID, agentID: testAgentID, jwks: true,
		text: func(t *testing.T, port, mport int, agentAddr, dir string) string {
			var cf string
			if strings.HasSuffix(rel, ".yaml") {
				cf = configMapCaddyfile(t, rel)
				cf = replaceAll(t, name, cf,
					"\n:8080 {", fmt.Sprintf("\n:%d {\n\tbind 127.0.0.1", port),
					"\n:9180 {", fmt.Sprintf("\n:%d {\n\tbind 127.0.0.1", mport))
			} else {
				cf = shippedFile(t, rel)
				cf = replaceAll(t, name, cf, "http://:8080 {", fmt.Sprintf("http://:%d {\n\tbind 127.0.0.1", port))
			}
			cf = replaceAll(t, name, cf,
				"127.0.0.1:8000", agentAddr,
				"agent my_agent replace-with-studio-agent-id", "agent "+testAgent+" "+testAgentID)
			if strings.Contains(cf, "/var/lib/supervaizer/") {
				cf = strings.ReplaceAll(cf, "/var/lib/supervaizer/", dir+"/")
			}
			return withH2C(t, name, cf)
		},
		env: func(jwksURL, apiKey, _ string) []string {
			return []string{"SUPERVAIZER_API_KEY=" + apiKey, "SUPERVAIZER_SERVER_ID=" + testServerID,
				"SUPERVAIZER_WORKSPACE_AUTH_REQUIRED=true", "SUPERVAIZER_WORKSPACE_AUTH_ISSUER=" + testIssuer,
				"SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL=" + jwksURL}
		},
	}
}

func exampleConfig(file string, local bool) shippedConfig {
	c := shippedConfig{
		name: file, issuer: "https://studio.local", serverID: "local-server", agentID: "A", local: local,
		text: func(t *testing.T, _, _ int, _, _ string) string {
			return withH2C(t, file, shippedFile(t, "examples/"+file))
		},
	}
	c.env = func(_, apiKey, _ string) []string { return []string{"SUPERVAIZER_API_KEY=" + apiKey} }
	return c
}

// shippedConfigs are every Caddyfile the repository ships. The
// redis-idempotency overlay's Caddyfile is the base's with another
// idempotency block (deploy/k8s/manifests_test.go holds them to that), so its
// logging is the base's.
func shippedConfigs() []shippedConfig {
	return []shippedConfig{
		deploymentConfig("Caddyfile.example", "Caddyfile.example"),
		deploymentConfig("k8s base", "deploy/k8s/base/configmap-caddyfile.yaml"),
		exampleConfig("Caddyfile.local", true),
		exampleConfig("Caddyfile.token", false),
	}
}

// secretKey is a fresh transport key (recognizable, never reused).
func secretKey() string {
	b := make([]byte, 12)
	rand.Read(b)
	return "sk-" + hex.EncodeToString(b)
}

// TestShippedConfigsLogNoCredential runs every scenario that makes Caddy log
// a request's headers against each shipped configuration and finds neither
// the key nor the token (whole or its signature) in the process's output,
// and no start-up warning about an unfiltered log.
func TestShippedConfigsLogNoCredential(t *testing.T) {
	for _, c := range shippedConfigs() {
		t.Run(c.name, func(t *testing.T) {
			out, secrets := runLogScenarios(t, c, nil)
			assertNoCredential(t, out, secrets)
			if strings.Contains(out, "receives request headers") {
				t.Errorf("%s: start-up warning about an unfiltered log:\n%s", c.name, grepLines(out, "receives request headers"))
			}
			if !strings.Contains(out, `"logger":"http.log.error`) {
				t.Errorf("%s: no error-log line for the agent down: the scenarios did not make Caddy log a request", c.name)
			}
		})
	}
}

// TestShippedFilterHoldsWithReverseProxyLogs: with reverse_proxy's logger
// included again (the shipped exclusion is for speed), its "aborting with
// incomplete response" lines are written, request headers included, and the
// shipped filter still removes the credentials.
func TestShippedFilterHoldsWithReverseProxyLogs(t *testing.T) {
	for _, c := range []shippedConfig{deploymentConfig("k8s base", "deploy/k8s/base/configmap-caddyfile.yaml"), exampleConfig("Caddyfile.local", true)} {
		t.Run(c.name, func(t *testing.T) {
			out, secrets := runLogScenarios(t, c, func(t *testing.T, cf string) string {
				if strings.Contains(cf, "exclude http.handlers.reverse_proxy http.handlers.supervaizer_auth") {
					return replaceAll(t, c.name, cf, "exclude http.handlers.reverse_proxy http.handlers.supervaizer_auth", "exclude http.handlers.supervaizer_auth")
				}
				return replaceAll(t, c.name, cf, "\t\texclude http.handlers.reverse_proxy\n", "")
			})
			assertNoCredential(t, out, secrets)
			aborts := grepLines(out, "aborting with incomplete response")
			if !strings.Contains(aborts, `"headers":{`) {
				t.Errorf("%s: no reverse_proxy abort line with the request headers; got:\n%s", c.name, aborts)
			}
		})
	}
}

// TestUnfilteredLogLeaksAndIsWarned is the control: the k8s base with its
// filters naming other headers writes the credentials in full, and the
// gate warned at start-up, naming the log.
func TestUnfilteredLogLeaksAndIsWarned(t *testing.T) {
	c := deploymentConfig("k8s base", "deploy/k8s/base/configmap-caddyfile.yaml")
	out, secrets := runLogScenarios(t, c, func(t *testing.T, cf string) string {
		return replaceAll(t, c.name, cf,
			"request>headers>X-Api-Key delete", "request>headers>X-Other delete",
			"request>headers>X-Supervaize-Workspace-Authorization delete", "request>headers>X-Other-Too delete")
	})
	for _, s := range secrets {
		if !strings.Contains(out, s) {
			t.Errorf("unfiltered: %.12s… not in the output: the scenarios do not exercise the filters", s)
		}
	}
	warned := grepLines(out, "receives request headers")
	for _, log := range []string{"log default receives", "log log0 receives"} {
		if !strings.Contains(warned, log) {
			t.Errorf("no start-up warning %q; warnings:\n%s", log, warned)
		}
	}
}

// assertNoCredential fails on each secret found in out.
func assertNoCredential(t *testing.T, out string, secrets []string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("a credential (%.12s…) is in the logs:\n%s", s, grepLines(out, s))
		}
	}
}

// runLogScenarios runs c (edited by edit, if set) and drives the scenarios
// that log a request: a denied call, an allowed call, a proxied event
// stream ended early by the client and refused by the filter (HTTP/1.1 and
// HTTP/2), a failed refresh (JWKS configurations), and the agent down on
// every route class. It returns the process's whole output after a
// graceful stop (buffered logs drained) and the secrets to look for.
func runLogScenarios(t *testing.T, c shippedConfig, edit func(*testing.T, string) string) (string, []string) {
	t.Helper()
	ag := startAgent(t)
	ag.serveCard(200, cardFor(t, nil))
	ag.respond = eventsAgent
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	dir := t.TempDir()
	port, mport := freePort(t), freePort(t)
	cf := c.text(t, port, mport, ag.addr(), dir)
	if edit != nil {
		cf = edit(t, cf)
	}
	if err := os.MkdirAll(filepath.Join(dir, "keys"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "keys", "studio-signing.pub"), key.pem(t))
	cfPath := filepath.Join(dir, "Caddyfile")
	writeFile(t, cfPath, cf)

	apiKey := secretKey()
	env := append(os.Environ(), cliExecEnv+"=1", fmt.Sprintf("SIDECAR_PORT=%d", port), "AGENT_ADDR="+ag.addr())
	env = append(env, c.env(jw.url(), apiKey, dir)...)
	out := &lockedOutput{}
	stop := startSidecarBinary(t, env, dir, cfPath, out)

	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	eventually(t, 15*time.Second, "the sidecar ready", func() bool {
		resp, err := http.Get(base + "/_sidecar/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	tok := key.mintWith(t, func(cl jwt.MapClaims) {
		cl["iss"], cl["server_id"], cl["aud"] = c.issuer, c.serverID, "supervaizer-server:"+c.serverID
		cl["agent_id"] = c.agentID
	})
	sig := tok[strings.LastIndex(tok, ".")+1:]
	auth := "Bearer " + tok
	h := []string{"X-API-Key", apiKey, "X-Supervaize-Workspace-Authorization", auth}

	// A denied call (the token's signature altered) and an allowed one.
	bad := tok[:len(tok)-4] + "AAAA"
	do(t, http.MethodPost, base+"/a2a", jobStartBody(t), "X-API-Key", apiKey, "Content-Type", "application/json",
		"X-Supervaize-Workspace-Authorization", "Bearer "+bad)
	if r := do(t, http.MethodPost, base+"/a2a", freshJobStart(t), append(h, "Content-Type", "application/json")...); r.Status != http.StatusOK {
		t.Fatalf("%s: allowed job.start: %d %s", c.name, r.Status, r.Body)
	}
	// Streams ended early, over HTTP/1.1 and HTTP/2 (h2c): the client gone
	// (no token: proxied as is; a query string keeps it off the fan-out),
	// and the filter refusing the agent's answer (with the token).
	for _, cl := range []*http.Client{{}, {Transport: h2cTransport()}} {
		streamThenHangUp(t, cl, base+"/a2a/events?early=1", "X-API-Key", apiKey)
		if c.local { // no token verification: no filtered stream
			continue
		}
		streamThenHangUp(t, cl, base+"/a2a/events?early=2", h...)
		r := doWith(t, cl, http.MethodGet, base+"/a2a/events?refuse=1", nil, h...)
		if r.Status != http.StatusBadGateway {
			t.Errorf("%s: filtered stream of a JSON answer: %d, want 502", c.name, r.Status)
		}
	}
	if c.jwks { // a refresh that fails: the JWKS down
		jw.srv.Close()
		do(t, http.MethodPost, base+"/_sidecar/refresh", nil, "X-API-Key", apiKey)
	}
	// The agent down, on every route class.
	ag.srv.Close()
	call := append(h, "Content-Type", "application/json")
	do(t, http.MethodPost, base+"/a2a", freshJobStart(t), call...)
	do(t, http.MethodGet, base+"/api/agents/"+testAgent+"/data/contacts/", nil, h...)
	do(t, http.MethodGet, base+"/api/supervaizer/agents", nil, h...)
	do(t, http.MethodGet, base+"/.well-known/health", nil, h...)
	do(t, http.MethodGet, base+"/a2a/events?down=1", nil, h...)
	stop()
	return out.String(), []string{apiKey, tok, sig}
}

// eventsAgent answers /a2a/events with an endless event stream (or, for
// ?refuse=1, a JSON body the filter refuses); anything else as the
// default agent does.
func eventsAgent(w http.ResponseWriter, r *http.Request, _ []byte) {
	switch {
	case r.URL.Path == "/a2a/events" && r.URL.Query().Get("refuse") != "":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"not":"a stream"}`)
	case r.URL.Path == "/a2a/events":
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; r.Context().Err() == nil && i < 3000; i++ {
			io.WriteString(w, streamBody) // passes a filtered stream too
			w.(http.Flusher).Flush()
			time.Sleep(5 * time.Millisecond) // pacing: a stream that goes on for up to 15 s
		}
	case r.URL.Path == "/a2a":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"status":"ok","effects":[]}}`)
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"path":%q}`, r.URL.Path)
	}
}

// streamThenHangUp opens a stream, reads its first bytes and goes away.
func streamThenHangUp(t *testing.T, cl *http.Client, url string, headers ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	buf := make([]byte, 64)
	if _, err := io.ReadAtLeast(resp.Body, buf, 1); err != nil {
		t.Fatalf("GET %s: no event: %v", url, err)
	}
	cancel()
	resp.Body.Close()
}

// h2cTransport speaks HTTP/2 without TLS.
func h2cTransport() *http.Transport {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return tr
}

// lockedOutput collects a child process's stdout and stderr.
type lockedOutput struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *lockedOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *lockedOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// startSidecarBinary runs the sidecar binary on cfPath in dir and returns a stop
// function: SIGINT (a graceful stop: buffered logs are drained), then wait
// (killed after 15 s).
func startSidecarBinary(t *testing.T, env []string, dir, cfPath string, out io.Writer) func() {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", cfPath, "--adapter", "caddyfile")
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("sidecar output:\n%s", out)
		}
	})
	return stop
}
