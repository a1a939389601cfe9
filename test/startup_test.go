package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStartupRefusesTokenModeWithoutAgent: the SDK environment's settings
// with no agent line is refused by a real Caddy, naming the setting
// (otherwise every call would fail workspace_authorization_unknown_agent).
func TestStartupRefusesTokenModeWithoutAgent(t *testing.T) {
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	ag := startAgent(t)
	t.Setenv("SUPERVAIZER_API_KEY", testKey)
	t.Setenv("SUPERVAIZER_SERVER_ID", testServerID)
	t.Setenv("SUPERVAIZER_WORKSPACE_AUTH_REQUIRED", "true")
	t.Setenv("SUPERVAIZER_WORKSPACE_AUTH_ISSUER", testIssuer)
	t.Setenv("SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL", jw.url())
	_, err := tryStartSidecar(t, ag.addr(), "")
	if err == nil || !strings.Contains(err.Error(), "agent <slug> <studio_agent_id>") {
		t.Fatalf("token mode without agent started, or the error does not name the setting: %v", err)
	}
	// The same environment plus one agent line: a working gate.
	sc := startSidecar(t, ag.addr(), fmt.Sprintf("\t\tagent %s %s\n", testAgent, testAgentID))
	if a := decodeRPC(t, sc.rpc(t, jobStartBody(t), key.mint(t, baseClaims()))); a.Error != nil {
		t.Fatalf("refused: %+v", a.Error)
	}
}

// waitLog waits until the sidecar's log holds every want (or fails).
func waitLog(t *testing.T, sc *sidecar, wants ...string) string {
	t.Helper()
	var logs, missing string
	eventually(t, 10*time.Second, "every wanted log line", func() bool {
		logs, missing = sc.logs(t), ""
		for _, w := range wants {
			if !strings.Contains(logs, w) {
				missing = w
				break
			}
		}
		return missing == ""
	}, func() string { return fmt.Sprintf("log lacks %q:\n%s", missing, logs) })
	return logs
}

// TestStartupWarnsAboutCaddySettings: with Caddy's admin endpoint on and
// the config autosave left at its default, start-up logs a warning for each;
// with `admin off` and `persist_config off` (the tests' usual globals), none.
func TestStartupWarnsAboutCaddySettings(t *testing.T) {
	ag := startAgent(t)
	port, adminPort := freePort(t), freePort(t)
	logPath := filepath.Join(t.TempDir(), "caddy.log")
	cf := fmt.Sprintf("{\n\tadmin 127.0.0.1:%d\n\tauto_https off\n\tlog {\n\t\toutput file %s\n\t\tformat json\n\t}\n}\n"+
		"http://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy %s\n}\n",
		adminPort, logPath, port, localDirective(""), ag.addr())
	sc, err := loadCaddyfile(t, cf, port, logPath)
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, sc, fmt.Sprintf("Caddy's admin endpoint is enabled on 127.0.0.1:%d", adminPort), "Caddy autosaves the loaded config")

	quiet := startSidecar(t, ag.addr(), localDirective(""))
	logs := waitLog(t, quiet, "supervaizer_auth provisioned")
	if strings.Contains(logs, "admin endpoint is enabled") || strings.Contains(logs, "autosaves") {
		t.Fatalf("warned with admin off and persist_config off:\n%s", logs)
	}
}

// TestStartupWarnsAboutKeys: $SUPERVAIZER_API_KEY shadowed by api_key lines,
// and no write-scope key, are each logged at start.
func TestStartupWarnsAboutKeys(t *testing.T) {
	ag := startAgent(t)
	t.Setenv("SUPERVAIZER_API_KEY", "env-key-0123456789")
	sc := startSidecar(t, ag.addr(), fmt.Sprintf("\t\tapi_key %s read\n\t\tlocal_mode on\n\t\tagent %s\n", testReadKey, testAgent))
	waitLog(t, sc, "$SUPERVAIZER_API_KEY is set but ignored", "no write-scope API key")
	if strings.Contains(sc.logs(t), "env-key-0123456789") {
		t.Fatal("the key was logged")
	}
}

