package caddymodule

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/grants"
)

// The fixture of traceGate (as gate/decision_bench_test.go's).
const (
	benchIssuer   = "https://studio.bench"
	benchServerID = "srv-bench"
	benchAgent    = "agent_interviewer"
	benchAgentID  = "studio-agent-1"
	benchAPIKey   = "bench-write-key-0123456789"
)

// traceGate is a token-mode gate (PEM verifier) whose audit lines go to an
// observer, and a signer for its tokens. It is built as Provision builds
// it (build), from a configuration that edits, when given, change first.
func traceGate(t testing.TB, edits ...func(*config.Config)) (*Handler, *observer.ObservedLogs, func(jwt.MapClaims) string) {
	return traceGateReg(t, nil, edits...)
}

// traceGateReg is traceGate with its metrics registered in reg.
func traceGateReg(t testing.TB, reg *prometheus.Registry, edits ...func(*config.Config)) (*Handler, *observer.ObservedLogs, func(jwt.MapClaims) string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(pub)
	h := &Handler{Config: config.Config{
		ServerID: benchServerID, APIKeys: []config.APIKey{{Key: benchAPIKey}},
		Agents:        map[string]string{benchAgent: benchAgentID},
		WorkspaceAuth: &config.WorkspaceAuth{Required: new(true), Issuer: benchIssuer, PublicKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))},
		BodyTimeout:   config.Duration(time.Second), AuditLog: "all",
		Registration: &config.RegistrationConfig{Source: "off"}, Idempotency: &config.IdempotencyConfig{Store: "off"},
	}}
	for _, edit := range edits {
		edit(&h.Config)
	}
	core, logs := observer.New(zap.InfoLevel)
	g, err := h.build(zap.New(core), reg, pools{})
	if err != nil {
		t.Fatal(err)
	}
	h.g = g
	t.Cleanup(g.Close)
	mint := func(edit jwt.MapClaims) string {
		now := time.Now().Unix()
		c := jwt.MapClaims{
			"iss": benchIssuer, "aud": grants.AudiencePrefix + benchServerID, "sub": "workspace-agent-grant:grant-1",
			"grant_id": "grant-1", "workspace_id": "workspace_123", "workspace_slug": "acme",
			"agent_id": benchAgentID, "agent_slug": benchAgent, "server_id": benchServerID,
			"scopes": []any{"supervaizer/action.invoke", "job.sync"}, "iat": now, "exp": now + 600, "jti": "jti-trace",
		}
		for k, v := range edit {
			c[k] = v
		}
		s, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c).SignedString(priv)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return h, logs, mint
}

// jobSyncRequest is a POST /a2a job.sync for the fixture workspace, with
// ctx and a fresh caddy.Replacer in it (as Caddy's server provides).
func jobSyncRequest(ctx context.Context, token string) (*http.Request, *caddy.Replacer) {
	body := []byte(`{"jsonrpc":"2.0","id":7,"method":"supervaizer/action.invoke","params":{"action_request":{` +
		`"request_id":"req_1","actor":{"user_id":"u"},"workspace":{"id":"workspace_123","slug":"acme"},` +
		`"mission_id":"m1","job_id":"j1","agent_slug":"` + benchAgent + `","surface":"job.sync","action":"job.sync","input":{}}}}`)
	repl := caddy.NewReplacer()
	ctx = context.WithValue(ctx, caddy.ReplacerCtxKey, repl)
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/a2a", bytes.NewReader(body))
	r.Header.Set("X-Api-Key", benchAPIKey)
	r.Header.Set("Content-Type", "application/json")
	if token != "" {
		r.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+token)
	}
	return r, repl
}

