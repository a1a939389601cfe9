package gate

import (
	"testing"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

// TestUncarriableClaims: with verified_headers on, an allowed decision whose
// carried claim holds a control character or a leading or trailing space or
// tab, or a scope that would not come back as it is from the
// space-separated header (empty, a space or tab inside), is refused with workspace_authorization_invalid_claims naming that
// claim; other values (inner tab, non-ASCII) pass, and the compact form and
// off never refuse.
func TestUncarriableClaims(t *testing.T) {
	base := grants.Claims{GrantID: "g", WorkspaceID: "ws", AgentID: "a", AgentSlug: "s", ServerID: "srv",
		Scopes: []string{"job.start"}, JTI: "j"}
	for _, tc := range []struct {
		name, claim string
		set         func(c *grants.Claims)
		refused     bool
	}{
		{"clean", "", func(*grants.Claims) {}, false},
		{"newline in jti", "jti", func(c *grants.Claims) { c.JTI = "tok\nX-Evil: 1" }, true},
		{"carriage return in grant_id", "grant_id", func(c *grants.Claims) { c.GrantID = "g\r" }, true},
		{"DEL in agent_workspace_ref", "agent_workspace_ref", func(c *grants.Claims) { c.AgentWorkspaceRef = "ref\x7f" }, true},
		{"NUL in workspace_slug", "workspace_slug", func(c *grants.Claims) { c.WorkspaceSlug = "a\x00b" }, true},
		{"leading space in workspace_id", "workspace_id", func(c *grants.Claims) { c.WorkspaceID = " ws" }, true},
		{"trailing tab in agent_id", "agent_id", func(c *grants.Claims) { c.AgentID = "a\t" }, true},
		{"control character in a scope", "scopes", func(c *grants.Claims) { c.Scopes = []string{"job.start", "x\x01"} }, true},
		{"a space inside a scope (two scopes in the header)", "scopes", func(c *grants.Claims) { c.Scopes = []string{"job.start", "admin job.cancel"} }, true},
		{"a leading space on a scope not first", "scopes", func(c *grants.Claims) { c.Scopes = []string{"job.start", " admin"} }, true},
		{"a trailing space on a scope not last", "scopes", func(c *grants.Claims) { c.Scopes = []string{"admin ", "job.start"} }, true},
		{"an empty scope in the middle", "scopes", func(c *grants.Claims) { c.Scopes = []string{"job.start", "", "job.sync"} }, true},
		{"a tab inside a scope", "scopes", func(c *grants.Claims) { c.Scopes = []string{"a\tb"} }, true},
		{"inner tab and space", "", func(c *grants.Claims) { c.WorkspaceSlug = "a b\tc" }, false},
		{"non-ASCII", "", func(c *grants.Claims) { c.WorkspaceSlug = "Zürich" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.set(&c)
			d := (&Gate{verified: VerifiedEach}).uncarriable(decision{mode: verifiedToken, claims: &c})
			if d.allowed() == tc.refused {
				t.Fatalf("allow %v, want refused %v", d.allowed(), tc.refused)
			}
			if tc.refused {
				want := grants.UncarriableClaim(tc.claim)
				if d.refusal.Code != grants.CodeInvalidClaims || d.refusal.Message != want.Message {
					t.Fatalf("refusal %q %q, want %q %q", d.refusal.Code, d.refusal.Message, grants.CodeInvalidClaims, want.Message)
				}
				for _, f := range []VerifiedForm{VerifiedCompact, VerifiedOff} {
					if d := (&Gate{verified: f}).uncarriable(decision{mode: verifiedToken, claims: &c}); !d.allowed() {
						t.Fatalf("verified_headers %s refused %v", f, d.refusal)
					}
				}
			}
		})
	}
	if m := grants.UncarriableClaim("jti").Message; m != "Workspace authorization token claims are invalid: [{'type': 'header_value', 'loc': ('jti',), 'msg': 'Value cannot be carried in an HTTP header'}]" {
		t.Fatalf("message %q", m)
	}
}
