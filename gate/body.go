// Request bodies, every rule in one file: the per-route bound (boundBody),
// an /a2a call read whole and parsed (readCall: its Content-Type, the
// envelope), bounding a streamed body (limitBody), the Content-Encoding
// rule, and the process-wide memory budget of the /a2a bodies held while
// the gate decides (body_memory; docs/errors.md, "Body limits"), each
// workspace's share of it (docs/workspaces.md, "Fair by default"), and
// whom a body is charged to: its workspace, known from the token in its
// header before the body is read (bodyOwner), so that no workspace can
// fill the budget for the others while bodies arrive. A read body is
// handed on to the agent by forward.go (resetBody).

package gate

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/refusal"

	"github.com/supervaize/supervaizer-sidecar/internal/hop"
)

// boundBody is the body step of every route class: a GET or HEAD declaring
// a body is refused (bodyOnRead: 400, refuseBodyOnRead), and a body the
// class streams to the agent is bounded (limitBody, by bodyBound: 413,
// 415); the refusal is written by the caller (refuseREST). The
// controller's body is read whole later (readBody).
func (g *Gate) boundBody(w http.ResponseWriter, r *http.Request, p *routePolicy) *refusal.Refusal {
	if bodyOnRead(r) {
		return refuseBodyOnRead(w, r)
	}
	if p.body.streamed() {
		limit := g.bodyBound(p, r.Method)
		if status := g.limitBody(w, r, limit); status != 0 {
			return &refusal.Refusal{Status: status, Message: statusDetail(status), Reason: "body"}
		}
	}
	return nil
}

// bodyOnReadRefused refuses a GET or HEAD with a body, on any route
// (bodyOnRead, /_sidecar/*). Shared: never changed.
var bodyOnReadRefused = &refusal.Refusal{Status: http.StatusBadRequest,
	Message: "GET and HEAD requests take no body", Reason: "body_on_read"}

// refuseBodyOnRead is the refusal of a GET or HEAD that declares a body
// (bodyOnReadRefused); over HTTP/1 the connection is closed after its
// answer (the body may be a smuggled request: nothing after it on the
// connection is served).
func refuseBodyOnRead(w http.ResponseWriter, r *http.Request) *refusal.Refusal {
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	return bodyOnReadRefused
}

// readCall reads an /a2a call: the body charged to its workspace
// (bodyOwner: the token checked before the body is read, what it found
// given to the decision as early), read within its bounds (readBody; hold
// is what it holds of body_memory, which the caller releases), a body that
// is not JSON by its Content-Type refused, the envelope parsed (a refusal
// after the parse began comes with the call as far as it was read: its id).
func (g *Gate) readCall(w http.ResponseWriter, r *http.Request, hold *bodyHold, owner chargeTo) (body []byte, call *jsonrpc.Call, rf *refusal.Refusal) {
	body, held, status, overShare := g.readBody(w, r, g.maxBodyA2A, owner)
	*hold = held
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
		return nil, nil, rf
	case status == http.StatusRequestEntityTooLarge:
		// The SDK has no bound: the sidecar's own JSON-RPC error
		// (max_body_a2a), id null as the body was not read.
		return nil, nil, jsonrpc.BodyTooLarge(g.maxBodyA2A)
	case status != 0:
		return nil, nil, &refusal.Refusal{Status: status, HTTPLevel: true, Message: statusDetail(status), Reason: "body"}
	case len(body) > 0 && !jsonContentType(r.Header.Get("Content-Type")):
		// The SDK reads such a body as bytes, not JSON, and its 422
		// handler then fails on them (HTTP 500): the answer it was
		// writing, without the body's echo, and nothing forwarded.
		return nil, nil, notJSONContentType
	}
	call, perr := jsonrpc.Parse(body)
	if perr != nil {
		return nil, call, perr
	}
	return body, call, nil
}

// callID is the id an /a2a refusal answers: the call's, once its envelope
// was read that far, else null.
func callID(call *jsonrpc.Call) []byte {
	if call == nil {
		return jsonrpc.NullID
	}
	return call.ID
}

