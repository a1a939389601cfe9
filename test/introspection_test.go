package test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// introspectStub is a real RFC 7662 endpoint on loopback. It reads the
// posted token's claims (unverified: it stands for Studio, which knows its
// grants), answers active unless the grant was revoked, and echoes grant_id,
// workspace_id and scope (edited by edit, if set). mode changes the answer:
// "" normal, "status" 500, "slow" no answer until the client gives up,
// "raw" the body in raw, "hold" waits for release before answering.
type introspectStub struct {
	srv     *httptest.Server
	calls   atomic.Int64
	mu      sync.Mutex
	revoked map[string]bool
	mode    string
	raw     string
	edit    func(map[string]any)
	release chan struct{}
	// what the last call carried
	lastAuth, lastCT string
	lastForm         url.Values
}

func startIntrospect(t *testing.T) *introspectStub {
	t.Helper()
	s := &introspectStub{revoked: map[string]bool{}, release: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.mu.Lock()
		select {
		case <-s.release:
		default:
			close(s.release)
		}
		s.mu.Unlock()
		s.srv.Close()
	})
	return s
}

func (s *introspectStub) serve(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	_ = r.ParseForm()
	s.mu.Lock()
	s.lastAuth, s.lastCT, s.lastForm = r.Header.Get("Authorization"), r.Header.Get("Content-Type"), r.PostForm
	mode, raw, edit, release := s.mode, s.raw, s.edit, s.release
	s.mu.Unlock()
	switch mode {
	case "status":
		http.Error(w, "down for maintenance", http.StatusInternalServerError)
		return
	case "slow":
		<-r.Context().Done()
		return
	case "raw":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, raw)
		return
	case "hold":
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
	}
	claims := map[string]any{}
	if parts := strings.Split(r.PostForm.Get("token"), "."); len(parts) == 3 {
		b, _ := base64.RawURLEncoding.DecodeString(parts[1])
		_ = json.Unmarshal(b, &claims)
	}
	grant, _ := claims["grant_id"].(string)
	s.mu.Lock()
	active := grant != "" && !s.revoked[grant]
	s.mu.Unlock()
	ans := map[string]any{"active": active}
	if active {
		var scopes []string
		for _, sc := range claims["scopes"].([]any) {
			scopes = append(scopes, sc.(string))
		}
		ans["grant_id"], ans["workspace_id"], ans["scope"] = grant, claims["workspace_id"], strings.Join(scopes, " ")
		ans["client_id"], ans["token_type"] = "studio", "workspace_authorization"
		if edit != nil {
			edit(ans)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ans)
}

func (s *introspectStub) set(f func(s *introspectStub)) {
	s.mu.Lock()
	f(s)
	s.mu.Unlock()
}

// startIntrospectGate runs the token gate with introspection at stub (block
// lines added inside introspection { }), and Caddy's /metrics.
func startIntrospectGate(t *testing.T, stubURL, block string) (*agent, *signer, *sidecar) {
	t.Helper()
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	directive := strings.Replace(jwksDirective(jw.url(), ""), "\t\t\tjwks_unknown_kid_interval 10ms\n",
		"\t\t\tjwks_unknown_kid_interval 10ms\n\t\t\tintrospection {\n\t\t\t\turl "+stubURL+"\n"+block+"\t\t\t}\n", 1)
	sc := startMetricsSidecar(t, ag.addr(), directive)
	return ag, key, sc
}

func dataCreate(t *testing.T, sc *sidecar, tok string) response {
	return do(t, "POST", sc.base+"/api/agents/"+testAgent+"/data/contacts/", []byte(`{"name":"x"}`),
		"X-API-Key", testKey, "X-Supervaize-Workspace-Id", "workspace_123", "X-Supervaize-Workspace-Authorization", "Bearer "+tok)
}

