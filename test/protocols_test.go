package test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestGateEveryHTTPVersion runs the gate's end-to-end cases over HTTP/1.1,
// HTTP/2 over TLS, h2c and HTTP/3 against one config (other_routes public,
// as TestPathConfusion: a path that escaped its class would reach the
// agent): an allowed job.start, the denials (key missing or wrong, token
// missing or badly signed), spoofed verified headers, path spellings, and a
// workspace-filtered /a2a/events stream. Every answer must come in the
// client's version; every denial leaves the agent with nothing.
func TestGateEveryHTTPVersion(t *testing.T) {
	ag := startAgent(t)
	g := &versionGate{ag: ag, evs: broadcastSSE(ag), key: newSigner(t, "k1"), stranger: newSigner(t, "k1")}
	jw := startJWKS(t, g.key.jwk())
	ps := startEveryProtocol(t, ag.addr(), jwksDirective(jw.url(), "\t\tother_routes public\n"))
	ps.forEachVersion(t, func(t *testing.T, v httpVersion) {
		t.Run("allow job.start", func(t *testing.T) { g.allow(t, v) })
		t.Run("denials", func(t *testing.T) { g.denials(t, v) })
		t.Run("spoofed verified headers", func(t *testing.T) { g.spoofed(t, v) })
		t.Run("paths", func(t *testing.T) { g.paths(t, v) })
		t.Run("filtered events", func(t *testing.T) { g.filteredEvents(t, v) })
	})
}

// versionGate is what TestGateEveryHTTPVersion's cases share: the agent
// (its /a2a/events from evs), Studio's signing key, and a stranger's key
// with the same kid (a bad signature).
type versionGate struct {
	ag            *agent
	evs           *sseBroadcast
	key, stranger *signer
}

// allow: the fixture's job.start with a token reaches the agent byte for
// byte, with the verified context.
func (g *versionGate) allow(t *testing.T, v httpVersion) {
	g.ag.reset()
	body := freshJobStart(t)
	a := decodeRPC(t, v.rpc(t, body, g.key.mint(t, baseClaims())))
	if a.Error != nil || string(a.ID) != "7" {
		t.Fatalf("want a result for id 7, got %+v", a.Error)
	}
	got := g.ag.last(t)
	if !bytes.Equal(got.Body, body) || got.Header.Get("X-Supervaize-Verified-Workspace-Id") != "workspace_123" ||
		got.Header.Get("X-Supervaize-Verified-Mode") != "token" {
		t.Fatalf("agent got body %s, headers %v", got.Body, got.Header)
	}
}

// denials: no key, a wrong key, no token, a badly signed token.
func (g *versionGate) denials(t *testing.T, v httpVersion) {
	g.ag.reset()
	tok := "Bearer " + g.key.mint(t, baseClaims())
	wantDetail(t, v.do(t, "POST", "/a2a", freshJobStart(t), "X-Supervaize-Workspace-Authorization", tok), 401, "Invalid or missing API key")
	wantDetail(t, v.do(t, "POST", "/a2a", freshJobStart(t), "X-API-Key", "wrong", "X-Supervaize-Workspace-Authorization", tok), 401, "Invalid or missing API key")
	wantRPCError(t, v.rpc(t, freshJobStart(t), ""), -32030, "workspace_authorization_missing")
	wantRPCError(t, v.rpc(t, freshJobStart(t), g.stranger.mint(t, baseClaims())), -32030, "workspace_authorization_bad_signature")
	nothingReached(t, g.ag)
}

