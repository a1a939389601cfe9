package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The SDK's error texts, each next to the request that produces it, through
// a real Caddy (docs/sdk-wire.md lists where each text comes from). Every
// JSON-RPC error the sidecar shares with the SDK has the SDK's message and
// data; every DataResource refusal the SDK's 403 detail.

// sdkCase is one request and the SDK's answer to it: JSON-RPC code, message
// and data (raw JSON, compared as JSON values; "" for no data).
type sdkCase struct {
	name string
	send func(t *testing.T) response
	code int
	msg  string
	data string
}

// wantSDKAnswer asserts a JSON-RPC error answer of exactly code, msg, data.
func wantSDKAnswer(t *testing.T, r response, code int, msg, data string) {
	t.Helper()
	a := decodeRPC(t, r)
	if a.Error == nil || a.Error.Code != code || a.Error.Message != msg {
		t.Fatalf("want error %d %q, got %s", code, msg, r.Body)
	}
	if !sameJSON(t, a.Error.Data, data) {
		t.Fatalf("error.data %s, want %s", a.Error.Data, data)
	}
}

// sameJSON reports whether raw and want hold the same JSON value (both
// empty counts as the same).
func sameJSON(t *testing.T, raw json.RawMessage, want string) bool {
	t.Helper()
	if len(raw) == 0 || want == "" {
		return len(raw) == 0 && want == ""
	}
	var a, b any
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("data %s: %v", raw, err)
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatalf("want %s: %v", want, err)
	}
	return reflect.DeepEqual(a, b)
}

func codeData(code string) string { return `{"code":"` + code + `"}` }

// TestSDKTexts: the -32030 table of the SDK's workspace authorization
// messages, the -32602 / -32601 envelope and request model answers, and the
// DataResource 403 details.
func TestSDKTexts(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "")
	for _, c := range append(tokenTextCases(t, sc, key), envelopeTextCases(t, sc)...) {
		t.Run(c.name, func(t *testing.T) {
			ag.reset()
			wantSDKAnswer(t, c.send(t), c.code, c.msg, c.data)
			nothingReached(t, ag)
		})
	}
	t.Run("DataResource details", func(t *testing.T) { dataResourceDetails(t, sc, ag, key) })
	// Our own diagnostics are on the audit line, not the wire.
	for _, d := range []string{`"detail":"claim grant_id: Field required"`, `"detail":"request_id is required"`} {
		eventually(t, 15*time.Second, "audit line with "+d, func() bool { return strings.Contains(sc.logs(t), d) })
	}
}

// rpcWith sends body to sc's /a2a with token ("" for none).
func rpcWith(sc *sidecar, body []byte, token string) func(t *testing.T) response {
	return func(t *testing.T) response { return sc.rpc(t, body, token) }
}

