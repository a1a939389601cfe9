package test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Pipelined / smuggled requests around the hijack never reach the agent.
func TestEventsFanoutPipelining(t *testing.T) {
	ag := startAgent(t)
	up := newCountingSSEAgent(ag)
	sc := startSidecar(t, ag.addr(), localDirective(fanoutDirective(ag)+"\t\tapi_key "+testReadKey+" read\n"))
	host := hostOf(sc)
	get := fmt.Sprintf("GET /a2a/events HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\n", host, testReadKey)
	smuggled := fmt.Sprintf("GET /docs HTTP/1.1\r\nHost: %s\r\n\r\n", host) // other_routes deny: must never reach the agent
	post := fmt.Sprintf("POST /a2a HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", host)
	cases := map[string]string{
		"same write":          get + "\r\n" + smuggled,
		"same write, post":    get + "\r\n" + post,
		"GET body CL":         get + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(smuggled)) + smuggled,
		"GET body CL + next":  get + "Content-Length: 2\r\n\r\nxx" + smuggled,
		"GET chunked + next":  get + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled,
		"expect 100 + body":   get + "Expect: 100-continue\r\nContent-Length: 2\r\n\r\nxx" + smuggled,
		"HTTP/1.0 keep-alive": strings.Replace(get, "HTTP/1.1", "HTTP/1.0", 1) + "Connection: keep-alive\r\n\r\n" + smuggled,
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			ag.reset()
			c := rawConn(t, sc)
			if _, err := io.WriteString(c, raw); err != nil {
				t.Fatal(err)
			}
			rd := bufio.NewReader(c)
			resp, err := http.ReadResponse(rd, nil)
			if err != nil {
				t.Fatalf("first response does not parse: %v", err)
			}
			t.Logf("status %d %v", resp.StatusCode, resp.Header)
			rest := drainUntilClosed(t, c, rd, 10*time.Second)
			if strings.Contains(rest, "HTTP/1.") {
				t.Fatalf("a second response was served on the connection: %q", rest)
			}
			for _, r := range ag.received() {
				if r.Path != "/a2a/events" {
					t.Fatalf("smuggled request reached the agent: %s %s", r.Method, r.Path)
				}
			}
		})
	}
	eventually(t, 15*time.Second, "every upstream stream closed", func() bool { return up.opened.Load() == up.closed.Load() })
}

// The response head is valid HTTP/1.1 for HTTP/1.0 and HTTP/1.1 clients and
// carries no framing header; the body reads until close.
func TestEventsFanoutHead(t *testing.T) { forEachEventsMode(t, testEventsFanoutHead) }

func testEventsFanoutHead(t *testing.T, mode func(*agent) string) {
	ag := startAgent(t)
	ag.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Connection", "X-Secret") // hop-by-hop by nomination
		h.Set("X-Secret", "internal")
		h.Set("Set-Cookie", "a=b")
		h.Set("Content-Length", "100000")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Alt-Svc", `h3=":9443"`)       // hop-by-hop for reverse_proxy: the
		h.Set("Proxy-Authenticate", "Basic") // fan-out relayed both until internal/hop
		h.Add("X-Multi", "1")
		h.Add("X-Multi", "2")
		h.Set("X-Weird", "a\tb")
		w.WriteHeader(200)
		fmt.Fprint(w, "event: supervaizer.connected\ndata: {}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
	sc := startSidecar(t, ag.addr(), localDirective(mode(ag)+"\t\tapi_key "+testReadKey+" read\n"))
	for _, proto := range []string{"HTTP/1.0", "HTTP/1.1"} {
		t.Run(proto, func(t *testing.T) {
			c := rawConn(t, sc)
			fmt.Fprintf(c, "GET /a2a/events %s\r\nHost: %s\r\nX-API-Key: %s\r\n\r\n", proto, hostOf(sc), testReadKey)
			rd := bufio.NewReader(c)
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(rd, &http.Request{Method: "GET"})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("head: %v len=%d te=%v close=%v", resp.Header, resp.ContentLength, resp.TransferEncoding, resp.Close)
			if mode(ag) != "" && (resp.ContentLength != -1 || !resp.Close) {
				t.Errorf("framing: ContentLength %d Close %v", resp.ContentLength, resp.Close)
			}
			if resp.Header.Get("X-Secret") != "" {
				t.Errorf("header nominated hop-by-hop by the agent's Connection header was relayed: X-Secret=%q", resp.Header.Get("X-Secret"))
			}
			if mode(ag) != "" && (resp.Header.Get("Set-Cookie") != "" || resp.Header.Get("Keep-Alive") != "") {
				t.Errorf("hop-by-hop/cookie relayed: %v", resp.Header)
			}
			// Proxied or fanned out, the same answer has the same headers.
			if resp.Header.Get("Alt-Svc") != "" || resp.Header.Get("Proxy-Authenticate") != "" {
				t.Errorf("hop-by-hop Alt-Svc/Proxy-Authenticate relayed: %v", resp.Header)
			}
			if e := readEvent(t, bufio.NewReader(resp.Body)); !strings.Contains(e, "connected") {
				t.Fatalf("first event %q", e)
			}
		})
	}
}

// rawAgent answers every connection with answer (then keeps it open until the peer closes).
func rawAgent(t *testing.T, answer string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				io.WriteString(c, answer)
				io.Copy(io.Discard, br)
			}()
		}
	}()
	return l.Addr().String()
}

