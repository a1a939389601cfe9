package test

// Attacks on the one forward of an /a2a call (gate/idempotency.go sendCall
// and Gate.forward, gate/admit.go admitForward, gate/forward.go
// dropForForward, forwardPlain and forwardCovered), on whose call it is
// (the decision's ws, set by allow in gate/decision.go) and on the body
// step's refusals written by refuseREST (gate/body.go boundBody). Each
// probe asserts what the agent received: nothing for a refusal.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// wsEchoAgent answers every /a2a call with a result naming the verified
// workspace and mode it received, so that an answer served from a record
// tells whose forward made it.
func wsEchoAgent(t *testing.T) *agent {
	ag := startAgent(t)
	ag.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		var env struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal(body, &env)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"status":"ok","verified_ws":%q,"verified_mode":%q,"effects":[]}}`,
			env.ID, r.Header.Get("X-Supervaize-Verified-Workspace-Id"), r.Header.Get("X-Supervaize-Verified-Mode"))
	}
	return ag
}

// echoed is the verified workspace and mode wsEchoAgent's answer names.
func echoed(t *testing.T, r response) (ws, mode string, a rpcAnswer) {
	t.Helper()
	a = decodeRPC(t, r)
	if a.Error != nil {
		return "", "", a
	}
	var res struct {
		WS   string `json:"verified_ws"`
		Mode string `json:"verified_mode"`
	}
	if err := json.Unmarshal(a.Result, &res); err != nil {
		t.Fatalf("result: %v: %s", err, r.Body)
	}
	return res.WS, res.Mode, a
}

// requestOf decodes what the agent received of an action call: its action,
// its workspace and its request_id.
func requestOf(t *testing.T, rec recorded) (action, ws, requestID string) {
	t.Helper()
	var env struct {
		Params struct {
			Req struct {
				Action    string `json:"action"`
				RequestID string `json:"request_id"`
				Workspace struct {
					ID string `json:"id"`
				} `json:"workspace"`
			} `json:"action_request"`
		} `json:"params"`
	}
	if err := json.Unmarshal(rec.Body, &env); err != nil {
		t.Fatalf("the agent got a body that is not JSON: %v", err)
	}
	return env.Params.Req.Action, env.Params.Req.Workspace.ID, env.Params.Req.RequestID
}

// TestAttackIdempotencyKeyScopedByWorkspaceAtOnce: several workspaces send
// the same covered job.start (one idempotency key, one fingerprint) many
// times at once, with plain calls beside them. The record's scope is the
// decision's ws: the agent receives exactly one job.start per workspace,
// with that workspace's verified header, and every answer a workspace gets
// (forwarded or replayed) is its own forward's, never another workspace's
// record. In local mode the scope is the request's workspace, the same way.
func TestAttackIdempotencyKeyScopedByWorkspaceAtOnce(t *testing.T) {
	const nws = 5
	n := randomID()
	ws := make([]string, nws)
	for i := range ws {
		ws[i] = fmt.Sprintf("ws-%d-%s", i, n)
	}
	t.Run("token", func(t *testing.T) {
		ag := wsEchoAgent(t)
		key := newSigner(t, "k1")
		jw := startJWKS(t, key.jwk())
		sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), "")+"\t\treferences\n")
		tok := make([]string, nws)
		for i := range ws {
			tok[i] = key.mintWith(t, func(c jwt.MapClaims) {
				c["workspace_id"], c["workspace_slug"], c["scopes"] = ws[i], ws[i], refScopes
			})
		}
		sameKeyEveryWorkspace(t, sc, ag, ws, tok, "token")
	})
	t.Run("local", func(t *testing.T) {
		ag := wsEchoAgent(t)
		sc := startSidecar(t, ag.addr(), localDirective("\t\tidempotency {\n\t\t}\n\t\treferences\n"))
		sameKeyEveryWorkspace(t, sc, ag, ws, make([]string, nws), "local")
	})
}

// The calls sameKeyEveryWorkspace sends per workspace, at once: covered
// job.start calls sharing one idempotency key, and plain job.sync calls.
const sameKeyStarts, sameKeyPlains = 6, 3

// sameKeyEveryWorkspace has each workspace ws[i] (token tok[i], "" in
// local mode) send sameKeyStarts job.start calls with one idempotency key
// and sameKeyPlains job.sync calls, all at once, through sc to wsEchoAgent
// ag; then wantOnePerWorkspace. Every answer must be the workspace's own
// (mode mode), a job.start's possibly a replay or in progress.
func sameKeyEveryWorkspace(t *testing.T, sc *sidecar, ag *agent, ws, tok []string, mode string) {
	idem := "idem-shared-" + randomID()
	var mu sync.Mutex
	replays := 0
	var wg sync.WaitGroup
	for i := range ws {
		for k := range sameKeyStarts + sameKeyPlains {
			wg.Add(1)
			go func() {
				defer wg.Done()
				action := "job.start"
				if k >= sameKeyStarts {
					action = "job.sync"
				}
				body := refAction(t, ws[i], action, fmt.Sprintf("c-%d-%d", i, k), map[string]any{"idempotency_key": idem})
				r := sc.rpc(t, body, tok[i])
				got, gotMode, a := echoed(t, r)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case a.Error != nil && action == "job.start" && a.Error.Code == -32031:
					// idempotency_in_progress: a retry that waited past wait_timeout.
				case a.Error != nil:
					t.Errorf("workspace %s, %s: %s", ws[i], action, r.Body)
				case got != ws[i] || gotMode != mode:
					t.Errorf("workspace %s got an answer made for workspace %q (mode %q): %s", ws[i], got, gotMode, r.Body)
				case r.Header.Get("X-Supervaize-Idempotent-Replay") == "true":
					replays++
				}
			}()
		}
	}
	wg.Wait()
	if replays == 0 {
		t.Errorf("no job.start was answered as a replay")
	}
	wantOnePerWorkspace(t, ag, ws, mode)
}

// wantOnePerWorkspace asserts what ag received of sameKeyEveryWorkspace's
// calls: one job.start per workspace and every job.sync, each with its
// own workspace's verified header and mode.
func wantOnePerWorkspace(t *testing.T, ag *agent, ws []string, mode string) {
	t.Helper()
	startsAt := map[string]int{}
	syncs := 0
	for _, rec := range ag.received() {
		action, reqWS, _ := requestOf(t, rec)
		if v := rec.Header.Values("X-Supervaize-Verified-Workspace-Id"); len(v) != 1 || v[0] != reqWS {
			t.Errorf("a %s of %s reached the agent with verified workspace %q", action, reqWS, v)
		}
		if v := rec.Header.Get("X-Supervaize-Verified-Mode"); v != mode {
			t.Errorf("a %s of %s reached the agent in mode %q", action, reqWS, v)
		}
		switch action {
		case "job.start":
			startsAt[reqWS]++
		case "job.sync":
			syncs++
		}
	}
	for _, w := range ws {
		if startsAt[w] != 1 {
			t.Errorf("workspace %s: %d job.start reached the agent, want 1", w, startsAt[w])
		}
	}
	if syncs != len(ws)*sameKeyPlains {
		t.Errorf("%d job.sync reached the agent, want %d", syncs, len(ws)*sameKeyPlains)
	}
}

// sidecarStatus is /_sidecar/status, decoded.
func sidecarStatus(t *testing.T, sc *sidecar) map[string]any {
	t.Helper()
	r := do(t, http.MethodGet, sc.base+"/_sidecar/status", nil, "X-API-Key", testReadKey)
	if r.Status != http.StatusOK {
		t.Fatalf("status: %d %s", r.Status, r.Body)
	}
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// bodyMemoryIdle waits until no /a2a body holds any of body_memory (the
// budget is the process's: the tests before have given theirs back).
func bodyMemoryIdle(t *testing.T, sc *sidecar, what string) {
	t.Helper()
	var bm map[string]any
	eventually(t, 10*time.Second, what+": body_memory given back", func() bool {
		bm, _ = sidecarStatus(t, sc)["body_memory"].(map[string]any)
		return bm["in_use"] == float64(0) && bm["owners_holding"] == float64(0)
	}, func() string { return fmt.Sprintf("body_memory %v", bm) })
}

// TestAttackPlainRefusalsLeaveNoSlotNoBody: plain (uncovered) calls refused
// by the references after the limits admitted them give their concurrency
// slot back (concurrency 1: the next call passes), calls refused by the
// rate bind and claim nothing (another workspace then uses the job and the
// request_id), covered calls refused inside the guard likewise; afterwards
// no body holds any of body_memory. The agent receives the allowed calls
// only.
func TestAttackPlainRefusalsLeaveNoSlotNoBody(t *testing.T) {
	ag, _, sc, tokA, tokB := refSidecar(t, func(jwks string) string {
		return idemDirective(jwks, "") +
			"\t\treferences\n\t\tlimits {\n\t\t\tconcurrency job.stop job.start 1\n\t\t\trate job.sync 1/h\n\t\t}\n"
	})
	n := randomID()
	jobA := "jobA-" + n
	wantPassed(t, ag, "A's job.stop", func() response {
		return sc.rpc(t, refAction(t, wsA, "job.stop", "a1", map[string]any{"job_id": jobA}), tokA)
	})
	// A large body, so that a share it kept would show.
	pad := strings.Repeat("p", 256<<10)
	for i := range 3 {
		id := fmt.Sprintf("b%d", i)
		wantRefused(t, ag, "job_id", id, func() response {
			return sc.rpc(t, refAction(t, wsB, "job.stop", id, map[string]any{"job_id": jobA, "input": map[string]any{"pad": pad}}), tokB)
		})
		wantRefused(t, ag, "job_id", id, func() response {
			return sc.rpc(t, refAction(t, wsB, "job.start", id, map[string]any{"job_id": jobA, "input": map[string]any{"pad": pad}}), tokB)
		})
	}
	wantPassed(t, ag, "B's own job.stop (concurrency 1: no slot was kept)", func() response {
		return sc.rpc(t, refAction(t, wsB, "job.stop", "b4", map[string]any{"job_id": "jobB-" + n}), tokB)
	})
	wantPassed(t, ag, "B's own job.start (concurrency 1: no slot was kept)", func() response {
		return sc.rpc(t, refAction(t, wsB, "job.start", "b5", map[string]any{"job_id": "jobB2-" + n}), tokB)
	})
	wantPassed(t, ag, "B's job.sync within its rate", func() response {
		return sc.rpc(t, refAction(t, wsB, "job.sync", "b6", nil), tokB)
	})
	jobX, reqX := "jobX-"+n, "reqX-"+n
	before := ag.count.Load()
	wantRateLimited(t, sc.rpc(t, refAction(t, wsB, "job.sync", "b7",
		map[string]any{"job_id": jobX, "request_id": reqX, "input": map[string]any{"pad": pad}}), tokB), "rate_limited")
	if ag.count.Load() != before {
		t.Fatal("B's rate-limited job.sync reached the agent")
	}
	wantPassed(t, ag, "A's job.sync with the job and request_id B's refused call named", func() response {
		return sc.rpc(t, refAction(t, wsA, "job.sync", "a2", map[string]any{"job_id": jobX, "request_id": reqX}), tokA)
	})
	bodyMemoryIdle(t, sc, "after the refused calls")
}

// TestAttackRefusedCallsClaimNoEvents: a request_id is attributed to the
// workspace whose allowed call reached the agent with it, and to nobody
// else. With the references' request field (the claim records it):
// workspace B's calls refused by the rate and by a foreign job_id claim
// nothing, so A's later calls with those request_ids are allowed, and their
// effects reach A's filtered stream and never B's; B's own allowed call's
// effect reaches B's only. Without the request field (the request memory
// remembers): a request_id both workspaces used reaches neither.
func TestAttackRefusedCallsClaimNoEvents(t *testing.T) {
	forEachEventsMode(t, func(t *testing.T, mode func(*agent) string) {
		t.Run("claimed", func(t *testing.T) {
			ag := startAgent(t)
			sse := broadcastSSE(ag)
			key := newSigner(t, "k1")
			jw := startJWKS(t, key.jwk())
			sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)+
				"\t\treferences\n\t\tlimits {\n\t\t\trate job.stop 1/h\n\t\t}\n"))
			tokA, tokB := refTokens(t, key)
			n := randomID()
			r1, r2, rb, ra := "r1-"+n, "r2-"+n, "rb-"+n, "ra-"+n
			jobA := "jobA-" + n
			wantPassed(t, ag, "B's job.stop", func() response {
				return sc.rpc(t, refAction(t, wsB, "job.stop", "b1", map[string]any{"job_id": "jobB-" + n, "request_id": rb}), tokB)
			})
			before := ag.count.Load()
			wantRateLimited(t, sc.rpc(t, refAction(t, wsB, "job.stop", "b2", map[string]any{"request_id": r1}), tokB), "rate_limited")
			if ag.count.Load() != before {
				t.Fatal("B's rate-limited call reached the agent")
			}
			wantPassed(t, ag, "A's job.sync", func() response {
				return sc.rpc(t, refAction(t, wsA, "job.sync", "a1", map[string]any{"job_id": jobA, "request_id": ra}), tokA)
			})
			wantRefused(t, ag, "job_id", "b3", func() response {
				return sc.rpc(t, refAction(t, wsB, "job.sync", "b3", map[string]any{"job_id": jobA, "request_id": r2}), tokB)
			})
			for _, rid := range []string{r1, r2} {
				wantPassed(t, ag, "A's call with a request_id only B's refused call named", func() response {
					return sc.rpc(t, refAction(t, wsA, "job.sync", "a2", map[string]any{"request_id": rid}), tokA)
				})
			}
			wantEffects(t, sc, sse, tokA, tokB, []string{r1, r2, rb, ra}, []string{r1, r2, ra}, []string{rb})
		})
		t.Run("remembered", func(t *testing.T) {
			ag := startAgent(t)
			sse := broadcastSSE(ag)
			key := newSigner(t, "k1")
			jw := startJWKS(t, key.jwk())
			sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), mode(ag)+"\t\treferences {\n\t\t\tfields job_id\n\t\t}\n"))
			tokA, tokB := refTokens(t, key)
			n := randomID()
			both, ra, rb := "both-"+n, "ra-"+n, "rb-"+n
			for _, c := range []struct{ ws, tok, rid string }{{wsA, tokA, both}, {wsB, tokB, both}, {wsA, tokA, ra}, {wsB, tokB, rb}} {
				wantPassed(t, ag, c.ws+"'s job.sync", func() response {
					return sc.rpc(t, refAction(t, c.ws, "job.sync", "x", map[string]any{"request_id": c.rid}), c.tok)
				})
			}
			wantEffects(t, sc, sse, tokA, tokB, []string{both, ra, rb}, []string{ra}, []string{rb})
		})
	})
}

// wantEffects opens A's and B's filtered streams, has the agent send an
// effect for each of sent then a heartbeat, and asserts each stream gets
// exactly its effects (wantA, wantB), in order, then the heartbeat.
func wantEffects(t *testing.T, sc *sidecar, sse *sseBroadcast, tokA, tokB string, sent, wantA, wantB []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type stream struct {
		name string
		rd   *bufio.Reader
		want []string
	}
	var streams []stream
	for _, s := range []struct {
		name, tok string
		want      []string
	}{{"A", tokA, wantA}, {"B", tokB, wantB}} {
		resp, rd := openStream(t, ctx, sc.base+"/a2a/events", "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", "Bearer "+s.tok)
		defer resp.Body.Close()
		if e := readEvent(t, rd); !strings.Contains(e, "supervaizer.connected") {
			t.Fatalf("%s's first event %q", s.name, e)
		}
		streams = append(streams, stream{s.name, rd, s.want})
	}
	var evs []string
	for _, rid := range sent {
		evs = append(evs, effect(rid))
	}
	sse.send(append(evs, "event: supervaizer.heartbeat\ndata: {\"status\": \"ok\"}\n\n")...)
	for _, s := range streams {
		for _, want := range append(s.want, "supervaizer.heartbeat") {
			if e := readEvent(t, s.rd); !strings.Contains(e, want) {
				t.Fatalf("workspace %s's stream: got %q, want %s", s.name, e, want)
			}
		}
	}
}

// TestAttackUnforwardedCallsCarryNoVerifiedContext: a covered confirm
// answered without the agent (a replay, a conflict, a refusal of the
// limits inside the guard) never runs the one forward, so Caddy's handlers
// after the gate see no verified header; the forwarded call does, and with
// forward_token off its token is gone from the request the agent and the
// placeholders see. A refused call's key is released (refused again, never
// in progress).
func TestAttackUnforwardedCallsCarryNoVerifiedContext(t *testing.T) {
	ag := wsEchoAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := seenSidecar(t, ag.addr(), idemDirective(jw.url(), "")+"\t\tforward_token off\n\t\treferences\n\t\tlimits {\n\t\t\trate job.start 2/h\n\t\t}\n")
	tokA, _ := refTokens(t, key)
	k1, k2, k3 := "k1-"+randomID(), "k2-"+randomID(), "k3-"+randomID()
	start := func(k string, input map[string]any) []byte {
		refs := map[string]any{"idempotency_key": k}
		if input != nil {
			refs["input"] = input
		}
		return refAction(t, wsA, "job.start", "a", refs)
	}
	seen := func(r response) string { return r.Header.Get("X-Seen-Verified") + "|" + r.Header.Get("X-Seen-Mode") }

	r := sc.rpc(t, start(k1, nil), tokA)
	if ws, _, a := echoed(t, r); a.Error != nil || ws != wsA || seen(r) != wsA+"|token" {
		t.Fatalf("A's first job.start: seen %q, %s", seen(r), r.Body)
	}
	if got := ag.last(t).Header.Get("X-Supervaize-Workspace-Authorization"); got != "" {
		t.Fatal("the agent got the token with forward_token off")
	}
	before := ag.count.Load()
	r = sc.rpc(t, start(k1, nil), tokA)
	if r.Header.Get("X-Supervaize-Idempotent-Replay") != "true" || seen(r) != "|" {
		t.Fatalf("A's replay: replay %q, seen %q", r.Header.Get("X-Supervaize-Idempotent-Replay"), seen(r))
	}
	r = sc.rpc(t, start(k1, map[string]any{"other": true}), tokA)
	if decodeRPC(t, r); !strings.Contains(string(r.Body), `"idempotency_conflict"`) || seen(r) != "|" {
		t.Fatalf("A's conflicting call: seen %q, %s", seen(r), r.Body)
	}
	if ag.count.Load() != before {
		t.Fatal("a replay or a conflict reached the agent")
	}
	if r := sc.rpc(t, start(k2, nil), tokA); seen(r) != wsA+"|token" {
		t.Fatalf("A's second key: seen %q, %s", seen(r), r.Body)
	}
	before = ag.count.Load()
	for range 2 {
		r = sc.rpc(t, start(k3, nil), tokA)
		wantRateLimited(t, r, "rate_limited")
		if seen(r) != "|" {
			t.Fatalf("a rate-limited covered call carried the verified context: %q", seen(r))
		}
	}
	if ag.count.Load() != before {
		t.Fatal("a rate-limited covered call reached the agent")
	}
}

// TestAttackBootstrapThroughTheOneForward: a bootstrap call (no workspace:
// ws "") carrying a valid token of workspace A and forged verified headers
// goes through the one forward as mode bootstrap only: the agent gets the
// mode header and no other verified header, and no token (forward_token
// off); it binds no reference and claims no request_id (B then uses both);
// the limits key it on the transport key, and a call they refuse reaches
// nothing.
func TestAttackBootstrapThroughTheOneForward(t *testing.T) {
	ag, _, sc, tokA, tokB := refSidecar(t, func(jwks string) string {
		return idemDirective(jwks, "") +
			"\t\tforward_token off\n\t\treferences\n\t\tlimits {\n\t\t\trate workspace_binding.* 2/h\n\t\t}\n"
	})
	n := randomID()
	job, rid := "boot-job-"+n, "boot-req-"+n
	spoof := []string{"X-Supervaize-Verified-Workspace-Id", wsA, "X-Supervaize-Verified-Mode", "token"}
	for i := range 2 {
		wantPassed(t, ag, "a bootstrap call", func() response {
			return sc.rpc(t, refAction(t, "ws-made-up-"+n, "workspace_binding.options", "boot",
				map[string]any{"job_id": job, "request_id": rid}), tokA, spoof...)
		})
		got := ag.last(t).Header
		for name := range got {
			if strings.HasPrefix(name, "X-Supervaize-Verified-") && name != "X-Supervaize-Verified-Mode" {
				t.Errorf("bootstrap call %d: the agent got %s: %q", i, name, got.Values(name))
			}
		}
		if v := got.Values("X-Supervaize-Verified-Mode"); len(v) != 1 || v[0] != "bootstrap" {
			t.Errorf("bootstrap call %d: verified mode %q", i, v)
		}
		if got.Get("X-Supervaize-Workspace-Authorization") != "" {
			t.Errorf("bootstrap call %d: the agent got the token with forward_token off", i)
		}
	}
	before := ag.count.Load()
	wantRateLimited(t, sc.rpc(t, refAction(t, "ws-other-"+n, "workspace_binding.options", "boot", nil), tokB), "rate_limited")
	if ag.count.Load() != before {
		t.Fatal("a rate-limited bootstrap call reached the agent")
	}
	wantPassed(t, ag, "B's call with the job and request_id of the bootstrap calls", func() response {
		return sc.rpc(t, refAction(t, wsB, "job.stop", "b", map[string]any{"job_id": job, "request_id": rid}), tokB)
	})
}

// TestAttackPassthroughAnswerAudited: a covered answer too large to record
// reaches the client byte for byte, once; its audit line is an allow with
// idempotency too_large; its key stays in flight, so the retry is refused
// idempotency_in_progress (a deny line) and reaches nothing.
func TestAttackPassthroughAnswerAudited(t *testing.T) {
	ag := startAgent(t)
	big := strings.Repeat("x", 8<<10)
	var sent []byte
	var mu sync.Mutex
	ag.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		var env struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal(body, &env)
		b := []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"status":"ok","big":%q}}`, env.ID, big))
		mu.Lock()
		sent = b
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Agent-Said", "yes")
		w.Write(b)
	}
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), "\t\t\tmax_record_bytes 1KiB\n\t\t\twait_timeout 1s\n")+"\t\taudit_log all\n")
	tok := key.mint(t, baseClaims())
	body := freshJobStart(t)
	r := sc.rpc(t, body, tok)
	mu.Lock()
	want := sent
	mu.Unlock()
	if r.Status != http.StatusOK || string(r.Body) != string(want) || r.Header.Get("X-Agent-Said") != "yes" ||
		r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Supervaize-Idempotent-Replay") != "" {
		t.Fatalf("the passed-through answer: %d %v, %d bytes (want %d)", r.Status, r.Header, len(r.Body), len(want))
	}
	wantAuditLine(t, sc, 1, "allow", "token", "too_large")
	wantInProgress(t, sc.rpc(t, body, tok))
	wantAuditLine(t, sc, 2, "deny", "idempotency_in_progress", "idempotency_in_progress")
	if n := ag.count.Load(); n != 1 {
		t.Fatalf("the agent received %d calls, want 1", n)
	}
}

