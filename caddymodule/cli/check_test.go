package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

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
	cf := "{\n\tauto_https off\n}\nhttp://127.0.0.1:18080 {\n\tsupervaizer_auth {\n\t\tlocal_mode on\n\t\tagent a\n\t\tupstream http://u:pw@127.0.0.1:1\n\t\tregistration off\n\t}\n\trespond ok\n}\n"
	if err := os.WriteFile(path, []byte(cf), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, _, err := cmdTestRun(t, "check", "--config", path)
	if err != nil {
		t.Fatalf("check: %v\n%s", err, stdout)
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
