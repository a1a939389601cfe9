package test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// inlineFileSubmit is a step.awaiting.submit whose input answers a file
// field with storage "inline" (supervaizer-v2 seed, "File fields"): the
// file's bytes, base64, inside the action JSON.
func inlineFileSubmit(t *testing.T, fileBytes int) []byte {
	t.Helper()
	file := make([]byte, fileBytes)
	rand.Read(file)
	return actionBody(t, func(r map[string]any) {
		r["action"], r["surface"], r["step_id"], r["case_id"] = "step.awaiting.submit", "case.step.awaiting", "step_1", "case_1"
		delete(r, "idempotency_key")
		r["input"] = map[string]any{"values": map[string]any{"report_file": map[string]any{
			"storage": "inline", "filename": "insights.md", "media_type": "text/markdown",
			"size": fileBytes, "encoding": "base64", "content": base64.StdEncoding.EncodeToString(file),
		}}}
	})
}

// postUndeclared posts body to /a2a without a Content-Length (chunked).
func postUndeclared(t *testing.T, sc *sidecar, body []byte, token string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, sc.base+"/a2a",
		io.MultiReader(bytes.NewReader(body))) // not a *bytes.Reader: no length
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", testKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// wantTooLarge asserts the sidecar's JSON-RPC answer to an /a2a body over
// max_body_a2a: HTTP 200, id null, -32600 with the limit in data.
func wantTooLarge(t *testing.T, r response, limit int) {
	t.Helper()
	a := wantRPCError(t, r, -32600, "request_body_too_large")
	if string(a.ID) != "null" || a.Error.Message != "Request body too large" {
		t.Fatalf("answer %s", r.Body)
	}
	var d struct {
		MaxBody int `json:"max_body"`
	}
	if err := json.Unmarshal(a.Error.Data, &d); err != nil || d.MaxBody != limit {
		t.Fatalf("data %s, want max_body %d", a.Error.Data, limit)
	}
}

// TestBodyLimitDefaults: with the defaults, a step.awaiting.submit carrying
// a 1 MiB inline file (about 1.4 MB of JSON) reaches the agent byte for
// byte, as an SDK agent would take it; one byte over the /a2a default is
// refused and the agent receives nothing. DataResource bodies over the old
// 1 MiB pass too; legacy routes keep 1 MiB.
func TestBodyLimitDefaults(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "")
	tok := key.mintWith(t, func(c jwt.MapClaims) {
		c["scopes"] = []any{"supervaizer/action.invoke", "step.awaiting.submit", "resource.contacts.import"}
	})
	body := inlineFileSubmit(t, 1<<20)
	if len(body) < 1<<20*4/3 {
		t.Fatalf("inline body only %d bytes", len(body))
	}
	if a := decodeRPC(t, sc.rpc(t, body, tok)); a.Error != nil {
		t.Fatalf("1 MiB inline file refused: %s", a.Error.Message)
	}
	if got := ag.last(t); !bytes.Equal(got.Body, body) {
		t.Fatalf("agent received %d bytes, want the %d sent", len(got.Body), len(body))
	}

	const a2aDefault = 16 << 20
	ag.reset()
	wantTooLarge(t, sc.rpc(t, padTo(t, body, a2aDefault+1), tok), a2aDefault)
	nothingReached(t, ag)

	ws := []string{"X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", "Bearer " + tok, "X-Supervaize-Workspace-Id", "workspace_123"}
	imp := padTo(t, []byte(`[{"name":"a"}]`), 2<<20)
	if r := do(t, http.MethodPost, sc.base+"/api/agents/"+testAgent+"/data/contacts/import/", imp, ws...); r.Status != 200 {
		t.Fatalf("2 MiB import: %d %s", r.Status, r.Body)
	}
	ag.reset()
	wantDetail(t, do(t, http.MethodPost, sc.base+"/api/supervaizer/jobs", padTo(t, []byte("{}"), 1<<20+1), "X-API-Key", testKey),
		http.StatusRequestEntityTooLarge, "Request body too large")
	nothingReached(t, ag)
}

