package test

import (
	"net/http"
	"strings"
	"testing"
)

// TestReferencesSDKAgent: in front of the real SDK 1.8.0 server, workspace
// B's job.stop, step.awaiting.submit and surface.load with workspace A's
// job_id, case_id, step_id (sent by A; learned from the job_state of A's
// job.start answer; learned from A's events when the answer is too large
// to read) and draft_session_id, and B's get, update and delete of A's
// contact, are refused and the SDK receives nothing; A's own calls pass.
func TestReferencesSDKAgent(t *testing.T) {
	ag, sc, tokA, tokB, call := startReferencesSDK(t)
	surface := func(ws string, refs map[string]any) []byte {
		req := fixtureRequest(t)
		delete(req, "action")
		delete(req, "idempotency_key")
		delete(req, "job_id")
		delete(req, "draft_session_id")
		req["agent_slug"], req["workspace"], req["surface"], req["request_id"] = sdkSlug, map[string]any{"id": ws, "slug": ws}, "job.start", "req-"+randomID()
		for k, v := range refs {
			req[k] = v
		}
		return envelope("supervaizer/surface.load", "surface_request", req)
	}
	passes := func(what string, body []byte, tok string) string {
		t.Helper()
		r := sc.rpc(t, body, tok)
		a := decodeRPC(t, r)
		if a.Error != nil {
			t.Fatalf("%s refused: %s", what, r.Body)
		}
		return string(r.Body)
	}
	refused := func(field string, body []byte) {
		t.Helper()
		m := ag.mark()
		r := sc.rpc(t, body, tokB)
		a := wantRPCError(t, r, -32030, "workspace_authorization_wrong_workspace")
		if !strings.Contains(a.Error.Message, field) || strings.Contains(string(r.Body), wsA) {
			t.Fatalf("refusal of B's %s: %s", field, r.Body)
		}
		if got := nonCardRequests(ag.since(m)); len(got) != 0 {
			t.Fatalf("the SDK received B's call with A's %s: %+v", field, got)
		}
	}

	n := randomID()
	// Sent by A.
	passes("A's step.awaiting.submit", call(wsA, "step.awaiting.submit",
		map[string]any{"job_id": "job-" + n, "case_id": "case-" + n, "step_id": "step-" + n}), tokA)
	passes("A's surface.load", surface(wsA, map[string]any{"draft_session_id": "draft-" + n}), tokA)
	// Learned from the job_state of A's job.start answer (a covered call).
	if b := passes("A's job.start", call(wsA, "job.start", map[string]any{"input": map[string]any{"snapshot": "s" + n}}), tokA); !strings.Contains(b, "s"+n+"-step") {
		t.Fatalf("job.start answer without its job_state: %s", b)
	}
	// Learned from A's events only: the answer, over 1 MiB, is passed on unread.
	events, stop := openSDKStream(t, sc.base, tokA)
	defer stop()
	big := passes("A's job.sync with a large answer", call(wsA, "job.sync",
		map[string]any{"input": map[string]any{"snapshot": "e" + n, "pad": 1 << 21}}), tokA)
	if len(big) < 1<<21 {
		t.Fatalf("the large answer is %d bytes", len(big))
	}
	for {
		ev, ok := nextEffect(t, events)
		if !ok {
			t.Fatal("A's stream ended")
		}
		if strings.Contains(ev.data, "e"+n+"-job") {
			break
		}
	}

	for _, c := range []struct {
		field, action string
		refs          map[string]any
	}{
		{"job_id", "job.stop", map[string]any{"job_id": "job-" + n}},
		{"case_id", "step.awaiting.submit", map[string]any{"case_id": "case-" + n}},
		{"step_id", "step.awaiting.submit", map[string]any{"step_id": "step-" + n}},
		{"job_id", "job.stop", map[string]any{"job_id": "s" + n + "-job"}},
		{"case_id", "step.awaiting.submit", map[string]any{"case_id": "s" + n + "-case"}},
		{"step_id", "step.awaiting.submit", map[string]any{"step_id": "s" + n + "-step"}},
		{"job_id", "job.stop", map[string]any{"job_id": "e" + n + "-job"}},
	} {
		refused(c.field, call(wsB, c.action, c.refs))
	}
	refused("draft_session_id", surface(wsB, map[string]any{"draft_session_id": "draft-" + n}))
	// The large answer's case was not learned (it is in no event): B may take it.
	passes("B's step of a case named only in a large answer", call(wsB, "step.awaiting.submit", map[string]any{"case_id": "e" + n + "-case"}), tokB)
	passes("A's job.stop", call(wsA, "job.stop", map[string]any{"job_id": "s" + n + "-job"}), tokA)
	passes("A's step.awaiting.submit", call(wsA, "step.awaiting.submit", map[string]any{"case_id": "s" + n + "-case", "step_id": "step-" + n}), tokA)

	// A contact created by A: its id from the SDK's 201 answer.
	data := sc.base + "/api/agents/" + sdkSlug + "/data/contacts/"
	hdr := func(tok, ws string) []string {
		return []string{"X-API-Key", testKey, "X-Supervaize-Workspace-Authorization", "Bearer " + tok,
			"X-Supervaize-Workspace-Id", ws, "Content-Type", "application/json"}
	}
	item := "contact-" + n
	if r := do(t, http.MethodPost, data, []byte(`{"id":"`+item+`","email":"a@example.com"}`), hdr(tokA, wsA)...); r.Status != 201 {
		t.Fatalf("A's create: %d %s", r.Status, r.Body)
	}
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		var body []byte
		if m == http.MethodPut {
			body = []byte(`{"email":"b@example.com"}`)
		}
		mark := ag.mark()
		wantDetail(t, do(t, m, data+item, body, hdr(tokB, wsB)...), http.StatusForbidden,
			"Workspace authorization: item_id does not belong to this workspace")
		if got := nonCardRequests(ag.since(mark)); len(got) != 0 {
			t.Fatalf("the SDK received B's %s of A's contact: %+v", m, got)
		}
	}
	if r := do(t, http.MethodGet, data+item, nil, hdr(tokA, wsA)...); r.Status != 200 || !strings.Contains(string(r.Body), "a@example.com") {
		t.Fatalf("A's get of its contact: %d %s", r.Status, r.Body)
	}
}

