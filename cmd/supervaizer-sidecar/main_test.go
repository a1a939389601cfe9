package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestVersionNamesTheSidecar: `version` prints the sidecar's own version
// and commit on the first line, Caddy's on the second.
func TestVersionNamesTheSidecar(t *testing.T) {
	version, commit = "v1.2.3", "abc1234"
	defer func() { version, commit = "", "" }()
	var b bytes.Buffer
	printVersion(&b)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || lines[0] != "supervaizer-sidecar v1.2.3 (commit abc1234)" || !strings.HasPrefix(lines[1], "caddy v2.") {
		t.Fatalf("version output %q", b.String())
	}
}
