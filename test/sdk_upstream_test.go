package test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// End-to-end tests with the real Supervaizer SDK 1.8.0 server behind the
// sidecar (test/harness_sdk_agent_test.go): every call the sidecar allows
// is accepted by the SDK's own workspace check and its answer reaches the
// caller byte for byte; every call it refuses never reaches the SDK.

// sdkDirect sends a request straight to the SDK server.
func sdkDirect(t *testing.T, a *sdkAgent, method, path string, body []byte, headers ...string) response {
	t.Helper()
	return do(t, method, a.base()+path, body, headers...)
}

// TestSDKUpstreamAllowedCallsOverEveryProtocol: over HTTP/1.1, HTTP/2, h2c
// and HTTP/3, the sidecar's allowed calls (job.start, job.sync, a surface,
// the bootstrap action and surface without a token) are accepted by the
// SDK (its own token check with the same issuer and key, PEM variant) and
// answered with the same bytes as the SDK answers the same call directly.
func TestSDKUpstreamAllowedCallsOverEveryProtocol(t *testing.T) {
	key := newSigner(t, "k1")
	pemPath := writePEM(t, key)
	ag := startSDKAgent(t, sdkTokenEnv("SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY="+key.pem(t))...)
	ps := startEveryProtocol(t, ag.addr(), sdkDirective(ag.addr(), "public_key "+pemPath, ""))
	waitReady(t, ps.sidecar)

	ps.forEachVersion(t, func(t *testing.T, v httpVersion) {
		tok := key.mint(t, sdkClaims("ws-a"))
		calls := []struct {
			name  string
			body  []byte
			token string
			grant bool // the SDK's handler gets a verified context
		}{
			{"job.start", sdkAction(t, "ws-a", "job.start", nil), tok, true},
			{"job.sync", sdkAction(t, "ws-a", "job.sync", nil), tok, true},
			{"surface job.start", sdkSurface(t, "ws-a", "job.start"), tok, true},
			{"bootstrap action", sdkAction(t, "ws-a", "workspace_binding.options", nil), "", false},
			{"bootstrap surface", sdkSurface(t, "ws-a", "workspace_binding.create"), "", false},
		}
		for _, c := range calls {
			before := len(ag.entries(""))
			r := v.rpc(t, c.body, c.token)
			if r.Status != 200 || !strings.Contains(string(r.Body), `"result"`) {
				t.Fatalf("%s: %d %s", c.name, r.Status, r.Body)
			}
			notWorkspaceRefusal(t, c.name, r.Body)
			ran := ag.entries("")[before:]
			handled := false
			for _, e := range ran {
				if e.Kind == "action" || e.Kind == "surface" {
					handled = true
					if c.grant && e.Kind == "action" && (e.VerifiedGrant == nil || *e.VerifiedGrant != "grant-1") {
						t.Fatalf("%s: the SDK's handler got no verified context: %+v", c.name, e)
					}
				}
			}
			if !handled {
				t.Fatalf("%s: the SDK's handler did not run: %+v", c.name, ran)
			}
			direct := sdkDirect(t, ag, "POST", "/a2a", c.body, rpcHeaders(c.token)...)
			if c.name == "job.start" { // covered by the idempotency guard: docs/idempotency.md
				if !sameButReplaySafety(r.Body, direct.Body) {
					t.Fatalf("%s: through the sidecar %s\nstraight to the SDK %s", c.name, r.Body, direct.Body)
				}
				continue
			}
			if direct.Status != r.Status || string(direct.Body) != string(r.Body) {
				t.Fatalf("%s: through the sidecar %d %s\nstraight to the SDK %d %s", c.name, r.Status, r.Body, direct.Status, direct.Body)
			}
		}
	})
}