// spoofed: incoming X-Supervaize-Verified-* (any case) never reach the
// agent; it gets the gate's own, on a bootstrap call and a token call.
func (g *versionGate) spoofed(t *testing.T, v httpVersion) {
	g.ag.reset()
	spoof := []string{"X-Supervaize-Verified-Workspace-Id", "workspace_evil", "x-supervaize-verified-grant-id", "evil",
		"X-SUPERVAIZE-VERIFIED-MODE", "token", "X-Supervaize-Verified-Anything", "evil"}
	decodeRPC(t, v.rpc(t, actionFor(t, "workspace_binding.options"), "", spoof...))
	if a := decodeRPC(t, v.rpc(t, freshJobStart(t), g.key.mint(t, baseClaims()), spoof...)); a.Error != nil {
		t.Fatalf("refused: %+v", a.Error)
	}
	reqs := g.ag.received()
	if len(reqs) != 2 {
		t.Fatalf("agent got %d requests, want 2", len(reqs))
	}
	for i, want := range []map[string]string{
		{"X-Supervaize-Verified-Mode": "bootstrap"},
		{"X-Supervaize-Verified-Mode": "token", "X-Supervaize-Verified-Workspace-Id": "workspace_123", "X-Supervaize-Verified-Grant-Id": "grant-1"},
	} {
		for name, values := range reqs[i].Header {
			if strings.HasPrefix(strings.ToLower(name), "x-supervaize-verified-") && strings.Contains(strings.Join(values, ","), "evil") {
				t.Errorf("request %d: a spoofed %s reached the agent: %v", i, name, values)
			}
		}
		for name, value := range want {
			if got := reqs[i].Header.Values(name); len(got) != 1 || got[0] != value {
				t.Errorf("request %d: agent got %s: %v, want %s", i, name, got, value)
			}
		}
	}
	if got := reqs[0].Header.Values("X-Supervaize-Verified-Workspace-Id"); len(got) != 0 {
		t.Errorf("bootstrap call: agent got a workspace id %v", got)
	}
}

// paths: TestPathConfusion's spellings, sent as exact request targets.
// (A target that does not parse as a URL, e.g. "/a2a%ZZ", is refused by
// Go's and quic-go's HTTP/2 and HTTP/3 servers before any handler: it stays
// in TestPathConfusion, over HTTP/1.1.)
func (g *versionGate) paths(t *testing.T, v httpVersion) {
	wk := []string{"X-API-Key", testKey, "Content-Type", "application/json"}
	for _, tc := range []struct {
		method, target string
		status         int
	}{
		{"POST", "/%61%32%61", 200}, // decodes to /a2a: the controller's JSON-RPC refusal
		{"POST", "/a2a/", 200},
		{"POST", "//a2a", 400},
		{"POST", "/./a2a", 400},
		{"POST", "/x/../a2a", 400},
		{"POST", "/%2e%2e/a2a", 400},
		{"POST", "/a2a;x=1", 400},
		{"GET", "/a2a%2Fevents", 400},
		{"POST", "/a2a%00", 400},
		{"POST", "/a2a%5C", 400},
		{"GET", "/.well-known/%2e%2e/a2a/events", 400},
		{"GET", "/api/agents/agent_interviewer/data/contacts;x/", 400},
		{"POST", "/a2a/events", 405},
	} {
		g.ag.reset()
		if got := v.doTarget(t, tc.method, tc.target, jobStartBody(t), wk...); got != tc.status {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.target, got, tc.status)
		}
		if g.ag.count.Load() != 0 {
			t.Errorf("%s %s reached the agent", tc.method, tc.target)
		}
	}
}