// TestReferencesSDKNestedEffectIDs: in front of the real SDK 1.8.0 server,
// the ids A's job.start answer names nested in its effects (a
// "case.created" effect's case.id, a "step.updated" effect's step.id, as
// the fixture's do) are bound to A: workspace B's job.stop naming that case
// or step is refused and the SDK receives nothing, and A's own calls with
// them still pass (before, B's call was allowed and took the case from A).
func TestReferencesSDKNestedEffectIDs(t *testing.T) {
	ag, sc, tokA, tokB, call := startReferencesSDK(t)
	n := "c" + randomID()
	r := sc.rpc(t, call(wsA, "job.start", map[string]any{"input": map[string]any{"created": n}}), tokA)
	if a := decodeRPC(t, r); a.Error != nil || !strings.Contains(string(r.Body), `"case.created"`) || !strings.Contains(string(r.Body), n+"-step") {
		t.Fatalf("A's job.start: %s", r.Body)
	}
	for _, c := range []struct{ field, value string }{{"case_id", n + "-case"}, {"step_id", n + "-step"}, {"job_id", n + "-job"}} {
		m := ag.mark()
		rb := sc.rpc(t, call(wsB, "job.stop", map[string]any{c.field: c.value}), tokB)
		a := wantRPCError(t, rb, -32030, "workspace_authorization_wrong_workspace")
		if !strings.Contains(a.Error.Message, c.field) || strings.Contains(string(rb.Body), wsA) {
			t.Fatalf("refusal of B's %s: %s", c.field, rb.Body)
		}
		if got := nonCardRequests(ag.since(m)); len(got) != 0 {
			t.Fatalf("the SDK received B's job.stop with A's %s: %+v", c.field, got)
		}
	}
	for _, refs := range []map[string]any{{"case_id": n + "-case", "step_id": n + "-step"}, {"case_id": n + "-case"}} {
		m := ag.mark()
		if a := decodeRPC(t, sc.rpc(t, call(wsA, "job.stop", refs), tokA)); a.Error != nil {
			t.Fatalf("A's job.stop with its own %v refused: %+v", refs, a.Error)
		}
		if len(nonCardRequests(ag.since(m))) == 0 {
			t.Fatalf("A's job.stop with %v never reached the SDK", refs)
		}
	}
}

// startReferencesSDK starts the real SDK agent behind a sidecar with the
// references block on, and returns them with tokens of workspaces A and B
// (job.stop and step.awaiting.submit among their scopes) and call, which
// builds ws's action request carrying refs (no job_id or
// draft_session_id of its own).
func startReferencesSDK(t *testing.T) (*sdkAgent, *sidecar, string, string, func(ws, action string, refs map[string]any) []byte) {
	t.Helper()
	key := newSigner(t, "k1")
	pemPath := writePEM(t, key)
	ag := startSDKAgent(t, sdkTokenEnv("SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY="+key.pem(t))...)
	sc := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), "public_key "+pemPath, "\t\treferences\n"))
	waitReady(t, sc)
	tok := func(ws string) string {
		c := sdkClaims(ws)
		c["scopes"] = append(c["scopes"].([]any), "job.stop", "step.awaiting.submit")
		return key.mint(t, c)
	}
	tokA, tokB := tok(wsA), tok(wsB)
	call := func(ws, action string, refs map[string]any) []byte {
		return sdkAction(t, ws, action, func(req map[string]any) {
			delete(req, "job_id")
			delete(req, "draft_session_id")
			for k, v := range refs {
				req[k] = v
			}
		})
	}
	return ag, sc, tokA, tokB, call
}
