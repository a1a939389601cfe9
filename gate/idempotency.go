// The idempotency step of a covered /a2a confirm: through the guard
// (idempotency/), its forward classified for the guard, its answer recorded
// or passed through (docs/idempotency.md).

package gate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/internal/hop"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/limits"
	"go.uber.org/zap"
)

// CodeIdempotencyShareFull is the audit and decisions_total code of a
// covered call refused because its own workspace holds its whole share of
// the idempotency store (on the wire: -32031 idempotency_store_unavailable,
// the message naming max_entries_per_workspace; docs/idempotency.md).
const CodeIdempotencyShareFull = "idempotency_workspace_share_full"

// covered reports whether action's calls go through the idempotency guard.
func (g *Gate) covered(action, setupStart string) bool {
	if g.Idem == nil {
		return false
	}
	return g.IdemActions[action] || (setupStart != "" && action == setupStart)
}

// serveIdempotent forwards a covered call through the guard: a replay or a
// conflict is answered without the agent; a first call runs to completion
// even if the client goes away, and its definitive answer is recorded.
// The limits (lc) are checked only when the guard is about to forward, so
// a replay is not counted and a wait holds no concurrency slot; a refusal
// releases the key (nothing was sent) and is answered -32029.
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
	done := g.IdemStore.Begin()
	defer done()
	var rec *recordWriter
	var refused *limits.Decision
	reply, err := g.Idem.Do(r.Context(), req, func(ctx context.Context) (idempotency.Response, error) {
		ld, release := g.admitLimits(ctx, a, lc)
		if !ld.Allowed {
			refused = &ld
			return idempotency.Response{}, errLimited
		}
		defer release()
		g.rememberForEvents(d, call) // only calls that reach the agent can have effects
		rec = newRecordWriter(w, g.MaxRecordBytes)
		g.dropForForward(r) // on the request Caddy's placeholders read, not only on the clone
		return g.forwardCovered(next, rec, r.Clone(ctx), body)
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
	if refused != nil && isLimited(err) {
		return answerRateLimited(w, call.ID, *refused)
	}
	if err != nil {
		var ie *idempotency.Error
		switch {
		case errors.As(err, &ie):
			a.idem = ie.Code
			a.deny(ie.Code) // nothing was forwarded: a refusal, counted as one
			if ie.Reason == idempotency.ReasonShareFull {
				// The caller's own workspace holds its share: the store
				// answered. The client sees the retryable store code with
				// a message naming the share; the audit line and
				// decisions_total say which (not the store-down alert's).
				a.idem = idempotency.ReasonShareFull
				a.deny(CodeIdempotencyShareFull)
			}
			return writeJSONRPC(w, jsonrpc.ErrorResponse(call.ID, &jsonrpc.Error{
				Code: idempotency.JSONRPCCode, Message: ie.Message, Data: map[string]string{"code": ie.Code}}))
		case r.Context().Err() != nil:
			return nil // the client went away; the call itself completed or failed on its own
		}
		return g.agentUnavailable(w, call.ID, err)
	}
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
	_, err = w.Write(reply.Body)
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
		if g.ProxyErrors != nil && g.ProxyErrors.DialFailed(err) && fb.untouched() {
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
	g.Log.Warn("agent call failed", zap.String("error", redact.URLsIn(err.Error())))
	body := jsonrpc.ErrorResponse(id, &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
		Message: "Agent unavailable", Data: map[string]string{"code": "agent_unavailable"}})
	status := http.StatusBadGateway
	if g.ProxyErrors != nil && g.ProxyErrors.Status(err) == http.StatusGatewayTimeout {
		status = http.StatusGatewayTimeout
	}
	return writeBody(w, status, body)
}
