package test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The harness for the real Supervaizer SDK 1.8.0 server as the upstream
// (test/sdkagent/): the virtualenv made by test/sdkagent/setup.sh and
// test/sdkagent/agent.py run under uvicorn on a loopback port.

// The SDK agent's identity: Agent.slug is slugify(name), so the SDK cannot
// serve the fixture's "agent_interviewer" (test/sdkagent/agent.py).
// The server id is longer than 5 characters: SDK 1.8.0 ignores a shorter
// SUPERVAIZER_SERVER_ID and makes up a random one (server_config.py).
const (
	sdkSlug     = "agent-interviewer"
	sdkAgentID  = "studio-agent-sdk"
	sdkServerID = "sdk-server-1"
)

var (
	sdkEnvOnce   sync.Once
	sdkEnvPython string
	sdkEnvErr    string
)

// sdkPython returns the virtualenv's python, making the virtualenv if
// needed. Where it cannot be made the test is skipped, except under
// CI=true where a skipped SDK test is a failure.
func sdkPython(t *testing.T) string {
	t.Helper()
	sdkEnvOnce.Do(func() {
		out, err := exec.Command("sdkagent/setup.sh").Output()
		if err != nil {
			msg := err.Error()
			if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
				msg = strings.TrimSpace(string(ee.Stderr))
			}
			sdkEnvErr = msg
			return
		}
		sdkEnvPython = strings.TrimSpace(string(out))
	})
	if sdkEnvErr != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the SDK agent's virtualenv is unavailable under CI: %s", sdkEnvErr)
		}
		t.Skipf("SDK tests skipped: %s", sdkEnvErr)
	}
	return sdkEnvPython
}

// sdkAgent is one SDK server process (restartable on the same port).
type sdkAgent struct {
	t      *testing.T
	python string
	port   int
	dir    string // working directory (the SDK's ./data) and the log
	env    []string
	cmd    *exec.Cmd
	done   chan struct{}
}

// sdkEntry is one line of the agent's log (test/sdkagent/agent.py).
type sdkEntry struct {
	Kind            string          `json:"kind"`
	Method          string          `json:"method"`
	Path            string          `json:"path"`
	Query           string          `json:"query"`
	Token           bool            `json:"token"`
	VerifiedSlug    bool            `json:"verified_slug"`
	Action          string          `json:"action"`
	Surface         string          `json:"surface"`
	Op              string          `json:"op"`
	RequestID       string          `json:"request_id"`
	IdempotencyKey  string          `json:"idempotency_key"`
	WorkspaceID     string          `json:"workspace_id"`
	VerifiedGrant   *string         `json:"verified_grant"`
	MissionID       *string         `json:"mission_id"`
	MissionMetadata json.RawMessage `json:"mission_metadata"`
}

// sdkTokenEnv is the SDK's token-mode environment: the same issuer and
// server id as the sidecar, workspace authorization required, and the key
// source keyEnv (SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY=<PEM> or
// SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL=<url>).
func sdkTokenEnv(keyEnv string) []string {
	return []string{
		"SUPERVAIZER_WORKSPACE_AUTH_REQUIRED=true",
		"SUPERVAIZER_WORKSPACE_AUTH_ISSUER=" + testIssuer,
		keyEnv,
	}
}

// startSDKAgent starts the SDK server with SUPERVAIZER_API_KEY=testKey,
// SUPERVAIZER_SERVER_ID=sdkServerID and env, and waits (60 s at most)
// until it answers. Cleanup kills it.
func startSDKAgent(t *testing.T, env ...string) *sdkAgent {
	t.Helper()
	a := &sdkAgent{t: t, python: sdkPython(t), port: freePort(t), dir: t.TempDir()}
	a.env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + a.dir,
		"SUPERVAIZER_API_KEY=" + testKey,
		"SUPERVAIZER_SERVER_ID=" + sdkServerID,
		"SDKAGENT_STUDIO_AGENT_ID=" + sdkAgentID,
		"SDKAGENT_LOG=" + a.logPath(),
		fmt.Sprintf("SDKAGENT_PORT=%d", a.port),
	}, env...)
	t.Cleanup(a.stop)
	a.start()
	return a
}

func (a *sdkAgent) logPath() string { return filepath.Join(a.dir, "requests.jsonl") }
func (a *sdkAgent) addr() string    { return fmt.Sprintf("127.0.0.1:%d", a.port) }
func (a *sdkAgent) base() string    { return "http://" + a.addr() }

func (a *sdkAgent) start() {
	t := a.t
	t.Helper()
	script, err := filepath.Abs("sdkagent/agent.py")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(a.python, script)
	cmd.Dir = a.dir
	cmd.Env = a.env
	out, err := os.OpenFile(filepath.Join(a.dir, "agent.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.cmd, a.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); out.Close(); close(a.done) }()
	eventually(t, 60*time.Second, "the SDK agent to answer its health check", func() bool {
		resp, err := http.Get(a.base() + "/.well-known/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return true
			}
		}
		select {
		case <-a.done:
			t.Fatalf("the SDK agent exited at start-up:\n%s", a.output())
		default:
		}
		return false
	}, a.output)
}

// stop kills the process (SIGKILL: no chance to finish a call) and waits.
func (a *sdkAgent) stop() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
	a.cmd = nil
}

