package test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The differential table: for each latent difference between the sidecar
// and the SDK (docs/sdk-differences.md, "Where the sidecar differs from the SDK, on
// purpose"), the SDK's answer as its public source decides it (docs/
// sdk-wire.md states those rules) and ours, through a real Caddy. A row
// whose sdk and ours agree is aligned; a row where they differ must be
// listed in the README section (readme names the row's text there).

// wire is one answer, as far as the table compares answers.
type wire struct {
	status  int    // HTTP status
	rpc     int    // JSON-RPC error code; 0 for a forwarded call or an HTTP-level answer
	code    string // data.code, or the HTTP detail of an HTTP-level answer
	id      string // the id written in a JSON-RPC error ("" not compared)
	reached bool   // the call was dispatched to the agent
}

var (
	dispatched = wire{status: 200, reached: true}
	sdk400     = wire{status: 400}
)

func wsErr(code string) wire {
	return wire{status: 200, rpc: -32030, code: "workspace_authorization_" + code}
}

// diffRow is one input, the SDK's answer, ours, and where the README lists
// a kept difference.
type diffRow struct {
	name   string
	send   func(t *testing.T) response
	sdk    wire
	ours   wire
	readme string             // a kept difference's text in the README table ("" for aligned rows)
	check  func(t *testing.T) // more of our answer, when the table's columns do not say it all
}

