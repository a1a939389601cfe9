package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/MicahParks/jwkset"
	"github.com/spf13/cobra"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

// cmdTestClearEnv unsets every SUPERVAIZER_* variable for the test: the
// commands read the same environment as start-up.
func cmdTestClearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "SUPERVAIZER_") {
			t.Setenv(k, "") // restored after the test
			os.Unsetenv(k)
		}
	}
}

// cmdTestRun runs `supervaizer <args>` through the registered cobra wiring.
func cmdTestRun(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := &cobra.Command{Use: "supervaizer", SilenceUsage: true}
	supervaizerCommand().CobraFunc(root)
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err = root.Execute()
	return out.String(), errb.String(), err
}

// cmdTestKeygen runs keygen into a fresh directory and returns it.
func cmdTestKeygen(t *testing.T, extra ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "keys")
	if _, stderr, err := cmdTestRun(t, append([]string{"keygen", "--out", dir}, extra...)...); err != nil {
		t.Fatalf("keygen: %v (%s)", err, stderr)
	}
	return dir
}

func cmdTestReadJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestCommandKeygenWritesKeyFiles(t *testing.T) {
	cmdTestClearEnv(t)
	dir := filepath.Join(t.TempDir(), "new", "keys")
	stdout, _, err := cmdTestRun(t, "keygen", "--out", dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join(dir, "studio-signing.key"), filepath.Join(dir, "studio-signing.pub"),
		filepath.Join(dir, "studio-signing.jwk.json"), filepath.Join(dir, "jwks.json"),
	}
	if got := strings.Fields(stdout); !slices.Equal(got, want) {
		t.Fatalf("printed %q, want the paths %q", got, want)
	}
	modes := []os.FileMode{0o600, 0o644, 0o644, 0o644}
	for i, p := range want {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != modes[i] {
			t.Errorf("%s: mode %o, want %o", p, fi.Mode().Perm(), modes[i])
		}
	}

	privPEM, _ := os.ReadFile(want[0])
	block, _ := pem.Decode(privPEM)
	if block == nil || block.Type != "PRIVATE KEY" {
		t.Fatalf("private key file is not a PRIVATE KEY PEM: %s", privPEM)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		t.Fatalf("private key is %T", k)
	}
	pub, err := grants.LoadPublicKey(want[1])
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(priv.Public()) {
		t.Fatal("public key file does not match the private key")
	}

	var jwk map[string]string
	cmdTestReadJSON(t, want[2], &jwk)
	x, err := base64.RawURLEncoding.DecodeString(jwk["x"])
	if err != nil || !bytes.Equal(x, pub) {
		t.Fatalf("JWK x %q does not encode the public key", jwk["x"])
	}
	wantJWK := map[string]string{"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig",
		"x": jwk["x"], "kid": jwkThumbprint(pub)}
	if fmt.Sprint(jwk) != fmt.Sprint(wantJWK) {
		t.Fatalf("JWK %v, want %v", jwk, wantJWK)
	}

	var jwks struct{ Keys []map[string]string }
	cmdTestReadJSON(t, want[3], &jwks)
	if len(jwks.Keys) != 1 || fmt.Sprint(jwks.Keys[0]) != fmt.Sprint(jwk) {
		t.Fatalf("jwks.json %v does not hold exactly the JWK", jwks.Keys)
	}
	// The JWKS parses with the library the verifier uses, to the same key.
	var set jwkset.JWKSMarshal
	cmdTestReadJSON(t, want[3], &set)
	keys, err := set.JWKSlice()
	if err != nil || len(keys) != 1 {
		t.Fatalf("jwkset: %v", err)
	}
	if got, ok := keys[0].Key().(ed25519.PublicKey); !ok || !got.Equal(pub) || keys[0].Marshal().KID != jwk["kid"] {
		t.Fatalf("jwkset reads %T kid %q", keys[0].Key(), keys[0].Marshal().KID)
	}
}

