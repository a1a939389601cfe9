package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// wsAgent wraps the recording agent: it counts the calls it receives per
// verified workspace and can hold the calls of one workspace until
// released (a slow agent).
type wsAgent struct {
	*agent
	mu      sync.Mutex
	counts  map[string]int
	holdWS  string        // calls of this workspace wait on release
	release chan struct{} // closed to let held calls answer
	holding int           // held calls now waiting
}

func startWSAgent(t *testing.T) *wsAgent {
	t.Helper()
	wa := &wsAgent{agent: startAgent(t), counts: map[string]int{}}
	wa.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		ws := r.Header.Get("X-Supervaize-Verified-Workspace-Id")
		wa.mu.Lock()
		wa.counts[ws]++
		hold := ws == wa.holdWS && wa.release != nil
		ch := wa.release
		if hold {
			wa.holding++
		}
		wa.mu.Unlock()
		if hold {
			<-ch
			wa.mu.Lock()
			wa.holding--
			wa.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/a2a" {
			fmt.Fprint(w, `{"items":[]}`)
			return
		}
		var env struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal(body, &env)
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"status":"ok","effects":[]}}`, env.ID)
	}
	return wa
}

func (wa *wsAgent) count(ws string) int {
	wa.mu.Lock()
	defer wa.mu.Unlock()
	return wa.counts[ws]
}

// hold makes the calls of ws wait until the returned func is called.
func (wa *wsAgent) hold(ws string) (release func()) {
	wa.mu.Lock()
	defer wa.mu.Unlock()
	wa.holdWS, wa.release = ws, make(chan struct{})
	ch := wa.release
	return func() {
		wa.mu.Lock()
		wa.release = nil
		wa.mu.Unlock()
		close(ch)
	}
}

func (wa *wsAgent) held() int {
	wa.mu.Lock()
	defer wa.mu.Unlock()
	return wa.holding
}

// wsCall is an action call of workspace ws with a token for it.
func wsCall(t *testing.T, key *signer, ws, action string, edit func(map[string]any)) (body []byte, token string) {
	t.Helper()
	body = actionBody(t, func(req map[string]any) {
		req["action"] = action
		req["workspace"] = map[string]any{"id": ws, "slug": "acme"}
		if edit != nil {
			edit(req)
		}
	})
	return body, key.mintWith(t, func(c jwt.MapClaims) { c["workspace_id"] = ws })
}

// wantRateLimited asserts the /a2a answer of a limit: HTTP 200, -32029
// "Rate limit exceeded", data {code, retry_after number}, Retry-After.
func wantRateLimited(t *testing.T, r response, dataCode string) {
	t.Helper()
	a := wantRPCError(t, r, -32029, dataCode)
	if a.Error.Message != "Rate limit exceeded" {
		t.Errorf("message %q", a.Error.Message)
	}
	var d map[string]any
	if err := json.Unmarshal(a.Error.Data, &d); err != nil {
		t.Fatal(err)
	}
	secs, ok := d["retry_after"].(float64)
	if !ok || secs < 1 {
		t.Fatalf("data.retry_after %v is not a number of seconds: %s", d["retry_after"], r.Body)
	}
	if h := r.Header.Get("Retry-After"); h != strconv.Itoa(int(secs)) {
		t.Errorf("Retry-After %q, data.retry_after %v", h, secs)
	}
}

func limitsDirective(jwksURL, block string) string {
	return jwksDirective(jwksURL, "\t\tlimits {\n"+block+"\t\t}\n")
}

// TestLimitsFloodingWorkspaceIsRefusedOthersAreNot: A over its rate is
// refused with the documented answer and the agent sees none of those
// calls, while B at its normal rate is never refused; the audit line,
// the metrics and the placeholder tell the outcome and the rule.
func TestLimitsFloodingWorkspaceIsRefusedOthersAreNot(t *testing.T) {
	wa := startWSAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startMetricsSidecar(t, wa.addr(), limitsDirective(jw.url(), "\t\t\trate job.sync 5/m\n"))
	for i := range 20 {
		body, tok := wsCall(t, key, "ws-a", "job.sync", nil)
		r := sc.rpc(t, body, tok)
		if i < 5 {
			if a := decodeRPC(t, r); a.Error != nil {
				t.Fatalf("A's call %d refused within its rate: %s", i+1, r.Body)
			}
		} else {
			wantRateLimited(t, r, "rate_limited")
		}
		if i%4 == 0 { // B: 5 calls in the same minute, its own budget
			body, tok := wsCall(t, key, "ws-b", "job.sync", nil)
			if a := decodeRPC(t, sc.rpc(t, body, tok)); a.Error != nil {
				t.Fatalf("B refused while A floods: %s", a.Error.Message)
			}
		}
	}
	if a, b := wa.count("ws-a"), wa.count("ws-b"); a != 5 || b != 5 {
		t.Fatalf("agent received %d calls of A (want 5: none refused) and %d of B (want 5)", a, b)
	}
	// Another target is not limited.
	body, tok := wsCall(t, key, "ws-a", "job.start", func(r map[string]any) { r["idempotency_key"] = "k-" + randomID() })
	if a := decodeRPC(t, sc.rpc(t, body, tok)); a.Error != nil {
		t.Fatalf("job.start of A refused by a job.sync rule: %s", a.Error.Message)
	}
	logs := sc.logs(t)
	if countLines(logs, `"code":"rate_limited"`, `"limit":"rate_limited"`, `"limit_rule":"rate job.sync 5/m burst 5"`, `"limit_key":"workspace"`) != 15 {
		t.Errorf("want 15 audit lines with the limit outcome and rule:\n%s", logs)
	}
	status := string(do(t, "GET", sc.base+"/_sidecar/status", nil, "X-API-Key", testReadKey).Body)
	if !strings.Contains(status, `"rate job.sync 5/m burst 5"`) || !strings.Contains(status, `"limits max_keys"`) {
		t.Errorf("/_sidecar/status settings do not list the limits: %s", status)
	}
	m := string(do(t, "GET", sc.base+"/metrics", nil).Body)
	for _, want := range []string{
		`supervaizer_sidecar_limit_decisions_total{outcome="rate_limited",rule="rate job.sync 5/m burst 5"} 15`,
		`supervaizer_sidecar_limit_decisions_total{outcome="allowed",rule="rate job.sync 5/m burst 5"} 10`,
		`supervaizer_sidecar_limit_tracked_keys 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestLimitsDataResourceAnswer: on a DataResource route the refusal is
