package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// jwksDirective is a token-mode configuration with a JWKS at url.
func jwksDirective(url string, extra string) string {
	return fmt.Sprintf(`		api_key %s write
		api_key %s read
		server_id %s
		agent %s %s
		agent unregistered_agent
		workspace_auth {
			required on
			issuer %s
			jwks_url %s
			jwks_unknown_kid_interval 10ms
		}
%s`, testKey, testReadKey, testServerID, testAgent, testAgentID, testIssuer, url, extra)
}

func pemDirective(pemPath string) string {
	return fmt.Sprintf(`		api_key %s write
		server_id %s
		agent %s %s
		workspace_auth {
			required on
			issuer %s
			public_key %s
		}
`, testKey, testServerID, testAgent, testAgentID, testIssuer, pemPath)
}

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
	r := do(t, "POST", sc.base+"/a2a", freshJobStart(t), "X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", "  "+tok+" ")
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

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
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

// TestSpoofedVerifiedHeaders: incoming X-Supervaize-Verified-* never reach
// the agent, whatever their case, on every route class.
func TestSpoofedVerifiedHeaders(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "")
	spoof := []string{
		"X-Supervaize-Verified-Workspace-Id", "workspace_evil",
		"x-supervaize-verified-grant-id", "evil",
		"X-SUPERVAIZE-VERIFIED-MODE", "token",
		"X-Supervaize-Verified-Anything", "evil",
	}
	r := sc.rpc(t, actionFor(t, "workspace_binding.options"), "", spoof...)
	decodeRPC(t, r)
	r = do(t, "GET", sc.base+"/.well-known/health", nil, spoof...)
	if r.Status != 200 {
		t.Fatalf("health: %d", r.Status)
	}
	r = sc.rpc(t, jobStartBody(t), key.mint(t, baseClaims()), spoof...)
	decodeRPC(t, r)
	reqs := ag.received()
	if len(reqs) != 3 {
		t.Fatalf("agent got %d requests, want 3", len(reqs))
	}
	for _, got := range reqs {
		for name, v := range got.Header {
			if strings.HasPrefix(strings.ToLower(name), "x-supervaize-verified-") {
				for _, val := range v {
					if strings.Contains(val, "evil") {
						t.Fatalf("spoofed header %s: %v reached the agent", name, v)
					}
				}
				if name == "X-Supervaize-Verified-Workspace-Id" && v[0] != "workspace_123" {
					t.Fatalf("workspace header %v", v)
				}
			}
		}
	}
	if m := reqs[0].Header.Values("X-Supervaize-Verified-Mode"); len(m) != 1 || m[0] != "bootstrap" {
		t.Fatalf("bootstrap mode header %v", m)
	}
	if m := reqs[1].Header.Values("X-Supervaize-Verified-Mode"); len(m) != 0 {
		t.Fatalf("public route got a verified header %v", m)
	}
}

