package registration

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
)

// Defaults the SDK applies when a key is absent (seed "Supervaizer v2",
// sections Registration, Action metadata, Resources, Datasets, Dashboards,
// Workspace Binding Registration).
const (
	ScopeWorkspace = "workspace"
	ScopeMission   = "mission"
	ScopeJob       = "job"

	KindCommand = "command"
	KindHelp    = "help"

	DefaultSyncAction         = "job.sync"
	DefaultSetupPreviewAction = "job.start.preview"
	DefaultSetupStartAction   = "job.start"
	DefaultSetupSubmitAction  = "step.awaiting.submit"
	DefaultDashboardSurface   = "mission.analytics"

	WorkspaceBindingOptionsAction = "workspace_binding.options"
	WorkspaceBindingCreateAction  = "workspace_binding.create"
	WorkspaceBindingCreateSurface = "workspace_binding.create"
	ModeBindExisting              = "bind_existing"
	ModeCreateAndBind             = "create_and_bind"

	AgentRefreshAction      = "agent.refresh"
	AgentCustomActionPrefix = "agent.custom."
)

// Registration is a parsed Supervaizer v2 registration: the object the SDK
// publishes in the Agent Card under supervaizer.v2 (seed "Supervaizer v2",
// section Registration; shape of SupervaizerV2AgentRegistrationContract).
//
// Build one with Parse or FromAgentCard, never with json.Unmarshal: the
// parser matches keys exactly (encoding/json matches struct fields
// case-insensitively), refuses duplicate keys, applies the SDK defaults, and
// records the canonical form behind Fingerprint. The model is open: keys this
// package does not use are kept (they count in the fingerprint) and never
// cause an error. A used key holding the wrong JSON type is an error naming
// the key path. null is read as "absent" everywhere.
//
// The exported fields describe the parsed document; editing them does not
// change Fingerprint or CanonicalJSON.
type Registration struct {
	// ContractVersion is supervaizer_contract_version exactly as written
	// (a JSON number, "2" for v2); "" when the key is absent.
	ContractVersion json.Number
	// Agent is the agent block. Agent.Slug is required.
	Agent AgentIdentity
	// Versions is the versions block.
	Versions Versions
	// A2A is the a2a block (controller URLs and transport flags).
	A2A A2AController
	// Capabilities is the capabilities block as declared (not derived).
	Capabilities Capabilities
	// JobPolicy is the job_policy block.
	JobPolicy JobPolicy
	// Resources, Datasets and Dashboards are the top-level lists, in order.
	Resources  []Resource
	Datasets   []Dataset
	Dashboards []Dashboard
	// WorkspaceBinding is the workspace_binding block, nil when absent.
	WorkspaceBinding *WorkspaceBinding
	// AgentMethods is the agent_methods block (V2AgentMethods), nil when
	// absent. Current SDKs fold agent methods into capabilities.actions and
	// do not publish the block; it is read when present.
	AgentMethods *AgentMethods
	// Card holds the Agent Card's own name and version when the registration
	// was extracted by FromAgentCard; nil from Parse.
	Card *CardInfo

	tree        any
	canonical   []byte
	fingerprint string
}

// AgentIdentity is registration.agent (V2AgentIdentity).
type AgentIdentity struct {
	ID          string // agent.id; the SDK defaults it to the slug
	Slug        string // agent.slug; required, equals the SDK Agent.slug
	DisplayName string // agent.display_name
}

// Versions is registration.versions (V2ProtocolVersions). Empty strings mean
// the key is absent.
type Versions struct {
	A2UIVersion        string // versions.a2ui_version, e.g. "v0.8"
	A2UICatalogVersion string // versions.a2ui_catalog_version, agent-owned
	A2AVersion         string // versions.a2a_version, e.g. "0.2.6"
	AGUIVersion        string // versions.ag_ui_version, optional
}

// A2AController is registration.a2a (V2A2AController).
type A2AController struct {
	AgentCardURL    string
	ControllerURL   string
	Transport       Transport
	ExternalInterop ExternalInterop
}

// Transport is a2a.transport; absent keys take the SDK defaults
// (json_rpc true, sse true, push_notifications false).
type Transport struct {
	JSONRPC           bool
	SSE               bool
	PushNotifications bool
}