// 429 {"detail": "Rate limit exceeded"} with Retry-After, not forwarded.
func TestLimitsDataResourceAnswer(t *testing.T) {
	wa := startWSAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, wa.addr(), limitsDirective(jw.url(), "\t\t\trate resource.*.list 2/h\n"))
	get := func() response {
		return do(t, "GET", sc.base+"/api/agents/"+testAgent+"/data/contacts/", nil, "X-API-Key", testKey,
			"X-Supervaize-Workspace-Id", "workspace_123", "X-Supervaize-Workspace-Slug", "acme",
			"X-Supervaize-Workspace-Authorization", "Bearer "+key.mint(t, baseClaims()))
	}
	for range 2 {
		if r := get(); r.Status != 200 {
			t.Fatalf("within the rate: %d %s", r.Status, r.Body)
		}
	}
	r := get()
	wantDetail(t, r, http.StatusTooManyRequests, "Rate limit exceeded")
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	if n := wa.count("workspace_123"); n != 2 {
		t.Fatalf("agent received %d, want 2", n)
	}
}

// TestLimitsConcurrencySlowAgent: A's second call is refused while its
// first is in flight, B passes meanwhile, A passes again once it ended.
func TestLimitsConcurrencySlowAgent(t *testing.T) {
	wa := startWSAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, wa.addr(), limitsDirective(jw.url(), "\t\t\tconcurrency job.* 1\n"))
	release := wa.hold("ws-a")
	first := make(chan response, 1)
	body, tok := wsCall(t, key, "ws-a", "job.sync", nil)
	go func() { first <- sc.rpc(t, body, tok) }()
	eventually(t, 15*time.Second, "A's first call at the agent", func() bool { return wa.held() == 1 })
	wantRateLimited(t, sc.rpc(t, body, tok), "concurrency_limited")
	bBody, bTok := wsCall(t, key, "ws-b", "job.sync", nil)
	if a := decodeRPC(t, sc.rpc(t, bBody, bTok)); a.Error != nil {
		t.Fatalf("B refused while A has a call in flight: %s", a.Error.Message)
	}
	release()
	if a := decodeRPC(t, <-first); a.Error != nil {
		t.Fatalf("A's first call: %s", a.Error.Message)
	}
	if a := decodeRPC(t, sc.rpc(t, body, tok)); a.Error != nil {
		t.Fatalf("A refused after its call ended: %s", a.Error.Message)
	}
	if n := wa.count("ws-a"); n != 2 {
		t.Fatalf("agent received %d calls of A, want 2 (the refused one never)", n)
	}
}