// TestEnvelopeRefusals: bodies the gate refuses before any token check.
func TestEnvelopeRefusals(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "		max_body 4KiB\n")
	tok := key.mint(t, baseClaims())
	req := string(loadFixture(t).ActionRequest)
	env := func(params string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":7,"method":"supervaizer/action.invoke","params":` + params + `}`)
	}
	cases := []struct {
		name string
		body []byte
		code int
	}{
		{"not JSON", []byte("hello"), -32700},
		{"invalid UTF-8", append(env(`{"action_request":`+req[:len(req)-1]+`,"x":"`), 0xff, '"', '}', '}', '}'), -32700},
		{"BOM", append([]byte("\xef\xbb\xbf"), jobStartBody(t)...), -32700},
		{"trailing garbage", append(jobStartBody(t), []byte(" {}")...), -32700},
		{"NaN", env(`{"action_request":` + req[:len(req)-1] + `,"x":NaN}}`), -32700},
		{"comment", append([]byte("/* c */"), jobStartBody(t)...), -32700},
		{"batch", []byte(`[` + string(jobStartBody(t)) + `]`), -32600},
		{"string", []byte(`"x"`), -32600},
		{"jsonrpc 1.0", bytes.Replace(jobStartBody(t), []byte(`"2.0"`), []byte(`"1.0"`), 1), -32602},
		{"duplicate envelope key", []byte(`{"jsonrpc":"2.0","id":7,"method":"supervaizer/action.invoke","method":"x","params":{"action_request":` + req + `}}`), -32600},
		{"duplicate workspace id", env(`{"action_request":` + strings.Replace(req, `"id": "workspace_123"`, `"id": "workspace_123", "id": "workspace_evil"`, 1) + `}`), -32600},
		{"duplicate escaped key", env(`{"action_request":` + strings.Replace(req, `"action": "job.start"`, `"action": "job.start", "\u0061ction": "job.cancel"`, 1) + `}`), -32600},
		{"duplicate deep in input", env(`{"action_request":` + strings.Replace(req, `"campaign_id": "campaign_123"`, `"campaign_id": "a", "campaign_id": "b"`, 1) + `}`), -32600},
		// A Go agent's encoding/json matches "Action" to the action field: the
		// gate would check job.start and the agent run job.sync.
		{"key differing only in case", env(`{"action_request":` + strings.Replace(req, `"action": "job.start"`, `"action": "job.start", "Action": "job.sync"`, 1) + `}`), -32600},
		{"bootstrap with a case-folded action", env(`{"action_request":` + strings.Replace(req, `"action": "job.start"`, `"action": "workspace_binding.options", "ACTION": "job.start"`, 1) + `}`), -32600},
		{"too deep", env(`{"action_request":` + req[:len(req)-1] + `,"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}}`), -32600},
		{"unknown method", bytes.Replace(jobStartBody(t), []byte("supervaizer/action.invoke"), []byte("tasks/send"), 1), -32601},
		{"params not object", env(`[1]`), -32602},
		{"no request_id", actionBody(t, func(r map[string]any) { delete(r, "request_id") }), -32602},
		{"no actor.user_id", actionBody(t, func(r map[string]any) { r["actor"] = map[string]any{} }), -32602},
		{"workspace.id number", actionBody(t, func(r map[string]any) { r["workspace"] = map[string]any{"id": 5} }), -32602},
		{"no mission_id", actionBody(t, func(r map[string]any) { delete(r, "mission_id") }), -32602},
		{"no agent_slug", actionBody(t, func(r map[string]any) { delete(r, "agent_slug") }), -32602},
		{"no surface", actionBody(t, func(r map[string]any) { delete(r, "surface") }), -32602},
		{"no action", actionBody(t, func(r map[string]any) { delete(r, "action") }), -32602},
		{"input not object", actionBody(t, func(r map[string]any) { r["input"] = []any{} }), -32602},
		{"caller-supplied workspace_authorization", actionBody(t, func(r map[string]any) {
			r["workspace_authorization"] = map[string]any{"workspace_id": "workspace_123"}
		}), -32602},
		{"mission id mismatch", actionBody(t, func(r map[string]any) { r["mission"] = map[string]any{"id": "other"} }), -32602},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ag.reset()
			wantRPCError(t, sc.rpc(t, tc.body, tok), tc.code, "")
			nothingReached(t, ag)
		})
	}
	t.Run("oversize", func(t *testing.T) {
		ag.reset()
		big := actionBody(t, func(r map[string]any) { r["input"] = map[string]any{"pad": strings.Repeat("x", 8192)} })
		wantRPCError(t, sc.rpc(t, big, tok), -32600, "request_body_too_large")
		nothingReached(t, ag)
	})
	t.Run("gzip", func(t *testing.T) {
		ag.reset()
		wantDetail(t, sc.rpc(t, jobStartBody(t), tok, "Content-Encoding", "gzip"), 415, "")
		nothingReached(t, ag)
	})
	t.Run("wrong method", func(t *testing.T) {
		ag.reset()
		wantDetail(t, do(t, "GET", sc.base+"/a2a", nil, "X-API-Key", testKey), 405, "")
		nothingReached(t, ag)
	})
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