func TestCommandKeygenRefusesOverwriteUnlessForce(t *testing.T) {
	cmdTestClearEnv(t)
	dir := cmdTestKeygen(t)
	keyPath := filepath.Join(dir, "studio-signing.key")
	before, _ := os.ReadFile(keyPath)

	_, _, err := cmdTestRun(t, "keygen", "--out", dir)
	if err == nil || !strings.Contains(err.Error(), "refusing to overwrite") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second keygen: %v, want a refusal naming --force", err)
	}
	if after, _ := os.ReadFile(keyPath); !bytes.Equal(before, after) {
		t.Fatal("refused keygen changed the private key")
	}

	if _, _, err := cmdTestRun(t, "keygen", "--out", dir, "--force", "--kid", "studio-2026"); err != nil {
		t.Fatalf("keygen --force: %v", err)
	}
	if after, _ := os.ReadFile(keyPath); bytes.Equal(before, after) {
		t.Fatal("keygen --force kept the old key")
	}
	if fi, _ := os.Stat(keyPath); fi.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode %o after --force", fi.Mode().Perm())
	}
	var jwk map[string]string
	cmdTestReadJSON(t, filepath.Join(dir, "studio-signing.jwk.json"), &jwk)
	if jwk["kid"] != "studio-2026" {
		t.Fatalf("kid %q, want the --kid value", jwk["kid"])
	}
}

// TestCommandJWKThumbprint checks the RFC 8037 appendix A.3 example.
func TestCommandJWKThumbprint(t *testing.T) {
	x, _ := base64.RawURLEncoding.DecodeString("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
	if got := jwkThumbprint(x); got != "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k" {
		t.Fatalf("thumbprint %s", got)
	}
}

// cmdTestMintArgs are complete mint flags, without --dev.
func cmdTestMintArgs(keyPath string) []string {
	return []string{"mint", "--key", keyPath, "--grant", "grant-1", "--workspace", "ws-1",
		"--workspace-slug", "acme", "--agent-slug", "agent_interviewer", "--agent-id", "agent-1",
		"--server-id", "srv-1", "--scope", "job.start", "--scope", "supervaizer/action.invoke, resource.contacts.list",
		"--issuer", "https://studio.test", "--agent-workspace-ref", "agent-ws-1"}
}

func TestCommandMintRefusesWithoutDev(t *testing.T) {
	cmdTestClearEnv(t)
	dir := cmdTestKeygen(t)
	stdout, _, err := cmdTestRun(t, cmdTestMintArgs(filepath.Join(dir, "studio-signing.key"))...)
	if err == nil || !strings.Contains(err.Error(), "local testing only") || !strings.Contains(err.Error(), "--dev") {
		t.Fatalf("mint without --dev: %v", err)
	}
	if stdout != "" {
		t.Fatalf("mint without --dev printed %q", stdout)
	}
}

func TestCommandMintNamesEveryMissingFlag(t *testing.T) {
	cmdTestClearEnv(t)
	_, _, err := cmdTestRun(t, "mint", "--dev", "--scope", " , ")
	if err == nil {
		t.Fatal("mint without its flags succeeded")
	}
	for _, f := range []string{"--key", "--grant", "--workspace", "--agent-slug", "--agent-id", "--server-id", "--scope"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not name %s", err, f)
		}
	}
	if strings.Contains(err.Error(), "--workspace-slug") || strings.Contains(err.Error(), "--issuer") {
		t.Errorf("error %q names an optional flag", err)
	}
}

func TestCommandMintRefusesNonEd25519Key(t *testing.T) {
	cmdTestClearEnv(t)
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	path := filepath.Join(t.TempDir(), "ec.key")
	os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	args := append(cmdTestMintArgs(path), "--dev")
	if _, _, err := cmdTestRun(t, args...); err == nil || !strings.Contains(err.Error(), "not Ed25519") {
		t.Fatalf("mint with an ECDSA key: %v", err)
	}
}