// The agent's refusal is relayed: odd statuses must not produce an invalid or
// tunnel-like answer (101), and the connection must not then serve further
// requests unchecked.
func TestEventsFanoutOddRefusals(t *testing.T) {
	ag := startAgent(t)
	for name, answer := range map[string]string{
		"101 no upgrade": "HTTP/1.1 101 Switching Protocols\r\n\r\n",
		"204":            "HTTP/1.1 204 No Content\r\n\r\n",
		"304":            "HTTP/1.1 304 Not Modified\r\n\r\n",
		"200 json":       "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"200 sse + CL 0": "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 0\r\n\r\n",
		"999":            "HTTP/1.1 999 Weird\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\nhello",
		"ct injection":   "HTTP/1.1 401 Unauthorized\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\nhello",
	} {
		t.Run(name, func(t *testing.T) {
			addr := rawAgent(t, answer)
			sc := startSidecar(t, ag.addr(), localDirective(fmt.Sprintf("\t\tevents_fanout on\n\t\tupstream http://%s\n\t\tregistration off\n\t\tapi_key %s read\n", addr, testReadKey)))
			ag.reset()
			c := rawConn(t, sc)
			fmt.Fprintf(c, "GET /a2a/events HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\n\r\n", hostOf(sc), testReadKey)
			rd := bufio.NewReader(c)
			_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
			resp, err := http.ReadResponse(rd, &http.Request{Method: "GET"})
			if err != nil {
				t.Fatalf("answer does not parse: %v", err)
			}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
			t.Logf("client got %d %v %q", resp.StatusCode, resp.Header, b)
			if resp.StatusCode == 101 || resp.StatusCode < 200 {
				t.Errorf("relayed a %d to the client", resp.StatusCode)
			}
		})
	}
}

// An agent answering 101 (with Upgrade) to the stream request: the client
// gets an answer (502, never a 101) and so does a later client (no dial is
// left stuck on the switched connection).
func TestEventsFanoutUpgradeAnswer(t *testing.T) {
	ag := startAgent(t)
	addr := rawAgent(t, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	sc := startSidecar(t, ag.addr(), localDirective(fmt.Sprintf("\t\tevents_fanout on\n\t\tupstream http://%s\n\t\tregistration off\n\t\tapi_key %s read\n", addr, testReadKey)))
	get := func(wait time.Duration) error {
		c := rawConn(t, sc)
		defer c.Close()
		fmt.Fprintf(c, "GET /a2a/events HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\n\r\n", hostOf(sc), testReadKey)
		_ = c.SetReadDeadline(time.Now().Add(wait))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			t.Logf("answer %d", resp.StatusCode)
		}
		return err
	}
	if err := get(15 * time.Second); err != nil {
		t.Errorf("first client: no answer within 15 s (fanoutConnectTimeout is 10 s): %v", err)
	}
	if err := get(5 * time.Second); err != nil {
		t.Errorf("a later client: no answer within 5 s either (the dial is stuck): %v", err)
	}
}

// HTTP/2 cleartext (prior knowledge) clients get the proxied, filtered stream.
func TestEventsFanoutH2C(t *testing.T) {
	ag := startAgent(t)
	events, _ := sseAgent(ag)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	dir := jwksDirective(jw.url(), fanoutDirective(ag))
	sc, err := runCaddyfile(t, "\tservers {\n\t\tprotocols h1 h2c\n\t}\n", func(port int) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy %s\n}\n", port, dir, ag.addr())
	})
	if err != nil {
		t.Fatal(err)
	}
	_, tokB := twoWorkspaces(t, sc, key, "SECRET-A", "req-B")
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	cl := &http.Client{Transport: &http.Transport{Protocols: &p}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", sc.base+"/a2a/events", nil)
	req.Header.Set("X-API-Key", testReadKey)
	req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+tokB)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	t.Logf("proto %s status %d", resp.Proto, resp.StatusCode)
	rd := bufio.NewReader(resp.Body)
	readEvent(t, rd)
	events <- effect("SECRET-A")
	events <- effect("req-B")
	if e := readEvent(t, rd); !strings.Contains(e, "req-B") {
		t.Fatalf("h2c filtered client got %q", e)
	}
}
