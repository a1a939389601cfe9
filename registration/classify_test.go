package registration

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func appendAction(m map[string]any, a any) {
	caps := sub(m, "capabilities")
	caps["actions"] = append(list(caps, "actions"), a)
}

// replaceAction swaps the declared entry with that id (string or object).
func replaceAction(t *testing.T, m map[string]any, id string, a any) {
	t.Helper()
	acts := list(sub(m, "capabilities"), "actions")
	for i, e := range acts {
		if s, ok := e.(string); ok && s == id {
			acts[i] = a
			return
		}
		if o, ok := e.(map[string]any); ok && o["id"] == id {
			acts[i] = a
			return
		}
	}
	t.Fatalf("no declared action %q", id)
}

func TestClassify(t *testing.T) {
	type edit func(t *testing.T, m map[string]any)
	binding := func(modes ...any) edit {
		return func(t *testing.T, m map[string]any) {
			m["workspace_binding"] = map[string]any{"required": true, "modes": modes}
		}
	}
	cases := []struct {
		name   string
		before edit // applied to the fixture to make "old"; nil = fixture
		after  edit // applied to "old" to make "new"
		kind   ChangeKind
		lines  []string // exact Differences when set
		has    []string // lines that must appear
	}{
		{
			name:  "no change, respelled",
			after: func(t *testing.T, m map[string]any) {},
			kind:  ChangeNone,
			lines: nil,
		},
		{
			name: "lane label",
			after: func(t *testing.T, m map[string]any) {
				list(sub(m, "capabilities"), "case_lanes")[0].(map[string]any)["label"] = "Preparation"
			},
			kind:  ChangeHarmless,
			lines: []string{"case lane changed: setup"},
		},
		{
			name: "action label and description",
			before: func(t *testing.T, m map[string]any) {
				replaceAction(t, m, "job.stop", map[string]any{"id": "job.stop", "mutating": true, "scope": "job"})
			},
			after: func(t *testing.T, m map[string]any) {
				replaceAction(t, m, "job.stop", map[string]any{
					"id": "job.stop", "mutating": true, "scope": "job",
					"label": "Stop", "description": "Stop the job; work already done is kept.",
				})
			},
			kind:  ChangeHarmless,
			lines: []string{`action label changed: job.stop ("" -> "Stop")`, "action description changed: job.stop"},
		},
		{
			name: "surface text, artifact type label, display name",
			after: func(t *testing.T, m map[string]any) {
				sub(m, "capabilities")["surface_definitions"] = []any{map[string]any{"id": "job.start", "label": "Start"}}
				list(sub(m, "capabilities"), "artifact_types")[1].(map[string]any)["label"] = "Summary"
				sub(m, "agent")["display_name"] = "Interviewer"
			},
			kind: ChangeHarmless,
			lines: []string{
				`display name changed: "Agent Interviewer" -> "Interviewer"`,
				"surface text added: job.start",
				"artifact type changed: agent_interviewer.synthesis",
			},
		},
		{
			name: "catalog version",
			after: func(t *testing.T, m map[string]any) {
				sub(m, "versions")["a2ui_catalog_version"] = "supervaizer-v2-mvp.1"
			},
			kind:  ChangeHarmless,
			lines: []string{"catalog version changed: a2ui_catalog_version supervaizer-v2-mvp.0 -> supervaizer-v2-mvp.1"},
		},
		{
			name:  "new action",
			after: func(t *testing.T, m map[string]any) { appendAction(m, "job.cancel") },
			kind:  ChangeExpanding,
			lines: []string{"action added: job.cancel"},
		},
		{
			name: "action becomes mutating",
			before: func(t *testing.T, m map[string]any) {
				replaceAction(t, m, "artifact.get", map[string]any{"id": "artifact.get", "mutating": false, "scope": "job"})
			},
			after: func(t *testing.T, m map[string]any) {
				replaceAction(t, m, "artifact.get", map[string]any{"id": "artifact.get", "mutating": true, "scope": "job"})
			},
			kind:  ChangeExpanding,
			lines: []string{"action became mutating: artifact.get"},
		},
		{
			name: "dataset query explicitly declared mutating",
			after: func(t *testing.T, m map[string]any) {
				replaceAction(t, m, "dataset.session_metrics.query",
					map[string]any{"id": "dataset.session_metrics.query", "mutating": true, "scope": "workspace"})
			},
			kind:  ChangeExpanding,
			lines: []string{"action became mutating: dataset.session_metrics.query"},
		},
		{
			name: "action scope widened",
			after: func(t *testing.T, m map[string]any) {
				replaceAction(t, m, "job.stop", map[string]any{"id": "job.stop", "mutating": true, "scope": "workspace"})
			},
			kind:  ChangeExpanding,
			lines: []string{"action scope widened: job.stop (job -> workspace)"},
		},
		{
			name: "action scope narrowed and no longer mutating",
			after: func(t *testing.T, m map[string]any) {
				replaceAction(t, m, "resource.contacts.list",
					map[string]any{"id": "resource.contacts.list", "mutating": false, "scope": "mission"})
			},
			kind: ChangeHarmless,
			lines: []string{
				"action no longer mutating: resource.contacts.list",
				"action scope narrowed: resource.contacts.list (workspace -> mission)",
			},
		},
		{
			name: "dry run becomes real",
			before: func(t *testing.T, m map[string]any) {
				appendAction(m, map[string]any{"id": "job.test", "mutating": true, "scope": "job", "dry_run": true})
			},
			after: func(t *testing.T, m map[string]any) {
				replaceAction(t, m, "job.test", map[string]any{"id": "job.test", "mutating": true, "scope": "job"})
			},
			kind:  ChangeExpanding,
			lines: []string{"action no longer a dry run: job.test"},
		},
		{
			name: "new resource operation",
			after: func(t *testing.T, m map[string]any) {
				r := resourceByID(t, m, "prompts")
				r["operations"] = append(list(r, "operations"), "delete")
			},
			kind:  ChangeExpanding,
			lines: []string{"action added: resource.prompts.delete", "resource operation added: prompts.delete"},
		},
		{
			name: "new resource",
			after: func(t *testing.T, m map[string]any) {
				m["resources"] = append(list(m, "resources"), map[string]any{
					"id": "notes", "label": "Notes", "operations": []any{"list"},
				})
			},
			kind:  ChangeExpanding,
			lines: []string{"action added: resource.notes.list", "resource added: notes"},
		},
		{
			name: "resource scope widened and context requirement dropped",
			before: func(t *testing.T, m map[string]any) {
				resourceByID(t, m, "prompts")["scope"] = "mission"
				resourceByID(t, m, "prompts")["requires_context"] = []any{"workspace.id", "mission.id"}
			},
			after: func(t *testing.T, m map[string]any) {
				resourceByID(t, m, "prompts")["scope"] = "workspace"
				resourceByID(t, m, "prompts")["requires_context"] = []any{"workspace.id"}
			},
			kind: ChangeExpanding,
			has: []string{
				"resource scope widened: prompts (mission -> workspace)",
				"resource context requirement dropped: prompts (mission.id)",
				"action scope widened: resource.prompts.list (mission -> workspace)",
			},
		},
		{
			name: "new dataset",
			after: func(t *testing.T, m map[string]any) {
				m["datasets"] = append(list(m, "datasets"), map[string]any{"id": "call_costs", "label": "Call costs", "auto_surface": true})
			},
			kind: ChangeExpanding,
			lines: []string{
				"action added: dataset.call_costs.query",
				"surface added: mission.agent.dataset.call_costs",
				"dataset added: call_costs",
			},
		},
		{
			name: "new surface",
			after: func(t *testing.T, m map[string]any) {
				sub(m, "capabilities")["surfaces"] = append(list(sub(m, "capabilities"), "surfaces"), "job.configurator")
			},
			kind:  ChangeExpanding,
			lines: []string{"surface added: job.configurator"},
		},
		{
			name:   "new binding mode",
			before: binding("bind_existing"),
			after:  binding("bind_existing", "create_and_bind"),
			kind:   ChangeExpanding,
			lines: []string{
				"action added: workspace_binding.create",
				"surface added: workspace_binding.create",
				"workspace binding mode added: create_and_bind",
			},
		},
		{
			name:   "binding no longer required",
			before: binding("bind_existing"),
			after: func(t *testing.T, m map[string]any) {
				sub(m, "workspace_binding")["required"] = false
			},
			kind:  ChangeExpanding,
			lines: []string{"workspace binding no longer required"},
		},
		{
			name:   "binding reference label",
			before: binding("bind_existing"),
			after: func(t *testing.T, m map[string]any) {
				sub(m, "workspace_binding")["reference_label"] = "Tenant"
			},
			kind:  ChangeHarmless,
			lines: []string{`added: workspace_binding.reference_label`},
		},
		{
			name:  "a2a version",
			after: func(t *testing.T, m map[string]any) { sub(m, "versions")["a2a_version"] = "0.3.0" },
			kind:  ChangeExpanding,
			lines: []string{"protocol version changed: a2a_version 0.2.6 -> 0.3.0"},
		},
		{
			name:  "a2ui version",
			after: func(t *testing.T, m map[string]any) { sub(m, "versions")["a2ui_version"] = "v0.9" },
			kind:  ChangeExpanding,
			lines: []string{"protocol version changed: a2ui_version v0.8 -> v0.9"},
		},
		{
			name:  "scheduled start enabled",
			after: func(t *testing.T, m map[string]any) { sub(m, "capabilities")["scheduled_start"] = true },
			kind:  ChangeExpanding,
			lines: []string{"scheduled start enabled"},
		},
		{
			name:  "push notifications enabled",
			after: func(t *testing.T, m map[string]any) { sub(sub(m, "a2a"), "transport")["push_notifications"] = true },
			kind:  ChangeExpanding,
			lines: []string{"a2a capability enabled: transport.push_notifications"},
		},
		{
			name: "action removed",
			after: func(t *testing.T, m map[string]any) {
				caps := sub(m, "capabilities")
				caps["actions"] = slices.DeleteFunc(list(caps, "actions"), func(e any) bool { return e == "job.stop" })
			},
			kind:  ChangeHarmless,
			lines: []string{"action removed: job.stop"},
		},
		{
			name: "unmodeled keys",
			after: func(t *testing.T, m map[string]any) {
				sub(m, "job_policy")["default_timeout_seconds"] = json.Number("7200")
				m["rule_checkpoints"] = map[string]any{"phases": []any{"before"}}
				resourceByID(t, m, "contacts")["display"].(map[string]any)["title_field"] = "last_name"
			},
			kind: ChangeHarmless,
			lines: []string{
				"changed: job_policy.default_timeout_seconds (3600 -> 7200)",
				`changed: resources[contacts].display.title_field ("email" -> "last_name")`,
				"added: rule_checkpoints",
			},
		},
		{
			name: "expanding wins over harmless",
			after: func(t *testing.T, m map[string]any) {
				sub(m, "versions")["a2ui_catalog_version"] = "supervaizer-v2-mvp.1"
				appendAction(m, "job.cancel")
			},
			kind: ChangeExpanding,
			has:  []string{"action added: job.cancel", "catalog version changed: a2ui_catalog_version supervaizer-v2-mvp.0 -> supervaizer-v2-mvp.1"},
		},
		{
			name: "list order only",
			after: func(t *testing.T, m map[string]any) {
				caps := sub(m, "capabilities")
				a := list(caps, "actions")
				a[0], a[1] = a[1], a[0]
			},
			kind: ChangeHarmless,
			has:  []string{"registration document changed without a semantic difference (list order or number spelling)"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			oldRaw := fixtureRaw(t)
			if tc.before != nil {
				oldRaw = edited(t, oldRaw, func(m map[string]any) { tc.before(t, m) })
			}
			newTree := decodeMap(t, oldRaw)
			tc.after(t, newTree)
			old := mustParse(t, oldRaw)
			nw := mustParse(t, reorderedJSON(newTree)) // spelling must not matter
			got := Classify(old, nw)
			if got.Kind != tc.kind {
				t.Errorf("Kind = %s, want %s; differences:\n  %s", got.Kind, tc.kind, strings.Join(got.Differences, "\n  "))
			}
			if tc.lines != nil || tc.has == nil {
				if !slices.Equal(got.Differences, tc.lines) {
					t.Errorf("Differences =\n  %q\nwant\n  %q", got.Differences, tc.lines)
				}
			}
			for _, l := range tc.has {
				if !contains(got.Differences, l) {
					t.Errorf("Differences lack %q:\n  %s", l, strings.Join(got.Differences, "\n  "))
				}
			}
			if tc.kind == ChangeNone && old.Fingerprint() != nw.Fingerprint() {
				t.Error("no change but fingerprints differ")
			}
		})
	}
}

