package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
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

// TestCLIErrorsArePlainLines: a failing command writes one plain line,
// "supervaizer-sidecar: …", on stderr (not a JSON log line), and mint given
// the public key says so.
func TestCLIErrorsArePlainLines(t *testing.T) {
	dir := cmdTestKeygen(t)
	_, stderr, err := cmdTestRun(t, "mint", "--dev", "--key", filepath.Join(dir, "studio-signing.pub"),
		"--grant", "g", "--workspace", "w", "--agent-slug", "a", "--agent-id", "A", "--server-id", "s", "--scope", "job.start")
	if err == nil {
		t.Fatal("mint with a public key succeeded")
	}
	if !strings.HasPrefix(stderr, BinaryName+": ") || strings.Count(stderr, "\n") != 1 || strings.Contains(stderr, `"level"`) {
		t.Fatalf("stderr is not one plain line: %q", stderr)
	}
	if !strings.Contains(stderr, "is a public key") {
		t.Fatalf("mint does not say the key is a public key: %q", stderr)
	}
}

// TestUnknownSubcommandFails: `supervaizer chek` is an error naming the
// commands, not the help with exit 0.
func TestUnknownSubcommandFails(t *testing.T) {
	_, stderr, err := cmdTestRun(t, "chek")
	if err == nil || !strings.Contains(stderr, `unknown command "chek"`) {
		t.Fatalf("err %v, stderr %q", err, stderr)
	}
}