// filteredEvents: a stream with workspace A's token gets A's effect and the
// heartbeat, not B's.
func (g *versionGate) filteredEvents(t *testing.T, v httpVersion) {
	tokA := g.key.mint(t, baseClaims())
	tokB := g.key.mintWith(t, func(c jwt.MapClaims) { c["workspace_id"] = "workspace_B"; c["workspace_slug"] = "b" })
	reqA, reqB := "req-A-"+randomID(), "req-B-"+randomID()
	for _, c := range []struct{ tok, ws, reqID string }{{tokA, "workspace_123", reqA}, {tokB, "workspace_B", reqB}} {
		body := actionBody(t, func(r map[string]any) {
			r["workspace"], r["request_id"], r["action"] = map[string]any{"id": c.ws}, c.reqID, "job.sync"
		})
		if a := decodeRPC(t, v.rpc(t, body, c.tok)); a.Error != nil {
			t.Fatalf("call refused: %+v", a.Error)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", v.base+"/a2a/events", nil)
	req.Header.Set("X-API-Key", testReadKey)
	req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+tokA)
	resp, err := v.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != v.proto {
		t.Fatalf("stream: %d over HTTP/%d", resp.StatusCode, resp.ProtoMajor)
	}
	rd := bufio.NewReader(resp.Body)
	if e := readEvent(t, rd); !strings.Contains(e, "supervaizer.connected") {
		t.Fatalf("first event %q", e)
	}
	g.evs.send(effect(reqB), effect(reqA), "event: supervaizer.heartbeat\ndata: {}\n\n")
	for _, want := range []string{reqA, "supervaizer.heartbeat"} {
		if e := readEvent(t, rd); !strings.Contains(e, want) {
			t.Fatalf("workspace A's stream: got %q, want %s", e, want)
		}
	}
}

// sseBroadcast is an agent's /a2a/events served like the SDK's: each
// stream starts with supervaizer.connected, then gets every event sent
// while it is open (a stream the proxy has not closed yet gets copies too,
// so no event is lost to it).
type sseBroadcast struct {
	mu      sync.Mutex
	streams map[chan string]struct{}
}

// broadcastSSE makes ag serve /a2a/events from a new sseBroadcast; other
// paths get a JSON-RPC result for id 7.
func broadcastSSE(ag *agent) *sseBroadcast {
	b := &sseBroadcast{streams: map[chan string]struct{}{}}
	ag.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path != "/a2a/events" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":7,"result":{"status":"ok"}}`)
			return
		}
		ch := make(chan string, 16)
		b.mu.Lock()
		b.streams[ch] = struct{}{}
		b.mu.Unlock()
		defer func() { b.mu.Lock(); delete(b.streams, ch); b.mu.Unlock() }()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: supervaizer.connected\ndata: {\"status\": \"connected\"}\n\n")
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case e := <-ch:
				fmt.Fprint(w, e)
				w.(http.Flusher).Flush()
			}
		}
	}
	return b
}

// send queues events, in order, for every open stream.
func (b *sseBroadcast) send(events ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.streams {
		for _, e := range events {
			ch <- e
		}
	}
}

// TestHTTP2: an h2c client is gated exactly like HTTP/1.1.
func TestHTTP2(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc, err := runCaddyfile(t, "\tservers {\n\t\tprotocols h1 h2c\n\t}\n", func(port int) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\t}\n\treverse_proxy %s\n}\n", port, jwksDirective(jw.url(), ""), ag.addr())
	})
	if err != nil {
		t.Fatal(err)
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &protos, TLSClientConfig: &tls.Config{}}, Timeout: 10 * time.Second}
	post := func(token string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", sc.base+"/a2a", strings.NewReader(string(freshJobStart(t))))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", testKey)
		if token != "" {
			req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+token)
		}
		req.Header.Set("X-Supervaize-Verified-Mode", "token")
		resp, err := h2.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := post("")
	if resp.ProtoMajor != 2 || !strings.Contains(body, "workspace_authorization_missing") {
		t.Fatalf("h2c denial: proto %d, %s", resp.ProtoMajor, body)
	}
	nothingReached(t, ag)
	resp, body = post(key.mint(t, baseClaims()))
	if resp.ProtoMajor != 2 || !strings.Contains(body, `"result"`) {
		t.Fatalf("h2c allow: proto %d, %s", resp.ProtoMajor, body)
	}
	if got := ag.last(t).Header.Values("X-Supervaize-Verified-Mode"); len(got) != 1 || got[0] != "token" {
		t.Fatalf("verified mode over h2: %v", got)
	}
}
