package test

// Attacks on the request path (serveSteps, controllerSteps, admitForward
// and serveData: the limits, then the references, then the verified
// context), with
// several workspaces sharing one agent: for every refusal the agent
// receives nothing and no state (a reference binding, a request_id claim,
// an idempotency key) is left to the refused workspace or blocks another.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"strings"
	"sync"
	"testing"
)

// dataHeaders are the headers of a DataResource call of workspace ws.
func dataHeaders(tok, ws string) []string {
	return []string{"X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", "Bearer " + tok,
		"X-Supervaize-Workspace-Id", ws, "Content-Type", "application/json"}
}

// TestAttackDataRateLimitedCallBindsNoItem: a DataResource get that the
// limits refuse (429) must bind nothing (docs/workspaces.md, "When a call
// is checked": "a refused call (by the limits or by one of its
// references) binds none of them"): workspace A's later get of the same
// item passes.
func TestAttackDataRateLimitedCallBindsNoItem(t *testing.T) {
	ag, _, sc, tokA, tokB := refSidecar(t, func(jwks string) string {
		return jwksDirective(jwks,
			"\t\treferences\n\t\tlimits {\n\t\t\trate resource.*.get 1/h\n\t\t}\n")
	})
	data := sc.base + "/api/agents/" + testAgent + "/data/contacts/"
	item := "item-" + randomID()

	if r := do(t, http.MethodGet, data+"b-own-"+randomID(), nil, dataHeaders(tokB, wsB)...); r.Status != 200 {
		t.Fatalf("B's first get (within its rate): %d %s", r.Status, r.Body)
	}
	before := ag.count.Load()
	r := do(t, http.MethodGet, data+item, nil, dataHeaders(tokB, wsB)...)
	wantDetail(t, r, http.StatusTooManyRequests, "Rate limit exceeded")
	if ag.count.Load() != before {
		t.Fatal("B's rate-limited get reached the agent")
	}
	if r := do(t, http.MethodGet, data+item, nil, dataHeaders(tokA, wsA)...); r.Status != 200 {
		t.Fatalf("A's get of an item only B's refused call named: %d %s (the refused call bound it)", r.Status, r.Body)
	}
}

// TestAttackA2ARateLimitedCallBindsNothing: the same on /a2a (held):
// B's rate-limited job.stop binds neither its job_id nor its request_id.
func TestAttackA2ARateLimitedCallBindsNothing(t *testing.T) {
	ag, _, sc, tokA, tokB := refSidecar(t, func(jwks string) string {
		return jwksDirective(jwks,
			"\t\treferences\n\t\tlimits {\n\t\t\trate job.stop 1/h\n\t\t}\n")
	})
	wantPassed(t, ag, "B's first job.stop", func() response {
		return sc.rpc(t, refAction(t, wsB, "job.stop", "b1", map[string]any{"job_id": "b-" + randomID()}), tokB)
	})
	job, reqID := "job-"+randomID(), "req-"+randomID()
	before := ag.count.Load()
	body := refAction(t, wsB, "job.stop", "b2", map[string]any{"job_id": job, "request_id": reqID})
	wantRateLimited(t, sc.rpc(t, body, tokB), "rate_limited")
	if ag.count.Load() != before {
		t.Fatal("B's rate-limited job.stop reached the agent")
	}
	// A's job.stop of that job with that request_id passes (job.stop is
	// B's limit, not A's: A has its own key).
	wantPassed(t, ag, "A's job.stop of the job B's refused call named", func() response {
		return sc.rpc(t, refAction(t, wsA, "job.stop", "a1", map[string]any{"job_id": job, "request_id": reqID}), tokA)
	})
}

