package test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func hostOf(sc *sidecar) string { return strings.TrimPrefix(sc.base, "http://") }

// rawConn dials the sidecar.
func rawConn(t *testing.T, sc *sidecar) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", hostOf(sc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// drainUntilClosed reads the connection until EOF/reset; fails if still open after d.
func drainUntilClosed(t *testing.T, c net.Conn, rd io.Reader, d time.Duration) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	var b strings.Builder
	_, err := io.Copy(&b, rd)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection still open after %v; got %q", d, b.String())
	}
	return b.String()
}

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
	eventually(t, "every upstream stream closed", func() bool { return up.opened.Load() == up.closed.Load() })
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

// Many concurrent join/leave cycles (some clients vanish before the head,
// some after, filtered and unfiltered) while events flow: no leaked upstream
// stream, no leaked goroutines, the stream still works afterwards.
func TestEventsFanoutChurn(t *testing.T) {
	ag := startAgent(t)
	up := newCountingSSEAgent(ag)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), fanoutDirective(ag)))
	tok := key.mint(t, baseClaims())
	// warm up the token cache and JWKS
	wantDetail(t, do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer junk"), 403, "")
	base := settledGoroutines(t)

	stop := make(chan struct{})
	var pump sync.WaitGroup
	pump.Add(1)
	go func() {
		defer pump.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case up.events <- effect(fmt.Sprintf("r%d", i)):
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	for g := 0; g < 24; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rnd := rand.New(rand.NewSource(int64(g)))
			for i := 0; i < 30; i++ {
				c, err := net.Dial("tcp", hostOf(sc))
				if err != nil {
					t.Error(err)
					return
				}
				hdr := ""
				if rnd.Intn(2) == 0 {
					hdr = "X-Supervaize-Workspace-Authorization: Bearer " + tok + "\r\n"
				}
				fmt.Fprintf(c, "GET /a2a/events HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\n%s\r\n", hostOf(sc), testReadKey, hdr)
				switch rnd.Intn(4) {
				case 0: // gone at once
				case 1: // gone after a random pause (pacing the client, not a wait before an assertion)
					time.Sleep(time.Duration(rnd.Intn(3000)) * time.Microsecond)
				case 2:
					_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
					rd := bufio.NewReader(c)
					if resp, err := http.ReadResponse(rd, nil); err == nil {
						_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
						io.CopyN(io.Discard, resp.Body, int64(rnd.Intn(2000)))
					}
				case 3: // half-close
					c.(*net.TCPConn).CloseWrite()
					time.Sleep(time.Millisecond) // pacing: the close comes after the half-close
				}
				c.Close()
			}
		}(g)
	}
	wg.Wait()
	close(stop)
	pump.Wait()
	eventually(t, "every upstream stream closed", func() bool { return up.opened.Load() == up.closed.Load() })
	t.Logf("upstream streams opened: %d", up.opened.Load())
	deadline := time.Now().Add(15 * time.Second)
	for runtime.NumGoroutine() > base+5 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base+5 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("goroutines: %d, baseline %d\n%s", n, base, buf)
	}
	// still works
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey)
	defer resp.Body.Close()
	if e := readEvent(t, rd); !strings.Contains(e, "supervaizer.connected") {
		t.Fatalf("first event after churn %q", e)
	}
}

// A config reload closes every fan-out client of the old config (its keys
// may have been revoked) and the upstream stream.
func TestEventsFanoutReload(t *testing.T) {
	ag := startAgent(t)
	up := newCountingSSEAgent(ag)
	sc := startSidecar(t, ag.addr(), localDirective(fanoutDirective(ag)+"\t\tapi_key "+testReadKey+" read\n"))
	c := rawConn(t, sc)
	fmt.Fprintf(c, "GET /a2a/events HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\n\r\n", hostOf(sc), testReadKey)
	rd := bufio.NewReader(c)
	resp0, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("resp %d %v", resp0.StatusCode, resp0.Header)
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 4096)
	n, err := rd.Read(buf)
	t.Logf("first read: %q %v (opened %d)", buf[:n], err, up.opened.Load())
	_ = c.SetReadDeadline(time.Time{})
	// Reload: the read key is revoked.
	start := time.Now()
	startSidecar(t, ag.addr(), localDirective(fanoutDirective(ag)))
	t.Logf("reload took %v", time.Since(start))
	up.events <- effect("after-reload")
	got := drainUntilClosed(t, c, rd, 10*time.Second)
	if strings.Contains(got, "after-reload") {
		t.Fatalf("a client of the old config (revoked key) still got events: %q", got)
	}
	eventually(t, "upstream closed", func() bool { return up.opened.Load() == up.closed.Load() })
}

