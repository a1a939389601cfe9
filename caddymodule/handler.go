package caddymodule

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
)

// Request headers read on DataResource routes.
const (
	headerWorkspaceID     = "X-Supervaize-Workspace-Id"
	headerWorkspaceSlug   = "X-Supervaize-Workspace-Slug"
	headerMissionID       = "X-Supervaize-Mission-Id"
	headerMissionMetadata = "X-Supervaize-Mission-Metadata"
	verifiedPrefix        = "x-supervaize-verified-"
)

// ServeHTTP gates one request: route class, transport key, then per class
// the envelope and workspace authorization, before handing it to next
// (normally reverse_proxy). Denied requests never reach next. Incoming
// X-Supervaize-Verified-* headers are removed on every request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	g := h.g
	start := time.Now()
	if reason := tunnelRequest(r); reason != "" {
		a := &audit{method: r.Method, route: "any", client: r.RemoteAddr}
		a.deny(reason)
		g.logDecision(a, time.Since(start))
		return writeDetail(w, http.StatusBadRequest, "Protocol upgrades are not supported")
	}
	if ok, err := g.serveOps(w, r); ok {
		return err // probes and status: not decisions, not logged
	}
	a := &audit{method: r.Method, client: r.RemoteAddr}
	g.exposeDecision(r, a) // placeholders and span (placeholders.go)
	defer func() { g.logDecision(a, time.Since(start)) }()

	stripVerified(r.Header)
	stripVerified(r.Trailer)
	dropConnectionHeaders(r.Header)

	rt := classifyRoute(r.Method, r.URL.EscapedPath())
	a.route = rt.class.String()
	if rt.status != 0 {
		a.deny(rt.reason)
		return writeDetail(w, rt.status, statusDetail(rt.status))
	}

	if rt.class != classController {
		if status := g.limitBody(w, r, g.bodyLimit(rt.class)); status != 0 {
			a.deny("body")
			return writeDetail(w, status, statusDetail(status))
		}
	}

	switch rt.class {
	case classPublic:
		a.allow("public")
		return g.pass(next, w, r)
	case classOther:
		switch g.otherRoutes {
		case otherDeny:
			a.deny("route_denied")
			return writeDetail(w, http.StatusNotFound, "Not Found")
		case otherPublic:
			a.allow("public")
			return g.pass(next, w, r)
		}
	case classLegacy:
		if !g.legacyAllowed {
			a.deny("route_denied")
			return writeDetail(w, http.StatusNotFound, "Not Found")
		}
	}

	if status, detail, _, reason := g.checkAPIKey(r.Header.Values(headerAPIKey), rt.keyScope(r.Method)); status != 0 {
		a.deny(reason)
		return writeDetail(w, status, detail)
	}

	switch rt.class {
	case classController:
		return h.serveController(w, r, next, a)
	case classData:
		return h.serveData(w, r, next, rt, a)
	case classEvents:
		return h.serveEvents(w, r, next, a)
	}
	a.allow("api_key")
	return g.pass(next, w, r)
}

// serveController gates POST /a2a.
func (h *Handler) serveController(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, a *audit) error {
	g := h.g
	body, status := g.readBody(w, r, g.maxBodyA2A)
	if status == http.StatusRequestEntityTooLarge {
		// The SDK has no bound: the sidecar's own JSON-RPC error
		// (Handler.MaxBodyA2A), id null as the body was not read.
		a.deny("body_too_large")
		return writeJSONRPC(w, jsonrpc.ErrorResponse(jsonrpc.NullID, jsonrpc.BodyTooLarge(g.maxBodyA2A)))
	}
	if status != 0 {
		a.deny("body")
		return writeDetail(w, status, statusDetail(status))
	}
	call, perr := jsonrpc.Parse(body)
	if perr != nil {
		id := jsonrpc.NullID
		if call != nil {
			id = call.ID
		}
		a.deny("jsonrpc_" + itoa(perr.Code))
		a.detail = perr.Detail
		if perr.HTTPStatus != 0 { // refused by the SDK's stack before JSON-RPC
			return writeDetail(w, perr.HTTPStatus, perr.Message)
		}
		return writeJSONRPC(w, jsonrpc.ErrorResponse(id, perr))
	}
	a.call(call)

	d := g.decideCall(r.Context(), call, r.Header.Values(headerWorkspaceAuth))
	a.decision(d)
	if !d.allow {
		e := &jsonrpc.Error{Code: d.rpcCode, Message: d.msg, Data: map[string]string{"code": d.code}}
		if e.Code == 0 {
			e.Code = jsonrpc.CodeWorkspaceAuthorization
		}
		if d.data != nil {
			e.Data = d.data
		}
		return writeJSONRPC(w, jsonrpc.ErrorResponse(call.ID, e))
	}
	g.injectVerified(r.Header, d)

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
			return g.serveIdempotent(w, r, next, call, workspaceID, body, d, a)
		}
		g.metrics.idem("missing_key")
		if g.requireIdemKey {
			a.deny("idempotency_key_required")
			return writeJSONRPC(w, jsonrpc.ErrorResponse(call.ID, jsonrpc.IdempotencyKeyRequired(call.Action)))
		}
	}
	g.rememberForEvents(d, call)
	resetBody(r, body)
	tw := &trackingWriter{ResponseWriter: w}
	if err := g.pass(next, tw, r); err != nil {
		if tw.wrote || r.Context().Err() != nil {
			return err
		}
		return g.agentUnavailable(w, call.ID, err)
	}
	return nil
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