// sameButReplaySafety: via is direct's JSON-RPC answer with
// result.replay_safety.strictly_idempotent_response true added (the
// idempotency guard's mark on every answer it records).
func sameButReplaySafety(via, direct []byte) bool {
	var v, d map[string]any
	if json.Unmarshal(via, &v) != nil || json.Unmarshal(direct, &d) != nil {
		return false
	}
	res, ok := v["result"].(map[string]any)
	if !ok || fmt.Sprint(res["replay_safety"]) != "map[strictly_idempotent_response:true]" {
		return false
	}
	delete(res, "replay_safety")
	return reflect.DeepEqual(v, d)
}

// TestSDKUpstreamRefusalsNeverReachTheSDK: each call the sidecar refuses
// (token, key, scope, contract, route) leaves the SDK process untouched:
// it logs no request (the sidecar's own card fetches aside).
func TestSDKUpstreamRefusalsNeverReachTheSDK(t *testing.T) {
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	ag := startSDKAgent(t, sdkTokenEnv("SUPERVAIZER_WORKSPACE_AUTH_JWKS_URL="+jw.url())...)
	sc := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), "jwks_url "+jw.url(), ""))
	waitReady(t, sc)
	other := newSigner(t, "k1")
	good := key.mint(t, sdkClaims("ws-a"))
	// withScope: a token that grants scope too (the contract refuses, not the scopes).
	withScope := func(scope string) string {
		c := sdkClaims("ws-a")
		c["scopes"] = append(c["scopes"].([]any), scope)
		return key.mint(t, c)
	}

	cases := []struct {
		name    string
		method  string
		path    string
		body    []byte
		headers []string
	}{
		{"no token", "POST", "/a2a", sdkAction(t, "ws-a", "job.start", nil), rpcHeaders("")},
		{"bad signature", "POST", "/a2a", sdkAction(t, "ws-a", "job.start", nil), rpcHeaders(other.mint(t, sdkClaims("ws-a")))},
		{"expired", "POST", "/a2a", sdkAction(t, "ws-a", "job.start", nil), rpcHeaders(key.mintWith(t, func(c jwt.MapClaims) {
			for k, v := range sdkClaims("ws-a") {
				c[k] = v
			}
			c["exp"] = time.Now().Add(-time.Hour).Unix()
		}))},
		{"other workspace", "POST", "/a2a", sdkAction(t, "ws-b", "job.start", nil), rpcHeaders(good)},
		{"missing scope", "POST", "/a2a", sdkAction(t, "ws-a", "job.stop", nil), rpcHeaders(good)},
		{"undeclared action", "POST", "/a2a", sdkAction(t, "ws-a", "job.explode", nil), rpcHeaders(withScope("job.explode"))},
		{"undeclared surface", "POST", "/a2a", sdkSurface(t, "ws-a", "mission.undeclared"), rpcHeaders(withScope("mission.undeclared"))},
		{"no API key", "POST", "/a2a", sdkAction(t, "ws-a", "job.start", nil), []string{"Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", "Bearer " + good}},
		{"read key on /a2a", "POST", "/a2a", sdkAction(t, "ws-a", "job.start", nil), []string{"X-API-Key", testReadKey, "Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", "Bearer " + good}},
		{"data route without token", "GET", "/api/agents/" + sdkSlug + "/data/contacts/", nil, []string{"X-API-Key", testKey, "X-Supervaize-Workspace-Id", "ws-a"}},
		{"docs (other_routes deny)", "GET", "/docs", nil, []string{"X-API-Key", testKey}},
		{"openapi.json (other_routes deny)", "GET", "/openapi.json", nil, []string{"X-API-Key", testKey}},
		{"dot segment", "GET", "/a2a/../docs", nil, []string{"X-API-Key", testKey}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := ag.mark()
			r := do(t, c.method, sc.base+c.path, c.body, c.headers...)
			if r.Status == 200 && !strings.Contains(string(r.Body), `"error"`) {
				t.Fatalf("allowed: %d %s", r.Status, r.Body)
			}
			if got := nonCardRequests(ag.since(m)); len(got) != 0 {
				t.Fatalf("the SDK received %+v (answer %d %s)", got, r.Status, r.Body)
			}
		})
	}
}

