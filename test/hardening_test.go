package test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// rawExchange writes raw bytes to the sidecar and returns the status line
// of the (first final) answer.
func rawExchange(t *testing.T, base, raw string, pause time.Duration, rest string) string {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := conn.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	if pause > 0 {
		time.Sleep(pause) // pacing the sender: the rest of the request comes later
		conn.Write([]byte(rest))
	}
	rd := bufio.NewReader(conn)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return "EOF"
		}
		if !strings.HasPrefix(line, "HTTP/1.") || strings.HasPrefix(line, "HTTP/1.1 100") {
			continue // interim answers and their blank lines
		}
		return strings.TrimSpace(line)
	}
}

func localDirective(extra string) string {
	return fmt.Sprintf("		api_key %s\n		local_mode on\n		agent %s %s\n%s", testKey, testAgent, testAgentID, extra)
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

// TestHTTP2: an h2c client is gated exactly like HTTP/1.1.
func TestHTTP2(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc, err := runCaddyfile(t, "\tservers {\n\t\tprotocols h1 h2c\n\t}\n", func(port int) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\t}\n\treverse_proxy %s\n}\n", port, jwksDirective(jw.url(), ""), ag.addr())
	})
	if err != nil {
		t.Fatal(err)
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &protos, TLSClientConfig: &tls.Config{}}, Timeout: 10 * time.Second}
	post := func(token string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", sc.base+"/a2a", strings.NewReader(string(freshJobStart(t))))
		req.Header.Set("X-API-Key", testKey)
		if token != "" {
			req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+token)
		}
		req.Header.Set("X-Supervaize-Verified-Mode", "token")
		resp, err := h2.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := post("")
	if resp.ProtoMajor != 2 || !strings.Contains(body, "workspace_authorization_missing") {
		t.Fatalf("h2c denial: proto %d, %s", resp.ProtoMajor, body)
	}
	nothingReached(t, ag)
	resp, body = post(key.mint(t, baseClaims()))
	if resp.ProtoMajor != 2 || !strings.Contains(body, `"result"`) {
		t.Fatalf("h2c allow: proto %d, %s", resp.ProtoMajor, body)
	}
	if got := ag.last(t).Header.Values("X-Supervaize-Verified-Mode"); len(got) != 1 || got[0] != "token" {
		t.Fatalf("verified mode over h2: %v", got)
	}
}

// TestHugeToken: a 1 MB token is refused without reaching the agent.
func TestHugeToken(t *testing.T) {
	ag, _, _, sc := startTokenGate(t, "")
	huge := strings.Repeat("a", 1<<20)
	req, _ := http.NewRequest("POST", sc.base+"/a2a", strings.NewReader(string(jobStartBody(t))))
	req.Header.Set("X-API-Key", testKey)
	req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+huge+"."+huge+"."+huge)
	resp, err := client.Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 && !strings.Contains(string(b), "workspace_authorization_malformed") {
			t.Fatalf("huge token: %d %s", resp.StatusCode, b)
		}
	}
	// A token just over MaxTokenBytes but within header limits: malformed.
	big := strings.Repeat("a", 6<<10)
	wantRPCError(t, sc.rpc(t, jobStartBody(t), big+"."+big+"."+big), -32030, "workspace_authorization_malformed")
	nothingReached(t, ag)
}

// TestKeyRemovedByRotation: after a refresh removes a key, even a token that
// was verified (and cached) with it is refused.
func TestKeyRemovedByRotation(t *testing.T) {
	ag := startAgent(t)
	k1, k2 := newSigner(t, "k1"), newSigner(t, "k2")
	jw := startJWKS(t, k1.jwk(), k2.jwk())
	sc := startSidecar(t, ag.addr(), strings.Replace(jwksDirective(jw.url(), ""), "jwks_unknown_kid_interval 10ms", "jwks_unknown_kid_interval 10ms\n			jwks_refresh 1s", 1))
	tok := k1.mint(t, baseClaims())
	if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), tok)); a.Error != nil {
		t.Fatal("k1 refused before rotation")
	}
	jw.setKeys(k2.jwk())
	eventually(t, "the cached k1 token to be refused", func() bool {
		a := decodeRPC(t, sc.rpc(t, freshJobStart(t), tok))
		return a.Error != nil && strings.Contains(string(a.Error.Data), "workspace_authorization_unknown_kid")
	})
	if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), k2.mint(t, baseClaims()))); a.Error != nil {
		t.Fatal("k2 refused after rotation")
	}
}

