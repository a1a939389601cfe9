package test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/golang-jwt/jwt/v5"

	_ "github.com/supervaize/supervaizer-sidecar/caddymodule"
	_ "github.com/supervaize/supervaizer-sidecar/caddymodule/cli" // the supervaizer subcommand (cli_test.go)
)

// Constants shared by the end-to-end tests.
const (
	testIssuer   = "https://studio.test"
	testServerID = "srv-1"
	testAgent    = "agent_interviewer"
	testAgentID  = "studio-agent-1"
	testKey      = "test-write-key-0123456789"
	testReadKey  = "test-read-key-0123456789"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sidecar-e2e-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_DATA_HOME", dir)
	os.Setenv("XDG_CONFIG_HOME", dir)
	os.Setenv("HOME", dir)
	for _, e := range os.Environ() { // tests set every setting explicitly
		if strings.HasPrefix(e, "SUPERVAIZER_") {
			os.Unsetenv(strings.SplitN(e, "=", 2)[0])
		}
	}
	code := m.Run()
	_ = caddy.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ---------------------------------------------------------------- agent

// recorded is one request the fake agent received.
type recorded struct {
	Method  string
	Path    string // escaped path as received
	Query   string // raw query as received
	Header  http.Header
	Trailer http.Header
	Body    []byte
}

// agent is a real HTTP upstream on loopback that records what it receives
// and answers like a Supervaizer agent.
type agent struct {
	srv   *httptest.Server
	mu    sync.Mutex
	reqs  []recorded
	count atomic.Int64
	// respond, if set, answers instead of the default.
	respond func(w http.ResponseWriter, r *http.Request, body []byte)
	// card, if set, is served at /.well-known/agents/<slug>_agent.json
	// (status cardStatus) and such fetches are not recorded or counted.
	// noRecord keeps only the count (for long runs).
	noRecord atomic.Bool

	cardMu     sync.Mutex
	card       []byte
	cardStatus int
}

// serveCard sets the Agent Card the agent serves (status 200), or a failure
// status with an empty body.
func (a *agent) serveCard(status int, card []byte) {
	a.cardMu.Lock()
	a.card, a.cardStatus = card, status
	a.cardMu.Unlock()
}

func startAgent(t *testing.T) *agent {
	t.Helper()
	a := &agent{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.HasPrefix(r.URL.Path, "/.well-known/agents/") {
			a.cardMu.Lock()
			card, status := a.card, a.cardStatus
			a.cardMu.Unlock()
			if status != 0 {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				w.Write(card)
				return
			}
		}
		a.mu.Lock()
		if !a.noRecord.Load() {
			a.reqs = append(a.reqs, recorded{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Header: r.Header.Clone(), Trailer: r.Trailer.Clone(), Body: body})
		}
		a.mu.Unlock()
		a.count.Add(1)
		if a.respond != nil {
			a.respond(w, r, body)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/a2a" {
			var env struct {
				ID json.RawMessage `json:"id"`
			}
			_ = json.Unmarshal(body, &env)
			if len(env.ID) == 0 {
				env.ID = json.RawMessage("null")
			}
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"status":"ok","effects":[]}}`, env.ID)
			return
		}
		fmt.Fprintf(w, `{"path":%q}`, r.URL.Path)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *agent) addr() string { return strings.TrimPrefix(a.srv.URL, "http://") }

func (a *agent) received() []recorded {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]recorded(nil), a.reqs...)
}

func (a *agent) reset() {
	a.mu.Lock()
	a.reqs = nil
	a.mu.Unlock()
	a.count.Store(0)
}

// last returns the last request received, failing if none.
func (a *agent) last(t *testing.T) recorded {
	t.Helper()
	r := a.received()
	if len(r) == 0 {
		t.Fatal("agent received nothing")
	}
	return r[len(r)-1]
}

// ---------------------------------------------------------------- keys and JWKS

type signer struct {
	kid  string
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
}

func newSigner(t *testing.T, kid string) *signer {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &signer{kid: kid, priv: priv, pub: pub}
}

func (s *signer) pem(t *testing.T) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(s.pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func (s *signer) jwk() map[string]any {
	return map[string]any{"kty": "OKP", "crv": "Ed25519", "kid": s.kid, "alg": "EdDSA", "use": "sig",
		"x": base64.RawURLEncoding.EncodeToString(s.pub)}
}

// jwksServer is a real JWKS endpoint on loopback whose document can change
// and which can be stopped.
type jwksServer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	doc     []byte
	status  int
	fetches atomic.Int64
	// hang makes every fetch wait until the client gives up or stopHang
	// is closed (test end).
	hang     atomic.Bool
	stopHang chan struct{}
}

func startJWKS(t *testing.T, keys ...map[string]any) *jwksServer {
	t.Helper()
	j := &jwksServer{status: 200, stopHang: make(chan struct{})}
	j.setKeys(keys...)
	j.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		j.fetches.Add(1)
		if j.hang.Load() {
			select {
			case <-r.Context().Done():
			case <-j.stopHang:
			}
			return
		}
		j.mu.Lock()
		doc, status := j.doc, j.status
		j.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(doc)
	}))
	t.Cleanup(func() { close(j.stopHang); j.srv.Close() })
	return j
}

func (j *jwksServer) setKeys(keys ...map[string]any) {
	if keys == nil {
		keys = []map[string]any{}
	}
	b, _ := json.Marshal(map[string]any{"keys": keys})
	j.setDoc(200, b)
}

func (j *jwksServer) setDoc(status int, doc []byte) {
	j.mu.Lock()
	j.doc, j.status = doc, status
	j.mu.Unlock()
}

func (j *jwksServer) url() string { return j.srv.URL + "/jwks.json" }

// ---------------------------------------------------------------- tokens

// baseClaims are valid claims for the fixture's job.start request.
func baseClaims() jwt.MapClaims {
	now := time.Now().Unix()
	return jwt.MapClaims{
		"iss":                 testIssuer,
		"aud":                 "supervaizer-server:" + testServerID,
		"sub":                 "workspace-agent-grant:grant-1",
		"grant_id":            "grant-1",
		"workspace_id":        "workspace_123",
		"workspace_slug":      "acme",
		"agent_id":            testAgentID,
		"agent_slug":          testAgent,
		"server_id":           testServerID,
		"scopes":              []any{"supervaizer/action.invoke", "supervaizer/surface.load", "job.start", "job.sync", "job.start.form", "resource.contacts.list", "resource.contacts.create"},
		"agent_workspace_ref": "agent-ws-1",
		"iat":                 now,
		"exp":                 now + 600,
		"jti":                 randomID(),
	}
}

func randomID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// mint signs claims with s (kid in the header unless s.kid is "").
func (s *signer) mint(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	if s.kid != "" {
		tok.Header["kid"] = s.kid
	}
	out, err := tok.SignedString(s.priv)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mintWith signs claims after editing the claims map.
func (s *signer) mintWith(t *testing.T, edit func(jwt.MapClaims)) string {
	c := baseClaims()
	if edit != nil {
		edit(c)
	}
	return s.mint(t, c)
}

// rawToken assembles a token from raw header and claims JSON and a signature
// made by s over them (s may be nil for an empty signature).
func rawToken(s *signer, header, claims string) string {
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims))
	sig := ""
	if s != nil {
		sig = enc.EncodeToString(ed25519.Sign(s.priv, []byte(signing)))
	}
	return signing + "." + sig
}

// ---------------------------------------------------------------- Caddy

// sidecar is a real Caddy instance running a config with supervaizer_auth
// in front of an agent.
type sidecar struct {
	base    string // http://127.0.0.1:port
	logPath string
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startSidecar runs Caddy in this process with a site on a free loopback
// port: supervaizer_auth with the given directive body, then reverse_proxy to
// upstream. It returns when the config is running; Cleanup stops it.
func startSidecar(t *testing.T, upstream, directiveBody string) *sidecar {
	t.Helper()
	sc, err := tryStartSidecar(t, upstream, directiveBody)
	if err != nil {
		t.Fatalf("loading config: %v", err)
	}
	return sc
}

func tryStartSidecar(t *testing.T, upstream, directiveBody string) (*sidecar, error) {
	t.Helper()
	return runCaddyfile(t, "", func(port int) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy %s\n}\n",
			port, directiveBody, upstream)
	})
}

// runCaddyfile runs a Caddyfile made of the tests' global options (admin
// off, no automatic HTTPS, JSON logs to a file), globalExtra, and the sites
// that sites writes for a free loopback port (the sidecar's base URL).
func runCaddyfile(t *testing.T, globalExtra string, sites func(port int) string) (*sidecar, error) {
	t.Helper()
	port := freePort(t)
	logPath := filepath.Join(t.TempDir(), "caddy.log")
	return loadCaddyfile(t, caddyfileText(globalExtra, logPath, sites(port)), port, logPath)
}

// startMetricsSidecar is startSidecar with Caddy's metrics handler on
// /metrics of the same site (everything else goes through supervaizer_auth
// and reverse_proxy to upstream).
func startMetricsSidecar(t *testing.T, upstream, directiveBody string) *sidecar {
	t.Helper()
	sc, err := runCaddyfile(t, "", func(port int) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\thandle /metrics {\n\t\tmetrics\n\t}\n\thandle {\n\t\tsupervaizer_auth {\n%s\t\t}\n\t\treverse_proxy %s\n\t}\n}\n",
			port, directiveBody, upstream)
	})
	if err != nil {
		t.Fatalf("loading config: %v", err)
	}
	return sc
}

// caddyfileText is the tests' global options block, then sites.
func caddyfileText(globalExtra, logPath, sites string) string {
	return fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n\tauto_https off\n%s\tlog {\n\t\toutput file %s\n\t\tformat json\n\t\tlevel INFO\n\t}\n}\n%s",
		globalExtra, logPath, sites)
}

// loadCaddyfile adapts and runs a whole Caddyfile whose site listens on port.
func loadCaddyfile(t *testing.T, cf string, port int, logPath string) (*sidecar, error) {
	t.Helper()
	adapter := caddyconfig.GetAdapter("caddyfile")
	cfgJSON, warnings, err := adapter.Adapt([]byte(cf), nil)
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		t.Logf("caddyfile warning: %s", w.String())
	}
	// One Caddy config runs per process: loading replaces the previous one
	// (tests do not run in parallel).
	if err := caddy.Load(cfgJSON, true); err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = caddy.Stop() })
	sc := &sidecar{base: fmt.Sprintf("http://127.0.0.1:%d", port), logPath: logPath}
	// A config Caddy loaded but that does not listen is a harness failure,
	// not a refusal a test could expect: it fails the test.
	eventually(t, 10*time.Second, "the sidecar to listen", func() bool {
		var c net.Conn
		if c, err = net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
		}
		return err == nil
	}, func() string { return fmt.Sprintf("sidecar did not listen: %v", err) })
	return sc, nil
}

// logs returns what Caddy logged so far.
func (s *sidecar) logs(t *testing.T) string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

// ---------------------------------------------------------------- requests

var client = &http.Client{Timeout: 20 * time.Second}

type response struct {
	Status     int
	Header     http.Header
	Body       []byte
	ProtoMajor int // the HTTP version the answer came in: 1, 2 or 3
}

// do sends a request; headers are name, value pairs (a name may repeat).
func do(t *testing.T, method, url string, body []byte, headers ...string) response {
	t.Helper()
	return doWith(t, client, method, url, body, headers...)
}

// doWith is do through the client cl (e.g. one transport of
// everyProtocol's, see harness_protocols_test.go).
func doWith(t *testing.T, cl *http.Client, method, url string, body []byte, headers ...string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		req.Body = nil
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b, ProtoMajor: resp.ProtoMajor}
}

// rpc posts body to /a2a with the write key and, if token != "", the token.
func (s *sidecar) rpc(t *testing.T, body []byte, token string, extra ...string) response {
	t.Helper()
	h := []string{"X-API-Key", testKey, "Content-Type", "application/json"}
	if token != "" {
		h = append(h, "X-Supervaize-Workspace-Authorization", "Bearer "+token)
	}
	return do(t, http.MethodPost, s.base+"/a2a", body, append(h, extra...)...)
}

// rpcError decodes a JSON-RPC error answer (HTTP 200 required).
type rpcAnswer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func decodeRPC(t *testing.T, r response) rpcAnswer {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("status %d, want 200; body %s", r.Status, r.Body)
	}
	var a rpcAnswer
	if err := json.Unmarshal(r.Body, &a); err != nil {
		t.Fatalf("answer is not JSON: %v: %s", err, r.Body)
	}
	return a
}

// wantRPCError asserts a JSON-RPC error with code and (if dataCode != "") data.code.
func wantRPCError(t *testing.T, r response, code int, dataCode string) rpcAnswer {
	t.Helper()
	a := decodeRPC(t, r)
	if a.Error == nil {
		t.Fatalf("want JSON-RPC error %d %s, got %s", code, dataCode, r.Body)
	}
	if a.Error.Code != code {
		t.Fatalf("JSON-RPC code %d, want %d: %s", a.Error.Code, code, r.Body)
	}
	if dataCode != "" {
		var d struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(a.Error.Data, &d)
		if d.Code != dataCode {
			t.Fatalf("data.code %q, want %q: %s", d.Code, dataCode, r.Body)
		}
	}
	return a
}

// wantDetail asserts an HTTP status with a FastAPI {"detail": ...} body.
func wantDetail(t *testing.T, r response, status int, detail string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	var d struct {
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(r.Body, &d); err != nil {
		t.Fatalf("body is not a detail object: %s", r.Body)
	}
	if detail != "" && d.Detail != detail {
		t.Fatalf("detail %q, want %q", d.Detail, detail)
	}
}

// nothingReached asserts the agent received no request.
func nothingReached(t *testing.T, a *agent) {
	t.Helper()
	if n := a.count.Load(); n != 0 {
		r := a.received()
		t.Fatalf("agent received %d request(s); first: %s %s", n, r[0].Method, r[0].Path)
	}
}

// ---------------------------------------------------------------- fixture

type fixture struct {
	Registration  json.RawMessage `json:"registration"`
	ActionRequest json.RawMessage `json:"action_request"`
}

func loadFixture(t *testing.T) fixture {
	t.Helper()
	b, err := os.ReadFile("testdata/agent_interviewer_mvp.json")
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// jobStartBody is the fixture's job.start request in a JSON-RPC envelope.
func jobStartBody(t *testing.T) []byte {
	f := loadFixture(t)
	return []byte(`{"jsonrpc":"2.0","id":7,"method":"supervaizer/action.invoke","params":{"action_request":` +
		string(f.ActionRequest) + `}}`)
}

// envelope builds a JSON-RPC request for method with req under params[wrapper]
// (wrapper "" puts req's fields directly in params).
func envelope(method, wrapper string, req map[string]any) []byte {
	params := req
	if wrapper != "" {
		params = map[string]any{wrapper: req}
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	return b
}

// fixtureRequest is the fixture's job.start request, decoded.
func fixtureRequest(t *testing.T) map[string]any {
	t.Helper()
	var req map[string]any
	if err := json.Unmarshal(loadFixture(t).ActionRequest, &req); err != nil {
		t.Fatal(err)
	}
	return req
}

// actionBody builds an action.invoke envelope from the fixture request with
// edit applied.
func actionBody(t *testing.T, edit func(req map[string]any)) []byte {
	t.Helper()
	req := fixtureRequest(t)
	if edit != nil {
		edit(req)
	}
	return envelope("supervaizer/action.invoke", "action_request", req)
}

// actionFor is an action.invoke envelope for action (fixture fields).
func actionFor(t *testing.T, action string) []byte {
	return actionBody(t, func(req map[string]any) { req["action"] = action })
}

// surfaceEnvelope is a surface.load envelope for surface (fixture fields).
func surfaceEnvelope(t *testing.T, surface string) []byte {
	t.Helper()
	req := fixtureRequest(t)
	delete(req, "action")
	delete(req, "idempotency_key")
	req["surface"] = surface
	return envelope("supervaizer/surface.load", "surface_request", req)
}

func osWriteFile(path string, b []byte) error { return os.WriteFile(path, b, 0o600) }

// freshJobStart is the fixture's job.start with a new idempotency_key, so
// the idempotency guard forwards it instead of replaying an earlier answer.
func freshJobStart(t *testing.T) []byte {
	return actionBody(t, func(r map[string]any) { r["idempotency_key"] = "idem-" + randomID() })
}

func osReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

// startTokenGate starts the usual token-mode setup: a recording agent, a
// Studio signing key "k1" published by a JWKS server, and a sidecar with
// jwksDirective (plus extra directive lines) in front of the agent.
func startTokenGate(t *testing.T, extra string) (*agent, *signer, *jwksServer, *sidecar) {
	t.Helper()
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	return ag, key, jw, startSidecar(t, ag.addr(), jwksDirective(jw.url(), extra))
}

// settledGoroutines waits (at most 5 s) until the goroutine count reads the
// same three times in a row, 20 ms apart, and returns it: the baseline of a
// leak check, taken once the work before it has wound down rather than after
// a fixed sleep. It is not an eventually: a count that never settles still
// gives a baseline (the leak checks after it allow some slack), not a
// failure; the 20 ms are its sampling interval.
func settledGoroutines(t *testing.T) int {
	t.Helper()
	n, same := runtime.NumGoroutine(), 0
	for deadline := time.Now().Add(5 * time.Second); same < 2 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if m := runtime.NumGoroutine(); m == n {
			same++
		} else {
			n, same = m, 0
		}
	}
	return n
}

// jwksDirective is a token-mode configuration with a JWKS at url.
func jwksDirective(url string, extra string) string {
	return fmt.Sprintf(`		api_key %s write
		api_key %s read
		server_id %s
		agent %s %s
		agent unregistered_agent
		workspace_auth {
			required on
			issuer %s
			jwks_url %s
			jwks_unknown_kid_interval 10ms
		}
%s`, testKey, testReadKey, testServerID, testAgent, testAgentID, testIssuer, url, extra)
}

// pemDirective is a token-mode configuration with the PEM key at pemPath.
func pemDirective(pemPath string) string {
	return fmt.Sprintf(`		api_key %s write
		server_id %s
		agent %s %s
		workspace_auth {
			required on
			issuer %s
			public_key %s
		}
`, testKey, testServerID, testAgent, testAgentID, testIssuer, pemPath)
}

// mustJSON encodes v as JSON text.
func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// writeFile writes content to path (mode 0600).
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := osWriteFile(path, []byte(content)); err != nil {
		t.Fatal(err)
	}
}

// localDirective is a local-mode configuration (transport key only) plus extra.
func localDirective(extra string) string {
	return fmt.Sprintf("		api_key %s\n		local_mode on\n		agent %s %s\n%s", testKey, testAgent, testAgentID, extra)
}

// withWorkspaceAuth adds lines to jwksDirective's workspace_auth block.
func withWorkspaceAuth(directive, lines string) string {
	return strings.Replace(directive, "jwks_unknown_kid_interval 10ms\n", "jwks_unknown_kid_interval 10ms\n"+lines, 1)
}

// grepLines keeps the lines of s that contain sub (for failure messages).
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// cardFor builds an Agent Card around the fixture's registration (the SDK
// places it at card["supervaizer"]["v2"]) after edit.
func cardFor(t *testing.T, edit func(reg map[string]any)) []byte {
	t.Helper()
	var reg map[string]any
	if err := json.Unmarshal(loadFixture(t).Registration, &reg); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(reg)
	}
	b, _ := json.Marshal(map[string]any{"name": "Agent Interviewer", "version": "1.0.0",
		"supervaizer": map[string]any{"v2": reg}})
	return b
}

// registrationDirective is a token-mode configuration whose contract comes
// from the agent's card at upstream.
func registrationDirective(jwksURL, upstream string) string {
	return fmt.Sprintf(`		api_key %s write
		api_key %s read
		server_id %s
		agent %s %s
		workspace_auth {
			required on
			issuer %s
			jwks_url %s
		}
		upstream http://%s
		registration from_upstream {
			refresh 1s
		}
`, testKey, testReadKey, testServerID, testAgent, testAgentID, testIssuer, jwksURL, upstream)
}

// eventually polls cond every 10 ms until it holds; if it still does not
// after within, the test fails naming what it waited for, followed by what
// explain returns (the last state cond saw, the logs). It is the one way
// these tests wait for an event: no fixed sleep stands before an assertion.
// cond runs on the test's goroutine, so it may call t.Fatal itself to stop
// at once (for example when the awaited process has exited).
func eventually(t testing.TB, within time.Duration, what string, cond func() bool, explain ...func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("timed out after %s waiting for %s", within, what)
			for _, e := range explain {
				msg += "\n" + e()
			}
			t.Fatal(msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitReady waits for /_sidecar/ready to answer 200; on timeout it shows the
// last readiness answer and the sidecar's logs.
func waitReady(t *testing.T, sc *sidecar) {
	t.Helper()
	var r response
	eventually(t, 15*time.Second, "/_sidecar/ready to answer 200", func() bool {
		r = do(t, "GET", sc.base+"/_sidecar/ready", nil)
		return r.Status == 200
	}, func() string { return fmt.Sprintf("not ready: %d %s\nlogs:\n%s", r.Status, r.Body, sc.logs(t)) })
}

// padTo pads the JSON body b with trailing spaces to exactly n bytes.
func padTo(t *testing.T, b []byte, n int) []byte {
	t.Helper()
	if len(b) > n {
		t.Fatalf("body of %d bytes is over %d already", len(b), n)
	}
	return append(b, bytes.Repeat([]byte(" "), n-len(b))...)
}

// dataToken mints a token for the fixture workspace with scopes.
func dataToken(t *testing.T, s *signer, scopes ...string) string {
	return s.mintWith(t, func(c jwt.MapClaims) {
		list := []any{}
		for _, sc := range scopes {
			list = append(list, sc)
		}
		c["scopes"] = list
	})
}

// metric returns the value of one series from /metrics ("" when absent).
func (s *sidecar) metric(t *testing.T, series string) string {
	t.Helper()
	m := string(do(t, "GET", s.base+"/metrics", nil).Body)
	for _, l := range strings.Split(m, "\n") {
		if strings.HasPrefix(l, series+" ") {
			return strings.TrimPrefix(l, series+" ")
		}
	}
	return ""
}