// wantAuditLine waits for the n-th audit line and asserts its outcome,
// code and idempotency fields.
func wantAuditLine(t *testing.T, sc *sidecar, n int, outcome, code, idem string) {
	t.Helper()
	var lines []map[string]any
	eventually(t, 5*time.Second, fmt.Sprintf("audit line %d", n), func() bool {
		lines = auditLines(t, sc)
		return len(lines) >= n
	}, func() string { return fmt.Sprint(lines) })
	if l := lines[n-1]; l["outcome"] != outcome || l["code"] != code || l["idempotency"] != idem {
		t.Fatalf("audit line %d: %v, want %s %s idempotency %s", n, l, outcome, code, idem)
	}
}

// rawAnswer is one HTTP/1.1 answer read off a connection: its status line,
// its header (Date dropped; Connection: close, which Go's reader takes
// out of the header, as close) and its body, and, when it said close,
// whether the connection was closed after it.
type rawAnswer struct {
	status string
	header http.Header
	body   string
	close  bool // the answer said Connection: close
	closed bool
}

// rawRefusal sends head (a whole request head, CRLF-terminated) then body on
// a new connection and reads the answer.
func rawRefusal(t *testing.T, sc *sidecar, head, body string) rawAnswer {
	t.Helper()
	c := rawConn(t, sc)
	if _, err := io.WriteString(c, head+body); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	rd := bufio.NewReader(c)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Header.Del("Date")
	a := rawAnswer{status: resp.Status, header: resp.Header, body: string(b), close: resp.Close}
	if a.close {
		_, err = rd.ReadByte()
		a.closed = err == io.EOF
	}
	return a
}