// restart kills the process and starts it again on the same port.
func (a *sdkAgent) restart() {
	a.stop()
	a.start()
}

func (a *sdkAgent) output() string {
	b, _ := os.ReadFile(filepath.Join(a.dir, "agent.out"))
	return string(b)
}

// entries returns the log lines of kind (every line for "").
func (a *sdkAgent) entries(kind string) []sdkEntry {
	f, err := os.Open(a.logPath())
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []sdkEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e sdkEntry
		if json.Unmarshal(sc.Bytes(), &e) == nil && (kind == "" || e.Kind == kind) {
			out = append(out, e)
		}
	}
	return out
}

// mark returns the number of HTTP requests received so far, for since.
func (a *sdkAgent) mark() int { return len(a.entries("http")) }

// since returns the HTTP requests received after mark m.
func (a *sdkAgent) since(m int) []sdkEntry {
	all := a.entries("http")
	if m > len(all) {
		return nil
	}
	return all[m:]
}

// actions returns the action handler runs with idempotency key key.
func (a *sdkAgent) actionRuns(key string) int {
	n := 0
	for _, e := range a.entries("action") {
		if e.IdempotencyKey == key {
			n++
		}
	}
	return n
}

// sdkDirective is the sidecar in front of the SDK agent in token mode:
// same API key, server id and issuer, the agent's Studio id, keyLine
// (public_key <path> or jwks_url <url>), its cards read from upstream.
func sdkDirective(upstream, keyLine, extra string) string {
	return fmt.Sprintf(`		api_key %s write
		api_key %s read
		server_id %s
		agent %s %s
		workspace_auth {
			required on
			issuer %s
			%s
		}
		upstream http://%s
		registration from_upstream {
			refresh 1s
		}
%s`, testKey, testReadKey, sdkServerID, sdkSlug, sdkAgentID, testIssuer, keyLine, upstream, extra)
}

// sdkClaims are valid claims for the SDK agent in workspace ws, with every
// scope the tests' calls need.
func sdkClaims(ws string) jwt.MapClaims {
	c := baseClaims()
	c["agent_slug"] = sdkSlug
	c["agent_id"] = sdkAgentID
	c["workspace_id"] = ws
	c["workspace_slug"] = ws
	c["server_id"] = sdkServerID
	c["aud"] = "supervaizer-server:" + sdkServerID
	c["scopes"] = []any{"supervaizer/action.invoke", "supervaizer/surface.load", "job.start", "job.sync",
		"job.start.preview", "job.start.form", "resource.contacts.list", "resource.contacts.get",
		"resource.contacts.create", "resource.contacts.update", "resource.contacts.delete",
		"resource.contacts.import"}
	return c
}

// sdkAction is an action.invoke envelope for the SDK agent: the fixture's
// request with agent_slug, workspace ws, action and a fresh request id.
func sdkAction(t *testing.T, ws, action string, edit func(req map[string]any)) []byte {
	t.Helper()
	return actionBody(t, func(req map[string]any) {
		req["agent_slug"] = sdkSlug
		req["workspace"] = map[string]any{"id": ws, "slug": ws}
		req["action"] = action
		req["request_id"] = "req-" + randomID()
		req["idempotency_key"] = "idem-" + randomID()
		if edit != nil {
			edit(req)
		}
	})
}

// sdkSurface is a surface.load envelope for the SDK agent.
func sdkSurface(t *testing.T, ws, surface string) []byte {
	t.Helper()
	req := fixtureRequest(t)
	delete(req, "action")
	delete(req, "idempotency_key")
	req["agent_slug"] = sdkSlug
	req["workspace"] = map[string]any{"id": ws, "slug": ws}
	req["surface"] = surface
	return envelope("supervaizer/surface.load", "surface_request", req)
}

// writePEM writes s's public key as a PEM file and returns its path.
func writePEM(t *testing.T, s *signer) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "studio.pem")
	if err := os.WriteFile(p, []byte(s.pem(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// notWorkspaceRefusal fails when body is a JSON-RPC -32030 (the SDK's own
// workspace check refused a call the gate allowed).
func notWorkspaceRefusal(t *testing.T, what string, body []byte) {
	t.Helper()
	if bytes.Contains(body, []byte(`-32030`)) {
		t.Fatalf("%s: the SDK refused a call the sidecar allowed: %s", what, body)
	}
}

// rpcHeaders are the /a2a headers with the write key and token tok.
func rpcHeaders(tok string) []string {
	h := []string{"X-API-Key", testKey, "Content-Type", "application/json"}
	if tok != "" {
		h = append(h, "X-Supervaize-Workspace-Authorization", "Bearer "+tok)
	}
	return h
}

// nonCardRequests drops the sidecar's own card fetches (registration
// refresh) from entries.
func nonCardRequests(entries []sdkEntry) []sdkEntry {
	var out []sdkEntry
	for _, e := range entries {
		if !strings.HasPrefix(e.Path, "/.well-known/agents/") {
			out = append(out, e)
		}
	}
	return out
}
