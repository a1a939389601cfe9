// Request header hygiene: the tunnel refusal, the Connection rule, replay
// headers, and the X-Supervaize-Verified-* headers (removed from every
// request, set by the gate alone).

package gate

import (
	"net/http"
	"strings"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

// verifiedPrefix starts the name of every header only the gate sets
// (stripVerified, injectVerified), in lower case.
const verifiedPrefix = "x-supervaize-verified-"

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
// all with other_routes public). Serve answers 400
// {"detail":"Protocol upgrades are not supported"}; the agent receives
// nothing.
func tunnelRequest(r *http.Request) string {
	switch {
	case len(r.Header[":protocol"]) > 0 || (r.Proto != "" && !strings.HasPrefix(r.Proto, "HTTP/")):
		return tunnelExtendedConnect
	case strings.EqualFold(r.Method, http.MethodConnect):
		return tunnelConnect
	case len(r.Header[headerUpgrade]) > 0 || headerHasToken(r.Header[headerConnection], "upgrade"):
		return tunnelUpgrade
	}
	return ""
}

// headerHasToken reports whether a comma-separated list header (its
// values) holds token, compared without regard to letter case.
func headerHasToken(values []string, token string) bool {
	for _, v := range values {
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
	for _, v := range h[headerConnection] {
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
	delete(h, headerConnection)
	if len(keep) > 0 {
		h[headerConnection] = []string{strings.Join(keep, ", ")}
	}
}

// hopRequestHeaders are request headers about the client's hop that
// Caddy's reverse_proxy would pass on to the agent; the gate removes them
// from every request (dropHopRequestHeaders):
var hopRequestHeaders = []string{
	// Expect: 100-continue is answered to the client by the sidecar's own
	// server when the body is first read (the gate reads /a2a's whole body
	// before deciding); passed on, the agent answers 100 Continue again and
	// the proxy relays it: the client would get two.
	"Expect",
	// TE names the codings the client's hop accepts (RFC 9110 §10.1.4);
	// reverse_proxy keeps "TE: trailers" (for gRPC), which no Supervaizer
	// route uses.
	"Te",
}

// dropHopRequestHeaders removes hopRequestHeaders.
func dropHopRequestHeaders(h http.Header) {
	for _, name := range hopRequestHeaders {
		delete(h, name) // canonical (TestHeaderConstantsCanonical)
	}
}

// cleanHeaders is the header hygiene of every request the gate decides
// on, before anything reads its headers: the X-Supervaize-Verified-*
// headers and trailers removed (stripVerified), the Connection rule
// applied (dropConnectionHeaders), Expect and TE removed
// (dropHopRequestHeaders).
func cleanHeaders(r *http.Request) {
	stripVerified(r.Header)
	stripVerified(r.Trailer)
	dropConnectionHeaders(r.Header)
	dropHopRequestHeaders(r.Header)
}

// stripVerified removes every header whose name starts with
// X-Supervaize-Verified- in any case and with '_' or '.' in place of any
// '-': only the sidecar sets them. Caddy drops names with '_' or '.' unless
// its expected_underscore_headers / expected_dot_headers let them through;
// an agent behind a CGI-style server (X_SUPERVAIZE_VERIFIED_… and
// X-Supervaize-Verified-… are one variable there) must not get one.
func stripVerified(h http.Header) {
	for name := range h {
		if isVerifiedName(name) {
			delete(h, name)
		}
	}
}

// isVerifiedName reports whether name starts with verifiedPrefix, compared
// without regard to letter case, '_' and '.' read as '-'.
func isVerifiedName(name string) bool {
	if len(name) < len(verifiedPrefix) {
		return false
	}
	for i := range len(verifiedPrefix) {
		c := name[i]
		switch {
		case c == '_' || c == '.':
			c = '-'
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		if c != verifiedPrefix[i] {
			return false
		}
	}
	return true
}

// uncarriable refuses an allowed decision whose verified headers (with
// verified_headers on) would not reach the agent as they are: a claim value
// with a control character (Go's transport refuses to send the request, so
// the agent would get nothing and a covered call's key would stay in
// flight) or with a leading or trailing space or tab (the agent's parser
// trims it: a workspace id other than the verified one), or a scope that
// would not come back as it is from the space-separated Scopes header
// (empty, or with a space or tab in it: "admin job.cancel" would read as
// two scopes). The compact form escapes every value; off sends none.
func (g *Gate) uncarriable(d decision) decision {
	if !d.allowed() || g.verified != VerifiedEach || d.claims == nil || d.claims.HeaderSafe() {
		return d // HeaderSafe: every claim checked once, when the token was verified
	}
	for i := range claimFields {
		f := &claimFields[i]
		if !f.carried(d.claims) {
			out := deny(grants.UncarriableClaim(f.name))
			out.claims = d.claims
			return out
		}
	}
	return d
}

// carried reports whether f's header carries c's value as it is: every
// item of a list (joined with spaces) one grants.HeaderCarriesListItem
// takes, any other value one grants.HeaderCarries takes.
func (f *claimField) carried(c *grants.Claims) bool {
	if f.list == nil {
		return grants.HeaderCarries(f.value(c))
	}
	for _, v := range f.list(c) {
		if !grants.HeaderCarriesListItem(v) {
			return false
		}
	}
	return true
}

// injectVerified adds the verified context headers for an allowed request
// (none with verified_headers off; the one X-Supervaize-Verified-Context
// with verified_headers compact).
//
// They are added to the request's own header map, never to a new one:
// Caddy's {http.request.header.*} placeholders and its handle_errors routes
// read the map of the request Caddy's server made, which a handler before
// the gate (tracing, timeouts) shares through a shallow copy. A new map
// (tried for speed: the client's map grows twice to take ten more headers)
// left those views without the verified headers and with what pass removes
// after the decision (the token with forward_token off): a placeholder after
// the gate then sent the token on (TestVerifiedHeadersSharedWithCaddy).
func (g *Gate) injectVerified(h http.Header, d decision) {
	switch g.verified {
	case VerifiedOff:
		return
	case VerifiedCompact:
		h[headerVerifiedContext] = []string{verifiedContext(d.mode, d.claims)}
		return
	}
	c := d.claims
	if c == nil {
		h[headerVerifiedMode] = []string{d.mode}
		return
	}
	// Canonical names assigned directly: no canonicalisation, no
	// concatenation. The values share one backing array, each header a
	// one-element slice of it with capacity 1 (an append to one header
	// copies it instead of writing into the next one's value).
	vals := make([]string, 1, 1+len(claimFields)) // Mode and the claims
	vals[0] = d.mode
	h[headerVerifiedMode] = vals[0:1:1]
	for i := range claimFields {
		f := &claimFields[i]
		if value := f.value(c); value != "" {
			vals = append(vals, value)
			n := len(vals)
			h[f.header] = vals[n-1 : n : n]
		}
	}
}
