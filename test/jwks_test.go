package test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// withWorkspaceAuth adds lines to jwksDirective's workspace_auth block.
func withWorkspaceAuth(directive, lines string) string {
	return strings.Replace(directive, "jwks_unknown_kid_interval 10ms\n", "jwks_unknown_kid_interval 10ms\n"+lines, 1)
}

// TestJWKSKeylessDocumentKeepsTokens: a JWKS document with no usable
// Ed25519 key (an empty keys list, only RSA or X25519 keys, a bad x) never
// replaces the last good keys: tokens keep working, the sidecar stays ready,
// and each such fetch is logged at warn and counted as a failed fetch with
// reason no_usable_key.
func TestJWKSKeylessDocumentKeepsTokens(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	dir := withWorkspaceAuth(jwksDirective(jw.url(), ""), "\t\t\tjwks_refresh 1s\n")
	sc := startMetricsSidecar(t, ag.addr(), dir)
	cached := key.mint(t, baseClaims())
	if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), cached)); a.Error != nil {
		t.Fatalf("refused before: %s", a.Error.Message)
	}
	badX := key.jwk()
	badX["x"] = base64.RawURLEncoding.EncodeToString([]byte("short"))
	x25519 := map[string]any{"kty": "OKP", "crv": "X25519", "kid": "k1", "x": base64.RawURLEncoding.EncodeToString(make([]byte, 32))}
	rsa := map[string]any{"kty": "RSA", "kid": "k1", "n": base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{0xc5}, 256)), "e": "AQAB"}
	for name, keys := range map[string][]map[string]any{
		"empty keys": {}, "bad x": {badX}, "only X25519": {x25519}, "only RSA": {rsa},
	} {
		jw.setKeys(keys...)
		before := jw.fetches.Load()
		eventually(t, "two refreshes of the "+name+" document", func() bool { return jw.fetches.Load() >= before+2 })
		for _, tok := range []string{cached, key.mint(t, baseClaims())} {
			if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), tok)); a.Error != nil {
				t.Fatalf("%s: good key lost: %s", name, a.Error.Message)
			}
		}
		if r := do(t, "GET", sc.base+"/_sidecar/ready", nil); r.Status != 200 {
			t.Fatalf("%s: not ready: %s", name, r.Body)
		}
	}
	m := string(do(t, "GET", sc.base+"/metrics", nil).Body)
	if !strings.Contains(m, `supervaizer_sidecar_jwks_refresh_total{reason="no_usable_key",result="error"}`) {
		t.Errorf("no failed-fetch count with reason no_usable_key:\n%s", grepLines(m, "jwks"))
	}
	logs := sc.logs(t)
	if !strings.Contains(logs, `"reason":"no_usable_key"`) || !strings.Contains(logs, "keeping the last good keys") {
		t.Errorf("no warn line for the keyless document")
	}
}

// TestJWKSMaxStale: with jwks_max_stale, once the JWKS has failed for that
// long the last good keys stop verifying (a token that verified before, and
// is cached, too: workspace_authorization_jwks_unavailable, the agent
// receives nothing) and /_sidecar/ready is 503 naming jwks_stale; the next
// good fetch restores both.
func TestJWKSMaxStale(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), withWorkspaceAuth(jwksDirective(jw.url(), ""), "\t\t\tjwks_refresh 1s\n\t\t\tjwks_max_stale 2s\n"))
	tok := key.mint(t, baseClaims())
	if a := decodeRPC(t, sc.rpc(t, actionFor(t, "job.sync"), tok)); a.Error != nil {
		t.Fatalf("refused while fresh: %s", a.Error.Message)
	}
	ag.reset()
	jw.setDoc(503, []byte("down"))
	eventually(t, "readiness to name jwks_stale", func() bool {
		r := do(t, "GET", sc.base+"/_sidecar/ready", nil)
		return r.Status == 503 && strings.Contains(string(r.Body), `"jwks_stale"`)
	})
	wantRPCError(t, sc.rpc(t, actionFor(t, "job.sync"), tok), -32030, "workspace_authorization_jwks_unavailable")
	wantRPCError(t, sc.rpc(t, actionFor(t, "job.sync"), key.mint(t, baseClaims())), -32030, "workspace_authorization_jwks_unavailable")
	nothingReached(t, ag)
	st := do(t, "GET", sc.base+"/_sidecar/status", nil, "X-API-Key", testReadKey)
	if !strings.Contains(string(st.Body), `"stale":true`) {
		t.Fatalf("status does not say stale: %s", st.Body)
	}

	jw.setKeys(key.jwk())
	waitReady(t, sc)
	if a := decodeRPC(t, sc.rpc(t, actionFor(t, "job.sync"), tok)); a.Error != nil {
		t.Fatalf("refused after the JWKS recovered: %s", a.Error.Message)
	}
}

