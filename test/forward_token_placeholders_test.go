package test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// What the rest of Caddy sees of an allowed request's headers. Caddy's
// {http.request.header.*} placeholders and its handle_errors routes read the
// request Caddy's server made; a handler before supervaizer_auth that hands
// on a shallow copy (Caddy's tracing, which the docs/beyond-sdk.md "Traces" puts
// before the gate) shares its header map with it. The gate adds the
// verified headers to, and removes the token (forward_token off) from, that
// shared map, so a placeholder after the gate never sends on what the gate
// removed (gate/verifiedcontext.go, injectVerified; gate/serve.go, dropForForward).

// placeholderEchoGate runs: [tracing] supervaizer_auth (forward_token off), then
// reverse_proxy to up with header_up copying two placeholders into headers
// the agent receives, and handle_errors writing the same placeholders.
func placeholderEchoGate(t *testing.T, tracing bool, up string, jwksURL string) *sidecar {
	t.Helper()
	tr := ""
	if tracing {
		t.Setenv("OTEL_TRACES_EXPORTER", "none")
		tr = "\ttracing {\n\t\tspan sidecar\n\t}\n"
	}
	sc, err := runCaddyfile(t, "", func(port int) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n%s"+
			"\tsupervaizer_auth {\n%s\t}\n"+
			"\treverse_proxy %s {\n"+
			"\t\theader_up X-Echo-Token {http.request.header.X-Supervaize-Workspace-Authorization}\n"+
			"\t\theader_up X-Echo-Ws {http.request.header.X-Supervaize-Verified-Workspace-Id}\n"+
			"\t}\n"+
			"\thandle_errors {\n"+
			"\t\trespond \"token=[{http.request.header.X-Supervaize-Workspace-Authorization}] ws=[{http.request.header.X-Supervaize-Verified-Workspace-Id}]\" 502\n"+
			"\t}\n"+
			"}\n", port, tr, jwksDirective(jwksURL, "\t\tforward_token off\n"), up)
	})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// wantEchoWithoutToken asserts what the agent got from placeholderEchoGate
// (forward_token off) on the call named where: no token header, no token
// through {http.request.header.X-Supervaize-Workspace-Authorization}
// (X-Echo-Token), the verified workspace through
// {http.request.header.X-Supervaize-Verified-Workspace-Id} (X-Echo-Ws).
func wantEchoWithoutToken(t *testing.T, where string, got http.Header) {
	t.Helper()
	if v := got.Get("X-Supervaize-Workspace-Authorization"); v != "" {
		t.Errorf("%s: the agent got the token header with forward_token off", where)
	}
	if got.Get("X-Echo-Token") != "" {
		t.Errorf("%s: {http.request.header.X-Supervaize-Workspace-Authorization} after the gate holds the token (forward_token off): it reached the agent through header_up", where)
	}
	if v := got.Get("X-Echo-Ws"); v != "workspace_123" {
		t.Errorf("%s: {http.request.header.X-Supervaize-Verified-Workspace-Id} after the gate = %q, want workspace_123", where, v)
	}
}

// TestForwardTokenOffPlaceholders: with forward_token off, with and without
// tracing before the gate, on a covered call (job.start: the idempotency
// guard forwards a clone of the request), an uncovered one (job.sync) and a
// DataResource call, {http.request.header.X-Supervaize-Workspace-Authorization}
// after the gate is empty and the verified headers are there.
func TestForwardTokenOffPlaceholders(t *testing.T) {
	for _, tracing := range []bool{false, true} {
		t.Run(fmt.Sprintf("tracing=%v", tracing), func(t *testing.T) {
			ag := startAgent(t)
			key := newSigner(t, "k1")
			jw := startJWKS(t, key.jwk())
			sc := placeholderEchoGate(t, tracing, ag.addr(), jw.url())
			tok := key.mint(t, baseClaims())

			// /a2a job.start: the idempotency guard forwards a clone.
			resultOf(t, sc.rpc(t, freshJobStart(t), tok))
			wantEchoWithoutToken(t, "/a2a job.start", ag.last(t).Header)

			// /a2a job.sync, outside the guard: pass on the gate's own request.
			ag.reset()
			resultOf(t, sc.rpc(t, actionFor(t, "job.sync"), tok))
			wantEchoWithoutToken(t, "/a2a job.sync", ag.last(t).Header)

			// DataResource.
			ag.reset()
			r := do(t, "GET", sc.base+"/api/agents/"+testAgent+"/data/contacts/", nil, "X-API-Key", testKey,
				"X-Supervaize-Workspace-Id", "workspace_123",
				"X-Supervaize-Workspace-Authorization", "Bearer "+dataToken(t, key, "resource.contacts.list"))
			if r.Status != 200 {
				t.Fatalf("data: %d %s", r.Status, r.Body)
			}
			wantEchoWithoutToken(t, "data", ag.last(t).Header)
		})
	}
}

