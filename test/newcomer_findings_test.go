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

// TestUpgradeRefused: a protocol upgrade is refused on every route, so a 101
// from the agent can never open a tunnel around the gate.
func TestUpgradeRefused(t *testing.T) {
	ag := startAgent(t)
	sc := startSidecar(t, ag.addr(), localDirective("		other_routes public\n"))
	for _, path := range []string{"/.well-known/health", "/.well-known/agents.json", "/a2a/events", "/anything"} {
		for _, h := range [][]string{
			{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="},
			{"Connection", "Upgrade, HTTP2-Settings", "Upgrade", "h2c", "HTTP2-Settings", "AAMAAABkAAQAAP__"},
		} {
			r := do(t, "GET", sc.base+path, nil, append(h, "X-API-Key", testKey)...)
			if r.Status != 400 {
				t.Errorf("%s with Upgrade %s: %d", path, h[3], r.Status)
			}
		}
	}
	nothingReached(t, ag)
}

// TestConnectionHeaderCannotStripCheckedHeaders: headers named in
// Connection are removed before the gate decides, so the agent sees exactly
// what the gate checked and added.
func TestConnectionHeaderCannotStripCheckedHeaders(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "")
	tok := key.mint(t, baseClaims())

	r := sc.rpc(t, actionFor(t, "job.sync"), tok, "Connection", "close, X-Supervaize-Verified-Workspace-Id, X-Supervaize-Verified-Mode")
	if a := decodeRPC(t, r); a.Error != nil {
		t.Fatalf("refused: %s", r.Body)
	}
	got := ag.last(t).Header
	if got.Get("X-Supervaize-Verified-Workspace-Id") != "workspace_123" || got.Get("X-Supervaize-Verified-Mode") != "token" {
		t.Fatalf("verified headers stripped by a Connection header: %v", got)
	}
	// Connection naming the workspace header of a data route: the gate
	// judges the request without it (refused), the agent sees nothing.
	ag.reset()
	dtok := "Bearer " + dataToken(t, key, "resource.contacts.list")
	r = do(t, "GET", sc.base+"/api/agents/"+testAgent+"/data/contacts/", nil, "X-API-Key", testKey,
		"X-Supervaize-Workspace-Authorization", dtok, "X-Supervaize-Workspace-Id", "workspace_123",
		"Connection", "X-Supervaize-Workspace-Id")
	if r.Status != 403 {
		t.Fatalf("data route with its workspace header named in Connection: %d %s", r.Status, r.Body)
	}
	// Connection naming the mission id while the metadata stays: 400.
	r = do(t, "GET", sc.base+"/api/agents/"+testAgent+"/data/contacts/", nil, "X-API-Key", testKey,
		"X-Supervaize-Workspace-Authorization", dtok, "X-Supervaize-Workspace-Id", "workspace_123",
		"X-Supervaize-Mission-Id", "m1", "X-Supervaize-Mission-Metadata", "e30", "Connection", "X-Supervaize-Mission-Id")
	if r.Status != 400 {
		t.Fatalf("metadata without mission id after Connection: %d %s", r.Status, r.Body)
	}
	nothingReached(t, ag)
}

// TestLoneSurrogatesRefused: ids Python keeps apart but Go would merge are
// refused instead of sharing an idempotency record.
func TestLoneSurrogatesRefused(t *testing.T) {
	ag := startAgent(t)
	sc := startSidecar(t, ag.addr(), localDirective(""))
	body := strings.Replace(string(freshJobStart(t)), `"idempotency_key":"idem-`, `"idempotency_key":"k\ud800-`, 1)
	wantRPCError(t, sc.rpc(t, []byte(body), ""), -32600, "")
	nothingReached(t, ag)
}