// ExternalInterop is a2a.external_interop; absent keys are false.
type ExternalInterop struct {
	InboundTasks       bool
	OutboundDelegation bool
}

// Capabilities is registration.capabilities as declared.
type Capabilities struct {
	// Surfaces is capabilities.surfaces: id strings (an object entry with a
	// string "id" is also accepted). Empty strings are skipped.
	Surfaces []string
	// SurfaceDefinitions is capabilities.surface_definitions (display text).
	SurfaceDefinitions []SurfaceDefinition
	// Actions is capabilities.actions: each entry is a bare string or a
	// V2ActionDefinition object (seed "Action metadata").
	Actions []V2ActionDefinition
	// CaseLanes is capabilities.case_lanes.
	CaseLanes []CaseLane
	// ArtifactTypes is capabilities.artifact_types.
	ArtifactTypes []ArtifactType
	// ScheduledStart is capabilities.scheduled_start (absent = false).
	ScheduledStart bool
}

// V2ActionDefinition is one action with its metadata (seed "Action metadata",
// "Help actions and dry runs", "Display text").
//
// A bare string entry reads as Mutating=true, Scope="job", Kind="command"
// (the SDK's fail-closed reading); an object entry missing mutating or scope
// gets the same defaults.
type V2ActionDefinition struct {
	ID          string
	Mutating    bool   // does invoking it change agent-side state?
	Scope       string // "workspace", "mission" or "job" (other values are kept)
	Kind        string // "command" (default) or "help"
	TargetField string // setup field a help action fills
	DryRun      bool
	Label       string // display only, never an authorization input
	Description string // display only, never an authorization input

	// Bare is true when the entry was declared as a plain string.
	Bare bool
	// Declared is true when the id appears in capabilities.actions. It is
	// always true for Capabilities.Actions; in Registration.Actions it tells
	// declared ids from derived-only ones.
	Declared bool
	// Origin names where the effective metadata came from: "declared",
	// "declared (string)", "resource <id>", "dataset <id>",
	// "job_policy.sync", "job_policy.setup", "workspace_binding",
	// "agent_methods".
	Origin string
}

// SurfaceDefinition is one capabilities.surface_definitions entry.
type SurfaceDefinition struct {
	ID          string
	Label       string
	Description string
}

// CaseLane is one capabilities.case_lanes entry.
type CaseLane struct {
	ID      string
	Label   string
	Default bool
}

// ArtifactType is one capabilities.artifact_types entry.
type ArtifactType struct {
	Type            string
	Label           string
	RendererSurface string
}

// JobPolicy is registration.job_policy (V2JobPolicy).
type JobPolicy struct {
	DefaultTimeoutSeconds *int64 // seconds; nil when absent
	OfflineStartPolicy    string // e.g. "block"
	OfflineRunningPolicy  string // e.g. "fail_in_studio"
	Sync                  *SyncPolicy
	Setup                 *SetupPolicy
}

// SyncPolicy is job_policy.sync; Action defaults to "job.sync".
type SyncPolicy struct {
	Action            string
	SupportedStatuses []string
}

// SetupPolicy is job_policy.setup (V2JobSetupPolicy). Absent action keys take
// the SDK defaults job.start.preview, job.start and step.awaiting.submit.
type SetupPolicy struct {
	PreviewAction string
	StartAction   string
	SubmitAction  string
	ActionScopes  []string
	// Plan is the canonical JSON of job_policy.setup.plan, nil when absent.
	// It is display data for Studio and is not interpreted here.
	Plan json.RawMessage
}

// Resource is one resources entry (V2ResourceDefinition). Display metadata,
// fields and mounted views are kept in the fingerprint but not modeled.
type Resource struct {
	ID              string
	Label           string
	AutoSurface     bool     // derives surface mission.agent.resource.<id>
	Scope           string   // default "workspace"
	RequiresContext []string // default ["workspace.id"]
	Operations      []string // derive actions resource.<id>.<operation>
}

// Dataset is one datasets entry (V2DatasetDefinition).
type Dataset struct {
	ID          string
	Label       string
	AutoSurface bool   // derives surface mission.agent.dataset.<id>
	Scope       string // default "workspace"
}

