package registration

import (
	"fmt"
	"slices"
	"strings"
)

// Protocol versions this sidecar accepts by default: the versions the
// Supervaizer SDK pins (SUPERVAIZER_V2_CONTRACT_VERSION,
// SUPERVAIZER_V2_A2A_VERSION, SUPERVAIZER_V2_A2UI_VERSION).
const (
	SupervaizerContractVersion = 2
	DefaultA2AVersion          = "0.2.6"
	DefaultA2UIVersion         = "v0.8"
)

// AcceptedVersions lists the protocol versions a sidecar accepts (seed
// "Supervaizer v2", Versioning; seed protocol-support, A2UI Version Pinning).
// Versions are compared as exact strings. An empty list means the default
// for that protocol (DefaultA2AVersion, DefaultA2UIVersion). The
// supervaizer_contract_version must always be 2.
type AcceptedVersions struct {
	A2A  []string
	A2UI []string
}

// DefaultAcceptedVersions returns {A2A: ["0.2.6"], A2UI: ["v0.8"]} in fresh
// slices.
func DefaultAcceptedVersions() AcceptedVersions {
	return AcceptedVersions{A2A: []string{DefaultA2AVersion}, A2UI: []string{DefaultA2UIVersion}}
}

func (a AcceptedVersions) withDefaults() AcceptedVersions {
	out := AcceptedVersions{A2A: slices.Clone(a.A2A), A2UI: slices.Clone(a.A2UI)}
	if len(out.A2A) == 0 {
		out.A2A = []string{DefaultA2AVersion}
	}
	if len(out.A2UI) == 0 {
		out.A2UI = []string{DefaultA2UIVersion}
	}
	return out
}

// Contract is the compiled, immutable form of one agent's registration: the
// effective action and surface sets as lookup tables plus the few facts the
// request path needs. All methods are safe for concurrent use; a Contract
// never changes after NewContract returns (a refreshed card yields a new
// Contract).
type Contract struct {
	slug             string
	agentID          string
	fingerprint      string
	canonical        []byte
	contractVersion  string
	versions         Versions
	actions          map[string]V2ActionDefinition
	actionOrder      []string
	surfaces         map[string]struct{}
	surfaceOrder     []string
	bindingRequired  bool
	setupStartAction string
	scheduledStart   bool
}

// NewContract compiles r, which should come from Parse or FromAgentCard (a
// hand-built Registration has no fingerprint). It never fails: everything
// that can be wrong with a registration is refused by Parse or
// FromAgentCard, and version compatibility is checked separately by
// CheckVersions. It panics if r is nil.
func NewContract(r *Registration) *Contract {
	c := &Contract{
		slug:            r.Agent.Slug,
		agentID:         r.Agent.ID,
		fingerprint:     r.fingerprint,
		canonical:       r.canonical,
		contractVersion: string(r.ContractVersion),
		versions:        r.Versions,
		actions:         map[string]V2ActionDefinition{},
		surfaces:        map[string]struct{}{},
		bindingRequired: r.WorkspaceBinding != nil && r.WorkspaceBinding.Required,
		scheduledStart:  r.Capabilities.ScheduledStart,
	}
	for _, d := range r.Actions() {
		c.actions[d.ID] = d
		c.actionOrder = append(c.actionOrder, d.ID)
	}
	for _, s := range r.Surfaces() {
		c.surfaces[s] = struct{}{}
		c.surfaceOrder = append(c.surfaceOrder, s)
	}
	if r.JobPolicy.Setup != nil {
		c.setupStartAction = r.JobPolicy.Setup.StartAction
	}
	return c
}

// AgentSlug returns registration agent.slug.
func (c *Contract) AgentSlug() string { return c.slug }

// AgentID returns registration agent.id ("" when absent).
func (c *Contract) AgentID() string { return c.agentID }

// Fingerprint returns the registration fingerprint (see
// Registration.Fingerprint): 64 lowercase hex characters.
func (c *Contract) Fingerprint() string { return c.fingerprint }

// Versions returns the registration versions block.
func (c *Contract) Versions() Versions { return c.versions }