// serveData gates the DataResource REST routes.
func (h *Handler) serveData(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, rt route, a *audit) error {
	g := h.g
	a.agentSlug, a.target = rt.agentSlug, "resource."+rt.resource+"."+rt.operation
	for _, name := range []string{headerWorkspaceID, headerWorkspaceSlug, headerMissionID, headerMissionMetadata} {
		if len(r.Header.Values(name)) > 1 {
			a.deny("ambiguous_header")
			return writeDetail(w, http.StatusBadRequest, "Duplicate "+name+" header")
		}
	}
	a.workspaceID = r.Header.Get(headerWorkspaceID)
	d := g.decideData(r.Context(), rt, r.Header)
	a.decision(d)
	if !d.allow {
		return writeDetail(w, http.StatusForbidden, d.msg)
	}
	if msg := checkMissionMetadata(r.Header); msg != "" {
		a.deny("mission_metadata")
		return writeDetail(w, http.StatusBadRequest, msg)
	}
	g.injectVerified(r.Header, d)
	return g.pass(next, w, r)
}

// bodyLimit is the body bound of route class c, in bytes: max_body_a2a for
// the controller, max_body_data for DataResource routes, max_body otherwise.
func (g *gate) bodyLimit(c routeClass) int64 {
	switch c {
	case classController:
		return g.maxBodyA2A
	case classData:
		return g.maxBodyData
	}
	return g.maxBody
}

// readBody reads the whole request body, bounded by limit bytes and by
// bodyTimeout (a read deadline on the connection). It returns the body, or a
// status: 413 (declared or actual size over limit), 415 (a
// Content-Encoding other than identity: the agent would not decode it
// either), 408 (the body did not arrive within bodyTimeout), 400 (it could
// not be read otherwise). A body with a declared Content-Length under
// bodyPresize is read into a buffer of that size, allocated once.
func (g *gate) readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, int) {
	if status := bodyHeaders(r, limit); status != 0 {
		return nil, status
	}
	rc := http.NewResponseController(w)
	deadlineSet := rc.SetReadDeadline(time.Now().Add(g.bodyTimeout)) == nil
	mbr := http.MaxBytesReader(nil, r.Body, limit)
	var body []byte
	var err error
	if n := r.ContentLength; n >= 0 && n < bodyPresize {
		body, err = readSized(mbr, int(n)+1) // +1: the read that meets EOF needs no growth
	} else {
		body, err = io.ReadAll(mbr)
	}
	if deadlineSet {
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &mbe):
			return nil, http.StatusRequestEntityTooLarge
		case errors.As(err, &ne) && ne.Timeout():
			return nil, http.StatusRequestTimeout
		}
		return nil, http.StatusBadRequest
	}
	return body, 0
}

// bodyPresize bounds the buffer readBody allocates from a declared
// Content-Length before the body arrives (a client cannot make the gate
// reserve more for a body it does not send); a longer or undeclared body is
// read with io.ReadAll, whose buffer grows as the bytes come in.
const bodyPresize = 32 << 10