// Dashboard is one dashboards entry (V2DashboardDefinition); widgets are kept
// in the fingerprint but not modeled.
type Dashboard struct {
	ID      string
	Label   string
	Surface string // default "mission.analytics"
}

// WorkspaceBinding is registration.workspace_binding (seed
// workspace-agent-grants, "Workspace Binding Registration"). As in the SDK,
// mode bind_existing implies an Existing block and create_and_bind a Create
// block with default ids when they are absent.
type WorkspaceBinding struct {
	Required bool
	Modes    []string // "bind_existing", "create_and_bind"
	Existing *WorkspaceBindingExisting
	Create   *WorkspaceBindingCreate
}

// WorkspaceBindingExisting is workspace_binding.existing; Action defaults to
// "workspace_binding.options".
type WorkspaceBindingExisting struct {
	Action     string
	ValueField string
	LabelField string
}

// WorkspaceBindingCreate is workspace_binding.create; Surface and Action
// default to "workspace_binding.create".
type WorkspaceBindingCreate struct {
	Surface string
	Action  string
}

// AgentMethods is registration.agent_methods (V2AgentMethods): Refresh is
// true when agent_methods.refresh is a non-null object; Custom lists the keys
// of agent_methods.custom with a non-null value, sorted.
type AgentMethods struct {
	Refresh bool
	Custom  []string
}

// CardInfo is the Agent Card's own identity, outside the registration.
type CardInfo struct {
	Name    string // card "name"
	Version string // card "version" (the agent release, not a protocol version)
}

// Fingerprint returns the lowercase hex SHA-256 (64 characters) of
// CanonicalJSON. It does not depend on key order or whitespace in the source
// document; it changes with any change of a value, of list order, or of a
// number's spelling ("2" and "2.0" differ).
func (r *Registration) Fingerprint() string { return r.fingerprint }

// CanonicalJSON returns a copy of the canonical form of the registration
// object: keys sorted byte-wise at every depth, no whitespace, numbers as
// written, strings escaping only '"', '\' and control characters.
func (r *Registration) CanonicalJSON() []byte {
	return append([]byte(nil), r.canonical...)
}

// Parse reads a bare Supervaizer v2 registration object (the value of
// supervaizer.v2 in an Agent Card, or the file given to
// `registration file <path>`).
//
// Errors: invalid JSON, trailing data, duplicate keys at any depth, nesting
// deeper than 512 levels, a top level that is not an object, a used key with
// the wrong JSON type (the message names the key path, e.g.
// "capabilities.actions[2].mutating"), a missing agent.slug or a list entry
// without its id, duplicate resource or dataset ids, and invalid
// agent_methods.custom keys. Versions are not checked here: see
// Contract.CheckVersions.
func Parse(raw []byte) (*Registration, error) {
	tree, err := decodeStrict(raw)
	if err != nil {
		return nil, fmt.Errorf("registration: %w", err)
	}
	return fromTree(tree, "")
}

// reader reads typed values out of decoded objects and keeps the first
// error: after a failure every read returns a zero value, so parsing code can
// read straight through and check err once.
type reader struct{ err error }

func (rd *reader) fail(err error) {
	if rd.err == nil {
		rd.err = err
	}
}

// obj is a decoded JSON object with its path (for error messages) and the
// reader collecting errors.
type obj struct {
	m    map[string]any
	path string
	rd   *reader
}

func (o obj) at(key string) string { return joinKey(o.path, key) }

// get returns the value of key; null counts as absent.
func (o obj) get(key string) (any, bool) {
	if o.rd.err != nil {
		return nil, false
	}
	v, ok := o.m[key]
	if !ok || v == nil {
		return nil, false
	}
	return v, true
}

func typeError(path, want string, got any) error {
	return fmt.Errorf("registration: key %q: expected %s, got %s", path, want, jsonType(got))
}

func (o obj) child(m map[string]any, path string) obj { return obj{m: m, path: path, rd: o.rd} }

func (o obj) object(key string) (obj, bool) {
	v, ok := o.get(key)
	if !ok {
		return obj{rd: o.rd}, false
	}
	m, isObj := v.(map[string]any)
	if !isObj {
		o.rd.fail(typeError(o.at(key), "object", v))
		return obj{rd: o.rd}, false
	}
	return o.child(m, o.at(key)), true
}

