package test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// notifyBuffer collects a stream's bytes for a test while another goroutine
// reads them, and lets the test wait for a given text.
type notifyBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *notifyBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *notifyBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// forEachEventsMode runs an SSE test through a proxied stream per client
// (events_fanout off) and through the shared upstream stream (events_fanout
// on). mode returns the directive lines of the mode for an agent.
func forEachEventsMode(t *testing.T, test func(t *testing.T, mode func(*agent) string)) {
	t.Run("proxied", func(t *testing.T) { test(t, func(*agent) string { return "" }) })
	t.Run("fanout", func(t *testing.T) { test(t, fanoutDirective) })
}

// fanoutDirective turns the fan-out on for ag (registration stays off: the
// test agents serve no cards).
func fanoutDirective(ag *agent) string {
	return fmt.Sprintf("\t\tevents_fanout on\n\t\tupstream http://%s\n\t\tregistration off\n", ag.addr())
}

// countingSSEAgent serves /a2a/events like the SDK (connected first, then
// what is sent on events) and counts the streams it opened and closed.
type countingSSEAgent struct {
	events         chan string
	opened, closed atomic.Int64
	status         atomic.Int64 // non-zero: refuse streams with this status
}

func newCountingSSEAgent(ag *agent) *countingSSEAgent {
	c := &countingSSEAgent{events: make(chan string, 16)}
	ag.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path != "/a2a/events" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":7,"result":{"status":"ok"}}`)
			return
		}
		if s := c.status.Load(); s != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(int(s))
			fmt.Fprint(w, `{"detail": "agent says no"}`)
			return
		}
		c.opened.Add(1)
		defer c.closed.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		fmt.Fprint(w, "event: supervaizer.connected\ndata: {\"status\": \"connected\"}\n\n")
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case e, ok := <-c.events:
				if !ok {
					return // the agent ends the stream
				}
				fmt.Fprint(w, e)
				w.(http.Flusher).Flush()
			}
		}
	}
	return c
}

// twoWorkspaces mints a token for workspace_123 (tokA) and one for
// workspace_B (tokB), and has each call job.sync through sc with request id
// idA or idB: the calls the SSE filter then attributes to each workspace.
func twoWorkspaces(t *testing.T, sc *sidecar, key *signer, idA, idB string) (tokA, tokB string) {
	t.Helper()
	tokA = key.mint(t, baseClaims())
	tokB = key.mintWith(t, func(c jwt.MapClaims) { c["workspace_id"] = "workspace_B"; c["workspace_slug"] = "b" })
	for _, c := range []struct{ tok, ws, id string }{{tokA, "workspace_123", idA}, {tokB, "workspace_B", idB}} {
		body := actionBody(t, func(r map[string]any) {
			r["workspace"] = map[string]any{"id": c.ws}
			r["request_id"] = c.id
			r["action"] = "job.sync"
		})
		if a := decodeRPC(t, sc.rpc(t, body, c.tok)); a.Error != nil {
			t.Fatalf("call refused: %+v", a.Error)
		}
	}
	return tokA, tokB
}

// sseAgent makes ag serve /a2a/events: connected first, then every string
// sent on events, until the client goes away (then closed is closed).
func sseAgent(ag *agent) (events chan string, closed chan struct{}) {
	events, closed = make(chan string, 16), make(chan struct{})
	var once sync.Once
	def := ag.respond
	ag.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path != "/a2a/events" {
			if def != nil {
				def(w, r, body)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":7,"result":{"status":"ok"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: supervaizer.connected\ndata: {\"status\": \"connected\"}\n\n")
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				once.Do(func() { close(closed) })
				return
			case e := <-events:
				fmt.Fprint(w, e)
				w.(http.Flusher).Flush()
			}
		}
	}
	return events, closed
}

func effect(requestID string) string {
	return fmt.Sprintf("event: supervaizer.effect\ndata: {\"agent_slug\": %q, \"action\": \"job.start\", \"request_id\": %q, \"effects\": []}\n\n", testAgent, requestID)
}

// readEvent reads one SSE event (up to its blank line) with a deadline.
func readEvent(t *testing.T, rd *bufio.Reader) string {
	t.Helper()
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var b strings.Builder
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				ch <- res{b.String(), err}
				return
			}
			if line == "\n" || line == "\r\n" {
				ch <- res{b.String(), nil}
				return
			}
			b.WriteString(line)
		}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("reading event: %v (got %q)", r.err, r.s)
		}
		return r.s
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	return ""
}

func openStream(t *testing.T, ctx context.Context, url string, headers ...string) (*http.Response, *bufio.Reader) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream status %d: %s", resp.StatusCode, b)
	}
	return resp, bufio.NewReader(resp.Body)
}

// sseAgentEvents installs a fresh SSE handler and returns its channels.
func sseAgentEvents(ag *agent) (chan struct{}, chan string) {
	ag.respond = nil
	evs, closed := sseAgent(ag)
	return closed, evs
}

// streamBody is what the agents below send: connected, an effect of
// workspace B (req-B, never for A's stream), then one of A (req-A).
const streamBody = "event: supervaizer.connected\ndata: {\"status\": \"connected\"}\n\n"