// readSized reads r to EOF like io.ReadAll, starting with a buffer of size
// bytes (grown like append's if r holds more).
func readSized(r io.Reader, size int) ([]byte, error) {
	b := make([]byte, 0, size)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// limitBody bounds a body that is streamed to the agent (every route but
// /a2a, whose body is read whole by readBody) to limit bytes: a
// Content-Encoding other than identity is 415, a declared length over limit
// is 413, and a body without a declared length is cut at limit bytes (the
// proxied request fails). It returns 0 when the request may go on.
func (g *gate) limitBody(w http.ResponseWriter, r *http.Request, limit int64) int {
	if r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
		return 0
	}
	if status := bodyHeaders(r, limit); status != 0 {
		return status
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	return 0
}

// bodyHeaders judges a body by its headers alone: 415 for a Content-Encoding
// other than identity, 413 for a declared length over limit, else 0.
func bodyHeaders(r *http.Request, limit int64) int {
	if !identityEncoding(r.Header) {
		return http.StatusUnsupportedMediaType
	}
	if r.ContentLength > limit {
		return http.StatusRequestEntityTooLarge
	}
	return 0
}

// identityEncoding reports whether the body has no Content-Encoding (or
// exactly "identity"): the agent would not decode anything else either.
func identityEncoding(h http.Header) bool {
	ce := h.Values("Content-Encoding")
	return len(ce) == 0 || (len(ce) == 1 && strings.EqualFold(strings.TrimSpace(ce[0]), "identity"))
}

// resetBody puts the already-read body back on r, byte for byte. It leaves
// GetBody nil on purpose: Go's transport re-sends a request with a body on a
// new connection, after a failure on a reused one, only if it can get the
// body again (net/http's Request.isReplayable), and such a silent second
// send would reach the agent twice (docs/idempotency.md). It returns the
// body it set (see forwardBody.untouched).
func resetBody(r *http.Request, body []byte) *forwardBody {
	fb := newForwardBody(body)
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
}

func newForwardBody(body []byte) *forwardBody {
	fb := &forwardBody{body: body}
	fb.Reset(body)
	return fb
}

// Close does nothing: the bytes stay readable.
func (*forwardBody) Close() error { return nil }

// untouched reports whether no byte of the body was read: the body cannot
// have left the sidecar. Call it only after the forward has returned (the
// transport may read the body concurrently until then).
func (fb *forwardBody) untouched() bool { return fb.Len() == len(fb.body) }

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
		r.Header.Del(h)
	}
}

// Reasons tunnelRequest gives, as audit codes.
const (
	tunnelConnect         = "connect"          // CONNECT, plain (RFC 9110 §9.3.6)
	tunnelExtendedConnect = "extended_connect" // CONNECT with :protocol (RFC 8441 over HTTP/2, RFC 9220 over HTTP/3)
	tunnelUpgrade         = "upgrade"          // Upgrade header or "upgrade" in Connection (HTTP/1.1, RFC 9110 §7.8)
)

// tunnelRequest is the one rule, applied to every request before anything
// else (route classification included), that refuses a request asking the
// server to turn the exchange into a tunnel. It returns the reason (one of
// the tunnel* codes) or "" for an ordinary request:
//   - tunnelConnect: the method is CONNECT, in any letter case and in any
//     request-target form (authority-form, or the path-form Go's HTTP/1.1
//     server also accepts);
//   - tunnelExtendedConnect: the request carries a :protocol pseudo-header.
//     Go's HTTP/2 server (net/http and x/net/http2, only when the process
//     runs with GODEBUG=http2xconnect=1) keeps it in r.Header[":protocol"];
//     quic-go's HTTP/3 server (which always advertises extended CONNECT)
//     puts its value in r.Proto instead of "HTTP/3.0";
//   - tunnelUpgrade: an Upgrade header, or the "upgrade" token in
//     Connection (an HTTP/1.1 protocol switch).
//
// Why (issue 13): once the agent answers such a request — 101 to an
// Upgrade, or 200 to a CONNECT, which Caddy's reverse_proxy turns into a
// GET with Upgrade: websocket for the agent — the connection becomes a byte
// tunnel, and every request sent through it (a whole POST /a2a without a
// workspace token) reaches the agent without passing the gate. No
// Supervaizer route upgrades or tunnels, so refusing costs nothing; and the
// refusal does not depend on the route, the key or the HTTP version, since
// each of them was a way in (the write key on /api/supervaizer/…, no key at
// all with other_routes public). ServeHTTP answers 400
// {"detail":"Protocol upgrades are not supported"}; the agent receives
// nothing.
func tunnelRequest(r *http.Request) string {
	switch {
	case len(r.Header[":protocol"]) > 0 || (r.Proto != "" && !strings.HasPrefix(r.Proto, "HTTP/")):
		return tunnelExtendedConnect
	case strings.EqualFold(r.Method, http.MethodConnect):
		return tunnelConnect
	case len(r.Header.Values("Upgrade")) > 0 || headerHasToken(r.Header, "Connection", "upgrade"):
		return tunnelUpgrade
	}
	return ""
}

