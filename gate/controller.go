// The POST /a2a gate: the envelope, the per-call decision, idempotency, and
// the hand-off to the agent.

package gate

import (
	"context"
	"net/http"
	"strings"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// serveController gates POST /a2a: the call read and parsed (readCall),
// the decision, then the covered confirm's guard or the plain forward.
func (g *Gate) serveController(w http.ResponseWriter, r *http.Request, next Next, _ route, a *audit) error {
	// The body is charged to its workspace, known from the token before
	// the body is read (bodymemory.go, bodyOwner), until the forward ends, or until the
	// agent has read it all on the plain forward (forwardCall takes hold
	// over).
	owner, early := g.bodyOwner(r)
	body, hold, call, err := g.readCall(w, r, owner, a)
	defer hold.release()
	if call == nil {
		return err // answered
	}
	d := g.decideCall(r.Context(), call, r.Header[headerWorkspaceAuth], early)
	a.decision(d)
	if !d.allowed() {
		return refuseCall(w, a, call.ID, d.refused())
	}
	g.injectVerified(r.Header, d)
	lc := newLimitCall(call.AgentSlug, d, a.x.keyFP, limitTarget(call))

	setupStart := ""
	if d.contract != nil {
		setupStart = d.contract.SetupStartAction()
	}
	// Bootstrap calls have no verified workspace to scope a record by: they
	// are never answered from (or recorded into) the idempotency store, so a
	// caller cannot read or poison another workspace's record.
	if call.IsAction() && d.mode != verifiedBootstrap && g.covered(call.Action, setupStart) {
		if call.IdempotencyKey != "" {
			workspaceID := call.WorkspaceID // local mode: the request's own workspace
			if d.mode == verifiedToken {
				workspaceID = d.claims.WorkspaceID
			}
			return g.serveIdempotent(w, r, next, call, workspaceID, body, d, a, lc)
		}
		// No key (absent, null or ""): docs/idempotency.md, "No key".
		g.metrics.idem("missing_key")
		a.idem = "missing_key"
		if g.requireIdemKey {
			return refuseCall(w, a, call.ID, jsonrpc.IdempotencyKeyRequired(call.Action))
		}
	}
	return g.forwardCall(w, r, next, call, body, &hold, d, a, lc)
}

// readCall reads the body (bounded: readBody, charged to owner), refuses
// one that is not JSON by its Content-Type, and parses the envelope. A nil
// call means the request was answered (err is the write's); held is what
// the body reserved of body_memory either way.
func (g *Gate) readCall(w http.ResponseWriter, r *http.Request, owner chargeTo, a *audit) ([]byte, bodyHold, *jsonrpc.Call, error) {
	body, held, status, overShare := g.readBody(w, r, g.maxBodyA2A, owner)
	switch {
	case status == http.StatusServiceUnavailable:
		// Retryable: the process holds body_memory's worth of bodies, or
		// the workspace holds more than its share and the rest is taken
		// (the same answer, audited apart: docs/errors.md, "Body limits").
		rf := jsonrpc.ServerBusy(bodyRetryAfter)
		if overShare {
			shared := *rf // a returned refusal is never changed: a copy
			shared.Reason = CodeBodyShareFull
			rf = &shared
		}
		return nil, held, nil, refuseCall(w, a, jsonrpc.NullID, rf)
	case status == http.StatusRequestEntityTooLarge:
		// The SDK has no bound: the sidecar's own JSON-RPC error
		// (max_body_a2a), id null as the body was not read.
		return nil, held, nil, refuseCall(w, a, jsonrpc.NullID, jsonrpc.BodyTooLarge(g.maxBodyA2A))
	case status != 0:
		return nil, held, nil, refuseCall(w, a, nil, &refusal.Refusal{Status: status, HTTPLevel: true,
			Message: statusDetail(status), Reason: "body"})
	case len(body) > 0 && !jsonContentType(r.Header.Get("Content-Type")):
		// The SDK reads such a body as bytes, not JSON, and its 422
		// handler then fails on them (HTTP 500): the answer it was
		// writing, without the body's echo, and nothing forwarded.
		a.deny("content_type")
		return nil, held, nil, writeBody(w, http.StatusUnprocessableEntity, notJSONContentType)
	}
	call, perr := jsonrpc.Parse(body)
	if perr != nil {
		id := jsonrpc.NullID
		if call != nil {
			id = call.ID
		}
		return nil, held, nil, refuseCall(w, a, id, perr)
	}
	a.call(call)
	return body, held, call, nil
}

// forwardCall is an allowed call that no guard holds: admitForward, then
// the forward; an agent that cannot be
// reached is answered as JSON-RPC. The body's share of body_memory (*held)
// is given back as soon as the agent has read the body: nothing else keeps
// its bytes (the call's id is copied, its input, a span of them, dropped).
func (g *Gate) forwardCall(w http.ResponseWriter, r *http.Request, next Next, call *jsonrpc.Call, body []byte, held *bodyHold, d decision, a *audit, lc limitCall) error {
	release, rf := g.admitForward(r.Context(), call, d, a, lc)
	if rf != nil {
		return refuseCall(w, a, call.ID, rf)
	}
	defer release()
	fw := &forwarding{tw: trackingWriter{ResponseWriter: w}} // one allocation for both
	// A copy of the id in fw (no allocation for an id of up to 64 bytes),
	// so that nothing but the forwarded body keeps its bytes.
	call.ID, call.Input = append(fw.id[:0:len(fw.id)], call.ID...), nil
	fw.fb.held.Store(held.n)
	fw.fb.owner = held.to
	fw.fb.releaseAtEOF, held.n = true, 0
	defer fw.fb.releaseHeld()
	resetBodyTo(r, body, &fw.fb)
	tw := &fw.tw
	if ws := refWorkspace(d, call.WorkspaceID); g.refs != nil && ws != "" && call.IsAction() {
		return g.forwardLearning(next, tw, r, call, ws)
	}
	if err := g.pass(next, tw, r); err != nil {
		if tw.wrote || r.Context().Err() != nil {
			return err
		}
		return g.agentUnavailable(w, call.ID, err)
	}
	return nil
}

// forwardLearning forwards an allowed action through a learnWriter: an
// answer within MaxLearnBytes is held until complete, the references it
// names bound to ws (references.go), then written on. The answer must be
// readable: the client's Accept-Encoding is not passed on (the transport
// asks for gzip itself and decodes it).
func (g *Gate) forwardLearning(next Next, tw *trackingWriter, r *http.Request, call *jsonrpc.Call, ws string) error {
	r.Header.Del("Accept-Encoding")
	lw := &learnWriter{w: tw}
	if err := g.pass(next, lw, r); err != nil {
		if tw.wrote || r.Context().Err() != nil {
			return err
		}
		return g.agentUnavailable(tw.ResponseWriter, call.ID, err)
	}
	if body := lw.complete(); body != nil {
		g.learn(r.Context(), call.AgentSlug, ws, g.refs.answerRefs(body))
	}
	return lw.finish()
}

// forwarding is what a forwarded call needs while the agent answers: its
// body handed on (resetBodyTo) and the writer that tracks the answer.
type forwarding struct {
	fb forwardBody
	tw trackingWriter
	id [64]byte // the call's id, copied off the body (forwardCall)
}

// trackingWriter records whether the next handler started the response, so
// a failed call to the agent can still be answered as JSON-RPC.
type trackingWriter struct {
	http.ResponseWriter
	wrote bool
}

func (t *trackingWriter) WriteHeader(s int) { t.wrote = true; t.ResponseWriter.WriteHeader(s) }

func (t *trackingWriter) Write(p []byte) (int, error) {
	t.wrote = true
	return t.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// notJSONContentType is the 422 of an /a2a body whose Content-Type is not
// JSON: FastAPI's validation entry for a body read as bytes, without the
// "input" and "body" echoes (docs/sdk-wire.md, "Requests the SDK refuses
// over HTTP").
var notJSONContentType = []byte(`{"detail":[{"type":"dict_type","loc":["body"],"msg":"Input should be a valid dictionary"}]}`)

// jsonContentType reports whether FastAPI reads a body with Content-Type
// v as JSON: application/json or application/<x>+json, parameters ignored,
// letter case ignored; absent, or a value that is not one type/subtype
// (read as text/plain), is not.
func jsonContentType(v string) bool {
	ct, _, _ := strings.Cut(v, ";")
	ct = strings.ToLower(strings.TrimSpace(ct))
	main, sub, ok := strings.Cut(ct, "/")
	if !ok || strings.Contains(sub, "/") || main != "application" {
		return false
	}
	return sub == "json" || strings.HasSuffix(sub, "+json")
}

// admitForward is what an allowed call passes just before it is
// forwarded, on the plain path (forwardCall) and inside the guard's
// forward (serveIdempotent) alike, so that a replay binds and counts
// nothing and a waiting retry holds no slot: its references
// (resolveCallRefs, references.go), its limits (admitLimits, limits.go),
// then the request memory for the event filter (only calls that reach the
// agent can have effects). A refusal means nothing was sent; release gives
// the limits' slot back when the forward ends.
func (g *Gate) admitForward(ctx context.Context, call *jsonrpc.Call, d decision, a *audit, lc limitCall) (release func(), rf *refusal.Refusal) {
	if rf := g.resolveCallRefs(ctx, call, d, a); rf != nil {
		return nil, rf
	}
	if rf, release = g.admitLimits(ctx, a, lc); rf != nil {
		return nil, rf
	}
	g.rememberForEvents(d, call)
	return release, nil
}
