package test

import (
	"bytes"
	"strings"
	"testing"
)

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

// TestLoneSurrogatesRefused: ids Python keeps apart but Go would merge are
// refused instead of sharing an idempotency record.
func TestLoneSurrogatesRefused(t *testing.T) {
	ag := startAgent(t)
	sc := startSidecar(t, ag.addr(), localDirective(""))
	body := strings.Replace(string(freshJobStart(t)), `"idempotency_key":"idem-`, `"idempotency_key":"k\ud800-`, 1)
	wantRPCError(t, sc.rpc(t, []byte(body), ""), -32600, "")
	nothingReached(t, ag)
}