// TestAttackCoveredRefusalsLeaveNoState: covered job.start calls refused
// inside the guard's forward (a foreign job_id, a foreign request_id)
// reach nothing, release their idempotency key and concurrency slot, and
// bind nothing; the refused workspace's retry is refused again (never
// replayed, never "in progress"), its corrected call runs once and is then
// replayed; the other workspace, using the same idempotency key, is not
// answered from the refused workspace's record.
func TestAttackCoveredRefusalsLeaveNoState(t *testing.T) {
	ag, _, sc, tokA, tokB := refSidecar(t, func(jwks string) string {
		return idemDirective(jwks, "") +
			"\t\treferences\n\t\tlimits {\n\t\t\tconcurrency job.* 1\n\t\t}\n"
	})
	n := randomID()
	jobA, jobB, jobFree, reqA, idem := "jobA-"+n, "jobB-"+n, "jobFree-"+n, "reqA-"+n, "idem-"+n
	idemB := "idemB-" + n // B's corrected call's key, then A's
	start := func(ws, id, job, req string) []byte {
		k := idem
		if job == jobB {
			k = idemB
		}
		refs := map[string]any{"job_id": job, "idempotency_key": k}
		if req != "" {
			refs["request_id"] = req
		}
		return refAction(t, ws, "job.start", id, refs)
	}
	wantPassed(t, ag, "A's job.start", func() response { return sc.rpc(t, start(wsA, "a1", jobA, reqA), tokA) })

	// B names A's job: refused, twice (the key was released, not recorded).
	for _, id := range []string{"b1", "b2"} {
		r := sc.rpc(t, start(wsB, id, jobA, ""), tokB)
		if r.Header.Get("X-Supervaize-Idempotent-Replay") != "" {
			t.Fatalf("B's refused call answered as a replay: %s", r.Body)
		}
		wantRefused(t, ag, "job_id", id, func() response { return r })
	}
	// B names A's request_id with a fresh job: refused, and the fresh job
	// is not bound to B by the refused call.
	wantRefused(t, ag, "request_id", "b3", func() response { return sc.rpc(t, start(wsB, "b3", jobFree, reqA), tokB) })
	wantPassed(t, ag, "A's job.start of the job B's refused call named", func() response {
		return sc.rpc(t, refAction(t, wsA, "job.start", "a2", map[string]any{"job_id": jobFree}), tokA)
	})

	// B corrected: runs once (no concurrency slot or key left held), then replayed.
	wantPassed(t, ag, "B's corrected job.start", func() response { return sc.rpc(t, start(wsB, "b4", jobB, ""), tokB) })
	before := ag.count.Load()
	r := sc.rpc(t, start(wsB, "b5", jobB, ""), tokB)
	if a := decodeRPC(t, r); a.Error != nil || r.Header.Get("X-Supervaize-Idempotent-Replay") != "true" {
		t.Fatalf("B's retry: replay header %q, %s", r.Header.Get("X-Supervaize-Idempotent-Replay"), r.Body)
	}
	if ag.count.Load() != before {
		t.Fatal("B's replay reached the agent")
	}
	// A with B's key and B's job: refused on the job (B's now), not replayed.
	r = sc.rpc(t, start(wsA, "a3", jobB, ""), tokA)
	if r.Header.Get("X-Supervaize-Idempotent-Replay") != "" {
		t.Fatalf("A answered from B's record: %s", r.Body)
	}
	wantRefused(t, ag, "job_id", "a3", func() response { return r })
}

