package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
)

// timeoutErr is a net.Error that timed out.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestReadBody covers every path of readBody: a declared length under and
// over bodyPresize, none, the maxBody bound (declared or not), a body longer
// than declared (read whole, as io.ReadAll did), and the 415/408/400 answers.
func TestReadBody(t *testing.T) {
	const maxBody = 2 * bodyPresize
	g := &Gate{maxBodyA2A: maxBody, bodyTimeout: time.Second}
	data := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + i%26)
		}
		return b
	}
	cases := []struct {
		name     string
		body     io.Reader
		declared int64 // -1: no Content-Length
		encoding string
		want     []byte
		status   int
	}{
		{"declared small", bytes.NewReader(data(600)), 600, "", data(600), 0},
		{"declared 3000", bytes.NewReader(data(3000)), 3000, "", data(3000), 0},
		{"declared empty", bytes.NewReader(nil), 0, "", []byte{}, 0},
		{"declared identity", bytes.NewReader(data(10)), 10, "identity", data(10), 0},
		{"declared just under presize", bytes.NewReader(data(bodyPresize - 1)), bodyPresize - 1, "", data(bodyPresize - 1), 0},
		{"declared presize", bytes.NewReader(data(bodyPresize)), bodyPresize, "", data(bodyPresize), 0},
		{"declared max", bytes.NewReader(data(maxBody)), maxBody, "", data(maxBody), 0},
		{"undeclared small", bytes.NewReader(data(600)), -1, "", data(600), 0},
		{"undeclared max", bytes.NewReader(data(maxBody)), -1, "", data(maxBody), 0},
		{"longer than declared", bytes.NewReader(data(5000)), 100, "", data(5000), 0},
		{"shorter than declared", bytes.NewReader(data(50)), 100, "", data(50), 0},
		{"one byte at a time", iotest.OneByteReader(bytes.NewReader(data(700))), 700, "", data(700), 0},
		{"declared over max", bytes.NewReader(data(maxBody + 1)), maxBody + 1, "", nil, http.StatusRequestEntityTooLarge},
		{"undeclared over max", bytes.NewReader(data(maxBody + 1)), -1, "", nil, http.StatusRequestEntityTooLarge},
		{"declared small, sent over max", bytes.NewReader(data(maxBody + 1)), 100, "", nil, http.StatusRequestEntityTooLarge},
		{"gzip", bytes.NewReader(data(10)), 10, "gzip", nil, http.StatusUnsupportedMediaType},
		{"timeout", iotest.ErrReader(timeoutErr{}), 10, "", nil, http.StatusRequestTimeout},
		{"timeout undeclared", iotest.ErrReader(timeoutErr{}), -1, "", nil, http.StatusRequestTimeout},
		{"read error", io.MultiReader(bytes.NewReader(data(5)), iotest.ErrReader(errors.New("reset"))), 10, "", nil, http.StatusBadRequest},
		{"unexpected EOF", iotest.ErrReader(io.ErrUnexpectedEOF), 10, "", nil, http.StatusBadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/a2a", c.body)
			r.ContentLength = c.declared
			if c.encoding != "" {
				r.Header.Set("Content-Encoding", c.encoding)
			}
			got, held, status, _ := g.readBody(httptest.NewRecorder(), r, g.maxBodyA2A, chargeTo{})
			held.release()
			if status != c.status {
				t.Fatalf("status %d, want %d", status, c.status)
			}
			if status == 0 && !bytes.Equal(got, c.want) {
				t.Fatalf("body %d bytes, want %d", len(got), len(c.want))
			}
		})
	}
}

// TestResetBody: the forwarded body is the read bytes, whole, however it is
// read (Read, WriteTo), Close changes nothing, and there is no GetBody (the
// transport must not re-send the body on its own: see resetBody).
func TestResetBody(t *testing.T) {
	body := []byte(`{"jsonrpc":"2.0","id":7,"method":"x"}`)
	r := httptest.NewRequest(http.MethodPost, "/a2a", strings.NewReader("ignored"))
	r.TransferEncoding = []string{"chunked"}
	resetBody(r, body)
	if r.ContentLength != int64(len(body)) || r.TransferEncoding != nil || r.GetBody != nil {
		t.Fatalf("length %d, transfer-encoding %v, GetBody set %v", r.ContentLength, r.TransferEncoding, r.GetBody != nil)
	}
	head := make([]byte, 5)
	if _, err := io.ReadFull(r.Body, head); err != nil || string(head) != string(body[:5]) {
		t.Fatalf("first bytes %q %v", head, err)
	}
	if err := r.Body.Close(); err != nil {
		t.Fatal(err)
	}
	var rest bytes.Buffer
	if _, err := io.Copy(&rest, r.Body); err != nil || rest.String() != string(body[5:]) {
		t.Fatalf("rest %q %v", rest.String(), err)
	}
	resetBody(r, nil)
	if got, err := io.ReadAll(r.Body); err != nil || len(got) != 0 || r.ContentLength != 0 {
		t.Fatalf("empty body: %q %v length %d", got, err, r.ContentLength)
	}
}