var fingerprintRE = regexp.MustCompile(`"fingerprint":"([^"]+)"`)

// TestSDKUpstreamRegistrationFromRealCards: the sidecar reads the contract
// from the SDK's own card route, the public discovery routes (agents.json,
// versioned and unversioned cards) pass through byte for byte, and the
// contract fingerprint is the same after the SDK process restarts.
func TestSDKUpstreamRegistrationFromRealCards(t *testing.T) {
	key := newSigner(t, "k1")
	pemPath := writePEM(t, key)
	ag := startSDKAgent(t, sdkTokenEnv("SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY="+key.pem(t))...)
	sc := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), "public_key "+pemPath, ""))
	waitReady(t, sc)

	for _, p := range []string{"/.well-known/agents.json", "/.well-known/agents/v1.0/" + sdkSlug + "_agent.json",
		"/.well-known/agents/" + sdkSlug + "_agent.json"} {
		via, direct := do(t, "GET", sc.base+p, nil), sdkDirect(t, ag, "GET", p, nil)
		if via.Status != 200 || string(via.Body) != string(direct.Body) {
			t.Fatalf("%s: through the sidecar %d %s\nstraight %d %s", p, via.Status, via.Body, direct.Status, direct.Body)
		}
	}
	if r := do(t, "GET", sc.base+"/.well-known/health", nil); r.Status != 200 || !strings.Contains(string(r.Body), `"operational"`) {
		t.Fatalf("health: %d %s", r.Status, r.Body)
	}
	fingerprint := func() string {
		r := do(t, "GET", sc.base+"/_sidecar/status", nil, "X-API-Key", testReadKey)
		m := fingerprintRE.FindSubmatch(r.Body)
		if m == nil {
			t.Fatalf("no contract fingerprint in /_sidecar/status: %s", r.Body)
		}
		return string(m[1])
	}
	before := fingerprint()
	ag.restart()
	if r := do(t, "POST", sc.base+"/_sidecar/refresh", nil, "X-API-Key", testKey); r.Status != 200 || strings.Contains(string(r.Body), `"errors":{"`) {
		t.Fatalf("refresh after restart: %d %s", r.Status, r.Body)
	}
	if after := fingerprint(); after != before {
		t.Fatalf("fingerprint %s before the SDK restarted, %s after", before, after)
	}
}

// sseEvent is one event read from a stream.
type sseEvent struct{ name, data string }

// readSSE reads events from the stream body into ch until it ends, then
// closes ch.
func readSSE(body *bufio.Reader, ch chan<- sseEvent) {
	defer close(ch)
	var ev sseEvent
	for {
		line, err := body.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if ev.name != "" || ev.data != "" {
				ch <- ev
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "event:"):
			ev.name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			ev.data += strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		}
	}
}

// openSDKStream opens /a2a/events through the sidecar with token tok.
func openSDKStream(t *testing.T, base, tok string) (<-chan sseEvent, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/a2a/events", nil)
	req.Header.Set("X-API-Key", testKey) // the SDK knows only its own key (README)
	req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		cancel()
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	ch := make(chan sseEvent, 64)
	go readSSE(bufio.NewReader(resp.Body), ch)
	return ch, func() { cancel(); resp.Body.Close() }
}

// nextEffect waits (10 s at most) for the next supervaizer.effect event,
// skipping connected and heartbeat events; ok false when the stream ended.
func nextEffect(t *testing.T, ch <-chan sseEvent) (sseEvent, bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return ev, false
			}
			if ev.name == "supervaizer.effect" {
				return ev, true
			}
		case <-deadline:
			t.Fatal("no effect event within 10 s")
		}
	}
}