// TestAttackVerifiedHeadersNeverSpoofed: every spelling of a verified
// header a client sends is gone at the agent on an allowed call (plain and
// covered), the gate's own values are there; a refused call carrying them
// reaches nothing.
func TestAttackVerifiedHeadersNeverSpoofed(t *testing.T) {
	ag, _, sc, tokA, tokB := refSidecar(t, func(jwks string) string {
		return idemDirective(jwks, "") + "\t\treferences\n"
	})
	spoof := []string{
		"X-Supervaize-Verified-Workspace-Id", "evil",
		"X-Supervaize-Verified-Workspace-Id", "evil2",
		"x-supervaize-verified-context", `{"mode":"token","workspace_id":"evil"}`,
		"X-Supervaize-Verified-Mode", "token",
		"X-SUPERVAIZE-VERIFIED-SCOPES", "job.start",
		"Connection", "keep-alive, X-Supervaize-Workspace-Id",
	}
	check := func(what string) {
		got := ag.last(t).Header
		for name, vs := range got {
			for _, v := range vs {
				if strings.Contains(v, "evil") {
					t.Fatalf("%s: the agent got %s: %s", what, name, v)
				}
			}
		}
		if v := got.Values("X-Supervaize-Verified-Workspace-Id"); len(v) != 1 || v[0] != wsA {
			t.Fatalf("%s: verified workspace at the agent %q", what, v)
		}
	}
	wantPassed(t, ag, "A's plain job.stop", func() response {
		return sc.rpc(t, refAction(t, wsA, "job.stop", "a1", map[string]any{"job_id": "j-" + randomID()}), tokA, spoof...)
	})
	check("plain")
	wantPassed(t, ag, "A's covered job.start", func() response {
		return sc.rpc(t, refAction(t, wsA, "job.start", "a2", map[string]any{"job_id": "s-" + randomID()}), tokA, spoof...)
	})
	check("covered")
	job := "own-" + randomID()
	wantPassed(t, ag, "A's job.stop", func() response {
		return sc.rpc(t, refAction(t, wsA, "job.stop", "a3", map[string]any{"job_id": job}), tokA)
	})
	wantRefused(t, ag, "job_id", "b1", func() response {
		return sc.rpc(t, refAction(t, wsB, "job.stop", "b1", map[string]any{"job_id": job}), tokB, spoof...)
	})
	// Two token headers: the token is missing, nothing reached.
	before := ag.count.Load()
	r := sc.rpc(t, refAction(t, wsA, "job.stop", "a4", map[string]any{"job_id": job}), tokA,
		"X-Supervaize-Workspace-Authorization", "Bearer "+tokA)
	wantRPCError(t, r, -32030, "workspace_authorization_missing")
	if ag.count.Load() != before {
		t.Fatal("a call with two token headers reached the agent")
	}
}

// TestAttackTokenExpiresWhileBodyArrives: a token valid when the headers
// arrive (checked early, to charge the body) but expired by the time the
// body has arrived is refused at the decision (VerifyAgain does not answer
// from the early check past exp + leeway), and nothing reaches the agent.
func TestAttackTokenExpiresWhileBodyArrives(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), withWorkspaceAuth(jwksDirective(jw.url(), ""), "\t\t\tleeway 0\n"))
	exp := time.Now().Unix() + 2
	tok := key.mintWith(t, func(c jwt.MapClaims) { c["exp"] = exp })
	body := jobStartBody(t)
	c := rawConn(t, sc)
	head := "POST /a2a HTTP/1.1\r\nHost: " + hostOf(sc) + "\r\nX-API-Key: " + testKey +
		"\r\nContent-Type: application/json\r\nX-Supervaize-Workspace-Authorization: Bearer " + tok +
		"\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	if _, err := io.WriteString(c, head+string(body[:10])); err != nil {
		t.Fatal(err)
	}
	// The stimulus: the rest of the body once the token has expired.
	for time.Now().Unix() <= exp {
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := c.Write(body[10:]); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	wantRPCError(t, response{Status: resp.StatusCode, Header: resp.Header, Body: b}, -32030, "workspace_authorization_expired")
	nothingReached(t, ag)
}