// chunkAgent serves /a2a like the default agent and /a2a/events as an SSE
// stream whose bytes are the chunks sent on the returned channel (one
// Write+Flush each).
func chunkAgent(ag *agent, first string) chan string {
	ch := make(chan string, 256)
	ag.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path != "/a2a/events" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":7,"result":{"status":"ok"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, first)
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case c := <-ch:
				fmt.Fprint(w, c)
				w.(http.Flusher).Flush()
				time.Sleep(2 * time.Millisecond) // separate TCP segments
			}
		}
	}
	return ch
}

// A workspace-B client never receives bytes of workspace A's effect, however
// the agent frames it (CR, CRLF split across reads, BOM, comments, data
// lines before the event line, duplicate keys, oversized events...).
func TestEventsFanoutFramingLeak(t *testing.T) {
	for _, first := range []string{
		"event: supervaizer.connected\ndata: {\"status\": \"connected\"}\n\n",
		"\ufeffevent: supervaizer.connected\ndata: {\"status\": \"connected\"}\n\n",
		"",
	} {
		t.Run(fmt.Sprintf("first=%q", first[:min(len(first), 8)]), func(t *testing.T) {
			ag := startAgent(t)
			chunks := chunkAgent(ag, first)
			key := newSigner(t, "k1")
			jw := startJWKS(t, key.jwk())
			sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), fanoutDirective(ag)))
			_, tokB := twoWorkspaces(t, sc, key, "SECRET-A", "req-B")
			// An unfiltered client opens the stream first (so later joiners join mid-stream).
			cAll := rawConn(t, sc)
			fmt.Fprintf(cAll, "GET /a2a/events HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\n\r\n", hostOf(sc), testReadKey)
			rdAll := bufio.NewReader(cAll)
			if _, err := http.ReadResponse(rdAll, nil); err != nil {
				t.Fatal(err)
			}
			go io.Copy(io.Discard, rdAll)
			effA := `{"request_id": "SECRET-A", "effects": []}`
			effB := `{"request_id": "req-B", "effects": []}`
			// Pre-join noise: half an event, BOM mid-stream.
			chunks <- "\ufeffevent: supervaizer.heartbeat\ndata: x\n\n"
			chunks <- "data: partial"
			// Sequencing, not a wait before an assertion: B joins once the
			// noise is (very likely) in the stream, so it joins mid-stream;
			// the assertions below hold either way.
			time.Sleep(100 * time.Millisecond)
			cB := rawConn(t, sc)
			fmt.Fprintf(cB, "GET /a2a/events HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\nX-Supervaize-Workspace-Authorization: Bearer %s\r\n\r\n", hostOf(sc), testReadKey, tokB)
			rdB := bufio.NewReader(cB)
			if _, err := http.ReadResponse(rdB, nil); err != nil {
				t.Fatal(err)
			}
			got := &notifyBuffer{}
			done := make(chan struct{})
			go func() { io.Copy(got, rdB); close(done) }()
			for _, seq := range [][]string{
				{" more\n\n"}, // completes the partial event started before the join
				{"event: supervaizer.effect\rdata: " + effA + "\r\r"},
				{"event: supervaizer.effect\r", "\ndata: " + effA + "\r", "\n\r", "\n"},
				{"event: supervaizer.effect\ndata: " + effA + "\n\r", "\n"},
				{"data: " + effA + "\nevent: supervaizer.effect\n\n"},
				{"event: supervaizer.effect\ndata: {\"request_id\": \"req-B\", \"request_id\": \"SECRET-A\"}\n\n"},
				{"event: supervaizer.effect\ndata: {\"request_id\": \"SECRET-A\", \"request_id\": \"req-B\"}\n\n"},
				{"event:supervaizer.effect\ndata:" + effA + "\n\n"},
				{"event: supervaizer.effect\ndata: {\"request_id\": \"SECRET\\u002dA\"}\n\n"},
				{"\ufeffevent: supervaizer.effect\ndata: " + effA + "\n\n"},
				{"event: supervaizer.effect\ndata: {\"request_id\": \"req-B\", \"x\": \"" + strings.Repeat("y", 1<<20) + "\"}\ndata: " + effA + "\n\n"},
				{"event: supervaizer.effect\ndata: {\"request_id\": \"req-B\", \"pad\": \"" + strings.Repeat("z", 1<<20+10) + "\"}\n\nevent: supervaizer.effect\ndata: " + effA + "\n\n"},
				{"event: supervaizer.effect\n", "data: " + effB[:10], effB[10:] + "\n", "\n"},
				{"event: supervaizer.effect\ndata: " + effB + "\n\n"},
				{"event: supervaizer.heartbeat\ndata: {\"status\": \"ok\"}\n\n"},
			} {
				for _, c := range seq {
					chunks <- c
				}
			}
			// The closing heartbeat reaches every client after all the events
			// before it: once B has it, B has had its chance at each of them.
			got.waitFor(`{"status": "ok"}`, 20*time.Second)
			cB.Close()
			<-done
			s := got.String()
			if strings.Contains(s, "SECRET") {
				t.Errorf("workspace B received A's effect bytes: %q", s[:min(len(s), 2000)])
			}
			if strings.Count(s, "req-B") < 2 {
				t.Errorf("workspace B missed its own effects: %q", s[:min(len(s), 600)])
			}
		})
	}
}