// TestSDKUpstreamEventStreamPerWorkspace: the SDK's real SSE stream
// (sse-starlette) passes event by event, workspace A's stream carries only
// the effects of A's calls and B's only B's, and a stream ends cleanly when
// its token expires.
func TestSDKUpstreamEventStreamPerWorkspace(t *testing.T) {
	key := newSigner(t, "k1")
	pemPath := writePEM(t, key)
	ag := startSDKAgent(t, sdkTokenEnv("SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY="+key.pem(t))...)
	sc := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), "public_key "+pemPath+"\n\t\t\tleeway 0", ""))
	waitReady(t, sc)

	tokA, tokB := key.mint(t, sdkClaims("ws-a")), key.mint(t, sdkClaims("ws-b"))
	streamA, closeA := openSDKStream(t, sc.base, tokA)
	defer closeA()
	streamB, closeB := openSDKStream(t, sc.base, tokB)
	defer closeB()

	for i, ws := range []string{"ws-a", "ws-b", "ws-a"} {
		tok := tokA
		if ws == "ws-b" {
			tok = tokB
		}
		r := sc.rpc(t, sdkAction(t, ws, "job.sync", nil), tok)
		notWorkspaceRefusal(t, "job.sync", r.Body)
		stream := streamA
		if ws == "ws-b" {
			stream = streamB
		}
		ev, ok := nextEffect(t, stream)
		if !ok || !strings.Contains(ev.data, `"message": "`+ws+`"`) && !strings.Contains(ev.data, `"message":"`+ws+`"`) {
			t.Fatalf("call %d (%s): effect %+v (stream open %v)", i, ws, ev, ok)
		}
	}
	// B never saw A's effects: its next effect is the one of a new B call.
	r := sc.rpc(t, sdkAction(t, "ws-b", "job.sync", nil), tokB)
	notWorkspaceRefusal(t, "job.sync", r.Body)
	if ev, ok := nextEffect(t, streamB); !ok || !strings.Contains(ev.data, "ws-b") {
		t.Fatalf("B's stream: %+v", ev)
	}

	// A token that expires in 2 s: the stream ends (no error needed from
	// the client's side: the body simply ends).
	short := key.mintWith(t, func(c jwt.MapClaims) {
		for k, v := range sdkClaims("ws-a") {
			c[k] = v
		}
		c["exp"] = time.Now().Add(2 * time.Second).Unix()
	})
	streamS, closeS := openSDKStream(t, sc.base, short)
	defer closeS()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case _, ok := <-streamS:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the stream did not end at token expiry")
		}
	}
}

