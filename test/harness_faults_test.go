package test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// Fault modes of a faultAgent's next answers.
const (
	answerOK      int32 = iota // the fixture's job.start result
	answerReset                // read the whole request, then reset the connection
	answerAbort                // 200 and part of the body, then close
	answerHuge                 // a 200 whose result is larger than 1 MiB
	answerBlocked              // wait until unblock, then answer OK
	answerSlow                 // answer OK after up to 50 ms
	answerGzip                 // OK, gzip-compressed when the request accepts gzip
	answerEncoded              // OK with Content-Encoding: br, whatever was asked
	answerCutJSON              // 200 whose body, well framed, is half the JSON answer
	answerRandom               // each call one of OK, slow, reset, abort (randomFault)
)

// randomFault picks the answer of one call in answerRandom mode.
func randomFault() int32 {
	switch n := rand.IntN(100); {
	case n < 40:
		return answerOK
	case n < 60:
		return answerSlow
	case n < 80:
		return answerReset
	}
	return answerAbort
}

// faultAgent is a real agent on loopback that counts, per idempotency_key,
// the job.start calls it executed (received whole), and answers according
// to its mode: the world the idempotency promises must survive.
type faultAgent struct {
	srv    *httptest.Server
	mode   atomic.Int32
	result json.RawMessage

	mu      sync.Mutex
	perKey  map[string]int
	started chan string // a key, each time a call was received whole
	unblock chan struct{}
}

func startFaultAgent(t *testing.T) *faultAgent {
	t.Helper()
	fa := &faultAgent{result: startResult(t), perKey: map[string]int{},
		started: make(chan string, 1024), unblock: make(chan struct{})}
	fa.srv = httptest.NewServer(http.HandlerFunc(fa.serve))
	t.Cleanup(func() {
		fa.release()
		fa.srv.CloseClientConnections()
		fa.srv.Close()
	})
	return fa
}

func (fa *faultAgent) addr() string { return strings.TrimPrefix(fa.srv.URL, "http://") }

// release lets every blocked and later blocked call answer.
func (fa *faultAgent) release() {
	fa.mu.Lock()
	defer fa.mu.Unlock()
	select {
	case <-fa.unblock:
	default:
		close(fa.unblock)
	}
}

// executions is how many times the agent executed the call with key.
func (fa *faultAgent) executions(key string) int {
	fa.mu.Lock()
	defer fa.mu.Unlock()
	return fa.perKey[key]
}

// waitStarted waits until a call with key has been received whole.
func (fa *faultAgent) waitStarted(t *testing.T, key string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case k := <-fa.started:
			if k == key {
				return
			}
		case <-deadline:
			t.Fatalf("the agent never received the call with key %s", key)
		}
	}
}

