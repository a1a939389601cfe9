// The writer that sends a proxied event stream on as it comes, whatever
// Caddy's proxy makes of the agent's answer.

package gate

import (
	"net/http"

	"github.com/supervaize/supervaizer-sidecar/events"
)

// eventFlusher is the writer a proxied GET /a2a/events is answered through
// (unfiltered, or over the events.Filter). The shipped reverse_proxy has no
// flush_interval (docs/streaming.md): Caddy flushes each write at once only
// when its own reading of the agent's answer says stream (flushInterval in
// Caddy's reverseproxy/streaming.go: a Content-Type mime.ParseMediaType
// reads as text/event-stream, or no declared length). An answer the gate
// takes for an event stream (events.IsStream, which reads the Content-Type
// more loosely: "text/event-stream; charset" is one) but that declares a
// length would otherwise keep its head and events in the server's buffer
// until 4 KiB or its end. So once the head says event stream, it and every
// write are flushed here (a second flush when Caddy flushes too, with nothing
// left to send). Other answers pass as they are.
type eventFlusher struct {
	http.ResponseWriter
	headed bool // the final (non-1xx) head was written
	stream bool // and it is an event stream's
}

// WriteHeader writes the head, and flushes it when it is an event stream's.
func (e *eventFlusher) WriteHeader(status int) {
	e.ResponseWriter.WriteHeader(status)
	if e.headed || status < 200 {
		return
	}
	e.headed = true
	// The head as written: over a refusing events.Filter, the 502's.
	if e.stream = events.IsStream(status, e.Header()); e.stream {
		e.flush()
	}
}

// Write writes p, and flushes it when the answer is an event stream.
func (e *eventFlusher) Write(p []byte) (int, error) {
	if !e.headed {
		e.WriteHeader(http.StatusOK)
	}
	n, err := e.ResponseWriter.Write(p)
	if e.stream && err == nil {
		e.flush()
	}
	return n, err
}

// Flush flushes the writer below (Caddy's proxy calls it for the streams it
// recognises).
func (e *eventFlusher) Flush() { e.flush() }

func (e *eventFlusher) flush() { _ = http.NewResponseController(e.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the writer below.
func (e *eventFlusher) Unwrap() http.ResponseWriter { return e.ResponseWriter }
