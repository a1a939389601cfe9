package test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestFixtureJobStartPassesUnchanged: the fixture's job.start with a correct
// token reaches the agent byte for byte, with verified headers.
func TestFixtureJobStartPassesUnchanged(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "")

	body := jobStartBody(t)
	tok := key.mint(t, baseClaims())
	r := sc.rpc(t, body, tok)
	a := decodeRPC(t, r)
	if a.Error != nil || string(a.ID) != "7" {
		t.Fatalf("want a result for id 7, got %s", r.Body)
	}
	got := ag.last(t)
	if !bytes.Equal(got.Body, body) {
		t.Fatalf("agent body differs:\n got %s\nwant %s", got.Body, body)
	}
	want := map[string]string{
		"X-Supervaize-Verified-Mode":                "token",
		"X-Supervaize-Verified-Grant-Id":            "grant-1",
		"X-Supervaize-Verified-Workspace-Id":        "workspace_123",
		"X-Supervaize-Verified-Workspace-Slug":      "acme",
		"X-Supervaize-Verified-Agent-Id":            testAgentID,
		"X-Supervaize-Verified-Agent-Slug":          testAgent,
		"X-Supervaize-Verified-Server-Id":           testServerID,
		"X-Supervaize-Verified-Agent-Workspace-Ref": "agent-ws-1",
		"X-Supervaize-Workspace-Authorization":      "Bearer " + tok,
		"X-Api-Key":                                 testKey,
	}
	for k, v := range want {
		if g := got.Header.Get(k); g != v {
			t.Errorf("agent header %s = %q, want %q", k, g, v)
		}
	}
	if !strings.Contains(got.Header.Get("X-Supervaize-Verified-Scopes"), "job.start") {
		t.Errorf("scopes header %q", got.Header.Get("X-Supervaize-Verified-Scopes"))
	}
	if got.Header.Get("X-Supervaize-Verified-Token-Id") == "" {
		t.Error("token id (jti) header missing")
	}
	// The audit log names the decision but never the token or the key.
	logs := sc.logs(t)
	if !strings.Contains(logs, `"outcome":"allow"`) || !strings.Contains(logs, `"grant_id":"grant-1"`) {
		t.Errorf("no allow audit line in logs")
	}
	if strings.Contains(logs, tok) || strings.Contains(logs, testKey) || strings.Contains(logs, strings.Split(tok, ".")[2]) {
		t.Fatalf("a token or an API key was logged:\n%s", logs)
	}
}