// TestLimitsReplayAndWaitAreNotCounted: a call answered from an
// idempotency record does not spend the rate, and a retry waiting on an
// in-flight key holds no concurrency slot.
func TestLimitsReplayAndWaitAreNotCounted(t *testing.T) {
	wa := startWSAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startMetricsSidecar(t, wa.addr(), limitsDirective(jw.url(), "\t\t\trate job.start 2/h\n\t\t\tconcurrency job.start 1\n"))
	withKey := func(k string) func(map[string]any) { return func(r map[string]any) { r["idempotency_key"] = k } }

	// Concurrency 1: the holder of k1 is at the agent; a retry of k1 waits
	// and gets the replay, never concurrency_limited.
	release := wa.hold("ws-a")
	body, tok := wsCall(t, key, "ws-a", "job.start", withKey("k1"))
	first, retry := make(chan response, 1), make(chan response, 1)
	go func() { first <- sc.rpc(t, body, tok) }()
	eventually(t, 15*time.Second, "k1 at the agent", func() bool { return wa.held() == 1 })
	go func() { retry <- sc.rpc(t, body, tok) }()
	eventually(t, 15*time.Second, "the retry waiting on k1", func() bool {
		return strings.Contains(string(do(t, "GET", sc.base+"/metrics", nil).Body),
			`supervaizer_sidecar_idempotency_events_total{event="wait"} 1`)
	})
	release()
	for _, ch := range []chan response{first, retry} {
		r := <-ch
		if a := decodeRPC(t, r); a.Error != nil {
			t.Fatalf("k1: %s", r.Body)
		}
	}
	// Replays of k1: not counted (the rate has one token left of 2).
	for range 5 {
		r := sc.rpc(t, body, tok)
		if r.Header.Get("X-Supervaize-Idempotent-Replay") != "true" {
			t.Fatalf("not a replay: %s", r.Body)
		}
	}
	b2, _ := wsCall(t, key, "ws-a", "job.start", withKey("k2"))
	if a := decodeRPC(t, sc.rpc(t, b2, tok)); a.Error != nil {
		t.Fatalf("k2 refused: replays were counted: %s", a.Error.Message)
	}
	b3, _ := wsCall(t, key, "ws-a", "job.start", withKey("k3"))
	wantRateLimited(t, sc.rpc(t, b3, tok), "rate_limited")
	if n := wa.count("ws-a"); n != 2 {
		t.Fatalf("agent executed %d calls, want 2 (k1 once, k2)", n)
	}
	// The refused k3 was never claimed for good: it is not in progress.
	wantRateLimited(t, sc.rpc(t, b3, tok), "rate_limited")
}

