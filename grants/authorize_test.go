package grants_test

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

func TestAuthorize(t *testing.T) {
	agents := grants.Agents{testAgent: testAgentID, "fresh_agent": ""}
	claims := func(edit func(c *grants.Claims)) *grants.Claims {
		c := &grants.Claims{
			GrantID: "grant_1", WorkspaceID: "workspace_123", WorkspaceSlug: "acme",
			AgentID: testAgentID, AgentSlug: testAgent, ServerID: testServer,
			Scopes: []string{grants.ScopeActionInvoke, "job.start", grants.ScopeSurfaceLoad, "job.start.surface", "resource.contacts.list"},
		}
		if edit != nil {
			edit(c)
		}
		return c
	}
	target := func(edit func(tg *grants.Target)) grants.Target {
		tg := grants.Target{AgentSlug: testAgent, WorkspaceID: "workspace_123", WorkspaceSlug: "acme",
			Scopes: grants.ActionScopes("job.start")}
		if edit != nil {
			edit(&tg)
		}
		return tg
	}
	cases := []struct {
		name   string
		claims *grants.Claims
		target grants.Target
		want   string
	}{
		{"action allowed", claims(nil), target(nil), ""},
		{"surface allowed", claims(nil), target(func(tg *grants.Target) { tg.Scopes = grants.SurfaceScopes("job.start.surface") }), ""},
		{"resource allowed", claims(nil), target(func(tg *grants.Target) { tg.Scopes = grants.ResourceScopes("contacts", "list") }), ""},
		{"no scopes needed", claims(nil), target(func(tg *grants.Target) { tg.Scopes = nil }), ""},
		{"request without slug", claims(nil), target(func(tg *grants.Target) { tg.WorkspaceSlug = "" }), ""},
		{"token without slug", claims(func(c *grants.Claims) { c.WorkspaceSlug = "" }), target(nil), ""},

		{"agent not served", claims(nil), target(func(tg *grants.Target) { tg.AgentSlug = "other_agent" }), grants.CodeUnknownAgent},
		{"agent not served, empty slug", claims(nil), target(func(tg *grants.Target) { tg.AgentSlug = "" }), grants.CodeUnknownAgent},
		{"unknown agent wins over wrong workspace", claims(nil), target(func(tg *grants.Target) { tg.AgentSlug, tg.WorkspaceID = "x", "w" }), grants.CodeUnknownAgent},
		{"agent has no Studio id", claims(func(c *grants.Claims) { c.AgentSlug, c.AgentID = "fresh_agent", "" }),
			target(func(tg *grants.Target) { tg.AgentSlug = "fresh_agent" }), grants.CodeAgentNotRegistered},
		{"token agent_slug differs", claims(func(c *grants.Claims) { c.AgentSlug = "other" }), target(nil), grants.CodeWrongAgent},
		{"token agent_id differs", claims(func(c *grants.Claims) { c.AgentID = "01OTHER" }), target(nil), grants.CodeWrongAgent},
		{"agent slug case differs", claims(func(c *grants.Claims) { c.AgentSlug = strings.ToUpper(testAgent) }), target(nil), grants.CodeWrongAgent},
		{"wrong agent wins over wrong workspace", claims(func(c *grants.Claims) { c.AgentID, c.WorkspaceID = "x", "y" }), target(nil), grants.CodeWrongAgent},
		{"wrong agent_slug wins over no Studio id (the SDK's order)", claims(func(c *grants.Claims) { c.AgentSlug = "other" }),
			target(func(tg *grants.Target) { tg.AgentSlug = "fresh_agent" }), grants.CodeWrongAgent},
		{"token workspace_id empty", claims(func(c *grants.Claims) { c.WorkspaceID = "" }), target(nil), grants.CodeWrongWorkspace},
		{"token and request workspace_id empty (stricter than the SDK)", claims(func(c *grants.Claims) { c.WorkspaceID = "" }),
			target(func(tg *grants.Target) { tg.WorkspaceID = "" }), grants.CodeWrongWorkspace},
		{"token agent_id empty", claims(func(c *grants.Claims) { c.AgentID = "" }), target(nil), grants.CodeWrongAgent},
		{"workspace id differs", claims(nil), target(func(tg *grants.Target) { tg.WorkspaceID = "workspace_999" }), grants.CodeWrongWorkspace},
		{"workspace id empty in request", claims(nil), target(func(tg *grants.Target) { tg.WorkspaceID = "" }), grants.CodeWrongWorkspace},
		{"both slugs present and different", claims(nil), target(func(tg *grants.Target) { tg.WorkspaceSlug = "evil" }), grants.CodeWrongWorkspace},
		{"wrong workspace wins over missing scope", claims(nil), target(func(tg *grants.Target) { tg.WorkspaceID, tg.Scopes = "w", []string{"nope"} }), grants.CodeWrongWorkspace},
		{"action scope missing", claims(nil), target(func(tg *grants.Target) { tg.Scopes = grants.ActionScopes("job.stop") }), grants.CodeMissingScope},
		{"method scope missing", claims(func(c *grants.Claims) { c.Scopes = []string{"job.start"} }), target(nil), grants.CodeMissingScope},
		{"surface method scope missing", claims(func(c *grants.Claims) { c.Scopes = []string{"job.start.surface", grants.ScopeActionInvoke} }),
			target(func(tg *grants.Target) { tg.Scopes = grants.SurfaceScopes("job.start.surface") }), grants.CodeMissingScope},
		{"resource operation missing", claims(nil), target(func(tg *grants.Target) { tg.Scopes = grants.ResourceScopes("contacts", "delete") }), grants.CodeMissingScope},
		{"scope prefix is not the scope", claims(func(c *grants.Claims) { c.Scopes = []string{grants.ScopeActionInvoke, "job"} }), target(nil), grants.CodeMissingScope},
		{"scope with space is not the scope", claims(func(c *grants.Claims) { c.Scopes = []string{grants.ScopeActionInvoke, "job.start "} }), target(nil), grants.CodeMissingScope},
		{"joined scopes are not two scopes", claims(func(c *grants.Claims) { c.Scopes = []string{grants.ScopeActionInvoke + " job.start"} }), target(nil), grants.CodeMissingScope},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := grants.Authorize(c.claims, agents, c.target)
			if got := codeOf(t, err); got != c.want {
				t.Fatalf("code %q (%v), want %q", got, err, c.want)
			}
			if err != nil {
				var e *refusal.Refusal
				if !errors.As(err, &e) || e.Message == "" || !strings.HasPrefix(err.Error(), e.Code+": "+e.Message) {
					t.Fatalf("error shape %#v", err)
				}
			}
		})
	}
}

