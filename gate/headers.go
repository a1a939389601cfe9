// Request header hygiene: the tunnel refusal, the Connection rule, and the
// X-Supervaize-Verified-* headers removed from every request (the gate
// alone sets them: verifiedcontext.go). What an allowed request drops
// before it is forwarded is forward.go's (dropForForward).

package gate

import (
	"net/http"
	"strings"
)

// verifiedPrefix starts the name of every header only the gate sets
// (stripVerified, injectVerified), in lower case.
const verifiedPrefix = "x-supervaize-verified-"

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

// requestHygiene is step 1 of Serve: a request asking for a tunnel is
// refused (its reason, tunnelRequest, is returned; its headers are left
// as they came, for the audit), any other has its headers cleaned
// (cleanHeaders) and gets "".
func requestHygiene(r *http.Request) string {
	if reason := tunnelRequest(r); reason != "" {
		return reason
	}
	cleanHeaders(r)
	return ""
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