// TestLimitsReloadKeepsBudget: a reload of the same configuration keeps
// the spent budget.
func TestLimitsReloadKeepsBudget(t *testing.T) {
	wa := startWSAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startAdminSidecar(t, wa.addr(), limitsDirective(jw.url(), "\t\t\trate job.sync 3/h\n"))
	body, tok := wsCall(t, key, "ws-a", "job.sync", nil)
	for range 3 {
		if a := decodeRPC(t, sc.rpc(t, body, tok)); a.Error != nil {
			t.Fatal(a.Error.Message)
		}
	}
	sc.reload(t)
	// A new connection: the reload closes the old server's idle ones, and
	// a connection the old server accepted as it stopped may be closed
	// unanswered (EOF): that one is tried again on another (the agent's
	// count below shows nothing ran twice).
	fresh := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var resp *http.Response
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, sc.base+"/a2a", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-API-Key", testKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+tok)
		if resp, err = fresh.Do(req); err == nil {
			break
		} else if attempt == 2 || !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantRateLimited(t, response{Status: resp.StatusCode, Header: resp.Header, Body: b, ProtoMajor: resp.ProtoMajor}, "rate_limited")
	if n := wa.count("ws-a"); n != 3 {
		t.Fatalf("agent received %d, want 3", n)
	}
}

// TestLimitsTwoSidecarsShareRedis: two sidecar processes on one Redis
// keep one budget per workspace.
func TestLimitsTwoSidecarsShareRedis(t *testing.T) {
	srv := redistest.Start(t)
	wa := startWSAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	block := "\t\t\trate job.sync 4/h\n\t\t\tstore redis " + srv.URL() + "\n"
	var procs []*sidecarProcess
	for range 2 {
		port := freePort(t)
		cf := fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n\tauto_https off\n}\nhttp://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy %s\n}\n",
			port, limitsDirective(jw.url(), block), wa.addr())
		path := filepath.Join(t.TempDir(), "Caddyfile")
		if err := os.WriteFile(path, []byte(cf), 0o600); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, startProcess(t, path, port))
	}
	body, tok := wsCall(t, key, "ws-a", "job.sync", nil)
	allowed := 0
	for i := range 10 {
		st, b, err := rawPost(procs[i%2].base+"/a2a", body, "X-API-Key", testKey, "Content-Type", "application/json",
			"X-Supervaize-Workspace-Authorization", "Bearer "+tok)
		if err != nil || st != 200 {
			t.Fatalf("%d %s %v", st, b, err)
		}
		switch {
		case strings.Contains(string(b), `"result"`):
			allowed++
		case !strings.Contains(string(b), `"code":-32029`):
			t.Fatalf("neither allowed nor limited: %s", b)
		}
	}
	if allowed != 4 || wa.count("ws-a") != 4 {
		t.Fatalf("two sidecars allowed %d (agent saw %d) of 10 calls, want 4: one budget", allowed, wa.count("ws-a"))
	}
}

// TestLimitsRedisStoppedFollowsOnStoreError: with Redis gone, local counts
// in the sidecar's own buckets (warn line, metric, readiness note) and
// deny refuses.
func TestLimitsRedisStoppedFollowsOnStoreError(t *testing.T) {
	for _, mode := range []string{"local", "deny"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t)
			wa := startWSAgent(t)
			key := newSigner(t, "k1")
			jw := startJWKS(t, key.jwk())
			sc := startMetricsSidecar(t, wa.addr(), limitsDirective(jw.url(),
				"\t\t\trate job.sync 3/h\n\t\t\tstore redis "+srv.URL()+"\n\t\t\ton_store_error "+mode+"\n"))
			body, tok := wsCall(t, key, "ws-a", "job.sync", nil)
			for range 2 {
				if a := decodeRPC(t, sc.rpc(t, body, tok)); a.Error != nil {
					t.Fatal(a.Error.Message)
				}
			}
			srv.Stop()
			r := sc.rpc(t, body, tok)
			if mode == "deny" {
				wantRateLimited(t, r, "rate_limited")
				if wa.count("ws-a") != 2 {
					t.Fatalf("agent saw %d, want 2", wa.count("ws-a"))
				}
			} else {
				// A fresh local bucket of 3: 3 more calls, then refused.
				if a := decodeRPC(t, r); a.Error != nil {
					t.Fatalf("on_store_error local refused: %s", r.Body)
				}
				for range 2 {
					decodeRPC(t, sc.rpc(t, body, tok))
				}
				wantRateLimited(t, sc.rpc(t, body, tok), "rate_limited")
				if n := wa.count("ws-a"); n != 5 {
					t.Fatalf("agent saw %d, want 5", n)
				}
				if countLines(sc.logs(t), `"limit":"allowed_local_fallback"`) != 3 {
					t.Error("audit lines do not say the local fallback counted the calls")
				}
			}
			if countLines(sc.logs(t), "limits store unavailable", `"on_store_error":"`+mode+`"`) < 1 {
				t.Error("no warn line for the store error")
			}
			ready := string(do(t, "GET", sc.base+"/_sidecar/ready", nil).Body)
			if !strings.Contains(ready, "limits store failing") || !strings.Contains(ready, `"ready":true`) || strings.Contains(ready, "last:") {
				t.Errorf("readiness %s: want ready with a limits note, without the error text (no key there)", ready)
			}
			if st := string(do(t, "GET", sc.base+"/_sidecar/status", nil, "X-API-Key", testKey).Body); !strings.Contains(st, "limits store failing") || !strings.Contains(st, "last:") {
				t.Errorf("status %s: want the limits note with its last error", st)
			}
			m := string(do(t, "GET", sc.base+"/metrics", nil).Body)
			if !strings.Contains(m, `supervaizer_sidecar_limit_store_errors_total{fallback="`+mode+`"}`) {
				t.Error("no store error metric")
			}
		})
	}
}

