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
	"io"
	"net/http"
	"strings"
	"sync/atomic"
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