// TestAttackOddHeadersOnSidecarEndpoints: the Connection rule applies
// before the /_sidecar/* endpoints and /a2a read the key (a key named in
// Connection is gone: 401), an upgrade asked of an endpoint is the tunnel
// refusal, and nothing reaches the agent.
func TestAttackOddHeadersOnSidecarEndpoints(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "")
	cases := []struct {
		method, path string
		headers      []string
		status       int
		detail       string
	}{
		{"GET", "/_sidecar/status", []string{"X-API-Key", testReadKey, "Connection", "x-api-key"}, 401, "Invalid or missing API key"},
		{"GET", "/_sidecar/status", []string{"X-API-Key", testReadKey, "X-API-Key", testReadKey}, 401, "Invalid or missing API key"},
		{"POST", "/_sidecar/refresh", []string{"X-API-Key", testReadKey}, 403, "Insufficient scope"},
		{"POST", "/_sidecar/refresh", []string{"X-API-Key", testKey, "Connection", "X-Api-Key"}, 401, "Invalid or missing API key"},
		{"GET", "/_sidecar/live", []string{"Upgrade", "websocket", "Connection", "Upgrade"}, 400, "Protocol upgrades are not supported"},
		{"GET", "/_sidecar/status", []string{"X-API-Key", testReadKey, "Connection", "upgrade"}, 400, "Protocol upgrades are not supported"},
		{"POST", "/a2a", []string{"X-API-Key", testKey, "Connection", "x-api-key"}, 401, "Invalid or missing API key"},
		{"POST", "/a2a", []string{"X-API-Key", testKey, "Upgrade", "h2c"}, 400, "Protocol upgrades are not supported"},
	}
	tok := key.mint(t, baseClaims())
	for _, c := range cases {
		h := append([]string{"Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", "Bearer " + tok}, c.headers...)
		var body []byte
		if c.method == "POST" && c.path == "/a2a" {
			body = jobStartBody(t)
		}
		r := do(t, c.method, sc.base+c.path, body, h...)
		wantDetail(t, r, c.status, c.detail)
	}
	if r := do(t, "GET", sc.base+"/_sidecar/status", nil, "X-API-Key", testReadKey, "Connection", "keep-alive"); r.Status != 200 {
		t.Fatalf("status with the read key: %d %s", r.Status, r.Body)
	}
	nothingReached(t, ag)
}

// seenSidecar runs supervaizer_auth with directives, then reverse_proxy to
// upstream, under a deferred header handler that puts on every answer the
// verified workspace and mode that Caddy's handlers after the gate read on
// the request (X-Seen-Verified, X-Seen-Mode): "" when the gate injected none.
func seenSidecar(t *testing.T, upstream, directives string) *sidecar {
	t.Helper()
	sc, err := runCaddyfile(t, "", func(port int) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n"+
			"\theader {\n\t\tdefer\n\t\tX-Seen-Verified \"{http.request.header.X-Supervaize-Verified-Workspace-Id}\"\n"+
			"\t\tX-Seen-Mode \"{http.request.header.X-Supervaize-Verified-Mode}\"\n\t}\n"+
			"\troute {\n\t\tsupervaizer_auth {\n%s\t\t}\n\t\treverse_proxy %s\n\t}\n}\n", port, directives, upstream)
	})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestAttackRefusedDataCallCarriesNoVerifiedContext: a DataResource call