// TestLimitsEveryProtocol: the same answer over HTTP/1.1, h2 and h3.
func TestLimitsEveryProtocol(t *testing.T) {
	wa := startWSAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	ps := startEveryProtocol(t, wa.addr(), limitsDirective(jw.url(), "\t\t\trate job.sync 2/h\n"))
	ps.forEachVersion(t, func(t *testing.T, v httpVersion) {
		ws := "ws-" + v.name
		body, tok := wsCall(t, key, ws, "job.sync", nil)
		for range 2 {
			if a := decodeRPC(t, v.rpc(t, body, tok)); a.Error != nil {
				t.Fatal(a.Error.Message)
			}
		}
		wantRateLimited(t, v.rpc(t, body, tok), "rate_limited")
		if n := wa.count(ws); n != 2 {
			t.Fatalf("agent saw %d, want 2", n)
		}
	})
}

// TestLimitsPlaceholder: {supervaizer.limit} carries the limits outcome
// to the rest of the Caddyfile (here a deferred response header).
func TestLimitsPlaceholder(t *testing.T) {
	wa := startWSAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc, err := runCaddyfile(t, "", func(port int) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\theader {\n\t\tdefer\n\t\tX-Sv-Limit \"{supervaizer.limit}\"\n\t}\n"+
			"\tsupervaizer_auth {\n%s\t}\n\treverse_proxy %s\n}\n", port, limitsDirective(jw.url(), "\t\t\trate job.sync 1/h\n"), wa.addr())
	})
	if err != nil {
		t.Fatal(err)
	}
	body, tok := wsCall(t, key, "ws-a", "job.sync", nil)
	for _, want := range []string{"allowed", "rate_limited"} {
		if got := sc.rpc(t, body, tok).Header.Get("X-Sv-Limit"); got != want {
			t.Errorf("{supervaizer.limit} = %q, want %q", got, want)
		}
	}
	other, tok := wsCall(t, key, "ws-a", "job.start", func(r map[string]any) { r["idempotency_key"] = "k-" + randomID() })
	if got := sc.rpc(t, other, tok).Header.Get("X-Sv-Limit"); got != "" {
		t.Errorf("no rule matched, {supervaizer.limit} = %q", got)
	}
}