// TestJWKSGarbage: an HTML error page or garbage from the JWKS endpoint
// after a good fetch does not replace the keys.
func TestJWKSGarbage(t *testing.T) {
	ag := startAgent(t)
	k1 := newSigner(t, "k1")
	jw := startJWKS(t, k1.jwk())
	sc := startSidecar(t, ag.addr(), strings.Replace(jwksDirective(jw.url(), ""), "jwks_unknown_kid_interval 10ms", "jwks_unknown_kid_interval 10ms\n			jwks_refresh 1s", 1))
	before := jw.fetches.Load()
	for _, doc := range [][]byte{[]byte("<html>502 Bad Gateway</html>"), []byte(`{}`), []byte(`{"keys":[]}`[:5])} {
		jw.setDoc(200, doc)
		eventually(t, "a refresh", func() bool { return jw.fetches.Load() > before+1 })
		before = jw.fetches.Load()
		if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), k1.mint(t, baseClaims()))); a.Error != nil {
			t.Fatalf("good key lost after JWKS answered %q: %s", doc, a.Error.Message)
		}
	}
}

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

// TestReloadUnderLoad: while the config is reloaded repeatedly, every
// answered request is answered correctly — valid calls pass, calls with a bad
// key are refused — and the agent received exactly the allowed calls: no
// request is authorized under a half-loaded config. (A few connections may
// be closed by Caddy's server switch itself; they carry no answer.)
func TestReloadUnderLoad(t *testing.T) {
	ag, key, jw, sc := startTokenGate(t, "")
	port := strings.TrimPrefix(sc.base, "http://127.0.0.1:")
	cf := caddyfileText("", sc.logPath, fmt.Sprintf("http://127.0.0.1:%s {\n\tsupervaizer_auth {\n%s\t}\n\treverse_proxy %s\n}\n",
		port, jwksDirective(jw.url(), ""), ag.addr()))
	cfgJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
	if err != nil {
		t.Fatal(err)
	}
	tok := key.mint(t, baseClaims())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ok, refused, bad, dropped atomic.Int64
	// New connections for every request: an idle keep-alive connection that
	// the old server closes while a request is being written is a race of
	// HTTP/1.1 keep-alive itself (clients retry; Studio retries with the same
	// idempotency_key), not something the gate can prevent.
	noKeepAlive := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil && i < 2000; i++ {
				k := testKey
				if i%3 == 0 {
					k = "wrong-key"
				}
				req, _ := http.NewRequest("POST", sc.base+"/a2a", strings.NewReader(string(actionFor(t, "job.sync"))))
				req.Header.Set("X-API-Key", k)
				req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+tok)
				resp, err := noKeepAlive.Do(req)
				if err != nil {
					// A connection Caddy's old server closed while switching
					// configs: nothing was authorized, the client sees an
					// error and retries (see the closing note of issue 8).
					dropped.Add(1)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case k == testKey && resp.StatusCode == 200 && strings.Contains(string(b), `"result"`):
					ok.Add(1)
				case k != testKey && resp.StatusCode == 401:
					refused.Add(1)
				default:
					bad.Add(1)
					t.Errorf("unexpected answer (key ok=%v): %d %s", k == testKey, resp.StatusCode, b)
				}
			}
		}(w)
	}
	for i := 0; i < 5; i++ {
		time.Sleep(50 * time.Millisecond) // pacing: reloads spread over the requests in flight
		if err := caddy.Load(cfgJSON, true); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	wg.Wait()
	t.Logf("ok %d refused %d dropped by the reload %d", ok.Load(), refused.Load(), dropped.Load())
	if bad.Load() != 0 || ok.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("ok %d refused %d bad %d", ok.Load(), refused.Load(), bad.Load())
	}
	if int64(ag.count.Load()) != ok.Load() {
		t.Fatalf("agent got %d calls, %d allowed", ag.count.Load(), ok.Load())
	}
}