// headerHasToken reports whether a comma-separated list header (every
// value of name) holds token, compared without regard to letter case.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), token) {
				return true
			}
		}
	}
	return false
}

// dropConnectionHeaders applies the Connection header's hop-by-hop rule
// before the gate decides: every header it names is removed now (the proxy
// would remove it after the decision, so the agent would not see what the
// gate checked or added), and Connection keeps only close / keep-alive.
// A protocol upgrade never gets here: tunnelRequest refuses it first.
func dropConnectionHeaders(h http.Header) {
	var keep []string
	for _, v := range h.Values("Connection") {
		for tok := range strings.SplitSeq(v, ",") {
			tok = strings.TrimSpace(tok)
			switch {
			case tok == "":
			case strings.EqualFold(tok, "close"), strings.EqualFold(tok, "keep-alive"):
				keep = append(keep, tok)
			default:
				h.Del(tok)
			}
		}
	}
	h.Del("Connection")
	if len(keep) > 0 {
		h.Set("Connection", strings.Join(keep, ", "))
	}
}

// stripVerified removes every header whose name starts with
// X-Supervaize-Verified- (any case): only the sidecar sets them.
func stripVerified(h http.Header) {
	for name := range h {
		if len(name) >= len(verifiedPrefix) && strings.EqualFold(name[:len(verifiedPrefix)], verifiedPrefix) {
			delete(h, name)
		}
	}
}

// pass hands an allowed request to next (the proxy to the agent), without
// the workspace token when forward_token is off (whatever the route).
// Request trailers are dropped: they arrive after the decision (a trailer
// could carry what the gate refused in a header) and no Supervaizer route
// uses them.
func (g *gate) pass(next caddyhttp.Handler, w http.ResponseWriter, r *http.Request) error {
	if !g.forwardToken {
		r.Header.Del(headerWorkspaceAuth)
	}
	r.Trailer = nil
	r.Header.Del("Trailer")
	dropReplayHeaders(r)
	return next.ServeHTTP(w, r)
}

// injectVerified adds the verified context headers for an allowed request
// (none with verified_headers off).
func (g *gate) injectVerified(h http.Header, d decision) {
	if !g.verifiedHeaders {
		return
	}
	c := d.claims
	if c == nil {
		h["X-Supervaize-Verified-Mode"] = []string{d.mode}
		return
	}
	// Canonical names assigned directly: no canonicalisation, no
	// concatenation. The values share one backing array, each header a
	// one-element slice of it with capacity 1 (an append to one header
	// copies it instead of writing into the next one's value).
	vals := make([]string, 1, 10) // Mode and the nine below
	vals[0] = d.mode
	h["X-Supervaize-Verified-Mode"] = vals[0:1:1]
	set := func(name, value string) {
		if value != "" {
			vals = append(vals, value)
			n := len(vals)
			h[name] = vals[n-1 : n : n]
		}
	}
	set("X-Supervaize-Verified-Grant-Id", c.GrantID)
	set("X-Supervaize-Verified-Workspace-Id", c.WorkspaceID)
	set("X-Supervaize-Verified-Workspace-Slug", c.WorkspaceSlug)
	set("X-Supervaize-Verified-Agent-Id", c.AgentID)
	set("X-Supervaize-Verified-Agent-Slug", c.AgentSlug)
	set("X-Supervaize-Verified-Server-Id", c.ServerID)
	set("X-Supervaize-Verified-Scopes", c.ScopeString())
	set("X-Supervaize-Verified-Agent-Workspace-Ref", c.AgentWorkspaceRef)
	set("X-Supervaize-Verified-Token-Id", c.JTI)
}

// writeDetail writes a FastAPI-style {"detail": "..."} answer.
func writeDetail(w http.ResponseWriter, status int, detail string) error {
	return writeJSON(w, status, map[string]string{"detail": detail})
}

// writeJSONRPC writes a JSON-RPC answer with HTTP 200, as the SDK does.
func writeJSONRPC(w http.ResponseWriter, body []byte) error {
	return writeBody(w, http.StatusOK, body)
}

// writeBody writes a JSON body with its status and length.
func writeBody(w http.ResponseWriter, status int, body []byte) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", itoa(len(body)))
	w.WriteHeader(status)
	_, err := w.Write(body)
	return err
}

func statusDetail(status int) string {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return "Request body too large"
	case http.StatusRequestTimeout:
		return "Request body not received in time"
	case http.StatusUnsupportedMediaType:
		return "Content-Encoding is not supported"
	case http.StatusMethodNotAllowed:
		return "Method Not Allowed"
	}
	return http.StatusText(status)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
