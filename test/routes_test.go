package test

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

// TestRouteClasses: every class and its key rules (docs/architecture.md, "Route table").
func TestRouteClasses(t *testing.T) {
	ag, _, jw, sc := startTokenGate(t, "")
	rk, wk := []string{"X-API-Key", testReadKey}, []string{"X-API-Key", testKey}

	cases := []struct {
		name, method, path string
		headers            []string
		status             int
		reaches            bool
	}{
		{"agents.json public", "GET", "/.well-known/agents.json", nil, 200, true},
		{"health public", "GET", "/.well-known/health", nil, 200, true},
		{"card public", "GET", "/.well-known/agents/agent_interviewer_agent.json", nil, 200, true},
		{"versioned card public", "GET", "/.well-known/agents/v1.2.0/agent_interviewer_agent.json", nil, 200, true},
		{"card HEAD", "HEAD", "/.well-known/agents.json", nil, 200, true},
		{"POST to public path", "POST", "/.well-known/agents.json", nil, 405, false},
		{"other well-known denied", "GET", "/.well-known/other", wk, 404, false},
		{"events without key", "GET", "/a2a/events", nil, 401, false},
		{"events with read key", "GET", "/a2a/events", rk, 200, true},
		{"events POST", "POST", "/a2a/events", wk, 405, false},
		{"legacy without key", "GET", "/api/supervaizer/agents/x", nil, 401, false},
		{"legacy GET read key", "GET", "/api/supervaizer/agents/x", rk, 200, true},
		{"legacy POST read key", "POST", "/api/supervaizer/agents/x/jobs", rk, 403, false},
		{"legacy POST write key", "POST", "/api/supervaizer/agents/x/jobs", wk, 200, true},
		{"docs denied by default", "GET", "/docs", wk, 404, false},
		{"openapi denied by default", "GET", "/openapi.json", wk, 404, false},
		{"root denied by default", "GET", "/", wk, 404, false},
		{"a2a GET", "GET", "/a2a", wk, 405, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ag.reset()
			var body []byte
			if tc.method == "POST" {
				body = []byte("{}")
			}
			r := do(t, tc.method, sc.base+tc.path, body, tc.headers...)
			if r.Status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.Status, tc.status, r.Body)
			}
			if got := ag.count.Load() > 0; got != tc.reaches {
				t.Fatalf("agent reached = %v, want %v", got, tc.reaches)
			}
		})
	}

	t.Run("policies", func(t *testing.T) {
		ag2 := startAgent(t)
		sc2 := startSidecar(t, ag2.addr(), jwksDirective(jw.url(), "		legacy_routes deny\n		other_routes api_key\n"))
		if r := do(t, "GET", sc2.base+"/api/supervaizer/agents/x", nil, wk...); r.Status != 404 {
			t.Fatalf("legacy deny: %d", r.Status)
		}
		if r := do(t, "GET", sc2.base+"/docs", nil); r.Status != 401 {
			t.Fatalf("other api_key without key: %d", r.Status)
		}
		nothingReached(t, ag2)
		if r := do(t, "GET", sc2.base+"/docs", nil, rk...); r.Status != 200 {
			t.Fatalf("other api_key with key: %d", r.Status)
		}
	})
}

