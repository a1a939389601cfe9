package test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestURLsPrintedRedacted: a JWKS, an agent card (upstream), an
// introspection and a Redis URL each carrying a user name, a password and
// (where the setting allows one) a query token, all on loopback ports where
// nothing listens. Wherever the sidecar prints them — its log lines,
// /_sidecar/status, the JWKS and card errors of POST /_sidecar/refresh,
// `supervaizer check` — neither the user name, nor the password, nor a query
// value appears, and query values read REDACTED (docs/logging.md, "URLs").
func TestURLsPrintedRedacted(t *testing.T) {
	closed := func() string { return fmt.Sprintf("127.0.0.1:%d", freePort(t)) }
	jwksURL := "http://jwksuser:jwkspass@" + closed() + "/jwks.json?token=jwksqtok"
	upstream := "http://carduser:cardpass@" + closed()
	introURL := "http://introuser:intropass@" + closed() + "/introspect?token=introqtok"
	redisURL := "redis://redisuser:redispass@" + closed() + "/0?client_name=redisqtok"
	secrets := []string{"jwksuser", "jwkspass", "jwksqtok", "carduser", "cardpass", "introuser", "intropass", "introqtok",
		"redisuser", "redispass", "redisqtok"}
	base := jwksDirective(jwksURL, "")
	if !strings.Contains(base, "\t\t\tjwks_unknown_kid_interval 10ms\n") {
		t.Fatal("jwksDirective changed: the introspection block would not be inserted")
	}
	directive := strings.Replace(jwksDirective(jwksURL, fmt.Sprintf(`		upstream %s
		idempotency {
			store redis
			redis_url %s
		}
`, upstream, redisURL)), "\t\t\tjwks_unknown_kid_interval 10ms\n",
		"\t\t\tjwks_unknown_kid_interval 10ms\n\t\t\tintrospection {\n\t\t\t\turl "+introURL+"\n\t\t\t}\n", 1)
	noSecret := func(where, text string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s shows %q:\n%s", where, s, text)
			}
		}
	}

	sc := startSidecar(t, closed(), directive)
	status := string(do(t, "GET", sc.base+"/_sidecar/status", nil, "X-API-Key", testReadKey).Body)
	noSecret("/_sidecar/status", status)
	for _, want := range []string{"/jwks.json?token=REDACTED", "/introspect?token=REDACTED", "/0?client_name=REDACTED"} {
		if !strings.Contains(status, want) {
			t.Errorf("/_sidecar/status has no %q:\n%s", want, status)
		}
	}
	refresh := do(t, "POST", sc.base+"/_sidecar/refresh", nil, "X-API-Key", testKey)
	noSecret("POST /_sidecar/refresh", string(refresh.Body))
	if !strings.Contains(string(refresh.Body), "jwks.json?token=REDACTED") || !strings.Contains(string(refresh.Body), `"ok":false`) {
		t.Errorf("POST /_sidecar/refresh does not show the failed JWKS fetch with its URL redacted: %s", refresh.Body)
	}
	if !strings.Contains(string(refresh.Body), "/.well-known/agents/") {
		t.Errorf("POST /_sidecar/refresh does not show the failed card fetch with its URL: %s", refresh.Body)
	}
	eventually(t, 15*time.Second, "the card fetch failure logged", func() bool { return strings.Contains(sc.logs(t), "/.well-known/agents/") })
	noSecret("the log", sc.logs(t))

	// check prints the same settings and problems.
	cf := filepath.Join(t.TempDir(), "Caddyfile")
	writeFile(t, cf, fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n}\nhttp://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy %s\n}\n",
		freePort(t), directive, closed()))
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	check := func(cf string) string {
		cmd := exec.Command(bin, "supervaizer", "check", "--config", cf, "--adapter", "caddyfile")
		cmd.Env = append(os.Environ(), cliExecEnv+"=1")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err == nil { // the JWKS, the cards and Redis are unreachable
			t.Errorf("check exited 0:\n%s", out.String())
		}
		return out.String()
	}
	out := check(cf)
	noSecret("check", out)
	for _, want := range []string{"jwks.json?token=REDACTED", "workspace_auth introspection", "/introspect?token=REDACTED"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output has no %q:\n%s", want, out)
		}
	}
	// A Redis URL refused at start (no such database): its error too.
	bad := strings.Replace(readFileString(t, cf), "/0?client_name=", "/notanumber?client_name=", 1)
	writeFile(t, cf, bad)
	out = check(cf)
	noSecret("check of a bad Redis URL", out)
	if !strings.Contains(out, "notanumber") {
		t.Errorf("check does not report the bad Redis URL:\n%s", out)
	}
}

func readFileString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
