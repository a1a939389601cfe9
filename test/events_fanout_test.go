package test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

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

// TestEventsFanout: with events_fanout on, every client shares one upstream
// stream; each joiner gets the agent's connected event first; a workspace
// token still filters; the upstream stream closes with its last client;
// the agent ending its stream ends every client's; the agent's refusal
// reaches the client; a denied client opens nothing upstream.
func TestEventsFanout(t *testing.T) {
	ag := startAgent(t)
	up := newCountingSSEAgent(ag)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), fanoutDirective(ag)))
	tokA, _ := twoWorkspaces(t, sc, key, "req-A", "req-B")

	t.Run("denied clients open nothing upstream", func(t *testing.T) {
		wantDetail(t, do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", "wrong"), 401, "")
		wantDetail(t, do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer junk"), 403, "")
		if n := up.opened.Load(); n != 0 {
			t.Fatalf("the agent opened %d streams for denied clients", n)
		}
	})

	t.Run("one upstream stream, filtered and unfiltered clients", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		respAll, rdAll := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey)
		defer respAll.Body.Close()
		if ct := respAll.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("Content-Type %q", ct)
		}
		if cc := respAll.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Fatalf("the agent's Cache-Control was not relayed: %q", cc)
		}
		respA, rdA := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+tokA)
		defer respA.Body.Close()
		for _, rd := range []*bufio.Reader{rdAll, rdA} {
			if e := readEvent(t, rd); !strings.Contains(e, "supervaizer.connected") {
				t.Fatalf("first event %q", e)
			}
		}
		if n := up.opened.Load(); n != 1 {
			t.Fatalf("the agent opened %d streams for two clients, want 1", n)
		}
		for _, id := range []string{"req-B", "req-A"} {
			up.events <- effect(id)
		}
		for _, want := range []string{"req-B", "req-A"} {
			if e := readEvent(t, rdAll); !strings.Contains(e, `"request_id": "`+want+`"`) {
				t.Fatalf("unfiltered stream: got %q, want %s", e, want)
			}
		}
		if e := readEvent(t, rdA); !strings.Contains(e, `"request_id": "req-A"`) {
			t.Fatalf("workspace A's stream: got %q, want req-A only", e)
		}

		// A third client joining later gets the connected event first, then live events.
		respL, rdL := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey)
		defer respL.Body.Close()
		if e := readEvent(t, rdL); !strings.Contains(e, "supervaizer.connected") {
			t.Fatalf("late joiner's first event %q", e)
		}
		up.events <- effect("req-late")
		if e := readEvent(t, rdL); !strings.Contains(e, "req-late") {
			t.Fatalf("late joiner got %q", e)
		}
		if n := up.opened.Load(); n != 1 {
			t.Fatalf("the agent opened %d streams, want 1", n)
		}

		cancel()
		respAll.Body.Close()
		respA.Body.Close()
		respL.Body.Close()
		eventually(t, "the upstream stream to close with its last client", func() bool { return up.closed.Load() == 1 })
	})

	t.Run("the agent ends its stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey)
		defer resp.Body.Close()
		readEvent(t, rd)
		close(up.events)
		done := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, rd); done <- err }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the client's stream did not end with the agent's")
		}
		up.events = make(chan string, 16)
	})

	t.Run("the agent refuses the stream", func(t *testing.T) {
		up.status.Store(http.StatusUnauthorized)
		defer up.status.Store(0)
		resp := do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", testReadKey)
		if resp.Status != 401 || !strings.Contains(string(resp.Body), "agent says no") {
			t.Fatalf("got %d %s, want the agent's 401", resp.Status, resp.Body)
		}
	})
}

// TestEventsFanoutClientSendsData: a client that sends bytes after its
// request is not an SSE client: it is disconnected, and the upstream stream
// closes with it.
func TestEventsFanoutClientSendsData(t *testing.T) {
	ag := startAgent(t)
	up := newCountingSSEAgent(ag)
	sc := startSidecar(t, ag.addr(), localDirective(fanoutDirective(ag)+"\t\tapi_key "+testReadKey+" read\n"))
	conn, err := net.Dial("tcp", strings.TrimPrefix(sc.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	host := strings.TrimPrefix(sc.base, "http://")
	fmt.Fprintf(conn, "GET /a2a/events HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\n\r\n", host, testReadKey)
	rd := bufio.NewReader(conn)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("response %v %v", resp, err)
	}
	readEvent(t, rd)
	fmt.Fprintf(conn, "GET /a2a/events HTTP/1.1\r\nHost: %s\r\n\r\n", host) // a pipelined request
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	// EOF, or a reset (the pipelined bytes were unread when it closed).
	if _, err := io.Copy(io.Discard, rd); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection not closed: %v", err)
	}
	eventually(t, "the upstream stream to close", func() bool { return up.closed.Load() == 1 })
}

// TestEventsFanoutNeedsUpstream: events_fanout on without upstream is a
// start-up error naming the missing setting.
func TestEventsFanoutNeedsUpstream(t *testing.T) {
	ag := startAgent(t)
	_, err := tryStartSidecar(t, ag.addr(), localDirective("\t\tevents_fanout on\n"))
	if err == nil || !strings.Contains(err.Error(), "events_fanout needs upstream") {
		t.Fatalf("got %v, want a start-up error naming upstream", err)
	}
}

// TestEventsFanoutAgentDown: an agent that cannot be reached is 502 for the
// client (nothing else is opened or kept).
func TestEventsFanoutAgentDown(t *testing.T) {
	ag := startAgent(t)
	down := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	sc := startSidecar(t, ag.addr(), localDirective(fmt.Sprintf("\t\tevents_fanout on\n\t\tupstream http://%s\n\t\tregistration off\n\t\tapi_key %s read\n", down, testReadKey)))
	wantDetail(t, do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", testReadKey), 502, "Bad Gateway")
	if n := ag.count.Load(); n != 0 {
		t.Fatalf("the agent behind reverse_proxy was called %d times", n)
	}
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

// TestEventsFanoutOtherSpellings: with events_fanout on, /a2a/events with a
// query string or a trailing slash is proxied to the agent as it is (the
// shared stream is the agent's plain /a2a/events).
func TestEventsFanoutOtherSpellings(t *testing.T) {
	ag := startAgent(t)
	up := newCountingSSEAgent(ag)
	sc := startSidecar(t, ag.addr(), localDirective(fanoutDirective(ag)+"\t\tapi_key "+testReadKey+" read\n"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, rd := openStream(t, ctx, sc.base+"/a2a/events?since=5", "X-API-Key", testReadKey)
	defer resp.Body.Close()
	readEvent(t, rd)
	var paths []string
	for _, r := range ag.received() {
		paths = append(paths, r.Path+"?"+r.Query)
	}
	if len(paths) != 1 || paths[0] != "/a2a/events?since=5" {
		t.Fatalf("the agent saw %v, want the client's own /a2a/events?since=5", paths)
	}
	resp2, rd2 := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey)
	defer resp2.Body.Close()
	readEvent(t, rd2)
	if n := up.opened.Load(); n != 2 {
		t.Fatalf("the agent opened %d streams, want 2 (one proxied, one shared)", n)
	}
}
