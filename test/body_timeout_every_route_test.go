package test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

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
		eventually(t, rt.name+": the agent's read of the trickled body to be cut", func() bool {
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