// TestTokenTable reaches every row of the reference's token table over HTTP
// (docs/sdk-wire.md, "Workspace token checks"), checking the JSON-RPC
// code, data.code, the echoed id, and that the agent received nothing.
func TestTokenTable(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "k1")
	other := newSigner(t, "k1") // same kid, different key
	rsaKID := map[string]any{"kty": "RSA", "kid": "rsa1", "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw", "e": "AQAB"}
	jw := startJWKS(t, key.jwk(), rsaKID)
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), ""))

	rsaToken := rawToken(key, `{"alg":"EdDSA","typ":"JWT","kid":"rsa1"}`, mustJSON(baseClaims()))
	cases := []struct {
		name     string
		token    string
		body     []byte
		dataCode string
	}{
		{"missing", "", nil, "workspace_authorization_missing"},
		{"malformed two parts", "abc.def", nil, "workspace_authorization_malformed"},
		{"malformed header not JSON", "bm90anNvbg.e30.c2ln", nil, "workspace_authorization_malformed"},
		{"malformed claims not an object", rawToken(key, `{"alg":"EdDSA","kid":"k1"}`, `[1,2]`), nil, "workspace_authorization_malformed"},
		{"alg none", rawToken(nil, `{"alg":"none","kid":"k1"}`, mustJSON(baseClaims())), nil, "workspace_authorization_unsupported_alg"},
		{"alg HS256", hs256Token(t, key), nil, "workspace_authorization_unsupported_alg"},
		{"alg RS256 header", rawToken(key, `{"alg":"RS256","kid":"k1"}`, mustJSON(baseClaims())), nil, "workspace_authorization_unsupported_alg"},
		{"alg unknown", rawToken(key, `{"alg":"XX999","kid":"k1"}`, mustJSON(baseClaims())), nil, "workspace_authorization_unsupported_alg"},
		{"missing kid", (&signer{priv: key.priv, pub: key.pub}).mint(t, baseClaims()), nil, "workspace_authorization_missing_kid"},
		{"unknown kid", newSigner(t, "nope").mint(t, baseClaims()), nil, "workspace_authorization_unknown_kid"},
		{"invalid jwk (RSA key for kid)", rsaToken, nil, "workspace_authorization_invalid_jwk"},
		{"bad signature", other.mint(t, baseClaims()), nil, "workspace_authorization_bad_signature"},
		{"invalid claims: no grant_id", key.mintWith(t, func(c jwt.MapClaims) { delete(c, "grant_id") }), nil, "workspace_authorization_invalid_claims"},
		{"invalid claims: empty scopes", key.mintWith(t, func(c jwt.MapClaims) { c["scopes"] = []any{} }), nil, "workspace_authorization_invalid_claims"},
		{"invalid claims: scopes a string", key.mintWith(t, func(c jwt.MapClaims) { c["scopes"] = "job.start" }), nil, "workspace_authorization_invalid_claims"},
		{"invalid claims: exp a string", key.mintWith(t, func(c jwt.MapClaims) { c["exp"] = "9999999999" }), nil, "workspace_authorization_invalid_claims"},
		{"invalid claims: exp fractional", key.mintWith(t, func(c jwt.MapClaims) { c["exp"] = float64(time.Now().Unix()+600) + 0.5 }), nil, "workspace_authorization_invalid_claims"},
		{"invalid claims: null workspace_id", key.mintWith(t, func(c jwt.MapClaims) { c["workspace_id"] = nil }), nil, "workspace_authorization_invalid_claims"},
		{"invalid claims: no exp", key.mintWith(t, func(c jwt.MapClaims) { delete(c, "exp") }), nil, "workspace_authorization_invalid_claims"},
		{"wrong issuer", key.mintWith(t, func(c jwt.MapClaims) { c["iss"] = "https://evil.test" }), nil, "workspace_authorization_wrong_issuer"},
		{"wrong audience", key.mintWith(t, func(c jwt.MapClaims) { c["aud"] = "supervaizer-server:other" }), nil, "workspace_authorization_wrong_audience"},
		{"wrong audience list", key.mintWith(t, func(c jwt.MapClaims) { c["aud"] = []any{"a", "b"} }), nil, "workspace_authorization_wrong_audience"},
		{"expired", key.mintWith(t, func(c jwt.MapClaims) { c["exp"] = time.Now().Unix() - 120 }), nil, "workspace_authorization_expired"},
		{"not yet valid (iat)", key.mintWith(t, func(c jwt.MapClaims) { c["iat"] = time.Now().Unix() + 300 }), nil, "workspace_authorization_not_yet_valid"},
		{"not yet valid (nbf)", key.mintWith(t, func(c jwt.MapClaims) { c["nbf"] = time.Now().Unix() + 300 }), nil, "workspace_authorization_not_yet_valid"},
		{"wrong server", key.mintWith(t, func(c jwt.MapClaims) { c["server_id"] = "srv-2" }), nil, "workspace_authorization_wrong_server"},
		{"unknown agent", key.mint(t, baseClaims()), actionBody(t, func(r map[string]any) { r["agent_slug"] = "someone_else" }), "workspace_authorization_unknown_agent"},
		{"agent not registered", key.mintWith(t, func(c jwt.MapClaims) { c["agent_slug"] = "unregistered_agent" }),
			actionBody(t, func(r map[string]any) { r["agent_slug"] = "unregistered_agent" }), "workspace_authorization_agent_not_registered"},
		{"token agent_slug differs and the agent is not registered (the SDK's order)", key.mint(t, baseClaims()),
			actionBody(t, func(r map[string]any) { r["agent_slug"] = "unregistered_agent" }), "workspace_authorization_wrong_agent"},
		{"wrong agent slug", key.mintWith(t, func(c jwt.MapClaims) { c["agent_slug"] = "unregistered_agent" }), nil, "workspace_authorization_wrong_agent"},
		{"wrong agent id", key.mintWith(t, func(c jwt.MapClaims) { c["agent_id"] = "studio-agent-2" }), nil, "workspace_authorization_wrong_agent"},
		{"wrong workspace id", key.mintWith(t, func(c jwt.MapClaims) { c["workspace_id"] = "workspace_999" }), nil, "workspace_authorization_wrong_workspace"},
		{"wrong workspace slug", key.mintWith(t, func(c jwt.MapClaims) { c["workspace_slug"] = "other" }), nil, "workspace_authorization_wrong_workspace"},
		{"missing action scope", key.mintWith(t, func(c jwt.MapClaims) { c["scopes"] = []any{"supervaizer/action.invoke", "job.sync"} }), nil, "workspace_authorization_missing_scope"},
		{"missing method scope", key.mintWith(t, func(c jwt.MapClaims) { c["scopes"] = []any{"job.start"} }), nil, "workspace_authorization_missing_scope"},
		{"surface scope missing", key.mint(t, baseClaims()), surfaceEnvelope(t, "mission.agent.resource.contacts"), "workspace_authorization_missing_scope"},
		{"two bearer headers", "", nil, "workspace_authorization_missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ag.reset()
			body := tc.body
			if body == nil {
				body = jobStartBody(t)
			}
			var r response
			if tc.name == "two bearer headers" {
				tok := key.mint(t, baseClaims())
				r = sc.rpc(t, body, tok, "X-Supervaize-Workspace-Authorization", "Bearer "+tok)
			} else {
				r = sc.rpc(t, body, tc.token)
			}
			a := wantRPCError(t, r, -32030, tc.dataCode)
			if string(a.ID) != "7" {
				t.Errorf("id %s, want 7", a.ID)
			}
			nothingReached(t, ag)
		})
	}

	// The same token passes when everything is right (the table's baseline),
	// also as a bare token without "Bearer".
	ag.reset()
	tok := key.mint(t, baseClaims())
	r := do(t, "POST", sc.base+"/a2a", freshJobStart(t), "X-API-Key", testKey, "Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", "  "+tok+" ")
	if a := decodeRPC(t, r); a.Error != nil {
		t.Fatalf("bare token refused: %s", r.Body)
	}
	// aud as a list with the right value among wrong ones is accepted.
	r = sc.rpc(t, freshJobStart(t), key.mintWith(t, func(c jwt.MapClaims) { c["aud"] = []any{"x", "supervaizer-server:" + testServerID, "y"} }))
	if a := decodeRPC(t, r); a.Error != nil {
		t.Fatalf("aud list refused: %s", r.Body)
	}
	if ag.count.Load() != 2 {
		t.Fatalf("agent count %d, want 2", ag.count.Load())
	}
}

