package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// The faults of issue 12: after each, the agent has executed the confirm
// exactly once, whatever the client retried (docs/idempotency.md).

// TestFaultResetAfterReceipt: the agent reads the whole job.start, then
// resets the connection. The caller gets 502; the key stays in flight, so
// the retry is not forwarded even though the agent is healthy again.
func TestFaultResetAfterReceipt(t *testing.T) {
	fa, key, sc := faultGate(t, "")
	fa.mode.Store(answerReset)
	body := jobStartWithKey(t, "k-reset")
	r := sc.rpc(t, body, key.mint(t, baseClaims()))
	if r.Status != http.StatusBadGateway {
		t.Fatalf("status %d, want 502: %s", r.Status, r.Body)
	}
	wantRetryKept(t, fa, key, sc, body, "k-reset")
	if !strings.Contains(sc.logs(t), `"reason":"outcome_unknown"`) {
		t.Fatal("no warning that the key was kept in flight")
	}
}

// TestFaultAbortMidBody: the agent answers 200 and half its body, then
// closes. reverse_proxy aborts the forward; the caller gets a clean 502 and
// the retry is not forwarded.
func TestFaultAbortMidBody(t *testing.T) {
	fa, key, sc := faultGate(t, "")
	fa.mode.Store(answerAbort)
	body := jobStartWithKey(t, "k-abort")
	r := sc.rpc(t, body, key.mint(t, baseClaims()))
	wantRPCErrorStatus(t, r, http.StatusBadGateway, "agent_unavailable")
	wantRetryKept(t, fa, key, sc, body, "k-abort")
}

// TestFaultRecordFailsAfterSuccess: the agent succeeded but the memory store
// cannot keep the record (max_bytes): the caller still gets the answer, the
// retry is not forwarded.
func TestFaultRecordFailsAfterSuccess(t *testing.T) {
	fa, key, sc := faultGate(t, "			max_bytes 300\n")
	body := jobStartWithKey(t, "k-record")
	if res := resultOf(t, sc.rpc(t, body, key.mint(t, baseClaims()))); res["status"] == nil {
		t.Fatalf("no result: %v", res)
	}
	wantInProgress(t, sc.rpc(t, body, key.mint(t, baseClaims())))
	if n := fa.executions("k-record"); n != 1 {
		t.Fatalf("agent executed the call %d times, want 1", n)
	}
}

// TestFaultAnswerOverMaxRecordBytes: an answer larger than max_record_bytes
// (default 1 MiB) reaches the caller whole, once; it is not recorded and the
// retry is not forwarded.
func TestFaultAnswerOverMaxRecordBytes(t *testing.T) {
	fa, key, sc := faultGate(t, "")
	fa.mode.Store(answerHuge)
	body := jobStartWithKey(t, "k-huge")
	r := sc.rpc(t, body, key.mint(t, baseClaims()))
	if r.Status != http.StatusOK || len(r.Body) < 1<<20 || !strings.HasSuffix(string(r.Body), `"}}`) {
		t.Fatalf("status %d, %d bytes: the answer did not pass whole", r.Status, len(r.Body))
	}
	if r.Header.Get("X-Supervaize-Idempotent-Replay") != "" {
		t.Fatal("a passed-through answer is marked as a replay")
	}
	wantInProgress(t, sc.rpc(t, body, key.mint(t, baseClaims())))
	if n := fa.executions("k-huge"); n != 1 {
		t.Fatalf("agent executed the call %d times, want 1", n)
	}
}

// TestFaultDialErrorReleases: the agent is not listening: the request never
// left the sidecar, so the key is released and the retry, once the agent is
// up, is forwarded and recorded.
func TestFaultDialErrorReleases(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, addr, idemDirective(jw.url(), ""))
	body := jobStartWithKey(t, "k-dial")
	wantRPCErrorStatus(t, sc.rpc(t, body, key.mint(t, baseClaims())), http.StatusBadGateway, "agent_unavailable")

	fa := &faultAgent{result: startResult(t), perKey: map[string]int{}, started: make(chan string, 16), unblock: make(chan struct{})}
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the agent's port was taken meanwhile: %v", err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(fa.serve))
	srv.Listener = l2
	srv.Start()
	defer srv.Close()
	resultOf(t, sc.rpc(t, body, key.mint(t, baseClaims())))
	if r := sc.rpc(t, body, key.mint(t, baseClaims())); r.Header.Get("X-Supervaize-Idempotent-Replay") != "true" {
		t.Fatalf("third call not replayed: %s", r.Body)
	}
	if n := fa.executions("k-dial"); n != 1 {
		t.Fatalf("agent executed the call %d times, want 1", n)
	}
}

