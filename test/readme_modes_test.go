package test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// The README's minimal Caddyfile per mode (section "A minimal Caddyfile per
// mode"): each block is loaded as written, with only the values a reader
// would put in (server id, agent id, issuer, key path, JWKS and Redis URLs)
// replaced by the test's, and the fixture's job.start goes through it to the
// agent. A block that no longer loads, or lets nothing through, fails here.

// readmeModeBlocks returns the ```caddyfile blocks of that README section.
func readmeModeBlocks(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "## A minimal Caddyfile per mode")
	if !ok {
		t.Fatal(`README has no section "A minimal Caddyfile per mode"`)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```caddyfile\n(.*?)```").FindAllStringSubmatch(sec, -1) {
		blocks = append(blocks, m[1])
	}
	if len(blocks) != 4 {
		t.Fatalf("%d caddyfile blocks in the README's modes section, want 4 (local, PEM, JWKS, Redis)", len(blocks))
	}
	return blocks
}

// directiveBody is the inside of a block's supervaizer_auth { … }.
func directiveBody(t *testing.T, block string) string {
	t.Helper()
	block = strings.TrimSpace(block)
	body, ok := strings.CutPrefix(block, "supervaizer_auth {")
	if !ok || !strings.HasSuffix(body, "}") {
		t.Fatalf("block is not one supervaizer_auth directive:\n%s", block)
	}
	return strings.TrimSuffix(body, "}")
}

// settingValue replaces the value of every line setting name (the first
// word) in body by value.
func settingValue(body, name, value string) string {
	return regexp.MustCompile(`(?m)^(\s*`+regexp.QuoteMeta(name)+`)\s.*$`).ReplaceAllString(body, "${1} "+value)
}

func TestReadmeModeCaddyfiles(t *testing.T) {
	blocks := readmeModeBlocks(t)
	t.Setenv("SUPERVAIZER_API_KEY", testKey) // the README leaves the key to the environment
	key := newSigner(t, "k1")
	pemPath := filepath.Join(t.TempDir(), "studio-signing.pub")
	writeFile(t, pemPath, key.pem(t))
	jw := startJWKS(t, key.jwk())
	token := func(string) string { return key.mint(t, baseClaims()) }
	noToken := func(string) string { return "" }
	tokenValues := func(body string) string {
		body = settingValue(body, "server_id", testServerID)
		body = settingValue(body, "agent", testAgent+" "+testAgentID)
		body = settingValue(body, "issuer", testIssuer)
		body = settingValue(body, "public_key", pemPath)
		return settingValue(body, "jwks_url", jw.url())
	}
	redisBlock := func(body string) string {
		rd := redistest.Start(t)
		return tokenValues(body) + settingValue(blocks[3], "redis_url", rd.URL())
	}
	for _, c := range []struct {
		name  string
		body  func() string
		token func(string) string
	}{
		{"local", func() string { return directiveBody(t, blocks[0]) }, noToken},
		{"token_pem", func() string { return tokenValues(directiveBody(t, blocks[1])) }, token},
		{"token_jwks", func() string { return tokenValues(directiveBody(t, blocks[2])) }, token},
		{"redis_idempotency", func() string { return redisBlock(directiveBody(t, blocks[1])) }, token},
	} {
		t.Run(c.name, func(t *testing.T) {
			ag := startAgent(t)
			sc := startSidecar(t, ag.addr(), c.body())
			waitReady(t, sc)
			r := sc.rpc(t, jobStartBody(t), c.token(""))
			if r.Status != 200 || decodeRPC(t, r).Error != nil {
				t.Fatalf("job.start through the README's %s block: %d %s", c.name, r.Status, r.Body)
			}
			if n := len(ag.received()); n != 1 {
				t.Fatalf("the agent received %d calls, want 1", n)
			}
		})
	}
}
