// The idempotency step of a covered /a2a confirm: through the guard
// (idempotency/), its forward classified for the guard, its answer recorded
// or passed through (docs/idempotency.md).

package gate

import (
	"context"
	"net/http"

	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// covered reports whether action's calls go through the idempotency guard.
func (g *Gate) covered(action, setupStart string) bool {
	if g.idem == nil {
		return false
	}
	return g.idemActions[action] || (setupStart != "" && action == setupStart)
}

// serveIdempotent is the guard's step of an allowed /a2a call: covered
// reports whether the call is a covered confirm with a key, which it then
// answers through the guard (a replay or a conflict without the agent; a
// first call runs to completion even if the client goes away, and its
// definitive answer is recorded), or refuses (rf: nothing was sent). The
// references and the limits are checked only when the guard is about to
// forward (forwardCovered, forward.go), so a replay binds and counts
// nothing and a wait holds no concurrency slot; their refusal releases the
// key. Any other call (not covered, a bootstrap call, no key) is left to
// the plain forward, or refused when require_idempotency_key is on.
func (g *Gate) serveIdempotent(w http.ResponseWriter, r *http.Request, next Next,
	call *jsonrpc.Call, body []byte, d decision, a *audit) (covered bool, rf *refusal.Refusal, err error) {
	setupStart := ""
	if d.contract != nil {
		setupStart = d.contract.SetupStartAction()
	}
	// Bootstrap calls have no verified workspace to scope a record by: they
	// are never answered from (or recorded into) the idempotency store, so a
	// caller cannot read or poison another workspace's record.
	if !call.IsAction() || d.mode == verifiedBootstrap || !g.covered(call.Action, setupStart) {
		return false, nil, nil
	}
	if call.IdempotencyKey == "" {
		// No key (absent, null or ""): docs/idempotency.md, "No key".
		g.metrics.idem("missing_key")
		a.idem = "missing_key"
		if g.requireIdemKey {
			return true, jsonrpc.IdempotencyKeyRequired(call.Action), nil
		}
		return false, nil, nil
	}
	workspaceID := d.workspace(call.WorkspaceID) // the record's scope
	// call.Input is a span of the body jsonrpc.Parse scanned strict at every
	// depth: the fingerprint does not check it again (idempotency/key.go).
	fp := idempotency.FingerprintChecked(call.MissionID, call.JobID, call.HasJobID, call.Input)
	req := idempotency.Request{
		Key: idempotency.Key{WorkspaceID: workspaceID, AgentSlug: call.AgentSlug,
			Action: call.Action, IdempotencyKey: call.IdempotencyKey},
		Fingerprint: fp, ID: call.ID,
	}
	var rec *recordWriter
	reply, err := g.idem.Do(r.Context(), req, func(ctx context.Context) (idempotency.Response, error) {
		return g.forwardCovered(ctx, next, w, r, call, body, d, a, &rec) // forward.go
	})
	if rec != nil && rec.passed {
		a.idem = "too_large"
		if err != nil {
			// The answer was cut short after its head reached the client:
			// end the client's stream the way reverse_proxy does.
			panic(http.ErrAbortHandler)
		}
		return true, nil, nil
	}
	if err != nil {
		rf, err := g.guardError(w, r, call, a, err)
		return true, rf, err
	}
	return true, nil, writeReply(w, reply, a)
}

// guardError is the answer to a confirm the guard did not complete: a
// refusal (the guard's own: its store, a call in flight, the workspace's
// share; or the gate's before the forward: references, limits), nothing
// for a client gone, else the agent unavailable (written here: the call
// was allowed, its audit line keeps the decision).
func (g *Gate) guardError(w http.ResponseWriter, r *http.Request, call *jsonrpc.Call, a *audit, err error) (*refusal.Refusal, error) {
	rf := refusal.As(err)
	switch {
	case rf != nil && rf.RPCCode == idempotency.JSONRPCCode:
		// The guard's own refusal: nothing was forwarded, counted as a
		// refusal. When the caller's own workspace holds its share (the
		// store answered), the client sees the retryable store code with a
		// message naming the share; the audit line and decisions_total say
		// which (its Reason, not the store-down alert's code).
		a.idem = rf.Code
		if rf.Reason == idempotency.AuditShareFull {
			a.idem = idempotency.ReasonShareFull
		}
		return rf, nil
	case rf != nil: // refused before the forward (notSent): the key was released
		return rf, nil
	case r.Context().Err() != nil:
		return nil, nil // the client went away; the call itself completed or failed on its own
	}
	return nil, g.agentUnavailable(w, call.ID, err)
}

// writeReply writes the guard's answer: the agent's (forwarded now) or the
// record's (a replay, marked with the replay header), or a conflict.
func writeReply(w http.ResponseWriter, reply idempotency.Reply, a *audit) error {
	switch {
	case reply.Replayed:
		a.idem = "replay"
	case reply.Conflict:
		a.idem = idempotency.CodeConflict
	}
	for k, v := range reply.Header {
		w.Header()[k] = v
	}
	if reply.Replayed {
		w.Header().Set(idempotency.ReplayHeader, "true")
	}
	w.Header().Set("Content-Length", itoa(len(reply.Body)))
	status := reply.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, err := w.Write(reply.Body)
	return err
}