// TestUnknownKIDRefreshNeedsKeyAndServedAgent: a token with a kid the
// sidecar has not loaded triggers a JWKS fetch only on a call that passed
// the transport key and names an agent served here; a read-key holder on
// /a2a/events, or a call for an agent not served here, spends nothing.
func TestUnknownKIDRefreshNeedsKeyAndServedAgent(t *testing.T) {
	ag, key, jw, sc := startTokenGate(t, "\t\tapi_key events-write-key write\n")
	k2 := newSigner(t, "k2")
	jw.setKeys(key.jwk(), k2.jwk()) // a refresh would find k2
	before := jw.fetches.Load()

	for _, apiKey := range []string{testReadKey, "events-write-key"} {
		for i := 0; i < 5; i++ {
			r := do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", apiKey,
				"X-Supervaize-Workspace-Authorization", "Bearer "+newSigner(t, fmt.Sprintf("rnd-%d", i)).mint(t, baseClaims()))
			wantDetail(t, r, 403, "")
		}
		wantDetail(t, do(t, "GET", sc.base+"/a2a/events", nil, "X-API-Key", apiKey,
			"X-Supervaize-Workspace-Authorization", "Bearer "+k2.mint(t, baseClaims())), 403, "")
	}
	other := actionBody(t, func(r map[string]any) { r["agent_slug"] = "not_served_here"; r["action"] = "job.sync" })
	wantRPCError(t, sc.rpc(t, other, k2.mintWith(t, func(c jwt.MapClaims) { c["agent_slug"] = "not_served_here" })),
		-32030, "workspace_authorization_unknown_kid")
	// No key at all: refused before any token is read.
	wantDetail(t, do(t, "POST", sc.base+"/a2a", actionFor(t, "job.sync"),
		"X-Supervaize-Workspace-Authorization", "Bearer "+k2.mint(t, baseClaims())), 401, "")
	nothingReached(t, ag)
	if n := jw.fetches.Load() - before; n != 0 {
		t.Fatalf("%d JWKS fetches triggered by calls that may not refresh", n)
	}

	// The same token on a call that may refresh: one fetch, allowed.
	if a := decodeRPC(t, sc.rpc(t, actionFor(t, "job.sync"), k2.mint(t, baseClaims()))); a.Error != nil {
		t.Fatalf("k2 refused on a call that may refresh: %s", a.Error.Message)
	}
	if n := jw.fetches.Load() - before; n != 1 {
		t.Fatalf("%d JWKS fetches, want 1", n)
	}
}