func TestClassifyNil(t *testing.T) {
	r := mustParse(t, fixtureRaw(t))
	if c := Classify(nil, nil); c.Kind != ChangeNone || c.Differences != nil {
		t.Errorf("Classify(nil, nil) = %+v", c)
	}
	c := Classify(nil, r)
	if c.Kind != ChangeExpanding {
		t.Fatalf("Classify(nil, r).Kind = %s", c.Kind)
	}
	for _, id := range actionIDs(r.Actions()) {
		if !contains(c.Differences, "action added: "+id) {
			t.Errorf("first load does not report action %s", id)
		}
	}
	if c := Classify(r, nil); c.Kind != ChangeExpanding || !contains(c.Differences, "action removed: job.start") {
		// Removing everything also drops agent.id and the controller URL,
		// which counts as an identity change.
		t.Errorf("Classify(r, nil) = %s %v", c.Kind, c.Differences)
	}
}

func TestChangeKindString(t *testing.T) {
	for k, want := range map[ChangeKind]string{ChangeNone: "none", ChangeHarmless: "harmless", ChangeExpanding: "expanding", 9: "ChangeKind(9)"} {
		if k.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(k), k.String(), want)
		}
		b, _ := json.Marshal(k)
		if string(b) != `"`+want+`"` {
			t.Errorf("json(%d) = %s", int(k), b)
		}
	}
}