// refused by its reference or by the limits must not carry the verified
// context ("only a request that is forwarded carries it",
// gate/forward.go admitForward): Caddy's handlers after the gate (here a
// deferred response header reading the request's header) see none.
func TestAttackRefusedDataCallCarriesNoVerifiedContext(t *testing.T) {
	ag := refAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := seenSidecar(t, ag.addr(), jwksDirective(jw.url(), "\t\treferences\n\t\tlimits {\n\t\t\trate resource.*.get 2/h\n\t\t}\n"))
	tokA, tokB := refTokens(t, key)
	data := sc.base + "/api/agents/" + testAgent + "/data/contacts/"
	own := "a-" + randomID()
	if r := do(t, http.MethodGet, data+own, nil, dataHeaders(tokA, wsA)...); r.Status != 200 || r.Header.Get("X-Seen-Verified") != wsA {
		t.Fatalf("A's get: %d %q %s", r.Status, r.Header.Get("X-Seen-Verified"), r.Body)
	}
	before := ag.count.Load()
	// The limits come first (admitForward's order): B's refused get of A's
	// item spends the first of B's two gets an hour.
	r := do(t, http.MethodGet, data+own, nil, dataHeaders(tokB, wsB)...) // A's item: refused
	wantDetail(t, r, http.StatusForbidden, "Workspace authorization: item_id does not belong to this workspace")
	seenForeign := r.Header.Get("X-Seen-Verified")
	do(t, http.MethodGet, data+"b-"+randomID(), nil, dataHeaders(tokB, wsB)...) // B's second get, within its rate
	r = do(t, http.MethodGet, data+"b-"+randomID(), nil, dataHeaders(tokB, wsB)...)
	wantDetail(t, r, http.StatusTooManyRequests, "Rate limit exceeded")
	seenLimited := r.Header.Get("X-Seen-Verified")
	if ag.count.Load() != before+1 {
		t.Fatalf("agent received %d, want 1 (B's allowed get)", ag.count.Load()-before)
	}
	if seenForeign != "" || seenLimited != "" {
		t.Fatalf("refused calls carried the verified context: foreign %q, rate-limited %q", seenForeign, seenLimited)
	}
}

// TestAttackSDKRateLimitedGetsSquatNextItems: in front of the real SDK
// agent (whose contacts create names a new item c<n+1>), workspace B, over
// its rate, sends gets of the next item ids: each is refused (429) and
// the SDK receives none, so none may bind anything (docs/workspaces.md,
// "When a call is checked"). Workspace A then creates a contact (c2):
// A's get of its own new item must pass.
func TestAttackSDKRateLimitedGetsSquatNextItems(t *testing.T) {
	key := newSigner(t, "k1")
	pemPath := writePEM(t, key)
	ag := startSDKAgent(t, sdkTokenEnv("SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY="+key.pem(t))...)
	sc := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), "public_key "+pemPath,
		"\t\treferences\n\t\tlimits {\n\t\t\trate resource.*.get 1/h\n\t\t}\n"))
	waitReady(t, sc)
	hdr := func(ws string) []string {
		return []string{"X-API-Key", testKey, "Content-Type", "application/json",
			"X-Supervaize-Workspace-Id", ws, "X-Supervaize-Workspace-Slug", ws,
			"X-Supervaize-Workspace-Authorization", "Bearer " + key.mint(t, sdkClaims(ws))}
	}
	prefix := sc.base + "/api/agents/" + sdkSlug + "/data/contacts/"
	if r := do(t, "GET", prefix+"c1", nil, hdr(wsB)...); r.Status != 200 {
		t.Fatalf("B's get within its rate: %d %s", r.Status, r.Body)
	}
	m := ag.mark()
	for _, id := range []string{"c2", "c3", "c4"} {
		wantDetail(t, do(t, "GET", prefix+id, nil, hdr(wsB)...), http.StatusTooManyRequests, "Rate limit exceeded")
	}
	if got := nonCardRequests(ag.since(m)); len(got) != 0 {
		t.Fatalf("the SDK received B's rate-limited gets: %+v", got)
	}
	r := do(t, "POST", prefix, []byte(`{"email":"new@example.com"}`), hdr(wsA)...)
	if r.Status != 201 || !strings.Contains(string(r.Body), `"c2"`) {
		t.Fatalf("A's create: %d %s", r.Status, r.Body)
	}
	if r := do(t, "GET", prefix+"c2", nil, hdr(wsA)...); r.Status != 200 {
		t.Fatalf("A's get of the contact it just created: %d %s", r.Status, r.Body)
	}
}