// TestBodyLimitA2A: max_body_a2a exactly: limit bytes pass, limit+1 are
// refused, declared or streamed, and never reach the agent; max_body alone
// still bounds every route, /a2a included.
func TestBodyLimitA2A(t *testing.T) {
	const limit = 64 << 10
	ag, key, _, sc := startTokenGate(t, "		max_body_a2a 64KiB\n")
	tok := key.mint(t, baseClaims())
	body := freshJobStart(t)
	if a := decodeRPC(t, sc.rpc(t, padTo(t, body, limit), tok)); a.Error != nil {
		t.Fatalf("body of exactly max_body_a2a refused: %s", a.Error.Message)
	}
	ag.reset()
	wantTooLarge(t, sc.rpc(t, padTo(t, freshJobStart(t), limit+1), tok), limit)
	wantTooLarge(t, postUndeclared(t, sc, padTo(t, freshJobStart(t), limit+1), tok), limit)
	nothingReached(t, ag)

	ag2, key2, _, sc2 := startTokenGate(t, "		max_body 8KiB\n")
	big := actionBody(t, func(r map[string]any) { r["input"] = map[string]any{"pad": strings.Repeat("x", 8<<10)} })
	wantTooLarge(t, sc2.rpc(t, big, key2.mint(t, baseClaims())), 8<<10)
	nothingReached(t, ag2)
}

// openRequest writes the head of an HTTP/1.1 request to the sidecar at base
// (headers as name, value pairs) and returns the connection, the body not
// yet sent.
func openRequest(t *testing.T, base, method, target string, headers ...string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, target, strings.TrimPrefix(base, "http://"))
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", headers[i], headers[i+1])
	}
	b.WriteString("\r\n")
	if _, err := conn.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	return conn
}

// readAnswer reads the response on conn (10 s at most).
func readAnswer(t *testing.T, conn net.Conn) (int, string) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestReadWithBodyRefused: a GET or HEAD that declares a body (a
// Content-Length above 0, or chunked) on the public, events, DataResource
// and /_sidecar/ probe routes is answered 400 at once, before any byte of
// the body arrives; the agent receives nothing.
func TestReadWithBodyRefused(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "")
	tok := "Bearer " + dataToken(t, key, "resource.contacts.list")
	cases := []struct {
		method, target string
		headers        []string
	}{
		{"GET", "/.well-known/health", []string{"Content-Length", "100000"}},
		{"HEAD", "/.well-known/agents.json", []string{"Transfer-Encoding", "chunked"}},
		{"GET", "/a2a/events", []string{"X-API-Key", testKey, "Content-Length", "10"}},
		{"GET", "/api/agents/" + testAgent + "/data/contacts/", []string{"X-API-Key", testKey,
			"X-Supervaize-Workspace-Authorization", tok, "X-Supervaize-Workspace-Id", "workspace_123", "Content-Length", "5"}},
		{"GET", "/_sidecar/live", []string{"Content-Length", "100000"}},
		{"GET", "/_sidecar/status", []string{"X-API-Key", testReadKey, "Transfer-Encoding", "chunked"}},
	}
	for _, c := range cases {
		ag.reset()
		status, body := readAnswer(t, openRequest(t, sc.base, c.method, c.target, c.headers...))
		if status != http.StatusBadRequest || (c.method == "GET" && !strings.Contains(body, "GET and HEAD requests take no body")) {
			t.Errorf("%s %s %v: %d %s, want 400", c.method, c.target, c.headers, status, body)
		}
		nothingReached(t, ag)
	}
	// Without a body the same requests pass.
	if r := do(t, "GET", sc.base+"/.well-known/health", nil); r.Status != 200 {
		t.Fatalf("health without a body: %d %s", r.Status, r.Body)
	}
}

