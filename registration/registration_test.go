package registration

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestFixtureCopyMatchesSharedFixture(t *testing.T) {
	shared := mustParse(t, sharedFixtureRaw(t))
	local := mustParse(t, fixtureRaw(t))
	if shared.Fingerprint() != local.Fingerprint() {
		t.Fatalf("testdata copy drifted from the shared fixture: %s != %s", local.Fingerprint(), shared.Fingerprint())
	}
}

func TestParseFixtureModel(t *testing.T) {
	r := mustParse(t, fixtureRaw(t))
	if r.ContractVersion != "2" {
		t.Errorf("ContractVersion = %q", r.ContractVersion)
	}
	if r.Agent != (AgentIdentity{ID: "agent_interviewer", Slug: "agent_interviewer", DisplayName: "Agent Interviewer"}) {
		t.Errorf("Agent = %+v", r.Agent)
	}
	want := Versions{A2UIVersion: "v0.8", A2UICatalogVersion: "supervaizer-v2-mvp.0", A2AVersion: "0.2.6"}
	if r.Versions != want {
		t.Errorf("Versions = %+v, want %+v", r.Versions, want)
	}
	if r.A2A.ControllerURL != "https://agent.example.com/a2a" ||
		r.A2A.Transport != (Transport{JSONRPC: true, SSE: true}) ||
		r.A2A.ExternalInterop != (ExternalInterop{}) {
		t.Errorf("A2A = %+v", r.A2A)
	}
	if len(r.Capabilities.Surfaces) != 13 || len(r.Capabilities.Actions) != 23 {
		t.Errorf("declared surfaces/actions = %d/%d, want 13/23", len(r.Capabilities.Surfaces), len(r.Capabilities.Actions))
	}
	for _, a := range r.Capabilities.Actions {
		if !a.Bare || !a.Declared || !a.Mutating || a.Scope != ScopeJob || a.Kind != KindCommand {
			t.Errorf("bare string action %q read as %+v; want the fail-closed reading", a.ID, a)
		}
	}
	if len(r.Capabilities.CaseLanes) != 3 || !r.Capabilities.CaseLanes[1].Default || r.Capabilities.CaseLanes[2].Label != "Deliverables" {
		t.Errorf("CaseLanes = %+v", r.Capabilities.CaseLanes)
	}
	if len(r.Capabilities.ArtifactTypes) != 2 || r.Capabilities.ArtifactTypes[0].RendererSurface != "case.step.detail" {
		t.Errorf("ArtifactTypes = %+v", r.Capabilities.ArtifactTypes)
	}
	if r.JobPolicy.Sync == nil || r.JobPolicy.Sync.Action != "job.sync" || len(r.JobPolicy.Sync.SupportedStatuses) != 4 {
		t.Errorf("JobPolicy.Sync = %+v", r.JobPolicy.Sync)
	}
	if r.JobPolicy.DefaultTimeoutSeconds == nil || *r.JobPolicy.DefaultTimeoutSeconds != 3600 || r.JobPolicy.OfflineStartPolicy != "block" {
		t.Errorf("JobPolicy = %+v", r.JobPolicy)
	}
	if r.JobPolicy.Setup != nil || r.WorkspaceBinding != nil || r.AgentMethods != nil || r.Card != nil {
		t.Errorf("absent blocks should be nil: setup=%v binding=%v methods=%v card=%v",
			r.JobPolicy.Setup, r.WorkspaceBinding, r.AgentMethods, r.Card)
	}
	if len(r.Resources) != 5 || len(r.Datasets) != 2 {
		t.Fatalf("resources/datasets = %d/%d", len(r.Resources), len(r.Datasets))
	}
	contacts := r.Resources[1]
	if contacts.ID != "contacts" || !contacts.AutoSurface || contacts.Scope != ScopeWorkspace ||
		!slices.Equal(contacts.RequiresContext, []string{"workspace.id"}) ||
		!slices.Equal(contacts.Operations, []string{"list", "get", "create", "update", "import"}) {
		t.Errorf("contacts = %+v", contacts)
	}
	if r.Datasets[0] != (Dataset{ID: "campaign_progress", Label: "Campaign Progress", AutoSurface: true, Scope: ScopeWorkspace}) {
		t.Errorf("dataset = %+v", r.Datasets[0])
	}
}

