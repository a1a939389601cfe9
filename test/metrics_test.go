package test

import (
	"strings"
	"testing"
)

// TestMetrics: decisions, cache hits and misses, and idempotency events are
// visible on Caddy's metrics endpoint, with bounded labels (no workspace id,
// no token).
func TestMetrics(t *testing.T) {
	ag := startJobStartAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startMetricsSidecar(t, ag.addr(), jwksDirective(jw.url(), ""))
	tok := key.mint(t, baseClaims())
	resultOf(t, sc.rpc(t, jobStartBody(t), tok))
	resultOf(t, sc.rpc(t, jobStartBody(t), tok)) // cache hit + replay
	wantRPCError(t, sc.rpc(t, jobStartBody(t), ""), -32030, "workspace_authorization_missing")

	r := do(t, "GET", sc.base+"/metrics", nil)
	if r.Status != 200 {
		t.Fatalf("metrics: %d", r.Status)
	}
	m := string(r.Body)
	for _, want := range []string{
		`supervaizer_sidecar_decisions_total{code="token",outcome="allow",route="controller"} 2`,
		`supervaizer_sidecar_decisions_total{code="workspace_authorization_missing",outcome="deny",route="controller"} 1`,
		`supervaizer_sidecar_token_cache_total{result="hit"} 1`,
		`supervaizer_sidecar_token_cache_total{result="miss"} 1`,
		`supervaizer_sidecar_idempotency_events_total{event="replay"} 1`,
		`supervaizer_sidecar_idempotency_events_total{event="recorded"} 1`,
		`supervaizer_sidecar_jwks_refresh_total{reason="",result="ok"}`,
		`supervaizer_sidecar_token_verify_duration_seconds_count 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s; have:\n%s", want, grepLines(m, "supervaizer_sidecar_token"))
		}
	}
	if strings.Contains(m, "workspace_123") || strings.Contains(m, tok) {
		t.Fatal("metrics carry a workspace id or a token")
	}
}