// trickleAgent is an upstream that reads each request's body to its end
// and counts the reads that ended in an error (the sidecar cut the
// forwarded request): then the agent's connection is released.
type trickleAgent struct {
	srv      *httptest.Server
	started  atomic.Int32
	cut      atomic.Int32
	complete atomic.Int32
}

func startTrickleAgent(t *testing.T) *trickleAgent {
	a := &trickleAgent{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.started.Add(1)
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			a.cut.Add(1)
			return
		}
		a.complete.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// TestTrickledBodyCutOnEveryRoute: a body that trickles in (Content-Length
// 100000, a byte every 200 ms) on a route whose body is streamed to the
// agent (DataResource, legacy v1, other routes) is cut once body_timeout
// has passed: the forwarded request fails at the agent, whose connection
// is released, and the client gets an error answer; it never completes.
func TestTrickledBodyCutOnEveryRoute(t *testing.T) {
	ag := startTrickleAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, strings.TrimPrefix(ag.srv.URL, "http://"),
		jwksDirective(jw.url(), "		body_timeout 1s\n		other_routes api_key\n"))
	tok := "Bearer " + dataToken(t, key, "resource.contacts.create")
	routes := []struct {
		name, method, target string
		headers              []string
	}{
		{"data", "POST", "/api/agents/" + testAgent + "/data/contacts/", []string{
			"X-Supervaize-Workspace-Authorization", tok, "X-Supervaize-Workspace-Id", "workspace_123"}},
		{"legacy", "POST", "/api/supervaizer/jobs", nil},
		{"other", "PUT", "/custom/upload", nil},
	}
	for i, rt := range routes {
		headers := append([]string{"X-API-Key", testKey, "Content-Type", "application/json", "Content-Length", "100000"}, rt.headers...)
		conn := openRequest(t, sc.base, rt.method, rt.target, headers...)
		stop := make(chan struct{})
		go func() { // the slow client: one byte every 200 ms, until the sidecar cuts it
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := conn.Write([]byte(" ")); err != nil {
						return
					}
				}
			}
		}()
		eventually(t, 15*time.Second, rt.name+": the agent's read of the trickled body to be cut", func() bool {
			return int(ag.cut.Load()) == i+1
		})
		close(stop)
		// The client is answered with an error (the proxy's 504), not left
		// waiting.
		if status, _ := readAnswer(t, conn); status < 400 {
			t.Errorf("%s: status %d after the cut, want an error", rt.name, status)
		}
	}
	if ag.complete.Load() != 0 {
		t.Fatalf("%d trickled bodies reached the agent whole", ag.complete.Load())
	}
}