// TestAttackBodyRefusalsOnTheWire: the body step's refusals, returned by
// boundBody and written by refuseREST, go out as they always did: a GET
// with a body (declared or chunked) 400 with Connection: close and the
// connection closed, a streamed body with a Content-Encoding 415, a
// declared length over max_body_data 413; each exactly the detail body,
// its Content-Type and Content-Length, and one deny audit line (body_on_read,
// body); the sidecar's own endpoints answer a GET with a body the same
// way, without an audit line. Over HTTP/2 the 400 is the same body. The
// agent receives nothing.
func TestAttackBodyRefusalsOnTheWire(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc, err := runCaddyfile(t, "\tservers {\n\t\tprotocols h1 h2c\n\t}\n", func(port int) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\t}\n\treverse_proxy %s\n}\n", port,
			jwksDirective(jw.url(), "\t\tmax_body_data 1KiB\n"), ag.addr())
	})
	if err != nil {
		t.Fatal(err)
	}
	_, tokB := refTokens(t, key)
	host := hostOf(sc)
	detail := func(s string) string { return `{"detail":"` + s + `"}` }
	dataHead := func(extra string) string {
		return "POST /api/agents/" + testAgent + "/data/contacts/ HTTP/1.1\r\nHost: " + host + "\r\nX-API-Key: " + testKey +
			"\r\nX-Supervaize-Workspace-Id: " + wsB + "\r\nX-Supervaize-Workspace-Authorization: Bearer " + tokB +
			"\r\nContent-Type: application/json\r\n" + extra + "\r\n"
	}
	small := `{"email":"x@example.com"}`
	cases := []struct {
		name, head, body string
		status, detail   string
		close            bool
		route, code      string // the audit line ("" for none)
	}{
		{"events GET with a declared body", "GET /a2a/events HTTP/1.1\r\nHost: " + host + "\r\nX-API-Key: " + testReadKey +
			"\r\nContent-Length: 5\r\n\r\n", "hello", "400 Bad Request", "GET and HEAD requests take no body", true, "events", "body_on_read"},
		{"data GET with a chunked body", "GET /api/agents/" + testAgent + "/data/contacts/c1 HTTP/1.1\r\nHost: " + host +
			"\r\nX-API-Key: " + testKey + "\r\nTransfer-Encoding: chunked\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n",
			"400 Bad Request", "GET and HEAD requests take no body", true, "data", "body_on_read"},
		{"data POST with a Content-Encoding", dataHead("Content-Encoding: gzip\r\nContent-Length: " + strconv.Itoa(len(small)) + "\r\n"), small,
			"415 Unsupported Media Type", "Content-Encoding is not supported", false, "data", "body"},
		{"data POST over max_body_data", dataHead("Content-Length: 2048\r\n"), strings.Repeat(" ", 2048),
			"413 Request Entity Too Large", "Request body too large", false, "data", "body"},
		{"/_sidecar/live GET with a body", "GET /_sidecar/live HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 5\r\n\r\n", "hello",
			"400 Bad Request", "GET and HEAD requests take no body", true, "", ""},
	}
	for _, c := range cases {
		lines := len(auditLines(t, sc))
		got := rawRefusal(t, sc, c.head, c.body)
		want := http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(detail(c.detail)))}}
		got.header.Del("Server") // Caddy's own, on every answer
		if got.status != c.status || got.body != detail(c.detail) || fmt.Sprint(got.header) != fmt.Sprint(want) || got.close != c.close {
			t.Errorf("%s: %s %v close %v %s\nwant %s %v close %v %s", c.name, got.status, got.header, got.close, got.body,
				c.status, want, c.close, detail(c.detail))
		}
		if c.close && got.close && !got.closed {
			t.Errorf("%s: the connection stayed open after the refusal", c.name)
		}
		all := auditLines(t, sc)
		switch {
		case c.code == "" && len(all) != lines:
			t.Errorf("%s: an audit line was written: %v", c.name, all[len(all)-1])
		case c.code != "" && len(all) != lines+1:
			t.Errorf("%s: %d audit lines, want 1", c.name, len(all)-lines)
		case c.code != "":
			if l := all[len(all)-1]; l["outcome"] != "deny" || l["code"] != c.code || l["route"] != c.route {
				t.Errorf("%s: audit line %v, want deny %s on %s", c.name, l, c.code, c.route)
			}
		}
	}
	h2 := &http.Client{Transport: h2cTransport(), Timeout: 10 * time.Second}
	r := doWith(t, h2, http.MethodGet, sc.base+"/a2a/events", []byte("hello"), "X-API-Key", testReadKey)
	if r.ProtoMajor != 2 || r.Status != http.StatusBadRequest || string(r.Body) != detail("GET and HEAD requests take no body") ||
		r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("HTTP/%d GET with a body: %d %v %s", r.ProtoMajor, r.Status, r.Header, r.Body)
	}
	if l := lastAudit(t, sc); l["outcome"] != "deny" || l["code"] != "body_on_read" {
		t.Errorf("HTTP/2 GET with a body: audit line %v", l)
	}
	nothingReached(t, ag)
}