// TestAttackRefusedA2ACallCarriesNoVerifiedContext: the /a2a counterpart
// (held): calls refused by a reference or by the limits leave no verified
// header for Caddy's handlers after the gate; an allowed call does.
func TestAttackRefusedA2ACallCarriesNoVerifiedContext(t *testing.T) {
	ag := refAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := seenSidecar(t, ag.addr(), idemDirective(jw.url(), "")+"\t\treferences\n\t\tlimits {\n\t\t\trate job.stop 1/h\n\t\t}\n")
	tokA, tokB := refTokens(t, key)
	job := "job-" + randomID()
	r := sc.rpc(t, refAction(t, wsA, "job.stop", "a1", map[string]any{"job_id": job}), tokA)
	if a := decodeRPC(t, r); a.Error != nil || r.Header.Get("X-Seen-Verified") != wsA {
		t.Fatalf("A's call: %q %s", r.Header.Get("X-Seen-Verified"), r.Body)
	}
	for _, c := range []struct {
		what string
		body []byte
	}{
		{"foreign job.stop", refAction(t, wsB, "job.stop", "b1", map[string]any{"job_id": job})},
		{"foreign covered job.start", refAction(t, wsB, "job.start", "b2", map[string]any{"job_id": job})},
		{"rate-limited job.stop", refAction(t, wsA, "job.stop", "a2", map[string]any{"job_id": job})},
	} {
		before := ag.count.Load()
		r := sc.rpc(t, c.body, tokB)
		if c.what == "rate-limited job.stop" {
			r = sc.rpc(t, c.body, tokA)
		}
		if a := decodeRPC(t, r); a.Error == nil {
			t.Fatalf("%s allowed: %s", c.what, r.Body)
		}
		if ag.count.Load() != before || r.Header.Get("X-Seen-Verified") != "" {
			t.Fatalf("%s: reached %d, verified header seen %q", c.what, ag.count.Load()-before, r.Header.Get("X-Seen-Verified"))
		}
	}
}

// TestAttackManyWorkspacesAtOnce: six workspaces share the agent at once,
// each sending its own calls, calls naming the next workspace's job, and
// calls all racing for one request_id: the agent receives exactly the
// allowed calls, each with its own workspace's verified header; of the
// calls racing for the request_id exactly one reaches the agent, every
// other is the documented -32030 naming request_id.
func TestAttackManyWorkspacesAtOnce(t *testing.T) {
	ag := refAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), "")+"\t\treferences\n")
	const nws = 6
	n := randomID()
	ws := make([]string, nws)
	tok := make([]string, nws)
	for i := range ws {
		ws[i] = fmt.Sprintf("ws-%d-%s", i, n)
		tok[i] = key.mintWith(t, func(c jwt.MapClaims) { c["workspace_id"], c["workspace_slug"], c["scopes"] = ws[i], ws[i], refScopes })
		wantPassed(t, ag, "a workspace's first job.start", func() response {
			return sc.rpc(t, refAction(t, ws[i], "job.start", "s", map[string]any{"job_id": "job-" + ws[i]}), tok[i])
		})
	}
	base := ag.count.Load()
	shared := "req-shared-" + n
	var mu sync.Mutex
	allowed, raceWins := 0, 0
	var wg sync.WaitGroup
	for i := range ws {
		for k := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var body []byte
				kind := k % 3
				switch kind {
				case 0: // its own job
					body = refAction(t, ws[i], "job.stop", "own", map[string]any{"job_id": "job-" + ws[i]})
				case 1: // the next workspace's job
					body = refAction(t, ws[i], "job.stop", "foreign", map[string]any{"job_id": "job-" + ws[(i+1)%nws]})
				default: // a fresh job, the shared request_id
					body = refAction(t, ws[i], "job.stop", "race", map[string]any{"job_id": fmt.Sprintf("r-%d-%d-%s", i, k, n), "request_id": shared})
				}
				r := sc.rpc(t, body, tok[i])
				a := decodeRPC(t, r)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case a.Error == nil && kind == 0:
					allowed++
				case a.Error == nil && kind == 2:
					allowed++
					raceWins++
				case a.Error != nil && a.Error.Code == -32030 && kind == 1 && strings.Contains(a.Error.Message, "job_id does not"):
				case a.Error != nil && a.Error.Code == -32030 && kind == 2 && strings.Contains(a.Error.Message, "request_id does not"):
				default:
					t.Errorf("workspace %d, call kind %d: %s", i, kind, r.Body)
				}
			}()
		}
	}
	wg.Wait()
	// The race's winner may repeat its own request_id: a workspace's
	// later calls with the id it claimed are its own.
	if raceWins < 1 {
		t.Fatalf("no call won the shared request_id")
	}
	if got := int(ag.count.Load() - base); got != allowed {
		t.Fatalf("agent received %d calls, %d were allowed", got, allowed)
	}
	winners := map[string]bool{}
	for _, rec := range ag.received()[nws:] {
		var env struct {
			Params struct {
				Req struct {
					Workspace struct {
						ID string `json:"id"`
					} `json:"workspace"`
					RequestID string `json:"request_id"`
				} `json:"action_request"`
			} `json:"params"`
		}
		if err := json.Unmarshal(rec.Body, &env); err != nil {
			t.Fatal(err)
		}
		if v := rec.Header.Values("X-Supervaize-Verified-Workspace-Id"); len(v) != 1 || v[0] != env.Params.Req.Workspace.ID {
			t.Fatalf("call of %s carried verified workspace %q", env.Params.Req.Workspace.ID, v)
		}
		if env.Params.Req.RequestID == shared {
			winners[env.Params.Req.Workspace.ID] = true
		}
	}
	if len(winners) != 1 {
		t.Fatalf("workspaces whose call with the shared request_id reached the agent: %v", winners)
	}
}