// TestFaultRedisRefusesRecord: Redis refuses the record's write (OOM under
// noeviction) after the agent succeeded: the key stays in flight.
func TestFaultRedisRefusesRecord(t *testing.T) {
	rs := redistest.Start(t)
	fa, key, sc := faultGate(t, fmt.Sprintf("			store redis\n			redis_url %s\n", rs.URL()))
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rc.Close()
	ctx := context.Background()
	fa.mode.Store(answerBlocked)
	body := jobStartWithKey(t, "k-oom")
	first := make(chan response, 1)
	go func() { first <- sc.rpc(t, body, key.mint(t, baseClaims())) }()
	fa.waitStarted(t, "k-oom")
	if err := rc.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	fa.release()
	resultOf(t, <-first)
	if err := rc.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	wantInProgress(t, sc.rpc(t, body, key.mint(t, baseClaims())))
	if n := fa.executions("k-oom"); n != 1 {
		t.Fatalf("agent executed the call %d times, want 1", n)
	}
}

// TestFaultReloadMidForward: the config is reloaded through the admin API
// while a job.start is at the agent. The forward completes and is recorded
// in the store the new config shares; the retry is a replay.
func TestFaultReloadMidForward(t *testing.T) {
	rs := redistest.Start(t)
	for name, store := range map[string]string{
		"memory": "",
		"file":   "			store file " + filepath.Join(t.TempDir(), "store.db") + "\n",
		"redis":  fmt.Sprintf("			store redis\n			redis_url %s\n", rs.URL()),
	} {
		t.Run(name, func(t *testing.T) {
			fa := startFaultAgent(t)
			key := newSigner(t, "k1")
			jw := startJWKS(t, key.jwk())
			sc := startAdminSidecar(t, fa.addr(), idemDirective(jw.url(), "			wait_timeout 1s\n"+store))
			fa.mode.Store(answerBlocked)
			body := jobStartWithKey(t, "k-reload-"+name)
			// Each call on a connection of its own: the reload closes the old
			// server's connections once their request is answered, and a
			// pooled client could pick one that is closing.
			post := func() (int, []byte, error) {
				return rawPost(sc.base+"/a2a", body, "X-API-Key", testKey, "Content-Type", "application/json",
					"X-Supervaize-Workspace-Authorization", "Bearer "+key.mint(t, baseClaims()))
			}
			first := make(chan error, 1)
			go func() {
				st, b, err := post()
				if err == nil && (st != 200 || !strings.Contains(string(b), `"strictly_idempotent_response":true`)) {
					err = fmt.Errorf("status %d: %s", st, b)
				}
				first <- err
			}()
			fa.waitStarted(t, "k-reload-"+name)
			sc.reload(t)
			fa.release()
			if err := <-first; err != nil {
				t.Fatalf("the call in flight during the reload: %v", err)
			}
			st, b, err := post()
			if err != nil || st != 200 || !strings.Contains(string(b), `"strictly_idempotent_response":true`) || fa.executions("k-reload-"+name) != 1 {
				t.Fatalf("retry after the reload: %d %s %v", st, b, err)
			}
			if n := fa.executions("k-reload-" + name); n != 1 {
				t.Fatalf("agent executed the call %d times, want 1", n)
			}
		})
	}
}

// TestFaultConcurrentRetriesDuringReset: many retries of one key race a
// reset: the agent still executes once.
func TestFaultConcurrentRetriesDuringReset(t *testing.T) {
	fa, key, sc := faultGate(t, "")
	fa.mode.Store(answerReset)
	body := jobStartWithKey(t, "k-race")
	tok := key.mint(t, baseClaims())
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, _ = rawPost(sc.base+"/a2a", body, "X-API-Key", testKey, "Content-Type", "application/json",
				"X-Supervaize-Workspace-Authorization", "Bearer "+tok)
		}()
	}
	wg.Wait()
	if n := fa.executions("k-race"); n != 1 {
		t.Fatalf("agent executed the call %d times, want 1", n)
	}
}

// wantRPCErrorStatus asserts an HTTP status with a JSON-RPC error body whose
// data.code is dataCode.
func wantRPCErrorStatus(t *testing.T, r response, status int, dataCode string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	r.Status = http.StatusOK
	a := decodeRPC(t, r)
	if a.Error == nil || !strings.Contains(string(a.Error.Data), `"`+dataCode+`"`) {
		t.Fatalf("want data.code %s: %s", dataCode, r.Body)
	}
}