func TestScopeRules(t *testing.T) {
	if got := grants.ActionScopes("job.start"); !reflect.DeepEqual(got, []string{"supervaizer/action.invoke", "job.start"}) {
		t.Fatalf("ActionScopes %q", got)
	}
	if got := grants.SurfaceScopes("mission.analytics"); !reflect.DeepEqual(got, []string{"supervaizer/surface.load", "mission.analytics"}) {
		t.Fatalf("SurfaceScopes %q", got)
	}
	for _, op := range []string{"list", "get", "create", "update", "delete", "import"} {
		if got := grants.ResourceScopes("contacts", op); !reflect.DeepEqual(got, []string{"resource.contacts." + op}) {
			t.Fatalf("ResourceScopes %q", got)
		}
	}
	if !reflect.DeepEqual(grants.ResourceOperations, []string{"list", "get", "create", "update", "delete", "import"}) {
		t.Fatalf("ResourceOperations %q", grants.ResourceOperations)
	}
	bootstrap := []struct {
		id              string
		action, surface bool
	}{
		{"workspace_binding.options", true, false},
		{"workspace_binding.create", true, true},
		{"workspace_binding.delete", false, false},
		{"workspace_binding.custom", false, false},
		{"job.start", false, false},
		{"", false, false},
		{"Workspace_binding.create", false, false},
		{"workspace_binding.create ", false, false},
	}
	for _, b := range bootstrap {
		if grants.IsBootstrapAction(b.id) != b.action || grants.IsBootstrapSurface(b.id) != b.surface {
			t.Errorf("bootstrap %q: action %v surface %v", b.id, grants.IsBootstrapAction(b.id), grants.IsBootstrapSurface(b.id))
		}
	}
}