// TestAttackCoveredLimitRefusalReleasesKey: a covered job.start refused by
// the limits (inside the guard's forward) is the documented -32029 answer
// with Retry-After, reaches nothing, and releases its idempotency key: the
// same call, retried once the slot is free, runs once and is then
// replayed.
func TestAttackCoveredLimitRefusalReleasesKey(t *testing.T) {
	ag := startJobStartAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), "")+"\t\tlimits {\n\t\t\tconcurrency job.* 1\n\t\t}\n")
	tok := key.mint(t, baseClaims())
	gate := make(chan struct{})
	ag.mu.Lock()
	ag.gate = gate
	ag.mu.Unlock()
	first := make(chan response, 1)
	go func() { first <- sc.rpc(t, freshJobStart(t), tok) }()
	eventually(t, 5*time.Second, "the first job.start at the agent", func() bool { return ag.count.Load() == 1 })
	second := freshJobStart(t)
	for range 2 {
		wantRateLimited(t, sc.rpc(t, second, tok), "concurrency_limited")
	}
	if ag.count.Load() != 1 {
		t.Fatal("a concurrency-limited job.start reached the agent")
	}
	ag.mu.Lock()
	ag.gate = nil
	ag.mu.Unlock()
	close(gate)
	if a := decodeRPC(t, <-first); a.Error != nil {
		t.Fatalf("first job.start: %+v", a.Error)
	}
	if a := decodeRPC(t, sc.rpc(t, second, tok)); a.Error != nil {
		t.Fatalf("the retry once the slot is free: %+v", a.Error)
	}
	r := sc.rpc(t, second, tok)
	if r.Header.Get("X-Supervaize-Idempotent-Replay") != "true" || ag.count.Load() != 2 {
		t.Fatalf("second retry: replay %q, agent count %d", r.Header.Get("X-Supervaize-Idempotent-Replay"), ag.count.Load())
	}
}

