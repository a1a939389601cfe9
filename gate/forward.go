// The forward to the agent, once the call was admitted (admit.go): the
// one header rule (dropForForward), the hand-off to reverse_proxy (pass,
// send), the plain forward of a call (forwardPlain) and the covered one the
// idempotency guard runs (forwardCovered), and the read body handed on
// (resetBody).

package gate

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"github.com/supervaize/supervaizer-sidecar/internal/hop"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// forwardPlain is the forward of an allowed call that no guard holds
// (Gate.forward, idempotency.go, admitted it and applied the header
// rule); an agent that cannot be reached is answered as JSON-RPC. The
// body's share of body_memory (*held) is given back as soon as the agent
// has read the body: nothing else keeps its bytes (the call's id is
// copied, its input, a span of them, dropped).
func (g *Gate) forwardPlain(w http.ResponseWriter, r *http.Request, next Next, call *jsonrpc.Call, body []byte, held *bodyHold, d decision) error {
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
	var out http.ResponseWriter = tw
	var lw *learnWriter
	if g.refs != nil && d.ws != "" && call.IsAction() {
		// An action's answer names references to bind to d.ws: a
		// learnWriter holds an answer within MaxLearnBytes until it is
		// complete (references.go). It must be readable: the client's
		// Accept-Encoding is not passed on (the transport asks for gzip
		// itself and decodes it).
		r.Header.Del("Accept-Encoding")
		lw = &learnWriter{w: tw}
		out = lw
	}
	if err := g.send(next, out, r); err != nil {
		if tw.wrote || r.Context().Err() != nil {
			return err
		}
		return g.agentUnavailable(w, call.ID, err)
	}
	if lw == nil {
		return nil
	}
	if answer := lw.complete(); answer != nil {
		g.learn(r.Context(), call.AgentSlug, d.ws, g.refs.answerRefs(answer))
	}
	return lw.finish()
}

