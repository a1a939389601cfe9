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
)

// TestEventsFanout: with events_fanout on, every client shares one upstream
// stream; each joiner gets the agent's connected event first; a workspace
// token still filters; the upstream stream closes with its last client;
// the agent ending its stream ends every client's; the agent's refusal
// reaches the client; a denied client opens nothing upstream.
func TestEventsFanout(t *testing.T) {
	ag := startAgent(t)
	up := newCountingSSEAgent(ag)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), fanoutDirective(ag)))
	tokA, _ := twoWorkspaces(t, sc, key, "req-A", "req-B")

	t.Run("denied clients open nothing upstream", func(t *testing.T) {
		wantDetail(t, do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", "wrong"), 401, "")
		wantDetail(t, do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer junk"), 403, "")
		if n := up.opened.Load(); n != 0 {
			t.Fatalf("the agent opened %d streams for denied clients", n)
		}
	})

	t.Run("one upstream stream, filtered and unfiltered clients", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		respAll, rdAll := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey)
		defer respAll.Body.Close()
		if ct := respAll.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("Content-Type %q", ct)
		}
		if cc := respAll.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Fatalf("the agent's Cache-Control was not relayed: %q", cc)
		}
		respA, rdA := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+tokA)
		defer respA.Body.Close()
		for _, rd := range []*bufio.Reader{rdAll, rdA} {
			if e := readEvent(t, rd); !strings.Contains(e, "supervaizer.connected") {
				t.Fatalf("first event %q", e)
			}
		}
		if n := up.opened.Load(); n != 1 {
			t.Fatalf("the agent opened %d streams for two clients, want 1", n)
		}
		for _, id := range []string{"req-B", "req-A"} {
			up.events <- effect(id)
		}
		for _, want := range []string{"req-B", "req-A"} {
			if e := readEvent(t, rdAll); !strings.Contains(e, `"request_id": "`+want+`"`) {
				t.Fatalf("unfiltered stream: got %q, want %s", e, want)
			}
		}
		if e := readEvent(t, rdA); !strings.Contains(e, `"request_id": "req-A"`) {
			t.Fatalf("workspace A's stream: got %q, want req-A only", e)
		}

		// A third client joining later gets the connected event first, then live events.
		respL, rdL := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey)
		defer respL.Body.Close()
		if e := readEvent(t, rdL); !strings.Contains(e, "supervaizer.connected") {
			t.Fatalf("late joiner's first event %q", e)
		}
		up.events <- effect("req-late")
		if e := readEvent(t, rdL); !strings.Contains(e, "req-late") {
			t.Fatalf("late joiner got %q", e)
		}
		if n := up.opened.Load(); n != 1 {
			t.Fatalf("the agent opened %d streams, want 1", n)
		}

		cancel()
		respAll.Body.Close()
		respA.Body.Close()
		respL.Body.Close()
		eventually(t, 15*time.Second, "the upstream stream to close with its last client", func() bool { return up.closed.Load() == 1 })
	})

	t.Run("the agent ends its stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey)
		defer resp.Body.Close()
		readEvent(t, rd)
		close(up.events)
		done := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, rd); done <- err }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the client's stream did not end with the agent's")
		}
		up.events = make(chan string, 16)
	})

	t.Run("the agent refuses the stream", func(t *testing.T) {
		up.status.Store(http.StatusUnauthorized)
		defer up.status.Store(0)
		resp := do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", testReadKey)
		if resp.Status != 401 || !strings.Contains(string(resp.Body), "agent says no") {
			t.Fatalf("got %d %s, want the agent's 401", resp.Status, resp.Body)
		}
	})
}

// TestEventsFanoutClientSendsData: a client that sends bytes after its
// request is not an SSE client: it is disconnected, and the upstream stream
// closes with it.
func TestEventsFanoutClientSendsData(t *testing.T) {
	ag := startAgent(t)
	up := newCountingSSEAgent(ag)
	sc := startSidecar(t, ag.addr(), localDirective(fanoutDirective(ag)+"\t\tapi_key "+testReadKey+" read\n"))
	conn, err := net.Dial("tcp", strings.TrimPrefix(sc.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	host := strings.TrimPrefix(sc.base, "http://")
	fmt.Fprintf(conn, "GET /a2a/events HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\n\r\n", host, testReadKey)
	rd := bufio.NewReader(conn)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("response %v %v", resp, err)
	}
	readEvent(t, rd)
	fmt.Fprintf(conn, "GET /a2a/events HTTP/1.1\r\nHost: %s\r\n\r\n", host) // a pipelined request
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	// EOF, or a reset (the pipelined bytes were unread when it closed).
	if _, err := io.Copy(io.Discard, rd); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection not closed: %v", err)
	}
	eventually(t, 15*time.Second, "the upstream stream to close", func() bool { return up.closed.Load() == 1 })
}