// TestAttackCoveredRefusalsRaceTheAllowedCallOnOneKey: workspace B sends,
// at once, many covered job.start calls with one idempotency key, half
// naming A's job (refused inside the guard's forward: their refusal must
// release the key) and half its own job. Whatever the order, the agent
// receives exactly one job.start, B's own; a call naming A's job is never
// answered with a result; and the key ends recorded (B's next call is a
// replay), never left in flight by a refusal.
func TestAttackCoveredRefusalsRaceTheAllowedCallOnOneKey(t *testing.T) {
	ag, _, sc, tokA, tokB := refSidecar(t, func(jwks string) string {
		return idemDirective(jwks, "") + "\t\treferences\n"
	})
	n := randomID()
	jobA, jobB, idem := "jobA-"+n, "jobB-"+n, "idem-"+n
	wantPassed(t, ag, "A's job.start", func() response {
		return sc.rpc(t, refAction(t, wsA, "job.start", "a", map[string]any{"job_id": jobA}), tokA)
	})
	base := ag.count.Load()
	var wg sync.WaitGroup
	for k := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			job := jobB
			if k%2 == 0 {
				job = jobA
			}
			r := sc.rpc(t, refAction(t, wsB, "job.start", "b", map[string]any{"job_id": job, "idempotency_key": idem}), tokB)
			a := decodeRPC(t, r)
			conflict := strings.Contains(string(r.Body), `"idempotency_conflict"`)
			switch {
			case a.Error != nil && a.Error.Code == -32031: // in progress: waited past wait_timeout
			case job == jobA && a.Error != nil && strings.Contains(a.Error.Message, "job_id does not"):
			case job == jobA && conflict: // B's own call was recorded first
			case job == jobB && a.Error == nil && !conflict:
			default:
				t.Errorf("B's job.start naming %s: %s", job, r.Body)
			}
		}()
	}
	wg.Wait()
	got := ag.received()[base:]
	if len(got) != 1 || !strings.Contains(string(got[0].Body), jobB) {
		t.Fatalf("the agent received %d job.start (want 1, B's own)", len(got))
	}
	r := sc.rpc(t, refAction(t, wsB, "job.start", "b", map[string]any{"job_id": jobB, "idempotency_key": idem}), tokB)
	if r.Header.Get("X-Supervaize-Idempotent-Replay") != "true" {
		t.Fatalf("B's next call on the key: %s (the key was left in flight)", r.Body)
	}
	if ag.count.Load() != base+1 {
		t.Fatal("the replay reached the agent")
	}
}

