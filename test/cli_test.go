package test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/golang-jwt/jwt/v5"

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// TestCLI drives the binary's `supervaizer` subcommands as a user would
// (the test binary re-executed as Caddy's main, see cliExecEnv): keygen, then
// a dev token from mint accepted by a real sidecar configured with the
// generated PEM or JWKS, then check.
func TestCLI(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"supervaizer"}, args...)...)
		cmd.Env = append(os.Environ(), cliExecEnv+"=1")
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Fatalf("running %v: %v", args, err)
		}
		return o.String(), e.String(), code
	}

	keys := filepath.Join(t.TempDir(), "keys")
	if out, errOut, code := run("keygen", "--out", keys); code != 0 || strings.Count(out, "\n") != 4 {
		t.Fatalf("keygen: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := run("keygen", "--out", keys); code == 0 || !strings.Contains(errOut, "--force") {
		t.Fatalf("keygen over existing files: exit %d\n%s", code, errOut)
	}
	privPath := filepath.Join(keys, "studio-signing.key")
	pubPath := filepath.Join(keys, "studio-signing.pub")

	scopes, _ := baseClaims()["scopes"].([]any)
	var scopeList []string
	for _, s := range scopes {
		scopeList = append(scopeList, fmt.Sprint(s))
	}
	mintArgs := []string{"mint", "--key", privPath, "--grant", "grant-1", "--workspace", "workspace_123",
		"--workspace-slug", "acme", "--agent-slug", testAgent, "--agent-id", testAgentID,
		"--server-id", testServerID, "--issuer", testIssuer, "--agent-workspace-ref", "agent-ws-1",
		"--scope", strings.Join(scopeList, ",")}

	t.Run("mint refuses without --dev", func(t *testing.T) {
		out, errOut, code := run(mintArgs...)
		if code == 0 || out != "" || !strings.Contains(errOut, "local testing only") {
			t.Fatalf("exit %d, stdout %q, stderr %s", code, out, errOut)
		}
	})

	out, errOut, code := run(append(mintArgs, "--dev")...)
	if code != 0 {
		t.Fatalf("mint: exit %d\n%s", code, errOut)
	}
	token := strings.TrimSpace(out)
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(token, claims); err != nil || claims["dev"] != true {
		t.Fatalf("minted token %v, dev %v", err, claims["dev"])
	}

	t.Run("dev token accepted with the PEM", func(t *testing.T) {
		ag := startAgent(t)
		sc := startSidecar(t, ag.addr(), pemDirective(pubPath))
		if a := decodeRPC(t, sc.rpc(t, jobStartBody(t), token)); a.Error != nil {
			t.Fatalf("dev token refused: %+v", a.Error)
		}
		h := ag.last(t).Header
		if h.Get("X-Supervaize-Verified-Workspace-Id") != "workspace_123" || h.Get("X-Supervaize-Verified-Token-Id") != claims["jti"] {
			t.Fatalf("verified headers %v", h)
		}
	})

	t.Run("dev token accepted with the JWKS", func(t *testing.T) {
		doc, err := os.ReadFile(filepath.Join(keys, "jwks.json"))
		if err != nil {
			t.Fatal(err)
		}
		jw := startJWKS(t)
		jw.setDoc(200, doc)
		ag := startAgent(t)
		sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), ""))
		if a := decodeRPC(t, sc.rpc(t, jobStartBody(t), token)); a.Error != nil {
			t.Fatalf("dev token refused: %+v", a.Error)
		}
	})

	t.Run("check", func(t *testing.T) {
		dir := t.TempDir()
		good := filepath.Join(dir, "good.Caddyfile")
		bad := filepath.Join(dir, "bad.Caddyfile")
		site := "{\n\tadmin off\n}\nhttp://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy 127.0.0.1:9\n}\n"
		writeFile(t, good, fmt.Sprintf(site, freePort(t), pemDirective(pubPath)))
		writeFile(t, bad, fmt.Sprintf(site, freePort(t), "\t\tagent "+testAgent+"\n\t\tworkspace_auth {\n\t\t\trequired on\n\t\t}"))

		out, errOut, code := run("check", "--config", good)
		if code != 0 || !strings.HasSuffix(out, "OK\n") {
			t.Fatalf("check good: exit %d\n%s%s", code, out, errOut)
		}
		out, errOut, code = run("check", "--config", bad, "--adapter", "caddyfile")
		if code == 0 {
			t.Fatalf("check bad: exit 0\n%s", out)
		}
		for _, want := range []string{"no API key", "no issuer", "no key source", "no server_id", "FAILED: 4 problem(s)"} {
			if !strings.Contains(out, want) {
				t.Errorf("check bad output lacks %q:\n%s%s", want, out, errOut)
			}
		}
	})
}

// TestReadmeTokenExample runs the README's token-mode steps on
// examples/Caddyfile.token: keygen into ./keys, then check with the
// environment the README exports (the demo agent's card served by a real
// upstream), expecting OK; and examples/Caddyfile.local, make run's config.
func TestReadmeTokenExample(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ag := startAgent(t)
	ag.serveCard(200, cardFor(t, nil))
	dir := t.TempDir()
	run := func(env []string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"supervaizer"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(append(os.Environ(), cliExecEnv+"=1"), env...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	for _, f := range []string{"Caddyfile.token", "Caddyfile.local"} {
		b, err := os.ReadFile(filepath.Join("..", "examples", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, code := run(nil, "keygen", "--out", "./keys"); code != 0 {
		t.Fatalf("keygen: %d %s", code, out)
	}
	env := []string{"SUPERVAIZER_API_KEY=dev-key", "AGENT_ADDR=" + ag.addr()}
	if out, code := run(env, "check", "--config", "Caddyfile.token"); code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("check Caddyfile.token: exit %d\n%s", code, out)
	}
	if out, code := run(env, "check", "--config", "Caddyfile.local"); code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("check Caddyfile.local: exit %d\n%s", code, out)
	}
	// Without the API key in the environment, check names the missing setting.
	if out, code := run([]string{"SUPERVAIZER_API_KEY=", "AGENT_ADDR=" + ag.addr()}, "check", "--config", "Caddyfile.token"); code == 0 || !strings.Contains(out, "API key") {
		t.Fatalf("check without a key: exit %d\n%s", code, out)
	}
}

// runCheck runs `supervaizer check args...` in the binary (this test binary
// as Caddy's main) with env added: its output and exit code.
func runCheck(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"supervaizer", "check"}, args...)...)
	cmd.Env = append(append(os.Environ(), cliExecEnv+"=1"), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), 0
}

