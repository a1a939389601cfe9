package test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// TestIdempotentReplayAndConflict: the fixture's job.start (it carries an
// idempotency_key) retried with fresh tokens is answered from the record;
// a changed input, mission_id or job_id is a conflict; the agent counts one call.
func TestIdempotentReplayAndConflict(t *testing.T) {
	ag := startJobStartAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), ""))

	first := sc.rpc(t, withID(jobStartBody(t), "1"), key.mint(t, baseClaims()))
	res1 := resultOf(t, first)
	if rs, _ := res1["replay_safety"].(map[string]any); rs["strictly_idempotent_response"] != true {
		t.Fatalf("first answer lacks strictly_idempotent_response: %s", first.Body)
	}
	if first.Header.Get("X-Supervaize-Idempotent-Replay") != "" {
		t.Fatal("first answer marked as a replay")
	}
	second := sc.rpc(t, withID(jobStartBody(t), `"retry-2"`), key.mint(t, baseClaims()))
	if second.Header.Get("X-Supervaize-Idempotent-Replay") != "true" {
		t.Fatal("replay header missing")
	}
	a2 := decodeRPC(t, second)
	if string(a2.ID) != `"retry-2"` {
		t.Fatalf("replay id %s", a2.ID)
	}
	if a1 := decodeRPC(t, first); string(a1.Result) != string(a2.Result) {
		t.Fatalf("replayed result differs:\n%s\n%s", a1.Result, a2.Result)
	}
	if n := ag.count.Load(); n != 1 {
		t.Fatalf("agent called %d times, want 1", n)
	}
	for name, edit := range map[string]func(map[string]any){
		"input":      func(r map[string]any) { r["input"] = map[string]any{"campaign_id": "other"} },
		"mission_id": func(r map[string]any) { r["mission_id"] = "mission_999" },
		"job_id":     func(r map[string]any) { r["job_id"] = "job_999" },
	} {
		res := resultOf(t, sc.rpc(t, actionBody(t, edit), key.mint(t, baseClaims())))
		errs, _ := res["errors"].([]any)
		if res["status"] != "error" || len(errs) != 1 || errs[0].(map[string]any)["code"] != "idempotency_conflict" {
			t.Fatalf("%s changed: want idempotency_conflict, got %v", name, res)
		}
	}
	if n := ag.count.Load(); n != 1 {
		t.Fatalf("agent called %d times after conflicts, want 1", n)
	}
}

// TestIdempotencyNotRecorded: a 500 from the agent is not recorded; the
// retry forwards again.
func TestIdempotencyNotRecorded(t *testing.T) {
	ag := startJobStartAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), ""))
	ag.fail = true
	if r := sc.rpc(t, jobStartBody(t), key.mint(t, baseClaims())); r.Status != 500 {
		t.Fatalf("agent 500 not passed through: %d", r.Status)
	}
	ag.mu.Lock()
	ag.fail = false
	ag.mu.Unlock()
	resultOf(t, sc.rpc(t, jobStartBody(t), key.mint(t, baseClaims())))
	if n := ag.count.Load(); n != 2 {
		t.Fatalf("agent called %d times, want 2", n)
	}
}

// TestIdempotencyClientGoesAway: the call runs to completion after the
// client disconnects, and the retry gets the recorded answer.
func TestIdempotencyClientGoesAway(t *testing.T) {
	ag := startJobStartAgent(t)
	gate := make(chan struct{})
	ag.gate = gate
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), ""))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", sc.base+"/a2a", strings.NewReader(string(jobStartBody(t))))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", testKey)
		req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+key.mint(t, baseClaims()))
		_, err := http.DefaultClient.Do(req)
		done <- err
	}()
	eventually(t, 15*time.Second, "the agent to receive the call", func() bool { return ag.count.Load() == 1 })
	cancel()
	<-done
	ag.mu.Lock()
	ag.gate = nil
	ag.mu.Unlock()
	close(gate)
	// The retry waits for the in-flight call or replays its record.
	r := sc.rpc(t, jobStartBody(t), key.mint(t, baseClaims()))
	resultOf(t, r)
	if n := ag.count.Load(); n != 1 {
		t.Fatalf("agent called %d times, want 1", n)
	}
}

// TestIdempotencyInProgress: a retry that waits longer than wait_timeout
// gets -32031 idempotency_in_progress.
func TestIdempotencyInProgress(t *testing.T) {
	ag := startJobStartAgent(t)
	gate := make(chan struct{})
	ag.gate = gate
	defer close(gate)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), "			wait_timeout 1s\n"))
	first := make(chan struct{})
	go func() {
		defer close(first)
		req, _ := http.NewRequest("POST", sc.base+"/a2a", strings.NewReader(string(jobStartBody(t))))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", testKey)
		req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+key.mint(t, baseClaims()))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	eventually(t, 15*time.Second, "the first call in flight", func() bool { return ag.count.Load() == 1 })
	wantRPCError(t, sc.rpc(t, jobStartBody(t), key.mint(t, baseClaims())), -32031, "idempotency_in_progress")
	if n := ag.count.Load(); n != 1 {
		t.Fatalf("agent called %d times", n)
	}
}