// TestLimitsBootstrapKeyedOnTheTransportKey: a bootstrap call has no
// verified workspace: its budget is the transport key's, whatever
// workspace the request names (a new one each call gets no new budget),
// and another transport key has its own.
func TestLimitsBootstrapKeyedOnTheTransportKey(t *testing.T) {
	wa := startWSAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	const otherKey = "test-other-write-key-0123456789"
	sc := startSidecar(t, wa.addr(), jwksDirective(jw.url(),
		"\t\tapi_key "+otherKey+" write\n\t\tlimits {\n\t\t\trate workspace_binding.* 1/h\n\t\t}\n"))
	post := func(apiKey, ws string) response {
		body := actionBody(t, func(r map[string]any) {
			r["action"] = "workspace_binding.options"
			r["workspace"] = map[string]any{"id": ws, "slug": "acme"}
			delete(r, "idempotency_key")
		})
		return do(t, http.MethodPost, sc.base+"/a2a", body, "X-API-Key", apiKey, "Content-Type", "application/json")
	}
	if a := decodeRPC(t, post(testKey, "ws-made-up-1")); a.Error != nil {
		t.Fatalf("first bootstrap call: %s", a.Error.Message)
	}
	wantRateLimited(t, post(testKey, "ws-made-up-1"), "rate_limited")
	wantRateLimited(t, post(testKey, "ws-made-up-2"), "rate_limited") // a new workspace is no new budget
	if a := decodeRPC(t, post(otherKey, "ws-made-up-1")); a.Error != nil {
		t.Fatalf("another transport key was refused: %s", a.Error.Message)
	}
	if n := wa.agent.count.Load(); n != 2 {
		t.Fatalf("agent received %d, want 2 (no refused call)", n)
	}
	if countLines(sc.logs(t), `"limit":"rate_limited"`, `"limit_key":"transport_key"`) != 2 {
		t.Errorf("the refusals' audit lines do not say the key was the transport key:\n%s", sc.logs(t))
	}
}

// TestLimitsBootstrapCallsNeverResetAWorkspacesBudget: with a small
// max_keys, bootstrap calls naming many made-up workspaces neither evict
// a verified workspace's bucket (its budget is not reset) nor crowd it out.
func TestLimitsBootstrapCallsNeverResetAWorkspacesBudget(t *testing.T) {
	wa := startWSAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, wa.addr(), limitsDirective(jw.url(),
		"\t\t\trate job.sync 1/h\n\t\t\trate workspace_binding.* 1000/h\n\t\t\tmax_keys 2\n"))
	body, tok := wsCall(t, key, "ws-a", "job.sync", nil)
	if a := decodeRPC(t, sc.rpc(t, body, tok)); a.Error != nil {
		t.Fatalf("A's first job.sync: %s", a.Error.Message)
	}
	for i := range 5 {
		b := actionBody(t, func(r map[string]any) {
			r["action"] = "workspace_binding.options"
			r["workspace"] = map[string]any{"id": "fake-" + strconv.Itoa(i), "slug": "acme"}
			delete(r, "idempotency_key")
		})
		do(t, http.MethodPost, sc.base+"/a2a", b, "X-API-Key", testKey, "Content-Type", "application/json")
	}
	wantRateLimited(t, sc.rpc(t, body, tok), "rate_limited")
	if n := wa.count("ws-a"); n != 1 {
		t.Fatalf("agent received %d job.sync of A, want 1 (its budget kept)", n)
	}
}

// TestLimitsSurfaceIsItsOwnTarget: a rule on the job.start action does not
// count loads of the job.start surface; surface:job.start does.
func TestLimitsSurfaceIsItsOwnTarget(t *testing.T) {
	wa := startWSAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, wa.addr(), limitsDirective(jw.url(),
		"\t\t\trate job.start 1/h\n\t\t\trate surface:job.start 2/h\n"))
	tok := key.mint(t, baseClaims())
	for i := range 2 {
		if a := decodeRPC(t, sc.rpc(t, surfaceEnvelope(t, "job.start"), tok)); a.Error != nil {
			t.Fatalf("surface load %d: %s", i+1, a.Error.Message)
		}
	}
	wantRateLimited(t, sc.rpc(t, surfaceEnvelope(t, "job.start"), tok), "rate_limited")
	if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), tok)); a.Error != nil {
		t.Fatalf("job.start refused after surface loads: %s", a.Error.Message)
	}
	if n := wa.agent.count.Load(); n != 3 {
		t.Fatalf("agent received %d calls, want 3 (2 loads, 1 start)", n)
	}
	if countLines(sc.logs(t), `"limit":"rate_limited"`, `"limit_rule":"rate surface:job.start 2/h burst 2"`) != 1 {
		t.Errorf("the surface refusal names its rule:\n%s", sc.logs(t))
	}
}
