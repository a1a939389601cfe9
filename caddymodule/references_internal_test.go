package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/references"
)

// TestReferencesCaddyfile: the syntax reads into the JSON shape.
func TestReferencesCaddyfile(t *testing.T) {
	var h Handler
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`supervaizer_auth {
		references {
			fields job_id case_id step_id draft_session_id request_id
			data_items off
			learn_from_events on
			unknown deny
			store file /var/lib/supervaizer/references.db
			ttl 48h
			max_per_workspace 1000
		}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(h.References)
	want := `{"fields":["job_id","case_id","step_id","draft_session_id","request_id"],"data_items":false,"learn_from_events":true,` +
		`"unknown":"deny","store":"file","file_path":"/var/lib/supervaizer/references.db","ttl":172800000000000,"max_per_workspace":1000}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	for _, in := range []string{"fields", "store", "store file", "store memory extra", "max_per_workspace 0", "ttl x", "data_items maybe", "fields job_id\nfields case_id"} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("supervaizer_auth {\nreferences {\n" + in + "\n}\n}")); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// refCall is a job.stop of workspace ws with job_id job (and no request_id
// binding: the test's fields are job_id only).
func refCall(ctx context.Context, token, ws, job string) (*http.Request, *caddy.Replacer) {
	body := []byte(`{"jsonrpc":"2.0","id":"c1","method":"supervaizer/action.invoke","params":{"action_request":{` +
		`"request_id":"req_1","actor":{"user_id":"u"},"workspace":{"id":"` + ws + `"},` +
		`"mission_id":"m1","job_id":"` + job + `","agent_slug":"` + benchAgent + `","surface":"job.sync","action":"job.sync","input":{}}}}`)
	repl := caddy.NewReplacer()
	ctx = context.WithValue(ctx, caddy.ReplacerCtxKey, repl)
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/a2a", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Api-Key", benchAPIKey)
	r.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+token)
	return r, repl
}

// TestReferencesObservability: a call's references outcome is the
// {supervaizer.reference} placeholder, the span's supervaizer.reference
// and supervaizer.reference.field attributes, the audit line's reference
// and reference_field, and the references_total metric by field and
// outcome; a refusal is a deny (code reference_foreign) and next is not
// called.
func TestReferencesObservability(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, logs, mint := traceGateReg(t, reg, func(c *config.Config) {
		c.References = &config.ReferencesConfig{Fields: []string{references.KindJob}, Store: "memory"}
	})
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reached := 0
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		reached++
		w.Header().Set("Content-Type", "application/json")
		_, err := w.Write([]byte(`{"jsonrpc":"2.0","id":"c1","result":{"status":"ok"}}`))
		return err
	})
	for i, c := range []struct{ ws, outcome string }{{"workspace_123", "bound"}, {"workspace_123", "allowed"}, {"workspace_B", "foreign"}} {
		ctx, span := tp.Tracer("test").Start(context.Background(), "request")
		r, repl := refCall(ctx, mint(jwt.MapClaims{"workspace_id": c.ws, "workspace_slug": nil}), c.ws, "j1")
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, r, next); err != nil {
			t.Fatal(err)
		}
		span.End()
		if got, _ := repl.GetString("supervaizer.reference"); got != c.outcome {
			t.Errorf("call %d: {supervaizer.reference} = %q, want %q", i, got, c.outcome)
		}
		wantSpan(t, sr, span.SpanContext().SpanID().String(), map[string]string{"supervaizer.reference": c.outcome, "supervaizer.reference.field": "job_id"})
		line := lastLine(t, logs)
		if line["reference"] != c.outcome || line["reference_field"] != "job_id" {
			t.Errorf("call %d: audit line %v", i, line)
		}
		if c.outcome == "foreign" {
			if line["outcome"] != "deny" || line["code"] != "reference_foreign" ||
				!strings.Contains(w.Body.String(), `"workspace_authorization_wrong_workspace"`) || !strings.Contains(w.Body.String(), `"id":"c1"`) {
				t.Errorf("refusal: line %v, answer %s", line, w.Body)
			}
		}
	}
	if reached != 2 {
		t.Fatalf("next reached %d times, want 2 (the refused call never)", reached)
	}
	mf := func(outcome string) float64 {
		return refMetric(t, reg, "job_id", outcome)
	}
	if mf("bound") != 1 || mf("allowed") != 1 || mf("foreign") != 1 {
		t.Fatalf("references_total: bound %v allowed %v foreign %v", mf("bound"), mf("allowed"), mf("foreign"))
	}
}

// refMetric is the value of the references_total series of field and
// outcome (0 when absent).
func refMetric(t *testing.T, reg *prometheus.Registry, field, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "supervaizer_sidecar_references_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["field"] == field && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestReferencesNotBoundByRefusedCall: a call the limits refuse binds
// none of its references (the limits run first): workspace B can still
// use the job id A's refused call named.
func TestReferencesNotBoundByRefusedCall(t *testing.T) {
	h, _, mint := traceGateReg(t, nil, func(c *config.Config) {
		c.References = &config.ReferencesConfig{Fields: []string{references.KindJob}, Store: "memory"}
		c.Limits = &config.LimitsConfig{Rate: []config.RateLimit{{Targets: []string{"job.sync"}, Rate: "1/h"}}}
	})
	reached := 0
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		reached++
		w.Header().Set("Content-Type", "application/json")
		_, err := w.Write([]byte(`{"jsonrpc":"2.0","id":"c1","result":{"status":"ok"}}`))
		return err
	})
	call := func(ws, job string) string {
		r, _ := refCall(context.Background(), mint(jwt.MapClaims{"workspace_id": ws, "workspace_slug": nil}), ws, job)
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, r, next); err != nil {
			t.Fatal(err)
		}
		return w.Body.String()
	}
	if got := call("workspace_A", "job-a1"); !strings.Contains(got, `"result"`) {
		t.Fatalf("A's first call: %s", got)
	}
	if got := call("workspace_A", "job-a2"); !strings.Contains(got, "rate_limited") {
		t.Fatalf("A's second call: %s, want rate_limited", got)
	}
	if got := call("workspace_B", "job-a2"); !strings.Contains(got, `"result"`) {
		t.Fatalf("B's call naming the job of A's refused call: %s, want allowed (nothing bound)", got)
	}
	if reached != 2 {
		t.Fatalf("next reached %d times, want 2 (the refused call never)", reached)
	}
}
