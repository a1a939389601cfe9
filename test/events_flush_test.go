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
// without a value, a parameter given twice with two values) and which declares a length
// (so Caddy does not take it for a stream by its length either) delivers
// its first event to an unfiltered and to a filtered client while the agent
// holds the stream open.
func TestSSEOddContentTypeNotHeldBack(t *testing.T) {
	for _, ct := range []string{"text/event-stream; charset", "text/event-stream; charset=utf-8; charset=latin1"} {
		t.Run(ct, func(t *testing.T) {
			forEachEventsMode(t, func(t *testing.T, mode func(*agent) string) { testSSEOddContentType(t, mode, ct) })
		})
	}
}

func testSSEOddContentType(t *testing.T, mode func(*agent) string, contentType string) {
	connected := "event: supervaizer.connected\ndata: {\"status\": \"connected\"}\n\n"
	ag, _ := eventsAnswerAgent(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Content-Length", "1000000") // the stream declares a length it will not reach
		w.WriteHeader(200)
		fmt.Fprint(w, connected)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)))
	for _, c := range []struct {
		name    string
		headers []string
	}{
		{"unfiltered", []string{"X-API-Key", testReadKey}},
		{"filtered", []string{"X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer " + key.mint(t, baseClaims())}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// Neither the head nor the first event may wait for the end
			// of the stream: both within readEvent's bound.
			opened := make(chan *bufio.Reader, 1)
			go func() {
				req, _ := http.NewRequestWithContext(ctx, "GET", sc.base+"/a2a/events", nil)
				for i := 0; i+1 < len(c.headers); i += 2 {
					req.Header.Add(c.headers[i], c.headers[i+1])
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					opened <- nil
					return
				}
				t.Cleanup(func() { resp.Body.Close() })
				if resp.StatusCode != 200 {
					opened <- nil
					return
				}
				opened <- bufio.NewReader(resp.Body)
			}()
			select {
			case rd := <-opened:
				if rd == nil {
					t.Fatal("the stream was not opened with 200")
				}
				if e := readEvent(t, rd); !strings.Contains(e, "supervaizer.connected") {
					t.Fatalf("first event %q", e)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no head within 10 s: the stream is held back")
			}
		})
	}
}