// TestStartupRefusals: bad settings refuse to start with an error naming them.
func TestStartupRefusals(t *testing.T) {
	key := newSigner(t, "k1")
	pemPath := t.TempDir() + "/k.pem"
	writeFile(t, pemPath, key.pem(t))
	badPEM := t.TempDir() + "/bad.pem"
	writeFile(t, badPEM, "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
	cases := []struct{ body, want string }{
		{"server_id s\n", "no API key"},
		{fmt.Sprintf("api_key k\nworkspace_auth {\nrequired on\npublic_key %s\n}\nserver_id s\n", pemPath), "no issuer"},
		{"api_key k\nworkspace_auth {\nrequired on\nissuer i\n}\nserver_id s\n", "no key source"},
		{fmt.Sprintf("api_key k\nworkspace_auth {\nrequired on\nissuer i\npublic_key %s\njwks_url http://127.0.0.1:1/j\n}\nserver_id s\n", pemPath), "both set"},
		{fmt.Sprintf("api_key k\nworkspace_auth {\nrequired on\nissuer i\npublic_key %s\n}\nserver_id s\n", badPEM), "public_key"},
		{fmt.Sprintf("api_key k\nworkspace_auth {\nrequired on\nissuer i\npublic_key %s\n}\n", pemPath), "server_id"},
		{"api_key k\n", "server_id"},
	}
	// Every problem is reported at once, each naming its setting.
	_, err := tryStartSidecar(t, "127.0.0.1:1", "legacy_routes maybe\n")
	for _, want := range []string{"no API key", "server_id", "legacy_routes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %q", err, want)
		}
	}
	for _, tc := range cases {
		_, err := tryStartSidecar(t, "127.0.0.1:1", tc.body)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %q: error %v, want one naming %q", tc.body, err, tc.want)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := osWriteFile(path, []byte(content)); err != nil {
		t.Fatal(err)
	}
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

// TestAuditLogDenyOnly: audit_log deny keeps denials and drops allow lines.
func TestAuditLogDenyOnly(t *testing.T) {
	_, key, _, sc := startTokenGate(t, "		audit_log deny\n")
	decodeRPC(t, sc.rpc(t, freshJobStart(t), key.mint(t, baseClaims())))
	wantRPCError(t, sc.rpc(t, freshJobStart(t), ""), -32030, "workspace_authorization_missing")
	logs := sc.logs(t)
	if strings.Contains(logs, `"outcome":"allow"`) {
		t.Fatal("an allow line was logged with audit_log deny")
	}
	if !strings.Contains(logs, `"code":"workspace_authorization_missing"`) {
		t.Fatal("the denial was not logged")
	}
}

// TestVerifiedHeadersOff: with verified_headers off the agent gets no
// X-Supervaize-Verified-* header at all (incoming ones are still removed),
// and the call is decided exactly as before.
func TestVerifiedHeadersOff(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "		verified_headers off\n")
	spoof := []string{"X-Supervaize-Verified-Workspace-Id", "workspace_evil", "X-Supervaize-Verified-Mode", "token"}
	body := jobStartBody(t)
	if a := decodeRPC(t, sc.rpc(t, body, key.mint(t, baseClaims()), spoof...)); a.Error != nil {
		t.Fatalf("call refused: %+v", a.Error)
	}
	wrong := key.mintWith(t, func(c jwt.MapClaims) { c["workspace_id"] = "workspace_other" })
	if a := decodeRPC(t, sc.rpc(t, body, wrong, spoof...)); a.Error == nil {
		t.Fatal("a token for another workspace was allowed")
	}
	reqs := ag.received()
	if len(reqs) != 1 {
		t.Fatalf("agent got %d requests, want 1", len(reqs))
	}
	if !bytes.Equal(reqs[0].Body, body) {
		t.Fatal("the body changed")
	}
	for name, v := range reqs[0].Header {
		if strings.HasPrefix(strings.ToLower(name), "x-supervaize-verified-") {
			t.Fatalf("verified_headers off, yet the agent got %s: %v", name, v)
		}
	}
}