// AllowsAction reports whether id is in the effective action set
// (Registration.Actions). Ids are compared exactly, case-sensitively.
func (c *Contract) AllowsAction(id string) bool {
	_, ok := c.actions[id]
	return ok
}

// Action returns the effective definition of action id, if declared or
// derived.
func (c *Contract) Action(id string) (V2ActionDefinition, bool) {
	d, ok := c.actions[id]
	return d, ok
}

// ActionIDs returns the effective action ids in order of first mention, in a
// fresh slice.
func (c *Contract) ActionIDs() []string { return slices.Clone(c.actionOrder) }

// AllowsSurface reports whether id is in the effective surface set
// (Registration.Surfaces). Ids are compared exactly, case-sensitively.
func (c *Contract) AllowsSurface(id string) bool {
	_, ok := c.surfaces[id]
	return ok
}

// SurfaceIDs returns the effective surface ids in order of first mention, in
// a fresh slice.
func (c *Contract) SurfaceIDs() []string { return slices.Clone(c.surfaceOrder) }

// WorkspaceBindingRequired reports workspace_binding.required (false when the
// block is absent). Seed workspace-agent-grants, Workspace Binding
// Registration.
func (c *Contract) WorkspaceBindingRequired() bool { return c.bindingRequired }

// SetupStartAction returns job_policy.setup.start_action (default
// "job.start") when job_policy.setup is present, "" otherwise. Seed "Action
// metadata" and "Idempotency": this is the confirm that must be idempotent.
func (c *Contract) SetupStartAction() string { return c.setupStartAction }

// ScheduledStart reports capabilities.scheduled_start (seed "Scheduled
// start").
func (c *Contract) ScheduledStart() bool { return c.scheduledStart }

// Registration re-reads the registration this contract was compiled from
// (from its canonical JSON), so callers get their own copy. Card is nil: the
// contract keeps only the registration object. Nil when the contract was
// compiled from a hand-built Registration.
func (c *Contract) Registration() *Registration {
	if len(c.canonical) == 0 {
		return nil // compiled from a hand-built Registration
	}
	r, err := Parse(c.canonical)
	if err != nil {
		// The canonical form of a registration that parsed once always
		// parses again.
		panic("registration: re-parsing canonical registration: " + err.Error())
	}
	return r
}

// CheckVersions checks the pinned protocol versions against accepted (empty
// lists mean the defaults). It returns nil, or a *refusal.Refusal with Code
// CodeContractVersionUnsupported whose message names the version seen and the
// versions accepted, when:
//
//   - supervaizer_contract_version is absent or is not exactly 2;
//   - versions.a2a_version is absent or not in accepted.A2A;
//   - versions.a2ui_version is absent or not in accepted.A2UI.
//
// a2ui_catalog_version and ag_ui_version are not checked (the catalog is
// agent-owned; AG-UI is not part of the runtime).
func (c *Contract) CheckVersions(accepted AcceptedVersions) error {
	a := accepted.withDefaults()
	if c.contractVersion != "2" {
		seen := c.contractVersion
		if seen == "" {
			seen = "none"
		}
		return refuse(CodeContractVersionUnsupported, fmt.Sprintf(
			"agent %q declares supervaizer_contract_version %s; accepted: %d",
			c.slug, seen, SupervaizerContractVersion))
	}
	if !slices.Contains(a.A2A, c.versions.A2AVersion) {
		return refuse(CodeContractVersionUnsupported, fmt.Sprintf(
			"agent %q declares a2a_version %s; accepted: %s",
			c.slug, quoteOrNone(c.versions.A2AVersion), quoteList(a.A2A)))
	}
	if !slices.Contains(a.A2UI, c.versions.A2UIVersion) {
		return refuse(CodeContractVersionUnsupported, fmt.Sprintf(
			"agent %q declares a2ui_version %s; accepted: %s",
			c.slug, quoteOrNone(c.versions.A2UIVersion), quoteList(a.A2UI)))
	}
	return nil
}

func quoteOrNone(s string) string {
	if s == "" {
		return "none"
	}
	return fmt.Sprintf("%q", s)
}

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
