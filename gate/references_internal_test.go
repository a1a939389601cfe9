package gate

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/references"
)

// allFields is a references block binding every request field.
func allFields() *RefGate {
	rg := &RefGate{Fields: map[string]bool{}}
	for _, f := range references.RequestFields {
		rg.Fields[f] = true
	}
	return rg
}

// fixtureResult is the demo agent's answer to job.start or job.sync
// (examples/demo-agent/fixture.json): a JSON-RPC answer holding the
// fixture's action_result or sync_result.
func fixtureResult(t *testing.T, key string) []byte {
	t.Helper()
	b, err := os.ReadFile("../examples/demo-agent/fixture.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx map[string]json.RawMessage
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "result": fx[key]})
	return out
}

func hasRef(refs []references.Ref, kind, value string) bool {
	return slices.Contains(refs, references.Ref{Kind: kind, Value: value})
}

// TestAnswerRefsNestedEffects: the ids an effect carries nested, as the
// SDK's effects do (a "case.created" effect's case.id and case.job_id, a
// "step.updated" effect's step.id, a job's job.id), are learned from an
// answer like the flat job_id, case_id and step_id keys; an unbound kind
// is not.
func TestAnswerRefsNestedEffects(t *testing.T) {
	rg := allFields()
	start := rg.answerRefs(fixtureResult(t, "action_result"))
	for _, r := range []references.Ref{{Kind: references.KindJob, Value: "job_123"}, {Kind: references.KindCase, Value: "case_setup_123"}} {
		if !hasRef(start, r.Kind, r.Value) {
			t.Errorf("the fixture's job.start answer: %s %s not learned (got %+v)", r.Kind, r.Value, start)
		}
	}
	if sync := rg.answerRefs(fixtureResult(t, "sync_result")); !hasRef(sync, references.KindStep, "step_session_review") {
		t.Errorf("the fixture's job.sync answer: step.updated's step.id not learned (got %+v)", sync)
	}

	body := []byte(`{"jsonrpc":"2.0","id":1,"result":{"status":"ok","effects":[` +
		`{"type":"job.updated","job":{"id":"j1"}},` +
		`{"type":"case.created","case":{"id":"c1","job_id":"j2"}},` +
		`{"type":"step.updated","step":{"id":"s1","case_id":"c2","job_id":"j3"}},` +
		`{"type":"case.created","case":"c-not-an-object"},` +
		`{"type":"x","case":{"id":7},"step":{"id":""}},` +
		`{"type":"deep","data":{"case":{"id":"c-deep"}},"case":{"steps":[{"id":"s-deep"}]}},` +
		`"not-an-effect"]}}`)
	got := rg.answerRefs(body)
	want := []references.Ref{
		{Kind: references.KindJob, Value: "j1"},
		{Kind: references.KindCase, Value: "c1"}, {Kind: references.KindJob, Value: "j2"},
		{Kind: references.KindStep, Value: "s1"}, {Kind: references.KindCase, Value: "c2"}, {Kind: references.KindJob, Value: "j3"},
	}
	for _, r := range want {
		if !hasRef(got, r.Kind, r.Value) {
			t.Errorf("%s %s not learned", r.Kind, r.Value)
		}
	}
	if len(got) != len(want) {
		t.Errorf("learned %+v, want exactly %+v (nothing walked deeper, nothing not a string)", got, want)
	}

	rg.Fields[references.KindCase] = false
	if refs := rg.answerRefs(body); hasRef(refs, references.KindCase, "c1") || !hasRef(refs, references.KindStep, "s1") {
		t.Errorf("with case_id not bound: %+v", refs)
	}
}

// TestEventRefsNestedEffects: the same nested ids are learned from a
// supervaizer.effect event's effects.
func TestEventRefsNestedEffects(t *testing.T) {
	data := []byte(`{"agent_slug":"agent_interviewer","action":"job.start","request_id":"r1","effects":[` +
		`{"type":"job.started","job_id":"job_123"},` +
		`{"type":"case.created","case":{"id":"case_setup_123","job_id":"job_123"}},` +
		`{"type":"step.updated","step":{"id":"step_session_review","status":"completed"}}]}`)
	agent, refs := allFields().EventRefs(data)
	if agent != "agent_interviewer" {
		t.Fatalf("agent %q", agent)
	}
	for _, r := range []references.Ref{{Kind: references.KindJob, Value: "job_123"},
		{Kind: references.KindCase, Value: "case_setup_123"}, {Kind: references.KindStep, Value: "step_session_review"}} {
		if !hasRef(refs, r.Kind, r.Value) {
			t.Errorf("%s %s not learned from the event (got %+v)", r.Kind, r.Value, refs)
		}
	}
}