// TestInjectVerifiedValues: every verified header has exactly its own
// value, an empty claim sets no header, and an append to one header (the
// values share a backing array) leaves the others as they were.
func TestInjectVerifiedValues(t *testing.T) {
	g := &Gate{verified: VerifiedEach}
	c := &grants.Claims{GrantID: "grant-1", WorkspaceID: "ws-1", WorkspaceSlug: "acme", AgentID: "agent-id",
		AgentSlug: "agent_interviewer", ServerID: "srv", Scopes: []string{"job.start", "job.sync"}, JTI: "jti-1"}
	h := http.Header{}
	g.injectVerified(h, decision{mode: verifiedToken, claims: c})
	want := map[string]string{
		"X-Supervaize-Verified-Mode":           "token",
		"X-Supervaize-Verified-Grant-Id":       "grant-1",
		"X-Supervaize-Verified-Workspace-Id":   "ws-1",
		"X-Supervaize-Verified-Workspace-Slug": "acme",
		"X-Supervaize-Verified-Agent-Id":       "agent-id",
		"X-Supervaize-Verified-Agent-Slug":     "agent_interviewer",
		"X-Supervaize-Verified-Server-Id":      "srv",
		"X-Supervaize-Verified-Scopes":         "job.start job.sync",
		"X-Supervaize-Verified-Token-Id":       "jti-1",
	}
	check := func() {
		t.Helper()
		if len(h) != len(want) {
			t.Fatalf("headers %v, want %v", h, want)
		}
		for k, v := range want {
			if got := h[k]; len(got) != 1 || got[0] != v {
				t.Fatalf("%s = %q, want [%q]", k, got, v)
			}
		}
	}
	check() // Agent-Workspace-Ref is empty: not set
	h.Add("X-Supervaize-Verified-Mode", "appended")
	h.Add("X-Supervaize-Verified-Workspace-Id", "appended")
	if got := h.Values("X-Supervaize-Verified-Mode"); len(got) != 2 || got[0] != "token" || got[1] != "appended" {
		t.Fatalf("mode after append %q", got)
	}
	delete(h, "X-Supervaize-Verified-Mode")
	delete(h, "X-Supervaize-Verified-Workspace-Id")
	delete(want, "X-Supervaize-Verified-Mode")
	delete(want, "X-Supervaize-Verified-Workspace-Id")
	check()

	h = http.Header{}
	g.injectVerified(h, decision{mode: verifiedBootstrap})
	if len(h) != 1 || h.Get("X-Supervaize-Verified-Mode") != verifiedBootstrap {
		t.Fatalf("bootstrap headers %v", h)
	}
}

// TestLocalClaims: a local-mode decision carries the call's workspace and
// agent and its own copy of exactly the scopes the call needs.
func TestLocalClaims(t *testing.T) {
	g := &Gate{mode: ModeLocal, serverID: "srv", agents: grants.Agents{benchAgent: benchAgentID}}
	call := testCall(t)
	d := g.decideCall(context.Background(), call, earlyToken{}, &audit{})
	if !d.allowed() || d.mode != verifiedLocal || d.claims == nil {
		t.Fatalf("decision %+v", d)
	}
	c := d.claims
	want := grants.ActionScopes(call.Action)
	if c.GrantID != "local-mode" || c.WorkspaceID != call.WorkspaceID || c.WorkspaceSlug != call.WorkspaceSlug ||
		c.AgentSlug != call.AgentSlug || c.AgentID != benchAgentID || c.ServerID != "srv" ||
		strings.Join(c.Scopes, " ") != strings.Join(want, " ") {
		t.Fatalf("claims %+v", c)
	}
}