// TestHandleErrorsWithoutToken: the agent is down; a data route's proxy
// error goes to handle_errors, which reads the request's headers: the
// verified ones are there, the token (forward_token off) is not.
func TestHandleErrorsWithoutToken(t *testing.T) {
	for _, tracing := range []bool{false, true} {
		t.Run(fmt.Sprintf("tracing=%v", tracing), func(t *testing.T) {
			key := newSigner(t, "k1")
			jw := startJWKS(t, key.jwk())
			dead := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			sc := placeholderEchoGate(t, tracing, dead, jw.url())
			tok := dataToken(t, key, "resource.contacts.list")
			r := do(t, "GET", sc.base+"/api/agents/"+testAgent+"/data/contacts/", nil, "X-API-Key", testKey,
				"X-Supervaize-Workspace-Id", "workspace_123",
				"X-Supervaize-Workspace-Authorization", "Bearer "+tok)
			t.Logf("handle_errors answered %d %s", r.Status, r.Body)
			if strings.Contains(string(r.Body), tok) {
				t.Errorf("handle_errors sees the workspace token after the gate removed it (forward_token off)")
			}
			if !strings.Contains(string(r.Body), "ws=[workspace_123]") {
				t.Errorf("handle_errors does not see the verified headers")
			}
		})
	}
}

// TestHandleErrorsFallbackProxy: a fallback agent in handle_errors
// (`reverse_proxy <fallback>`): the primary agent is down, the DataResource
// call is allowed, and handle_errors proxies the request on; with and
// without tracing before the gate, the fallback gets the verified headers
// and not the workspace token (forward_token off).
func TestHandleErrorsFallbackProxy(t *testing.T) {
	for _, tracing := range []bool{false, true} {
		t.Run(fmt.Sprintf("tracing=%v", tracing), func(t *testing.T) {
			fb := startAgent(t)
			key := newSigner(t, "k1")
			jw := startJWKS(t, key.jwk())
			dead := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			tr := ""
			if tracing {
				t.Setenv("OTEL_TRACES_EXPORTER", "none")
				tr = "\ttracing {\n\t\tspan sidecar\n\t}\n"
			}
			sc, err := runCaddyfile(t, "", func(port int) string {
				return fmt.Sprintf("http://127.0.0.1:%d {\n%s\tsupervaizer_auth {\n%s\t}\n\treverse_proxy %s\n"+
					"\thandle_errors {\n\t\treverse_proxy %s\n\t}\n}\n",
					port, tr, jwksDirective(jw.url(), "\t\tforward_token off\n"), dead, fb.addr())
			})
			if err != nil {
				t.Fatal(err)
			}
			r := do(t, "GET", sc.base+"/api/agents/"+testAgent+"/data/contacts/", nil, "X-API-Key", testKey,
				"X-Supervaize-Workspace-Id", "workspace_123",
				"X-Supervaize-Workspace-Authorization", "Bearer "+dataToken(t, key, "resource.contacts.list"))
			got := fb.last(t).Header
			t.Logf("status %d; fallback got token %v, verified workspace %q", r.Status,
				got.Get("X-Supervaize-Workspace-Authorization") != "", got.Get("X-Supervaize-Verified-Workspace-Id"))
			if got.Get("X-Supervaize-Workspace-Authorization") != "" {
				t.Errorf("the fallback agent got the workspace token with forward_token off")
			}
			if got.Get("X-Supervaize-Verified-Workspace-Id") != "workspace_123" {
				t.Errorf("the fallback agent got no verified context")
			}
		})
	}
}

// TestForwardTokenOffEveryVersion: TestForwardTokenOffPlaceholders's
// DataResource case over HTTP/1.1, h2c, HTTP/2 (TLS) and HTTP/3. Both sites have tracing before supervaizer_auth
// (forward_token off), and reverse_proxy copies
// {http.request.header.X-Supervaize-Workspace-Authorization} and
// {http.request.header.X-Supervaize-Verified-Workspace-Id} into headers the
// agent sees.
func TestForwardTokenOffEveryVersion(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	// The site template is "supervaizer_auth {…}\n\treverse_proxy <upstream>\n}":
	// the upstream text carries the proxy's block and the tracing directive
	// (Caddy orders tracing first whatever its place in the site).
	up := ag.addr() + " {\n\t\theader_up X-Echo-Token {http.request.header.X-Supervaize-Workspace-Authorization}\n" +
		"\t\theader_up X-Echo-Ws {http.request.header.X-Supervaize-Verified-Workspace-Id}\n\t}\n\ttracing {\n\t\tspan sidecar\n\t}"
	ps := startEveryProtocol(t, up, jwksDirective(jw.url(), "\t\tforward_token off\n"))
	ps.forEachVersion(t, func(t *testing.T, v httpVersion) {
		ag.reset()
		tok := dataToken(t, key, "resource.contacts.list")
		r := v.do(t, "GET", "/api/agents/"+testAgent+"/data/contacts/", nil, "X-API-Key", testKey,
			"X-Supervaize-Workspace-Id", "workspace_123", "X-Supervaize-Workspace-Authorization", "Bearer "+tok)
		if r.Status != 200 {
			t.Fatalf("data: %d %s", r.Status, r.Body)
		}
		wantEchoWithoutToken(t, "data "+v.name, ag.last(t).Header)
	})
}