// checkEnv is the environment of the check runs: a transport key.
var checkEnv = []string{"SUPERVAIZER_API_KEY=" + testKey}

// localCheckConfig is a local-mode Caddyfile with extra lines in the
// supervaizer_auth block.
func localCheckConfig(t *testing.T, agentLine, extra string) string {
	t.Helper()
	cf := filepath.Join(t.TempDir(), "Caddyfile")
	writeFile(t, cf, fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n}\nhttp://127.0.0.1:%d {\n\tsupervaizer_auth {\n\t\tlocal_mode on\n\t\t%s\n%s\t}\n\treverse_proxy 127.0.0.1:%d\n}\n",
		freePort(t), agentLine, extra, freePort(t)))
	return cf
}

// TestCheckJSONAdapterNone: the help names the JSON adapters, and
// `--adapter none` (what Caddy's own commands take for JSON) reads JSON.
func TestCheckJSONAdapterNone(t *testing.T) {
	help, _ := runCheck(t, nil, "--help")
	if !strings.Contains(help, "json (also: none)") {
		t.Errorf("check --help does not name the JSON adapters:\n%s", help)
	}
	src, err := os.ReadFile(localCheckConfig(t, "agent "+testAgent, ""))
	if err != nil {
		t.Fatal(err)
	}
	cfgJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "config") // no .json: the adapter decides
	writeFile(t, file, string(cfgJSON))
	for _, adapter := range []string{"none", "json"} {
		if out, code := runCheck(t, checkEnv, "--config", file, "--adapter", adapter); code != 0 || !strings.Contains(out, "\nOK\n") {
			t.Errorf("check --adapter %s of a JSON config: exit %d\n%s", adapter, code, out)
		}
	}
}

// TestCheckUnreachableRedis: start-up serves with Redis down (covered calls
// fail closed); check reports it and exits 1.
func TestCheckUnreachableRedis(t *testing.T) {
	cf := localCheckConfig(t, "agent "+testAgent, fmt.Sprintf("\t\tidempotency {\n\t\t\tstore redis\n\t\t\tredis_url redis://127.0.0.1:%d/0\n\t\t}\n", freePort(t)))
	out, code := runCheck(t, checkEnv, "--config", cf)
	if code == 0 || !strings.Contains(out, "problem: idempotency store does not answer") || strings.Contains(out, "\nOK\n") {
		t.Errorf("check with Redis down: exit %d\n%s", code, out)
	}
}

// TestCheckLimitsRedisStore: check pings the limits Redis store as it does
// idempotency's (exit 1 when it does not answer) and prints its settings.
func TestCheckLimitsRedisStore(t *testing.T) {
	block := func(url string) string {
		return "\t\tlimits {\n\t\t\trate job.start 10/m\n\t\t\tstore redis " + url +
			"\n\t\t\tmin_replicas_ack 0\n\t\t\treplica_ack_timeout 250ms\n\t\t}\n"
	}
	out, code := runCheck(t, checkEnv, "--config", localCheckConfig(t, "agent "+testAgent+" "+testAgentID,
		block(fmt.Sprintf("redis://127.0.0.1:%d/0", freePort(t)))))
	if code == 0 || !strings.Contains(out, "problem: limits store does not answer") || strings.Contains(out, "\nOK\n") {
		t.Errorf("check with the limits Redis down: exit %d\n%s", code, out)
	}
	srv := redistest.Start(t)
	out, code = runCheck(t, checkEnv, "--config", localCheckConfig(t, "agent "+testAgent+" "+testAgentID, block(srv.URL())))
	if code != 0 || !strings.Contains(out, "\nOK\n") {
		t.Fatalf("check with the limits Redis up: exit %d\n%s", code, out)
	}
	for _, want := range []string{"limits min_replicas_ack", "limits replica_ack_timeout", "250ms", "limits key_prefix", "supervaizer:limit:"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
}

// TestCheckPlaceholderAgentID: the agent id our configs ship for the user to
// replace is a problem for check (start-up warns: every token call for that
// agent would fail agent_not_registered).
func TestCheckPlaceholderAgentID(t *testing.T) {
	out, code := runCheck(t, checkEnv, "--config", localCheckConfig(t, "agent "+testAgent+" replace-with-studio-agent-id", ""))
	if code == 0 || !strings.Contains(out, "the Studio agent id is the shipped placeholder") {
		t.Errorf("check with the placeholder agent id: exit %d\n%s", code, out)
	}
	out, code = runCheck(t, checkEnv, "--config", localCheckConfig(t, "agent "+testAgent+" "+testAgentID, ""))
	if code != 0 || !strings.Contains(out, "workspace_auth introspection") || !strings.Contains(out, " off ") {
		t.Errorf("check with a real agent id: exit %d (want 0, introspection listed as off)\n%s", code, out)
	}
}
