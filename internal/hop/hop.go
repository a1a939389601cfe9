// Package hop is the one list of the response headers the sidecar removes
// from an agent's answer it relays from a copy rather than through
// reverse_proxy: an idempotency record (idempotency.Guard, recorded and
// replayed) and the head of the events fan-out's shared stream (caddymodule,
// fanout.go). Each entry says why it is there. It imports nothing of Caddy,
// so the idempotency package can use it. Requests follow another rule
// (caddymodule's dropConnectionHeaders and dropHopRequestHeaders — Expect,
// TE — applied before the gate decides;
// reverse_proxy removes the rest of a request's hop-by-hop headers).
package hop

import (
	"net/http"
	"strings"
)

// Headers are the hop-by-hop headers: they describe one connection, not the
// answer, so an answer relayed on another connection must not carry them.
// The list is Caddy's reverse_proxy's (hopHeaders in
// modules/caddyhttp/reverseproxy), so an answer served from a copy has the
// headers the same answer proxied would have. Remove also removes every
// header the Connection header names.
var Headers = []string{
	"Alt-Svc",             // the agent's alternative services are not the sidecar's (reverse_proxy drops it too)
	"Connection",          // this connection's options, and the names of more hop-by-hop headers (RFC 9110 §7.6.1)
	"Keep-Alive",          // parameters of this persistent connection (RFC 9112, appendix C.2.2)
	"Proxy-Connection",    // the pre-standard Connection some clients still send (libcurl)
	"Proxy-Authenticate",  // a challenge for the next hop only (RFC 9110 §11.7.1)
	"Proxy-Authorization", // credentials for the next hop only (RFC 9110 §11.7.2)
	"Te",                  // the transfer codings this hop accepts (RFC 9110 §10.1.4)
	"Trailer",             // announces trailers of this hop's framing (RFC 9110 §6.6.2)
	"Transfer-Encoding",   // this hop's framing (RFC 9112 §6.1)
	"Upgrade",             // a protocol switch of this connection (RFC 9110 §7.8)
}

// CopyHeaders are not hop-by-hop, but an answer served from a copy must not
// carry them either: the copy is sent later, or to other callers, than the
// answer it was made from. reverse_proxy relays them on a proxied answer.
var CopyHeaders = []string{
	"Content-Length", // the copy is framed again: its sender sets the length (or none, for a stream)
	"Date",           // the copy is sent now: its sender sets a fresh Date, or none
	"Set-Cookie",     // one exchange's cookie (a session, a sticky route) is handed to no other caller and kept in no store
}

// Remove deletes from h every header the Connection header names, then
// every header of Headers.
func Remove(h http.Header) {
	for _, v := range h.Values("Connection") {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = strings.TrimSpace(tok); tok != "" {
				h.Del(tok)
			}
		}
	}
	for _, name := range Headers {
		h.Del(name)
	}
}

// RemoveFromCopy deletes from h what an answer served from a copy must not
// carry: Remove's headers, then every header of CopyHeaders.
func RemoveFromCopy(h http.Header) {
	Remove(h)
	for _, name := range CopyHeaders {
		h.Del(name)
	}
}