// The derived sets contain every action and surface the fixture declares; the
// extras are exactly the ones the seed derives and the (hand-written) fixture
// did not list.
func TestFixtureDerivedSets(t *testing.T) {
	r := mustParse(t, fixtureRaw(t))

	acts := r.Actions()
	ids := actionIDs(acts)
	for _, d := range r.Capabilities.Actions {
		if !contains(ids, d.ID) {
			t.Errorf("declared action %q missing from Actions()", d.ID)
		}
	}
	var extraActions []string
	for _, a := range acts {
		if !a.Declared {
			extraActions = append(extraActions, a.ID)
		}
	}
	// Seed "Actions": resource.<id>.<operation> for every declared operation;
	// the fixture declares "get" on four resources but does not list it.
	wantExtra := []string{"resource.campaigns.get", "resource.contacts.get", "resource.prompts.get", "resource.scenarios.get"}
	if !slices.Equal(extraActions, wantExtra) {
		t.Errorf("derived-only actions = %v, want %v", extraActions, wantExtra)
	}
	if len(ids) != 23+4 {
		t.Errorf("len(Actions()) = %d, want 27 (each id once)", len(ids))
	}
	// Order: declared first, in document order.
	if !slices.Equal(ids[:3], []string{"job.start.preview", "job.start", "job.stop"}) {
		t.Errorf("first actions = %v", ids[:3])
	}

	surfaces := r.Surfaces()
	for _, s := range r.Capabilities.Surfaces {
		if !contains(surfaces, s) {
			t.Errorf("declared surface %q missing from Surfaces()", s)
		}
	}
	// Seed "Datasets": auto_surface=True gets mission.agent.dataset.<id>; the
	// fixture's two datasets are auto-surfaced but not listed. Its five
	// auto-surfaced resources are listed already.
	extra := surfaces[len(r.Capabilities.Surfaces):]
	wantSurf := []string{"mission.agent.dataset.campaign_progress", "mission.agent.dataset.session_metrics"}
	if !slices.Equal(extra, wantSurf) {
		t.Errorf("derived-only surfaces = %v, want %v", extra, wantSurf)
	}
	for _, res := range r.Resources {
		if !contains(surfaces, "mission.agent.resource."+res.ID) {
			t.Errorf("auto-surfaced resource %s has no surface", res.ID)
		}
	}

	byID := map[string]V2ActionDefinition{}
	for _, a := range acts {
		byID[a.ID] = a
	}
	// Derived metadata beats the bare string reading.
	if q := byID["dataset.session_metrics.query"]; q.Mutating || q.Scope != ScopeWorkspace || !q.Declared || q.Origin != "dataset session_metrics" {
		t.Errorf("dataset query = %+v, want non-mutating, workspace scope, declared", q)
	}
	if l := byID["resource.contacts.list"]; !l.Mutating || l.Scope != ScopeWorkspace || l.Origin != "resource contacts" {
		t.Errorf("resource op = %+v, want mutating, workspace scope (resource default)", l)
	}
	if s := byID["job.sync"]; s.Origin != "job_policy.sync" {
		t.Errorf("job.sync origin = %q", s.Origin)
	}
	if s := byID["job.stop"]; !s.Bare || !s.Mutating || s.Scope != ScopeJob {
		t.Errorf("job.stop = %+v, want bare fail-closed reading", s)
	}
}

