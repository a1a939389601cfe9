package gate

import (
	"context"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// TestEarlyTokenRefusalNotVerifiedAgain: the decision gives a settled
// refusal found before the body was read (bodyOwner) again without a second
// verification (a bad signature is checked once a call), and verifies
// again what time or a key refresh may change. The token given to the
// decision is valid: only a second verification allows it.
func TestEarlyTokenRefusalNotVerifiedAgain(t *testing.T) {
	e := newBenchGate(t, -1, false) // no cache: a second verification verifies
	values := []string{"Bearer " + e.mint(t, "jti-early")}
	call := benchCall(t, "")
	for _, c := range []struct {
		code      string
		reused    bool
		wantAllow bool
	}{
		{grants.CodeBadSignature, true, false},
		{grants.CodeMalformed, true, false},
		{grants.CodeExpired, true, false},
		{grants.CodeWrongAudience, true, false},
		{grants.CodeNotYetValid, false, true},
		{grants.CodeUnknownKID, false, true},
		{grants.CodeJWKSUnavailable, false, true},
	} {
		early := earlyToken{ran: true, token: grants.TokenFromHeader(values), err: grants.Refuse(c.code, "")}
		d := e.g.decideCall(context.Background(), call, early, &audit{})
		if d.allowed() != c.wantAllow {
			t.Errorf("early %s: allowed %v, want %v (reused %v)", c.code, d.allowed(), c.wantAllow, c.reused)
		}
		if c.reused && (d.refusal == nil || refusal.As(d.refusal).Code != c.code) {
			t.Errorf("early %s: the decision's refusal %v, want the early one", c.code, d.refusal)
		}
	}
	// A token that verified early is verified again (unobserved): allowed.
	if d := e.g.decideCall(context.Background(), call, earlyToken{ran: true, token: grants.TokenFromHeader(values)}, &audit{}); !d.allowed() {
		t.Errorf("early success: %v", d.refusal)
	}
}