// tokenTextCases: each row of the SDK's token table, with its message.
func tokenTextCases(t *testing.T, sc *sidecar, key *signer) []sdkCase {
	other := newSigner(t, "k1") // same kid, other key: the signature fails
	job := jobStartBody(t)
	tok := func(edit func(jwt.MapClaims)) string { return key.mintWith(t, edit) }
	withToken := func(edit func(jwt.MapClaims)) func(t *testing.T) response {
		return func(t *testing.T) response { return sc.rpc(t, job, tok(edit)) }
	}
	const wa = -32030
	return []sdkCase{
		{"no token", rpcWith(sc, job, ""), wa,
			"Missing X-Supervaize-Workspace-Authorization header", codeData("workspace_authorization_missing")},
		{"not three parts", rpcWith(sc, job, "abc.def"), wa,
			"Workspace authorization token must be a compact JWT", codeData("workspace_authorization_malformed")},
		{"a part is not base64url", rpcWith(sc, job, "a*b.c.d"), wa,
			"Workspace authorization token is malformed", codeData("workspace_authorization_malformed")},
		{"header is a JSON list", rpcWith(sc, job, rawToken(key, `[]`, `{}`)), wa,
			"Workspace authorization token header and claims must be JSON objects", codeData("workspace_authorization_malformed")},
		{"alg HS256", rpcWith(sc, job, rawToken(key, `{"alg":"HS256","kid":"k1"}`, `{}`)), wa,
			"Workspace authorization token must be signed with EdDSA", codeData("workspace_authorization_unsupported_alg")},
		{"no kid with a JWKS", rpcWith(sc, job, rawToken(key, `{"alg":"EdDSA"}`, `{}`)), wa,
			"Workspace authorization token header must include kid for JWKS", codeData("workspace_authorization_missing_kid")},
		{"kid not in the JWKS", func(t *testing.T) response { return sc.rpc(t, job, newSigner(t, "k9").mint(t, baseClaims())) }, wa,
			"Workspace authorization JWKS has no key matching token kid", codeData("workspace_authorization_unknown_kid")},
		{"signed by another key", func(t *testing.T) response { return sc.rpc(t, job, other.mint(t, baseClaims())) }, wa,
			"Workspace authorization token signature is invalid", codeData("workspace_authorization_bad_signature")},
		{"grant_id missing", withToken(func(c jwt.MapClaims) { delete(c, "grant_id") }), wa,
			"Workspace authorization token claims are invalid: [{'type': 'missing', 'loc': ('grant_id',), 'msg': 'Field required'}]",
			codeData("workspace_authorization_invalid_claims")},
		{"scopes empty and exp a string", withToken(func(c jwt.MapClaims) { c["scopes"], c["exp"] = []any{}, "soon" }), wa,
			"Workspace authorization token claims are invalid: [{'type': 'value_error', 'loc': ('scopes',), 'msg': " +
				"'Value error, workspace authorization token must include scopes'}, {'type': 'int_parsing', 'loc': ('exp',), 'msg': 'Input should be a valid integer, unable to parse string as an integer'}]",
			codeData("workspace_authorization_invalid_claims")},
		{"other issuer", withToken(func(c jwt.MapClaims) { c["iss"] = "https://evil.test" }), wa,
			"Workspace authorization token issuer does not match this server configuration", codeData("workspace_authorization_wrong_issuer")},
		{"other audience", withToken(func(c jwt.MapClaims) { c["aud"] = "supervaizer-server:other" }), wa,
			"Workspace authorization token audience does not match this server", codeData("workspace_authorization_wrong_audience")},
		{"expired an hour ago", withToken(func(c jwt.MapClaims) { c["exp"] = time.Now().Unix() - 3600 }), wa,
			"Workspace authorization token is expired", codeData("workspace_authorization_expired")},
		{"issued in an hour", withToken(func(c jwt.MapClaims) { c["iat"] = time.Now().Unix() + 3600 }), wa,
			"Workspace authorization token was issued in the future", codeData("workspace_authorization_not_yet_valid")},
		{"other server_id", withToken(func(c jwt.MapClaims) { c["server_id"] = "srv-2" }), wa,
			"Workspace authorization token server_id does not match this server", codeData("workspace_authorization_wrong_server")},
		{"agent not served", rpcWith(sc, actionBody(t, func(r map[string]any) { r["agent_slug"] = "ghost" }), key.mint(t, baseClaims())), wa,
			"Unknown agent_slug for workspace authorization: ghost", codeData("workspace_authorization_unknown_agent")},
		{"agent without a Studio id", rpcWith(sc, actionBody(t, func(r map[string]any) { r["agent_slug"] = "unregistered_agent" }),
			tok(func(c jwt.MapClaims) { c["agent_slug"] = "unregistered_agent" })), wa,
			"Workspace authorization requires the Studio agent id from registration, but this agent has not been linked to Studio",
			codeData("workspace_authorization_agent_not_registered")},
		{"token agent_slug differs", withToken(func(c jwt.MapClaims) { c["agent_slug"] = "other" }), wa,
			"Workspace authorization token agent_slug does not match the request", codeData("workspace_authorization_wrong_agent")},
		{"token agent_id differs", withToken(func(c jwt.MapClaims) { c["agent_id"] = "other" }), wa,
			"Workspace authorization token agent_id does not match the request", codeData("workspace_authorization_wrong_agent")},
		{"token workspace_id differs", withToken(func(c jwt.MapClaims) { c["workspace_id"] = "workspace_9" }), wa,
			"Workspace authorization token workspace_id does not match the request", codeData("workspace_authorization_wrong_workspace")},
		{"token workspace_slug differs", withToken(func(c jwt.MapClaims) { c["workspace_slug"] = "other" }), wa,
			"Workspace authorization token workspace_slug does not match the request", codeData("workspace_authorization_wrong_workspace")},
		{"both scopes missing", withToken(func(c jwt.MapClaims) { c["scopes"] = []any{"job.sync"} }), wa,
			"Workspace authorization token is missing scope(s): supervaizer/action.invoke, job.start", codeData("workspace_authorization_missing_scope")},
		{"scopes absent", withToken(func(c jwt.MapClaims) { delete(c, "scopes") }), wa,
			"Workspace authorization token is missing scope(s): supervaizer/action.invoke, job.start", codeData("workspace_authorization_missing_scope")},
	}
}