// TestPathConfusion: no spelling of a path moves a request into a weaker
// class; each variant is refused or gated as its decoded path's class.
func TestPathConfusion(t *testing.T) {
	ag, _, _, sc := startTokenGate(t, "		other_routes public\n")
	wk := []string{"X-API-Key", testKey, "Content-Type", "application/json"}

	cases := []struct {
		method, target string
		status         int
	}{
		{"POST", "/%61%32%61", 200},    // decodes to /a2a: the controller gate (JSON-RPC error)
		{"POST", "/a2a/", 200},         // trailing slash: still the controller gate
		{"POST", "//a2a", 400},         // empty segment
		{"POST", "/a2a//", 400},        // empty segment
		{"POST", "/./a2a", 400},        // dot segment
		{"POST", "/a2a/.", 400},        // dot segment
		{"POST", "/x/../a2a", 400},     // dot segment
		{"POST", "/%2e%2e/a2a", 400},   // encoded dot segment
		{"POST", "/x/%2E%2E/a2a", 400}, // encoded dot segment, upper case
		{"POST", "/a2a;x=1", 400},      // ; parameter
		{"POST", "/a2a%3Bx", 400},      // encoded ;
		{"GET", "/a2a%2Fevents", 400},  // encoded slash
		{"GET", "/a2a%2fevents", 400},  // encoded slash, lower case
		{"POST", "/a2a%00", 400},       // NUL
		{"POST", "/a2a%5C", 400},       // encoded backslash
		{"GET", "/.well-known/health/../../a2a", 400},
		{"GET", "/.well-known/%2e%2e/a2a/events", 400},
		{"GET", "/api/agents/agent_interviewer/data/contacts/%2e%2e/", 400},
		{"GET", "/api/agents/agent_interviewer/data/contacts;x/", 400},
		{"POST", "/a2a%ZZ", 400}, // bad escape
	}
	for _, tc := range cases {
		ag.reset()
		got := rawRequest(t, sc.base, tc.method, tc.target, wk...)
		if got != tc.status {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.target, got, tc.status)
		}
		if n := ag.count.Load(); n != 0 {
			t.Errorf("%s %s reached the agent", tc.method, tc.target)
		}
	}
	// The decoded /a2a spelling is gated: a JSON-RPC error, not the agent.
	ag.reset()
	r := do(t, "POST", sc.base+"/%61%32%61", jobStartBody(t), wk...)
	wantRPCError(t, r, -32030, "workspace_authorization_missing")
	// /A2A is another path for a case-sensitive router: passed as "other"
	// (public here) without any verified context.
	ag.reset()
	rawRequest(t, sc.base, "POST", "/A2A", wk...)
	if got := ag.last(t); got.Header.Get("X-Supervaize-Verified-Mode") != "" {
		t.Fatal("other route got a verified header")
	}
}