// TestSDKUpstreamDataResource: the SDK's DataResource routes through the
// sidecar, with the mission context headers: the SDK verifies the
// forwarded token itself and hands the handler the decoded metadata.
func TestSDKUpstreamDataResource(t *testing.T) {
	key := newSigner(t, "k1")
	pemPath := writePEM(t, key)
	ag := startSDKAgent(t, sdkTokenEnv("SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY="+key.pem(t))...)
	sc := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), "public_key "+pemPath, ""))
	waitReady(t, sc)
	tok := key.mint(t, sdkClaims("ws-a"))
	meta := base64.RawURLEncoding.EncodeToString([]byte(`{"campaign":"c-9"}`))
	hdr := func(extra ...string) []string {
		return append([]string{"X-API-Key", testKey, "Content-Type", "application/json",
			"X-Supervaize-Workspace-Id", "ws-a", "X-Supervaize-Workspace-Slug", "ws-a",
			"X-Supervaize-Workspace-Authorization", "Bearer " + tok}, extra...)
	}
	prefix := "/api/agents/" + sdkSlug + "/data/contacts/"
	calls := []struct {
		op, method, path, body string
		status                 int
	}{
		{"list", "GET", prefix, "", 200},
		{"get", "GET", prefix + "c1", "", 200},
		{"create", "POST", prefix, `{"id":"c7","email":"x@example.com"}`, 201},
		{"update", "PUT", prefix + "c7", `{"email":"y@example.com"}`, 200},
		{"import", "POST", prefix + "import/", `[{"email":"z@example.com"}]`, 200},
		{"delete", "DELETE", prefix + "c7", "", 200},
	}
	for _, c := range calls {
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		r := do(t, c.method, sc.base+c.path, body, hdr("X-Supervaize-Mission-Id", "m-1", "X-Supervaize-Mission-Metadata", meta)...)
		if r.Status != c.status {
			t.Fatalf("%s: %d %s", c.op, r.Status, r.Body)
		}
		runs := ag.entries("data")
		last := runs[len(runs)-1]
		if last.Op != c.op || last.WorkspaceID != "ws-a" || last.MissionID == nil || *last.MissionID != "m-1" ||
			string(last.MissionMetadata) != `{"campaign": "c-9"}` {
			t.Fatalf("%s: the SDK's handler got %+v (metadata %s)", c.op, last, last.MissionMetadata)
		}
	}
	// The same list straight to the SDK answers the same bytes.
	via := do(t, "GET", sc.base+prefix, nil, hdr()...)
	direct := sdkDirect(t, ag, "GET", prefix, nil, hdr()...)
	if string(via.Body) != string(direct.Body) || via.Status != direct.Status {
		t.Fatalf("list: through the sidecar %d %s, straight %d %s", via.Status, via.Body, direct.Status, direct.Body)
	}
	// Metadata without a mission id: 400 from the sidecar, the SDK untouched.
	m := ag.mark()
	r := do(t, "GET", sc.base+prefix, nil, hdr("X-Supervaize-Mission-Metadata", meta)...)
	if r.Status != 400 {
		t.Fatalf("metadata without mission id: %d %s", r.Status, r.Body)
	}
	if got := nonCardRequests(ag.since(m)); len(got) != 0 {
		t.Fatalf("the SDK received %+v", got)
	}
}

// TestSDKUpstreamIdempotency: job.start with the SDK's real handler runs
// once per idempotency key, also when the SDK process is killed during the
// call and restarted before the caller retries.
func TestSDKUpstreamIdempotency(t *testing.T) {
	key := newSigner(t, "k1")
	pemPath := writePEM(t, key)
	ag := startSDKAgent(t, sdkTokenEnv("SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY="+key.pem(t))...)
	sc := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), "public_key "+pemPath,
		"\t\tidempotency {\n\t\t\twait_timeout 1s\n\t\t}\n"))
	waitReady(t, sc)
	tok := key.mint(t, sdkClaims("ws-a"))

	body := sdkAction(t, "ws-a", "job.start", func(req map[string]any) { req["idempotency_key"] = "idem-once" })
	first := sc.rpc(t, body, tok)
	notWorkspaceRefusal(t, "job.start", first.Body)
	second := sc.rpc(t, body, tok)
	if string(second.Body) != string(first.Body) {
		t.Fatalf("replay: %s, first answer %s", second.Body, first.Body)
	}
	if n := ag.actionRuns("idem-once"); n != 1 {
		t.Fatalf("job.start ran %d times for one key", n)
	}

	// Killed mid-call: the handler holds until the process is killed.
	held := sdkAction(t, "ws-a", "job.start", func(req map[string]any) {
		req["idempotency_key"] = "idem-killed"
		req["input"] = map[string]any{"hold": true}
	})
	var wg sync.WaitGroup
	var during response
	wg.Add(1)
	go func() { defer wg.Done(); during = sc.rpc(t, held, tok) }()
	eventually(t, 15*time.Second, "the held job.start to run", func() bool { return ag.actionRuns("idem-killed") == 1 })
	ag.restart()
	wg.Wait()
	if strings.Contains(string(during.Body), `"result"`) {
		t.Fatalf("a killed call answered a result: %s", during.Body)
	}
	retry := sc.rpc(t, held, tok)
	if strings.Contains(string(retry.Body), `"result"`) {
		t.Fatalf("the retry after the kill ran: %s", retry.Body)
	}
	if n := ag.actionRuns("idem-killed"); n != 1 {
		t.Fatalf("job.start ran %d times for the killed call's key (answers %s, then %s)", n, during.Body, retry.Body)
	}
	t.Logf("killed mid-call: %d %s; retry: %d %s", during.Status, during.Body, retry.Status, retry.Body)
}