// notJSONContentType refuses an /a2a body whose Content-Type is not JSON
// with the 422 FastAPI was writing: its validation entry for a body read
// as bytes, without the "input" and "body" echoes (docs/sdk-wire.md,
// "Requests the SDK refuses over HTTP").
var notJSONContentType = &refusal.Refusal{Status: http.StatusUnprocessableEntity, HTTPLevel: true,
	Message: "Input should be a valid dictionary", Reason: "content_type",
	Data: json.RawMessage(`[{"type":"dict_type","loc":["body"],"msg":"Input should be a valid dictionary"}]`)}

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

// bodyRetryAfter is the Retry-After, in seconds, of a call refused because
// the budget is spent: about the time a held body takes to be decided and
// forwarded.
const bodyRetryAfter = 1

// CodeBodyShareFull is the audit code (and decisions metric code) of an
// /a2a call refused because its workspace holds more than its share of
// body_memory and the rest is taken: on the wire it is the same retryable
// 503 server_busy as a full budget (docs/errors.md, "Body limits").
const CodeBodyShareFull = "body_memory_workspace_share_full"

// shareGroup is the number of owners the share rule protects against: no
// group of fewer than shareGroup owners can hold so much that another
// owner's share does not fit (the idempotency store's rule too:
// docs/workspaces.md, "Fair by default").
const shareGroup = 8

// bodyBudget counts the bytes of request bodies held at once by every gate
// of the process, in all and by owner: the workspace a body is charged to
// (bodyOwner, chargeTo; "" for a body with no verified workspace). Its capacity is
// the largest body_memory of the gates loaded (two handlers of one config,
// or the old and the new config during a reload, share it). A reservation
// never waits: it fits or is refused.
//
// The share rule: every owner may always hold `share` bytes, and the bytes
// owners hold beyond their shares come from a pool of capacity − 8 × share.
// So owners fewer than eight hold at most 7 × share + pool = capacity −
// share: another owner's share always fits. share is the largest that
// still lets one owner hold a body of the largest max_body_a2a (share +
// pool ≥ max_body_a2a): min(capacity/8, (capacity − max_body_a2a)/7).
type bodyBudget struct {
	mu       sync.Mutex
	used     int64
	capacity int64
	maxBody  int64            // the largest max_body_a2a of the gates loaded
	share    int64            // what each owner may always hold (bodyShare)
	over     int64            // the bytes owners hold beyond their shares
	owners   map[string]int64 // each owner's bytes, while it holds some
	gates    map[*Gate]int64  // each loaded gate's body_memory
	// refusedShare and refusedFull count the reservations refused since
	// the process started, beyond an owner's share and with the budget
	// full: seen on the status page while the refused bodies still
	// arrive (the decisions metric counts them once answered).
	refusedShare, refusedFull int64
}

// newBodyBudget is a budget of capacity bytes for bodies of at most
// maxBody bytes.
func newBodyBudget(capacity, maxBody int64) *bodyBudget {
	b := &bodyBudget{capacity: capacity, maxBody: maxBody, owners: map[string]int64{}, gates: map[*Gate]int64{}}
	b.share = bodyShare(capacity, maxBody)
	return b
}

// BodyMemory is the process's budget.
var BodyMemory = newBodyBudget(config.DefaultBodyMemory, config.DefaultMaxBodyA2A)

// bodyShare is the bytes each owner may always hold of a budget of
// capacity bytes whose largest body is maxBody bytes (bodyBudget).
func bodyShare(capacity, maxBody int64) int64 {
	return max(min(capacity/shareGroup, (capacity-maxBody)/(shareGroup-1)), 0)
}

// join adds g, with its budget v, to the gates sharing the budget, and
// reports the capacity now in force and whether another loaded gate asked
// for a different one. g's max_body_a2a (MaxBodyA2A, set before) counts
// towards the largest body the share rule lets one owner hold.
func (b *bodyBudget) Join(g *Gate, v int64) (capacity int64, differs bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, o := range b.gates {
		differs = differs || o != v
	}
	b.gates[g] = v
	b.resize()
	return b.capacity, differs
}

// leave removes g; the capacity becomes the largest of the others'.
func (b *bodyBudget) Leave(g *Gate) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.gates[g]; ok {
		delete(b.gates, g)
		b.resize()
	}
}