// TestFaultRestartFileStore: with the file store, a record and an in-flight
// mark both survive a crash of the sidecar process: after a restart, the
// retry of a recorded call is a replay, and the retry of a call that was at
// the agent when the process died gets idempotency_in_progress.
func TestFaultRestartFileStore(t *testing.T) {
	fa := startFaultAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	dir := t.TempDir()
	port := freePort(t)
	cf := fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n\tauto_https off\n}\nhttp://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy %s\n}\n",
		port, idemDirective(jw.url(), "			wait_timeout 1s\n			store file "+filepath.Join(dir, "idem", "store.db")+"\n"), fa.addr())
	cfPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfPath, []byte(cf), 0o600); err != nil {
		t.Fatal(err)
	}
	headers := []string{"X-API-Key", testKey, "Content-Type", "application/json"}
	post := func(p *sidecarProcess, body []byte) (int, []byte, error) {
		return rawPost(p.base+"/a2a", body, append(headers, "X-Supervaize-Workspace-Authorization", "Bearer "+key.mint(t, baseClaims()))...)
	}

	p := startProcess(t, cfPath, port)
	done := jobStartWithKey(t, "k-restart-done")
	if st, b, err := post(p, done); err != nil || st != 200 || !strings.Contains(string(b), `"strictly_idempotent_response":true`) {
		t.Fatalf("first call: %d %s %v", st, b, err)
	}
	fa.mode.Store(answerBlocked)
	inflight := jobStartWithKey(t, "k-restart-inflight")
	go func() { _, _, _ = post(p, inflight) }()
	fa.waitStarted(t, "k-restart-inflight")
	p.kill()

	p = startProcess(t, cfPath, port)
	fa.release()
	fa.mode.Store(answerOK)
	st, b, err := post(p, done)
	if err != nil || st != 200 || !strings.Contains(string(b), `"strictly_idempotent_response":true`) {
		t.Fatalf("retry after restart: %d %s %v", st, b, err)
	}
	_, b, _ = post(p, inflight)
	wantInProgress(t, response{Status: 200, Body: b})
	for _, k := range []string{"k-restart-done", "k-restart-inflight"} {
		if n := fa.executions(k); n != 1 {
			t.Fatalf("agent executed %s %d times, want 1", k, n)
		}
	}
}

// TestFaultRedisFailover: Sentinel mode with min_replicas_ack 1. The primary
// is killed while a job.start is at the agent and Sentinel promotes the
// replica; the claim was acknowledged by the replica, so the retry after the
// failover is not forwarded again.
func TestFaultRedisFailover(t *testing.T) {
	sen := redistest.StartSentinel(t)
	fa, key, sc := faultGate(t, fmt.Sprintf("			store redis\n			redis_mode sentinel\n			redis_url %s\n			min_replicas_ack 1\n			replica_ack_timeout 10s\n", sen.FailoverURL()))
	fa.mode.Store(answerBlocked)
	body := jobStartWithKey(t, "k-failover")
	first := make(chan response, 1)
	go func() { first <- sc.rpc(t, body, key.mint(t, baseClaims())) }()
	fa.waitStarted(t, "k-failover")
	old := sen.Primary().Addr()
	sen.KillPrimary()
	if now := sen.WaitFailover(30 * time.Second); now == old {
		t.Fatalf("no failover: primary still %s", now)
	}
	fa.release()
	resultOf(t, <-first)
	fa.mode.Store(answerOK)
	r := sc.rpc(t, body, key.mint(t, baseClaims()))
	if r.Header.Get("X-Supervaize-Idempotent-Replay") != "true" {
		wantInProgress(t, r)
	}
	if n := fa.executions("k-failover"); n != 1 {
		t.Fatalf("agent executed the call %d times, want 1", n)
	}
}

// TestFaultManyWaitersFewRedisConnections: 300 retries of one in-flight key,
// through the gate, wait on Redis; they share the store's one subscription,
// so Redis sees a bounded number of connections (not one per waiter), and
// all of them get the first call's answer once it lands.
func TestFaultManyWaitersFewRedisConnections(t *testing.T) {
	rs := redistest.Start(t)
	fa := startFaultAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	directive := idemDirective(jw.url(), fmt.Sprintf("			store redis\n			redis_url %s\n", rs.URL()))
	sc := startMetricsSidecar(t, fa.addr(), directive)
	fa.mode.Store(answerBlocked)
	body := jobStartWithKey(t, "k-waiters")
	tok := key.mint(t, baseClaims())
	post := func() (int, []byte, error) {
		return rawPost(sc.base+"/a2a", body, "X-API-Key", testKey, "Content-Type", "application/json",
			"X-Supervaize-Workspace-Authorization", "Bearer "+tok)
	}
	first := make(chan error, 1)
	go func() { _, _, err := post(); first <- err }()
	fa.waitStarted(t, "k-waiters")
	const waiters = 300
	results := make(chan string, waiters)
	for i := 0; i < waiters; i++ {
		go func() {
			st, b, err := post()
			switch {
			case err != nil:
				results <- err.Error()
			case st == 200 && strings.Contains(string(b), `"strictly_idempotent_response":true`):
				results <- "replay"
			default:
				results <- fmt.Sprintf("%d %s", st, b)
			}
		}()
	}
	// Wait until every waiter is waiting (the gate counts each wait once).
	eventually(t, 20*time.Second, "the waiters to all start waiting", func() bool {
		return strings.Contains(string(do(t, "GET", sc.base+"/metrics", nil).Body), fmt.Sprintf(`supervaizer_sidecar_idempotency_events_total{event="wait"} %d`, waiters))
	})
	n, err := rs.ConnectedClients()
	if err != nil {
		t.Fatal(err)
	}
	if n > 30 {
		t.Fatalf("%d waiters hold %d Redis connections; want them to share a few", waiters, n)
	}
	fa.release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i := 0; i < waiters; i++ {
		if r := <-results; r != "replay" {
			t.Fatalf("a waiter got %s", r)
		}
	}
	if got := fa.executions("k-waiters"); got != 1 {
		t.Fatalf("agent executed the call %d times, want 1", got)
	}
}

