package test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestSpoofedVerifiedHeaders: incoming X-Supervaize-Verified-* never reach
// the agent, whatever their case, on every route class.
func TestSpoofedVerifiedHeaders(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "")
	spoof := []string{
		"X-Supervaize-Verified-Workspace-Id", "workspace_evil",
		"x-supervaize-verified-grant-id", "evil",
		"X-SUPERVAIZE-VERIFIED-MODE", "token",
		"X-Supervaize-Verified-Anything", "evil",
	}
	r := sc.rpc(t, actionFor(t, "workspace_binding.options"), "", spoof...)
	decodeRPC(t, r)
	r = do(t, "GET", sc.base+"/.well-known/health", nil, spoof...)
	if r.Status != 200 {
		t.Fatalf("health: %d", r.Status)
	}
	r = sc.rpc(t, jobStartBody(t), key.mint(t, baseClaims()), spoof...)
	decodeRPC(t, r)
	reqs := ag.received()
	if len(reqs) != 3 {
		t.Fatalf("agent got %d requests, want 3", len(reqs))
	}
	for _, got := range reqs {
		for name, v := range got.Header {
			if strings.HasPrefix(strings.ToLower(name), "x-supervaize-verified-") {
				for _, val := range v {
					if strings.Contains(val, "evil") {
						t.Fatalf("spoofed header %s: %v reached the agent", name, v)
					}
				}
				if name == "X-Supervaize-Verified-Workspace-Id" && v[0] != "workspace_123" {
					t.Fatalf("workspace header %v", v)
				}
			}
		}
	}
	if m := reqs[0].Header.Values("X-Supervaize-Verified-Mode"); len(m) != 1 || m[0] != "bootstrap" {
		t.Fatalf("bootstrap mode header %v", m)
	}
	if m := reqs[1].Header.Values("X-Supervaize-Verified-Mode"); len(m) != 0 {
		t.Fatalf("public route got a verified header %v", m)
	}
}

// TestVerifiedHeadersOff: with verified_headers off the agent gets no
// X-Supervaize-Verified-* header at all (incoming ones are still removed),
// and the call is decided exactly as before.
func TestVerifiedHeadersOff(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "		verified_headers off\n")
	spoof := []string{"X-Supervaize-Verified-Workspace-Id", "workspace_evil", "X-Supervaize-Verified-Mode", "token"}
	body := jobStartBody(t)
	if a := decodeRPC(t, sc.rpc(t, body, key.mint(t, baseClaims()), spoof...)); a.Error != nil {
		t.Fatalf("call refused: %+v", a.Error)
	}
	wrong := key.mintWith(t, func(c jwt.MapClaims) { c["workspace_id"] = "workspace_other" })
	if a := decodeRPC(t, sc.rpc(t, body, wrong, spoof...)); a.Error == nil {
		t.Fatal("a token for another workspace was allowed")
	}
	reqs := ag.received()
	if len(reqs) != 1 {
		t.Fatalf("agent got %d requests, want 1", len(reqs))
	}
	if !bytes.Equal(reqs[0].Body, body) {
		t.Fatal("the body changed")
	}
	for name, v := range reqs[0].Header {
		if strings.HasPrefix(strings.ToLower(name), "x-supervaize-verified-") {
			t.Fatalf("verified_headers off, yet the agent got %s: %v", name, v)
		}
	}
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