// TestSDKUpstreamLegacyAndOtherRoutes: the SDK's legacy /api/supervaizer
// routes pass with a key (read key for GET), the sidecar refusing them
// under legacy_routes deny without the SDK seeing them; other routes (the
// SDK's /docs, /openapi.json, /) reach it under other_routes api_key.
func TestSDKUpstreamLegacyAndOtherRoutes(t *testing.T) {
	key := newSigner(t, "k1")
	pemPath := writePEM(t, key)
	ag := startSDKAgent(t, sdkTokenEnv("SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY="+key.pem(t))...)
	sc := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), "public_key "+pemPath, "\t\tother_routes api_key\n"))
	waitReady(t, sc)

	for _, p := range []string{"/api/supervaizer/agents", "/api/supervaizer/contract"} {
		via := do(t, "GET", sc.base+p, nil, "X-API-Key", testKey)
		direct := sdkDirect(t, ag, "GET", p, nil, "X-API-Key", testKey)
		if via.Status != direct.Status || string(via.Body) != string(direct.Body) {
			t.Fatalf("%s: through the sidecar %d %s\nstraight %d %s", p, via.Status, via.Body, direct.Status, direct.Body)
		}
		if via.Status != 200 {
			t.Fatalf("%s: %d %s", p, via.Status, via.Body)
		}
	}
	for _, p := range []string{"/docs", "/openapi.json", "/"} {
		via := do(t, "GET", sc.base+p, nil, "X-API-Key", testKey)
		if via.Status != 200 {
			t.Fatalf("%s: %d %s", p, via.Status, via.Body)
		}
	}

	deny := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), "public_key "+pemPath, "\t\tlegacy_routes deny\n"))
	waitReady(t, deny)
	m := ag.mark()
	if r := do(t, "GET", deny.base+"/api/supervaizer/agents", nil, "X-API-Key", testKey); r.Status != 404 {
		t.Fatalf("legacy_routes deny: %d %s", r.Status, r.Body)
	}
	if got := nonCardRequests(ag.since(m)); len(got) != 0 {
		t.Fatalf("the SDK received %+v", got)
	}
}

// TestSDKUpstreamLocalModeAgent: an SDK agent in local mode (no workspace
// authorization settings) behind a token-mode sidecar runs /a2a calls with
// its unverified "local-mode" context, only after the sidecar verified the
// token; its DataResource routes refuse every call (the SDK verifies tokens
// there even in local mode and has no key), so such an agent must keep the
// verifier settings to serve them.
func TestSDKUpstreamLocalModeAgent(t *testing.T) {
	key := newSigner(t, "k1")
	pemPath := writePEM(t, key)
	ag := startSDKAgent(t, "SUPERVAIZER_LOCAL_MODE=true", "SUPERVAIZER_DISABLE_HELLO_WORLD=true")
	sc := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), "public_key "+pemPath, ""))
	waitReady(t, sc)
	tok := key.mint(t, sdkClaims("ws-a"))
	if !strings.Contains(ag.output(), "Local mode: workspace authorization is BYPASSED") {
		t.Fatalf("the SDK did not log its local mode warning:\n%s", ag.output())
	}

	r := sc.rpc(t, sdkAction(t, "ws-a", "job.sync", nil), tok)
	if !strings.Contains(string(r.Body), `"result"`) {
		t.Fatalf("job.sync: %d %s", r.Status, r.Body)
	}
	runs := ag.entries("action")
	if g := runs[len(runs)-1].VerifiedGrant; g == nil || *g != "local-mode" {
		t.Fatalf("the SDK's handler context: %+v", runs[len(runs)-1])
	}
	m := ag.mark()
	if r := sc.rpc(t, sdkAction(t, "ws-a", "job.sync", nil), ""); !strings.Contains(string(r.Body), "workspace_authorization_missing") {
		t.Fatalf("no token: %s", r.Body)
	}
	if got := nonCardRequests(ag.since(m)); len(got) != 0 {
		t.Fatalf("the SDK received %+v", got)
	}
	d := do(t, "GET", sc.base+"/api/agents/"+sdkSlug+"/data/contacts/", nil, "X-API-Key", testKey,
		"X-Supervaize-Workspace-Id", "ws-a", "X-Supervaize-Workspace-Authorization", "Bearer "+tok)
	var detail struct {
		Detail string `json:"detail"`
	}
	_ = json.Unmarshal(d.Body, &detail)
	if d.Status != 403 || !strings.Contains(detail.Detail, "not configured") {
		t.Fatalf("a local-mode SDK's data route: %d %s", d.Status, d.Body)
	}
}