// testCall is the fixture's job.start call, as benchCall parses it.
func testCall(t *testing.T) *jsonrpc.Call {
	t.Helper()
	raw, err := os.ReadFile("../test/testdata/agent_interviewer_mvp.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		ActionRequest map[string]any `json:"action_request"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": jsonrpc.MethodActionInvoke,
		"params": map[string]any{"action_request": f.ActionRequest}})
	if err != nil {
		t.Fatal(err)
	}
	call, perr := jsonrpc.Parse(body)
	if perr != nil {
		t.Fatal(perr)
	}
	return call
}

// TestAuditLine: the audit line's level, message, and fields (names, order,
// values), optional fields only when set, allow lines only with audit_log
// all, nothing built when the logger's level drops the line.
func TestAuditLine(t *testing.T) {
	newGate := func(level zapcore.Level, all bool) (*Gate, *observer.ObservedLogs) {
		core, logs := observer.New(level)
		return &Gate{log: zap.New(core), auditAllows: all, metrics: NewMetrics(nil, func() float64 { return 0 })}, logs
	}
	full := audit{route: "controller", method: "POST", target: "action.job.sync", agentSlug: benchAgent,
		workspaceID: "workspace_123", grantID: "grant-1", jti: "jti-1", idem: "replay", client: "127.0.0.1:4242"}
	names := func(e observer.LoggedEntry) string {
		var n []string
		for _, f := range e.Context {
			n = append(n, f.Key)
		}
		return strings.Join(n, ",")
	}

	g, logs := newGate(zap.DebugLevel, true)
	a := full
	a.allow(verifiedToken)
	g.logDecision(&a, 1500*time.Microsecond)
	entries := logs.TakeAll()
	if len(entries) != 1 {
		t.Fatalf("%d lines", len(entries))
	}
	e := entries[0]
	if e.Level != zap.InfoLevel || e.Message != "supervaizer decision" ||
		names(e) != "route,method,outcome,code,duration,client,target,agent_slug,workspace_id,grant_id,jti,idempotency" {
		t.Fatalf("line %v %q fields %s", e.Level, e.Message, names(e))
	}
	m := e.ContextMap()
	for k, v := range map[string]any{"route": "controller", "method": "POST", "outcome": "allow", "code": "token",
		"duration": 1500 * time.Microsecond, "target": "action.job.sync", "agent_slug": benchAgent,
		"workspace_id": "workspace_123", "grant_id": "grant-1", "jti": "jti-1", "idempotency": "replay",
		"client": "127.0.0.1:4242"} {
		if m[k] != v {
			t.Fatalf("%s = %v, want %v", k, m[k], v)
		}
	}

	a = audit{route: "controller", method: "POST"}
	a.deny(KeyUnknown)
	g.logDecision(&a, time.Millisecond)
	entries = logs.TakeAll()
	if len(entries) != 1 || entries[0].Level != zap.WarnLevel || names(entries[0]) != "route,method,outcome,code,duration,client" {
		t.Fatalf("deny line %+v", entries)
	}

	a = audit{route: "public", method: "GET"} // no outcome: an allow
	g.logDecision(&a, time.Millisecond)
	if entries = logs.TakeAll(); len(entries) != 1 || entries[0].ContextMap()["outcome"] != "allow" {
		t.Fatalf("default outcome %+v", entries)
	}

	g, logs = newGate(zap.DebugLevel, false) // audit_log deny
	a = full
	a.allow(verifiedToken)
	g.logDecision(&a, time.Millisecond)
	a = full
	a.deny("expired")
	g.logDecision(&a, time.Millisecond)
	if entries = logs.TakeAll(); len(entries) != 1 || entries[0].Level != zap.WarnLevel {
		t.Fatalf("audit_log deny: %+v", entries)
	}

	g, logs = newGate(zap.WarnLevel, true) // allow lines below the logger's level
	a = full
	a.allow(verifiedToken)
	g.logDecision(&a, time.Millisecond) // its allocation budget (0): BenchmarkLogDecision/allow/level=warn
	if n := logs.Len(); n != 0 {
		t.Fatalf("%d lines below level", n)
	}
}

// TestDecideCallCached: a token answered from the verified-token cache is
// allowed again, call after call. Its allocation budget (0 allocs/op) is
// BenchmarkDecideCall/cached_token's, in make bench, not here.
func TestDecideCallCached(t *testing.T) {
	e := newBenchGate(t, 0, false)
	call := benchCall(t, "")
	values := []string{"Bearer " + e.mint(t, "jti-cached")}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if d := e.g.decideCall(ctx, call, earlyToken{token: grants.TokenFromHeader(values)}, &audit{}); !d.allowed() {
			t.Fatalf("call %d: denied %v", i, d.refusal)
		}
	}
}
