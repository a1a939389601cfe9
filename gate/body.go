// Request bodies: the per-route bound, reading a body whole (/a2a) or
// bounding a streamed one, the Content-Encoding rule, and handing a read
// body on to the agent.

package gate

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/supervaize/supervaizer-sidecar/internal/hop"
)

// boundBody is the body step of every route class: a GET or HEAD declaring
// a body is refused (bodyOnRead: 400, refuseBodyOnRead), and a body the
// class streams to the agent is bounded (limitBody, by bodyBound: 413,
// 415); refused reports that the request was answered, err the answer's
// write error. The controller's body is read whole later (readBody).
func (g *Gate) boundBody(w http.ResponseWriter, r *http.Request, p *routePolicy, a *audit) (refused bool, err error) {
	if bodyOnRead(r) {
		a.deny("body_on_read")
		return true, refuseBodyOnRead(w, r)
	}
	if p.body.streamed() {
		if status := g.limitBody(w, r, g.bodyBound(p, r.Method)); status != 0 {
			a.deny("body")
			return true, writeDetail(w, status, statusDetail(status))
		}
	}
	return false, nil
}

// readBody reads the whole request body, bounded by limit bytes, by
// BodyTimeout (a read deadline on the connection) and by the process's body
// memory budget (BodyMemory), charged to owner (the call's workspace, known
// from its token before the body is read: bodyOwner). It returns the body
// and what it holds of the budget (the caller releases it once the body is
// no longer used), or a status: 413 (declared or actual size over limit),
// 415 (a Content-Encoding other than identity: the agent would not decode
// it either), 408 (the body did not arrive within BodyTimeout), 503 (the
// body does not fit the budget now, or not its owner's share of it:
// overShare; retryable; the body is read to its end and dropped, so that
// the answer reaches the client), 400 (it could not be read otherwise).
// The budget is charged as the body's buffer grows with the bytes that
// arrive (readReserving), a declared length included: a client that
// announces a large body and sends little holds little of the budget (at
// most twice what it sent, plus bodyPresize: the buffer doubles), never
// more than the declared length.
func (g *Gate) readBody(w http.ResponseWriter, r *http.Request, limit int64, owner chargeTo) (body []byte, hold bodyHold, status int, overShare bool) {
	if status := bodyHeaders(r, limit); status != 0 {
		return nil, bodyHold{}, status, false
	}
	rc := http.NewResponseController(w)
	deadlineSet := rc.SetReadDeadline(time.Now().Add(g.bodyTimeout)) == nil
	mbr := bodyLimit{r: r.Body, n: max(limit, 0), limit: limit} // on the stack: readReserving takes it as is
	// A declared length bounds the buffer instead of limit; either way the
	// budget is charged as the buffer grows with the bytes that arrive,
	// never for bytes only announced.
	bound := limit
	if r.ContentLength >= 0 {
		bound = r.ContentLength
	}
	hold.to = owner
	body, err := readReserving(&mbr, bound, &hold)
	if errors.Is(err, errBodyBudget) || errors.Is(err, errBodyShare) {
		// Read to the end (the bound's remaining bytes and one more),
		// holding nothing, so that the 503 reaches a client still sending
		// (the connection stays usable).
		_, _ = io.CopyN(io.Discard, mbr.r, mbr.n+1)
	}
	if deadlineSet {
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		hold.release()
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.Is(err, errBodyBudget):
			return nil, bodyHold{}, http.StatusServiceUnavailable, false
		case errors.Is(err, errBodyShare):
			return nil, bodyHold{}, http.StatusServiceUnavailable, true
		case errors.As(err, &mbe):
			return nil, bodyHold{}, http.StatusRequestEntityTooLarge, false
		case errors.As(err, &ne) && ne.Timeout():
			return nil, bodyHold{}, http.StatusRequestTimeout, false
		}
		return nil, bodyHold{}, http.StatusBadRequest, false
	}
	return body, hold, 0, false
}

// errBodyBudget and errBodyShare are readReserving's errors when the body
// memory budget cannot hold the next part of the body: the budget is
// spent, or the owner would hold more than its share and the pool beyond
// the shares is spent (bodyBudget).
var (
	errBodyBudget = errors.New("the body memory budget is spent")
	errBodyShare  = errors.New("the workspace's share of the body memory budget is spent")
)