// resize (under mu) sets the capacity to the largest budget of the gates
// loaded and the largest body to the largest of their max_body_a2a, and
// the share from both; with none, the previous ones stay for the requests
// still running.
func (b *bodyBudget) resize() {
	if len(b.gates) == 0 {
		return
	}
	b.capacity, b.maxBody = 0, 0
	for g, v := range b.gates {
		b.capacity = max(b.capacity, v)
		b.maxBody = max(b.maxBody, g.maxBodyA2A)
	}
	b.share = bodyShare(b.capacity, b.maxBody)
	b.over = 0
	for _, u := range b.owners {
		b.over += max(u-b.share, 0)
	}
}

// chargeTo is whom a body is charged to: the workspace of its verified
// token (id; "" for every body without one), or, unshared, nobody in
// particular (local mode: no workspace is verified, the budget is first
// come first served; bodyOwner).
type chargeTo struct {
	id       string
	unshared bool
}

// reserve takes n bytes of the budget for owner if they fit: the whole
// budget has them, and what the owner would hold beyond its share fits
// the pool beside the others' (bodyBudget; an unshared owner has no
// share). It reports whether they did and, when not, whether the owner
// would have held more than its share (the refusal is then
// CodeBodyShareFull).
func (b *bodyBudget) reserve(to chargeTo, n int64) (ok, overShare bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if to.unshared {
		if n > b.capacity-b.used {
			b.refusedFull++
			return false, false
		}
		b.used += n
		return true, false
	}
	owner := to.id
	u := b.owners[owner]
	overBefore, overAfter := max(u-b.share, 0), max(u+n-b.share, 0)
	pool := b.capacity - shareGroup*b.share
	if n > b.capacity-b.used || b.over-overBefore+overAfter > pool {
		if overAfter > 0 {
			b.refusedShare++
		} else {
			b.refusedFull++
		}
		return false, overAfter > 0
	}
	b.used += n
	b.over += overAfter - overBefore
	b.owners[owner] = u + n
	return true, false
}

// release gives back n bytes reserved for owner.
func (b *bodyBudget) release(to chargeTo, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if to.unshared {
		b.mu.Unlock()
		return
	}
	owner := to.id
	u := b.owners[owner]
	b.over -= max(u-b.share, 0) - max(u-n-b.share, 0)
	if u -= n; u > 0 {
		b.owners[owner] = u
	} else {
		delete(b.owners, owner)
	}
	b.mu.Unlock()
}

// inUse is the bytes reserved now (for tests).
func (b *bodyBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// status is the budget as /_sidecar/status shows it (ops.go): its
// capacity, each workspace's share, the bytes held now and by how many
// owners (never which: the budget's state, not its users), and the
// reservations refused so far.
func (b *bodyBudget) status() map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return map[string]int64{"capacity": b.capacity, "workspace_share": b.share,
		"in_use": b.used, "beyond_shares": b.over, "owners_holding": int64(len(b.owners)),
		"refused_workspace_share": b.refusedShare, "refused_full": b.refusedFull}
}

// bodyHold is what one body holds of BodyMemory: n bytes charged to to.
type bodyHold struct {
	to chargeTo
	n  int64
}

// release gives the hold back (once: it is zero afterwards).
func (h *bodyHold) release() {
	BodyMemory.release(h.to, h.n)
	h.n = 0
}

// A refusal given before the request's body was read: what is left of the
// body must arrive within body_timeout (docs/errors.md, "Body limits"), with or
// without a key.
//
// Go's HTTP/1 server, before it writes the answer to a request whose body
// the handler left unread, reads up to 256 KiB more of that body to keep
// the connection; under Caddy (which wraps the request body) it does so
// even for a larger declared body. A client that declares a body and
// sends it slowly, or never, would hold its refusal, and the connection,
// until the server's idle timeout (60 s and more). The read deadline set
// here, once the gate is done and before the server writes the answer,
// bounds that read: the answer then goes out with "Connection: close".
// (Closing at once instead would reset a client still sending its body,
// which then may never read the refusal.)

// mayHaveUnreadBody reports whether r is an HTTP/1 request that declares a
// body (declaresBody, body.go; HTTP/2 and HTTP/3 refuse a stream's rest
// without reading it).
func mayHaveUnreadBody(r *http.Request) bool { return r.ProtoMajor == 1 && declaresBody(r) }