// TestHTTPSmuggling: ambiguous framing and slow or oversized bodies are
// refused and never reach the agent.
func TestHTTPSmuggling(t *testing.T) {
	ag := startAgent(t)
	sc := startSidecar(t, ag.addr(), localDirective("		body_timeout 1s\n		max_body 2KiB\n"))
	host := "Host: " + strings.TrimPrefix(sc.base, "http://") + "\r\nX-API-Key: " + testKey + "\r\nContent-Type: application/json\r\n"
	body := string(jobStartBody(t))

	cases := []struct {
		name, raw string
		pause     time.Duration
		rest      string
		want      string
	}{
		// Go lets Transfer-Encoding win and drops Content-Length; the empty
		// chunked body is then a JSON-RPC parse error (200), and the agent,
		// which gets a re-framed request, sees nothing.
		{"TE and CL", "POST /a2a HTTP/1.1\r\n" + host + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 0, "", "200"},
		{"two CL", "POST /a2a HTTP/1.1\r\n" + host + fmt.Sprintf("Content-Length: %d\r\nContent-Length: 3\r\n\r\n%s", len(body), body), 0, "", "400"},
		{"chunked over the limit", "POST /a2a HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", 3000, strings.Repeat(" ", 3000)), 0, "", "200"}, // -32600 request_body_too_large
		{"slow body", "POST /a2a HTTP/1.1\r\n" + host + fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body[:10]), 2 * time.Second, body[10:], "408"},
		{"spaced verified header name", "POST /a2a HTTP/1.1\r\n" + host + "X-Supervaize-Verified-Mode : token\r\n" + fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body), 0, "", "400"},
	}
	for _, tc := range cases {
		ag.reset()
		status := rawExchange(t, sc.base, tc.raw, tc.pause, tc.rest)
		if !strings.Contains(status, " "+tc.want+" ") && !strings.HasSuffix(status, " "+tc.want) {
			t.Errorf("%s: %q, want %s", tc.name, status, tc.want)
		}
		if ag.count.Load() != 0 {
			t.Errorf("%s reached the agent", tc.name)
		}
	}

	// Expect: 100-continue and HTTP/1.0 clients are served normally.
	ag.reset()
	st := rawExchange(t, sc.base, "POST /a2a HTTP/1.1\r\n"+host+fmt.Sprintf("Expect: 100-continue\r\nContent-Length: %d\r\n\r\n%s", len(body), body), 0, "")
	if !strings.Contains(st, " 200") || ag.count.Load() != 1 {
		t.Fatalf("Expect: 100-continue: %q, agent %d", st, ag.count.Load())
	}
	// A new key: the same one would be answered from the record of the
	// call above (with Expect passed on to the agent, its interim 100 kept
	// that answer from being recorded).
	body10 := freshJobStart(t)
	st = rawExchange(t, sc.base, "POST /a2a HTTP/1.0\r\n"+host+fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body10), body10), 0, "")
	if !strings.Contains(st, " 200") || ag.count.Load() != 2 {
		t.Fatalf("HTTP/1.0: %q, agent %d", st, ag.count.Load())
	}
	st = rawExchange(t, sc.base, "POST /a2a HTTP/1.0\r\nHost: "+strings.TrimPrefix(sc.base, "http://")+"\r\n"+fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body), 0, "")
	if !strings.Contains(st, " 401") || ag.count.Load() != 2 {
		t.Fatalf("HTTP/1.0 without key: %q", st)
	}
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

