package test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// The faults of issue 12: after each, the agent has executed the confirm
// exactly once, whatever the client retried (docs/idempotency.md).

// faultGate starts a token-mode sidecar with idempotency {extra} in front of
// a fault agent; retries wait 300 ms before idempotency_in_progress.
func faultGate(t *testing.T, extra string) (*faultAgent, *signer, *sidecar) {
	t.Helper()
	fa := startFaultAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, fa.addr(), idemDirective(jw.url(), "			wait_timeout 300ms\n"+extra))
	return fa, key, sc
}

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
	fa.mode.Store(answerOK)
	wantInProgress(t, sc.rpc(t, body, key.mint(t, baseClaims())))
	if n := fa.executions("k-reset"); n != 1 {
		t.Fatalf("agent executed the call %d times, want 1", n)
	}
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
	fa.mode.Store(answerOK)
	wantInProgress(t, sc.rpc(t, body, key.mint(t, baseClaims())))
	if n := fa.executions("k-abort"); n != 1 {
		t.Fatalf("agent executed the call %d times, want 1", n)
	}
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
		"redis":  fmt.Sprintf("			store redis\n			redis_url %s\n", rs.URL()),
	} {
		t.Run(name, func(t *testing.T) {
			fa := startFaultAgent(t)
			key := newSigner(t, "k1")
			jw := startJWKS(t, key.jwk())
			sc := startAdminSidecar(t, fa.addr(), idemDirective(jw.url(), "			wait_timeout 300ms\n"+store))
			fa.mode.Store(answerBlocked)
			body := jobStartWithKey(t, "k-reload-"+name)
			first := make(chan response, 1)
			go func() { first <- sc.rpc(t, body, key.mint(t, baseClaims())) }()
			fa.waitStarted(t, "k-reload-"+name)
			sc.reload(t)
			fa.release()
			resultOf(t, <-first)
			r := sc.rpc(t, body, key.mint(t, baseClaims()))
			if r.Header.Get("X-Supervaize-Idempotent-Replay") != "true" {
				t.Fatalf("retry after the reload not replayed: %d %s", r.Status, r.Body)
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