// TestStatusSettingsRedacted: /_sidecar/status shows the effective
// settings, and neither it nor the logs show a URL's userinfo or query
// values, including inside a JWKS fetch error.
func TestStatusSettingsRedacted(t *testing.T) {
	ag := startAgent(t)
	jwksURL := fmt.Sprintf("http://user:hunter2@127.0.0.1:%d/jwks.json?sig=topsecret", freePort(t)) // nothing listens
	sc := startSidecar(t, ag.addr(), jwksDirective(jwksURL, ""))
	var body string
	eventually(t, 10*time.Second, "the JWKS fetch error in /_sidecar/status", func() bool {
		r := do(t, "GET", sc.base+"/_sidecar/status", nil, "X-API-Key", testReadKey)
		body = string(r.Body)
		if r.Status != 200 {
			t.Fatalf("status: %d %s", r.Status, body)
		}
		return strings.Contains(body, "last_error")
	}, func() string { return "status: " + body })
	for _, want := range []string{`"settings"`, `"last_error"`, "/jwks.json?sig=REDACTED", `"workspace_auth jwks_url"`} {
		if !strings.Contains(body, want) {
			t.Errorf("status lacks %s: %s", want, body)
		}
	}
	logs := waitLog(t, sc, "JWKS fetch failed")
	for _, secret := range []string{"hunter2", "topsecret", testKey, testReadKey} {
		if strings.Contains(body, secret) || strings.Contains(logs, secret) {
			t.Errorf("%q shown in the status or the logs", secret)
		}
	}
}

// TestStartupRefusals: bad settings refuse to start with an error naming them.
func TestStartupRefusals(t *testing.T) {
	key := newSigner(t, "k1")
	pemPath := t.TempDir() + "/k.pem"
	writeFile(t, pemPath, key.pem(t))
	badPEM := t.TempDir() + "/bad.pem"
	writeFile(t, badPEM, "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
	cases := []struct{ body, want string }{
		{"server_id s\n", "no API key"},
		{fmt.Sprintf("api_key k\nworkspace_auth {\nrequired on\npublic_key %s\n}\nserver_id s\n", pemPath), "no issuer"},
		{"api_key k\nworkspace_auth {\nrequired on\nissuer i\n}\nserver_id s\n", "no key source"},
		{fmt.Sprintf("api_key k\nworkspace_auth {\nrequired on\nissuer i\npublic_key %s\njwks_url http://127.0.0.1:1/j\n}\nserver_id s\n", pemPath), "both set"},
		{fmt.Sprintf("api_key k\nworkspace_auth {\nrequired on\nissuer i\npublic_key %s\n}\nserver_id s\n", badPEM), "public_key"},
		{fmt.Sprintf("api_key k\nworkspace_auth {\nrequired on\nissuer i\npublic_key %s\n}\n", pemPath), "server_id"},
		{"api_key k\n", "server_id"},
	}
	// Every problem is reported at once, each naming its setting.
	_, err := tryStartSidecar(t, "127.0.0.1:1", "legacy_routes maybe\n")
	for _, want := range []string{"no API key", "server_id", "legacy_routes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %q", err, want)
		}
	}
	for _, tc := range cases {
		_, err := tryStartSidecar(t, "127.0.0.1:1", tc.body)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %q: error %v, want one naming %q", tc.body, err, tc.want)
		}
	}
}

// TestSecondProcessOnSamePortRefused: a second sidecar process started with
// a config whose site listens on a port the first one already serves
// (Caddy binds with SO_REUSEPORT: it would start without a word and take
// half the connections) exits at once, naming the address; the first one
// keeps serving every call.
func TestSecondProcessOnSamePortRefused(t *testing.T) {
	ag := startAgent(t)
	port := freePort(t)
	cf := filepath.Join(t.TempDir(), "Caddyfile")
	site := fmt.Sprintf("http://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy %s\n}\n", port, localDirective(""), ag.addr())
	if err := os.WriteFile(cf, []byte(caddyfileText("", filepath.Join(t.TempDir(), "caddy.log"), site)), 0o600); err != nil {
		t.Fatal(err)
	}
	first := startProcess(t, cf, port)
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// It must exit by itself: one still running after 30 s is killed, and
	// the test fails.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, bin, "run", "--config", cf, "--adapter", "caddyfile")
	second.Env = append(os.Environ(), cliExecEnv+"=1")
	out, err := second.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), fmt.Sprintf(":%d is already in use by another process", port)) {
		t.Fatalf("the second process: %v\n%s", err, out)
	}
	for range 20 {
		if r := do(t, "GET", first.base+"/_sidecar/live", nil); r.Status != 200 {
			t.Fatalf("the first process: %d %s", r.Status, r.Body)
		}
	}
}