// TestStreamedBodiesBounded: max_body and Content-Encoding apply to the
// DataResource and legacy routes too.
func TestStreamedBodiesBounded(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "		max_body 4KiB\n")
	big := []byte(strings.Repeat("x", 8<<10))
	tok := "Bearer " + dataToken(t, key, "resource.contacts.import")
	h := []string{"X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", tok, "X-Supervaize-Workspace-Id", "workspace_123"}
	wantDetail(t, do(t, "POST", sc.base+"/api/agents/"+testAgent+"/data/contacts/import/", big, h...), 413, "")
	wantDetail(t, do(t, "POST", sc.base+"/api/supervaizer/jobs", big, "X-API-Key", testKey), 413, "")
	wantDetail(t, do(t, "POST", sc.base+"/api/agents/"+testAgent+"/data/contacts/import/", []byte("{}"), append(h, "Content-Encoding", "gzip")...), 415, "")
	nothingReached(t, ag)
	if r := do(t, "POST", sc.base+"/api/agents/"+testAgent+"/data/contacts/import/", []byte(`{"rows":[]}`), h...); r.Status != 200 {
		t.Fatalf("small import: %d %s", r.Status, r.Body)
	}
}

// TestSidecarEndpointsStrict: the sidecar's own endpoints take their methods
// only and match the exact path.
func TestSidecarEndpointsStrict(t *testing.T) {
	ag := startAgent(t)
	sc := startSidecar(t, ag.addr(), localDirective(""))
	if r := do(t, "POST", sc.base+"/_sidecar/live", nil); r.Status != 405 {
		t.Fatalf("POST live: %d", r.Status)
	}
	if r := do(t, "DELETE", sc.base+"/_sidecar/ready", nil); r.Status != 405 {
		t.Fatalf("DELETE ready: %d", r.Status)
	}
	if r := rawRequest(t, sc.base, "GET", "/_sidecar%2Fstatus", "X-API-Key", testKey); r != 400 {
		t.Fatalf("encoded slash: %d", r)
	}
	nothingReached(t, ag)
}

// TestBootstrapUnknownAgent: a bootstrap call (no token) for an agent this
// sidecar does not serve is refused.
func TestBootstrapUnknownAgent(t *testing.T) {
	ag, _, _, sc := startTokenGate(t, "")
	body := actionBody(t, func(r map[string]any) { r["action"] = "workspace_binding.options"; r["agent_slug"] = "not_served" })
	wantRPCError(t, sc.rpc(t, body, ""), -32030, "workspace_authorization_unknown_agent")
	nothingReached(t, ag)
}

// TestIdempotencyTimeoutKeepsKey: a confirm cut by the upstream timeout may
// still be running in the agent: its retry is not executed a second time
// (it waits and gets idempotency_in_progress) until lock_ttl.
func TestIdempotencyTimeoutKeepsKey(t *testing.T) {
	ag := startJobStartAgent(t)
	gate := make(chan struct{})
	defer close(gate)
	ag.gate = gate
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), "			upstream_timeout 300ms\n			lock_ttl 1m\n			wait_timeout 300ms\n"))
	r := sc.rpc(t, jobStartBody(t), key.mint(t, baseClaims()))
	if r.Status != http.StatusGatewayTimeout {
		t.Fatalf("first call: %d %s", r.Status, r.Body)
	}
	wantRPCError(t, sc.rpc(t, jobStartBody(t), key.mint(t, baseClaims())), -32031, "idempotency_in_progress")
	if n := ag.count.Load(); n != 1 {
		t.Fatalf("agent called %d times, want 1", n)
	}
}

// TestSSEFramingLFCR: an LF followed by a CR is a blank line to a browser;
// the filter splits events the same way, so another workspace's effect
// cannot ride inside an allowed event.
func TestSSEFramingLFCR(t *testing.T) { forEachEventsMode(t, testSSEFramingLFCR) }

func testSSEFramingLFCR(t *testing.T, mode func(*agent) string) {
	ag := startAgent(t)
	events, _ := sseAgent(ag)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)))
	tokA, _ := twoWorkspaces(t, sc, key, "req-A", "req-B")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+tokA)
	defer resp.Body.Close()
	readEvent(t, rd) // connected
	effB := fmt.Sprintf(`{"agent_slug":%q,"action":"job.sync","request_id":"req-B","effects":[]}`, testAgent)
	events <- "event: supervaizer.effect\ndata: " + effB + "\n\revent: supervaizer.heartbeat\n\n"
	events <- `event: supervaizer.effect` + "\ndata: " + `{"request_id":"req-A","request_id":"req-B"}` + "\n\n"
	events <- effect("req-A")
	got := readRaw(t, rd, "req-A")
	if strings.Contains(got, "req-B") {
		t.Fatalf("workspace A's stream carried workspace B's effect:\n%q", got)
	}
	if !strings.Contains(got, "supervaizer.heartbeat") {
		t.Fatalf("the heartbeat after LF CR was lost:\n%q", got)
	}
}