// forwarding is what a forwarded call needs while the agent answers: its
// body handed on (resetBodyTo) and the writer that tracks the answer.
type forwarding struct {
	fb forwardBody
	tw trackingWriter
	id [64]byte // the call's id, copied off the body (forwardPlain)
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

// forwardCovered is the forward of a covered call the guard runs
// (Gate.forward, idempotency.go, admitted it and applied the header
// rule): a clone of the request for the agent, its answer recorded (rec)
// and its references learned.
func (g *Gate) forwardCovered(ctx context.Context, next Next, rec *recordWriter, r *http.Request,
	call *jsonrpc.Call, body []byte, d decision) (idempotency.Response, error) {
	resp, err := g.forwardRecorded(next, rec, r.Clone(ctx), body)
	if err == nil && g.refs != nil && d.ws != "" &&
		!resp.PassedThrough && !resp.Unreadable && resp.Status/100 == 2 {
		g.learn(ctx, call.AgentSlug, d.ws, g.refs.answerRefs(resp.Body))
	}
	return resp, err
}

// forwardRecorded sends a covered call's clone to next (dropForForward
// already applied) and classifies the outcome
// for the guard: an error wraps idempotency.ErrNotSent only when the
// request provably never left the sidecar (a dial error before any byte of
// the body was read); an abort of the agent's answer (reverse_proxy panics
// with http.ErrAbortHandler) becomes an error whose outcome is unknown.
func (g *Gate) forwardRecorded(next Next, rec *recordWriter, fr *http.Request, body []byte) (resp idempotency.Response, err error) {
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
	if err := g.send(next, rec, fr); err != nil {
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

// pass hands an allowed request to next (the proxy to the agent): the
// header rule (dropForForward), then send.
func (g *Gate) pass(next Next, w http.ResponseWriter, r *http.Request) error {
	g.dropForForward(r)
	return g.send(next, w, r)
}

// send hands r to next as it is. A streamed body that failed the proxy's
// forward gets the answer a declared length would have had (bodyFailure),
// not the proxy's 502/504.
func (g *Gate) send(next Next, w http.ResponseWriter, r *http.Request) error {
	if _, streamed := r.Body.(*timedBody); !streamed {
		return next.ServeHTTP(w, r)
	}
	fw := &bodyFailureWriter{ResponseWriter: w, r: r}
	err := next.ServeHTTP(fw, r)
	if err != nil && !fw.wrote {
		if status := bodyFailure(r); status != 0 {
			return writeDetail(w, status, statusDetail(status))
		}
	}
	return err
}

// bodyFailureWriter is the writer of a forward whose body is streamed
// (timedBody): reverse_proxy writes 499 itself, and returns no error, when
// the request's context ended, which an HTTP/1 server does once the body's
// read deadline has passed; that 499 becomes the body's own answer
// (bodyFailure: 408 or 413).
type bodyFailureWriter struct {
	http.ResponseWriter
	r        *http.Request
	wrote    bool // a status went out
	replaced bool // the 499 was replaced: the rest is dropped
}

func (b *bodyFailureWriter) WriteHeader(code int) {
	switch {
	case b.replaced:
		return
	case code == statusClientClosed && !b.wrote:
		if status := bodyFailure(b.r); status != 0 {
			b.wrote, b.replaced = true, true
			_ = writeDetail(b.ResponseWriter, status, statusDetail(status))
			return
		}
	}
	if code >= 200 {
		b.wrote = true
	}
	b.ResponseWriter.WriteHeader(code)
}

func (b *bodyFailureWriter) Write(p []byte) (int, error) {
	if b.replaced {
		return len(p), nil
	}
	b.wrote = true
	return b.ResponseWriter.Write(p)
}

// Unwrap gives http.ResponseController (flushes, deadlines) the writer.
func (b *bodyFailureWriter) Unwrap() http.ResponseWriter { return b.ResponseWriter }

// statusClientClosed is the 499 reverse_proxy records for a request whose
// context ended.
const statusClientClosed = 499

// dropForForward removes from r's own header map (the map Caddy's
// placeholders and handle_errors routes read too) what an allowed request
// does not carry on: the workspace token with forward_token off (whatever
// the route), trailers (they arrive after the decision: a trailer could
// carry what the gate refused in a header, and no Supervaizer route uses
// them), the replay headers. Once per request: pass applies it; a covered
// call before it clones the request for the agent (forwardCovered), so
// that the clone and the request the rest of Caddy sees agree.
func (g *Gate) dropForForward(r *http.Request) {
	if !g.forwardToken {
		delete(r.Header, headerWorkspaceAuth)
	}
	r.Trailer = nil
	delete(r.Header, headerTrailer)
	dropReplayHeaders(r)
}

// replayHeaders make Go's transport treat any request as safe to re-send
// on a new connection after a failure on a reused one (net/http's
// Request.isReplayable), which would run a POST twice at the agent. No
// Supervaizer route uses them; they are removed from every request with a
// method that is not safe.
var replayHeaders = []string{"Idempotency-Key", "X-Idempotency-Key"}

// dropReplayHeaders removes replayHeaders unless the method is safe (GET,
// HEAD, OPTIONS, TRACE: the transport re-sends those anyway).
func dropReplayHeaders(r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return
	}
	for _, h := range replayHeaders {
		delete(r.Header, h) // canonical (TestHeaderConstantsCanonical)
	}
}

// resetBody puts the already-read body back on r, byte for byte. It leaves
// GetBody nil on purpose: Go's transport re-sends a request with a body on a
// new connection, after a failure on a reused one, only if it can get the
// body again (net/http's Request.isReplayable), and such a silent second
// send would reach the agent twice (docs/idempotency.md). It returns the
// body it set (see forwardBody.untouched).
func resetBody(r *http.Request, body []byte) *forwardBody {
	return resetBodyTo(r, body, &forwardBody{})
}

// resetBodyTo is resetBody with the forwardBody fb, which it fills (a
// caller allocates it with what else lives as long: forwardPlain).
func resetBodyTo(r *http.Request, body []byte, fb *forwardBody) *forwardBody {
	fb.body = body
	fb.Reset(body)
	r.Body = fb
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	r.GetBody = nil
	return fb
}

// forwardBody is a body already read by the gate, handed on to the next
// handler: a bytes.Reader over it whose Close does nothing (like
// io.NopCloser's), in one allocation.
type forwardBody struct {
	bytes.Reader
	body []byte
	// held is what the body still holds of body_memory when the forward
	// gives it back as soon as the agent has read it all (releaseAtEOF;
	// the controller's plain forward): at its end the bytes are dropped
	// and the budget released, so an agent that answers slowly does not
	// keep other calls out (docs/errors.md, "Body limits").
	held         atomic.Int64
	owner        chargeTo // whom held is charged to
	releaseAtEOF bool
}

// Close does nothing: the bytes stay readable.
func (*forwardBody) Close() error { return nil }

// Read is bytes.Reader's, with the body given back at its end.
func (fb *forwardBody) Read(p []byte) (int, error) {
	n, err := fb.Reader.Read(p)
	if err == io.EOF {
		fb.atEOF()
	}
	return n, err
}

// WriteTo is bytes.Reader's (io.Copy prefers it), with the body given back
// once all of it is written.
func (fb *forwardBody) WriteTo(w io.Writer) (int64, error) {
	n, err := fb.Reader.WriteTo(w)
	if err == nil {
		fb.atEOF()
	}
	return n, err
}

// atEOF drops the bytes and releases what they held, when releaseAtEOF:
// it runs on the goroutine reading the body, the only one that touches
// the reader until the forward returns.
func (fb *forwardBody) atEOF() {
	if !fb.releaseAtEOF {
		return
	}
	fb.Reader.Reset(nil)
	fb.body = nil
	fb.releaseHeld()
}

// releaseHeld gives back what the body still holds of body_memory, once
// (at its end, or when the forward returns without reaching it).
func (fb *forwardBody) releaseHeld() {
	if n := fb.held.Swap(0); n > 0 {
		BodyMemory.release(fb.owner, n)
	}
}

// untouched reports whether no byte of the body was read: the body cannot
// have left the sidecar. Call it only after the forward has returned (the
// transport may read the body concurrently until then), and never on a
// body that releaseAtEOF drops.
func (fb *forwardBody) untouched() bool { return fb.Len() == len(fb.body) }

// notSent is a covered call's forward refused by the gate before the
// agent (the references step, a limit): never sent, so the idempotency
// guard releases its key; rf is found in the guard's error
// (guardError, idempotency.go).
func notSent(rf *refusal.Refusal) error {
	return fmt.Errorf("%w: %w", idempotency.ErrNotSent, rf)
}
