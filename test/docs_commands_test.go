package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The shell commands of docs/local-testing.md's token walkthrough and of the examples'
// comments, run as written (test/docs_commands_test.go is named there) from
// a copy of the repository layout: bin/supervaizer-sidecar (this test binary
// re-executed as Caddy's main, see cliExecEnv), bin/demo-agent (built from
// examples/demo-agent), examples/. Two substitutions only: `make build` is
// skipped (the test builds), and localhost:8080 becomes a free port (the
// Caddyfiles read it from $SIDECAR_PORT, the demo agent its address from
// $AGENT_ADDR).

// docCommands returns the shell commands of text: the lines of the first
// ```sh block after the heading (heading != ""), or the lines of the
// comment starting with "#   " (heading == ""), with continuation lines
// joined and comment lines dropped.
func docCommands(t *testing.T, text, heading string) []string {
	t.Helper()
	var lines []string
	if heading != "" {
		i := strings.Index(text, heading)
		if i < 0 {
			t.Fatalf("heading %q not found", heading)
		}
		rest := text[i:]
		start := strings.Index(rest, "```sh\n")
		end := strings.Index(rest[start+6:], "```")
		if start < 0 || end < 0 {
			t.Fatalf("no ```sh block after %q", heading)
		}
		lines = strings.Split(rest[start+6:start+6+end], "\n")
	} else {
		for _, l := range strings.Split(text, "\n") {
			if c, ok := strings.CutPrefix(l, "#   "); ok {
				lines = append(lines, c)
			}
		}
	}
	var cmds []string
	cur := ""
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if cur == "" && (l == "" || strings.HasPrefix(l, "#")) {
			continue
		}
		if c, ok := strings.CutSuffix(l, "\\"); ok {
			cur += c
			continue
		}
		cmds = append(cmds, cur+l)
		cur = ""
	}
	return cmds
}

// homeAtStart is $HOME before TestMain replaced it: go build needs it to
// find the build cache (else it recompiles the standard library).
var homeAtStart = os.Getenv("HOME")

var (
	demoAgentOnce sync.Once
	demoAgentPath string
	demoAgentErr  error
)