// TestIdempotencyRedisAcrossReplicas: 50 concurrent identical confirms
// through two sidecar handler instances (two sites, each with its own Redis
// store) sharing one real redis-server reach the agent exactly once; with
// Redis stopped covered calls fail closed, and work again once it is back.
func TestIdempotencyRedisAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	ag := startJobStartAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	site := func(port int) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\t}\n\treverse_proxy %s\n}\n", port,
			idemDirective(jw.url(), "			store redis\n			redis_url "+rs.URL()+"\n"), ag.addr())
	}
	p1 := freePort(t)
	sc2, err := runCaddyfile(t, "", func(p2 int) string { return site(p1) + site(p2) })
	if err != nil {
		t.Fatal(err)
	}
	bases := []string{fmt.Sprintf("http://127.0.0.1:%d", p1), sc2.base}
	tok := key.mint(t, baseClaims())
	body := jobStartBody(t)

	var wg sync.WaitGroup
	results := make([]string, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sc := &sidecar{base: bases[i%2]}
			r := sc.rpc(t, body, tok)
			a := decodeRPC(t, r)
			if a.Error != nil {
				t.Errorf("call %d: %s", i, r.Body)
				return
			}
			results[i] = string(a.Result)
		}(i)
	}
	wg.Wait()
	if n := ag.count.Load(); n != 1 {
		t.Fatalf("agent called %d times across two replicas, want 1", n)
	}
	for i := range results {
		if results[i] != results[0] {
			t.Fatalf("answers differ: %s vs %s", results[i], results[0])
		}
	}

	rs.Stop()
	fresh := freshJobStart(t)
	for _, b := range bases {
		sc := &sidecar{base: b}
		wantRPCError(t, sc.rpc(t, fresh, tok), -32031, "idempotency_store_unavailable")
		// A call that is not covered is unaffected.
		if a := decodeRPC(t, sc.rpc(t, actionFor(t, "job.sync"), tok)); a.Error != nil {
			t.Fatalf("job.sync refused with Redis down: %s", a.Error.Message)
		}
	}
	if n := ag.count.Load(); n != 3 {
		t.Fatalf("agent called %d times, want 3 (the first confirm and two job.sync)", n)
	}
	// Readiness stays 200 (calls that are not covered still work) with a
	// note, its error text only in the keyed status.
	ready := string(do(t, "GET", bases[0]+"/_sidecar/ready", nil).Body)
	if !strings.Contains(ready, "idempotency store failing") || !strings.Contains(ready, `"ready":true`) || strings.Contains(ready, "last:") {
		t.Errorf("readiness %s: want ready with an idempotency store note, without the error text", ready)
	}
	if st := string(do(t, "GET", bases[0]+"/_sidecar/status", nil, "X-API-Key", testKey).Body); !strings.Contains(st, "idempotency store failing") || !strings.Contains(st, "last:") {
		t.Errorf("status %s: want the idempotency store note with its last error", st)
	}
	rs.Restart()
	eventually(t, 15*time.Second, "Redis to be usable again", func() bool {
		a := decodeRPC(t, (&sidecar{base: bases[0]}).rpc(t, fresh, tok))
		return a.Error == nil
	})
	resultOf(t, (&sidecar{base: bases[1]}).rpc(t, fresh, tok))
	if n := ag.count.Load(); n != 4 {
		t.Fatalf("agent called %d times, want 4", n)
	}
	if ready := string(do(t, "GET", bases[0]+"/_sidecar/ready", nil).Body); strings.Contains(ready, "idempotency store failing") {
		t.Errorf("readiness %s: the note outlived the store's recovery", ready)
	}
}

// TestIdempotencyTTL: after ttl the record is gone and a retry forwards again.
func TestIdempotencyTTL(t *testing.T) {
	ag := startJobStartAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), "			upstream_timeout 1s\n			lock_ttl 2s\n			ttl 2s\n"))
	tok := key.mint(t, baseClaims())
	resultOf(t, sc.rpc(t, jobStartBody(t), tok))
	eventually(t, 15*time.Second, "the record to expire", func() bool {
		r := sc.rpc(t, jobStartBody(t), tok)
		return r.Header.Get("X-Supervaize-Idempotent-Replay") == "" && ag.count.Load() == 2
	})
}