// TestUnknownKIDRefreshSurvivesDisconnect: a client that disconnects while
// its unknown-kid refresh is in flight does not cancel the fetch, which
// completes (its request context is never cancelled) and installs the new
// key: the next call with it needs no fetch. The departed call reached
// nothing.
func TestUnknownKIDRefreshSurvivesDisconnect(t *testing.T) {
	k1, k2 := newSigner(t, "k1"), newSigner(t, "k2")
	var doc atomic.Value
	doc.Store(mustJSON(map[string]any{"keys": []any{k1.jwk()}}))
	var hold, cancelled atomic.Bool
	var fetches atomic.Int64
	arrived := make(chan struct{}, 8)
	release := make(chan struct{})
	jw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		if hold.Load() {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
				cancelled.Store(true)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(doc.Load().(string)))
	}))
	defer jw.Close()
	ag := startAgent(t)
	sc := startSidecar(t, ag.addr(), withWorkspaceAuth(jwksDirective(jw.URL+"/jwks.json", ""), "\t\t\tjwks_timeout 10s\n"))

	hold.Store(true)
	doc.Store(mustJSON(map[string]any{"keys": []any{k1.jwk(), k2.jwk()}}))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", sc.base+"/a2a", bytes.NewReader(actionFor(t, "job.sync")))
	req.Header.Set("X-API-Key", testKey)
	req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+k2.mint(t, baseClaims()))
	done := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{}).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-arrived // the unknown-kid refresh is in flight
	cancel()  // the client disconnects
	if err := <-done; err == nil {
		t.Fatal("the request completed although its client left")
	}
	eventually(t, "the departed call's decision", func() bool {
		return strings.Contains(sc.logs(t), `"code":"workspace_authorization_unknown_kid"`)
	})
	close(release)
	hold.Store(false)
	nothingReached(t, ag)

	// The refresh completed without the client: k2 works with no new fetch.
	eventually(t, "the detached refresh to install k2", func() bool {
		st := do(t, "GET", sc.base+"/_sidecar/status", nil, "X-API-Key", testReadKey)
		var s struct {
			JWKS struct {
				LastError string `json:"last_error"`
			} `json:"jwks"`
		}
		_ = json.Unmarshal(st.Body, &s)
		return fetches.Load() == 2 && s.JWKS.LastError == "" && !cancelled.Load()
	})
	if a := decodeRPC(t, sc.rpc(t, actionFor(t, "job.sync"), k2.mint(t, baseClaims()))); a.Error != nil {
		t.Fatalf("k2 refused after the detached refresh: %s", a.Error.Message)
	}
	if n := fetches.Load(); n != 2 || cancelled.Load() {
		t.Fatalf("%d fetches (want 2: start, the refresh), cancelled=%v", n, cancelled.Load())
	}
}

// TestSidecarRefreshRereadsJWKS: POST /_sidecar/refresh (write key) fetches
// the JWKS now, not rate-limited, so a rotated-in key works at once on any
// route; a read key may not.
func TestSidecarRefreshRereadsJWKS(t *testing.T) {
	ag, key, jw, sc := startTokenGate(t, "")
	k2 := newSigner(t, "k2")
	jw.setKeys(key.jwk(), k2.jwk())
	before := jw.fetches.Load()
	if r := do(t, "POST", sc.base+"/_sidecar/refresh", nil, "X-API-Key", testReadKey); r.Status != 403 {
		t.Fatalf("read key: %d %s", r.Status, r.Body)
	}
	r := do(t, "POST", sc.base+"/_sidecar/refresh", nil, "X-API-Key", testKey)
	if r.Status != 200 || !strings.Contains(string(r.Body), `"jwks":{"ok":true}`) {
		t.Fatalf("refresh: %d %s", r.Status, r.Body)
	}
	if n := jw.fetches.Load() - before; n != 1 {
		t.Fatalf("%d fetches, want 1", n)
	}
	// A call for an agent not served here never refreshes: its token gets
	// past the key lookup only because /_sidecar/refresh loaded k2.
	other := actionBody(t, func(r map[string]any) { r["agent_slug"] = "not_served_here"; r["action"] = "job.sync" })
	wantRPCError(t, sc.rpc(t, other, k2.mint(t, baseClaims())), -32030, "workspace_authorization_unknown_agent")
	if n := jw.fetches.Load() - before; n != 1 {
		t.Fatalf("%d fetches, want 1", n)
	}
	nothingReached(t, ag)
}

