package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandCheckExpandsPlaceholders: check shows the settings as start-up
// expands their placeholders ({env.*} for the key, the server id, the
// issuer and the JWKS URL it fetches), never the placeholder's text as a
// key, and refuses a placeholder start-up refuses, naming its setting.
func TestCommandCheckExpandsPlaceholders(t *testing.T) {
	cmdTestClearEnv(t)
	dir := cmdTestKeygen(t)
	jwksDoc, _ := os.ReadFile(filepath.Join(dir, "jwks.json"))
	t.Setenv("PHC_KEY", "real-check-key-0123")
	t.Setenv("PHC_SID", "srv-phc-1")
	t.Setenv("PHC_ISS", "https://studio.phc")
	t.Setenv("PHC_JWKS", cmdTestServe(t, "/jwks.json", jwksDoc)+"/jwks.json")
	cf := cmdTestCaddyfile(t, `
		api_key {env.PHC_KEY} write
		server_id {env.PHC_SID}
		agent agent_interviewer agent-1
		registration off
		workspace_auth {
			required on
			issuer {env.PHC_ISS}
			jwks_url {env.PHC_JWKS}
		}`)
	stdout, _, err := cmdTestRun(t, "check", "--config", cf)
	if err != nil {
		t.Fatalf("check: %v\n%s", err, stdout)
	}
	for _, want := range []string{
		cmdTestFingerprint("real-check-key-0123") + " write  [config]", "srv-phc-1  [config]",
		"https://studio.phc  [config]", "\nOK\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("check output lacks %q", want)
		}
	}
	if strings.Contains(stdout, cmdTestFingerprint("{env.PHC_KEY}")) || strings.Contains(stdout, "{env.") {
		t.Errorf("check output shows a placeholder's text as a setting")
	}
	if t.Failed() {
		t.Logf("check output:\n%s", stdout)
	}

	cf = cmdTestCaddyfile(t, "\t\tapi_key {http.request.header.X-Key}\n\t\tserver_id srv-phc-1\n\t\tlocal_mode on\n\t\tagent a\n\t\tregistration off")
	stdout, _, err = cmdTestRun(t, "check", "--config", cf)
	want := fmt.Sprintf("problem: api_key 1: %s is not a placeholder known at start-up", "{http.request.header.X-Key}")
	if err == nil || !strings.Contains(stdout, want) {
		t.Fatalf("check of a request placeholder in api_key: %v, want a problem %q:\n%s", err, want, stdout)
	}
}
