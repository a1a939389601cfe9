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

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

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

// localCheckConfig is a local-mode Caddyfile with extra lines in the
// supervaizer_auth block.
func localCheckConfig(t *testing.T, agentLine, extra string) string {
	t.Helper()
	cf := filepath.Join(t.TempDir(), "Caddyfile")
	writeFile(t, cf, fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n}\nhttp://127.0.0.1:%d {\n\tsupervaizer_auth {\n\t\tlocal_mode on\n\t\t%s\n%s\t}\n\treverse_proxy 127.0.0.1:%d\n}\n",
		freePort(t), agentLine, extra, freePort(t)))
	return cf
}

var checkEnv = []string{"SUPERVAIZER_API_KEY=" + testKey}

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