func TestCommandMintTokenVerifies(t *testing.T) {
	cmdTestClearEnv(t)
	dir := cmdTestKeygen(t)
	stdout, _, err := cmdTestRun(t, append(cmdTestMintArgs(filepath.Join(dir, "studio-signing.key")), "--dev", "--ttl", "5m")...)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(stdout)

	pub, err := grants.LoadPublicKey(filepath.Join(dir, "studio-signing.pub"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := grants.NewVerifier(grants.Config{Issuer: "https://studio.test", ServerID: "srv-1", PublicKey: pub})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	c, err := v.Verify(context.Background(), token)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if !c.Dev {
		t.Error("dev claim is not true")
	}
	if want := []string{"job.start", "supervaizer/action.invoke", "resource.contacts.list"}; !slices.Equal(c.Scopes, want) {
		t.Errorf("scopes %q, want %q", c.Scopes, want)
	}
	got := []string{c.Subject, c.GrantID, c.WorkspaceID, c.WorkspaceSlug, c.AgentID, c.AgentSlug, c.ServerID, c.AgentWorkspaceRef, strings.Join(c.Audience, ",")}
	want := []string{"workspace-agent-grant:grant-1", "grant-1", "ws-1", "acme", "agent-1", "agent_interviewer", "srv-1", "agent-ws-1", "supervaizer-server:srv-1"}
	if !slices.Equal(got, want) {
		t.Errorf("claims %q, want %q", got, want)
	}
	if c.ExpiresAt-c.IssuedAt != 300 || c.JTI == "" {
		t.Errorf("exp-iat %d, jti %q", c.ExpiresAt-c.IssuedAt, c.JTI)
	}

	// The header names the kid keygen published.
	var jwk map[string]string
	cmdTestReadJSON(t, filepath.Join(dir, "studio-signing.jwk.json"), &jwk)
	hdr, _ := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[0])
	var h map[string]any
	json.Unmarshal(hdr, &h)
	if h["alg"] != "EdDSA" || h["kid"] != jwk["kid"] {
		t.Errorf("header %v, want alg EdDSA and kid %s", h, jwk["kid"])
	}
}

// cmdTestCaddyfile writes a Caddyfile with one site per supervaizer_auth
// body and returns its path.
func cmdTestCaddyfile(t *testing.T, bodies ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("{\n\tadmin off\n\tauto_https off\n}\n")
	for i, body := range bodies {
		fmt.Fprintf(&b, "http://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\trespond ok\n}\n", 18080+i, body)
	}
	path := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// cmdTestClosedURL is a loopback URL nothing listens on.
func cmdTestClosedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func cmdTestServe(t *testing.T, path string, body []byte) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// cmdTestCard is an Agent Card carrying the test registration, with its
// a2a_version replaced when a2a != "".
func cmdTestCard(t *testing.T, a2a string) (card, reg []byte) {
	t.Helper()
	var r map[string]any
	cmdTestReadJSON(t, filepath.Join("..", "..", "registration", "testdata", "agent_interviewer_mvp_registration.json"), &r)
	if a2a != "" {
		r["versions"].(map[string]any)["a2a_version"] = a2a
	}
	reg, _ = json.Marshal(r)
	card, _ = json.Marshal(map[string]any{"name": "Agent Interviewer", "supervaizer": map[string]any{"v2": r}})
	return card, reg
}

func TestCommandCheckGoodConfig(t *testing.T) {
	cmdTestClearEnv(t)
	dir := cmdTestKeygen(t)
	jwksDoc, _ := os.ReadFile(filepath.Join(dir, "jwks.json"))
	jwksURL := cmdTestServe(t, "/jwks.json", jwksDoc) + "/jwks.json"
	card, _ := cmdTestCard(t, "")
	upstream := cmdTestServe(t, "/.well-known/agents/agent_interviewer_agent.json", card)

	cf := cmdTestCaddyfile(t, fmt.Sprintf(`
		api_key key-1
		server_id srv-1
		agent agent_interviewer agent-1
		workspace_auth {
			required on
			issuer https://studio.test
			public_key %s
		}`, filepath.Join(dir, "studio-signing.pub")), fmt.Sprintf(`
		api_key key-2 read
		server_id srv-2
		agent agent_interviewer agent-1
		upstream %s
		workspace_auth {
			required on
			issuer https://studio.test
			jwks_url %s
		}`, upstream, jwksURL))
	stdout, _, err := cmdTestRun(t, "check", "--config", cf)
	if err != nil {
		t.Fatalf("check: %v\n%s", err, stdout)
	}
	if !strings.HasSuffix(stdout, "OK\n") || strings.Contains(stdout, "problem:") || strings.Count(stdout, "supervaizer_auth #") != 2 {
		t.Fatalf("check output:\n%s", stdout)
	}
}

// TestCommandCheckUsesEnvironment: settings left to the environment are
// resolved as start-up resolves them.
func TestCommandCheckUsesEnvironment(t *testing.T) {
	cmdTestClearEnv(t)
	cf := cmdTestCaddyfile(t, "\t\tagent agent_interviewer")
	if _, _, err := cmdTestRun(t, "check", "--config", cf); err == nil {
		t.Fatal("check passed without API key and server id")
	}
	t.Setenv("SUPERVAIZER_API_KEY", "key-from-env")
	t.Setenv("SUPERVAIZER_SERVER_ID", "srv-env")
	if stdout, _, err := cmdTestRun(t, "check", "--config", cf); err != nil {
		t.Fatalf("check with the environment set: %v\n%s", err, stdout)
	}
}

func TestCommandCheckListsEveryProblem(t *testing.T) {
	cmdTestClearEnv(t)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	ecPath := filepath.Join(t.TempDir(), "ec.pub")
	os.WriteFile(ecPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600)
	badJWKS := cmdTestServe(t, "/jwks.json", []byte(`{"keys":"none"}`)) + "/jwks.json"
	_, reg := cmdTestCard(t, "0.1.0")
	regPath := filepath.Join(t.TempDir(), "registration.json")
	os.WriteFile(regPath, reg, 0o600)

	cf := cmdTestCaddyfile(t, fmt.Sprintf(`
		workspace_auth {
			required on
			issuer https://studio.test
			public_key %s
			jwks_url %s/jwks.json
		}`, ecPath, cmdTestClosedURL(t)), fmt.Sprintf(`
		api_key key-1
		server_id srv-1
		agent agent_interviewer
		agent other_agent
		upstream %s
		workspace_auth {
			required on
			issuer https://studio.test
			jwks_url %s
		}`, cmdTestClosedURL(t), badJWKS), fmt.Sprintf(`
		api_key key-1
		server_id srv-1
		agent agent_interviewer
		registration file %s
		workspace_auth {
			required on
			issuer https://studio.test
			public_key %s
		}`, regPath, filepath.Join(cmdTestKeygen(t), "studio-signing.pub")))

	stdout, _, err := cmdTestRun(t, "check", "--config", cf)
	if err == nil {
		t.Fatalf("check passed:\n%s", stdout)
	}
	wants := []string{
		"no API key configured",
		"no agent configured: add `agent <slug> <studio_agent_id>`",
		"public_key and jwks_url are both set",
		"no server_id",
		"not Ed25519",
		"jwks.json: unreachable",
		"not a valid JWKS",
		"agent agent_interviewer: card from upstream",
		"agent other_agent: card from upstream",
		"declares a2a_version \"0.1.0\"",
	}
	for _, w := range wants {
		if !strings.Contains(stdout, "problem: ") || !strings.Contains(stdout, w) {
			t.Errorf("output lacks %q", w)
		}
	}
	if !strings.Contains(stdout, fmt.Sprintf("FAILED: %d problem(s)", len(wants))) {
		t.Errorf("want %d problems", len(wants))
	}
	if t.Failed() {
		t.Logf("check output:\n%s", stdout)
	}
}

func TestCommandCheckWithoutHandler(t *testing.T) {
	cmdTestClearEnv(t)
	path := filepath.Join(t.TempDir(), "Caddyfile")
	os.WriteFile(path, []byte("http://127.0.0.1:18080 {\n\trespond ok\n}\n"), 0o600)
	stdout, _, err := cmdTestRun(t, "check", "--config", path)
	if err == nil || !strings.Contains(stdout, "no supervaizer_auth handler") {
		t.Fatalf("check: %v\n%s", err, stdout)
	}
}