// boundUnreadBody gives the rest of a refused request's body body_timeout
// to arrive. Called when the gate is done with a refusal of a request for
// which mayHaveUnreadBody held; harmless when the body was read (the
// server sets its own deadline before the next request).
func (g *Gate) boundUnreadBody(w http.ResponseWriter) {
	d := g.bodyTimeout
	if e, ok := w.(*expectGuard); ok && e.unasked() {
		// The client was never asked for its body (expectGuard): nothing
		// is on the way; the server closes right after the answer.
		d = 0
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
}

// A request with "Expect: 100-continue" (HTTP/1.1) sends its body only once
// the server answers "100 Continue", which Go's server does at the first
// read of the body. A refusal written before that read must not read the
// body either: Go's server would, before writing the answer, read the rest
// of a body the handler left (Caddy's wrapping of the body hides the
// expect-continue reader that would stop it), so ask for the body, and the
// client's refusal would wait for the body, or body_timeout. expectGuard
// answers such a refusal at once with "Connection: close", and
// boundUnreadBody then closes the connection at once (nothing of the body
// was asked for, so nothing of it is on the way).

// expectsContinue reports whether r is an HTTP/1 request that declares a
// body and waits for "100 Continue" before sending it.
func expectsContinue(r *http.Request) bool {
	return mayHaveUnreadBody(r) && r.ProtoAtLeast(1, 1) && hasContinue(r.Header.Values("Expect"))
}

func hasContinue(values []string) bool {
	for _, v := range values {
		if strings.EqualFold(strings.TrimSpace(v), "100-continue") {
			return true
		}
	}
	return false
}

// guardExpectContinue wraps w and r's body for a request expectsContinue
// holds: an answer written before anything of the body was read closes the
// connection.
func guardExpectContinue(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
	g := &expectGuard{ResponseWriter: w}
	r.Body = &readMark{ReadCloser: r.Body, read: &g.read}
	return g
}

// expectGuard is the ResponseWriter of guardExpectContinue.
type expectGuard struct {
	http.ResponseWriter
	read        atomic.Bool
	wroteHeader bool
}

func (e *expectGuard) WriteHeader(code int) {
	if !e.wroteHeader && code >= 200 {
		e.wroteHeader = true
		if !e.read.Load() {
			e.ResponseWriter.Header().Set("Connection", "close")
		}
	}
	e.ResponseWriter.WriteHeader(code)
}

// unasked reports that the answer went out before anything of the body
// was read (so no "100 Continue" was sent).
func (e *expectGuard) unasked() bool { return e.wroteHeader && !e.read.Load() }

func (e *expectGuard) Write(b []byte) (int, error) {
	if !e.wroteHeader {
		e.WriteHeader(http.StatusOK)
	}
	return e.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController (flushes, deadlines) the writer.
func (e *expectGuard) Unwrap() http.ResponseWriter { return e.ResponseWriter }

// readMark records the first read of a request body.
type readMark struct {
	io.ReadCloser
	read *atomic.Bool
}

func (m *readMark) Read(p []byte) (int, error) {
	m.read.Store(true)
	return m.ReadCloser.Read(p)
}

// bodyBound is the body bound of a request of method under p: 0 for a GET
// or HEAD (no route class takes a body on a read: readTakesNoBody), else
// its rule's (bodyLimit).
func (g *Gate) bodyBound(p *routePolicy, method string) int64 {
	if isRead(method) {
		return 0
	}
	return g.bodyLimit(p.body)
}

// isRead reports whether method is GET or HEAD.
func isRead(method string) bool { return slices.Contains(readMethods, method) }

// bodyOnRead reports whether r is a GET or HEAD declaring a body. On every
// route class this is refused (400, HTTP/1 connection closed:
// refuseBodyOnRead): the SDK's reads take none, and an agent that does not
// read an unexpected GET body would take its bytes for a second request on
// the proxy's connection, one the gate never checked. An undeclared body
// (HTTP/2, HTTP/3) is cut at its first byte by bodyBound's 0.
func bodyOnRead(r *http.Request) bool { return isRead(r.Method) && declaresBody(r) }

// bodyLimit is the body bound of rule b, in bytes.
func (g *Gate) bodyLimit(b bodyRule) int64 {
	switch b {
	case bodyReadA2A:
		return g.maxBodyA2A
	case bodyMaxData:
		return g.maxBodyData
	}
	return g.maxBody
}