// TestSDKEnvironmentForms: two forms an SDK deployment's settings take are
// accepted as they are (issue 14): `leeway 30`, plain seconds like
// $SUPERVAIZER_WORKSPACE_AUTH_LEEWAY_SECONDS, and a PEM in
// $SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY written on one line with literal
// \n sequences, as .env files write it.
func TestSDKEnvironmentForms(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	t.Setenv("SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY", strings.ReplaceAll(key.pem(t), "\n", `\n`))
	sc := startSidecar(t, ag.addr(), fmt.Sprintf(`		api_key %s write
		server_id %s
		agent %s %s
		workspace_auth {
			required on
			issuer %s
			leeway 30
		}
`, testKey, testServerID, testAgent, testAgentID, testIssuer))
	within := key.mintWith(t, func(c jwt.MapClaims) { c["exp"] = time.Now().Unix() - 20 })
	if a := decodeRPC(t, sc.rpc(t, actionFor(t, "job.sync"), within)); a.Error != nil {
		t.Fatalf("a token 20 s past exp refused with leeway 30: %s", a.Error.Message)
	}
	ag.reset()
	beyond := key.mintWith(t, func(c jwt.MapClaims) { c["exp"] = time.Now().Unix() - 40 })
	wantRPCError(t, sc.rpc(t, actionFor(t, "job.sync"), beyond), -32030, "workspace_authorization_expired")
	nothingReached(t, ag)
}

// TestMaxTokenLifetime: with max_token_lifetime, a token whose exp - iat
// exceeds it is refused invalid_claims (the agent receives nothing); one
// within it passes.
func TestMaxTokenLifetime(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), withWorkspaceAuth(jwksDirective(jw.url(), ""), "\t\t\tmax_token_lifetime 15m\n"))
	now := time.Now().Unix()
	long := key.mintWith(t, func(c jwt.MapClaims) { c["iat"], c["exp"] = now, now+901 })
	wantRPCError(t, sc.rpc(t, actionFor(t, "job.sync"), long), -32030, "workspace_authorization_invalid_claims")
	noIAT := key.mintWith(t, func(c jwt.MapClaims) { delete(c, "iat") })
	wantRPCError(t, sc.rpc(t, actionFor(t, "job.sync"), noIAT), -32030, "workspace_authorization_invalid_claims")
	nothingReached(t, ag)
	ok := key.mintWith(t, func(c jwt.MapClaims) { c["iat"], c["exp"] = now, now+900 })
	if a := decodeRPC(t, sc.rpc(t, actionFor(t, "job.sync"), ok)); a.Error != nil {
		t.Fatalf("a 15 min token refused: %s", a.Error.Message)
	}
}

// TestWholeSecondExpiry: through Caddy, with leeway 0, a token whose exp is
// the current second passes (the SDK refuses only exp + leeway < now, now in
// whole seconds) and one whose exp is the second before fails expired. A
// call is judged only if it was sent and answered within one second, so the
// sidecar's clock read that same second.
func TestWholeSecondExpiry(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), withWorkspaceAuth(jwksDirective(jw.url(), ""), "\t\t\tleeway 0\n"))
	judge := func(expOffset int64) rpcAnswer {
		t.Helper()
		for attempt := 0; attempt < 20; attempt++ {
			sec := time.Now().Unix()
			tok := key.mintWith(t, func(c jwt.MapClaims) { c["iat"], c["exp"] = sec-60, sec+expOffset })
			a := decodeRPC(t, sc.rpc(t, actionFor(t, "job.sync"), tok))
			if time.Now().Unix() == sec {
				return a
			}
		}
		t.Fatal("no call fit in one second")
		return rpcAnswer{}
	}
	if a := judge(0); a.Error != nil {
		t.Fatalf("exp == now refused: %s %s", a.Error.Message, a.Error.Data)
	}
	ag.reset()
	a := judge(-1)
	if a.Error == nil || !strings.Contains(string(a.Error.Data), "workspace_authorization_expired") {
		t.Fatalf("exp == now - 1 not expired: %+v", a)
	}
	nothingReached(t, ag)
}
