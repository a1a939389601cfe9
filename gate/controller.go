// The POST /a2a gate: one step after the other, each in the file named
// for it and each giving its result or a refusal, the refusal written once
// (refuseCall, answers.go).

package gate

import (
	"net/http"

	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// serveController gates POST /a2a (docs/architecture.md, "One job.start,
// step by step"): controllerSteps, then the refusal, if any, written. The
// body's hold on body_memory lasts until the forward ends, or until the
// agent has read it all on the plain forward (forwardPlain takes it over).
func (g *Gate) serveController(w http.ResponseWriter, r *http.Request, next Next, _ route, a *audit) error {
	var hold bodyHold
	defer hold.release()
	id, rf, err := g.controllerSteps(w, r, next, &hold, a)
	if rf != nil {
		return refuseCall(w, a, id, rf)
	}
	return err
}

// controllerSteps are the steps of an /a2a call, in order; a refusal
// (with the id it answers) stops them before anything reaches the agent:
//  1. bodyOwner, token.go: the header's token read once and checked early
//     (whose share of body_memory the body is charged to);
//  2. readCall, body.go: the body read, the envelope parsed;
//  3. decideCall, decision.go: the workspace decision, recorded in a;
//  4. sendCall, idempotency.go: a covered confirm through the guard, any
//     other call straight, both by the one forward: admitForward
//     (admit.go: the limits, the references, the verified context), the
//     header rule, then the agent (forward.go).
func (g *Gate) controllerSteps(w http.ResponseWriter, r *http.Request, next Next, hold *bodyHold, a *audit) ([]byte, *refusal.Refusal, error) {
	owner, early := g.bodyOwner(r)
	body, call, rf := g.readCall(w, r, hold, owner)
	if rf != nil {
		return callID(call), rf, nil
	}
	d := g.decideCall(r.Context(), call, early, a)
	if !d.allowed() {
		return call.ID, d.refused(), nil
	}
	rf, err := g.sendCall(w, r, next, call, body, hold, d, a)
	return call.ID, rf, err
}