// TestDecisionTracing: inside a recording span the decision adds its
// attributes to the span and the audit line carries trace_id and span_id;
// the placeholders are set before the next handler runs; a denial never
// calls next; without a span the audit line has no trace fields.
func TestDecisionTracing(t *testing.T) {
	h, logs, mint := traceGate(t)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	var reached int
	var seen map[string]string
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		reached++
		repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
		seen = map[string]string{}
		for _, k := range []string{"http.auth.user.id", "supervaizer.grant_id", "supervaizer.outcome", "supervaizer.mode", "supervaizer.target"} {
			seen[k], _ = repl.GetString(k)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
		return nil
	})

	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	r, _ := jobSyncRequest(ctx, mint(nil))
	w0 := httptest.NewRecorder()
	if err := h.ServeHTTP(w0, r, next); err != nil {
		t.Fatal(err)
	}
	span.End()
	if reached != 1 {
		t.Fatalf("next called %d times; answer %s", reached, w0.Body.Bytes())
	}
	for k, want := range map[string]string{"http.auth.user.id": "workspace_123", "supervaizer.grant_id": "grant-1",
		"supervaizer.outcome": "allow", "supervaizer.mode": "token", "supervaizer.target": "job.sync"} {
		if seen[k] != want {
			t.Errorf("next saw {%s} = %q, want %q", k, seen[k], want)
		}
	}
	wantSpan(t, sr, span.SpanContext().SpanID().String(), map[string]string{
		"supervaizer.route": "controller", "supervaizer.target": "job.sync", "supervaizer.agent_slug": benchAgent, "supervaizer.workspace_id": "workspace_123",
		"supervaizer.outcome": "allow", "supervaizer.code": "token", "supervaizer.mode": "token", "supervaizer.grant_id": "grant-1",
	})
	line := lastLine(t, logs)
	if line["trace_id"] != span.SpanContext().TraceID().String() || line["span_id"] != span.SpanContext().SpanID().String() {
		t.Fatalf("audit line trace fields %v / %v", line["trace_id"], line["span_id"])
	}

	ctx, span = tp.Tracer("test").Start(context.Background(), "denied")
	r, repl := jobSyncRequest(ctx, mint(jwt.MapClaims{"exp": time.Now().Unix() - 3600}))
	w := httptest.NewRecorder()
	if err := h.ServeHTTP(w, r, next); err != nil {
		t.Fatal(err)
	}
	span.End()
	if reached != 1 {
		t.Fatal("a denied call reached next")
	}
	if !bytes.Contains(w.Body.Bytes(), []byte(grants.CodeExpired)) {
		t.Fatalf("answer %s", w.Body.Bytes())
	}
	wantSpan(t, sr, span.SpanContext().SpanID().String(), map[string]string{
		"supervaizer.route": "controller", "supervaizer.outcome": "deny", "supervaizer.code": grants.CodeExpired, "supervaizer.target": "job.sync"})
	for _, k := range []string{"http.auth.user.id", "supervaizer.workspace_id", "supervaizer.grant_id", "supervaizer.jti", "supervaizer.mode"} {
		if v, _ := repl.GetString(k); v != "" {
			t.Errorf("denied call: {%s} = %q, want empty", k, v)
		}
	}
	if v, _ := repl.GetString("supervaizer.code"); v != grants.CodeExpired {
		t.Errorf("denied call: {supervaizer.code} = %q", v)
	}

	// With introspection covering job.sync: the outcome and cache result
	// reach the span and the audit line.
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		_, _ = w.Write([]byte(`{"active":true,"grant_id":"grant-1"}`))
	}))
	t.Cleanup(stub.Close)
	hi, ilogs, imint := traceGate(t, func(c *config.Config) {
		c.WorkspaceAuth.Introspection = &config.IntrospectionConfig{URL: stub.URL, Actions: []string{"job.sync"}}
	})
	introspected := imint(nil) // one token: the second check is a cache hit
	for _, wantCache := range []string{"miss", "hit"} {
		ctx, span = tp.Tracer("test").Start(context.Background(), "introspected")
		r, repl = jobSyncRequest(ctx, introspected)
		if err := hi.ServeHTTP(httptest.NewRecorder(), r, next); err != nil {
			t.Fatal(err)
		}
		span.End()
		wantSpan(t, sr, span.SpanContext().SpanID().String(), map[string]string{
			"supervaizer.outcome": "allow", "supervaizer.introspection": "active", "supervaizer.introspection.cache": wantCache})
		if line := lastLine(t, ilogs); line["introspection"] != "active" || line["introspection_cache"] != wantCache {
			t.Fatalf("audit line %v", line)
		}
		if v, _ := repl.GetString("supervaizer.introspection"); v != "active" {
			t.Fatalf("{supervaizer.introspection} = %q", v)
		}
	}

	r, _ = jobSyncRequest(context.Background(), mint(nil)) // no span
	if err := h.ServeHTTP(httptest.NewRecorder(), r, next); err != nil {
		t.Fatal(err)
	}
	if line := lastLine(t, logs); line["trace_id"] != nil || line["span_id"] != nil {
		t.Fatalf("trace fields without a span: %v", line)
	}
}

func wantSpan(t *testing.T, sr *tracetest.SpanRecorder, spanID string, want map[string]string) {
	t.Helper()
	for _, s := range sr.Ended() {
		if s.SpanContext().SpanID().String() != spanID {
			continue
		}
		got := map[attribute.Key]string{}
		for _, kv := range s.Attributes() {
			got[kv.Key] = kv.Value.AsString()
		}
		for k, v := range want {
			if got[attribute.Key(k)] != v {
				t.Errorf("span attribute %s = %q, want %q (all: %v)", k, got[attribute.Key(k)], v, got)
			}
		}
		return
	}
	t.Fatalf("span %s not recorded", spanID)
}

func lastLine(t *testing.T, logs *observer.ObservedLogs) map[string]any {
	t.Helper()
	all := logs.FilterMessage("supervaizer decision").All()
	if len(all) == 0 {
		t.Fatal("no audit line")
	}
	return all[len(all)-1].ContextMap()
}