// TestUnknownKIDStorm: 10,000 tokens with kids unknown to the JWKS fetch the
// JWKS a bounded number of times, and none reaches the agent.
func TestUnknownKIDStorm(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), strings.Replace(jwksDirective(jw.url(), ""), "jwks_unknown_kid_interval 10ms", "jwks_unknown_kid_interval 10s", 1))
	if r := do(t, "GET", sc.base+"/_sidecar/ready", nil); r.Status != 200 {
		t.Fatalf("not ready with the JWKS up: %s", r.Body)
	}
	before := jw.fetches.Load()
	body := actionFor(t, "job.sync")
	start := time.Now()
	var wg sync.WaitGroup
	var denied atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 1250; i++ {
				tok := rawToken(key, fmt.Sprintf(`{"alg":"EdDSA","kid":"../../etc/passwd?%d-%d"}`, w, i), mustJSON(baseClaims()))
				req, _ := http.NewRequest("POST", sc.base+"/a2a", strings.NewReader(string(body)))
				req.Header.Set("X-API-Key", testKey)
				req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+tok)
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if strings.Contains(string(b), "workspace_authorization_unknown_kid") {
					denied.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	if denied.Load() != 10000 {
		t.Fatalf("%d of 10000 refused with unknown_kid", denied.Load())
	}
	// jwks_unknown_kid_interval 10s: one fetch per 10 s of storm at most
	// (plus the first), however long a loaded machine takes to send it.
	if n, limit := jw.fetches.Load()-before, 2+int64(time.Since(start)/(10*time.Second)); n > limit {
		t.Fatalf("JWKS fetched %d times for 10,000 unknown kids in %v (limit %d)", n, time.Since(start), limit)
	}
	nothingReached(t, ag)
}

// TestJWKSDownAtStart: fail closed and not ready until the JWKS answers.
func TestJWKSDownAtStart(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	jw.setDoc(503, []byte("down"))
	sc := startSidecar(t, ag.addr(), strings.Replace(jwksDirective(jw.url(), ""), "jwks_unknown_kid_interval 10ms", "jwks_unknown_kid_interval 10ms\n			jwks_refresh 1s", 1))
	if r := do(t, "GET", sc.base+"/_sidecar/ready", nil); r.Status != 503 || !strings.Contains(string(r.Body), "jwks") {
		t.Fatalf("ready with the JWKS down: %d %s", r.Status, r.Body)
	}
	wantRPCError(t, sc.rpc(t, freshJobStart(t), key.mint(t, baseClaims())), -32030, "workspace_authorization_jwks_unavailable")
	nothingReached(t, ag)
	jw.setKeys(key.jwk())
	waitReady(t, sc)
	if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), key.mint(t, baseClaims()))); a.Error != nil {
		t.Fatalf("refused once the JWKS is up: %s", a.Error.Message)
	}
}

// TestJWKSSlow: a JWKS endpoint that never answers bounds request latency
// (jwks_timeout) and leaves no goroutines behind.
func TestJWKSSlow(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), strings.Replace(jwksDirective(jw.url(), ""), "jwks_unknown_kid_interval 10ms",
		"jwks_unknown_kid_interval 10ms\n			jwks_timeout 300ms", 1))
	jw.hang.Store(true)
	client.CloseIdleConnections()
	base := runtime.NumGoroutine()
	var wg sync.WaitGroup
	var answered atomic.Int64
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			tok := newSigner(t, fmt.Sprintf("unknown-%d", i)).mint(t, baseClaims())
			a := decodeRPC(t, sc.rpc(t, actionFor(t, "job.sync"), tok))
			if a.Error != nil && a.Error.Code == -32030 {
				answered.Add(1)
			}
		}(i)
	}
	wg.Wait()
	if answered.Load() != 20 {
		t.Fatalf("%d of 20 unknown-kid calls answered with -32030", answered.Load())
	}
	nothingReached(t, ag)
	// The good, already loaded key keeps working while the JWKS hangs.
	if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), key.mint(t, baseClaims()))); a.Error != nil {
		t.Fatalf("loaded key refused while the JWKS hangs: %s", a.Error.Message)
	}
	client.CloseIdleConnections()
	eventually(t, "goroutines back to baseline", func() bool { return runtime.NumGoroutine() <= base+10 })
}
