// The last step of an allowed /a2a call, sent to the agent once: a
// covered confirm through the idempotency guard (idempotency/), its answer
// recorded or passed through (docs/idempotency.md); any other call
// straight; both by the one forward (Gate.forward).

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

// sendCall is the last step of an allowed /a2a call: it is sent to the
// agent once. A covered confirm with a key goes through the guard
// (idempotency/: a replay or a conflict is answered without the agent; a
// first call runs to completion even if the client goes away, and its
// definitive answer is recorded); a covered confirm without one is refused
// when require_idempotency_key is on; any other call (not covered, a
// bootstrap call, no key) is sent straight. Both go through the one
// forward (Gate.forward): admitForward, then the header rule, then the
// agent. A refusal (rf) means nothing was sent.
func (g *Gate) sendCall(w http.ResponseWriter, r *http.Request, next Next,
	call *jsonrpc.Call, body []byte, hold *bodyHold, d decision, a *audit) (rf *refusal.Refusal, err error) {
	req, covered, rf := g.guardRequest(call, d, a)
	if rf != nil {
		return rf, nil
	}
	s := &sending{w: w, r: r, next: next, call: call, body: body, d: d, a: a, covered: covered}
	// hold passed apart from s: g.forward leaks what s points to, and hold
	// is serveController's, on its stack.
	forward := func(ctx context.Context) (idempotency.Response, error) { return g.forward(ctx, s, hold) }
	if !covered {
		_, err := forward(r.Context())
		if rf := refusal.As(err); rf != nil { // admitForward's (notSent): nothing was sent
			return rf, nil
		}
		return nil, err
	}
	reply, err := g.idem.Do(r.Context(), req, forward)
	if s.rec != nil && s.rec.passed {
		a.idem = "too_large"
		if err != nil {
			// The answer was cut short after its head reached the client:
			// end the client's stream the way reverse_proxy does.
			panic(http.ErrAbortHandler)
		}
		return nil, nil
	}
	if err != nil {
		return g.guardError(w, r, call, a, err)
	}
	return nil, writeReply(w, reply, a)
}

// guardRequest is the guard's claim for call when it is a covered confirm
// with a key (covered true), scoped by the decision's workspace; no key
// refused (rf) when require_idempotency_key is on. Bootstrap calls have no
// verified workspace to scope a record by: they are never answered from
// (or recorded into) the idempotency store, so a caller cannot read or
// poison another workspace's record.
func (g *Gate) guardRequest(call *jsonrpc.Call, d decision, a *audit) (req idempotency.Request, covered bool, rf *refusal.Refusal) {
	setupStart := ""
	if d.contract != nil {
		setupStart = d.contract.SetupStartAction()
	}
	if !call.IsAction() || d.mode == verifiedBootstrap || !g.covered(call.Action, setupStart) {
		return req, false, nil
	}
	if call.IdempotencyKey == "" {
		// No key (absent, null or ""): docs/idempotency.md, "No key".
		g.metrics.idem("missing_key")
		a.idem = "missing_key"
		if g.requireIdemKey {
			return req, false, jsonrpc.IdempotencyKeyRequired(call.Action)
		}
		return req, false, nil
	}
	// call.Input is a span of the body jsonrpc.Parse scanned strict at every
	// depth: the fingerprint does not check it again (idempotency/key.go).
	fp := idempotency.FingerprintChecked(call.MissionID, call.JobID, call.HasJobID, call.Input)
	return idempotency.Request{
		Key: idempotency.Key{WorkspaceID: d.ws, AgentSlug: call.AgentSlug, // the record's scope
			Action: call.Action, IdempotencyKey: call.IdempotencyKey},
		Fingerprint: fp, ID: call.ID,
	}, true, nil
}

// sending is one allowed call on its way to the agent (sendCall).
type sending struct {
	w       http.ResponseWriter
	r       *http.Request
	next    Next
	call    *jsonrpc.Call
	body    []byte
	d       decision
	a       *audit
	covered bool          // through the guard: the answer recorded (rec)
	rec     *recordWriter // the covered forward's recorder
}

// forward is the one forward of an allowed call, plain or covered, run by
// the guard only when it is about to forward (so a replay binds and
// counts nothing and a waiting retry holds no slot): admitForward (admit.go:
// its limits, its references, its verified context; a refusal is notSent,
// which makes the guard release the key), the header rule once
// (dropForForward, on the request Caddy's placeholders read), then the
// plain or the covered forward (forward.go); the limits' slot is given
// back when it ends. hold is the body's hold on body_memory, which the
// plain forward takes over.
func (g *Gate) forward(ctx context.Context, s *sending, hold *bodyHold) (idempotency.Response, error) {
	r := s.r
	release, rf := g.admitForward(ctx, r.Header, s.call, s.d, s.a)
	if rf != nil {
		return idempotency.Response{}, notSent(rf)
	}
	defer release()
	g.dropForForward(r)
	if !s.covered {
		return idempotency.Response{}, g.forwardPlain(s.w, r, s.next, s.call, s.body, hold, s.d)
	}
	s.rec = newRecordWriter(s.w, g.maxRecordBytes)
	return g.forwardCovered(ctx, s.next, s.rec, r, s.call, s.body, s.d)
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
