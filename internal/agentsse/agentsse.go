// Package agentsse is the event stream of the project's stand-in agents
// (the demo agent, examples/demo-agent, and the bench's upstream,
// bench/cmd/sidecarbench/upstream.go): what a Supervaizer agent's GET
// /a2a/events sends when nothing happens.
package agentsse

import (
	"io"
	"net/http"
	"time"
)

// The two events: the greeting and the heartbeat.
const (
	Connected = "event: supervaizer.connected\ndata: {\"status\": \"connected\"}\n\n"
	Heartbeat = "event: supervaizer.heartbeat\ndata: {\"status\": \"ok\"}\n\n"
)

// Serve answers an event stream on w: Connected at once, then Heartbeat
// every interval, each flushed, until the request's context ends or a
// write fails.
func Serve(w http.ResponseWriter, r *http.Request, interval time.Duration) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	if _, err := io.WriteString(w, Connected); err != nil {
		return
	}
	_ = rc.Flush()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
			if _, err := io.WriteString(w, Heartbeat); err != nil {
				return
			}
			_ = rc.Flush()
		}
	}
}