// TestDataResourceRoutes: every DataResource operation with right and wrong
// scope, wrong workspace, transport key scope, and the mission metadata rules.
func TestDataResourceRoutes(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "")
	base := sc.base + "/api/agents/" + testAgent + "/data/contacts/"
	ops := []struct{ method, url, op string }{
		{"GET", base, "list"},
		{"POST", base, "create"},
		{"GET", base + "item-1", "get"},
		{"PUT", base + "item-1", "update"},
		{"DELETE", base + "item-1", "delete"},
		{"POST", base + "import/", "import"},
	}
	ws := []string{"X-Supervaize-Workspace-Id", "workspace_123", "X-Supervaize-Workspace-Slug", "acme"}
	for _, o := range ops {
		t.Run(o.op, func(t *testing.T) {
			var body []byte
			if o.method == "POST" || o.method == "PUT" {
				body = []byte(`{"name":"x"}`)
			}
			right := "Bearer " + dataToken(t, key, "resource.contacts."+o.op)
			wrong := "Bearer " + dataToken(t, key, "resource.contacts.nothing", "resource.prompts."+o.op)
			hdr := func(tok string, extra ...string) []string {
				return append(append([]string{"X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", tok}, ws...), extra...)
			}
			ag.reset()
			r := do(t, o.method, o.url, body, hdr(right)...)
			if r.Status != 200 {
				t.Fatalf("right scope: %d %s", r.Status, r.Body)
			}
			got := ag.last(t)
			if got.Header.Get("X-Supervaize-Verified-Workspace-Id") != "workspace_123" || got.Header.Get("X-Supervaize-Verified-Mode") != "token" {
				t.Fatalf("verified headers missing: %v", got.Header)
			}
			ag.reset()
			wantDetail(t, do(t, o.method, o.url, body, hdr(wrong)...), 403, "")
			wantDetail(t, do(t, o.method, o.url, body, "X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", right,
				"X-Supervaize-Workspace-Id", "workspace_999"), 403, "")
			wantDetail(t, do(t, o.method, o.url, body, "X-API-Key", testKey, "X-Supervaize-Workspace-Id", "workspace_123"), 403, "Missing X-Supervaize-Workspace-Authorization header")
			if o.method != "GET" {
				wantDetail(t, do(t, o.method, o.url, body, append([]string{"X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", right}, ws...)...), 403, "Insufficient scope")
			}
			wantDetail(t, do(t, o.method, o.url, body, append([]string{"X-Supervaize-Workspace-Authorization", right}, ws...)...), 401, "Invalid or missing API key")
			nothingReached(t, ag)
		})
	}
	t.Run("other agent's path", func(t *testing.T) {
		// A served agent: the token decides. An agent not served: the
		// SDK has no route for it, 404 "Not Found", whatever the method,
		// key or token.
		ag.reset()
		tok := "Bearer " + dataToken(t, key, "resource.contacts.list")
		wantDetail(t, do(t, "GET", sc.base+"/api/agents/unregistered_agent/data/contacts/", nil,
			append([]string{"X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", tok}, ws...)...), 403, "")
		other := sc.base + "/api/agents/ghost/data/contacts/"
		wantDetail(t, do(t, "GET", other, nil,
			append([]string{"X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", tok}, ws...)...), 404, "Not Found")
		wantDetail(t, do(t, "GET", other+"item-1", nil, ws...), 404, "Not Found")
		wantDetail(t, do(t, "PATCH", other, []byte(`{}`), "X-API-Key", testKey), 404, "Not Found")
		wantDetail(t, do(t, "POST", other+"import/", []byte(`[]`), "X-API-Key", testKey), 404, "Not Found")
		nothingReached(t, ag)
	})
	t.Run("mission metadata", func(t *testing.T) {
		tok := "Bearer " + dataToken(t, key, "resource.contacts.list")
		enc := base64.RawURLEncoding.EncodeToString
		exact := `{"k":"` + strings.Repeat("a", 3072-8) + `"}` // 3072 bytes → 4096 base64 chars
		cases := []struct {
			name    string
			headers []string
			status  int
		}{
			{"valid", []string{"X-Supervaize-Mission-Id", "m1", "X-Supervaize-Mission-Metadata", enc([]byte(`{"a":1}`))}, 200},
			{"valid padded", []string{"X-Supervaize-Mission-Id", "m1", "X-Supervaize-Mission-Metadata", base64.URLEncoding.EncodeToString([]byte(`{"a":1}`))}, 200},
			{"exactly 4096", []string{"X-Supervaize-Mission-Id", "m1", "X-Supervaize-Mission-Metadata", enc([]byte(exact))}, 200},
			{"missing mission id", []string{"X-Supervaize-Mission-Metadata", enc([]byte(`{"a":1}`))}, 400},
			{"not base64url", []string{"X-Supervaize-Mission-Id", "m1", "X-Supervaize-Mission-Metadata", "***"}, 400},
			{"not an object", []string{"X-Supervaize-Mission-Id", "m1", "X-Supervaize-Mission-Metadata", enc([]byte(`[1]`))}, 400},
			{"not JSON", []string{"X-Supervaize-Mission-Id", "m1", "X-Supervaize-Mission-Metadata", enc([]byte(`nope`))}, 400},
			{"too large", []string{"X-Supervaize-Mission-Id", "m1", "X-Supervaize-Mission-Metadata", enc([]byte(exact + " "))}, 400},
		}
		if l := len(enc([]byte(exact))); l != 4096 {
			t.Fatalf("exact-limit metadata is %d bytes", l)
		}
		for _, tc := range cases {
			ag.reset()
			h := append(append([]string{"X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", tok}, ws...), tc.headers...)
			r := do(t, "GET", base, nil, h...)
			if r.Status != tc.status {
				t.Errorf("%s: status %d, want %d (%s)", tc.name, r.Status, tc.status, r.Body)
			}
			if reached := ag.count.Load() > 0; reached != (tc.status == 200) {
				t.Errorf("%s: agent reached = %v", tc.name, reached)
			}
		}
	})
	t.Run("local mode still requires a token", func(t *testing.T) {
		ag2 := startAgent(t)
		sc2 := startSidecar(t, ag2.addr(), fmt.Sprintf("api_key %s\nlocal_mode on\nagent %s %s\n", testKey, testAgent, testAgentID))
		wantDetail(t, do(t, "GET", sc2.base+"/api/agents/"+testAgent+"/data/contacts/", nil, append([]string{"X-API-Key", testKey}, ws...)...), 403, "")
		nothingReached(t, ag2)
	})
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

	// Every other path of the /_sidecar namespace is the sidecar's 404, never
	// forwarded, even where other paths go to the agent with a key.
	sc2 := startSidecar(t, ag.addr(), localDirective("\t\tother_routes api_key\n"))
	for _, path := range []string{"/_sidecar/status/", "/%5fsidecar/status", "/_sidecar/", "/_sidecar", "/_sidecar/other"} {
		if r := rawRequest(t, sc2.base, "GET", path, "X-API-Key", testKey); r != 404 {
			t.Errorf("GET %s: %d, want 404", path, r)
		}
	}
	nothingReached(t, ag)
	if r := rawRequest(t, sc2.base, "GET", "/custom/thing", "X-API-Key", testKey); r != 200 || ag.count.Load() != 1 {
		t.Fatalf("other route with other_routes api_key: %d, agent %d", r, ag.count.Load())
	}
}