func TestActionsStringsAndObjects(t *testing.T) {
	raw := []byte(`{
	  "supervaizer_contract_version": 2,
	  "agent": {"id": "a", "slug": "a", "display_name": "A"},
	  "versions": {"a2ui_version": "v0.8", "a2ui_catalog_version": "a.1", "a2a_version": "0.2.6"},
	  "capabilities": {
	    "actions": [
	      "job.start",
	      "job.sync",
	      {"id": "goal.suggest", "kind": "help", "mutating": false, "target_field": "goal"},
	      {"id": "job.test", "dry_run": true, "label": "Test run", "description": "Runs once"},
	      "dataset.metrics.query",
	      "",
	      {"id": "job.stop", "mutating": true, "scope": "job", "label": "Stop"},
	      {"id": "job.stop", "mutating": false, "scope": "workspace"},
	      {"id": "resource.contacts.list", "mutating": false, "scope": "mission"}
	    ]
	  },
	  "resources": [{"id": "contacts", "label": "Contacts", "scope": "mission", "operations": ["list", "create"]}],
	  "datasets": [{"id": "metrics", "label": "Metrics", "scope": "job"}],
	  "job_policy": {"setup": {"preview_action": "job.preview"}},
	  "workspace_binding": {"required": true, "modes": ["bind_existing", "create_and_bind"]},
	  "agent_methods": {"refresh": {"method": "m.refresh"}, "custom": {"export": {"method": "m.export"}, "gone": null}}
	}`)
	r := mustParse(t, raw)
	byID := map[string]V2ActionDefinition{}
	for _, a := range r.Actions() {
		if _, dup := byID[a.ID]; dup {
			t.Fatalf("action %q listed twice", a.ID)
		}
		byID[a.ID] = a
	}
	check := func(id string, want V2ActionDefinition) {
		t.Helper()
		got, ok := byID[id]
		if !ok {
			t.Errorf("action %q missing", id)
			return
		}
		want.ID = id
		if got != want {
			t.Errorf("action %q:\n got %+v\nwant %+v", id, got, want)
		}
	}
	// Declared as a string and derived from job_policy.setup: derived wins.
	check("job.start", V2ActionDefinition{Mutating: true, Scope: ScopeJob, Kind: KindCommand, Declared: true, Origin: "job_policy.setup"})
	check("job.sync", V2ActionDefinition{Mutating: true, Scope: ScopeJob, Kind: KindCommand, Bare: true, Declared: true, Origin: "declared (string)"})
	check("goal.suggest", V2ActionDefinition{Mutating: false, Scope: ScopeJob, Kind: KindHelp, TargetField: "goal", Declared: true, Origin: "declared"})
	check("job.test", V2ActionDefinition{Mutating: true, Scope: ScopeJob, Kind: KindCommand, DryRun: true, Label: "Test run", Description: "Runs once", Declared: true, Origin: "declared"})
	// Bare string, derived metadata wins.
	check("dataset.metrics.query", V2ActionDefinition{Mutating: false, Scope: ScopeJob, Kind: KindCommand, Declared: true, Origin: "dataset metrics"})
	// Two objects for one id: the first wins.
	check("job.stop", V2ActionDefinition{Mutating: true, Scope: ScopeJob, Kind: KindCommand, Label: "Stop", Declared: true, Origin: "declared"})
	// Explicit object beats derived metadata although it comes first.
	check("resource.contacts.list", V2ActionDefinition{Mutating: false, Scope: ScopeMission, Kind: KindCommand, Declared: true, Origin: "declared"})
	check("resource.contacts.create", V2ActionDefinition{Mutating: true, Scope: ScopeMission, Kind: KindCommand, Origin: "resource contacts"})
	check("job.preview", V2ActionDefinition{Mutating: false, Scope: ScopeJob, Kind: KindCommand, Origin: "job_policy.setup"})
	check("step.awaiting.submit", V2ActionDefinition{Mutating: true, Scope: ScopeJob, Kind: KindCommand, Origin: "job_policy.setup"})
	check("workspace_binding.options", V2ActionDefinition{Mutating: true, Scope: ScopeWorkspace, Kind: KindCommand, Origin: "workspace_binding"})
	check("workspace_binding.create", V2ActionDefinition{Mutating: true, Scope: ScopeWorkspace, Kind: KindCommand, Origin: "workspace_binding"})
	check("agent.refresh", V2ActionDefinition{Mutating: true, Scope: ScopeJob, Kind: KindCommand, Origin: "agent_methods"})
	check("agent.custom.export", V2ActionDefinition{Mutating: true, Scope: ScopeJob, Kind: KindCommand, Origin: "agent_methods"})
	if _, ok := byID["agent.custom.gone"]; ok {
		t.Error("a null custom method must not derive an action")
	}
	if _, ok := byID[""]; ok {
		t.Error("empty action id kept")
	}
	if len(byID) != 14 {
		t.Errorf("got %d actions: %v", len(byID), actionIDs(r.Actions()))
	}
	// Surfaces: the binding create surface is implied by create_and_bind.
	if s := r.Surfaces(); !slices.Equal(s, []string{WorkspaceBindingCreateSurface}) {
		t.Errorf("Surfaces() = %v", s)
	}
	c := NewContract(r)
	if !c.WorkspaceBindingRequired() || c.SetupStartAction() != "job.start" {
		t.Errorf("binding required = %v, setup start = %q", c.WorkspaceBindingRequired(), c.SetupStartAction())
	}
}

