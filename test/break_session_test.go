package test

// Probes of the restructured request path (serveSteps, controllerSteps,
// admitForward: limits, then references, then the verified context), with
// several workspaces sharing one agent: for every refusal the agent
// receives nothing and no state (a reference binding, a request_id claim,
// an idempotency key) is left to the refused workspace or blocks another.

import (
	"net/http"
	"testing"
)

// dataHeaders are the headers of a DataResource call of workspace ws.
func dataHeaders(tok, ws string) []string {
	return []string{"X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", "Bearer " + tok,
		"X-Supervaize-Workspace-Id", ws, "Content-Type", "application/json"}
}

// TestBreakDataRateLimitedCallBindsNoItem: a DataResource get that the
// limits refuse (429) must bind nothing (docs/workspaces.md, "When a call
// is checked": "a refused call (by the limits or by one of its
// references) binds none of them"): workspace A's later get of the same
// item passes.
func TestBreakDataRateLimitedCallBindsNoItem(t *testing.T) {
	ag := refAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(),
		"\t\treferences\n\t\tlimits {\n\t\t\trate resource.*.get 1/h\n\t\t}\n"))
	tokA, tokB := refTokens(t, key)
	data := sc.base + "/api/agents/" + testAgent + "/data/contacts/"
	item := "item-" + randomID()

	if r := do(t, http.MethodGet, data+"b-own-"+randomID(), nil, dataHeaders(tokB, wsB)...); r.Status != 200 {
		t.Fatalf("B's first get (within its rate): %d %s", r.Status, r.Body)
	}
	before := ag.count.Load()
	r := do(t, http.MethodGet, data+item, nil, dataHeaders(tokB, wsB)...)
	wantDetail(t, r, http.StatusTooManyRequests, "Rate limit exceeded")
	if ag.count.Load() != before {
		t.Fatal("B's rate-limited get reached the agent")
	}
	if r := do(t, http.MethodGet, data+item, nil, dataHeaders(tokA, wsA)...); r.Status != 200 {
		t.Fatalf("A's get of an item only B's refused call named: %d %s (the refused call bound it)", r.Status, r.Body)
	}
}

// TestBreakA2ARateLimitedCallBindsNothing: the same on /a2a (held):
// B's rate-limited job.stop binds neither its job_id nor its request_id.
func TestBreakA2ARateLimitedCallBindsNothing(t *testing.T) {
	ag := refAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(),
		"\t\treferences\n\t\tlimits {\n\t\t\trate job.stop 1/h\n\t\t}\n"))
	tokA, tokB := refTokens(t, key)
	wantPassed(t, ag, "B's first job.stop", func() response {
		return sc.rpc(t, refAction(t, wsB, "job.stop", "b1", map[string]any{"job_id": "b-" + randomID()}), tokB)
	})
	job, reqID := "job-"+randomID(), "req-"+randomID()
	before := ag.count.Load()
	body := refAction(t, wsB, "job.stop", "b2", map[string]any{"job_id": job, "request_id": reqID})
	wantRateLimited(t, sc.rpc(t, body, tokB), "rate_limited")
	if ag.count.Load() != before {
		t.Fatal("B's rate-limited job.stop reached the agent")
	}
	// A's job.stop of that job with that request_id passes (job.stop is
	// B's limit, not A's: A has its own key).
	wantPassed(t, ag, "A's job.stop of the job B's refused call named", func() response {
		return sc.rpc(t, refAction(t, wsA, "job.stop", "a1", map[string]any{"job_id": job, "request_id": reqID}), tokA)
	})
}