// TestEventsFanoutNeedsUpstream: events_fanout on without upstream is a
// start-up error naming the missing setting.
func TestEventsFanoutNeedsUpstream(t *testing.T) {
	ag := startAgent(t)
	_, err := tryStartSidecar(t, ag.addr(), localDirective("\t\tevents_fanout on\n"))
	if err == nil || !strings.Contains(err.Error(), "events_fanout needs upstream") {
		t.Fatalf("got %v, want a start-up error naming upstream", err)
	}
}

// TestEventsFanoutAgentDown: an agent that cannot be reached is 502 for the
// client (nothing else is opened or kept).
func TestEventsFanoutAgentDown(t *testing.T) {
	ag := startAgent(t)
	down := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	sc := startSidecar(t, ag.addr(), localDirective(fmt.Sprintf("\t\tevents_fanout on\n\t\tupstream http://%s\n\t\tregistration off\n\t\tapi_key %s read\n", down, testReadKey)))
	wantDetail(t, do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", testReadKey), 502, "Bad Gateway")
	if n := ag.count.Load(); n != 0 {
		t.Fatalf("the agent behind reverse_proxy was called %d times", n)
	}
}

// TestEventsFanoutOtherSpellings: with events_fanout on, /a2a/events with a
// query string or a trailing slash is proxied to the agent as it is (the
// shared stream is the agent's plain /a2a/events).
func TestEventsFanoutOtherSpellings(t *testing.T) {
	ag := startAgent(t)
	up := newCountingSSEAgent(ag)
	sc := startSidecar(t, ag.addr(), localDirective(fanoutDirective(ag)+"\t\tapi_key "+testReadKey+" read\n"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, rd := openStream(t, ctx, sc.base+"/a2a/events?since=5", "X-API-Key", testReadKey)
	defer resp.Body.Close()
	readEvent(t, rd)
	var paths []string
	for _, r := range ag.received() {
		paths = append(paths, r.Path+"?"+r.Query)
	}
	if len(paths) != 1 || paths[0] != "/a2a/events?since=5" {
		t.Fatalf("the agent saw %v, want the client's own /a2a/events?since=5", paths)
	}
	resp2, rd2 := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey)
	defer resp2.Body.Close()
	readEvent(t, rd2)
	if n := up.opened.Load(); n != 2 {
		t.Fatalf("the agent opened %d streams, want 2 (one proxied, one shared)", n)
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
	eventually(t, 15*time.Second, "every upstream stream closed", func() bool { return up.opened.Load() == up.closed.Load() })
	t.Logf("upstream streams opened: %d", up.opened.Load())
	eventually(t, 15*time.Second, "the goroutines back within 5 of the baseline", func() bool {
		return runtime.NumGoroutine() <= base+5
	}, func() string {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		return fmt.Sprintf("goroutines: %d, baseline %d\n%s", runtime.NumGoroutine(), base, buf)
	})
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
	eventually(t, 15*time.Second, "upstream closed", func() bool { return up.opened.Load() == up.closed.Load() })
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
	eventually(t, 15*time.Second, "the stalled client to be dropped", func() bool {
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		return strings.Count(string(buf), "(*fanoutClient).write(") == 1
	})
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
		if i == 0 {
			// The first client leaves once its request has reached the agent.
			eventually(t, 15*time.Second, "the agent to be asked for the stream", func() bool { return asked.Load() > 0 })
		} else {
			time.Sleep(100 * time.Millisecond) // pacing: the later clients leave while the agent is still slow
		}
		c.Close()
	}
	// Every upstream request the agent got has been answered and its stream
	// ended (no wait of a fixed time): then exactly one was made.
	// The unjoined stream closed about 11 s after the first client came, as
	// measured with -race: a deadline of 30 s, not the usual 15.
	start := time.Now()
	eventually(t, 30*time.Second, "the unjoined stream to close", func() bool {
		a := asked.Load()
		return a > 0 && answered.Load() == a && up.opened.Load() == up.closed.Load()
	}, func() string {
		return fmt.Sprintf("%d asked, %d answered, %d opened, %d closed",
			asked.Load(), answered.Load(), up.opened.Load(), up.closed.Load())
	})
	t.Logf("closed after %v", time.Since(start))
	if a, o := asked.Load(), up.opened.Load(); a != 1 || o != 1 {
		t.Errorf("upstream requests %d, streams opened %d: want 1", a, o)
	}
}