func TestSurfacesDerivation(t *testing.T) {
	raw := []byte(`{
	  "supervaizer_contract_version": 2,
	  "agent": {"slug": "a"},
	  "capabilities": {
	    "surfaces": ["job.start", {"id": "mission.agent.overview", "label": "Overview"}, "", "job.start"],
	    "surface_definitions": [{"id": "job.start", "label": "Start"}, {"id": "not.declared", "label": "x"}]
	  },
	  "resources": [{"id": "r1", "auto_surface": true}, {"id": "r2"}],
	  "datasets": [{"id": "d1", "auto_surface": true}, {"id": "d2", "auto_surface": false}],
	  "dashboards": [{"id": "overview", "label": "Overview"}, {"id": "jobs", "label": "Jobs", "surface": "job.analytics"}],
	  "workspace_binding": {"create": {"surface": "binding.form", "action": "binding.create"}}
	}`)
	r := mustParse(t, raw)
	want := []string{
		"job.start", "mission.agent.overview",
		"mission.agent.resource.r1", "mission.agent.dataset.d1",
		"mission.analytics", "job.analytics", "binding.form",
	}
	if got := r.Surfaces(); !slices.Equal(got, want) {
		t.Errorf("Surfaces() =\n %v\nwant\n %v", got, want)
	}
	c := NewContract(r)
	if c.AllowsSurface("not.declared") {
		t.Error("a surface_definitions entry must not declare a surface")
	}
	if c.AllowsSurface("mission.agent.resource.r2") || c.AllowsSurface("mission.agent.dataset.d2") {
		t.Error("a resource or dataset without auto_surface must not derive a surface")
	}
	if !c.AllowsAction("dataset.d2.query") {
		t.Error("every dataset derives a query action, auto-surfaced or not")
	}
	if !c.AllowsAction("binding.create") || c.AllowsAction(WorkspaceBindingCreateAction) {
		t.Error("custom workspace binding create action not derived as configured")
	}
}

