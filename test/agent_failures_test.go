package test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestAgentSlowAndResetting: a slow agent times out into a JSON-RPC 504; a
// connection reset into a JSON-RPC 502.
func TestAgentSlowAndResetting(t *testing.T) {
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	slow := startAgent(t)
	release := make(chan struct{})
	defer close(release)
	slow.respond = func(w http.ResponseWriter, r *http.Request, body []byte) { <-release }
	sc, err := runCaddyfile(t, "", func(port int) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\t}\n\treverse_proxy %s {\n\t\ttransport http {\n\t\t\tresponse_header_timeout 300ms\n\t\t}\n\t}\n}\n",
			port, jwksDirective(jw.url(), ""), slow.addr())
	})
	if err != nil {
		t.Fatal(err)
	}
	r := sc.rpc(t, actionFor(t, "job.sync"), key.mint(t, baseClaims()))
	if r.Status != http.StatusGatewayTimeout || !strings.Contains(string(r.Body), `"agent_unavailable"`) {
		t.Fatalf("slow agent: %d %s", r.Status, r.Body)
	}

	reset := startAgent(t)
	reset.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			conn.Close()
		}
	}
	sc = startSidecar(t, reset.addr(), jwksDirective(jw.url(), ""))
	r = sc.rpc(t, actionFor(t, "job.sync"), key.mint(t, baseClaims()))
	if r.Status != http.StatusBadGateway || !strings.Contains(string(r.Body), `"jsonrpc":"2.0"`) {
		t.Fatalf("resetting agent: %d %s", r.Status, r.Body)
	}
}

// TestAgentDown: a failed call to the agent on /a2a is a 502 with a JSON-RPC
// body, not an HTML page.
func TestAgentDown(t *testing.T) {
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, fmt.Sprintf("127.0.0.1:%d", freePort(t)), jwksDirective(jw.url(), ""))
	for _, body := range [][]byte{actionFor(t, "job.sync"), jobStartBody(t)} {
		r := sc.rpc(t, body, key.mint(t, baseClaims()))
		if r.Status != http.StatusBadGateway {
			t.Fatalf("status %d, want 502: %s", r.Status, r.Body)
		}
		var a rpcAnswer
		if err := json.Unmarshal(r.Body, &a); err != nil || a.Error == nil || string(a.ID) != "7" {
			t.Fatalf("not a JSON-RPC error body: %s", r.Body)
		}
	}
}
