package caddymodule

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"github.com/supervaize/supervaizer-sidecar/config"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"
)

// parseWorkspaceAuth parses a supervaizer_auth block holding body inside
// workspace_auth { }.
func parseWorkspaceAuth(t *testing.T, body string) (*config.WorkspaceAuth, error) {
	t.Helper()
	var h Handler
	d := caddyfile.NewTestDispenser("supervaizer_auth {\n workspace_auth {\n" + body + "\n }\n}")
	if err := h.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return h.WorkspaceAuth, nil
}

// TestCaddyfileWorkspaceAuthDurations: leeway takes plain seconds (as
// $SUPERVAIZER_WORKSPACE_AUTH_LEEWAY_SECONDS) or a duration; jwks_max_stale
// and max_token_lifetime take durations.
func TestCaddyfileWorkspaceAuthDurations(t *testing.T) {
	cases := []struct {
		body string
		get  func(*config.WorkspaceAuth) config.Duration
		want time.Duration
	}{
		{"leeway 30", leewayOf, 30 * time.Second},
		{"leeway 30s", leewayOf, 30 * time.Second},
		{"leeway 2m", leewayOf, 2 * time.Minute},
		{"leeway 0", leewayOf, 0},
		{"leeway 0s", leewayOf, 0},
		{"jwks_max_stale 1h", func(w *config.WorkspaceAuth) config.Duration { return w.JWKSMaxStale }, time.Hour},
		{"max_token_lifetime 15m", func(w *config.WorkspaceAuth) config.Duration { return w.MaxTokenLifetime }, 15 * time.Minute},
	}
	for _, c := range cases {
		wa, err := parseWorkspaceAuth(t, c.body)
		if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		if got := time.Duration(c.get(wa)); got != c.want {
			t.Errorf("%s: %v, want %v", c.body, got, c.want)
		}
	}
	// Syntax is the parser's; the range is Validate's (config/bounds.go), which a
	// Caddyfile reaches through its JSON.
	for _, body := range []string{"leeway 30x", "leeway", "jwks_max_stale soon"} {
		if _, err := parseWorkspaceAuth(t, body); err == nil {
			t.Errorf("%q parsed", body)
		}
	}
	for body, want := range map[string]string{
		"leeway -5":              "workspace_auth leeway must not be negative",
		"max_token_lifetime -1m": "workspace_auth max_token_lifetime must not be negative",
		"leeway 99999999999":     "workspace_auth leeway must be at most 5m0s",
		"leeway 301":             "workspace_auth leeway must be at most 5m0s",
	} {
		wa, err := parseWorkspaceAuth(t, body)
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if err := (&Handler{Config: config.Config{WorkspaceAuth: wa}}).Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: Validate %v, want %q", body, err, want)
		}
	}
}

// leewayOf is the leeway a Caddyfile set (-1 ns when absent).
func leewayOf(w *config.WorkspaceAuth) config.Duration {
	if w.Leeway == nil {
		return -1
	}
	return *w.Leeway
}

// testPEM is a fresh Ed25519 public key as PEM.
func testPEM(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// tokenHandler is a token-mode Handler with workspace_auth wa.
func tokenHandler(wa *config.WorkspaceAuth) *Handler {
	on := true
	wa.Required, wa.Issuer = &on, "https://studio.test"
	return &Handler{Config: config.Config{ServerID: "S", APIKeys: []config.APIKey{{Key: "k", Scope: "write"}},
		Agents: map[string]string{"a": "A"}, WorkspaceAuth: wa,
		Registration: &config.RegistrationConfig{Source: "off"}, Idempotency: &config.IdempotencyConfig{Store: "off"}}}
}

// TestPEMWithLiteralNewlines: a PEM in the environment (or the config)
// written on one line with literal \n sequences, as .env files do, loads.
func TestPEMWithLiteralNewlines(t *testing.T) {
	oneLine := strings.ReplaceAll(testPEM(t), "\n", `\n`)
	t.Setenv(envAuthPEM, oneLine)
	g, err := tokenHandler(&config.WorkspaceAuth{}).build(zap.NewNop(), nil, pools{})
	if err != nil {
		t.Fatalf("env PEM with literal \\n refused: %v", err)
	}
	g.Close()
	t.Setenv(envAuthPEM, "")
	g, err = tokenHandler(&config.WorkspaceAuth{PublicKey: oneLine}).build(zap.NewNop(), nil, pools{})
	if err != nil {
		t.Fatalf("config PEM with literal \\n refused: %v", err)
	}
	g.Close()
}

// TestWorkspaceAuthRefusals: settings that cannot mean what they say refuse
// to start, naming the setting.
func TestWorkspaceAuthRefusals(t *testing.T) {
	t.Setenv(envAuthLeeway, "")
	pemValue := testPEM(t)
	cases := []struct {
		wa   config.WorkspaceAuth
		want string
	}{
		{config.WorkspaceAuth{PublicKey: pemValue, Leeway: new(config.Duration(1500 * time.Millisecond))}, "leeway"},
		{config.WorkspaceAuth{PublicKey: pemValue, JWKSMaxStale: config.Duration(time.Hour)}, "jwks_max_stale needs jwks_url"},
		{config.WorkspaceAuth{JWKSURL: "http://127.0.0.1:1/jwks", JWKSMaxStale: config.Duration(time.Minute)}, "jwks_max_stale"},
		{config.WorkspaceAuth{JWKSURL: "http://127.0.0.1:1/jwks", JWKSMaxStale: config.Duration(time.Second),
			JWKSRefresh: config.Duration(time.Second)}, "longer than jwks_refresh"},
	}
	for _, c := range cases {
		wa := c.wa
		g, err := tokenHandler(&wa).build(zap.NewNop(), nil, pools{})
		if err == nil {
			g.Close()
			t.Errorf("%+v accepted", c.wa)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v does not name %q", c.wa, err, c.want)
		}
	}
}

// TestNegativeLeewayRefused: a negative leeway in the JSON config is refused
// at start-up (the Caddyfile and the environment refuse it too), rather than
// acting as zero.
func TestNegativeLeewayRefused(t *testing.T) {
	clearSupervaizerEnv(t)
	pemPath := filepath.Join(t.TempDir(), "k.pem")
	if err := os.WriteFile(pemPath, []byte(testPEM(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	h := tokenHandler(&config.WorkspaceAuth{PublicKey: pemPath, Leeway: new(config.Duration(-30 * time.Second))})
	if _, err := h.build(zap.NewNop(), nil, pools{}); err == nil || !strings.Contains(err.Error(), "leeway must not be negative") {
		t.Fatalf("negative leeway: %v", err)
	}
}
