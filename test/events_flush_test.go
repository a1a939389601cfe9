package test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The shipped reverse_proxy block has no flush_interval (docs/streaming.md):
// Caddy flushes an answer at once only when its own reading of it says
// stream (reverseproxy/streaming.go, flushInterval: mime.ParseMediaType's
// text/event-stream, or no declared length). The gate's SSE test
// (events.IsStream) is looser: it cuts the Content-Type at its first ';'.
// An agent stream that the gate takes for SSE must reach the client event by
// event even when Caddy's reading disagrees.

// TestSSEOddContentTypeNotHeldBack: an agent's event stream whose
// Content-Type has a parameter mime.ParseMediaType refuses (a parameter
// without a value, a parameter given twice with two values) and which
// declares a length (so Caddy does not take it for a stream by its length
// either) delivers its head and first event to an unfiltered and to a
// filtered client while the agent holds the stream open.
func TestSSEOddContentTypeNotHeldBack(t *testing.T) {
	for _, ct := range []string{"text/event-stream; charset", "text/event-stream; charset=utf-8; charset=latin1"} {
		t.Run(ct, func(t *testing.T) {
			forEachEventsMode(t, func(t *testing.T, mode func(*agent) string) { testSSEOddContentType(t, mode, ct) })
		})
	}
}

func testSSEOddContentType(t *testing.T, mode func(*agent) string, contentType string) {
	ag := oddStreamAgent(t, contentType)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)))
	for name, headers := range streamClients(t, key) {
		t.Run(name, func(t *testing.T) { firstEventWithin(t, http.DefaultClient, sc.base+"/a2a/events", headers) })
	}
}

// TestSSEOddContentTypeEveryVersion: the same over HTTP/1.1, HTTP/2 (TLS
// and h2c) and HTTP/3 (proxied: the fan-out serves HTTP/1.x only).
func TestSSEOddContentTypeEveryVersion(t *testing.T) {
	ag := oddStreamAgent(t, "text/event-stream; charset")
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	ps := startEveryProtocol(t, ag.addr(), jwksDirective(jw.url(), ""))
	ps.forEachVersion(t, func(t *testing.T, v httpVersion) {
		for name, headers := range streamClients(t, key) {
			t.Run(name, func(t *testing.T) { firstEventWithin(t, v.client, v.base+"/a2a/events", headers) })
		}
	})
}

// oddStreamAgent answers /a2a/events with the connected event under
// contentType and a declared length it will not reach, and holds the stream
// open until the client goes away.
func oddStreamAgent(t *testing.T, contentType string) *agent {
	ag, _ := eventsAnswerAgent(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Content-Length", "1000000")
		w.WriteHeader(200)
		fmt.Fprint(w, "event: supervaizer.connected\ndata: {\"status\": \"connected\"}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	return ag
}

// streamClients are the request headers of an unfiltered and of a filtered
// (workspace token) stream client.
func streamClients(t *testing.T, key *signer) map[string][]string {
	return map[string][]string{
		"unfiltered": {"X-API-Key", testReadKey},
		"filtered":   {"X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer " + key.mint(t, baseClaims())},
	}
}

// firstEventWithin opens the stream at url with client and fails t unless
// its head and then its first event (the connected one) arrive within
// readEvent's bound, the agent holding the stream open.
func firstEventWithin(t *testing.T, client *http.Client, url string, headers []string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opened := make(chan *http.Response, 1) // nil: the request failed
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Add(headers[i], headers[i+1])
		}
		resp, _ := client.Do(req)
		opened <- resp
	}()
	select {
	case resp := <-opened:
		if resp == nil {
			t.Fatal("the stream request failed")
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("stream status %d", resp.StatusCode)
		}
		if e := readEvent(t, bufio.NewReader(resp.Body)); !strings.Contains(e, "supervaizer.connected") {
			t.Fatalf("first event %q", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no head within 10 s: the stream is held back")
	}
}