func TestLoadPublicKey(t *testing.T) {
	key := newSigner(t, "k1")
	der, err := x509.MarshalPKIXPublicKey(key.pub)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	rsaDER, err := x509.MarshalPKIXPublicKey(&rsaKey().PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	rsaPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: rsaDER}))
	privDER, err := x509.MarshalPKCS8PrivateKey(key.priv)
	if err != nil {
		t.Fatal(err)
	}
	privPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}))

	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name  string
		value string
		ok    bool
	}{
		{"inline PEM", pubPEM, true},
		{"inline PEM with surrounding space", "\n  " + pubPEM + "\n\n", true},
		{"PEM file", write("pub.pem", pubPEM), true},
		{"PEM file with leading blank lines", write("pub2.pem", "\n\n"+pubPEM), true},
		{"inline RSA key", rsaPEM, false},
		{"RSA key file", write("rsa.pem", rsaPEM), false},
		{"private key PEM", privPEM, false},
		{"garbage PEM body", "-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n", false},
		{"BEGIN marker only", "-----BEGIN PUBLIC KEY-----", false},
		{"garbage file", write("garbage.pem", "not a key"), false},
		{"missing file", filepath.Join(dir, "nope.pem"), false},
		{"empty", "", false},
		{"raw base64 key", "MCowBQYDK2VwAyEA" + strings.Repeat("A", 43) + "=", false},
		// .env files and secret stores write a multi-line value on one line
		// with literal two-character \n sequences.
		{"inline PEM with literal \\n", strings.ReplaceAll(pubPEM, "\n", `\n`), true},
		{"inline PEM with literal \\r\\n", strings.ReplaceAll(pubPEM, "\n", `\r\n`), true},
		{"inline PEM with literal \\n, quoted by the shell", " " + strings.ReplaceAll(pubPEM, "\n", `\n`) + " ", true},
		{"literal \\n mixed with real newlines: not rewritten", strings.Replace(pubPEM, "\n", `\n`, 1), false},
		{"literal \\n in a garbage body", `-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := grants.LoadPublicKey(c.value)
			if c.ok {
				if err != nil {
					t.Fatal(err)
				}
				if !got.Equal(key.pub) || len(got) != ed25519.PublicKeySize {
					t.Fatalf("key %x", got)
				}
				// The loaded key verifies real tokens.
				v := pemVerifier(t, got, newClock(), nil)
				if _, err := v.Verify(ctx, key.mintWith(t, nil)); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted: %x", got)
			}
			if strings.Contains(err.Error(), "BEGIN") || (len(der) > 0 && strings.Contains(err.Error(), string(der))) {
				t.Fatalf("error leaks key material: %v", err)
			}
		})
	}
}

// TestMessagesAreTheSDKs: every data.code has the SDK's text (the table of
// docs/sdk-wire.md), and a code the SDK does not have keeps our text.
func TestMessagesAreTheSDKs(t *testing.T) {
	for _, code := range []string{grants.CodeNotConfigured, grants.CodeMissing, grants.CodeMalformed, grants.CodeUnsupportedAlg,
		grants.CodeInvalidKey, grants.CodeMissingKID, grants.CodeJWKSUnavailable, grants.CodeInvalidJWKS, grants.CodeUnknownKID,
		grants.CodeInvalidJWK, grants.CodeBadSignature, grants.CodeInvalidClaims, grants.CodeWrongIssuer, grants.CodeWrongAudience,
		grants.CodeExpired, grants.CodeNotYetValid, grants.CodeWrongServer, grants.CodeUnknownAgent, grants.CodeAgentNotRegistered,
		grants.CodeWrongAgent, grants.CodeWrongWorkspace, grants.CodeMissingScope} {
		if grants.Message(code) == "" {
			t.Errorf("%s has no SDK text", code)
		}
	}
	if e := grants.FailForTest("workspace_authorization_sidecar_only", "our words"); e.Message != "our words" {
		t.Errorf("sidecar-only code: message %q", e.Message)
	}
}