func TestUnknownKeysTolerated(t *testing.T) {
	base := mustParse(t, fixtureRaw(t))
	raw := edited(t, fixtureRaw(t), func(m map[string]any) {
		m["rule_checkpoints"] = map[string]any{"phases": []any{"before", "after"}}
		m["x_future"] = []any{1, "two", nil, map[string]any{"k": true}}
		sub(m, "agent")["avatar"] = map[string]any{"url": "https://example.com/a.png"}
		sub(m, "capabilities")["future_flag"] = "on"
		caps := sub(m, "capabilities")
		caps["actions"] = append(list(caps, "actions"), map[string]any{"id": "job.cancel", "requires_approval": true, "mutating": true})
		resourceByID(t, m, "contacts")["x_extra"] = 42
	})
	r := mustParse(t, raw)
	if !contains(actionIDs(r.Actions()), "job.cancel") {
		t.Error("action with an unknown key not read")
	}
	if len(r.Actions()) != len(base.Actions())+1 || !slices.Equal(r.Surfaces(), base.Surfaces()) {
		t.Error("unknown keys changed the derived sets")
	}
	if r.Fingerprint() == base.Fingerprint() {
		t.Error("unknown keys must count in the fingerprint")
	}
}

func TestUsedKeyWrongTypeRefused(t *testing.T) {
	cases := []struct {
		key  string
		edit func(m map[string]any)
	}{
		{"supervaizer_contract_version", func(m map[string]any) { m["supervaizer_contract_version"] = "2" }},
		{"agent", func(m map[string]any) { m["agent"] = "agent_interviewer" }},
		{"agent.slug", func(m map[string]any) { sub(m, "agent")["slug"] = 7 }},
		{"versions.a2a_version", func(m map[string]any) { sub(m, "versions")["a2a_version"] = 0.26 }},
		{"a2a.transport.sse", func(m map[string]any) { sub(sub(m, "a2a"), "transport")["sse"] = "yes" }},
		{"capabilities.surfaces[0]", func(m map[string]any) { list(sub(m, "capabilities"), "surfaces")[0] = 3 }},
		{"capabilities.actions", func(m map[string]any) { sub(m, "capabilities")["actions"] = "job.start" }},
		{"capabilities.actions[1].mutating", func(m map[string]any) {
			list(sub(m, "capabilities"), "actions")[1] = map[string]any{"id": "job.start", "mutating": "yes"}
		}},
		{"capabilities.actions[2]", func(m map[string]any) { list(sub(m, "capabilities"), "actions")[2] = true }},
		{"capabilities.scheduled_start", func(m map[string]any) { sub(m, "capabilities")["scheduled_start"] = "true" }},
		{"capabilities.case_lanes[1].default", func(m map[string]any) {
			list(sub(m, "capabilities"), "case_lanes")[1].(map[string]any)["default"] = 1
		}},
		{"job_policy.sync", func(m map[string]any) { sub(m, "job_policy")["sync"] = []any{"job.sync"} }},
		{"job_policy.default_timeout_seconds", func(m map[string]any) { sub(m, "job_policy")["default_timeout_seconds"] = 1.5 }},
		{"resources[0].operations", func(m map[string]any) { list(m, "resources")[0].(map[string]any)["operations"] = "list" }},
		{"resources[1].operations[2]", func(m map[string]any) {
			list(m, "resources")[1].(map[string]any)["operations"].([]any)[2] = map[string]any{"op": "create"}
		}},
		{"datasets[0].auto_surface", func(m map[string]any) { list(m, "datasets")[0].(map[string]any)["auto_surface"] = "true" }},
		{"workspace_binding.modes", func(m map[string]any) { m["workspace_binding"] = map[string]any{"modes": "bind_existing"} }},
		{"workspace_binding.required", func(m map[string]any) { m["workspace_binding"] = map[string]any{"required": "true"} }},
		{"dashboards[0].surface", func(m map[string]any) { m["dashboards"] = []any{map[string]any{"id": "d", "surface": 1}} }},
		{"agent_methods.custom", func(m map[string]any) { m["agent_methods"] = map[string]any{"custom": []any{"x"}} }},
	}
	for _, tc := range cases {
		t.Run(tc.key, func(t *testing.T) {
			_, err := Parse(edited(t, fixtureRaw(t), tc.edit))
			if err == nil {
				t.Fatal("Parse accepted a used key of the wrong type")
			}
			if !strings.Contains(err.Error(), `"`+tc.key+`"`) {
				t.Errorf("error does not name key %q: %v", tc.key, err)
			}
		})
	}
}

