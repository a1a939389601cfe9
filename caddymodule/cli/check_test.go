package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
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

	"github.com/caddyserver/caddy/v2"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
)

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

// cmdTestFingerprint is a secret as check prints it: the first 8 hex
// characters of its SHA-256.
func cmdTestFingerprint(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:4])
}

// TestCommandCheckWarnsAndPrintsSettings: check lists Caddy's admin and
// autosave settings as warnings, and prints each handler's effective
// settings with the environment's key as a fingerprint and URLs redacted.
func TestCommandCheckWarnsAndPrintsSettings(t *testing.T) {
	cmdTestClearEnv(t)
	t.Setenv("SUPERVAIZER_API_KEY", "env-secret-key")
	path := filepath.Join(t.TempDir(), "Caddyfile")
	cf := "{\n\tauto_https off\n}\nhttp://127.0.0.1:18080 {\n\tsupervaizer_auth {\n\t\tlocal_mode on\n\t\tagent a\n\t\tupstream http://u:pw@127.0.0.1:1\n\t\tregistration off\n\t\tidempotency {\n\t\t\tttl 1h\n\t\t\tmax_entries 10\n\t\t\tactions job.sync\n\t\t}\n\t}\n\trespond ok\n}\n"
	if err := os.WriteFile(path, []byte(cf), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, _, err := cmdTestRun(t, "check", "--config", path)
	if err != nil {
		t.Fatalf("check: %v\n%s", err, stdout)
	}
	// The idempotency block's settings in effect, set and default.
	for _, want := range [][3]string{
		{"idempotency ttl", "1h0m0s", "[config]"}, {"idempotency lock_ttl", "2m0s", "[default]"},
		{"idempotency max_entries", "10", "[config]"}, {"idempotency actions", "job.start job.sync", "[config]"},
	} {
		if !slices.ContainsFunc(strings.Split(stdout, "\n"), func(l string) bool {
			l = strings.TrimSpace(l)
			return strings.HasPrefix(l, want[0]+" ") && strings.Contains(l, " "+want[1]+" ") && strings.HasSuffix(l, want[2])
		}) {
			t.Errorf("check output lacks the line %q", want)
		}
	}
	for _, want := range []string{
		"warning: Caddy's admin endpoint is enabled on " + caddy.DefaultAdminListen,
		"warning: Caddy autosaves the loaded config",
		"effective settings", cmdTestFingerprint("env-secret-key") + " write  [$SUPERVAIZER_API_KEY]",
		"upstream                   http://127.0.0.1:1  [config]", "\nOK\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("check output lacks %q", want)
		}
	}
	if strings.Contains(stdout, "env-secret-key") || strings.Contains(stdout, "pw@") {
		t.Errorf("check output shows a secret")
	}
	if t.Failed() {
		t.Logf("check output:\n%s", stdout)
	}
}

// TestCommandCheckJWKSSkippedKey: check reads the JWKS with the verifier's
// rule: a key the verifier skips (here one marked for encryption) is a
// warning naming its kid, not a problem, while another key verifies.
func TestCommandCheckJWKSSkippedKey(t *testing.T) {
	cmdTestClearEnv(t)
	var doc struct {
		Keys []map[string]any `json:"keys"`
	}
	cmdTestReadJSON(t, filepath.Join(cmdTestKeygen(t), "jwks.json"), &doc)
	enc := map[string]any{}
	for k, v := range doc.Keys[0] {
		enc[k] = v
	}
	enc["kid"], enc["use"] = "enc-key", "enc"
	doc.Keys = append(doc.Keys, enc)
	body, _ := json.Marshal(doc)
	jwksURL := cmdTestServe(t, "/jwks.json", body) + "/jwks.json"
	cf := cmdTestCaddyfile(t, fmt.Sprintf(`
		api_key key-1
		server_id srv-1
		agent agent_interviewer agent-1
		registration off
		workspace_auth {
			required on
			issuer https://studio.test
			jwks_url %s
		}`, jwksURL))
	stdout, _, err := cmdTestRun(t, "check", "--config", cf)
	if err != nil || !strings.Contains(stdout, `warning: workspace_auth jwks_url `) || !strings.Contains(stdout, `key "enc-key" is not a usable`) {
		t.Fatalf("check: %v\n%s", err, stdout)
	}
}

// TestCommandCheckFileStoresNotOpened: check neither opens nor creates an
// idempotency or references file store: a store whose lock a running
// sidecar holds is OK (its directory and its header are checked instead),
// an absent file is not created, and a file that is no store and a
// directory that does not exist are problems naming the setting.
func TestCommandCheckFileStoresNotOpened(t *testing.T) {
	cmdTestClearEnv(t)
	dir := t.TempDir()
	idemPath, refsPath := filepath.Join(dir, "idem.db"), filepath.Join(dir, "refs.db")
	live, err := idempotency.NewFileStore(idempotency.FileOptions{Path: idemPath})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close() // the running sidecar's lock, held through the check
	body := func(idem, refs string) string {
		return fmt.Sprintf(`
		api_key key-1
		local_mode on
		idempotency {
			store file %s
		}
		references {
			store file %s
		}`, idem, refs)
	}
	stdout, _, err := cmdTestRun(t, "check", "--config", cmdTestCaddyfile(t, body(idemPath, refsPath)))
	if err != nil || !strings.HasSuffix(stdout, "OK\n") {
		t.Fatalf("check with a store locked by a running sidecar: %v\n%s", err, stdout)
	}
	if _, err := os.Stat(refsPath); !os.IsNotExist(err) {
		t.Fatalf("check created the references file store: %v", err)
	}
	garbage := filepath.Join(dir, "garbage.db") // a file the store would refuse to open
	if err := os.WriteFile(garbage, []byte("not a store file, whatever its length"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, _, err = cmdTestRun(t, "check", "--config", cmdTestCaddyfile(t, body(idemPath, garbage)))
	if err == nil || !strings.Contains(stdout, "references file_path") || !strings.Contains(stdout, "not a store file") {
		t.Fatalf("check with a garbage references file: %v\n%s", err, stdout)
	}
	missing := filepath.Join(dir, "no-such-dir", "idem.db")
	stdout, _, err = cmdTestRun(t, "check", "--config", cmdTestCaddyfile(t, body(missing, refsPath)))
	if err == nil || !strings.Contains(stdout, "idempotency file_path") {
		t.Fatalf("check with a missing directory: %v\n%s", err, stdout)
	}
}