// An effect larger than 1 MiB still reaches an unfiltered client (Studio), as
// with a proxied stream.
func TestEventsFanoutOversizedUnfiltered(t *testing.T) {
	forEachEventsMode(t, func(t *testing.T, mode func(*agent) string) {
		ag := startAgent(t)
		events, _ := sseAgent(ag)
		sc := startSidecar(t, ag.addr(), localDirective(mode(ag)+"\t\tapi_key "+testReadKey+" read\n"))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey)
		defer resp.Body.Close()
		readEvent(t, rd)
		big := fmt.Sprintf("event: supervaizer.effect\ndata: {\"request_id\": \"big\", \"effects\": [%q]}\n\n", strings.Repeat("e", 1<<20+100<<10))
		events <- big
		events <- effect("small")
		e := readEvent(t, rd)
		if !strings.Contains(e, `"request_id": "big"`) {
			t.Fatalf("unfiltered client lost the %d-byte effect; next event: %.100q", len(big), e)
		}
	})
}

// A filtered stream ends when its token expires (exp + leeway): it does not
// go on receiving its workspace's effects with a token new streams refuse.
func TestEventsFanoutTokenExpiry(t *testing.T) {
	forEachEventsMode(t, func(t *testing.T, mode func(*agent) string) {
		ag := startAgent(t)
		events, _ := sseAgent(ag)
		key := newSigner(t, "k1")
		jw := startJWKS(t, key.jwk())
		dir := strings.Replace(jwksDirective(jw.url(), mode(ag)), "required on\n", "required on\n\t\t\tleeway 0s\n", 1)
		sc := startSidecar(t, ag.addr(), dir)
		long := key.mint(t, baseClaims())
		body := actionBody(t, func(r map[string]any) { r["request_id"] = "req-A"; r["action"] = "job.sync" })
		if a := decodeRPC(t, sc.rpc(t, body, long)); a.Error != nil {
			t.Fatalf("call refused: %+v", a.Error)
		}
		short := key.mintWith(t, func(c jwt.MapClaims) { c["exp"] = time.Now().Unix() + 2 })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+short)
		defer resp.Body.Close()
		readEvent(t, rd)
		// The stream ends by itself once the token has expired.
		rest := make(chan string, 1)
		go func() { b, _ := io.ReadAll(rd); rest <- string(b) }()
		var got string
		select {
		case got = <-rest:
		case <-time.After(15 * time.Second):
			t.Fatal("the filtered stream outlived its token")
		}
		wantDetail(t, do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+short), 403, "")
		events <- effect("req-A")
		if strings.Contains(got, "req-A") {
			t.Fatalf("the expired stream carried an effect: %.80q", got)
		}
	})
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

