package test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

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
		eventually(t, 15*time.Second, "two refreshes of the "+name+" document", func() bool { return jw.fetches.Load() >= before+2 })
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
	eventually(t, 15*time.Second, "readiness to name jwks_stale", func() bool {
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
	req.Header.Set("Content-Type", "application/json")
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
	eventually(t, 15*time.Second, "the departed call's decision", func() bool {
		return strings.Contains(sc.logs(t), `"code":"workspace_authorization_unknown_kid"`)
	})
	close(release)
	hold.Store(false)
	nothingReached(t, ag)

	// The refresh completed without the client: k2 works with no new fetch.
	eventually(t, 15*time.Second, "the detached refresh to install k2", func() bool {
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

// TestJWKSRowsWithoutKeys: jwks_unavailable when the JWKS never loaded, and
// invalid_jwks when it answers a document without a keys list.
func TestJWKSRowsWithoutKeys(t *testing.T) {
	key := newSigner(t, "k1")
	t.Run("unavailable", func(t *testing.T) {
		ag := startAgent(t)
		jw := startJWKS(t, key.jwk())
		jw.setDoc(503, []byte("down"))
		sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), ""))
		wantRPCError(t, sc.rpc(t, jobStartBody(t), key.mint(t, baseClaims())), -32030, "workspace_authorization_jwks_unavailable")
		nothingReached(t, ag)
	})
	t.Run("invalid document", func(t *testing.T) {
		ag := startAgent(t)
		jw := startJWKS(t)
		jw.setDoc(200, []byte(`{"keys":"nope"}`))
		sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), ""))
		wantRPCError(t, sc.rpc(t, jobStartBody(t), key.mint(t, baseClaims())), -32030, "workspace_authorization_invalid_jwks")
		nothingReached(t, ag)
	})
}

// TestJWKSRotationAndOutage: a key rotated in after start is accepted
// without restart; with the JWKS server stopped the old key keeps working.
func TestJWKSRotationAndOutage(t *testing.T) {
	ag := startAgent(t)
	k1, k2 := newSigner(t, "k1"), newSigner(t, "k2")
	jw := startJWKS(t, k1.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), ""))

	if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), k1.mint(t, baseClaims()))); a.Error != nil {
		t.Fatal("k1 refused")
	}
	jw.setKeys(k1.jwk(), k2.jwk())
	r := sc.rpc(t, freshJobStart(t), k2.mint(t, baseClaims()))
	if a := decodeRPC(t, r); a.Error != nil {
		t.Fatalf("rotated key k2 refused: %s", r.Body)
	}
	jw.srv.Close()
	// A fresh token (not in the verified-token cache) signed by k1 still verifies.
	r = sc.rpc(t, freshJobStart(t), k1.mint(t, baseClaims()))
	if a := decodeRPC(t, r); a.Error != nil {
		t.Fatalf("old key refused with the JWKS down: %s", r.Body)
	}
	if ag.count.Load() != 3 {
		t.Fatalf("agent got %d calls, want 3", ag.count.Load())
	}
}

// TestKeyRemovedByRotation: after a refresh removes a key, even a token that
// was verified (and cached) with it is refused.
func TestKeyRemovedByRotation(t *testing.T) {
	ag := startAgent(t)
	k1, k2 := newSigner(t, "k1"), newSigner(t, "k2")
	jw := startJWKS(t, k1.jwk(), k2.jwk())
	sc := startSidecar(t, ag.addr(), strings.Replace(jwksDirective(jw.url(), ""), "jwks_unknown_kid_interval 10ms", "jwks_unknown_kid_interval 10ms\n			jwks_refresh 1s", 1))
	tok := k1.mint(t, baseClaims())
	if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), tok)); a.Error != nil {
		t.Fatal("k1 refused before rotation")
	}
	jw.setKeys(k2.jwk())
	eventually(t, 15*time.Second, "the cached k1 token to be refused", func() bool {
		a := decodeRPC(t, sc.rpc(t, freshJobStart(t), tok))
		return a.Error != nil && strings.Contains(string(a.Error.Data), "workspace_authorization_unknown_kid")
	})
	if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), k2.mint(t, baseClaims()))); a.Error != nil {
		t.Fatal("k2 refused after rotation")
	}
}

// TestJWKSGarbage: an HTML error page or garbage from the JWKS endpoint
// after a good fetch does not replace the keys.
func TestJWKSGarbage(t *testing.T) {
	ag := startAgent(t)
	k1 := newSigner(t, "k1")
	jw := startJWKS(t, k1.jwk())
	sc := startSidecar(t, ag.addr(), strings.Replace(jwksDirective(jw.url(), ""), "jwks_unknown_kid_interval 10ms", "jwks_unknown_kid_interval 10ms\n			jwks_refresh 1s", 1))
	before := jw.fetches.Load()
	for _, doc := range [][]byte{[]byte("<html>502 Bad Gateway</html>"), []byte(`{}`), []byte(`{"keys":[]}`[:5])} {
		jw.setDoc(200, doc)
		eventually(t, 15*time.Second, "a refresh", func() bool { return jw.fetches.Load() > before+1 })
		before = jw.fetches.Load()
		if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), k1.mint(t, baseClaims()))); a.Error != nil {
			t.Fatalf("good key lost after JWKS answered %q: %s", doc, a.Error.Message)
		}
	}
}