// TestIntrospectionRevocation: with introspection on, a grant revoked in the
// endpoint stops job.start and a DataResource create on the next call while
// the token is still valid; a non-covered action (job.sync) still passes
// without an introspection call. The client authenticates with HTTP Basic
// from {env.*}; the form carries the token; the secret and the token are
// never logged.
func TestIntrospectionRevocation(t *testing.T) {
	os.Setenv("SV_TEST_INTROSPECT_SECRET", "s3cret:with/odd chars")
	t.Cleanup(func() { os.Unsetenv("SV_TEST_INTROSPECT_SECRET") })
	stub := startIntrospect(t)
	ag, key, sc := startIntrospectGate(t, stub.srv.URL+"/introspect",
		"\t\t\t\tclient_id sidecar-1\n\t\t\t\tclient_secret {env.SV_TEST_INTROSPECT_SECRET}\n\t\t\t\tcache_ttl 1ns\n")
	tok := key.mint(t, baseClaims())
	dataTok := dataToken(t, key, "resource.contacts.create", "resource.contacts.list")

	resultOf(t, sc.rpc(t, freshJobStart(t), tok))
	if n := stub.calls.Load(); n != 1 {
		t.Fatalf("introspection calls %d, want 1", n)
	}
	stub.mu.Lock()
	user, pass, _ := (&http.Request{Header: http.Header{"Authorization": {stub.lastAuth}}}).BasicAuth()
	form, ct := stub.lastForm, stub.lastCT
	stub.mu.Unlock()
	if user != "sidecar-1" || pass != url.QueryEscape("s3cret:with/odd chars") {
		t.Fatalf("basic auth %q:%q", user, pass)
	}
	if ct != "application/x-www-form-urlencoded" || form.Get("token") != tok {
		t.Fatalf("introspection request: content-type %q, token sent %v", ct, form.Get("token") == tok)
	}
	if r := dataCreate(t, sc, dataTok); r.Status != 200 {
		t.Fatalf("data create: %d %s", r.Status, r.Body)
	}

	stub.set(func(s *introspectStub) { s.revoked["grant-1"] = true }) // revoked in Studio, mid-session
	ag.reset()
	wantRPCError(t, sc.rpc(t, freshJobStart(t), tok), -32030, "workspace_authorization_revoked")
	wantDetail(t, dataCreate(t, sc, dataTok), 403, "Workspace authorization has been revoked")
	nothingReached(t, ag)

	before := stub.calls.Load()
	if a := decodeRPC(t, sc.rpc(t, actionFor(t, "job.sync"), tok)); a.Error != nil {
		t.Fatalf("job.sync (not covered) refused: %s", a.Error.Message)
	}
	r := do(t, "GET", sc.base+"/api/agents/"+testAgent+"/data/contacts/", nil, "X-API-Key", testKey,
		"X-Supervaize-Workspace-Id", "workspace_123", "X-Supervaize-Workspace-Authorization", "Bearer "+dataTok)
	if r.Status != 200 {
		t.Fatalf("data list (not covered): %d %s", r.Status, r.Body)
	}
	if n := stub.calls.Load(); n != before {
		t.Fatalf("a non-covered call was introspected (%d calls, want %d)", n, before)
	}
	if ag.count.Load() != 2 {
		t.Fatalf("agent received %d requests, want the 2 non-covered calls", ag.count.Load())
	}

	// A token the gate refuses anyway is never sent to the endpoint.
	before = stub.calls.Load()
	wantRPCError(t, sc.rpc(t, freshJobStart(t), key.mintWith(t, func(c jwt.MapClaims) { c["workspace_id"] = "workspace_9" })),
		-32030, "workspace_authorization_wrong_workspace")
	if n := stub.calls.Load(); n != before {
		t.Fatal("a refused token was introspected")
	}

	logs := sc.logs(t)
	if !strings.Contains(logs, `"introspection":"inactive"`) || !strings.Contains(logs, `"code":"workspace_authorization_revoked"`) {
		t.Errorf("no revoked audit line:\n%s", logs)
	}
	if strings.Contains(logs, tok) || strings.Contains(logs, "s3cret") {
		t.Fatal("a token or the client secret was logged")
	}
	if got := sc.metric(t, `supervaizer_sidecar_introspection_total{result="inactive"}`); got != "2" {
		t.Errorf("inactive calls metric %q, want 2", got)
	}
}

