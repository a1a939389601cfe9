package registration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ChangeKind grades a registration change (seed workspace-agent-grants,
// Server Identity and Startup: "Contract fingerprint checks distinguish
// expanding changes (new scopes, new data access) from harmless refreshes.
// Only expanding changes require explicit reacceptance.").
type ChangeKind int

const (
	// ChangeNone: same fingerprint.
	ChangeNone ChangeKind = iota
	// ChangeHarmless: display text, catalog version, lanes, artifact types,
	// removals and narrowings, and keys this package does not model.
	ChangeHarmless
	// ChangeExpanding: anything that widens what the agent may be asked to
	// do (see Classify).
	ChangeExpanding
	// ChangeInitial: the first contract installed for a slug (nothing was
	// there before: no differences). Classify never returns it; the source
	// records it (Source's OnChange, SlugStatus.LastChange).
	ChangeInitial
)

// String returns "none", "harmless", "expanding" or "initial".
func (k ChangeKind) String() string {
	switch k {
	case ChangeNone:
		return "none"
	case ChangeHarmless:
		return "harmless"
	case ChangeExpanding:
		return "expanding"
	case ChangeInitial:
		return "initial"
	default:
		return "ChangeKind(" + strconv.Itoa(int(k)) + ")"
	}
}

// MarshalText encodes the kind as its String form (for JSON status pages).
func (k ChangeKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Change is the result of Classify: the overall kind and one human-readable
// line per difference.
type Change struct {
	Kind        ChangeKind
	Differences []string
}

// Classify compares two registrations and grades the change. A nil old (or
// new) is read as an empty registration, so Classify(nil, r) reports
// everything r declares as added. Both nil, or equal fingerprints, give
// ChangeNone with no lines.
//
// Expanding (one line each, e.g. "action added: job.cancel"):
//   - an action added to the effective set (Registration.Actions);
//   - an action that became mutating, got a wider scope
//     (job < mission < workspace < any unknown scope), stopped being a
//     dry run, or stopped being a help action;
//   - a surface added to the effective set (Registration.Surfaces);
//   - a resource or dataset added, a resource operation added, a resource or
//     dataset scope widened, a resource context requirement dropped;
//   - a workspace binding mode added, or workspace binding no longer
//     required;
//   - supervaizer_contract_version, a2a_version, a2ui_version or
//     ag_ui_version changed;
//   - agent.id, agent.slug or a2a.controller_url changed;
//   - scheduled_start, an a2a transport flag or an external interop flag
//     turned on.
//
// Harmless: labels, descriptions and other display text, the
// a2ui_catalog_version, case lanes, artifact types, dashboards, removals and
// narrowings of all the above, and changes to keys this package does not
// model (reported as "changed: <path>", "added: <path>" or
// "removed: <path>"). A change with no line of its own (list order, number
// spelling) is harmless with one explanatory line. Expanding wins over
// harmless.
//
// Lines come in a fixed order (versions, identity, actions, surfaces,
// display, resources, datasets, dashboards, workspace binding, other keys);
// within a group, ids follow document order or are sorted.
func Classify(old, new *Registration) Change {
	if old == nil && new == nil {
		return Change{Kind: ChangeNone}
	}
	if old != nil && new != nil && old.fingerprint != "" && old.fingerprint == new.fingerprint {
		return Change{Kind: ChangeNone}
	}
	o, n := old, new
	if o == nil {
		o = &Registration{}
	}
	if n == nil {
		n = &Registration{}
	}
	d := &differ{}
	d.versions(o, n)
	d.identity(o, n)
	d.actions(o, n)
	d.surfaces(o, n)
	d.display(o, n)
	d.resources(o, n)
	d.datasets(o, n)
	d.dashboards(o, n)
	d.workspaceBinding(o, n)
	if old != nil && new != nil {
		walkUnmodeled(d, nil, old.tree, new.tree, true, true)
	}

	if len(d.lines) == 0 {
		d.harmless("registration document changed without a semantic difference (list order or number spelling)")
	}
	kind := ChangeHarmless
	if d.expanding {
		kind = ChangeExpanding
	}
	return Change{Kind: kind, Differences: d.lines}
}

type differ struct {
	lines     []string
	expanding bool
}

func (d *differ) expand(format string, args ...any) {
	d.expanding = true
	d.lines = append(d.lines, fmt.Sprintf(format, args...))
}

func (d *differ) harmless(format string, args ...any) {
	d.lines = append(d.lines, fmt.Sprintf(format, args...))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func (d *differ) versions(o, n *Registration) {
	if o.ContractVersion != n.ContractVersion {
		d.expand("protocol version changed: supervaizer_contract_version %s -> %s",
			orNone(string(o.ContractVersion)), orNone(string(n.ContractVersion)))
	}
	pairs := []struct{ name, a, b string }{
		{"a2a_version", o.Versions.A2AVersion, n.Versions.A2AVersion},
		{"a2ui_version", o.Versions.A2UIVersion, n.Versions.A2UIVersion},
		{"ag_ui_version", o.Versions.AGUIVersion, n.Versions.AGUIVersion},
	}
	for _, p := range pairs {
		if p.a != p.b {
			d.expand("protocol version changed: %s %s -> %s", p.name, orNone(p.a), orNone(p.b))
		}
	}
	if o.Versions.A2UICatalogVersion != n.Versions.A2UICatalogVersion {
		d.harmless("catalog version changed: a2ui_catalog_version %s -> %s",
			orNone(o.Versions.A2UICatalogVersion), orNone(n.Versions.A2UICatalogVersion))
	}
}

func (d *differ) identity(o, n *Registration) {
	if o.Agent.ID != n.Agent.ID {
		d.expand("agent id changed: %s -> %s", orNone(o.Agent.ID), orNone(n.Agent.ID))
	}
	if o.Agent.Slug != n.Agent.Slug {
		d.expand("agent slug changed: %s -> %s", orNone(o.Agent.Slug), orNone(n.Agent.Slug))
	}
	if o.Agent.DisplayName != n.Agent.DisplayName {
		d.harmless("display name changed: %q -> %q", o.Agent.DisplayName, n.Agent.DisplayName)
	}
	if o.A2A.ControllerURL != n.A2A.ControllerURL {
		d.expand("controller URL changed: %s -> %s", orNone(o.A2A.ControllerURL), orNone(n.A2A.ControllerURL))
	}
	if o.A2A.AgentCardURL != n.A2A.AgentCardURL {
		d.harmless("agent card URL changed: %s -> %s", orNone(o.A2A.AgentCardURL), orNone(n.A2A.AgentCardURL))
	}
	flags := []struct {
		name string
		a, b bool
	}{
		{"transport.json_rpc", o.A2A.Transport.JSONRPC, n.A2A.Transport.JSONRPC},
		{"transport.sse", o.A2A.Transport.SSE, n.A2A.Transport.SSE},
		{"transport.push_notifications", o.A2A.Transport.PushNotifications, n.A2A.Transport.PushNotifications},
		{"external_interop.inbound_tasks", o.A2A.ExternalInterop.InboundTasks, n.A2A.ExternalInterop.InboundTasks},
		{"external_interop.outbound_delegation", o.A2A.ExternalInterop.OutboundDelegation, n.A2A.ExternalInterop.OutboundDelegation},
	}
	for _, f := range flags {
		switch {
		case !f.a && f.b:
			d.expand("a2a capability enabled: %s", f.name)
		case f.a && !f.b:
			d.harmless("a2a capability disabled: %s", f.name)
		}
	}
	switch {
	case !o.Capabilities.ScheduledStart && n.Capabilities.ScheduledStart:
		d.expand("scheduled start enabled")
	case o.Capabilities.ScheduledStart && !n.Capabilities.ScheduledStart:
		d.harmless("scheduled start disabled")
	}
}

// scopeRank orders scopes from narrow to wide; an unknown scope counts as the
// widest.
func scopeRank(s string) int {
	switch s {
	case ScopeJob:
		return 1
	case ScopeMission:
		return 2
	case ScopeWorkspace:
		return 3
	default:
		return 4
	}
}

func (d *differ) actions(o, n *Registration) {
	oldActs := o.Actions()
	newActs := n.Actions()
	oldByID := make(map[string]V2ActionDefinition, len(oldActs))
	for _, a := range oldActs {
		oldByID[a.ID] = a
	}
	newByID := make(map[string]V2ActionDefinition, len(newActs))
	for _, a := range newActs {
		newByID[a.ID] = a
	}
	for _, b := range newActs {
		a, ok := oldByID[b.ID]
		if !ok {
			d.expand("action added: %s", b.ID)
			continue
		}
		switch {
		case !a.Mutating && b.Mutating:
			d.expand("action became mutating: %s", b.ID)
		case a.Mutating && !b.Mutating:
			d.harmless("action no longer mutating: %s", b.ID)
		}
		if a.Scope != b.Scope {
			if scopeRank(b.Scope) > scopeRank(a.Scope) {
				d.expand("action scope widened: %s (%s -> %s)", b.ID, a.Scope, b.Scope)
			} else {
				d.harmless("action scope narrowed: %s (%s -> %s)", b.ID, a.Scope, b.Scope)
			}
		}
		switch {
		case a.DryRun && !b.DryRun:
			d.expand("action no longer a dry run: %s", b.ID)
		case !a.DryRun && b.DryRun:
			d.harmless("action became a dry run: %s", b.ID)
		}
		if a.Kind != b.Kind {
			if a.Kind == KindHelp {
				d.expand("action kind changed: %s (%s -> %s)", b.ID, a.Kind, b.Kind)
			} else {
				d.harmless("action kind changed: %s (%s -> %s)", b.ID, a.Kind, b.Kind)
			}
		}
		if a.TargetField != b.TargetField {
			d.harmless("action target field changed: %s (%s -> %s)", b.ID, orNone(a.TargetField), orNone(b.TargetField))
		}
		if a.Label != b.Label {
			d.harmless("action label changed: %s (%q -> %q)", b.ID, a.Label, b.Label)
		}
		if a.Description != b.Description {
			d.harmless("action description changed: %s", b.ID)
		}
	}
	for _, a := range oldActs {
		if _, ok := newByID[a.ID]; !ok {
			d.harmless("action removed: %s", a.ID)
		}
	}
}

func (d *differ) surfaces(o, n *Registration) {
	oldS, newS := o.Surfaces(), n.Surfaces()
	for _, s := range newS {
		if !slices.Contains(oldS, s) {
			d.expand("surface added: %s", s)
		}
	}
	for _, s := range oldS {
		if !slices.Contains(newS, s) {
			d.harmless("surface removed: %s", s)
		}
	}
}

// keyedDiff reports added, removed and changed keys of two keyed lists, in
// the order new-then-old, each key once.
func keyedDiff[T comparable](old, new []T, key func(T) string,
	added, removed, changed func(id string, a, b T)) {
	om := map[string]T{}
	for _, e := range old {
		om[key(e)] = e
	}
	nm := map[string]T{}
	for _, e := range new {
		nm[key(e)] = e
	}
	for _, b := range new {
		a, ok := om[key(b)]
		switch {
		case !ok:
			added(key(b), a, b)
		case a != b && changed != nil:
			changed(key(b), a, b)
		}
	}
	for _, a := range old {
		if _, ok := nm[key(a)]; !ok {
			var zero T
			removed(key(a), a, zero)
		}
	}
}

func (d *differ) display(o, n *Registration) {
	keyedDiff(o.Capabilities.SurfaceDefinitions, n.Capabilities.SurfaceDefinitions,
		func(s SurfaceDefinition) string { return s.ID },
		func(id string, _, _ SurfaceDefinition) { d.harmless("surface text added: %s", id) },
		func(id string, _, _ SurfaceDefinition) { d.harmless("surface text removed: %s", id) },
		func(id string, a, b SurfaceDefinition) {
			if a.Label != b.Label {
				d.harmless("surface label changed: %s (%q -> %q)", id, a.Label, b.Label)
			}
			if a.Description != b.Description {
				d.harmless("surface description changed: %s", id)
			}
		})
	keyedDiff(o.Capabilities.CaseLanes, n.Capabilities.CaseLanes,
		func(l CaseLane) string { return l.ID },
		func(id string, _, _ CaseLane) { d.harmless("case lane added: %s", id) },
		func(id string, _, _ CaseLane) { d.harmless("case lane removed: %s", id) },
		func(id string, _, _ CaseLane) { d.harmless("case lane changed: %s", id) })
	keyedDiff(o.Capabilities.ArtifactTypes, n.Capabilities.ArtifactTypes,
		func(t ArtifactType) string { return t.Type },
		func(id string, _, _ ArtifactType) { d.harmless("artifact type added: %s", id) },
		func(id string, _, _ ArtifactType) { d.harmless("artifact type removed: %s", id) },
		func(id string, _, _ ArtifactType) { d.harmless("artifact type changed: %s", id) })
}

func (d *differ) resources(o, n *Registration) {
	om := map[string]Resource{}
	for _, r := range o.Resources {
		om[r.ID] = r
	}
	nm := map[string]Resource{}
	for _, r := range n.Resources {
		nm[r.ID] = r
	}
	for _, b := range n.Resources {
		a, ok := om[b.ID]
		if !ok {
			d.expand("resource added: %s", b.ID)
			continue
		}
		for _, op := range b.Operations {
			if !slices.Contains(a.Operations, op) {
				d.expand("resource operation added: %s.%s", b.ID, op)
			}
		}
		for _, op := range a.Operations {
			if !slices.Contains(b.Operations, op) {
				d.harmless("resource operation removed: %s.%s", b.ID, op)
			}
		}
		d.scope("resource", b.ID, a.Scope, b.Scope)
		for _, c := range a.RequiresContext {
			if !slices.Contains(b.RequiresContext, c) {
				d.expand("resource context requirement dropped: %s (%s)", b.ID, c)
			}
		}
		for _, c := range b.RequiresContext {
			if !slices.Contains(a.RequiresContext, c) {
				d.harmless("resource context requirement added: %s (%s)", b.ID, c)
			}
		}
		if a.Label != b.Label {
			d.harmless("resource label changed: %s (%q -> %q)", b.ID, a.Label, b.Label)
		}
		if a.AutoSurface != b.AutoSurface {
			d.harmless("resource auto_surface changed: %s (%t -> %t)", b.ID, a.AutoSurface, b.AutoSurface)
		}
	}
	for _, a := range o.Resources {
		if _, ok := nm[a.ID]; !ok {
			d.harmless("resource removed: %s", a.ID)
		}
	}
}

func (d *differ) scope(what, id, a, b string) {
	if a == b {
		return
	}
	if scopeRank(b) > scopeRank(a) {
		d.expand("%s scope widened: %s (%s -> %s)", what, id, a, b)
	} else {
		d.harmless("%s scope narrowed: %s (%s -> %s)", what, id, a, b)
	}
}

func (d *differ) datasets(o, n *Registration) {
	keyedDiff(o.Datasets, n.Datasets,
		func(x Dataset) string { return x.ID },
		func(id string, _, _ Dataset) { d.expand("dataset added: %s", id) },
		func(id string, _, _ Dataset) { d.harmless("dataset removed: %s", id) },
		func(id string, a, b Dataset) {
			d.scope("dataset", id, a.Scope, b.Scope)
			if a.Label != b.Label {
				d.harmless("dataset label changed: %s (%q -> %q)", id, a.Label, b.Label)
			}
			if a.AutoSurface != b.AutoSurface {
				d.harmless("dataset auto_surface changed: %s (%t -> %t)", id, a.AutoSurface, b.AutoSurface)
			}
		})
}

func (d *differ) dashboards(o, n *Registration) {
	keyedDiff(o.Dashboards, n.Dashboards,
		func(x Dashboard) string { return x.ID },
		func(id string, _, _ Dashboard) { d.harmless("dashboard added: %s", id) },
		func(id string, _, _ Dashboard) { d.harmless("dashboard removed: %s", id) },
		func(id string, _, _ Dashboard) { d.harmless("dashboard changed: %s", id) })
}

func (d *differ) workspaceBinding(o, n *Registration) {
	a, b := o.WorkspaceBinding, n.WorkspaceBinding
	switch {
	case a == nil && b != nil:
		d.harmless("workspace binding block added")
	case a != nil && b == nil:
		d.harmless("workspace binding block removed")
	}
	var za, zb WorkspaceBinding
	if a != nil {
		za = *a
	}
	if b != nil {
		zb = *b
	}
	switch {
	case za.Required && !zb.Required:
		d.expand("workspace binding no longer required")
	case !za.Required && zb.Required:
		d.harmless("workspace binding now required")
	}
	for _, m := range zb.Modes {
		if !slices.Contains(za.Modes, m) {
			d.expand("workspace binding mode added: %s", m)
		}
	}
	for _, m := range za.Modes {
		if !slices.Contains(zb.Modes, m) {
			d.harmless("workspace binding mode removed: %s", m)
		}
	}
}

// ---- keys this package does not model -------------------------------------

// pathSeg is one step of a JSON path: an object key, or a list element named
// by its id.
type pathSeg struct {
	key  string
	elem bool
}

func renderPath(p []pathSeg) string {
	var b strings.Builder
	for i, s := range p {
		switch {
		case s.elem:
			b.WriteString("[" + s.key + "]")
		case i > 0:
			b.WriteString("." + s.key)
		default:
			b.WriteString(s.key)
		}
	}
	if b.Len() == 0 {
		return "(registration)"
	}
	return b.String()
}

// modeledPaths are the paths the semantic comparisons above cover; "*"
// matches any list element. A modeled path whose two sides are objects (or
// id-keyed lists) is still descended so that unmodeled keys inside it are
// reported.
var modeledPaths = [][]string{
	{"supervaizer_contract_version"},
	{"agent", "id"}, {"agent", "slug"}, {"agent", "display_name"},
	{"versions", "a2ui_version"}, {"versions", "a2ui_catalog_version"},
	{"versions", "a2a_version"}, {"versions", "ag_ui_version"},
	{"a2a", "agent_card_url"}, {"a2a", "controller_url"},
	{"a2a", "transport", "json_rpc"}, {"a2a", "transport", "sse"},
	{"a2a", "transport", "push_notifications"},
	{"a2a", "external_interop", "inbound_tasks"},
	{"a2a", "external_interop", "outbound_delegation"},
	{"capabilities", "surfaces"}, {"capabilities", "scheduled_start"},
	{"capabilities", "actions"}, {"capabilities", "actions", "*"},
	{"capabilities", "actions", "*", "id"}, {"capabilities", "actions", "*", "mutating"},
	{"capabilities", "actions", "*", "scope"}, {"capabilities", "actions", "*", "kind"},
	{"capabilities", "actions", "*", "target_field"}, {"capabilities", "actions", "*", "dry_run"},
	{"capabilities", "actions", "*", "label"}, {"capabilities", "actions", "*", "description"},
	{"capabilities", "surface_definitions"}, {"capabilities", "surface_definitions", "*"},
	{"capabilities", "surface_definitions", "*", "id"},
	{"capabilities", "surface_definitions", "*", "label"},
	{"capabilities", "surface_definitions", "*", "description"},
	{"capabilities", "case_lanes"}, {"capabilities", "case_lanes", "*"},
	{"capabilities", "case_lanes", "*", "id"}, {"capabilities", "case_lanes", "*", "label"},
	{"capabilities", "case_lanes", "*", "default"},
	{"capabilities", "artifact_types"}, {"capabilities", "artifact_types", "*"},
	{"capabilities", "artifact_types", "*", "type"}, {"capabilities", "artifact_types", "*", "label"},
	{"capabilities", "artifact_types", "*", "renderer_surface"},
	{"job_policy", "sync", "action"},
	{"job_policy", "setup", "preview_action"}, {"job_policy", "setup", "start_action"},
	{"job_policy", "setup", "submit_action"},
	{"resources"}, {"resources", "*"},
	{"resources", "*", "id"}, {"resources", "*", "label"}, {"resources", "*", "auto_surface"},
	{"resources", "*", "scope"}, {"resources", "*", "requires_context"},
	{"resources", "*", "operations"},
	{"datasets"}, {"datasets", "*"},
	{"datasets", "*", "id"}, {"datasets", "*", "label"}, {"datasets", "*", "auto_surface"},
	{"datasets", "*", "scope"},
	{"dashboards"}, {"dashboards", "*"},
	{"dashboards", "*", "id"}, {"dashboards", "*", "label"}, {"dashboards", "*", "surface"},
	{"workspace_binding"}, {"workspace_binding", "required"}, {"workspace_binding", "modes"},
	{"workspace_binding", "existing"}, {"workspace_binding", "existing", "action"},
	{"workspace_binding", "create"}, {"workspace_binding", "create", "action"},
	{"workspace_binding", "create", "surface"},
}

func isModeled(p []pathSeg) bool {
	for _, pat := range modeledPaths {
		if len(pat) != len(p) {
			continue
		}
		match := true
		for i, s := range pat {
			if s == "*" {
				if !p[i].elem {
					match = false
					break
				}
			} else if p[i].elem || p[i].key != s {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// walkUnmodeled reports differences under paths the semantic comparisons do
// not cover, as harmless lines.
func walkUnmodeled(d *differ, path []pathSeg, a, b any, hasA, hasB bool) {
	if hasA && hasB && bytes.Equal(canonicalJSON(a), canonicalJSON(b)) {
		return
	}
	modeled := isModeled(path)
	am, aObj := a.(map[string]any)
	bm, bObj := b.(map[string]any)
	if hasA && hasB && aObj && bObj {
		for _, k := range sortedKeyUnion(am, bm) {
			va, okA := am[k]
			vb, okB := bm[k]
			walkUnmodeled(d, append(slices.Clip(path), pathSeg{key: k}), va, vb, okA, okB)
		}
		return
	}
	if hasA && hasB {
		if ka, okA := keyedList(a); okA {
			if kb, okB := keyedList(b); okB {
				for _, id := range sortedKeyUnion(ka, kb) {
					va, okA := ka[id]
					vb, okB := kb[id]
					walkUnmodeled(d, append(slices.Clip(path), pathSeg{key: id, elem: true}), va, vb, okA, okB)
				}
				return
			}
		}
	}
	if modeled {
		return
	}
	p := renderPath(path)
	switch {
	case !hasA:
		d.harmless("added: %s", p)
	case !hasB:
		d.harmless("removed: %s", p)
	default:
		if sa, sb, ok := shortScalars(a, b); ok {
			d.harmless("changed: %s (%s -> %s)", p, sa, sb)
		} else {
			d.harmless("changed: %s", p)
		}
	}
}

// keyedList returns a list of objects keyed by their "id" (or, failing that,
// "type") string, when every element has a distinct non-empty one.
func keyedList(v any) (map[string]any, bool) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, false
	}
	for _, field := range []string{"id", "type"} {
		out := make(map[string]any, len(list))
		good := true
		for _, e := range list {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, false
			}
			id, ok := m[field].(string)
			if !ok || id == "" {
				good = false
				break
			}
			if _, dup := out[id]; dup {
				good = false
				break
			}
			out[id] = e
		}
		if good {
			return out, true
		}
	}
	return nil, false
}

// shortScalars renders two scalar values for a "changed" line when both are
// short.
func shortScalars(a, b any) (string, string, bool) {
	r := func(v any) (string, bool) {
		switch v.(type) {
		case nil, bool, json.Number, string:
			s := string(canonicalJSON(v))
			return s, len(s) <= 60
		default:
			return "", false
		}
	}
	sa, okA := r(a)
	sb, okB := r(b)
	return sa, sb, okA && okB
}