// TestUnknownKIDStorm: 10,000 tokens with kids unknown to the JWKS fetch the
// JWKS a bounded number of times, and none reaches the agent.
func TestUnknownKIDStorm(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), strings.Replace(jwksDirective(jw.url(), ""), "jwks_unknown_kid_interval 10ms", "jwks_unknown_kid_interval 10s", 1))
	if r := do(t, "GET", sc.base+"/_sidecar/ready", nil); r.Status != 200 {
		t.Fatalf("not ready with the JWKS up: %s", r.Body)
	}
	before := jw.fetches.Load()
	body := actionFor(t, "job.sync")
	start := time.Now()
	var wg sync.WaitGroup
	var denied atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 1250; i++ {
				tok := rawToken(key, fmt.Sprintf(`{"alg":"EdDSA","kid":"../../etc/passwd?%d-%d"}`, w, i), mustJSON(baseClaims()))
				req, _ := http.NewRequest("POST", sc.base+"/a2a", strings.NewReader(string(body)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-API-Key", testKey)
				req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+tok)
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if strings.Contains(string(b), "workspace_authorization_unknown_kid") {
					denied.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	if denied.Load() != 10000 {
		t.Fatalf("%d of 10000 refused with unknown_kid", denied.Load())
	}
	// jwks_unknown_kid_interval 10s: one fetch per 10 s of storm at most
	// (plus the first), however long a loaded machine takes to send it.
	if n, limit := jw.fetches.Load()-before, 2+int64(time.Since(start)/(10*time.Second)); n > limit {
		t.Fatalf("JWKS fetched %d times for 10,000 unknown kids in %v (limit %d)", n, time.Since(start), limit)
	}
	nothingReached(t, ag)
}

// TestJWKSDownAtStart: fail closed and not ready until the JWKS answers.
func TestJWKSDownAtStart(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	jw.setDoc(503, []byte("down"))
	sc := startSidecar(t, ag.addr(), strings.Replace(jwksDirective(jw.url(), ""), "jwks_unknown_kid_interval 10ms", "jwks_unknown_kid_interval 10ms\n			jwks_refresh 1s", 1))
	if r := do(t, "GET", sc.base+"/_sidecar/ready", nil); r.Status != 503 || !strings.Contains(string(r.Body), "jwks") {
		t.Fatalf("ready with the JWKS down: %d %s", r.Status, r.Body)
	}
	wantRPCError(t, sc.rpc(t, freshJobStart(t), key.mint(t, baseClaims())), -32030, "workspace_authorization_jwks_unavailable")
	nothingReached(t, ag)
	jw.setKeys(key.jwk())
	waitReady(t, sc)
	if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), key.mint(t, baseClaims()))); a.Error != nil {
		t.Fatalf("refused once the JWKS is up: %s", a.Error.Message)
	}
}

// TestJWKSSlow: a JWKS endpoint that never answers bounds request latency
// (jwks_timeout) and leaves no goroutines behind.
func TestJWKSSlow(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), strings.Replace(jwksDirective(jw.url(), ""), "jwks_unknown_kid_interval 10ms",
		"jwks_unknown_kid_interval 10ms\n			jwks_timeout 300ms", 1))
	jw.hang.Store(true)
	client.CloseIdleConnections()
	base := runtime.NumGoroutine()
	var wg sync.WaitGroup
	var answered atomic.Int64
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			tok := newSigner(t, fmt.Sprintf("unknown-%d", i)).mint(t, baseClaims())
			a := decodeRPC(t, sc.rpc(t, actionFor(t, "job.sync"), tok))
			if a.Error != nil && a.Error.Code == -32030 {
				answered.Add(1)
			}
		}(i)
	}
	wg.Wait()
	if answered.Load() != 20 {
		t.Fatalf("%d of 20 unknown-kid calls answered with -32030", answered.Load())
	}
	nothingReached(t, ag)
	// The good, already loaded key keeps working while the JWKS hangs.
	if a := decodeRPC(t, sc.rpc(t, freshJobStart(t), key.mint(t, baseClaims()))); a.Error != nil {
		t.Fatalf("loaded key refused while the JWKS hangs: %s", a.Error.Message)
	}
	client.CloseIdleConnections()
	eventually(t, 15*time.Second, "goroutines back to baseline", func() bool { return runtime.NumGoroutine() <= base+10 })
}
