// The workspace token of an /a2a call: read from its header once, and in
// token mode verified before the body is read, so that the body is charged
// to the verified workspace's share of body_memory (body.go) and the
// decision (decision.go) does not check a settled refusal twice.

package gate

import (
	"net/http"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

// bodyOwner is whom an /a2a body is charged to (bodyBudget): in token
// mode, the workspace_id of the workspace token in the request's header
// when it verifies (signature, issuer, audience, times, server: the checks
// that do not need the call; what it found goes to the decision as
// earlyToken), else ""
// (bootstrap calls, a missing or refused token: one share between them).
// In local mode no workspace is verified (and the token is not read): bodies are unshared, the budget
// first come first served as a whole. It refuses nothing: the decision,
// after the body, gives the answers it always gave. An unknown kid does
// not trigger a JWKS refresh here (the call's agent is not known yet):
// that token is charged to "" and the decision's check may refresh.
func (g *Gate) bodyOwner(r *http.Request) (chargeTo, earlyToken) {
	if g.mode == ModeLocal {
		return chargeTo{unshared: true}, earlyToken{}
	}
	values := r.Header[headerWorkspaceAuth]
	token := grants.TokenFromHeader(values) // the only read of the header on /a2a
	if g.mode != ModeToken || g.verifier == nil || len(values) == 0 {
		return chargeTo{}, earlyToken{token: token}
	}
	vt, err := g.verifier.VerifyOnce(r.Context(), token, grants.VerifyOptions{})
	if err != nil {
		return chargeTo{}, earlyToken{ran: true, token: token, err: err}
	}
	return chargeTo{id: vt.Claims.WorkspaceID}, earlyToken{ran: true, token: token, verified: vt}
}

// earlyToken is what bodyOwner's verification found, for the decision's
// (decideToken): ran, the token was verified and observed (metrics) then,
// so the decision's check is not observed again; err, its refusal, which
// the decision gives again without a second verification when it is
// settled (grants.Settled: a bad signature is not checked twice).
type earlyToken struct {
	ran      bool
	token    string          // the header's token (grants.TokenFromHeader), read once (also when ran is false; "" in local mode, where it is not used)
	err      error           // its refusal
	verified grants.Verified // the token accepted (err nil), for decideToken's grants.Verifier.VerifyAgain
}
