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

package gate

import (
	"net/http"
	"time"
)

// mayHaveUnreadBody reports whether r is an HTTP/1 request that declares a
// body (declaresBody, body.go; HTTP/2 and HTTP/3 refuse a stream's rest
// without reading it).
func mayHaveUnreadBody(r *http.Request) bool { return r.ProtoMajor == 1 && declaresBody(r) }

// boundUnreadBody gives the rest of a refused request's body body_timeout
// to arrive. Called when the gate is done with a refusal of a request for
// which mayHaveUnreadBody held; harmless when the body was read (the
// server sets its own deadline before the next request).
func (g *Gate) boundUnreadBody(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(g.BodyTimeout))
}