// docsRoot lays out a fresh copy of the repository's runnable parts: bin/
// (the sidecar as this test binary, the demo agent built once) and
// examples/ (Caddyfiles, request.json, run-demo.sh).
func docsRoot(t *testing.T) string {
	t.Helper()
	demoAgentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "demo-agent-")
		if err != nil {
			demoAgentErr = err
			return
		}
		demoAgentPath = filepath.Join(dir, "demo-agent")
		build := exec.Command("go", "build", "-o", demoAgentPath, "../examples/demo-agent")
		build.Env = append(os.Environ(), "HOME="+homeAtStart)
		out, err := build.CombinedOutput()
		if err != nil {
			demoAgentErr = fmt.Errorf("building the demo agent: %v\n%s", err, out)
		}
	})
	if demoAgentErr != nil {
		t.Fatal(demoAgentErr)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	bin := filepath.Join(root, "bin")
	if err := os.MkdirAll(filepath.Join(root, "examples"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	writeExec := func(path, script string) {
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeExec(filepath.Join(bin, "supervaizer-sidecar"), fmt.Sprintf("#!/bin/sh\n%s=1 exec %q \"$@\"\n", cliExecEnv, self))
	writeExec(filepath.Join(bin, "demo-agent"), fmt.Sprintf("#!/bin/sh\nexec %q \"$@\"\n", demoAgentPath))
	for _, f := range []string{"Caddyfile.local", "Caddyfile.token", "request.json", "run-demo.sh"} {
		b, err := os.ReadFile(filepath.Join("..", "examples", f))
		if err != nil {
			t.Fatal(err)
		}
		writeExec(filepath.Join(root, "examples", f), string(b))
	}
	return root
}

// runDocScript runs script with bash in root, the sidecar on port and the
// demo agent on agentAddr; background jobs are stopped at its end.
func runDocScript(t *testing.T, root, script string, port int, agentAddr string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	full := "set -eu\ntrap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT\n" + script
	cmd := exec.CommandContext(ctx, "bash", "-c", full)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), append([]string{"SIDECAR_PORT=" + fmt.Sprint(port), "AGENT_ADDR=" + agentAddr}, env...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("script failed: %v\n--- script\n%s\n--- output\n%s", err, full, out.String())
	}
	return out.String()
}

// docScript turns documented commands into a script for port: make build
// skipped, localhost:8080 on port, the answer of the i-th curl written to
// .answers/<i> (the background sidecar logs to the same output). It returns
// the script and the curl commands in order.
func docScript(cmds []string, port int) (string, []string) {
	var b strings.Builder
	b.WriteString("mkdir -p .answers\n")
	var curls []string
	for _, c := range cmds {
		if c == "make build" {
			continue
		}
		c = strings.ReplaceAll(c, "localhost:8080", fmt.Sprintf("localhost:%d", port))
		if strings.HasPrefix(c, "curl ") {
			fmt.Fprintf(&b, "%s > .answers/%d\n", c, len(curls))
			curls = append(curls, c)
			continue
		}
		b.WriteString(c + "\n")
	}
	return b.String(), curls
}

// wantAnswer checks one curl answer: with $EXPIRED or $EARLY the token
// refusal's data.code, otherwise the agent's result for the fixture.
func wantAnswer(t *testing.T, curl, answer string) {
	t.Helper()
	var a rpcAnswer
	if err := json.Unmarshal([]byte(strings.TrimSpace(answer)), &a); err != nil {
		t.Fatalf("%s\nanswer is not JSON-RPC: %q", curl, answer)
	}
	want := ""
	switch {
	case strings.Contains(curl, "$EXPIRED"):
		want = "workspace_authorization_expired"
	case strings.Contains(curl, "$EARLY"):
		want = "workspace_authorization_not_yet_valid"
	}
	if want == "" {
		if a.Error != nil || len(a.Result) == 0 || !strings.Contains(string(a.Result), "job_123") {
			t.Errorf("%s\nwant the agent's result, got %s", curl, answer)
		}
		return
	}
	var d struct {
		Code string `json:"code"`
	}
	if a.Error != nil {
		_ = json.Unmarshal(a.Error.Data, &d)
	}
	if a.Error == nil || a.Error.Code != -32030 || d.Code != want {
		t.Errorf("%s\nwant -32030 %s, got %s", curl, want, answer)
	}
}

// TestDocumentedCommands runs docs/local-testing.md's token walkthrough, the one in
// examples/Caddyfile.token's comment, and the curl of
// examples/Caddyfile.local's comment against make run's sidecar, checking
// every request's answer.
func TestDocumentedCommands(t *testing.T) {
	readme, err := os.ReadFile("../docs/local-testing.md")
	if err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile("../examples/Caddyfile.token")
	if err != nil {
		t.Fatal(err)
	}
	local, err := os.ReadFile("../examples/Caddyfile.local")
	if err != nil {
		t.Fatal(err)
	}
	localPrelude := []string{
		"SUPERVAIZER_API_KEY=dev-local-key bin/supervaizer-sidecar run --config examples/Caddyfile.local --adapter caddyfile &",
		"until curl -fsS localhost:8080/_sidecar/ready; do sleep 0.2; done",
	}
	for _, c := range []struct {
		name      string
		cmds      []string
		wantCurls int
	}{
		{"README", docCommands(t, string(readme), "## Testing locally with your own keys and tokens"), 2},
		{"Caddyfile.token", docCommands(t, string(token), ""), 3},
		{"Caddyfile.local", append(append([]string{"bin/demo-agent &"}, localPrelude...), docCommands(t, string(local), "")...), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := docsRoot(t)
			port := freePort(t)
			script, curls := docScript(c.cmds, port)
			if len(curls) != c.wantCurls {
				t.Fatalf("%d curl commands, want %d:\n%s", len(curls), c.wantCurls, script)
			}
			out := runDocScript(t, root, script, port, fmt.Sprintf("127.0.0.1:%d", freePort(t)))
			for i, curl := range curls {
				answer, err := os.ReadFile(filepath.Join(root, ".answers", fmt.Sprint(i)))
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				wantAnswer(t, curl, string(answer))
			}
		})
	}
}

// TestRunDemo runs examples/run-demo.sh (make run) once: the fixture's
// job.start through the sidecar reaches the demo agent, the call without a
// key is 401, and the curl line it prints is the one in
// examples/Caddyfile.local's comment.
func TestRunDemo(t *testing.T) {
	root := docsRoot(t)
	port := freePort(t)
	out := runDocScript(t, root, "examples/run-demo.sh\n", port, fmt.Sprintf("127.0.0.1:%d", freePort(t)), "RUN_ONCE=1", "SUPERVAIZER_API_KEY=")
	if !strings.Contains(out, `"job_123"`) || !strings.Contains(out, "HTTP 401") {
		t.Fatalf("run-demo output:\n%s", out)
	}
	local, err := os.ReadFile("../examples/Caddyfile.local")
	if err != nil {
		t.Fatal(err)
	}
	documented := docCommands(t, string(local), "")
	printed := regexp.MustCompile(`(?m)^  (curl .*)$`).FindStringSubmatch(out)
	want := strings.ReplaceAll(documented[len(documented)-1], "localhost:8080", fmt.Sprintf("localhost:%d", port))
	if printed == nil || printed[1] != want {
		t.Fatalf("run-demo prints %q, Caddyfile.local documents %q", printed, want)
	}
}