// hs256Token signs with HMAC using the Ed25519 public key bytes as the
// secret: the classic algorithm-confusion attack.
func hs256Token(t *testing.T, s *signer) string {
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, baseClaims())
	tok.Header["kid"] = s.kid
	out, err := tok.SignedString([]byte(s.pub))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPEMKey: a PEM public key verifies tokens without kid.
func TestPEMKey(t *testing.T) {
	ag := startAgent(t)
	key := newSigner(t, "")
	path := t.TempDir() + "/studio.pem"
	writeFile(t, path, key.pem(t))
	sc := startSidecar(t, ag.addr(), pemDirective(path))
	if a := decodeRPC(t, sc.rpc(t, jobStartBody(t), key.mint(t, baseClaims()))); a.Error != nil {
		t.Fatal("PEM-verified token refused")
	}
	ag.reset()
	wantRPCError(t, sc.rpc(t, jobStartBody(t), newSigner(t, "").mint(t, baseClaims())), -32030, "workspace_authorization_bad_signature")
	nothingReached(t, ag)
}

// TestTransportKey: 401/403 bodies, two keys, and read keys on /a2a.
func TestTransportKey(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "")
	tok := "Bearer " + key.mint(t, baseClaims())
	body := jobStartBody(t)
	url := sc.base + "/a2a"

	wantDetail(t, do(t, "POST", url, body, "X-Supervaize-Workspace-Authorization", tok), 401, "Invalid or missing API key")
	wantDetail(t, do(t, "POST", url, body, "X-API-Key", "wrong", "X-Supervaize-Workspace-Authorization", tok), 401, "Invalid or missing API key")
	wantDetail(t, do(t, "POST", url, body, "X-API-Key", testKey, "X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", tok), 401, "Invalid or missing API key")
	wantDetail(t, do(t, "POST", url, body, "X-API-Key", testReadKey, "X-Supervaize-Workspace-Authorization", tok), 403, "Insufficient scope")
	wantDetail(t, do(t, "POST", url, body, "X-API-Key", testKey+", "+testKey, "X-Supervaize-Workspace-Authorization", tok), 401, "Invalid or missing API key")
	nothingReached(t, ag)
}

