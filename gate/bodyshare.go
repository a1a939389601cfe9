// Whom an /a2a body is charged to in body_memory: its workspace, known
// from the token in its header before the body is read, so that no
// workspace can fill the budget for the others while bodies arrive
// (docs/errors.md, "Body limits"; docs/workspaces.md, "Fair by default").

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
// In local mode no workspace is verified: bodies are unshared, the budget
// first come first served as a whole. It refuses nothing: the decision,
// after the body, gives the answers it always gave. An unknown kid does
// not trigger a JWKS refresh here (the call's agent is not known yet):
// that token is charged to "" and the decision's check may refresh.
func (g *Gate) bodyOwner(r *http.Request) (chargeTo, earlyToken) {
	if g.mode == ModeLocal {
		return chargeTo{unshared: true}, earlyToken{}
	}
	values := r.Header[headerWorkspaceAuth]
	if g.mode != ModeToken || g.verifier == nil || len(values) == 0 {
		return chargeTo{}, earlyToken{}
	}
	claims, err := g.verifier.VerifyWith(r.Context(), grants.TokenFromHeader(values), grants.VerifyOptions{})
	if err != nil {
		return chargeTo{}, earlyToken{ran: true, err: err}
	}
	return chargeTo{id: claims.WorkspaceID}, earlyToken{ran: true}
}

// earlyToken is what bodyOwner's verification found, for the decision's
// (decideToken): ran, the token was verified and observed (metrics) then,
// so the decision's check is not observed again; err, its refusal, which
// the decision gives again without a second verification when it is
// settled (grants.Settled: a bad signature is not checked twice).
type earlyToken struct {
	ran bool
	err error
}
