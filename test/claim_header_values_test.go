package test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// TestClaimNoHeaderCanCarry: a signed token whose carried claim (jti,
// agent_workspace_ref, grant_id) holds a control character,
// or a leading or trailing space, is refused at the decision with
// workspace_authorization_invalid_claims naming the claim, and the agent
// receives nothing: with verified_headers on, Go's transport would refuse
// to send the header (the call then failed as agent_unavailable after the
// audit line said allow), and a trimmed value would tell the agent another
// value than the verified one (gate/verifiedcontext.go, uncarriable).
func TestClaimNoHeaderCanCarry(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "")
	for _, tc := range []struct{ claim, value string }{
		{"jti", "tok\nX-Evil: 1"},
		{"agent_workspace_ref", "ref\x7f"},
		{"grant_id", "grant\r"},
		{"agent_workspace_ref", " ref"},
	} {
		t.Run(tc.claim, func(t *testing.T) {
			ag.reset()
			tok := key.mintWith(t, func(c jwt.MapClaims) { c[tc.claim] = tc.value })
			a := wantRPCError(t, sc.rpc(t, actionFor(t, "job.sync"), tok), -32030, "workspace_authorization_invalid_claims")
			if !strings.Contains(a.Error.Message, "('"+tc.claim+"',)") {
				t.Errorf("message %q does not name %s", a.Error.Message, tc.claim)
			}
			if n := len(ag.received()); n != 0 {
				t.Fatalf("the agent received %d requests", n)
			}
		})
	}
}

// TestClaimNoHeaderCanCarryKeepsNoKey: the same refusal on a covered
// job.start holds no idempotency key: the retry with a clean token runs
// once at the agent.
func TestClaimNoHeaderCanCarryKeepsNoKey(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "\t\tidempotency {\n\t\t\twait_timeout 1s\n\t\t}\n")
	body := freshJobStart(t)
	bad := key.mintWith(t, func(c jwt.MapClaims) { c["jti"] = "tok\n1" })
	wantRPCError(t, sc.rpc(t, body, bad), -32030, "workspace_authorization_invalid_claims")
	if n := len(ag.received()); n != 0 {
		t.Fatalf("the agent received %d requests for the refused call", n)
	}
	resultOf(t, sc.rpc(t, body, key.mint(t, baseClaims())))
	if n := len(ag.received()); n != 1 {
		t.Fatalf("the agent received %d requests, want 1 (the clean retry)", n)
	}
}

// TestScopesNotCarriedAsTheyAre: a signed scope list the space-separated
// X-Supervaize-Verified-Scopes header would not give back as it is (a
// scope with a space inside, read as two; a leading or trailing space; an
// empty scope) is refused with invalid_claims naming scopes, and the agent
// receives nothing.
func TestScopesNotCarriedAsTheyAre(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "")
	for _, tc := range []struct {
		name  string
		extra []any
	}{
		{"leading space, not first", []any{" admin"}},
		{"trailing space, not last", []any{"admin ", "z"}},
		{"inner space", []any{"admin job.cancel"}},
		{"empty scope in the middle", []any{"", "z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ag.reset()
			tok := key.mintWith(t, func(c jwt.MapClaims) { c["scopes"] = append(c["scopes"].([]any), tc.extra...) })
			a := wantRPCError(t, sc.rpc(t, actionFor(t, "job.sync"), tok), -32030, "workspace_authorization_invalid_claims")
			if !strings.Contains(a.Error.Message, "('scopes',)") {
				t.Errorf("message %q does not name scopes", a.Error.Message)
			}
			if n := len(ag.received()); n != 0 {
				t.Fatalf("the agent received %d requests", n)
			}
		})
	}
}

// TestLocalModeContextNotCarried: in local mode the verified context is the
// request's own workspace; one no header carries as it is (a leading space,
// a control character, a trailing tab) gets the same refusal, and the agent
// receives nothing.
func TestLocalModeContextNotCarried(t *testing.T) {
	ag := startAgent(t)
	sc := startSidecar(t, ag.addr(), localDirective(""))
	for _, ws := range []string{" workspace_123", "workspace_123\u0001", "workspace_123\t"} {
		t.Run(fmt.Sprintf("%q", ws), func(t *testing.T) {
			ag.reset()
			body := actionBody(t, func(r map[string]any) {
				r["action"] = "job.sync"
				r["workspace"] = map[string]any{"id": ws, "slug": "acme"}
			})
			wantRPCError(t, sc.rpc(t, body, ""), -32030, "workspace_authorization_invalid_claims")
			if n := len(ag.received()); n != 0 {
				t.Fatalf("the agent received %d requests", n)
			}
		})
	}
}