// TestBootstrap: the three bootstrap capabilities pass without a token but
// still need the key; look-alikes do not.
func TestBootstrap(t *testing.T) {
	ag, _, _, sc := startTokenGate(t, "")

	for _, body := range [][]byte{
		actionFor(t, "workspace_binding.options"),
		actionFor(t, "workspace_binding.create"),
		surfaceEnvelope(t, "workspace_binding.create"),
	} {
		ag.reset()
		if a := decodeRPC(t, sc.rpc(t, body, "")); a.Error != nil {
			t.Fatalf("bootstrap refused: %s", body)
		}
		if m := ag.last(t).Header.Get("X-Supervaize-Verified-Mode"); m != "bootstrap" {
			t.Fatalf("verified mode %q, want bootstrap", m)
		}
		ag.reset()
		wantDetail(t, do(t, "POST", sc.base+"/a2a", body), 401, "Invalid or missing API key")
		nothingReached(t, ag)
	}
	ag.reset()
	for _, body := range [][]byte{
		surfaceEnvelope(t, "workspace_binding.options"), // not a bootstrap surface
		actionFor(t, "workspace_binding.delete"),
		actionFor(t, "Workspace_binding.options"),
	} {
		wantRPCError(t, sc.rpc(t, body, ""), -32030, "workspace_authorization_missing")
	}
	nothingReached(t, ag)
}

// TestModes: required off outside local mode fails not_configured; local
// mode dispatches without a token with a local context; any workspace_auth
// setting turns local mode's bypass off.
func TestModes(t *testing.T) {
	t.Run("not configured", func(t *testing.T) {
		ag := startAgent(t)
		sc := startSidecar(t, ag.addr(), fmt.Sprintf("api_key %s\nserver_id %s\nagent %s %s\n", testKey, testServerID, testAgent, testAgentID))
		wantRPCError(t, sc.rpc(t, jobStartBody(t), ""), -32030, "workspace_authorization_not_configured")
		nothingReached(t, ag)
		if a := decodeRPC(t, sc.rpc(t, actionFor(t, "workspace_binding.options"), "")); a.Error != nil {
			t.Fatal("bootstrap refused in not-configured mode")
		}
	})
	t.Run("local", func(t *testing.T) {
		ag := startAgent(t)
		sc := startSidecar(t, ag.addr(), fmt.Sprintf("api_key %s\nlocal_mode on\nagent %s %s\n", testKey, testAgent, testAgentID))
		if a := decodeRPC(t, sc.rpc(t, jobStartBody(t), "")); a.Error != nil {
			t.Fatal("local mode refused")
		}
		h := ag.last(t).Header
		if h.Get("X-Supervaize-Verified-Mode") != "local" || h.Get("X-Supervaize-Verified-Grant-Id") != "local-mode" ||
			h.Get("X-Supervaize-Verified-Workspace-Id") != "workspace_123" ||
			h.Get("X-Supervaize-Verified-Scopes") != "supervaizer/action.invoke job.start" {
			t.Fatalf("local context headers: %v", h)
		}
		if !strings.Contains(sc.logs(t), "local mode") {
			t.Fatal("no local-mode warning logged")
		}
	})
	t.Run("local with an auth setting fails closed", func(t *testing.T) {
		ag := startAgent(t)
		sc := startSidecar(t, ag.addr(), fmt.Sprintf("api_key %s\nlocal_mode on\nworkspace_auth {\nissuer %s\n}\n", testKey, testIssuer))
		wantRPCError(t, sc.rpc(t, jobStartBody(t), ""), -32030, "workspace_authorization_not_configured")
		nothingReached(t, ag)
	})
}