// observe reads our answer to r in the table's terms.
func observe(t *testing.T, r response, ag *agent) wire {
	t.Helper()
	w := wire{status: r.Status, reached: ag.count.Load() > 0}
	if w.reached {
		return w
	}
	var body struct {
		ID     json.RawMessage `json:"id"`
		Detail string          `json:"detail"`
		Error  *struct {
			Code int `json:"code"`
			Data struct {
				Code string `json:"code"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("answer %d is not JSON: %s", r.Status, r.Body)
	}
	if body.Error != nil {
		w.rpc, w.code, w.id = body.Error.Code, body.Error.Data.Code, string(body.ID)
	} else {
		w.code = body.Detail
	}
	return w
}

// TestSDKDifferences runs the table.
func TestSDKDifferences(t *testing.T) {
	// Idempotency off: rows resend the fixture's job.start and its key.
	ag, key, _, sc := startTokenGate(t, "		max_body_a2a 64KiB\n		idempotency off\n")
	readme, err := os.ReadFile("../docs/sdk-differences.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "## Where the sidecar differs from the SDK, on purpose")
	section, _, _ = strings.Cut(section, "\n## ")
	for _, row := range differenceRows(t, sc, key, ag) {
		t.Run(row.name, func(t *testing.T) {
			ag.reset()
			got := observe(t, row.send(t), ag)
			want := row.ours
			if row.ours.id == "" {
				got.id = ""
			}
			if got != want {
				t.Fatalf("our answer %+v, want %+v", got, want)
			}
			aligned := row.sdk == row.ours
			switch {
			case aligned && row.readme != "":
				t.Fatalf("aligned row lists a difference")
			case !aligned && (row.readme == "" || !strings.Contains(section, row.readme)):
				t.Fatalf("SDK %+v, ours %+v: not listed in the README section (%q)", row.sdk, row.ours, row.readme)
			}
			if row.check != nil {
				row.check(t)
			}
		})
	}
}

// rowKit is what the rows send with: the sidecar, its agent and Studio
// key, the fixture's job.start and a valid token for it.
type rowKit struct {
	sc   *sidecar
	key  *signer
	ag   *agent
	job  []byte
	good string
}

// raw sends body to /a2a with token and extra headers.
func (k *rowKit) raw(body string, token string, extra ...string) func(t *testing.T) response {
	return func(t *testing.T) response { return k.sc.rpc(t, []byte(body), token, extra...) }
}

// withID is the fixture's job.start with the id spelled id.
func (k *rowKit) withID(id string) string {
	return strings.Replace(string(k.job), `"id":7`, `"id":`+id, 1)
}

// differenceRows is the table. Rows send through sc, whose agent is ag
// and whose Studio key is key.
func differenceRows(t *testing.T, sc *sidecar, key *signer, ag *agent) []diffRow {
	k := &rowKit{sc: sc, key: key, ag: ag, job: jobStartBody(t), good: key.mint(t, baseClaims())}
	return append(alignedRows(t, k), keptRows(t, k)...)
}

// alignedRows: inputs where the sidecar answers as the SDK does.
func alignedRows(t *testing.T, k *rowKit) []diffRow {
	rpcRaw, withID, good, sc, job := k.raw, k.withID, k.good, k.sc, k.job
	tok := func(edit func(jwt.MapClaims)) string { return k.key.mintWith(t, edit) }
	digits := strings.Repeat("7", 4301)
	return []diffRow{
		{name: "iat null", send: func(t *testing.T) response {
			return sc.rpc(t, freshJobStart(t), tok(func(c jwt.MapClaims) { c["iat"] = nil }))
		}, sdk: dispatched, ours: dispatched},
		// Aligned: the SDK's answer.
		{name: "id true is read as 1", send: rpcRaw(withID("true"), ""),
			sdk: wire{200, -32030, "workspace_authorization_missing", "1", false}, ours: wire{200, -32030, "workspace_authorization_missing", "1", false}},
		{name: "id 2.0 is read as 2", send: rpcRaw(withID("2.0"), ""),
			sdk: wire{200, -32030, "workspace_authorization_missing", "2", false}, ours: wire{200, -32030, "workspace_authorization_missing", "2", false}},
		{name: "id false with a token is dispatched", send: rpcRaw(withID("false"), good), sdk: dispatched, ours: dispatched},
		{name: "id 1.5: HTTP 400", send: rpcRaw(withID("1.5"), good),
			sdk: sdk400, ours: wire{status: 400, code: "Invalid JSON-RPC request id"}, readme: "an `id` the SDK cannot echo"},
		{name: "id a list: HTTP 400", send: rpcRaw(withID("[7]"), good),
			sdk: sdk400, ours: wire{status: 400, code: "Invalid JSON-RPC request id"}, readme: "an `id` the SDK cannot echo"},
		{name: "id of 4301 digits: HTTP 400", send: rpcRaw(withID(digits), good),
			sdk: wire{status: 400, code: "There was an error parsing the body"}, ours: wire{status: 400, code: "There was an error parsing the body"}},
		{name: "an input integer of 4301 digits: HTTP 400", send: rpcRaw(string(actionBody(t, func(r map[string]any) { r["input"] = map[string]any{"n": json.Number(digits)} })), good),
			sdk: wire{status: 400, code: "There was an error parsing the body"}, ours: wire{status: 400, code: "There was an error parsing the body"}},
		{name: "an input integer of 4300 digits is dispatched", send: rpcRaw(string(actionBody(t, func(r map[string]any) { r["input"] = map[string]any{"n": json.Number(digits[1:])} })), good),
			sdk: dispatched, ours: dispatched},
		{name: "jsonrpc absent is dispatched", send: rpcRaw(strings.Replace(string(job), `"jsonrpc":"2.0",`, ``, 1), good), sdk: dispatched, ours: dispatched},
		{name: "method absent: -32602", send: rpcRaw(`{"jsonrpc":"2.0","id":4,"params":{}}`, good),
			sdk: wire{200, -32602, "", "4", false}, ours: wire{200, -32602, "", "4", false}},
		{name: "method not a string: -32602", send: rpcRaw(`{"jsonrpc":"2.0","id":4,"method":1}`, good),
			sdk: wire{200, -32602, "", "4", false}, ours: wire{200, -32602, "", "4", false}},
		{name: "case_id a number: -32602", send: func(t *testing.T) response {
			return sc.rpc(t, actionBody(t, func(r map[string]any) { r["case_id"] = 5 }), good)
		}, sdk: wire{status: 200, rpc: -32602}, ours: wire{status: 200, rpc: -32602}},
		{name: "draft_session_id an object: -32602", send: func(t *testing.T) response {
			return sc.rpc(t, actionBody(t, func(r map[string]any) { r["draft_session_id"] = map[string]any{} }), good)
		}, sdk: wire{status: 200, rpc: -32602}, ours: wire{status: 200, rpc: -32602}},
		{name: "empty iss: wrong_issuer", send: func(t *testing.T) response {
			return sc.rpc(t, job, tok(func(c jwt.MapClaims) { c["iss"] = "" }))
		}, sdk: wsErr("wrong_issuer"), ours: wsErr("wrong_issuer")},
		{name: "empty workspace_id: wrong_workspace", send: func(t *testing.T) response {
			return sc.rpc(t, job, tok(func(c jwt.MapClaims) { c["workspace_id"] = "" }))
		}, sdk: wsErr("wrong_workspace"), ours: wsErr("wrong_workspace")},
		{name: "empty agent_id: wrong_agent", send: func(t *testing.T) response {
			return sc.rpc(t, job, tok(func(c jwt.MapClaims) { c["agent_id"] = "" }))
		}, sdk: wsErr("wrong_agent"), ours: wsErr("wrong_agent")},
		{name: "empty server_id: wrong_server", send: func(t *testing.T) response {
			return sc.rpc(t, job, tok(func(c jwt.MapClaims) { c["server_id"] = "" }))
		}, sdk: wsErr("wrong_server"), ours: wsErr("wrong_server")},
		{name: "scopes absent: missing_scope", send: func(t *testing.T) response {
			return sc.rpc(t, job, tok(func(c jwt.MapClaims) { delete(c, "scopes") }))
		}, sdk: wsErr("missing_scope"), ours: wsErr("missing_scope")},
	}
}

// keptRows: inputs where the sidecar's answer is deliberately not the
// SDK's, each listed in the README.
func keptRows(t *testing.T, k *rowKit) []diffRow {
	rpcRaw, withID, good, sc, job, key, ag := k.raw, k.withID, k.good, k.sc, k.job, k.key, k.ag
	tok := func(edit func(jwt.MapClaims)) string { return key.mintWith(t, edit) }
	claimsJSON, _ := json.Marshal(baseClaims())
	var lastAnswer response
	return []diffRow{
		{name: "lone surrogate", send: rpcRaw(strings.Replace(string(job), `campaign_123`, `campaign_\ud800`, 1), good),
			sdk: dispatched, ours: wire{200, -32600, "", "null", false}, readme: "a lone UTF-16 surrogate escape"},
		{name: "duplicate key", send: rpcRaw(strings.Replace(string(job), `"id":7`, `"id":7,"id":8`, 1), good),
			sdk: dispatched, ours: wire{200, -32600, "", "null", false}, readme: "a duplicate key"},
		{name: "two token headers, the first valid", send: rpcRaw(string(job), good, "X-Supervaize-Workspace-Authorization", "Bearer x.y.z"),
			sdk: dispatched, ours: wsErr("missing"), readme: "two `X-Supervaize-Workspace-Authorization` headers"},
		{name: "padded base64 header segment", send: func(t *testing.T) response {
			return sc.rpc(t, job, signedSegments(key, base64.URLEncoding.EncodeToString([]byte(`{"alg":"EdDSA","kid":"k1"}`)), claimsJSON))
		}, sdk: dispatched, ours: wsErr("malformed"), readme: "`=` padding or the `+/` alphabet"},
		{name: "crit header", send: func(t *testing.T) response {
			return sc.rpc(t, job, rawToken(key, `{"alg":"EdDSA","kid":"k1","crit":["x"],"x":1}`, string(claimsJSON)))
		}, sdk: dispatched, ours: wsErr("malformed"), readme: "a token with a `crit` header"},
		{name: "token over 16 KiB", send: func(t *testing.T) response {
			return sc.rpc(t, job, tok(func(c jwt.MapClaims) { c["pad"] = strings.Repeat("p", 17<<10) }))
		}, sdk: dispatched, ours: wsErr("malformed"), readme: "a token with a `crit` header, or over 16 KiB"},
		{name: "exp a numeric string", send: func(t *testing.T) response {
			return sc.rpc(t, job, tok(func(c jwt.MapClaims) { c["exp"] = "9999999999" }))
		}, sdk: dispatched, ours: wsErr("invalid_claims"), readme: "`iat` or `exp` as a string"},
		{name: "exp true", send: func(t *testing.T) response {
			return sc.rpc(t, job, tok(func(c jwt.MapClaims) { c["exp"] = true }))
		}, sdk: wsErr("expired"), ours: wsErr("invalid_claims"), readme: "`iat` or `exp` as a string"},
		{name: "empty grant_id", send: func(t *testing.T) response {
			return sc.rpc(t, job, tok(func(c jwt.MapClaims) { c["grant_id"] = "" }))
		}, sdk: dispatched, ours: wsErr("invalid_claims"), readme: "an empty `grant_id`"},
		{name: "a control character in jti", send: func(t *testing.T) response {
			return sc.rpc(t, job, tok(func(c jwt.MapClaims) { c["jti"] = "tok\n1" }))
		}, sdk: dispatched, ours: wsErr("invalid_claims"), readme: "a carried claim with a control character"},
		{name: "a leading space in agent_workspace_ref", send: func(t *testing.T) response {
			return sc.rpc(t, job, tok(func(c jwt.MapClaims) { c["agent_workspace_ref"] = " ref" }))
		}, sdk: dispatched, ours: wsErr("invalid_claims"), readme: "a carried claim with a control character"},
		{name: "token and request workspace both empty", send: func(t *testing.T) response {
			return sc.rpc(t, actionBody(t, func(r map[string]any) { r["workspace"] = map[string]any{"id": ""} }),
				tok(func(c jwt.MapClaims) { c["workspace_id"] = "" }))
		}, sdk: dispatched, ours: wsErr("wrong_workspace"), readme: "both have an empty workspace id"},
		{name: "nbf in an hour", send: func(t *testing.T) response {
			return sc.rpc(t, job, tok(func(c jwt.MapClaims) { c["nbf"] = time.Now().Unix() + 3600 }))
		}, sdk: dispatched, ours: wsErr("not_yet_valid"), readme: "`nbf` in the future"},
		{name: "empty workspace_slug in the token", send: func(t *testing.T) response {
			return sc.rpc(t, freshJobStart(t), tok(func(c jwt.MapClaims) { c["workspace_slug"], c["agent_workspace_ref"] = "", "" }))
		}, sdk: dispatched, ours: dispatched, check: func(t *testing.T) {
			h := ag.last(t).Header
			if _, ok := h["X-Supervaize-Verified-Workspace-Slug"]; ok || h.Get("X-Supervaize-Verified-Agent-Workspace-Ref") != "" {
				t.Fatalf("empty claims sent as headers: %v", h)
			}
		}},
		{name: "not JSON", send: rpcRaw(`{"jsonrpc":`, good),
			sdk: wire{status: 422}, ours: wire{200, -32700, "", "null", false}, readme: "a body that is not JSON"},
		{name: "not an object", send: rpcRaw(`[1]`, good),
			sdk: wire{status: 422}, ours: wire{200, -32600, "", "null", false}, readme: "a body that is not JSON"},
		{name: "caller-supplied workspace_authorization", send: func(t *testing.T) response {
			return sc.rpc(t, actionBody(t, func(r map[string]any) {
				r["workspace_authorization"] = map[string]any{"grant_id": "g", "workspace_id": "workspace_123", "agent_id": testAgentID,
					"agent_slug": testAgent, "server_id": testServerID}
			}), good)
		}, sdk: dispatched, ours: wire{status: 200, rpc: -32602}, readme: "a caller-supplied `workspace_authorization`"},
		{name: "-32602 entries without input and url", send: func(t *testing.T) response {
			lastAnswer = sc.rpc(t, actionBody(t, func(r map[string]any) { delete(r, "request_id") }), good)
			return lastAnswer
		}, sdk: wire{status: 200, rpc: -32602}, ours: wire{status: 200, rpc: -32602}, check: func(t *testing.T) {
			if bytes.Contains(lastAnswer.Body, []byte(`"input"`)) || bytes.Contains(lastAnswer.Body, []byte(`"url"`)) {
				t.Fatalf("entries echo the request: %s", lastAnswer.Body)
			}
		}},
		{name: "id null is written", send: func(t *testing.T) response {
			lastAnswer = sc.rpc(t, []byte(withID("null")), "")
			return lastAnswer
		}, sdk: wire{200, -32030, "workspace_authorization_missing", "<omitted>", false},
			ours: wire{200, -32030, "workspace_authorization_missing", "null", false}, readme: "a JSON-RPC answer to `\"id\": null`"},
		{name: "body over max_body_a2a", send: func(t *testing.T) response {
			return sc.rpc(t, padTo(t, freshJobStart(t), 64<<10+1), good)
		}, sdk: dispatched, ours: wire{200, -32600, "request_body_too_large", "null", false}, readme: "an `/a2a` body over `max_body_a2a`"},
		{name: "bootstrap for an agent not served", send: func(t *testing.T) response {
			return sc.rpc(t, actionBody(t, func(r map[string]any) { r["action"], r["agent_slug"] = "workspace_binding.options", "ghost" }), "")
		}, sdk: wire{200, -32010, "", "", false}, ours: wsErr("unknown_agent"), readme: "a bootstrap action for an agent slug not served here"},
		{name: "GET with a body on a public route", send: func(t *testing.T) response {
			return do(t, "GET", sc.base+"/.well-known/health", []byte("{}"))
		}, sdk: dispatched, ours: wire{status: 400, code: "GET and HEAD requests take no body"}, readme: "a GET or HEAD with a body"},
	}
}

// signedSegments is a compact token of the given header segment text (as
// spelled) and claims, signed by s over exactly that text.
func signedSegments(s *signer, header string, claims []byte) string {
	signing := header + "." + base64.RawURLEncoding.EncodeToString(claims)
	return signing + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(s.priv, []byte(signing)))
}

// TestEmptyJobIDIsAnotherIdentity: a job.start with "job_id": "" and a
// retry with the same key and no job_id are two identities, as Python
// sees them ("" is not None): the retry is idempotency_conflict and the
// agent receives the first call only.
func TestEmptyJobIDIsAnotherIdentity(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "")
	tok := key.mint(t, baseClaims())
	idem := "idem-" + randomID()
	first := actionBody(t, func(r map[string]any) { r["idempotency_key"], r["job_id"] = idem, "" })
	if a := decodeRPC(t, sc.rpc(t, first, tok)); a.Error != nil {
		t.Fatalf("first call: %s", a.Error.Message)
	}
	retry := actionBody(t, func(r map[string]any) { r["idempotency_key"] = idem; delete(r, "job_id") })
	a := decodeRPC(t, sc.rpc(t, retry, tok))
	if a.Error != nil || !bytes.Contains(a.Result, []byte(`"idempotency_conflict"`)) {
		t.Fatalf("retry without job_id: %s", a.Result)
	}
	if n := len(ag.received()); n != 1 {
		t.Fatalf("agent received %d calls, want 1", n)
	}
}