// TestAttackA2ATrailersNeverReachTheAgent: an /a2a body sent chunked with
// trailers (a forged verified header, another workspace's token, any
// other) is read whole before the decision; neither the plain nor the
// covered forward passes any trailer on, and with forward_token off the
// header's token is gone too. A refused call with the same trailers
// reaches nothing.
func TestAttackA2ATrailersNeverReachTheAgent(t *testing.T) {
	ag, _, sc, tokA, tokB := refSidecar(t, func(jwks string) string {
		return idemDirective(jwks, "") + "\t\tforward_token off\n\t\treferences\n"
	})
	send := func(body []byte, tok string) string {
		return rawExchange(t, sc.base, "POST /a2a HTTP/1.1\r\nHost: "+hostOf(sc)+"\r\nX-API-Key: "+testKey+
			"\r\nContent-Type: application/json\r\nX-Supervaize-Workspace-Authorization: Bearer "+tok+
			"\r\nTransfer-Encoding: chunked\r\nTrailer: X-Supervaize-Verified-Workspace-Id, X-Supervaize-Workspace-Authorization, X-Evil\r\n\r\n"+
			fmt.Sprintf("%x\r\n%s\r\n", len(body), body)+
			"0\r\nX-Supervaize-Verified-Workspace-Id: evil\r\nX-Supervaize-Workspace-Authorization: Bearer "+tokB+"\r\nX-Evil: 1\r\n\r\n", 0, "")
	}
	job := "job-" + randomID()
	for _, action := range []string{"job.sync", "job.start"} {
		before := ag.count.Load()
		if st := send(refAction(t, wsA, action, "a", map[string]any{"job_id": job}), tokA); !strings.Contains(st, " 200") {
			t.Fatalf("A's %s: %q", action, st)
		}
		if ag.count.Load() != before+1 {
			t.Fatalf("A's %s did not reach the agent once", action)
		}
		got := ag.last(t)
		if len(got.Trailer) != 0 || got.Header.Get("X-Evil") != "" || got.Header.Get("Trailer") != "" ||
			got.Header.Get("X-Supervaize-Workspace-Authorization") != "" {
			t.Fatalf("A's %s: trailers or the token reached the agent: trailer %v, header %v", action, got.Trailer, got.Header)
		}
		if v := got.Header.Values("X-Supervaize-Verified-Workspace-Id"); len(v) != 1 || v[0] != wsA {
			t.Fatalf("A's %s: verified workspace %q", action, v)
		}
	}
	before := ag.count.Load()
	if st := send(refAction(t, wsB, "job.sync", "b", map[string]any{"job_id": job}), tokB); !strings.Contains(st, " 200") {
		t.Fatalf("B's call: %q", st)
	}
	if ag.count.Load() != before {
		t.Fatal("B's refused call (A's job) reached the agent")
	}
}