func (fa *faultAgent) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	key := gjson.GetBytes(body, "params.action_request.idempotency_key").String()
	fa.mu.Lock()
	fa.perKey[key]++
	fa.mu.Unlock()
	select {
	case fa.started <- key:
	default: // nobody is waiting for that many
	}
	id := gjson.GetBytes(body, "id").Raw
	if id == "" {
		id = "null"
	}
	answer := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, id, fa.result)
	mode := fa.mode.Load()
	if mode == answerRandom {
		mode = randomFault()
	}
	switch mode {
	case answerSlow:
		time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond) // the stimulus: a slow agent
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	case answerGzip:
		w.Header().Set("Content-Type", "application/json")
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			_, _ = io.WriteString(w, answer)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = io.WriteString(zw, answer)
		_ = zw.Close()
	case answerEncoded:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "br")
		_, _ = io.WriteString(w, "\x1b not really brotli")
	case answerCutJSON:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer[:len(answer)/2])
	case answerReset:
		resetConn(w)
	case answerAbort:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(answer)))
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, answer[:len(answer)/2])
		http.NewResponseController(w).Flush()
		closeConn(w)
	case answerHuge:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"status":"ok","blob":"%s"}}`, id, strings.Repeat("x", 1<<20+1))
	default:
		if fa.mode.Load() == answerBlocked {
			<-fa.unblock
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}
}

// resetConn takes the connection over and resets it (RST, no answer).
func resetConn(w http.ResponseWriter) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// closeConn takes the connection over and closes it.
func closeConn(w http.ResponseWriter) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = c.Close()
	}
}

// jobStartWithKey is the fixture's job.start with idempotency key k.
func jobStartWithKey(t *testing.T, k string) []byte {
	return actionBody(t, func(r map[string]any) { r["idempotency_key"] = k })
}

// wantRetryKept retries body (idempotency_key idemKey) with the agent
// healthy again: the key is still in flight, so the retry gets
// idempotency_in_progress and the agent has executed the call once.
func wantRetryKept(t *testing.T, fa *faultAgent, key *signer, sc *sidecar, body []byte, idemKey string) {
	t.Helper()
	fa.mode.Store(answerOK)
	wantInProgress(t, sc.rpc(t, body, key.mint(t, baseClaims())))
	if n := fa.executions(idemKey); n != 1 {
		t.Fatalf("agent executed the call %s %d times, want 1", idemKey, n)
	}
}

// wantInProgress asserts a retry answered idempotency_in_progress (-32031).
func wantInProgress(t *testing.T, r response) {
	t.Helper()
	wantRPCError(t, r, -32031, "idempotency_in_progress")
}

// rawPost posts body to url with headers and returns the status and body,
// or the transport error (an aborted answer is an error, not a failure of
// the test).
func rawPost(url string, body []byte, headers ...string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	cl := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// adminSidecar is a sidecar whose Caddy admin API listens on loopback, so a
// test can reload its config while requests are in flight.
type adminSidecar struct {
	*sidecar
	admin string // http://127.0.0.1:port
	cf    string // the Caddyfile it runs
}

// startAdminSidecar runs the usual site (supervaizer_auth with directive,
// then reverse_proxy to upstream) with the admin API on a free port.
func startAdminSidecar(t *testing.T, upstream, directive string) *adminSidecar {
	t.Helper()
	adminPort := freePort(t)
	port := freePort(t)
	logPath := t.TempDir() + "/caddy.log"
	cf := fmt.Sprintf("{\n\tadmin 127.0.0.1:%d\n\tpersist_config off\n\tauto_https off\n\tlog {\n\t\toutput file %s\n\t\tformat json\n\t\tlevel INFO\n\t}\n}\n"+
		"http://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy %s\n}\n", adminPort, logPath, port, directive, upstream)
	sc, err := loadCaddyfile(t, cf, port, logPath)
	if err != nil {
		t.Fatalf("loading config: %v", err)
	}
	return &adminSidecar{sidecar: sc, admin: fmt.Sprintf("http://127.0.0.1:%d", adminPort), cf: cf}
}

// reload posts the sidecar's Caddyfile to the admin API's /load, forcing a
// reload even though the config is unchanged (Cache-Control:
// must-revalidate), and fails the test unless Caddy accepted it.
func (s *adminSidecar) reload(t *testing.T) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.admin+"/load", strings.NewReader(s.cf))
	req.Header.Set("Content-Type", "text/caddyfile")
	req.Header.Set("Cache-Control", "must-revalidate")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reload: %d %s", resp.StatusCode, b)
	}
}

// countLines counts the log lines containing every one of parts.
func countLines(logs string, parts ...string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		for _, p := range parts {
			if !strings.Contains(sc.Text(), p) {
				continue next
			}
		}
		n++
	}
	return n
}

// faultGate starts a token-mode sidecar with idempotency {extra} in front of
// a fault agent; retries wait 1 s (wait_timeout's floor) before idempotency_in_progress.
func faultGate(t *testing.T, extra string) (*faultAgent, *signer, *sidecar) {
	t.Helper()
	fa := startFaultAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, fa.addr(), idemDirective(jw.url(), "			wait_timeout 1s\n"+extra))
	return fa, key, sc
}