func TestParseRefusals(t *testing.T) {
	cases := []struct {
		name, doc, want string
	}{
		{"not JSON", `{"agent": `, "invalid JSON"},
		{"not an object", `[1, 2]`, "expected a JSON object, got array"},
		{"trailing data", `{"agent": {"slug": "a"}} {}`, "data after the top-level value"},
		{"duplicate key", `{"agent": {"slug": "a", "slug": "b"}}`, `duplicate key "agent.slug"`},
		{"duplicate nested key", `{"agent": {"slug": "a"}, "capabilities": {"actions": [{"id": "x", "mutating": false, "mutating": true}]}}`, `duplicate key "capabilities.actions[0].mutating"`},
		{"missing agent", `{"supervaizer_contract_version": 2}`, `"agent" is required`},
		{"missing slug", `{"agent": {"id": "a"}}`, `"agent.slug" is required`},
		{"action object without id", `{"agent": {"slug": "a"}, "capabilities": {"actions": [{"mutating": false}]}}`, `"capabilities.actions[0].id" is required`},
		{"duplicate resource", `{"agent": {"slug": "a"}, "resources": [{"id": "r"}, {"id": "r"}]}`, "duplicate resource id"},
		{"duplicate dataset", `{"agent": {"slug": "a"}, "datasets": [{"id": "d"}, {"id": "d"}]}`, "duplicate dataset id"},
		{"bad custom method", `{"agent": {"slug": "a"}, "agent_methods": {"custom": {"a.b": {}}}}`, "custom method names"},
		{"too deep", `{"agent": {"slug": "a"}, "x": ` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`, "nesting deeper"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestNullReadsAsAbsent(t *testing.T) {
	r := mustParse(t, []byte(`{"agent": {"slug": "a", "id": null}, "versions": {"ag_ui_version": null},
	  "capabilities": {"actions": null, "surfaces": null}, "job_policy": {"sync": null}, "workspace_binding": null}`))
	if r.Agent.ID != "" || r.JobPolicy.Sync != nil || r.WorkspaceBinding != nil || len(r.Actions()) != 0 {
		t.Errorf("null not read as absent: %+v", r)
	}
}

// sdkCard builds an Agent Card the way the SDK's create_agent_card does, with
// the registration under supervaizer.v2.
func sdkCard(t *testing.T, reg []byte) []byte {
	t.Helper()
	return encode(t, map[string]any{
		"name":        "Agent Interviewer",
		"description": "Interviews contacts",
		"developer":   map[string]any{"name": "Supervaize", "url": "https://supervaize.com/"},
		"version":     "1.0.0",
		"version_info": map[string]any{
			"current": "1.0.0", "latest": "1.0.0",
		},
		"logo_url":  "http://127.0.0.1:8000/static/agents/agent_interviewer_logo.png",
		"human_url": "http://127.0.0.1:8000/agents/agent_interviewer",
		"api_endpoints": []any{map[string]any{
			"type": "json", "url": "http://127.0.0.1:8000/api/supervaizer/agents/agent_interviewer",
		}},
		"tools":          []any{map[string]any{"name": "job_start", "input_schema": map[string]any{"type": "object"}}},
		"authentication": map[string]any{"type": "none"},
		"supervaizer":    map[string]any{"v2": decodeMap(t, reg)},
	})
}

func TestFromAgentCardPlacements(t *testing.T) {
	reg := fixtureRaw(t)
	want := mustParse(t, reg)
	regTree := func() map[string]any { return decodeMap(t, reg) }
	base := func() map[string]any {
		return map[string]any{"name": "Agent Interviewer", "version": "1.0.0", "description": "x"}
	}
	cases := []struct {
		name string
		card []byte
	}{
		{"sdk supervaizer.v2", sdkCard(t, reg)},
		{"dotted key", func() []byte { m := base(); m["supervaizer.v2"] = regTree(); return encode(t, m) }()},
		{"extensions object", func() []byte {
			m := base()
			m["extensions"] = map[string]any{"supervaizer.v2": regTree(), "other": 1}
			return encode(t, m)
		}()},
		{"extensions list", func() []byte {
			m := base()
			m["extensions"] = []any{
				"junk",
				map[string]any{"uri": "https://example.com/other", "params": 5},
				map[string]any{"uri": "supervaizer.v2", "params": regTree()},
			}
			return encode(t, m)
		}()},
		{"a2a capabilities.extensions", func() []byte {
			m := base()
			m["capabilities"] = map[string]any{
				"streaming": true,
				"extensions": []any{map[string]any{
					"uri": "https://supervaize.com/extensions/supervaizer.v2", "required": false, "params": regTree(),
				}},
			}
			return encode(t, m)
		}()},
		{"two identical placements", func() []byte {
			m := decodeMap(t, sdkCard(t, reg))
			m["supervaizer.v2"] = regTree()
			return encode(t, m)
		}()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromAgentCard(tc.card)
			if err != nil {
				t.Fatalf("FromAgentCard: %v", err)
			}
			if got.Fingerprint() != want.Fingerprint() {
				t.Errorf("fingerprint %s, want the bare registration's %s", got.Fingerprint(), want.Fingerprint())
			}
			if got.Agent.Slug != fixtureSlug || !slices.Equal(actionIDs(got.Actions()), actionIDs(want.Actions())) {
				t.Error("extracted registration differs from the bare one")
			}
			if got.Card == nil || got.Card.Name != "Agent Interviewer" || got.Card.Version != "1.0.0" {
				t.Errorf("Card = %+v", got.Card)
			}
		})
	}
}

func TestFromAgentCardRefusals(t *testing.T) {
	reg := fixtureRaw(t)
	t.Run("absent", func(t *testing.T) {
		_, err := FromAgentCard([]byte(`{"name": "x", "version": "1", "capabilities": {"streaming": true}}`))
		if !errors.Is(err, ErrNoV2Extension) {
			t.Fatalf("err = %v, want ErrNoV2Extension", err)
		}
	})
	t.Run("bare registration", func(t *testing.T) {
		_, err := FromAgentCard(reg)
		if !errors.Is(err, ErrNoV2Extension) || !strings.Contains(err.Error(), "Parse") {
			t.Fatalf("err = %v, want ErrNoV2Extension with a hint to use Parse", err)
		}
	})
	t.Run("conflicting placements", func(t *testing.T) {
		m := decodeMap(t, sdkCard(t, reg))
		other := decodeMap(t, reg)
		sub(other, "versions")["a2a_version"] = "0.3.0"
		m["supervaizer.v2"] = other
		_, err := FromAgentCard(encode(t, m))
		if err == nil || !strings.Contains(err.Error(), "conflicting") {
			t.Fatalf("err = %v, want a conflict", err)
		}
	})
	t.Run("supervaizer not an object", func(t *testing.T) {
		_, err := FromAgentCard([]byte(`{"supervaizer": "v2"}`))
		if err == nil || !strings.Contains(err.Error(), `"supervaizer"`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("extension not an object", func(t *testing.T) {
		_, err := FromAgentCard([]byte(`{"supervaizer": {"v2": [1]}}`))
		if err == nil || !strings.Contains(err.Error(), `"supervaizer.v2"`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("matching A2A extension without params", func(t *testing.T) {
		_, err := FromAgentCard([]byte(`{"capabilities": {"extensions": [{"uri": "supervaizer.v2"}]}}`))
		if err == nil || !strings.Contains(err.Error(), "no params") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("wrong type inside the extension names the card path", func(t *testing.T) {
		m := decodeMap(t, sdkCard(t, reg))
		v2 := sub(sub(m, "supervaizer"), "v2")
		sub(v2, "capabilities")["actions"] = []any{map[string]any{"id": "job.start", "scope": 1}}
		_, err := FromAgentCard(encode(t, m))
		if err == nil || !strings.Contains(err.Error(), `"supervaizer.v2.capabilities.actions[0].scope"`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("duplicate key outside the extension", func(t *testing.T) {
		card := bytes.Replace(sdkCard(t, reg), []byte(`"name":"Agent Interviewer"`), []byte(`"name":"A","name":"B"`), 1)
		_, err := FromAgentCard(card)
		if err == nil || !strings.Contains(err.Error(), "duplicate key") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("card name of the wrong type", func(t *testing.T) {
		m := decodeMap(t, sdkCard(t, reg))
		m["version"] = 1
		_, err := FromAgentCard(encode(t, m))
		if err == nil || !strings.Contains(err.Error(), `"version"`) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestFingerprint(t *testing.T) {
	raw := fixtureRaw(t)
	r := mustParse(t, raw)
	fp := r.Fingerprint()
	if len(fp) != 64 || strings.Trim(fp, "0123456789abcdef") != "" {
		t.Fatalf("fingerprint %q is not 64 lowercase hex characters", fp)
	}
	if mustParse(t, raw).Fingerprint() != fp {
		t.Fatal("fingerprint not deterministic")
	}

	t.Run("stable under key order and whitespace", func(t *testing.T) {
		re := reorderedJSON(decodeMap(t, raw))
		if bytes.Equal(re, raw) {
			t.Fatal("test document not respelled")
		}
		if got := mustParse(t, re).Fingerprint(); got != fp {
			t.Errorf("respelled document: %s, want %s", got, fp)
		}
		compact := encode(t, decodeMap(t, raw)) // sorted keys, no whitespace
		if got := mustParse(t, compact).Fingerprint(); got != fp {
			t.Errorf("compact document: %s, want %s", got, fp)
		}
	})

	t.Run("canonical form", func(t *testing.T) {
		r := mustParse(t, []byte("{ \"b\" : [ 1.50, {\"z\":null, \"a\":\"\\u00e9\\n\\u0001<&>\"} ],\n \"agent\": {\"slug\":\"s\"}, \"a\": true }"))
		want := `{"a":true,"agent":{"slug":"s"},"b":[1.50,{"a":"é\n\u0001<&>","z":null}]}`
		if got := string(r.CanonicalJSON()); got != want {
			t.Errorf("canonical =\n %s\nwant\n %s", got, want)
		}
	})

	expanding := []struct {
		name string
		edit func(m map[string]any)
	}{
		{"new action", func(m map[string]any) {
			caps := sub(m, "capabilities")
			caps["actions"] = append(list(caps, "actions"), "job.cancel")
		}},
		{"new surface", func(m map[string]any) {
			caps := sub(m, "capabilities")
			caps["surfaces"] = append(list(caps, "surfaces"), "job.analytics")
		}},
		{"new resource operation", func(m map[string]any) {
			r := resourceByID(t, m, "prompts")
			r["operations"] = append(list(r, "operations"), "delete")
		}},
		{"new dataset", func(m map[string]any) {
			m["datasets"] = append(list(m, "datasets"), map[string]any{"id": "costs", "label": "Costs"})
		}},
		{"a2a version", func(m map[string]any) { sub(m, "versions")["a2a_version"] = "0.3.0" }},
		{"binding mode", func(m map[string]any) {
			m["workspace_binding"] = map[string]any{"modes": []any{"bind_existing"}}
		}},
	}
	for _, e := range expanding {
		t.Run("changed by "+e.name, func(t *testing.T) {
			got := mustParse(t, edited(t, raw, e.edit)).Fingerprint()
			if got == fp {
				t.Error("fingerprint unchanged by an expanding edit")
			}
		})
	}
}