// TestIntrospectionFailClosed: every way of not getting a usable answer
// refuses a covered call with workspace_authorization_introspection_unavailable
// (never reaching the agent), and an answer disagreeing with the token is
// refused as revoked. Readiness stays 200 with a note while failing.
func TestIntrospectionFailClosed(t *testing.T) {
	stub := startIntrospect(t)
	ag, key, sc := startIntrospectGate(t, stub.srv.URL, "\t\t\t\tbearer studio-introspect-token\n\t\t\t\ttimeout 300ms\n\t\t\t\tcache_ttl 1ns\n\t\t\t\tnegative_cache_ttl 1ns\n")
	const unavailable, revoked = "workspace_authorization_introspection_unavailable", "workspace_authorization_revoked"
	cases := []struct {
		name string
		set  func(s *introspectStub)
		code string
	}{
		{"status 500", func(s *introspectStub) { s.mode = "status" }, unavailable},
		{"slow (timeout)", func(s *introspectStub) { s.mode = "slow" }, unavailable},
		{"not JSON", func(s *introspectStub) { s.mode, s.raw = "raw", "active" }, unavailable},
		{"an array", func(s *introspectStub) { s.mode, s.raw = "raw", `[{"active":true}]` }, unavailable},
		{"active a string", func(s *introspectStub) { s.mode, s.raw = "raw", `{"active":"true"}` }, unavailable},
		{"no active", func(s *introspectStub) { s.mode, s.raw = "raw", `{"grant_id":"grant-1"}` }, unavailable},
		{"duplicate active", func(s *introspectStub) { s.mode, s.raw = "raw", `{"active":false,"active":true}` }, unavailable},
		{"grant_id a number", func(s *introspectStub) { s.mode, s.raw = "raw", `{"active":true,"grant_id":1}` }, unavailable},
		{"trailing data", func(s *introspectStub) { s.mode, s.raw = "raw", `{"active":true} {}` }, unavailable},
		{"mismatching grant_id", func(s *introspectStub) { s.edit = func(a map[string]any) { a["grant_id"] = "grant-2" } }, revoked},
		{"mismatching workspace_id", func(s *introspectStub) { s.edit = func(a map[string]any) { a["workspace_id"] = "workspace_9" } }, revoked},
		{"narrowed scope", func(s *introspectStub) {
			s.edit = func(a map[string]any) { a["scope"] = "supervaizer/action.invoke job.sync" }
		}, revoked},
	}
	tok := key.mint(t, baseClaims())
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stub.set(func(s *introspectStub) { s.mode, s.raw, s.edit = "", "", nil; c.set(s) })
			ag.reset()
			start := time.Now()
			wantRPCError(t, sc.rpc(t, freshJobStart(t), tok), -32030, c.code)
			nothingReached(t, ag)
			if el := time.Since(start); el > 5*time.Second {
				t.Fatalf("refusal took %v", el)
			}
		})
	}
	stub.mu.Lock()
	auth := stub.lastAuth
	stub.mu.Unlock()
	if auth != "Bearer studio-introspect-token" {
		t.Fatalf("authorization %q", auth)
	}
	stub.set(func(s *introspectStub) { s.mode = "status" })
	wantRPCError(t, sc.rpc(t, freshJobStart(t), tok), -32030, unavailable)
	// Readiness takes no key: the note, without the last error's text; the
	// status page (read key) has the text.
	r := do(t, "GET", sc.base+"/_sidecar/ready", nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), "introspection failing") || strings.Contains(string(r.Body), "status 500") {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}
	if r := do(t, "GET", sc.base+"/_sidecar/status", nil, "X-API-Key", testKey); r.Status != 200 ||
		!strings.Contains(string(r.Body), "introspection failing") || !strings.Contains(string(r.Body), "status 500") {
		t.Fatalf("status: %d %s", r.Status, r.Body)
	}
	stub.set(func(s *introspectStub) { s.mode, s.edit = "", nil })
	resultOf(t, sc.rpc(t, freshJobStart(t), tok))
	if r := do(t, "GET", sc.base+"/_sidecar/ready", nil); strings.Contains(string(r.Body), "notes") {
		t.Fatalf("note kept after recovery: %s", r.Body)
	}

	t.Run("endpoint down", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there now
		ag2, key2, sc2 := startIntrospectGate(t, "http://"+addr+"/introspect", "")
		wantRPCError(t, sc2.rpc(t, freshJobStart(t), key2.mint(t, baseClaims())), -32030, unavailable)
		wantDetail(t, dataCreate(t, sc2, dataToken(t, key2, "resource.contacts.create")), 403, "Workspace authorization could not be confirmed")
		nothingReached(t, ag2)
		if got := sc2.metric(t, `supervaizer_sidecar_introspection_total{result="error"}`); got != "2" {
			t.Errorf("error calls metric %q, want 2", got)
		}
	})
}

