package caddymodule

import (
	"fmt"
	"github.com/supervaize/supervaizer-sidecar/config"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestAdminOf pins the reflection adminOf relies on against the Caddy
// version in go.mod: a config's admin section is read back exactly.
func TestAdminOf(t *testing.T) {
	off := false
	for _, c := range []struct {
		name string
		cfg  *caddy.Config
		want *caddy.AdminConfig
	}{
		{"absent", &caddy.Config{}, nil},
		{"disabled", &caddy.Config{Admin: &caddy.AdminConfig{Disabled: true, Config: &caddy.ConfigSettings{Persist: &off}}},
			&caddy.AdminConfig{Disabled: true, Config: &caddy.ConfigSettings{Persist: &off}}},
		{"listen", &caddy.Config{Admin: &caddy.AdminConfig{Listen: "127.0.0.1:2999"}}, &caddy.AdminConfig{Listen: "127.0.0.1:2999"}},
	} {
		ctx, err := caddy.ProvisionContext(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := adminOf(ctx)
		if !ok {
			t.Fatalf("%s: adminOf could not read the config: Caddy's Context layout changed", c.name)
		}
		if fmt.Sprint(CaddyConfigWarnings(got)) != fmt.Sprint(CaddyConfigWarnings(c.want)) ||
			(got == nil) != (c.want == nil) || (got != nil && (got.Disabled != c.want.Disabled || got.Listen != c.want.Listen)) {
			t.Errorf("%s: adminOf = %+v, want %+v", c.name, got, c.want)
		}
	}
	if _, ok := adminOf(caddy.Context{}); ok {
		t.Error("adminOf of a context without config: ok")
	}
}

func TestCaddyConfigWarnings(t *testing.T) {
	off, on := false, true
	has := func(ws []string, s string) bool {
		for _, w := range ws {
			if strings.Contains(w, s) {
				return true
			}
		}
		return false
	}
	w := CaddyConfigWarnings(nil)
	if len(w) != 2 || !has(w, "admin endpoint is enabled on "+caddy.DefaultAdminListen) || !has(w, "autosaves") || !has(w, caddy.ConfigAutosavePath) {
		t.Errorf("defaults: %q", w)
	}
	if w := CaddyConfigWarnings(&caddy.AdminConfig{Disabled: true, Config: &caddy.ConfigSettings{Persist: &off}}); len(w) != 0 {
		t.Errorf("admin off, persist off: %q", w)
	}
	if w := CaddyConfigWarnings(&caddy.AdminConfig{Listen: "unix//run/caddy-admin.sock", Config: &caddy.ConfigSettings{Persist: &on}}); len(w) != 1 || !has(w, "autosaves") {
		t.Errorf("unix socket admin, persist on: %q", w)
	}
	if w := CaddyConfigWarnings(&caddy.AdminConfig{Listen: "0.0.0.0:2019", Config: &caddy.ConfigSettings{Persist: &off}}); len(w) != 1 || !has(w, "enabled on 0.0.0.0:2019") {
		t.Errorf("admin on 0.0.0.0: %q", w)
	}
}

// startupTestPEM writes a fresh Ed25519 public key PEM and returns its path.
func startupTestPEM(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "studio-signing.pub")
	if err := os.WriteFile(path, []byte(testPEM(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startupBuild builds h with a logger that records warnings.
func startupBuild(t *testing.T, h *Handler) ([]string, error) {
	t.Helper()
	core, logs := observer.New(zapcore.WarnLevel)
	g, err := h.build(zap.New(core), nil, pools{})
	if g != nil {
		g.Close()
	}
	var warns []string
	for _, e := range logs.All() {
		warns = append(warns, e.Message)
	}
	return warns, err
}

func startupTokenHandler(pemPath string, keys []config.APIKey, agents map[string]string) *Handler {
	on := true
	return &Handler{Config: config.Config{ServerID: "srv-1", APIKeys: keys, Agents: agents, Registration: &config.RegistrationConfig{Source: "off"},
		WorkspaceAuth: &config.WorkspaceAuth{Required: &on, Issuer: "https://studio.test", PublicKey: pemPath}}}
}

func TestStartupRefusesTokenModeWithoutAgents(t *testing.T) {
	clearSupervaizerEnv(t)
	pemPath := startupTestPEM(t)
	_, err := startupBuild(t, startupTokenHandler(pemPath, []config.APIKey{{Key: "k"}}, nil))
	if err == nil || !strings.Contains(err.Error(), "agent <slug> <studio_agent_id>") || !strings.Contains(err.Error(), "workspace_authorization_unknown_agent") {
		t.Fatalf("token mode without agents: %v", err)
	}
	// The SDK environment alone (no config at all but the agent line) starts.
	t.Setenv(envAPIKey, "env-key")
	t.Setenv(envServerID, "srv-env")
	t.Setenv(envAuthRequired, "true")
	t.Setenv(envAuthIssuer, "https://studio.test")
	t.Setenv(envAuthPEM, pemPath)
	if _, err := startupBuild(t, &Handler{}); err == nil || !strings.Contains(err.Error(), "no agent configured") {
		t.Fatalf("SDK environment without an agent line: %v", err)
	}
	if warns, err := startupBuild(t, &Handler{Config: config.Config{Agents: map[string]string{"a": "A"}}}); err != nil || len(warns) != 2 || !strings.Contains(strings.Join(warns, "\n"), "registration not enforced") ||
		!strings.Contains(strings.Join(warns, "\n"), "idempotency store memory") {
		t.Fatalf("SDK environment plus one agent line: %v %q", err, warns)
	}
	// Local mode and not_configured mode keep starting without agents.
	t.Setenv(envAuthRequired, "")
	t.Setenv(envAuthIssuer, "")
	t.Setenv(envAuthPEM, "")
	if _, err := startupBuild(t, &Handler{}); err != nil {
		t.Fatalf("not_configured mode without agents: %v", err)
	}
}

func TestStartupWarnings(t *testing.T) {
	clearSupervaizerEnv(t)
	pemPath := startupTestPEM(t)
	has := func(ws []string, s string) bool {
		for _, w := range ws {
			if strings.Contains(w, s) {
				return true
			}
		}
		return false
	}
	agents := map[string]string{"a": "A"}
	warns, _ := startupBuild(t, startupTokenHandler(pemPath, []config.APIKey{{Key: "k"}}, agents))
	if has(warns, "ignored") || has(warns, "no write-scope") || has(warns, "Studio agent id") {
		t.Fatalf("clean config warned: %q", warns)
	}
	t.Setenv(envAPIKey, "env-key")
	if warns, _ = startupBuild(t, startupTokenHandler(pemPath, []config.APIKey{{Key: "k"}}, agents)); !has(warns, "$SUPERVAIZER_API_KEY is set but ignored") {
		t.Errorf("env key shadowed by api_key lines: no warning in %q", warns)
	}
	if warns, _ = startupBuild(t, startupTokenHandler(pemPath, []config.APIKey{{Key: "env-key"}, {Key: "r", Scope: "read"}}, agents)); has(warns, "ignored") {
		t.Errorf("env key used by an api_key line: warned %q", warns)
	}
	if warns, _ = startupBuild(t, startupTokenHandler(pemPath, []config.APIKey{{Key: "r", Scope: "read"}}, agents)); !has(warns, "no write-scope API key") {
		t.Errorf("read keys only: no warning in %q", warns)
	}
	if warns, _ = startupBuild(t, startupTokenHandler(pemPath, []config.APIKey{{Key: "k"}}, map[string]string{"a": "A", "b": ""})); !has(warns, "agent_not_registered") || !has(warns, ": b") {
		t.Errorf("agent without id: no warning in %q", warns)
	}
	if has(warns, "has no effect") {
		t.Errorf("clean config warned of a setting without effect: %q", warns)
	}
	// A setting that does nothing where it is written is named.
	h := startupTokenHandler(pemPath, []config.APIKey{{Key: "k"}}, agents)
	h.WorkspaceAuth.JWKSRefresh = config.Duration(5 * time.Minute)
	h.WorkspaceAuth.JWKSTimeout = config.Duration(time.Second)
	h.Idempotency = &config.IdempotencyConfig{Store: "off", TTL: config.Duration(time.Hour), Actions: []string{"job.sync"}}
	h.Registration = &config.RegistrationConfig{Source: "off", Refresh: config.Duration(time.Hour)}
	h.References = &config.ReferencesConfig{Store: "off", Unknown: "deny", MaxPerWorkspace: 10}
	local, off := true, false
	h.LocalMode = &local // beside workspace_auth required: tokens are checked
	h.VerifiedHeaders, h.VerifiedHeadersForm = &off, "compact"
	warns, _ = startupBuild(t, h)
	for _, name := range []string{"workspace_auth jwks_refresh", "workspace_auth jwks_timeout", "idempotency ttl", "idempotency actions", "registration refresh",
		"references unknown", "references max_per_workspace", "local_mode", "verified_headers_form"} {
		if !has(warns, "setting has no effect: "+name+" (") {
			t.Errorf("%s without effect: no warning in %q", name, warns)
		}
	}
	if has(warns, "jwks_max_stale") || has(warns, "idempotency lock_ttl") || has(warns, "references ttl") {
		t.Errorf("a setting not written was named: %q", warns)
	}
	// The memory store forgets at a restart: said in token mode, not with a file store.
	if warns, _ = startupBuild(t, startupTokenHandler(pemPath, []config.APIKey{{Key: "k"}}, agents)); !has(warns, "idempotency store memory") {
		t.Errorf("memory store: no warning in %q", warns)
	}
	h = startupTokenHandler(pemPath, []config.APIKey{{Key: "k"}}, agents)
	h.Idempotency = &config.IdempotencyConfig{Store: "file", FilePath: filepath.Join(t.TempDir(), "idem.db")}
	if warns, _ = startupBuild(t, h); has(warns, "idempotency store memory") {
		t.Errorf("file store: warned %q", warns)
	}
}

// TestStartupWarnsShortServerID: a server_id of 5 characters or fewer
// (counted as characters, from the config or $SUPERVAIZER_SERVER_ID) is
// accepted with a warning naming server_id: a Supervaizer SDK 1.8.0 agent
// would replace it with a random id and refuse every token wrong_audience.
// 6 characters and more: no warning.
func TestStartupWarnsShortServerID(t *testing.T) {
	clearSupervaizerEnv(t)
	pemPath := startupTestPEM(t)
	agents := map[string]string{"a": "A"}
	short := func(ws []string) bool {
		for _, w := range ws {
			if strings.Contains(w, "server_id") && strings.Contains(w, "wrong_audience") {
				return true
			}
		}
		return false
	}
	for id, want := range map[string]bool{"srv-1": true, "s": true, "sérvé": true, "srv-12": false, "sérvé1": false} {
		h := startupTokenHandler(pemPath, []config.APIKey{{Key: "k"}}, agents)
		h.ServerID = id
		warns, err := startupBuild(t, h)
		if err != nil {
			t.Fatalf("server_id %q refused: %v", id, err)
		}
		if short(warns) != want {
			t.Errorf("server_id %q: warned %v, want %v: %q", id, short(warns), want, warns)
		}
	}
	t.Setenv(envServerID, "env01")
	h := startupTokenHandler(pemPath, []config.APIKey{{Key: "k"}}, agents)
	h.ServerID = ""
	if warns, err := startupBuild(t, h); err != nil || !short(warns) || !strings.Contains(strings.Join(warns, "\n"), `"env01"`) {
		t.Errorf("short $%s: %v %q", envServerID, err, warns)
	}
}

func TestEffectiveSettings(t *testing.T) {
	clearSupervaizerEnv(t)
	t.Setenv(envAPIKey, "env-secret-key")
	t.Setenv(envServerID, "srv-env")
	t.Setenv(envAuthRequired, "yes")
	t.Setenv(envAuthIssuer, "https://studio.test")
	t.Setenv(envAuthJWKS, "https://user:pw@jwks.invalid/jwks.json?sig=XYZ")
	h := &Handler{Config: config.Config{Agents: map[string]string{"a": "A"}, Registration: &config.RegistrationConfig{Source: "off"},
		Idempotency: &config.IdempotencyConfig{Store: "redis", RedisURL: "redis://:redispw@r:6379/0"}}}
	_, err := startupBuild(t, h)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, s := range h.effective {
		fmt.Fprintf(&b, "%s=%s [%s]\n", s.Name, s.Value, s.Source)
	}
	got := b.String()
	for _, want := range []string{
		"mode=token", "server_id=srv-env [$SUPERVAIZER_SERVER_ID]",
		"api_key=" + fingerprint("env-secret-key") + " write [$SUPERVAIZER_API_KEY]",
		"workspace_auth required=true [$SUPERVAIZER_WORKSPACE_AUTH_REQUIRED]",
		"workspace_auth audience=supervaizer-server:srv-env [default]",
		"workspace_auth jwks_url=https://jwks.invalid/jwks.json?sig=REDACTED [$SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL]",
		"workspace_auth leeway=30s [default]",
		"idempotency=redis single redis://r:6379/0 [config]",
		"max_body_a2a=16 MiB [default]", "max_body_data=16 MiB [default]", "max_body=1.0 MiB [default]",
		"body_memory=32 MiB [default]", "body_timeout=10s [default]", "forward_token=on [default]", "verified_headers=on [default]", "audit_log=all [default]",
		"workspace_auth jwks_refresh=5m0s [default]", "workspace_auth jwks_unknown_kid_interval=30s [default]", "workspace_auth jwks_timeout=5s [default]",
		"workspace_auth jwks_max_stale=off [default]", "workspace_auth max_token_lifetime=off [default]", "workspace_auth cache_size=10000 [default]",
		"events_require_workspace_token=false [default]", "legacy_routes=allow [default]", "other_routes=deny [default]",
	} {
		if !strings.Contains(got, want+"\n") && !strings.Contains(got, want+" [") {
			t.Errorf("settings lack %q:\n%s", want, got)
		}
	}
	for _, secret := range []string{"env-secret-key", "pw", "XYZ", "redispw"} {
		if strings.Contains(got, secret) {
			t.Errorf("settings show %q:\n%s", secret, got)
		}
	}
	on := true
	h = &Handler{Config: config.Config{Agents: map[string]string{"a": "A"}, Registration: &config.RegistrationConfig{Source: "off"}, LocalMode: &on,
		VerifiedHeaders: &on, VerifiedHeadersForm: config.VerifiedFormCompact, AuditLog: "deny", MaxBody: 4096,
		OtherRoutes: "public", LegacyRoutes: "deny", EventsRequireWorkspaceToken: true}}
	if _, err := startupBuild(t, h); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	for _, s := range h.effective {
		fmt.Fprintf(&b, "%s=%s [%s]\n", s.Name, s.Value, s.Source)
	}
	for _, want := range []string{"verified_headers=compact [config]", "audit_log=deny [config]", "max_body=4.0 KiB [config]", "max_body_a2a=4.0 KiB [config]",
		"other_routes=public [config]", "legacy_routes=deny [config]", "events_require_workspace_token=true [config]"} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("settings lack %q:\n%s", want, b.String())
		}
	}
}
