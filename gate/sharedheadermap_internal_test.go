package gate

import (
	"net/http"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

// TestVerifiedHeadersSharedWithCaddy: the verified headers are added to,
// and the token (forward_token off), the trailers and the replay headers
// removed from, the header map of the request the gate was given, which a
// shallow copy made before the gate (Caddy's server, its tracing and
// timeouts handlers) shares: Caddy's {http.request.header.*} placeholders
// and handle_errors routes read that copy, so they see what the agent gets.
func TestVerifiedHeadersSharedWithCaddy(t *testing.T) {
	g := &Gate{verified: VerifiedEach, forwardToken: false}
	c := &grants.Claims{GrantID: "grant-1", WorkspaceID: "ws-1", AgentSlug: "agent_interviewer", JTI: "jti-1"}
	r := &http.Request{Method: http.MethodPost, Header: http.Header{
		"X-Api-Key": {"k"}, headerWorkspaceAuth: {"Bearer t"}, "Idempotency-Key": {"i"}, headerTrailer: {"X-T"},
	}}
	caddys := *r // the request Caddy's placeholders read
	g.injectVerified(r.Header, decision{mode: verifiedToken, claims: c})
	var agent *http.Request
	err := g.pass(nextFunc(func(_ http.ResponseWriter, fr *http.Request) error { agent = fr; return nil }), nil, r)
	if err != nil || agent == nil {
		t.Fatalf("pass: %v", err)
	}
	for name, h := range map[string]http.Header{"Caddy's request": caddys.Header, "the agent's request": agent.Header} {
		if got := h.Get("X-Supervaize-Verified-Workspace-Id"); got != "ws-1" {
			t.Errorf("%s: verified workspace %q, want ws-1", name, got)
		}
		for _, gone := range []string{headerWorkspaceAuth, "Idempotency-Key", headerTrailer} {
			if v := h.Values(gone); len(v) != 0 {
				t.Errorf("%s still has %s: %q", name, gone, v)
			}
		}
	}
}