func (o obj) str(key, def string) string {
	v, ok := o.get(key)
	if !ok {
		return def
	}
	s, isStr := v.(string)
	if !isStr {
		o.rd.fail(typeError(o.at(key), "string", v))
	}
	return s
}

func (o obj) requiredStr(key string) string {
	s := o.str(key, "")
	if s == "" && o.rd.err == nil {
		o.rd.fail(fmt.Errorf("registration: key %q is required (non-empty string)", o.at(key)))
	}
	return s
}

func (o obj) boolean(key string, def bool) bool {
	v, ok := o.get(key)
	if !ok {
		return def
	}
	b, isBool := v.(bool)
	if !isBool {
		o.rd.fail(typeError(o.at(key), "boolean", v))
	}
	return b
}

func (o obj) array(key string) []any {
	v, ok := o.get(key)
	if !ok {
		return nil
	}
	a, isArr := v.([]any)
	if !isArr {
		o.rd.fail(typeError(o.at(key), "array", v))
	}
	return a
}

// strings reads a list of strings; present reports whether the key was
// there, so that callers can apply a default only when it is absent.
func (o obj) strings(key string) (list []string, present bool) {
	a := o.array(key)
	if a == nil {
		return nil, false
	}
	list = make([]string, 0, len(a))
	for i, e := range a {
		s, ok := e.(string)
		if !ok {
			o.rd.fail(typeError(index(o.at(key), i), "string", e))
			return nil, false
		}
		list = append(list, s)
	}
	return list, true
}