// TestIntrospectionCache: an active answer is reused (hit) until cache_ttl,
// and never past the token's exp; an inactive answer is cached for
// negative_cache_ttl.
func TestIntrospectionCache(t *testing.T) {
	stub := startIntrospect(t)
	_, key, sc := startIntrospectGate(t, stub.srv.URL, "\t\t\t\tcache_ttl 1s\n\t\t\t\tnegative_cache_ttl 1s\n")
	tok := key.mint(t, baseClaims())
	resultOf(t, sc.rpc(t, freshJobStart(t), tok))
	resultOf(t, sc.rpc(t, freshJobStart(t), tok))
	if n := stub.calls.Load(); n != 1 {
		t.Fatalf("introspection calls %d, want 1 (second answered from the cache)", n)
	}
	if got := sc.metric(t, `supervaizer_sidecar_introspection_cache_total{result="hit"}`); got != "1" {
		t.Fatalf("cache hits %q, want 1", got)
	}
	eventually(t, 5*time.Second, "the cached answer to expire", func() bool {
		resultOf(t, sc.rpc(t, freshJobStart(t), tok))
		return stub.calls.Load() == 2
	})

	// Negative answers are cached too: revoked, then restored in Studio,
	// the refusal holds until negative_cache_ttl.
	stub.set(func(s *introspectStub) { s.revoked["grant-1"] = true })
	eventually(t, 5*time.Second, "the revocation to be seen", func() bool {
		return strings.Contains(string(sc.rpc(t, freshJobStart(t), tok).Body), "workspace_authorization_revoked")
	})
	calls := stub.calls.Load()
	stub.set(func(s *introspectStub) { s.revoked["grant-1"] = false })
	wantRPCError(t, sc.rpc(t, freshJobStart(t), tok), -32030, "workspace_authorization_revoked")
	if stub.calls.Load() != calls {
		t.Fatal("an inactive answer was not cached")
	}
	eventually(t, 5*time.Second, "the negative answer to expire", func() bool {
		return decodeRPC(t, sc.rpc(t, freshJobStart(t), tok)).Error == nil
	})

	t.Run("never past the token's exp", func(t *testing.T) {
		stub2 := startIntrospect(t)
		_, key2, sc2 := startIntrospectGate(t, stub2.srv.URL, "\t\t\t\tcache_ttl 1h\n")
		exp := time.Now().Add(1500 * time.Millisecond).Unix()
		short := key2.mintWith(t, func(c jwt.MapClaims) { c["exp"] = exp }) // still valid within the 30 s leeway after exp
		resultOf(t, sc2.rpc(t, freshJobStart(t), short))
		eventually(t, 5*time.Second, "a new introspection after the token's exp", func() bool {
			resultOf(t, sc2.rpc(t, freshJobStart(t), short))
			return stub2.calls.Load() == 2
		})
		if time.Now().Unix() < exp {
			t.Fatal("the cached answer expired before the token's exp")
		}
	})
}