// TestSDKUpstreamAgentWithoutVerifier: an SDK agent with neither local mode
// nor workspace authorization settings answers every non-bootstrap call
// the sidecar allowed with its own -32030 not_configured: a refused mode
// (docs/sdk-deployment.md, "Running in front of a Supervaizer SDK agent").
func TestSDKUpstreamAgentWithoutVerifier(t *testing.T) {
	key := newSigner(t, "k1")
	pemPath := writePEM(t, key)
	ag := startSDKAgent(t)
	sc := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), "public_key "+pemPath, ""))
	waitReady(t, sc)
	r := sc.rpc(t, sdkAction(t, "ws-a", "job.sync", nil), key.mint(t, sdkClaims("ws-a")))
	wantRPCError(t, r, -32030, "workspace_authorization_not_configured")
	if n := len(ag.entries("action")); n != 0 {
		t.Fatalf("the SDK ran %d handlers", n)
	}
}

// TestSDKUpstreamReadKeyRewritten: the SDK knows one API key
// (SUPERVAIZER_API_KEY, write). A sidecar read key reaches it only when
// reverse_proxy replaces X-API-Key with the agent's key (header_up): then
// the read key's event stream and legacy GETs work, and the read key is
// still refused on /a2a by the sidecar. Without the rewrite the SDK
// answers 401 to the read key.
func TestSDKUpstreamReadKeyRewritten(t *testing.T) {
	key := newSigner(t, "k1")
	pemPath := writePEM(t, key)
	ag := startSDKAgent(t, sdkTokenEnv("SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY="+key.pem(t))...)
	plain := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), "public_key "+pemPath, ""))
	waitReady(t, plain)
	if r := do(t, "GET", plain.base+"/api/supervaizer/agents", nil, "X-API-Key", testReadKey); r.Status != 401 {
		t.Fatalf("read key without the rewrite: %d %s", r.Status, r.Body)
	}
	sc, err := runCaddyfile(t, "", func(port int) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy %s {\n\t\theader_up X-API-Key %s\n\t}\n}\n",
			port, sdkDirective(ag.addr(), "public_key "+pemPath, ""), ag.addr(), testKey)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, sc)
	if r := do(t, "GET", sc.base+"/api/supervaizer/agents", nil, "X-API-Key", testReadKey); r.Status != 200 {
		t.Fatalf("read key with the rewrite: %d %s", r.Status, r.Body)
	}
	m := ag.mark()
	r := do(t, "POST", sc.base+"/a2a", sdkAction(t, "ws-a", "job.sync", nil), "X-API-Key", testReadKey,
		"Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", "Bearer "+key.mint(t, sdkClaims("ws-a")))
	if r.Status != 403 {
		t.Fatalf("read key on /a2a: %d %s", r.Status, r.Body)
	}
	if got := nonCardRequests(ag.since(m)); len(got) != 0 {
		t.Fatalf("the SDK received %+v", got)
	}
}
