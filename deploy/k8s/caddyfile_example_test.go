package k8s_test

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCaddyfileExample adapts and validates the root Caddyfile.example with
// the built binary and the deployment environment (JWKS down), as is and
// with its commented-out blocks (access log filter, workspace_auth, Redis
// idempotency) switched on, so the snippets it suggests stay valid.
func TestCaddyfileExample(t *testing.T) {
	file := filepath.Join(repoRoot(t), "Caddyfile.example")
	checkFormatted(t, file)
	cfg, err := adapt(t, file, true, adaptEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	checkAdaptedGate(t, "Caddyfile.example", cfg)
	checkAccessLogFilters(t, "Caddyfile.example", cfg)
	if jpath(cfg, "admin", "config", "persist") != false {
		t.Errorf("Caddyfile.example: persist_config is not off")
	}

	src := readFile(t, file)
	on, blocks := uncommentBlocks(src)
	for _, want := range []string{"log", "workspace_auth", "idempotency"} {
		if !blocks[want] {
			t.Errorf("Caddyfile.example has no commented-out %s block", want)
		}
	}
	if !strings.Contains(on, "store redis") || !strings.Contains(on, "redis_url {$"+redisURLEnv+"}") {
		t.Errorf("Caddyfile.example: the commented idempotency block does not use store redis with redis_url {$%s}", redisURLEnv)
	}
	// NewRedisStore only parses the URL: no Redis is needed to provision.
	cfg, err = adapt(t, writeTemp(t, "Caddyfile", on), true, adaptEnv(t, redisURLEnv+"=redis://127.0.0.1:9/0"))
	if err != nil {
		t.Fatalf("Caddyfile.example with its commented blocks on: %v\n%s", err, on)
	}
	checkAdaptedGate(t, "Caddyfile.example (blocks on)", cfg)
	if n := checkAccessLogFilters(t, "Caddyfile.example (blocks on)", cfg); n != 1 {
		t.Errorf("Caddyfile.example (blocks on): %d access logs, want 1", n)
	}
	for _, h := range handlers(cfg) {
		if h["handler"] == "supervaizer_auth" && jpath(h, "idempotency", "store") != "redis" {
			t.Errorf("Caddyfile.example (blocks on): idempotency store = %v, want redis", jpath(h, "idempotency", "store"))
		}
		if h["handler"] == "supervaizer_auth" && h["references"] == nil {
			t.Errorf("Caddyfile.example: no references block (docs/workspaces.md)")
		}
	}
}

var commentedBlock = regexp.MustCompile(`^(\s*)# ?(\S+) \{$`)

// uncommentBlocks removes the comment marker of every commented-out
// Caddyfile block ("# name {" ... "# }") and reports which block names it
// found.
func uncommentBlocks(src string) (string, map[string]bool) {
	found := map[string]bool{}
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		m := commentedBlock.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		depth := 0
		j := i
		for ; j < len(lines); j++ {
			l := strings.TrimSpace(lines[j])
			if !strings.HasPrefix(l, "#") {
				break
			}
			l = strings.TrimSpace(strings.TrimPrefix(l, "#"))
			depth += strings.Count(l, "{") - strings.Count(l, "}")
			if depth == 0 {
				break
			}
		}
		if j == len(lines) || depth != 0 {
			continue // not a complete block: prose
		}
		found[m[2]] = true
		for k := i; k <= j; k++ {
			indent := lines[k][:len(lines[k])-len(strings.TrimLeft(lines[k], " \t"))]
			rest := strings.TrimPrefix(strings.TrimLeft(lines[k], " \t"), "#")
			rest = strings.TrimPrefix(rest, " ")
			lines[k] = indent + rest
		}
		i = j
	}
	return strings.Join(lines, "\n"), found
}

func TestUncommentBlocks(t *testing.T) {
	in := "a {\n\t# log {\n\t# \toutput stderr\n\t# }\n\t# prose {\n\tb\n}\n"
	got, found := uncommentBlocks(in)
	want := "a {\n\tlog {\n\t\toutput stderr\n\t}\n\t# prose {\n\tb\n}\n"
	if got != want || !found["log"] || found["prose"] {
		t.Errorf("uncommentBlocks = %q %v, want %q [log]", got, found, want)
	}
}