// TestRefusalBeforeBodyBoundedByBodyTimeout: a request refused before its
// body was read (no key, a read key on POST /a2a, a method the route does
// not serve, no workspace token on a DataResource route), whose client
// declared a body and never sends it, is answered once body_timeout has
// passed (1 s here), not after the server's idle timeout (60 s and more),
// with "Connection: close", and the connection is closed; the agent
// receives nothing. A body read whole keeps the connection.
func TestRefusalBeforeBodyBoundedByBodyTimeout(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), "		body_timeout 1s\n"))
	cases := []struct {
		name, method, target string
		headers              []string
		want                 int
	}{
		{"no key", "POST", "/a2a", nil, http.StatusUnauthorized},
		{"read key", "POST", "/a2a", []string{"X-API-Key", testReadKey}, http.StatusForbidden},
		{"wrong method", "PUT", "/a2a", []string{"X-API-Key", testKey}, http.StatusMethodNotAllowed},
		{"no token", "POST", "/api/agents/" + testAgent + "/data/contacts/", []string{"X-API-Key", testKey}, http.StatusForbidden},
	}
	for _, tc := range cases {
		headers := append([]string{"Content-Type", "application/json", "Content-Length", "100"}, tc.headers...)
		conn := openRequest(t, sc.base, tc.method, tc.target, headers...)
		if _, err := conn.Write([]byte("{")); err != nil { // 1 of the 100 declared bytes, never the rest
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // past body_timeout, well before the idle timeout
		rd := bufio.NewReader(conn)
		resp, err := http.ReadResponse(rd, nil)
		if err != nil {
			t.Fatalf("%s: no answer while the body is pending: %v", tc.name, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != tc.want || !resp.Close {
			t.Errorf("%s: %d, Connection %q; want %d and close", tc.name, resp.StatusCode, resp.Header.Get("Connection"), tc.want)
		}
		drainUntilClosed(t, conn, rd, 10*time.Second)
	}
	nothingReached(t, ag)

	// A body read whole keeps the connection: two calls on one connection.
	conn := rawConn(t, sc)
	rd := bufio.NewReader(conn)
	body := actionFor(t, "job.sync")
	for i := range 2 {
		req, _ := http.NewRequest("POST", sc.base+"/a2a", bytes.NewReader(body))
		req.Header.Set("X-API-Key", testKey)
		req.Header.Set("Content-Type", "application/json")
		if err := req.Write(conn); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(rd, req)
		if err != nil {
			t.Fatalf("call %d on one connection: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.Close {
			t.Fatalf("call %d: the connection was closed after a body read whole (%d)", i, resp.StatusCode)
		}
	}
}

// TestA2AContentTypeNotJSON: an /a2a body whose Content-Type is not JSON
// (absent, text/plain, a form, a value that is not one type/subtype) is
// refused with the 422 the SDK's handler was writing (the SDK itself
// answers 500: docs/sdk-wire.md, "Requests the SDK refuses over HTTP"),
// over every HTTP version, and the agent receives nothing; JSON types with
// parameters, in capitals or +json are forwarded.
func TestA2AContentTypeNotJSON(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	ps := startEveryProtocol(t, ag.addr(), jwksDirective(jw.url(), ""))
	const want = `{"detail":[{"type":"dict_type","loc":["body"],"msg":"Input should be a valid dictionary"}]}`
	ps.forEachVersion(t, func(t *testing.T, v httpVersion) {
		tok := key.mint(t, baseClaims())
		for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "json", "application/json/x", "application/jsonx"} {
			ag.reset()
			h := []string{"X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", "Bearer " + tok}
			if ct != "" {
				h = append(h, "Content-Type", ct)
			}
			r := v.do(t, "POST", "/a2a", freshJobStart(t), h...)
			if r.Status != 422 || string(r.Body) != want {
				t.Fatalf("Content-Type %q: %d %s", ct, r.Status, r.Body)
			}
			nothingReached(t, ag)
		}
		for _, ct := range []string{"application/json; charset=utf-8", "APPLICATION/JSON", "application/vnd.supervaize+json"} {
			ag.reset()
			r := v.do(t, "POST", "/a2a", freshJobStart(t), "X-API-Key", testKey,
				"X-Supervaize-Workspace-Authorization", "Bearer "+tok, "Content-Type", ct)
			if a := decodeRPC(t, r); a.Error != nil || ag.count.Load() != 1 {
				t.Fatalf("Content-Type %q: %s (agent got %d)", ct, r.Body, ag.count.Load())
			}
		}
	})
}

// TestExpectContinueRefusedAtOnce: a keyless POST /a2a that declares a body
// with "Expect: 100-continue" and waits for "100 Continue" is answered 401
// at once, over every HTTP version: with body_timeout 1 min the answer
// arrives while the body is still unsent (the 10 s deadline is far below
// body_timeout). Over HTTP/1 no "100 Continue" precedes it and the
// connection closes after it. With the key, the body is asked for
// ("100 Continue"), read and judged on the same connection.
func TestExpectContinueRefusedAtOnce(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	ps := startEveryProtocol(t, ag.addr(), jwksDirective(jw.url(), "\t\tbody_timeout 1m\n"))

	// HTTP/1, raw: the first line the client reads is the final answer.
	conn := openRequest(t, ps.base, "POST", "/a2a", "Content-Type", "application/json", "Content-Length", "100", "Expect", "100-continue")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	rd := bufio.NewReader(conn)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatalf("no answer while the client waits for 100 Continue: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close || !strings.Contains(string(b), "Invalid or missing API key") {
		t.Fatalf("%d (Connection %q) %s; want 401 and close", resp.StatusCode, resp.Header.Get("Connection"), b)
	}
	drainUntilClosed(t, conn, rd, 10*time.Second)

	// With the key: 100 Continue, then the body, then the agent's answer.
	body := actionFor(t, "job.sync")
	conn = openRequest(t, ps.base, "POST", "/a2a", "Content-Type", "application/json", "X-API-Key", testKey,
		"Content-Length", strconv.Itoa(len(body)), "Expect", "100-continue")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	rd = bufio.NewReader(conn)
	resp, err = http.ReadResponse(rd, nil)
	if err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("with the key: %v %v, want 100 Continue first", resp, err)
	}
	if _, err := conn.Write(body); err != nil {
		t.Fatal(err)
	}
	if resp, err = http.ReadResponse(rd, nil); err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("with the key, after the body: %v %v", resp, err)
	}
	// No token: the gate read the body and refused the call it names.
	if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), "workspace_authorization_missing") {
		t.Fatalf("with the key, after the body: %s", b)
	}

	// Every version, through its client: a body that never comes.
	ps.forEachVersion(t, func(t *testing.T, v httpVersion) {
		pr, pw := io.Pipe()
		defer pw.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "POST", v.base+"/a2a", pr)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = 100
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Expect", "100-continue")
		resp, err := v.client.Do(req)
		if err != nil {
			t.Fatalf("no answer while the body is unsent: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), "Invalid or missing API key") {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	})
	nothingReached(t, ag)
}

// TestStreamedChunkedBodyAnswers: on the routes whose body is streamed to
// the agent (DataResource, legacy v1, other), a body without a declared
// length gets the answers the same body with a Content-Length gets, over
// every HTTP version: past max_body 413 {"detail":"Request body too
// large"}, stalled past body_timeout 408 {"detail":"Request body not
// received in time"}, not the proxy's own 502 or 504.
func TestStreamedChunkedBodyAnswers(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	ps := startEveryProtocol(t, ag.addr(), jwksDirective(jw.url(), "\t\tmax_body 4KiB\n\t\tbody_timeout 1s\n\t\tother_routes api_key\n"))
	tok := "Bearer " + dataToken(t, key, "resource.contacts.create")
	routes := []struct {
		name, method, path string
		headers            []string
	}{
		{"data", "POST", "/api/agents/" + testAgent + "/data/contacts/", []string{
			"X-Supervaize-Workspace-Authorization", tok, "X-Supervaize-Workspace-Id", "workspace_123"}},
		{"legacy", "POST", "/api/supervaizer/jobs", nil},
		{"other", "PUT", "/custom/upload", nil},
	}
	send := func(t *testing.T, v httpVersion, method, path string, body io.Reader, headers []string) response {
		t.Helper()
		req, err := http.NewRequest(method, v.base+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = -1 // chunked over HTTP/1, no length over HTTP/2 and 3
		req.Header.Set("X-API-Key", testKey)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := v.client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return response{Status: resp.StatusCode, Body: b}
	}
	ps.forEachVersion(t, func(t *testing.T, v httpVersion) {
		for _, rt := range routes {
			big := io.MultiReader(strings.NewReader(strings.Repeat("x", 8<<10)))
			wantDetail(t, send(t, v, rt.method, rt.path, big, rt.headers), http.StatusRequestEntityTooLarge, "Request body too large")

			pr, pw := io.Pipe()
			go func() { _, _ = pw.Write([]byte(`{"a":`)) }() // then nothing: the body stalls
			wantDetail(t, send(t, v, rt.method, rt.path, pr, rt.headers), http.StatusRequestTimeout, "Request body not received in time")
			pw.Close()

			small := io.MultiReader(strings.NewReader(`{"a":1}`))
			if r := send(t, v, rt.method, rt.path, small, rt.headers); r.Status != 200 {
				t.Fatalf("%s: a small chunked body: %d %s", rt.name, r.Status, r.Body)
			}
		}
	})
}
