package test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTracingAuditLine: behind Caddy's tracing directive, the decision's
// audit line carries the request's trace_id (continued from the caller's
// traceparent) and its span_id; a denied call too, and the agent received
// nothing for it.
func TestTracingAuditLine(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "none") // spans are recorded, not exported
	ag := startAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc, err := runCaddyfile(t, "", func(port int) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\ttracing {\n\t\tspan sidecar\n\t}\n\tsupervaizer_auth {\n%s\t}\n\treverse_proxy %s\n}\n",
			port, jwksDirective(jw.url(), ""), ag.addr())
	})
	if err != nil {
		t.Fatal(err)
	}
	const traceID, parentSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	traceparent := "00-" + traceID + "-" + parentSpan + "-01"
	resultOf(t, sc.rpc(t, freshJobStart(t), key.mint(t, baseClaims()), "traceparent", traceparent))
	if got := ag.last(t).Header.Get("Traceparent"); !strings.Contains(got, traceID) {
		t.Errorf("agent traceparent %q does not continue the trace", got)
	}
	ag.reset()
	wantRPCError(t, sc.rpc(t, freshJobStart(t), "", "traceparent", traceparent), -32030, "workspace_authorization_missing")
	nothingReached(t, ag)

	var allow, deny bool
	eventually(t, 5*time.Second, "an allow and a deny audit line", func() bool {
		for _, line := range strings.Split(sc.logs(t), "\n") {
			var e map[string]any
			if json.Unmarshal([]byte(line), &e) != nil || e["msg"] != "supervaizer decision" {
				continue
			}
			if e["trace_id"] != traceID {
				t.Fatalf("audit line without the request's trace_id: %s", line)
			}
			if s, _ := e["span_id"].(string); len(s) != 16 || s == parentSpan {
				t.Fatalf("audit line span_id %q", s)
			}
			allow = allow || e["outcome"] == "allow"
			deny = deny || e["outcome"] == "deny"
		}
		return allow && deny
	}, func() string { return fmt.Sprintf("audit lines missing (allow %v, deny %v)", allow, deny) })
}