// TestIdempotencyMissingKey: a covered call whose idempotency_key is
// absent, null or "" has no key (the SDK's model reads null as no key, and
// "" is no usable key: docs/idempotency.md, "No key"): it is forwarded as is
// every time, counted and marked missing_key on its audit line, unless
// require_idempotency_key is on, which refuses all three.
func TestIdempotencyMissingKey(t *testing.T) {
	ag := startJobStartAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	noKeys := map[string][]byte{
		"absent": actionBody(t, func(r map[string]any) { delete(r, "idempotency_key") }),
		"null":   actionBody(t, func(r map[string]any) { r["idempotency_key"] = nil }),
		"empty":  actionBody(t, func(r map[string]any) { r["idempotency_key"] = "" }),
	}
	sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), ""))
	for name, body := range noKeys {
		ag.reset()
		resultOf(t, sc.rpc(t, body, key.mint(t, baseClaims())))
		resultOf(t, sc.rpc(t, body, key.mint(t, baseClaims())))
		if n := ag.count.Load(); n != 2 {
			t.Errorf("%s key: agent called %d times, want 2 (no key: no replay)", name, n)
		}
	}
	// The audit line is written when the request ends, after its answer.
	eventually(t, 15*time.Second, "six audit lines marked missing_key", func() bool {
		return strings.Count(sc.logs(t), `"idempotency":"missing_key"`) == 6
	})
	ag.reset()
	sc = startSidecar(t, ag.addr(), idemDirective(jw.url(), "			require_idempotency_key on\n"))
	for name, body := range noKeys {
		if r := sc.rpc(t, body, key.mint(t, baseClaims())); !strings.Contains(string(r.Body), "idempotency_key_required") {
			t.Errorf("%s key with require_idempotency_key on: %s", name, r.Body)
		}
		wantRPCError(t, sc.rpc(t, body, key.mint(t, baseClaims())), -32602, "")
	}
	nothingReached(t, ag.agent)
}

// TestIdempotencyTimeoutKeepsKey: a confirm cut by the upstream timeout may
// still be running in the agent: its retry is not executed a second time
// (it waits and gets idempotency_in_progress) until lock_ttl.
func TestIdempotencyTimeoutKeepsKey(t *testing.T) {
	ag := startJobStartAgent(t)
	gate := make(chan struct{})
	defer close(gate)
	ag.gate = gate
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), "			upstream_timeout 1s\n			lock_ttl 1m\n			wait_timeout 1s\n"))
	r := sc.rpc(t, jobStartBody(t), key.mint(t, baseClaims()))
	if r.Status != http.StatusGatewayTimeout {
		t.Fatalf("first call: %d %s", r.Status, r.Body)
	}
	wantRPCError(t, sc.rpc(t, jobStartBody(t), key.mint(t, baseClaims())), -32031, "idempotency_in_progress")
	if n := ag.count.Load(); n != 1 {
		t.Fatalf("agent called %d times, want 1", n)
	}
}

// TestBootstrapNeverIdempotent: a bootstrap action covered by idempotency
// (no verified workspace) is never answered from, nor recorded into, the
// store: another workspace cannot read or poison it.
func TestBootstrapNeverIdempotent(t *testing.T) {
	ag := startJobStartAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), "			actions workspace_binding.create\n"))
	call := func(ws, secret string) {
		body := actionBody(t, func(r map[string]any) {
			r["action"], r["surface"] = "workspace_binding.create", "workspace_binding.create"
			r["workspace"] = map[string]any{"id": ws}
			r["idempotency_key"] = "bind-1"
			r["input"] = map[string]any{"api_token": secret}
		})
		r := sc.rpc(t, body, "")
		if r.Header.Get("X-Supervaize-Idempotent-Replay") != "" {
			t.Fatalf("bootstrap call for %s answered from the store", ws)
		}
		resultOf(t, r)
	}
	call("wsB", "B-secret")
	call("wsB", "B-secret")
	call("wsC", "attacker")
	if n := ag.count.Load(); n != 3 {
		t.Fatalf("agent called %d times, want 3", n)
	}
}

// TestIdempotencyInterimAnswerNotTheRecord: an agent that sends an
// informational answer (103 Early Hints) before its result has the result
// recorded and replayed, not the 103.
func TestIdempotencyInterimAnswerNotTheRecord(t *testing.T) {
	ag := startJobStartAgent(t)
	inner := ag.respond
	ag.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		inner(w, r, body)
	}
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), ""))
	body := freshJobStart(t)
	first := sc.rpc(t, body, key.mint(t, baseClaims()))
	resultOf(t, first)
	again := sc.rpc(t, body, key.mint(t, baseClaims()))
	resultOf(t, again)
	if again.Status != http.StatusOK || again.Header.Get("X-Supervaize-Idempotent-Replay") != "true" {
		t.Errorf("retry: %d replay=%q, want 200 replayed from the record", again.Status, again.Header.Get("X-Supervaize-Idempotent-Replay"))
	}
	if n := ag.count.Load(); n != 1 {
		t.Errorf("agent called %d times, want 1", n)
	}
}