// TestIntrospectionCoalesced: N concurrent covered calls with one token
// make one introspection call; every caller gets the answer.
func TestIntrospectionCoalesced(t *testing.T) {
	const n = 8
	stub := startIntrospect(t)
	stub.set(func(s *introspectStub) { s.mode = "hold" })
	ag, key, sc := startIntrospectGate(t, stub.srv.URL, "")
	tok := key.mint(t, baseClaims())
	resultOf(t, sc.rpc(t, actionFor(t, "job.sync"), tok)) // verifies the token once (not covered)
	var wg sync.WaitGroup
	errs := make(chan string, n)
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = freshJobStart(t)
	}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, sc.base+"/a2a", strings.NewReader(string(bodies[i])))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-API-Key", testKey)
			req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+tok)
			resp, err := client.Do(req) // not t: this is not the test's goroutine
			if err != nil {
				errs <- err.Error()
				return
			}
			defer resp.Body.Close()
			var a rpcAnswer
			if json.NewDecoder(resp.Body).Decode(&a) != nil || a.Error != nil {
				errs <- fmt.Sprintf("status %d, error %+v", resp.StatusCode, a.Error)
			}
		}()
	}
	// Every caller has verified its token (cache hits) before the answer is released.
	eventually(t, 10*time.Second, "all callers to be verified", func() bool {
		return sc.metric(t, `supervaizer_sidecar_token_cache_total{result="hit"}`) == fmt.Sprint(n)
	})
	eventually(t, 5*time.Second, "the introspection call", func() bool { return stub.calls.Load() == 1 })
	stub.set(func(s *introspectStub) { close(s.release) })
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("a coalesced caller was refused: %s", e)
	}
	if c := stub.calls.Load(); c != 1 {
		t.Fatalf("%d concurrent calls made %d introspections, want 1", n, c)
	}
	miss := sc.metric(t, `supervaizer_sidecar_introspection_cache_total{result="miss"}`)
	shared := sc.metric(t, `supervaizer_sidecar_introspection_cache_total{result="shared"}`)
	if miss != "1" || shared == "" {
		t.Fatalf("sources: miss %q shared %q", miss, shared)
	}
	if got := ag.count.Load(); got != n+1 {
		t.Fatalf("agent received %d, want %d", got, n+1)
	}
}

// TestIntrospectionStartupRefusals: a config that cannot introspect is
// refused at start, naming the setting.
func TestIntrospectionStartupRefusals(t *testing.T) {
	ag := startAgent(t)
	jw := startJWKS(t, newSigner(t, "k1").jwk())
	withBlock := func(block string) string {
		return strings.Replace(jwksDirective(jw.url(), ""), "\t\t\tjwks_unknown_kid_interval 10ms\n",
			"\t\t\tintrospection {\n"+block+"\t\t\t}\n", 1)
	}
	for _, c := range []struct{ name, directive, want string }{
		{"local mode", fmt.Sprintf("api_key %s\nlocal_mode on\nworkspace_auth {\nintrospection {\nurl http://127.0.0.1:1/\n}\n}\n", testKey),
			"introspection needs workspace_auth required on"},
		{"no url", withBlock("timeout 1s\n"), "url is required"},
		{"client_id without secret", withBlock("url http://127.0.0.1:1/\nclient_id x\n"), "client_id without client_secret"},
		{"bearer and client_id", withBlock("url http://127.0.0.1:1/\nclient_id x\nclient_secret y\nbearer z\n"), "choose one"},
		{"bad pattern", withBlock("url http://127.0.0.1:1/\nactions job.st*\n"), "bad target pattern"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := tryStartSidecar(t, ag.addr(), c.directive)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}