// objects reads a list of objects.
func (o obj) objects(key string) []obj {
	a := o.array(key)
	out := make([]obj, 0, len(a))
	for i, e := range a {
		m, ok := e.(map[string]any)
		if !ok {
			o.rd.fail(typeError(index(o.at(key), i), "object", e))
			return nil
		}
		out = append(out, o.child(m, index(o.at(key), i)))
	}
	return out
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

var customMethodKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// fromTree builds a Registration from a tree produced by decodeStrict. path
// prefixes error messages when the registration sits inside a larger
// document (an Agent Card); "" for a bare registration.
func fromTree(tree any, path string) (*Registration, error) {
	m, ok := tree.(map[string]any)
	if !ok {
		if path == "" {
			return nil, fmt.Errorf("registration: expected a JSON object, got %s", jsonType(tree))
		}
		return nil, typeError(path, "object", tree)
	}
	root := obj{m: m, path: path, rd: &reader{}}
	r := &Registration{tree: tree}
	r.canonical = canonicalJSON(tree)
	r.fingerprint = sha256Hex(r.canonical)

	if v, ok := root.get("supervaizer_contract_version"); ok {
		n, isNum := v.(json.Number)
		if !isNum {
			root.rd.fail(typeError(root.at("supervaizer_contract_version"), "number", v))
		}
		r.ContractVersion = n
	}
	parseAgent(root, r)
	parseVersions(root, r)
	parseA2A(root, r)
	parseCapabilities(root, r)
	parseJobPolicy(root, r)
	parseResources(root, r)
	parseDatasets(root, r)
	parseDashboards(root, r)
	parseWorkspaceBinding(root, r)
	parseAgentMethods(root, r)
	if root.rd.err != nil {
		return nil, root.rd.err
	}
	return r, nil
}

func parseAgent(root obj, r *Registration) {
	a, ok := root.object("agent")
	if !ok {
		if root.rd.err == nil {
			root.rd.fail(fmt.Errorf("registration: key %q is required (object with a slug)", root.at("agent")))
		}
		return
	}
	r.Agent = AgentIdentity{
		Slug:        a.requiredStr("slug"),
		ID:          a.str("id", ""),
		DisplayName: a.str("display_name", ""),
	}
}

func parseVersions(root obj, r *Registration) {
	v, _ := root.object("versions")
	r.Versions = Versions{
		A2UIVersion:        v.str("a2ui_version", ""),
		A2UICatalogVersion: v.str("a2ui_catalog_version", ""),
		A2AVersion:         v.str("a2a_version", ""),
		AGUIVersion:        v.str("ag_ui_version", ""),
	}
}

func parseA2A(root obj, r *Registration) {
	a, _ := root.object("a2a")
	t, _ := a.object("transport")
	x, _ := a.object("external_interop")
	r.A2A = A2AController{
		AgentCardURL:  a.str("agent_card_url", ""),
		ControllerURL: a.str("controller_url", ""),
		Transport: Transport{
			JSONRPC:           t.boolean("json_rpc", true),
			SSE:               t.boolean("sse", true),
			PushNotifications: t.boolean("push_notifications", false),
		},
		ExternalInterop: ExternalInterop{
			InboundTasks:       x.boolean("inbound_tasks", false),
			OutboundDelegation: x.boolean("outbound_delegation", false),
		},
	}
}

func parseCapabilities(root obj, r *Registration) {
	c, _ := root.object("capabilities")
	caps := &r.Capabilities

	// surfaces: strings (the wire form), or objects carrying an id.
	for i, e := range c.array("surfaces") {
		switch t := e.(type) {
		case string:
			if t != "" {
				caps.Surfaces = append(caps.Surfaces, t)
			}
		case map[string]any:
			caps.Surfaces = append(caps.Surfaces, c.child(t, index(c.at("surfaces"), i)).requiredStr("id"))
		default:
			root.rd.fail(typeError(index(c.at("surfaces"), i), "string or object", e))
		}
	}

	for _, d := range c.objects("surface_definitions") {
		caps.SurfaceDefinitions = append(caps.SurfaceDefinitions, SurfaceDefinition{
			ID:          d.requiredStr("id"),
			Label:       d.str("label", ""),
			Description: d.str("description", ""),
		})
	}

	// actions: bare strings or V2ActionDefinition objects.
	for i, e := range c.array("actions") {
		switch t := e.(type) {
		case string:
			if t != "" {
				caps.Actions = append(caps.Actions, V2ActionDefinition{
					ID: t, Mutating: true, Scope: ScopeJob, Kind: KindCommand,
					Bare: true, Declared: true, Origin: "declared (string)",
				})
			}
		case map[string]any:
			o := c.child(t, index(c.at("actions"), i))
			caps.Actions = append(caps.Actions, V2ActionDefinition{
				ID:          o.requiredStr("id"),
				Mutating:    o.boolean("mutating", true),
				Scope:       o.str("scope", ScopeJob),
				Kind:        o.str("kind", KindCommand),
				TargetField: o.str("target_field", ""),
				DryRun:      o.boolean("dry_run", false),
				Label:       o.str("label", ""),
				Description: o.str("description", ""),
				Declared:    true,
				Origin:      "declared",
			})
		default:
			root.rd.fail(typeError(index(c.at("actions"), i), "string or object", e))
		}
	}

	for _, l := range c.objects("case_lanes") {
		caps.CaseLanes = append(caps.CaseLanes, CaseLane{
			ID:      l.requiredStr("id"),
			Label:   l.str("label", ""),
			Default: l.boolean("default", false),
		})
	}
	for _, t := range c.objects("artifact_types") {
		caps.ArtifactTypes = append(caps.ArtifactTypes, ArtifactType{
			Type:            t.requiredStr("type"),
			Label:           t.str("label", ""),
			RendererSurface: t.str("renderer_surface", ""),
		})
	}
	caps.ScheduledStart = c.boolean("scheduled_start", false)
}

func parseJobPolicy(root obj, r *Registration) {
	p, _ := root.object("job_policy")
	jp := &r.JobPolicy
	if v, ok := p.get("default_timeout_seconds"); ok {
		n, isNum := v.(json.Number)
		i, err := n.Int64()
		if !isNum || err != nil {
			root.rd.fail(typeError(p.at("default_timeout_seconds"), "integer number", v))
		}
		jp.DefaultTimeoutSeconds = &i
	}
	jp.OfflineStartPolicy = p.str("offline_start_policy", "")
	jp.OfflineRunningPolicy = p.str("offline_running_policy", "")
	if s, ok := p.object("sync"); ok {
		statuses, _ := s.strings("supported_statuses")
		jp.Sync = &SyncPolicy{Action: s.str("action", DefaultSyncAction), SupportedStatuses: statuses}
	}
	if s, ok := p.object("setup"); ok {
		scopes, _ := s.strings("action_scopes")
		jp.Setup = &SetupPolicy{
			PreviewAction: s.str("preview_action", DefaultSetupPreviewAction),
			StartAction:   s.str("start_action", DefaultSetupStartAction),
			SubmitAction:  s.str("submit_action", DefaultSetupSubmitAction),
			ActionScopes:  scopes,
		}
		if plan, ok := s.get("plan"); ok {
			jp.Setup.Plan = json.RawMessage(canonicalJSON(plan))
		}
	}
}

func parseResources(root obj, r *Registration) {
	seen := map[string]bool{}
	for _, o := range root.objects("resources") {
		res := Resource{
			ID:          o.requiredStr("id"),
			Label:       o.str("label", ""),
			AutoSurface: o.boolean("auto_surface", false),
			Scope:       o.str("scope", ScopeWorkspace),
		}
		if seen[res.ID] {
			root.rd.fail(fmt.Errorf("registration: key %q: duplicate resource id %q", o.at("id"), res.ID))
		}
		seen[res.ID] = true
		var present bool
		if res.RequiresContext, present = o.strings("requires_context"); !present {
			res.RequiresContext = []string{"workspace.id"}
		}
		ops, _ := o.strings("operations")
		for _, op := range ops {
			if op != "" {
				res.Operations = append(res.Operations, op)
			}
		}
		r.Resources = append(r.Resources, res)
	}
}

func parseDatasets(root obj, r *Registration) {
	seen := map[string]bool{}
	for _, o := range root.objects("datasets") {
		ds := Dataset{
			ID:          o.requiredStr("id"),
			Label:       o.str("label", ""),
			AutoSurface: o.boolean("auto_surface", false),
			Scope:       o.str("scope", ScopeWorkspace),
		}
		if seen[ds.ID] {
			root.rd.fail(fmt.Errorf("registration: key %q: duplicate dataset id %q", o.at("id"), ds.ID))
		}
		seen[ds.ID] = true
		r.Datasets = append(r.Datasets, ds)
	}
}

func parseDashboards(root obj, r *Registration) {
	for _, o := range root.objects("dashboards") {
		r.Dashboards = append(r.Dashboards, Dashboard{
			ID:      o.requiredStr("id"),
			Label:   o.str("label", ""),
			Surface: o.str("surface", DefaultDashboardSurface),
		})
	}
}

func parseWorkspaceBinding(root obj, r *Registration) {
	w, ok := root.object("workspace_binding")
	if !ok {
		return
	}
	modes, _ := w.strings("modes")
	wb := &WorkspaceBinding{Required: w.boolean("required", false), Modes: modes}
	// The SDK fills the block a declared mode needs with default ids.
	if e, ok := w.object("existing"); ok || slices.Contains(modes, ModeBindExisting) {
		wb.Existing = &WorkspaceBindingExisting{
			Action:     e.str("action", WorkspaceBindingOptionsAction),
			ValueField: e.str("value_field", "agent_workspace_ref"),
			LabelField: e.str("label_field", "display_name"),
		}
	}
	if c, ok := w.object("create"); ok || slices.Contains(modes, ModeCreateAndBind) {
		wb.Create = &WorkspaceBindingCreate{
			Surface: c.str("surface", WorkspaceBindingCreateSurface),
			Action:  c.str("action", WorkspaceBindingCreateAction),
		}
	}
	r.WorkspaceBinding = wb
}

func parseAgentMethods(root obj, r *Registration) {
	a, ok := root.object("agent_methods")
	if !ok {
		return
	}
	_, refresh := a.object("refresh")
	am := &AgentMethods{Refresh: refresh}
	c, _ := a.object("custom")
	// Document order is lost in a Go map; sort for a stable order.
	for _, name := range sortedKeys(c.m) {
		switch {
		case !customMethodKey.MatchString(name):
			root.rd.fail(fmt.Errorf("registration: key %q: custom method names may only contain letters, digits, '_' and '-'", c.at(name)))
		case c.m[name] == nil:
		default:
			if _, ok := c.object(name); ok {
				am.Custom = append(am.Custom, name)
			}
		}
	}
	r.AgentMethods = am
}
