package registration

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/refusal"
)

func TestContractFromFixture(t *testing.T) {
	r := mustParse(t, fixtureRaw(t))
	c := NewContract(r)
	if c.AgentSlug() != fixtureSlug || c.AgentID() != "agent_interviewer" || c.Fingerprint() != r.Fingerprint() {
		t.Errorf("identity: slug %q id %q fp %q", c.AgentSlug(), c.AgentID(), c.Fingerprint())
	}
	for _, id := range []string{"job.start", "job.sync", "resource.contacts.import", "resource.contacts.get", "dataset.session_metrics.query", "step.awaiting.submit"} {
		if !c.AllowsAction(id) {
			t.Errorf("AllowsAction(%q) = false", id)
		}
	}
	for _, id := range []string{"", "job.cancel", "Job.Start", "job.start ", "resource.contacts.delete", "workspace_binding.options", "agent.custom.x"} {
		if c.AllowsAction(id) {
			t.Errorf("AllowsAction(%q) = true", id)
		}
	}
	for _, id := range []string{"job.start", "case.step.awaiting", "mission.agent.resource.contacts", "mission.agent.dataset.session_metrics"} {
		if !c.AllowsSurface(id) {
			t.Errorf("AllowsSurface(%q) = false", id)
		}
	}
	for _, id := range []string{"job.configurator", "workspace_binding.create", "mission.agent.resource.other", "JOB.START"} {
		if c.AllowsSurface(id) {
			t.Errorf("AllowsSurface(%q) = true", id)
		}
	}
	if d, ok := c.Action("dataset.campaign_progress.query"); !ok || d.Mutating {
		t.Errorf("Action(dataset query) = %+v, %v", d, ok)
	}
	if c.WorkspaceBindingRequired() || c.SetupStartAction() != "" || c.ScheduledStart() {
		t.Error("fixture has no binding, setup or scheduled start")
	}
	if len(c.ActionIDs()) != 27 || len(c.SurfaceIDs()) != 15 {
		t.Errorf("ActionIDs/SurfaceIDs = %d/%d", len(c.ActionIDs()), len(c.SurfaceIDs()))
	}
	// The accessors hand out copies.
	ids := c.ActionIDs()
	ids[0] = "mutated"
	if c.ActionIDs()[0] == "mutated" {
		t.Error("ActionIDs exposes internal state")
	}
	again := c.Registration()
	again.Agent.Slug = "mutated"
	if c.Registration().Agent.Slug != fixtureSlug || again.Fingerprint() != c.Fingerprint() {
		t.Error("Registration() exposes internal state or changes the fingerprint")
	}
}

func TestContractSetupAndBinding(t *testing.T) {
	raw := edited(t, fixtureRaw(t), func(m map[string]any) {
		sub(m, "job_policy")["setup"] = map[string]any{
			"start_action": "campaign.confirm",
			"plan":         map[string]any{"steps": []any{map[string]any{"id": "scope", "title": "Scope"}}},
		}
		m["workspace_binding"] = map[string]any{
			"required": true,
			"modes":    []any{"bind_existing"},
			"existing": map[string]any{"action": "tenants.list"},
		}
		sub(m, "capabilities")["scheduled_start"] = true
	})
	c := NewContract(mustParse(t, raw))
	if c.SetupStartAction() != "campaign.confirm" || !c.AllowsAction("campaign.confirm") {
		t.Errorf("SetupStartAction = %q", c.SetupStartAction())
	}
	if !c.AllowsAction("job.start.preview") || !c.AllowsAction("step.awaiting.submit") {
		t.Error("default setup preview/submit actions not derived")
	}
	if !c.WorkspaceBindingRequired() || !c.AllowsAction("tenants.list") || c.AllowsAction(WorkspaceBindingOptionsAction) {
		t.Error("workspace binding not compiled as configured")
	}
	if d, _ := c.Action("tenants.list"); d.Scope != ScopeWorkspace {
		t.Errorf("binding action scope = %q, want workspace", d.Scope)
	}
	if !c.ScheduledStart() {
		t.Error("ScheduledStart = false")
	}
	if r := c.Registration(); r.JobPolicy.Setup == nil || string(r.JobPolicy.Setup.Plan) != `{"steps":[{"id":"scope","title":"Scope"}]}` {
		t.Errorf("setup plan = %+v", r.JobPolicy.Setup)
	}
}