// envelopeTextCases: the envelope model, the request models, the method.
func envelopeTextCases(t *testing.T, sc *sidecar) []sdkCase {
	return []sdkCase{
		{"request_id missing", rpcWith(sc, actionBody(t, func(r map[string]any) { delete(r, "request_id") }), ""), -32602,
			"Invalid Supervaizer v2 action request", `{"errors":[{"type":"missing","loc":["request_id"],"msg":"Field required"}]}`},
		{"every problem, in field order", rpcWith(sc, actionBody(t, func(r map[string]any) {
			r["request_id"], r["actor"], r["workspace"], r["case_id"] = 5, "u", map[string]any{"slug": 1}, []any{}
		}), ""), -32602, "Invalid Supervaizer v2 action request", `{"errors":[
			{"type":"string_type","loc":["request_id"],"msg":"Input should be a valid string"},
			{"type":"model_type","loc":["actor"],"msg":"Input should be a valid dictionary or instance of V2ActorContext"},
			{"type":"missing","loc":["workspace","id"],"msg":"Field required"},
			{"type":"string_type","loc":["workspace","slug"],"msg":"Input should be a valid string"},
			{"type":"string_type","loc":["case_id"],"msg":"Input should be a valid string"}]}`},
		{"surface request without surface", func(t *testing.T) response {
			var req map[string]any
			_ = json.Unmarshal(surfaceEnvelope(t, "job.start"), &req)
			delete(req["params"].(map[string]any)["surface_request"].(map[string]any), "surface")
			b, _ := json.Marshal(req)
			return sc.rpc(t, b, "")
		}, -32602, "Invalid Supervaizer v2 surface request", `{"errors":[{"type":"missing","loc":["surface"],"msg":"Field required"}]}`},
		{"method missing", rpcWith(sc, []byte(`{"jsonrpc":"2.0","id":3,"params":{}}`), ""), -32602,
			"Invalid JSON-RPC request", `{"errors":[{"type":"missing","loc":["method"],"msg":"Field required"}]}`},
		{"jsonrpc 1.0", rpcWith(sc, []byte(`{"jsonrpc":"1.0","id":3,"method":"supervaizer/action.invoke"}`), ""), -32602,
			"Invalid JSON-RPC request", `{"errors":[{"type":"literal_error","loc":["jsonrpc"],"msg":"Input should be '2.0'"}]}`},
		{"other method", rpcWith(sc, []byte(`{"jsonrpc":"2.0","id":3,"method":"tasks/send","params":{}}`), ""), -32601,
			"Method not found: tasks/send", ""},
	}
}

// dataResourceDetails: the SDK answers a DataResource authorization failure
// 403 {"detail": <the same message as -32030>}.
func dataResourceDetails(t *testing.T, sc *sidecar, ag *agent, key *signer) {
	url := sc.base + "/api/agents/" + testAgent + "/data/contacts/"
	ws := []string{"X-Supervaize-Workspace-Id", "workspace_123", "X-Supervaize-Workspace-Slug", "acme"}
	send := func(token string, workspace ...string) response {
		h := append([]string{"X-API-Key", testKey}, workspace...)
		if token != "" {
			h = append(h, "X-Supervaize-Workspace-Authorization", "Bearer "+token)
		}
		return do(t, http.MethodGet, url, nil, h...)
	}
	list := dataToken(t, key, "resource.contacts.list")
	for _, c := range []struct {
		name, detail string
		r            response
	}{
		{"no token", "Missing X-Supervaize-Workspace-Authorization header", send("", ws...)},
		{"scope missing", "Workspace authorization token is missing scope(s): resource.contacts.list",
			send(dataToken(t, key, "resource.contacts.create"), ws...)},
		{"no workspace header", "Workspace authorization token workspace_id does not match the request", send(list)},
		{"expired", "Workspace authorization token is expired",
			send(key.mintWith(t, func(c jwt.MapClaims) { c["exp"], c["scopes"] = time.Now().Unix()-3600, []any{"resource.contacts.list"} }), ws...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantDetail(t, c.r, http.StatusForbidden, c.detail)
		})
	}
	nothingReached(t, ag)
}

// TestSDKTextNotConfigured: verification off outside local mode, on /a2a
// and on a DataResource route.
func TestSDKTextNotConfigured(t *testing.T) {
	ag := startAgent(t)
	sc := startSidecar(t, ag.addr(), fmt.Sprintf("api_key %s\nserver_id %s\nagent %s %s\n", testKey, testServerID, testAgent, testAgentID))
	const msg = "Workspace authorization is required but is not configured for this Supervaizer server"
	wantSDKAnswer(t, sc.rpc(t, jobStartBody(t), ""), -32030, msg, codeData("workspace_authorization_not_configured"))
	wantDetail(t, do(t, http.MethodGet, sc.base+"/api/agents/"+testAgent+"/data/contacts/", nil,
		"X-API-Key", testKey, "X-Supervaize-Workspace-Id", "workspace_123"), http.StatusForbidden, msg)
	nothingReached(t, ag)
}