// A client that never reads (tiny receive window) is dropped; a reading client
// is not delayed by it.
func TestEventsFanoutStalledClient(t *testing.T) {
	ag := startAgent(t)
	events, _ := sseAgent(ag)
	sc := startSidecar(t, ag.addr(), localDirective(fanoutDirective(ag)+"\t\tapi_key "+testReadKey+" read\n"))
	d := net.Dialer{Control: nil}
	stalled, err := d.Dial("tcp", hostOf(sc))
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	stalled.(*net.TCPConn).SetReadBuffer(1024)
	fmt.Fprintf(stalled, "GET /a2a/events HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\n\r\n", hostOf(sc), testReadKey)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey)
	defer resp.Body.Close()
	readEvent(t, rd)
	pad := strings.Repeat("p", 200<<10)
	for i := 0; i < 100; i++ {
		events <- fmt.Sprintf("event: supervaizer.effect\ndata: {\"request_id\": \"r%d\", \"pad\": %q}\n\n", i, pad)
		e := readEvent(t, rd)
		if !strings.Contains(e, fmt.Sprintf("\"r%d\"", i)) {
			t.Fatalf("event %d: %.60q", i, e)
		}
	}
	// The stalled client must have been dropped: one writer goroutine left.
	eventually(t, "the stalled client to be dropped", func() bool {
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		return strings.Count(string(buf), "(*fanoutClient).write(") == 1
	})
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

// The client that triggered the upstream stream leaves before the agent
// answers: the stream nobody joined is closed; so is one whose agent ends at once.
func TestEventsFanoutNobodyJoined(t *testing.T) {
	ag := startAgent(t)
	up := newCountingSSEAgent(ag)
	inner := ag.respond
	var asked, answered atomic.Int64 // upstream event-stream requests the agent got, and ended
	ag.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path == "/a2a/events" {
			asked.Add(1)
			defer answered.Add(1)
			time.Sleep(1500 * time.Millisecond) // a slow agent: every client leaves before it answers
		}
		inner(w, r, body)
	}
	sc := startSidecar(t, ag.addr(), localDirective(fanoutDirective(ag)+"\t\tapi_key "+testReadKey+" read\n"))
	for i := 0; i < 5; i++ {
		c := rawConn(t, sc)
		fmt.Fprintf(c, "GET /a2a/events HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\n\r\n", hostOf(sc), testReadKey)
		time.Sleep(100 * time.Millisecond) // pacing: the client leaves while the agent is still slow
		c.Close()
	}
	// Every upstream request the agent got has been answered and its stream
	// ended (no wait of a fixed time): then exactly one was made.
	// The unjoined stream closed about 11 s after the first client came, as
	// measured with -race: a deadline of 30 s, not eventually's 15.
	start := time.Now()
	for deadline := start.Add(30 * time.Second); ; {
		a := asked.Load()
		if a > 0 && answered.Load() == a && up.opened.Load() == up.closed.Load() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the unjoined stream did not close: %d asked, %d answered, %d opened, %d closed",
				a, answered.Load(), up.opened.Load(), up.closed.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("closed after %v", time.Since(start))
	if a, o := asked.Load(), up.opened.Load(); a != 1 || o != 1 {
		t.Errorf("upstream requests %d, streams opened %d: want 1", a, o)
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
		return fmt.Sprintf("http://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy %s {\n\t\tflush_interval -1\n\t}\n}\n", port, dir, ag.addr())
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

// settledGoroutines waits (at most 5 s) until the goroutine count reads the
// same three times in a row, 20 ms apart, and returns it: the baseline of a
// leak check, taken once the work before it has wound down rather than after
// a fixed sleep.
func settledGoroutines(t *testing.T) int {
	t.Helper()
	n, same := runtime.NumGoroutine(), 0
	for deadline := time.Now().Add(5 * time.Second); same < 2 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if m := runtime.NumGoroutine(); m == n {
			same++
		} else {
			n, same = m, 0
		}
	}
	return n
}

// notifyBuffer collects a stream's bytes for a test while another goroutine
// reads them, and lets the test wait for a given text.
type notifyBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *notifyBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *notifyBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor returns once the bytes contain text, or after timeout (the test's
// assertions then say what is missing).
func (b *notifyBuffer) waitFor(text string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for !strings.Contains(b.String(), text) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}