// TestAttackExpectContinueRefusedDataCall: a DataResource update that
// asks for 100 Continue and is refused (a foreign item, with the second of
// B's two updates an hour: the limits come first; then over the rate) is
// answered at once with its refusal, never asked for its body, and the
// agent receives nothing.
func TestAttackExpectContinueRefusedDataCall(t *testing.T) {
	ag, _, sc, tokA, tokB := refSidecar(t, func(jwks string) string {
		return jwksDirective(jwks,
			"\t\treferences\n\t\tlimits {\n\t\t\trate resource.*.update 2/h\n\t\t}\n")
	})
	path := "/api/agents/" + testAgent + "/data/contacts/"
	item := "a-" + randomID()
	if r := do(t, http.MethodGet, sc.base+path+item, nil, dataHeaders(tokA, wsA)...); r.Status != 200 {
		t.Fatalf("A's get: %d %s", r.Status, r.Body)
	}
	if r := do(t, http.MethodPut, sc.base+path+"b-"+randomID(), []byte(`{}`), dataHeaders(tokB, wsB)...); r.Status != 200 {
		t.Fatalf("B's update within its rate: %d %s", r.Status, r.Body)
	}
	before := ag.count.Load()
	for _, c := range []struct{ target, want string }{{path + item, "403"}, {path + "b-" + randomID(), "429"}} {
		conn := rawConn(t, sc)
		head := "PUT " + c.target + " HTTP/1.1\r\nHost: " + hostOf(sc) + "\r\nX-API-Key: " + testKey +
			"\r\nX-Supervaize-Workspace-Id: " + wsB + "\r\nX-Supervaize-Workspace-Authorization: Bearer " + tokB +
			"\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n"
		if _, err := io.WriteString(conn, head); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 "+c.want) {
			t.Fatalf("%s: first line %q (%v), want %s at once", c.target, line, err, c.want)
		}
	}
	if ag.count.Load() != before {
		t.Fatal("a refused update reached the agent")
	}
}

// TestAttackRefusalBytesSameOnEveryPath: the answer of one refusal is the
// same bytes whether the call is plain or covered (refused inside the
// guard's forward), and it is the documented one (docs/sdk-wire.md,
// docs/workspaces.md, docs/limits.md).
func TestAttackRefusalBytesSameOnEveryPath(t *testing.T) {
	ag, _, sc, tokA, tokB := refSidecar(t, func(jwks string) string {
		return idemDirective(jwks, "") +
			"\t\treferences\n\t\tlimits {\n\t\t\trate job.* 3/h\n\t\t}\n"
	})
	job := "job-" + randomID()
	wantPassed(t, ag, "A's job.start", func() response {
		return sc.rpc(t, refAction(t, wsA, "job.start", "a1", map[string]any{"job_id": job}), tokA)
	})
	foreign := `{"jsonrpc":"2.0","id":"x","error":{"code":-32030,"message":"Workspace authorization: job_id does not belong to this workspace","data":{"code":"workspace_authorization_wrong_workspace"}}}`
	limited := `{"jsonrpc":"2.0","id":"x","error":{"code":-32029,"message":"Rate limit exceeded","data":{"code":"rate_limited","retry_after":1200}}}`
	for _, c := range []struct {
		action, want, retryAfter string
	}{
		{"job.stop", foreign, ""}, {"job.start", foreign, ""}, {"job.stop", foreign, ""}, // B's rate: 3 tokens spent
		{"job.stop", limited, "1200"}, {"job.start", limited, "1200"},
	} {
		before := ag.count.Load()
		r := sc.rpc(t, refAction(t, wsB, c.action, "x", map[string]any{"job_id": job}), tokB)
		if r.Status != 200 || string(r.Body) != c.want || r.Header.Get("Retry-After") != c.retryAfter ||
			r.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %q Retry-After %q\n got %s\nwant %s", c.action, r.Status, r.Header.Get("Content-Type"),
				r.Header.Get("Retry-After"), r.Body, c.want)
		}
		if ag.count.Load() != before {
			t.Fatalf("B's refused %s reached the agent", c.action)
		}
	}
}