// readRaw reads the stream until marker has been seen in a complete line.
func readRaw(t *testing.T, rd *bufio.Reader, marker string) string {
	t.Helper()
	var b strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			line, err := rd.ReadString('\n')
			b.WriteString(line)
			if err != nil || strings.Contains(line, marker) {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("marker %q not seen; got %q", marker, b.String())
	}
	return b.String()
}

// TestTrailersDropped: request trailers (which arrive after the decision)
// never reach the agent.
func TestTrailersDropped(t *testing.T) {
	ag := startAgent(t)
	sc := startSidecar(t, ag.addr(), localDirective(""))
	host := strings.TrimPrefix(sc.base, "http://")
	raw := "POST /api/supervaizer/jobs HTTP/1.1\r\nHost: " + host + "\r\nX-API-Key: " + testKey +
		"\r\nTransfer-Encoding: chunked\r\nTrailer: X-Supervaize-Verified-Workspace-Id, X-Evil\r\n\r\n" +
		"2\r\n{}\r\n0\r\nX-Supervaize-Verified-Workspace-Id: evil\r\nX-Evil: 1\r\n\r\n"
	if st := rawExchange(t, sc.base, raw, 0, ""); !strings.Contains(st, " 200") {
		t.Fatalf("status %q", st)
	}
	got := ag.last(t)
	if len(got.Trailer) != 0 || got.Header.Get("X-Supervaize-Verified-Workspace-Id") != "" || got.Header.Get("Trailer") != "" {
		t.Fatalf("trailers reached the agent: trailer %v, header %v", got.Trailer, got.Header)
	}
}

// TestBootstrapNeverIdempotent: a bootstrap action covered by idempotency
// (no verified workspace) is never answered from, nor recorded into, the
// store: another workspace cannot read or poison it.
func TestBootstrapNeverIdempotent(t *testing.T) {
	ag := startJobStartAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), "			actions workspace_binding.create\n"))
	call := func(ws, secret string) {
		body := actionBody(t, func(r map[string]any) {
			r["action"], r["surface"] = "workspace_binding.create", "workspace_binding.create"
			r["workspace"] = map[string]any{"id": ws}
			r["idempotency_key"] = "bind-1"
			r["input"] = map[string]any{"api_token": secret}
		})
		r := sc.rpc(t, body, "")
		if r.Header.Get("X-Supervaize-Idempotent-Replay") != "" {
			t.Fatalf("bootstrap call for %s answered from the store", ws)
		}
		resultOf(t, r)
	}
	call("wsB", "B-secret")
	call("wsB", "B-secret")
	call("wsC", "attacker")
	if n := ag.count.Load(); n != 3 {
		t.Fatalf("agent called %d times, want 3", n)
	}
}

// TestSSEOversizedEventDropped: the tail of an event over the size bound is
// dropped with it, even when it arrives later and looks like a comment.
func TestSSEOversizedEventDropped(t *testing.T) {
	forEachEventsMode(t, testSSEOversizedEventDropped)
}

func testSSEOversizedEventDropped(t *testing.T, mode func(*agent) string) {
	ag := startAgent(t)
	events, _ := sseAgent(ag)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)))
	tokA := key.mint(t, baseClaims())
	decodeRPC(t, sc.rpc(t, actionBody(t, func(r map[string]any) { r["request_id"] = "req-A"; r["action"] = "job.sync" }), tokA))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+tokA)
	defer resp.Body.Close()
	readEvent(t, rd) // connected
	events <- "event: supervaizer.effect\ndata: {\"request_id\":\"req-B\",\"pad\":\"" + strings.Repeat("x", 1<<20+100)
	time.Sleep(300 * time.Millisecond) // let the oversized part be read on its own (sequencing, not a timing check)
	events <- "\n:\"SECRET_OF_B\"}\n\n"
	events <- effect("req-A")
	got := readRaw(t, rd, "req-A")
	if strings.Contains(got, "SECRET_OF_B") || strings.Contains(got, "xxxx") {
		t.Fatalf("part of an oversized event reached workspace A: %.200q", got)
	}
}
