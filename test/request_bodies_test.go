package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// inlineFileSubmit is a step.awaiting.submit whose input answers a file
// field with storage "inline" (supervaizer-v2 seed, "File fields"): the
// file's bytes, base64, inside the action JSON.
func inlineFileSubmit(t *testing.T, fileBytes int) []byte {
	t.Helper()
	file := make([]byte, fileBytes)
	rand.Read(file)
	return actionBody(t, func(r map[string]any) {
		r["action"], r["surface"], r["step_id"], r["case_id"] = "step.awaiting.submit", "case.step.awaiting", "step_1", "case_1"
		delete(r, "idempotency_key")
		r["input"] = map[string]any{"values": map[string]any{"report_file": map[string]any{
			"storage": "inline", "filename": "insights.md", "media_type": "text/markdown",
			"size": fileBytes, "encoding": "base64", "content": base64.StdEncoding.EncodeToString(file),
		}}}
	})
}

// padTo pads the JSON body b with trailing spaces to exactly n bytes.
func padTo(t *testing.T, b []byte, n int) []byte {
	t.Helper()
	if len(b) > n {
		t.Fatalf("body of %d bytes is over %d already", len(b), n)
	}
	return append(b, bytes.Repeat([]byte(" "), n-len(b))...)
}

// postUndeclared posts body to /a2a without a Content-Length (chunked).
func postUndeclared(t *testing.T, sc *sidecar, body []byte, token string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, sc.base+"/a2a",
		io.MultiReader(bytes.NewReader(body))) // not a *bytes.Reader: no length
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", testKey)
	req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// wantTooLarge asserts the sidecar's JSON-RPC answer to an /a2a body over
// max_body_a2a: HTTP 200, id null, -32600 with the limit in data.
func wantTooLarge(t *testing.T, r response, limit int) {
	t.Helper()
	a := wantRPCError(t, r, -32600, "request_body_too_large")
	if string(a.ID) != "null" || a.Error.Message != "Request body too large" {
		t.Fatalf("answer %s", r.Body)
	}
	var d struct {
		MaxBody int `json:"max_body"`
	}
	if err := json.Unmarshal(a.Error.Data, &d); err != nil || d.MaxBody != limit {
		t.Fatalf("data %s, want max_body %d", a.Error.Data, limit)
	}
}

// TestBodyLimitDefaults: with the defaults, a step.awaiting.submit carrying
// a 1 MiB inline file (about 1.4 MB of JSON) reaches the agent byte for
// byte, as an SDK agent would take it; one byte over the /a2a default is
// refused and the agent receives nothing. DataResource bodies over the old
// 1 MiB pass too; legacy routes keep 1 MiB.
func TestBodyLimitDefaults(t *testing.T) {
	ag, key, _, sc := startTokenGate(t, "")
	tok := key.mintWith(t, func(c jwt.MapClaims) {
		c["scopes"] = []any{"supervaizer/action.invoke", "step.awaiting.submit", "resource.contacts.import"}
	})
	body := inlineFileSubmit(t, 1<<20)
	if len(body) < 1<<20*4/3 {
		t.Fatalf("inline body only %d bytes", len(body))
	}
	if a := decodeRPC(t, sc.rpc(t, body, tok)); a.Error != nil {
		t.Fatalf("1 MiB inline file refused: %s", a.Error.Message)
	}
	if got := ag.last(t); !bytes.Equal(got.Body, body) {
		t.Fatalf("agent received %d bytes, want the %d sent", len(got.Body), len(body))
	}

	const a2aDefault = 16 << 20
	ag.reset()
	wantTooLarge(t, sc.rpc(t, padTo(t, body, a2aDefault+1), tok), a2aDefault)
	nothingReached(t, ag)

	ws := []string{"X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", "Bearer " + tok, "X-Supervaize-Workspace-Id", "workspace_123"}
	imp := padTo(t, []byte(`[{"name":"a"}]`), 2<<20)
	if r := do(t, http.MethodPost, sc.base+"/api/agents/"+testAgent+"/data/contacts/import/", imp, ws...); r.Status != 200 {
		t.Fatalf("2 MiB import: %d %s", r.Status, r.Body)
	}
	ag.reset()
	wantDetail(t, do(t, http.MethodPost, sc.base+"/api/supervaizer/jobs", padTo(t, []byte("{}"), 1<<20+1), "X-API-Key", testKey),
		http.StatusRequestEntityTooLarge, "Request body too large")
	nothingReached(t, ag)
}

// TestBodyLimitA2A: max_body_a2a exactly: limit bytes pass, limit+1 are
// refused, declared or streamed, and never reach the agent; max_body alone
// still bounds every route, /a2a included.
func TestBodyLimitA2A(t *testing.T) {
	const limit = 64 << 10
	ag, key, _, sc := startTokenGate(t, "		max_body_a2a 64KiB\n")
	tok := key.mint(t, baseClaims())
	body := freshJobStart(t)
	if a := decodeRPC(t, sc.rpc(t, padTo(t, body, limit), tok)); a.Error != nil {
		t.Fatalf("body of exactly max_body_a2a refused: %s", a.Error.Message)
	}
	ag.reset()
	wantTooLarge(t, sc.rpc(t, padTo(t, freshJobStart(t), limit+1), tok), limit)
	wantTooLarge(t, postUndeclared(t, sc, padTo(t, freshJobStart(t), limit+1), tok), limit)
	nothingReached(t, ag)

	ag2, key2, _, sc2 := startTokenGate(t, "		max_body 8KiB\n")
	big := actionBody(t, func(r map[string]any) { r["input"] = map[string]any{"pad": strings.Repeat("x", 8<<10)} })
	wantTooLarge(t, sc2.rpc(t, big, key2.mint(t, baseClaims())), 8<<10)
	nothingReached(t, ag2)
}