func TestCheckVersions(t *testing.T) {
	withVersions := func(f func(m map[string]any)) *Contract {
		return NewContract(mustParse(t, edited(t, fixtureRaw(t), f)))
	}
	fixture := NewContract(mustParse(t, fixtureRaw(t)))
	if err := fixture.CheckVersions(AcceptedVersions{}); err != nil {
		t.Errorf("fixture refused with the defaults: %v", err)
	}
	if err := fixture.CheckVersions(DefaultAcceptedVersions()); err != nil {
		t.Errorf("fixture refused with DefaultAcceptedVersions: %v", err)
	}
	d := DefaultAcceptedVersions()
	if fmt.Sprint(d.A2A, d.A2UI) != "[0.2.6] [v0.8]" {
		t.Errorf("DefaultAcceptedVersions = %+v", d)
	}

	newA2A := withVersions(func(m map[string]any) { sub(m, "versions")["a2a_version"] = "0.3.0" })
	if err := newA2A.CheckVersions(AcceptedVersions{A2A: []string{"0.2.6", "0.3.0"}}); err != nil {
		t.Errorf("0.3.0 refused although accepted: %v", err)
	}

	cases := []struct {
		name     string
		c        *Contract
		accepted AcceptedVersions
		mention  []string
	}{
		{"a2a not accepted", newA2A, AcceptedVersions{}, []string{`a2a_version "0.3.0"`, `"0.2.6"`}},
		{"a2ui not accepted", fixture, AcceptedVersions{A2UI: []string{"v0.9", "v1.0"}}, []string{`a2ui_version "v0.8"`, `"v0.9", "v1.0"`}},
		{"contract version 3", withVersions(func(m map[string]any) { m["supervaizer_contract_version"] = 3 }), AcceptedVersions{}, []string{"supervaizer_contract_version 3", "accepted: 2"}},
		{"contract version spelled 2.0", withVersions(func(m map[string]any) { m["supervaizer_contract_version"] = json.Number("2.0") }), AcceptedVersions{}, []string{"supervaizer_contract_version 2.0"}},
		{"contract version absent", withVersions(func(m map[string]any) { delete(m, "supervaizer_contract_version") }), AcceptedVersions{}, []string{"supervaizer_contract_version none"}},
		{"versions absent", withVersions(func(m map[string]any) { delete(m, "versions") }), AcceptedVersions{}, []string{"a2a_version none"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.CheckVersions(tc.accepted)
			var e *refusal.Refusal
			if !errors.As(err, &e) || e.Code != CodeContractVersionUnsupported {
				t.Fatalf("err = %v, want *refusal.Refusal %s", err, CodeContractVersionUnsupported)
			}
			for _, m := range append(tc.mention, `"agent_interviewer"`) {
				if !strings.Contains(e.Message, m) {
					t.Errorf("message %q does not mention %q", e.Message, m)
				}
			}
			if !errors.Is(fmt.Errorf("wrapped: %w", err), &refusal.Refusal{Code: CodeContractVersionUnsupported}) {
				t.Error("errors.Is by code does not see through wrapping")
			}
		})
	}
}

func TestErrorType(t *testing.T) {
	e := &refusal.Refusal{Code: CodeAgentSlugMismatch, Message: "m"}
	if e.Error() != "agent_slug_mismatch: m" || (&refusal.Refusal{Code: "c"}).Error() != "c" {
		t.Errorf("Error() = %q", e.Error())
	}
	if errors.Is(e, &refusal.Refusal{Code: CodeAgentContractUnavailable}) {
		t.Error("errors.Is matched another code")
	}
}

// A Contract is read by many requests at once.
func TestContractConcurrentReads(t *testing.T) {
	c := NewContract(mustParse(t, fixtureRaw(t)))
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				if !c.AllowsAction("job.start") || c.AllowsAction("job.cancel") || !c.AllowsSurface("job.start") {
					t.Error("inconsistent answer")
					return
				}
				_ = c.ActionIDs()
				_ = c.CheckVersions(AcceptedVersions{})
			}
		}()
	}
	wg.Wait()
}