// TestAttackReplayClaimsNoRequestID: a replay never reaches the agent, so
// the new request_id it carries is neither claimed nor remembered for
// workspace A: workspace B's call with that request_id is then allowed,
// and the effect of that request_id reaches B's filtered stream, never
// A's.
func TestAttackReplayClaimsNoRequestID(t *testing.T) {
	forEachEventsMode(t, func(t *testing.T, mode func(*agent) string) {
		ag := startAgent(t)
		sse := broadcastSSE(ag)
		key := newSigner(t, "k1")
		jw := startJWKS(t, key.jwk())
		sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), "")+mode(ag)+"\t\treferences\n")
		tokA, tokB := refTokens(t, key)
		n := randomID()
		r1, r2, idem := "r1-"+n, "r2-"+n, "idem-"+n
		wantPassed(t, ag, "A's job.start", func() response {
			return sc.rpc(t, refAction(t, wsA, "job.start", "a", map[string]any{"request_id": r1, "idempotency_key": idem}), tokA)
		})
		before := ag.count.Load()
		r := sc.rpc(t, refAction(t, wsA, "job.start", "a", map[string]any{"request_id": r2, "idempotency_key": idem}), tokA)
		if r.Header.Get("X-Supervaize-Idempotent-Replay") != "true" || ag.count.Load() != before {
			t.Fatalf("A's retry: replay %q, reached the agent %v", r.Header.Get("X-Supervaize-Idempotent-Replay"), ag.count.Load() != before)
		}
		wantPassed(t, ag, "B's call with the request_id only A's replay carried", func() response {
			return sc.rpc(t, refAction(t, wsB, "job.sync", "b", map[string]any{"request_id": r2}), tokB)
		})
		wantEffects(t, sc, sse, tokA, tokB, []string{r1, r2}, []string{r1}, []string{r2})
	})
}
