// The idempotency step of a covered /a2a confirm: through the guard
// (idempotency/), its forward classified for the guard, its answer recorded
// or passed through (docs/idempotency.md).

package gate

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/internal/hop"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/refusal"
	"go.uber.org/zap"
)

// covered reports whether action's calls go through the idempotency guard.
func (g *Gate) covered(action, setupStart string) bool {
	if g.idem == nil {
		return false
	}
	return g.idemActions[action] || (setupStart != "" && action == setupStart)
}

// serveIdempotent forwards a covered call through the guard: a replay or a
// conflict is answered without the agent; a first call runs to completion
// even if the client goes away, and its definitive answer is recorded.
// The references and the limits (lc) are checked only when the guard is
// about to forward, so a replay binds and counts nothing and a wait holds
// no concurrency slot; their refusal releases the key (nothing was sent,
// notSent) and is answered as such.
func (g *Gate) serveIdempotent(w http.ResponseWriter, r *http.Request, next Next,
	call *jsonrpc.Call, workspaceID string, body []byte, d decision, a *audit, lc limitCall) error {
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
		// Only when the call is about to be forwarded: a replay binds and
		// counts nothing (controller.go).
		release, rf := g.admitForward(ctx, call, d, a, lc)
		if rf != nil {
			return idempotency.Response{}, notSent(rf)
		}
		defer release()
		rec = newRecordWriter(w, g.maxRecordBytes)
		g.dropForForward(r) // on the request Caddy's placeholders read, not only on the clone
		resp, err := g.forwardCovered(next, rec, r.Clone(ctx), body)
		if ws := refWorkspace(d, call.WorkspaceID); err == nil && g.refs != nil && ws != "" &&
			!resp.PassedThrough && !resp.Unreadable && resp.Status/100 == 2 {
			g.learn(ctx, call.AgentSlug, ws, g.refs.answerRefs(resp.Body))
		}
		return resp, err
	})
	if rec != nil && rec.passed {
		a.idem = "too_large"
		if err != nil {
			// The answer was cut short after its head reached the client:
			// end the client's stream the way reverse_proxy does.
			panic(http.ErrAbortHandler)
		}
		return nil
	}
	if err != nil {
		return g.answerGuardError(w, r, call, a, err)
	}
	return writeReply(w, reply, a)
}

// answerGuardError answers a confirm the guard did not complete: a
// refusal (the guard's own: its store, a call in flight, the workspace's
// share; or the gate's before the forward: references, limits), nothing
// for a client gone, else the agent unavailable.
func (g *Gate) answerGuardError(w http.ResponseWriter, r *http.Request, call *jsonrpc.Call, a *audit, err error) error {
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
		return refuseCall(w, a, call.ID, rf)
	case rf != nil: // refused before the forward (notSent): the key was released
		return refuseCall(w, a, call.ID, rf)
	case r.Context().Err() != nil:
		return nil // the client went away; the call itself completed or failed on its own
	}
	return g.agentUnavailable(w, call.ID, err)
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

// forwardCovered sends a covered call to next and classifies the outcome
// for the guard: an error wraps idempotency.ErrNotSent only when the
// request provably never left the sidecar (a dial error before any byte of
// the body was read); an abort of the agent's answer (reverse_proxy panics
// with http.ErrAbortHandler) becomes an error whose outcome is unknown.
func (g *Gate) forwardCovered(next Next, rec *recordWriter, fr *http.Request, body []byte) (resp idempotency.Response, err error) {
	fb := resetBody(fr, body)
	// The answer must be readable to be recorded: the client's own
	// Accept-Encoding would let the agent compress it (the transport then
	// asks for gzip itself and decodes it).
	fr.Header.Del("Accept-Encoding")
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				panic(p)
			}
			err = fmt.Errorf("%w: the agent's answer was cut short", idempotency.ErrOutcomeUnknown)
		}
	}()
	if err := g.pass(next, rec, fr); err != nil {
		if g.proxyErrors != nil && g.proxyErrors.DialFailed(err) && fb.untouched() {
			return idempotency.Response{}, fmt.Errorf("%w: %w", idempotency.ErrNotSent, err)
		}
		return idempotency.Response{}, fmt.Errorf("%w: %w", idempotency.ErrOutcomeUnknown, err)
	}
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.passed {
		return idempotency.Response{Status: rec.status, Header: rec.header, PassedThrough: true}, nil
	}
	// Encoded anyway: the gate cannot tell a result from a failure, so the
	// answer goes back as it is and the key stays in flight.
	return idempotency.Response{Status: rec.status, Header: rec.header, Body: rec.body,
		Unreadable: !hop.IdentityEncoding(rec.header)}, nil
}

// recordWriter collects the next handler's answer to a covered call, up to
// limit bytes of body. An answer that grows past limit is passed through to
// client instead (the head, the part kept so far, then the rest as it
// comes) and marked passed: it is not recorded.
type recordWriter struct {
	header http.Header
	status int
	body   []byte
	limit  int64
	client http.ResponseWriter
	passed bool
}

func newRecordWriter(client http.ResponseWriter, limit int64) *recordWriter {
	return &recordWriter{header: http.Header{}, limit: limit, client: client}
}

func (b *recordWriter) Header() http.Header { return b.header }

// WriteHeader keeps the answer's status. An informational answer (1xx,
// e.g. an agent's 103 Early Hints relayed by the proxy) is not the answer:
// it is dropped, not taken for the status of the record.
func (b *recordWriter) WriteHeader(s int) {
	if b.status == 0 && s >= 200 {
		b.status = s
	}
}

// Write keeps p while the body stays within limit, else passes through.
func (b *recordWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	if b.passed {
		return b.client.Write(p)
	}
	if int64(len(b.body))+int64(len(p)) <= b.limit {
		if b.body == nil { // one allocation for a declared length
			if n, err := strconv.ParseInt(b.header.Get("Content-Length"), 10, 64); err == nil && n > 0 && n <= b.limit {
				b.body = make([]byte, 0, n)
			}
		}
		b.body = append(b.body, p...)
		return len(p), nil
	}
	if err := b.passThrough(); err != nil {
		return 0, err
	}
	return b.client.Write(p)
}

// passThrough sends the head and the body kept so far to the client, and
// every later Write straight after them (Write has set the status).
func (b *recordWriter) passThrough() error {
	b.passed = true
	dst := b.client.Header()
	for k, v := range b.header {
		dst[k] = v
	}
	b.client.WriteHeader(b.status)
	_, err := b.client.Write(b.body)
	b.body = nil
	return err
}

// Flush flushes a passed-through answer; a kept one has nothing to flush.
func (b *recordWriter) Flush() {
	if b.passed {
		_ = http.NewResponseController(b.client).Flush()
	}
}

// agentUnavailable answers a failed call to the agent on /a2a with HTTP 502
// and a JSON-RPC error body (not an HTML page), keeping the request id.
func (g *Gate) agentUnavailable(w http.ResponseWriter, id []byte, err error) error {
	g.log.Warn("agent call failed", zap.String("error", redact.URLsIn(err.Error())))
	status := http.StatusBadGateway
	if g.proxyErrors != nil && g.proxyErrors.Status(err) == http.StatusGatewayTimeout {
		status = http.StatusGatewayTimeout
	}
	return refuseCall(w, nil, id, jsonrpc.AgentUnavailable(status)) // the call was allowed: its audit line stays
}
