package test

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// rawRequest sends one HTTP/1.1 request as raw bytes (so no client library
// normalizes the path) and returns the status code.
func rawRequest(t *testing.T, base, method, target string, headers ...string) int {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target, strings.TrimPrefix(base, "http://"))
	body := ""
	if method == "POST" {
		body = "{}"
	}
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", headers[i], headers[i+1])
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := conn.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

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

// dataToken mints a token for the fixture workspace with scopes.
func dataToken(t *testing.T, s *signer, scopes ...string) string {
	return s.mintWith(t, func(c jwt.MapClaims) {
		list := []any{}
		for _, sc := range scopes {
			list = append(list, sc)
		}
		c["scopes"] = list
	})
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
		ag.reset()
		tok := "Bearer " + dataToken(t, key, "resource.contacts.list")
		wantDetail(t, do(t, "GET", sc.base+"/api/agents/unregistered_agent/data/contacts/", nil,
			append([]string{"X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", tok}, ws...)...), 403, "")
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

// TestSSE: events arrive while the stream is open, a client that goes away
// closes the upstream, and a workspace token filters effects by workspace;
// through a proxied stream per client and through the fan-out.
func TestSSE(t *testing.T) { forEachEventsMode(t, testSSE) }

func testSSE(t *testing.T, mode func(*agent) string) {
	ag := startAgent(t)
	events, closed := sseAgent(ag)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)))

	t.Run("unfiltered, first event and disconnect", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey)
		if e := readEvent(t, rd); !strings.Contains(e, "supervaizer.connected") {
			t.Fatalf("first event %q", e)
		}
		events <- effect("anything")
		if e := readEvent(t, rd); !strings.Contains(e, `"request_id": "anything"`) {
			t.Fatalf("effect %q", e)
		}
		cancel()
		resp.Body.Close()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("upstream stream not closed after the client went away")
		}
	})

	t.Run("filtered by workspace", func(t *testing.T) {
		// Two workspaces call the agent through the gate.
		tokA := key.mint(t, baseClaims())
		tokB := key.mintWith(t, func(c jwt.MapClaims) { c["workspace_id"] = "workspace_B"; c["workspace_slug"] = "b" })
		callFor := func(tok, ws, reqID string) {
			body := actionBody(t, func(r map[string]any) {
				r["workspace"] = map[string]any{"id": ws}
				r["request_id"] = reqID
				r["action"] = "job.sync" // reaches the agent every time (job.start would replay)
			})
			if a := decodeRPC(t, sc.rpc(t, body, tok)); a.Error != nil {
				t.Fatalf("call refused: %+v", a.Error)
			}
		}
		callFor(tokA, "workspace_123", "req-A1")
		callFor(tokB, "workspace_B", "req-B1")
		callFor(tokA, "workspace_123", "req-A2")

		_, evs := sseAgentEvents(ag)
		ctxA, cancelA := context.WithCancel(context.Background())
		defer cancelA()
		respA, rdA := openStream(t, ctxA, sc.base+"/a2a/events", "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+tokA)
		defer respA.Body.Close()
		if e := readEvent(t, rdA); !strings.Contains(e, "supervaizer.connected") {
			t.Fatalf("first event %q", e)
		}
		for _, id := range []string{"req-B1", "req-A1", "unknown", "req-B1", "req-A2"} {
			evs <- effect(id)
		}
		evs <- "event: supervaizer.heartbeat\ndata: {\"status\": \"ok\"}\n\n"
		for _, want := range []string{"req-A1", "req-A2", "supervaizer.heartbeat"} {
			e := readEvent(t, rdA)
			if !strings.Contains(e, want) {
				t.Fatalf("workspace A stream: got %q, want %s", e, want)
			}
		}
	})

	t.Run("hundreds of concurrent streams", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tr := &http.Transport{MaxConnsPerHost: 0}
		cl := &http.Client{Transport: tr}
		defer tr.CloseIdleConnections()
		var bodies []io.Closer
		for i := 0; i < 300; i++ {
			req, _ := http.NewRequestWithContext(ctx, "GET", sc.base+"/a2a/events", nil)
			req.Header.Set("X-API-Key", testReadKey)
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
			bodies = append(bodies, resp.Body)
			if e := readEvent(t, bufio.NewReader(resp.Body)); !strings.Contains(e, "supervaizer.connected") {
				t.Fatalf("stream %d first event %q", i, e)
			}
		}
		for _, b := range bodies {
			b.Close()
		}
	})

	t.Run("token refused or required", func(t *testing.T) {
		wantDetail(t, do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer junk"), 403, "")
		sc2 := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)+"		events_require_workspace_token on\n"))
		wantDetail(t, do(t, "GET", sc2.base+"/a2a/events", nil, "X-API-Key", testReadKey), 403, "")
	})
}

// sseAgentEvents installs a fresh SSE handler and returns its channels.
func sseAgentEvents(ag *agent) (chan struct{}, chan string) {
	ag.respond = nil
	evs, closed := sseAgent(ag)
	return closed, evs
}