// readReserving reads r (a body of at most limit bytes: the route's bound,
// or the declared length) to EOF like io.ReadAll, reserving each growth of
// its buffer from BodyMemory for hold's owner before making it, and adding
// it to hold (which it releases when it fails with errBodyBudget or
// errBodyShare). At most limit bytes are charged: the buffer's last byte,
// which only meets EOF, is not.
func readReserving(r *bodyLimit, limit int64, hold *bodyHold) ([]byte, error) {
	var b []byte
	for {
		if len(b) == cap(b) {
			grow := min(max(int64(cap(b)), bodyPresize), limit+1-int64(cap(b)))
			grow = max(grow, 1)
			charge := min(grow, max(limit-hold.n, 0))
			if ok, overShare := BodyMemory.reserve(hold.to, charge); !ok {
				hold.release()
				if overShare {
					return nil, errBodyShare
				}
				return nil, errBodyBudget
			}
			hold.n += charge
			nb := make([]byte, len(b), int64(cap(b))+grow)
			copy(nb, b)
			b = nb
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
	}
}

// bodyLimit reads at most limit bytes of r, as http.MaxBytesReader(nil, r,
// limit) does (the same reads, the same answers: past the bound, the bytes
// up to it and an *http.MaxBytesError, then that error on every read), as
// a value its caller keeps on its stack (readBody).
type bodyLimit struct {
	r     io.Reader
	n     int64 // the bytes still allowed
	limit int64
	err   error // the error of an earlier read, answered again
}

func (l *bodyLimit) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	// One byte past the bound tells whether the body goes past it.
	if int64(len(p))-1 > l.n {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	if int64(n) <= l.n {
		l.n -= int64(n)
		l.err = err
		return n, err
	}
	n, l.n = int(l.n), 0
	l.err = &http.MaxBytesError{Limit: l.limit}
	return n, l.err
}

// bodyPresize is the first buffer, and the smallest growth, of a body of
// undeclared length (readReserving).
const bodyPresize = 32 << 10

// limitBody bounds a body that is streamed to the agent (every route but
// /a2a, whose body is read whole by readBody) to limit bytes and to
// BodyTimeout: a Content-Encoding other than identity is 415, a declared
// length over limit is 413, and a body without a declared length is cut at
// limit bytes; a body still arriving after BodyTimeout is cut too (a read
// deadline on the connection, lifted when the body ends), so a slow client
// cannot hold the agent's connection (the proxied request fails). It
// returns 0 when the request may go on.
func (g *Gate) limitBody(w http.ResponseWriter, r *http.Request, limit int64) int {
	if r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
		return 0
	}
	if status := bodyHeaders(r, limit); status != 0 {
		return status
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	rc := http.NewResponseController(w)
	// limit 0 (a read that takes no body): its first byte ends it, there is
	// nothing to wait for.
	deadline := time.Now().Add(g.bodyTimeout)
	if limit == 0 || rc.SetReadDeadline(deadline) != nil {
		rc = nil // no deadline on this connection (docs/errors.md says which)
	}
	r.Body = &timedBody{ReadCloser: body, rc: rc, deadline: deadline}
	return 0
}

// bodyFailure is the status of a streamed body that failed while the proxy
// read it (timedBody): 413 past its bound, 408 past BodyTimeout, else 0.
// pass answers it in place of the proxy's own error (a bare 502 or 504),
// as the same body with a Content-Length would be answered.
func bodyFailure(r *http.Request) int {
	b, ok := r.Body.(*timedBody)
	switch {
	case !ok:
		return 0
	case b.failed.Load() != 0:
		return int(b.failed.Load())
	case b.rc != nil && !b.ended.Load() && !time.Now().Before(b.deadline):
		// The deadline passed with the body unfinished: the proxy may
		// have seen the request's context end before its read failed.
		return http.StatusRequestTimeout
	}
	return 0
}

// timedBody is a streamed body under a read deadline, which it lifts once
// the body has ended (EOF), so that the rest of the exchange (a long
// answer, the next request on the connection) is not cut by it. After an
// error (the deadline passed, the bound was crossed) the deadline stays:
// the server does not wait for the rest of the body and closes the
// connection.
type timedBody struct {
	io.ReadCloser
	rc       *http.ResponseController // nil: no deadline was set
	deadline time.Time
	ended    atomic.Bool // EOF seen
	// failed is 413 or 408 once a read failed past the bound or the
	// deadline (bodyFailure); atomic: the proxy reads the body on its own
	// goroutine.
	failed atomic.Int32
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF && !b.ended.Load():
		b.ended.Store(true)
		if b.rc != nil {
			_ = b.rc.SetReadDeadline(time.Time{})
		}
	case err != nil && err != io.EOF && b.failed.Load() == 0:
		var mbe *http.MaxBytesError
		var ne net.Error
		if errors.As(err, &mbe) {
			b.failed.Store(http.StatusRequestEntityTooLarge)
		} else if errors.As(err, &ne) && ne.Timeout() {
			b.failed.Store(http.StatusRequestTimeout)
		}
	}
	return n, err
}

// declaresBody reports whether r says it carries a body: a Content-Length
// above 0 or a Transfer-Encoding (chunked). An HTTP/2 or HTTP/3 request
// without Content-Length may carry one undeclared: the caller bounds it to
// 0 bytes instead.
func declaresBody(r *http.Request) bool {
	return r.ContentLength > 0 || len(r.TransferEncoding) > 0
}

// bodyHeaders judges a body by its headers alone: 415 for a Content-Encoding
// other than identity, 413 for a declared length over limit, else 0.
func bodyHeaders(r *http.Request, limit int64) int {
	if !hop.IdentityEncoding(r.Header) {
		return http.StatusUnsupportedMediaType
	}
	if r.ContentLength > limit {
		return http.StatusRequestEntityTooLarge
	}
	return 0
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
// caller allocates it with what else lives as long: controller.go).
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