// TestForwardTokenOff: with forward_token off the agent never receives the
// workspace token, whatever the route.
func TestForwardTokenOff(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "		forward_token off\n")
	tok := key.mint(t, baseClaims())
	decodeRPC(t, sc.rpc(t, freshJobStart(t), tok))
	do(t, "GET", sc.base+"/api/supervaizer/agents/x", nil, "X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", "Bearer "+tok)
	do(t, "GET", sc.base+"/.well-known/health", nil, "X-Supervaize-Workspace-Authorization", "Bearer "+tok)
	reqs := ag.received()
	if len(reqs) != 3 {
		t.Fatalf("agent got %d requests", len(reqs))
	}
	for _, r := range reqs {
		if v := r.Header.Values("X-Supervaize-Workspace-Authorization"); len(v) != 0 {
			t.Fatalf("%s got the token", r.Path)
		}
	}
	if reqs[0].Header.Get("X-Supervaize-Verified-Mode") != "token" {
		t.Fatal("verified headers missing")
	}
}

// TestHugeToken: a 1 MB token is refused without reaching the agent.
func TestHugeToken(t *testing.T) {
	ag, _, _, sc := startTokenGate(t, "")
	huge := strings.Repeat("a", 1<<20)
	req, _ := http.NewRequest("POST", sc.base+"/a2a", strings.NewReader(string(jobStartBody(t))))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", testKey)
	req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+huge+"."+huge+"."+huge)
	resp, err := client.Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 && !strings.Contains(string(b), "workspace_authorization_malformed") {
			t.Fatalf("huge token: %d %s", resp.StatusCode, b)
		}
	}
	// A token just over MaxTokenBytes but within header limits: malformed.
	big := strings.Repeat("a", 6<<10)
	wantRPCError(t, sc.rpc(t, jobStartBody(t), big+"."+big+"."+big), -32030, "workspace_authorization_malformed")
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

// TestBootstrapUnknownAgent: a bootstrap call (no token) for an agent this
// sidecar does not serve is refused with the SDK's answer to it (no
// handler registered for that agent): -32010 for the actions, -32011 for
// the surface, the SDK's text and data (docs/sdk-wire.md, "Bootstrap set").
func TestBootstrapUnknownAgent(t *testing.T) {
	ag, _, _, sc := startTokenGate(t, "")
	body := actionBody(t, func(r map[string]any) { r["action"] = "workspace_binding.options"; r["agent_slug"] = "not_served" })
	a := wantRPCError(t, sc.rpc(t, body, ""), -32010, "")
	if a.Error.Message != "Action handler not registered: workspace_binding.options" ||
		compactJSON(a.Error.Data) != `{"action":"workspace_binding.options","agent_slug":"not_served"}` {
		t.Fatalf("bootstrap action: %s %s", a.Error.Message, a.Error.Data)
	}
	req := fixtureRequest(t)
	delete(req, "action")
	delete(req, "idempotency_key")
	req["agent_slug"], req["surface"] = "not_served", "workspace_binding.create"
	a = wantRPCError(t, sc.rpc(t, envelope("supervaizer/surface.load", "surface_request", req), ""), -32011, "")
	if a.Error.Message != "Surface handler not registered: workspace_binding.create" ||
		compactJSON(a.Error.Data) != `{"agent_slug":"not_served","surface":"workspace_binding.create"}` {
		t.Fatalf("bootstrap surface: %s %s", a.Error.Message, a.Error.Data)
	}
	nothingReached(t, ag)
}
