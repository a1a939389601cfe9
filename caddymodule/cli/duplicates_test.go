package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cmdTestJSONConfig writes a JSON config whose one supervaizer_auth handler
// holds members (a local-mode handler otherwise) and returns its path.
func cmdTestJSONConfig(t *testing.T, members string) string {
	t.Helper()
	cfg := `{"admin": {"disabled": true}, "apps": {"http": {"servers": {"srv0": {"listen": [":18099"],
		"routes": [{"handle": [{"handler": "supervaizer_auth", "local_mode": true, "api_keys": [{"key": "dev-local-key-123"}],
		"agents": {"agent_interviewer": ""}` + members + `}, {"handler": "static_response", "body": "ok"}]}]}}}}}`
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCommandCheckRefusesDuplicateKeys: a key given twice in a handler's
// JSON, at any depth, is a problem naming it (Caddy would keep the last
// one without a word); the same config without the duplicate is OK.
func TestCommandCheckRefusesDuplicateKeys(t *testing.T) {
	cmdTestClearEnv(t)
	stdout, _, err := cmdTestRun(t, "check", "--config", cmdTestJSONConfig(t, ""), "--adapter", "json")
	if err != nil || !strings.HasSuffix(stdout, "OK\n") {
		t.Fatalf("base config: %v\n%s", err, stdout)
	}
	for members, key := range map[string]string{
		`, "max_body": 1024, "max_body": 2048`:                                              `"max_body"`,
		`, "other_routes": "deny", "other_routes": "public"`:                                `"other_routes"`,
		`, "agents": {"a": "A", "a": "B"}`:                                                  `"agents"`, // the member itself is given twice too
		`, "limits": {"rate": [{"targets": ["job.start"], "rate": "5/m", "rate": "50/m"}]}`: `"limits.rate[0].rate"`,
	} {
		stdout, _, err := cmdTestRun(t, "check", "--config", cmdTestJSONConfig(t, members), "--adapter", "json")
		if err == nil || !strings.Contains(stdout, "problem: ") || !strings.Contains(stdout, "duplicate key "+key) {
			t.Errorf("%s: %v, want a problem naming %s:\n%s", members, err, key, stdout)
		}
	}
}

// TestCommandCheckRefusesDuplicateNestedKey: a duplicate inside a nested
// object is named by its path in the handler.
func TestCommandCheckRefusesDuplicateNestedKey(t *testing.T) {
	cmdTestClearEnv(t)
	path := cmdTestJSONConfig(t, "")
	b, _ := os.ReadFile(path)
	b = []byte(strings.Replace(string(b), `"agents": {"agent_interviewer": ""}`, `"agents": {"agent_interviewer": "", "agent_interviewer": "A"}`, 1))
	os.WriteFile(path, b, 0o600)
	stdout, _, err := cmdTestRun(t, "check", "--config", path, "--adapter", "json")
	if err == nil || !strings.Contains(stdout, `duplicate key "agents.agent_interviewer"`) {
		t.Errorf("%v, want the duplicate agent named:\n%s", err, stdout)
	}
}

// TestRunPrecheckRefusesDuplicateKeys: `run` (and `start`) with a JSON
// config holding a handler key twice is refused before Caddy loads it,
// naming the key, whichever way the flags are written; the same config
// without the duplicate, a Caddyfile, and other commands pass.
func TestRunPrecheckRefusesDuplicateKeys(t *testing.T) {
	dup := cmdTestJSONConfig(t, `, "other_routes": "deny", "other_routes": "public"`)
	conf := filepath.Join(t.TempDir(), "dup.conf") // Caddy reads any file not named as a Caddyfile as JSON
	if b, err := os.ReadFile(dup); err != nil || os.WriteFile(conf, b, 0o600) != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"run", "--config", dup},
		{"run", "--config=" + dup, "--adapter", "json"},
		{"start", "-c", dup, "-a", "json"},
		{"run", "-c" + dup},                                // a value joined to the short flag
		{"run", "-ec", dup},                                // short flags combined
		{"run", "-wc", dup},                                // the same with --watch
		{"run", "--config", conf},                          // not named .json
		{"run", "--config", "clean.json", "--config", dup}, // the last one given wins
	} {
		err := RunPrecheck(args)
		if err == nil || !strings.Contains(err.Error(), `duplicate key "other_routes"`) {
			t.Errorf("%q: %v, want refused naming other_routes", args, err)
		}
	}
	if err := RunPrecheck([]string{"run", "--config", "-"}); err == nil || !strings.Contains(err.Error(), "standard input") {
		t.Errorf("a JSON config on standard input: %v, want refused", err)
	}
	folded := cmdTestJSONConfig(t, `, "other_routes": "deny", "other_route\u017f": "public"`) // ſ (long s) folds to s
	if err := RunPrecheck([]string{"run", "--config", folded}); err == nil || !strings.Contains(err.Error(), "equal but for letter case") {
		t.Errorf("keys equal under case folding: %v, want refused", err)
	}
	clean := cmdTestJSONConfig(t, "")
	for _, args := range [][]string{
		{"run", "--config", clean},
		{"run", "--config", dup, "--adapter", "caddyfile"},
		{"adapt", "--config", dup},
		{"run"},
		{"run", "--config", "-", "--adapter", "caddyfile"},
	} {
		if err := RunPrecheck(args); err != nil {
			t.Errorf("%q: %v, want nothing to refuse", args, err)
		}
	}
}