// TestFaultTransportNeverResends: a reused connection to the agent that
// resets after the request was sent must not make Go's transport send it
// again on a new connection, not even when the client adds an
// Idempotency-Key or X-Idempotency-Key header (which net/http takes as
// leave to re-send a POST). Covered (job.start) and uncovered (job.sync)
// calls alike reach the agent once.
func TestFaultTransportNeverResends(t *testing.T) {
	fa, key, sc := faultGate(t, "")
	for _, h := range []string{"Idempotency-Key", "X-Idempotency-Key"} {
		for _, action := range []string{"job.start", "job.sync"} {
			k := "k-resend-" + h + "-" + action
			fa.mode.Store(answerOK)
			// A first call leaves an idle keep-alive connection to the agent.
			resultOf(t, sc.rpc(t, jobStartWithKey(t, k+"-warm"), key.mint(t, baseClaims())))
			fa.mode.Store(answerReset)
			body := actionBody(t, func(r map[string]any) { r["action"] = action; r["idempotency_key"] = k })
			if r := sc.rpc(t, body, key.mint(t, baseClaims()), h, "abc"); r.Status != http.StatusBadGateway {
				t.Fatalf("%s %s: status %d, want 502: %s", h, action, r.Status, r.Body)
			}
			if n := fa.executions(k); n != 1 {
				t.Fatalf("%s %s: the agent received the call %d times, want 1", h, action, n)
			}
		}
	}
}

// TestFaultCompressedAnswers: the client accepts gzip (every Go and Python
// HTTP client does) and the agent compresses when asked: the covered call is
// still recorded and replayed. An agent that encodes its answer anyway
// (here "br") is passed through once and its key kept in flight.
func TestFaultCompressedAnswers(t *testing.T) {
	fa, key, sc := faultGate(t, "")
	fa.mode.Store(answerGzip)
	body := jobStartWithKey(t, "k-gzip")
	for i := 0; i < 3; i++ {
		r := sc.rpc(t, body, key.mint(t, baseClaims()), "Accept-Encoding", "gzip")
		if i > 0 && r.Header.Get("X-Supervaize-Idempotent-Replay") != "true" {
			t.Fatalf("call %d not replayed: %d %q", i+1, r.Status, r.Body)
		}
	}
	if n := fa.executions("k-gzip"); n != 1 {
		t.Fatalf("agent executed the gzip call %d times, want 1", n)
	}
	fa.mode.Store(answerEncoded)
	body = jobStartWithKey(t, "k-br")
	if r := sc.rpc(t, body, key.mint(t, baseClaims())); r.Status != 200 || r.Header.Get("Content-Encoding") != "br" {
		t.Fatalf("encoded answer not passed through: %d %v", r.Status, r.Header)
	}
	wantRetryKept(t, fa, key, sc, body, "k-br")
}

// TestFaultCutJSONAnswerKeepsKey: the agent answers HTTP 200 with a well
// framed body that is half its JSON answer (it ended its answer in the
// middle: the call may have run). The answer goes back as it came and the
// key stays in flight: the retry is not forwarded (newcomer finding F8:
// such an answer used to release the key and the call ran twice).
func TestFaultCutJSONAnswerKeepsKey(t *testing.T) {
	fa, key, sc := faultGate(t, "")
	fa.mode.Store(answerCutJSON)
	body := jobStartWithKey(t, "k-cut-json")
	r := sc.rpc(t, body, key.mint(t, baseClaims()))
	if r.Status != http.StatusOK || !strings.HasPrefix(string(r.Body), `{"jsonrpc":"2.0"`) || json.Valid(r.Body) {
		t.Fatalf("the cut answer did not come back as it came: %d %q", r.Status, r.Body)
	}
	wantRetryKept(t, fa, key, sc, body, "k-cut-json")
	if !strings.Contains(sc.logs(t), `"reason":"unrecognized"`) {
		t.Fatal("no warning that the key was kept in flight")
	}
}