// TestVerifiedHeadersCompact: with verified_headers compact, over every HTTP
// version, the agent gets exactly one X-Supervaize-Verified-Context (a JSON
// object of the verified claims; a spoofed one is replaced) and no other
// X-Supervaize-Verified-* header; a denial still leaves it with nothing.
func TestVerifiedHeadersCompact(t *testing.T) {
	ag := startAgent(t)
	key, stranger := newSigner(t, "k1"), newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	ps := startEveryProtocol(t, ag.addr(), jwksDirective(jw.url(), "\t\tverified_headers compact\n"))
	ps.forEachVersion(t, func(t *testing.T, v httpVersion) {
		ag.reset()
		claims := baseClaims()
		spoof := []string{"X-Supervaize-Verified-Context", `{"mode":"token","workspace_id":"workspace_evil"}`,
			"X-Supervaize-Verified-Workspace-Id", "workspace_evil"}
		wantRPCError(t, v.rpc(t, freshJobStart(t), stranger.mint(t, claims), spoof...), -32030, "workspace_authorization_bad_signature")
		nothingReached(t, ag)
		if a := decodeRPC(t, v.rpc(t, freshJobStart(t), key.mint(t, claims), spoof...)); a.Error != nil {
			t.Fatalf("refused: %+v", a.Error)
		}
		got := ag.last(t)
		for name, values := range got.Header {
			if strings.HasPrefix(strings.ToLower(name), "x-supervaize-verified-") && name != "X-Supervaize-Verified-Context" {
				t.Fatalf("agent got %s: %v besides the compact context", name, values)
			}
		}
		values := got.Header.Values("X-Supervaize-Verified-Context")
		if len(values) != 1 {
			t.Fatalf("agent got %d X-Supervaize-Verified-Context values: %v", len(values), values)
		}
		var ctx map[string]any
		if err := json.Unmarshal([]byte(values[0]), &ctx); err != nil {
			t.Fatalf("context is not JSON: %q", values[0])
		}
		want := map[string]any{"mode": "token", "grant_id": "grant-1", "workspace_id": "workspace_123", "workspace_slug": "acme",
			"agent_id": testAgentID, "agent_slug": testAgent, "server_id": testServerID, "scopes": claims["scopes"],
			"agent_workspace_ref": "agent-ws-1", "jti": claims["jti"]}
		if !reflect.DeepEqual(ctx, want) {
			t.Fatalf("context %v\nwant    %v", ctx, want)
		}
	})
}

// TestExpectContinueAnsweredOnce: a client sending Expect: 100-continue on
// /a2a (curl does for bodies over 1 KiB) gets one 100 Continue, from the
// sidecar, then the agent's answer; the agent receives no Expect (it would
// answer 100 Continue again, relayed by the proxy) and no TE.
func TestExpectContinueAnsweredOnce(t *testing.T) {
	ag := startAgent(t)
	sc := startSidecar(t, ag.addr(), localDirective(""))
	body := jobStartBody(t)
	for _, path := range []string{"/a2a", "/api/supervaizer/agents"} {
		ag.reset()
		conn, err := net.Dial("tcp", strings.TrimPrefix(sc.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\nContent-Type: application/json\r\n"+
			"Content-Length: %d\r\nExpect: 100-continue\r\nTE: trailers\r\nConnection: close\r\n\r\n", path, strings.TrimPrefix(sc.base, "http://"), testKey, len(body))
		rd := bufio.NewReader(conn)
		first, err := rd.ReadString('\n')
		if err != nil || !strings.HasPrefix(first, "HTTP/1.1 100") {
			more, _ := io.ReadAll(rd)
			t.Logf("%s", more)
			conn.Close()
			t.Fatalf("%s: first line %q (%v), want 100 Continue before the body", path, first, err)
		}
		if _, err := conn.Write(body); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(rd)
		conn.Close()
		all := first + string(rest)
		if n := strings.Count(all, "HTTP/1.1 100 Continue"); n != 1 {
			t.Errorf("%s: %d interim 100 Continue answers, want 1:\n%s", path, n, all)
		}
		if !strings.Contains(all, "HTTP/1.1 200") {
			t.Errorf("%s: no final 200:\n%s", path, all)
		}
		got := ag.last(t)
		if v := got.Header.Values("Expect"); len(v) > 0 {
			t.Errorf("%s: the agent received Expect %q", path, v)
		}
		if v := got.Header.Values("Te"); len(v) > 0 {
			t.Errorf("%s: the agent received TE %q", path, v)
		}
	}
}
