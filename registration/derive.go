package registration

import "sort"

// Actions returns the effective action set of the registration, in order of
// first mention, each id once (seed "Supervaizer v2", sections Action
// metadata, Actions, Resources, Datasets; seed workspace-agent-grants,
// Workspace Binding Registration). The set is the union of:
//
//   - capabilities.actions as declared (strings or objects);
//   - resource.<id>.<operation> for every operation of every resource
//     (Scope = the resource scope, Mutating = true);
//   - dataset.<id>.query for every dataset, auto-surfaced or not
//     (Scope = the dataset scope, Mutating = false);
//   - job_policy.sync.action when job_policy.sync is present (job, mutating);
//   - job_policy.setup preview_action (job, not mutating), start_action and
//     submit_action (job, mutating) when job_policy.setup is present;
//   - workspace_binding existing.action and create.action when those blocks
//     are present or implied by a mode (workspace, mutating);
//   - agent.refresh and agent.custom.<name> from agent_methods when present
//     (job, mutating).
//
// Metadata precedence is explicit > derived > bare: a declared object
// replaces derived metadata wherever it sits, derived metadata replaces a
// bare string's fail-closed reading (mutating, job scope). When two objects
// declare the same id the first one wins. Declared is true for ids that
// appear in capabilities.actions. The result is a fresh slice.
func (r *Registration) Actions() []V2ActionDefinition {
	const (
		rankBare = iota + 1
		rankDerived
		rankExplicit
	)
	type entry struct {
		def  V2ActionDefinition
		rank int
	}
	var order []string
	byID := map[string]*entry{}
	add := func(d V2ActionDefinition, rank int) {
		if d.ID == "" {
			return
		}
		e, ok := byID[d.ID]
		if !ok {
			byID[d.ID] = &entry{def: d, rank: rank}
			order = append(order, d.ID)
			return
		}
		declared := e.def.Declared || d.Declared
		if rank > e.rank {
			e.def, e.rank = d, rank
		}
		e.def.Declared = declared
	}
	for _, d := range r.Capabilities.Actions {
		if d.Bare {
			add(d, rankBare)
		} else {
			add(d, rankExplicit)
		}
	}
	for _, d := range r.derivedActions() {
		add(d, rankDerived)
	}
	out := make([]V2ActionDefinition, 0, len(order))
	for _, id := range order {
		out = append(out, byID[id].def)
	}
	return out
}

// derivedActions lists the actions the SDK derives from the registration
// blocks, in the SDK's order, with their derived metadata.
func (r *Registration) derivedActions() []V2ActionDefinition {
	var out []V2ActionDefinition
	derived := func(id string, mutating bool, scope, origin string) {
		if id == "" {
			return
		}
		out = append(out, V2ActionDefinition{
			ID: id, Mutating: mutating, Scope: scope, Kind: KindCommand, Origin: origin,
		})
	}
	for _, res := range r.Resources {
		for _, op := range res.Operations {
			derived("resource."+res.ID+"."+op, true, res.Scope, "resource "+res.ID)
		}
	}
	for _, ds := range r.Datasets {
		derived("dataset."+ds.ID+".query", false, ds.Scope, "dataset "+ds.ID)
	}
	if s := r.JobPolicy.Sync; s != nil {
		derived(s.Action, true, ScopeJob, "job_policy.sync")
	}
	if s := r.JobPolicy.Setup; s != nil {
		derived(s.PreviewAction, false, ScopeJob, "job_policy.setup")
		derived(s.StartAction, true, ScopeJob, "job_policy.setup")
		derived(s.SubmitAction, true, ScopeJob, "job_policy.setup")
	}
	if wb := r.WorkspaceBinding; wb != nil {
		if wb.Existing != nil {
			derived(wb.Existing.Action, true, ScopeWorkspace, "workspace_binding")
		}
		if wb.Create != nil {
			derived(wb.Create.Action, true, ScopeWorkspace, "workspace_binding")
		}
	}
	if am := r.AgentMethods; am != nil {
		if am.Refresh {
			derived(AgentRefreshAction, true, ScopeJob, "agent_methods")
		}
		for _, name := range am.Custom {
			derived(AgentCustomActionPrefix+name, true, ScopeJob, "agent_methods")
		}
	}
	return out
}

// Surfaces returns the effective surface ids of the registration, in order of
// first mention, each once (seed "Supervaizer v2", sections Surfaces,
// Resources, Datasets, Dashboards; seed workspace-agent-grants, Workspace
// Binding Registration): capabilities.surfaces as declared, then
// mission.agent.resource.<id> for each resource with auto_surface,
// mission.agent.dataset.<id> for each dataset with auto_surface, each
// dashboard's surface (default mission.analytics), and
// workspace_binding.create.surface when that block is present or implied by
// the create_and_bind mode. surface_definitions only add text to declared
// ids; they do not declare surfaces. The result is a fresh slice.
func (r *Registration) Surfaces() []string {
	var out []string
	seen := map[string]bool{}
	add := func(id string) {
		if id == "" || seen[id] {
			return
		}
		seen[id] = true
		out = append(out, id)
	}
	for _, s := range r.Capabilities.Surfaces {
		add(s)
	}
	for _, res := range r.Resources {
		if res.AutoSurface {
			add("mission.agent.resource." + res.ID)
		}
	}
	for _, ds := range r.Datasets {
		if ds.AutoSurface {
			add("mission.agent.dataset." + ds.ID)
		}
	}
	for _, d := range r.Dashboards {
		add(d.Surface)
	}
	if wb := r.WorkspaceBinding; wb != nil && wb.Create != nil {
		add(wb.Create.Surface)
	}
	return out
}

// sortedKeyUnion returns the keys of a and b, each once, sorted.
func sortedKeyUnion[V any](a, b map[string]V) []string {
	keys := make(map[string]bool, len(a)+len(b))
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return sortedKeys(keys)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
