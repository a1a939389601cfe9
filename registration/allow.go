// "Does the contract allow this call?": the contract's answer to one
// authorized call, as a *refusal.Refusal carrying the SDK's code and text, so the
// request path maps it to the wire without re-stating the rules.

package registration

import "github.com/supervaize/supervaizer-sidecar/refusal"

// Codes of the refusals Allow adds to those of Contract (the SDK's
// data.code strings, or the reason of a -32010 / -32011 answer).
const (
	// CodeActionNotRegistered: the contract does not declare the action
	// (JSON-RPC -32010, as the SDK answers an unregistered handler).
	CodeActionNotRegistered = "action_not_registered"
	// CodeSurfaceNotRegistered: the contract does not declare the surface
	// (JSON-RPC -32011).
	CodeSurfaceNotRegistered = "surface_not_registered"
	// CodeWorkspaceBindingMissing: the agent requires a workspace binding
	// and the call's workspace token carries no agent_workspace_ref.
	CodeWorkspaceBindingMissing = "workspace_binding_missing"
)

// Call is what Allow is asked about: one /a2a call, already authorized.
type Call struct {
	// Action is true for an action call (action.invoke), false for a
	// surface call.
	Action bool
	// ID is the action id or the surface id.
	ID string
	// Token is true when the call was authorized by a verified workspace
	// token (not a bootstrap call, not local mode): only such a call needs
	// the agent's workspace binding (bootstrap calls create it).
	Token bool
	// AgentWorkspaceRef is the token's agent_workspace_ref ("" when absent).
	AgentWorkspaceRef string
}

// Allow returns the current contract of slug when it allows call, else a
// *refusal.Refusal (never another error type), checked in this order:
//   - agent_contract_unavailable or contract_version_unsupported: those of
//     Contract (no card read yet, a slug not configured, versions not
//     accepted);
//   - action_not_registered (RPCCode -32010) or surface_not_registered
//     (RPCCode -32011): the contract does not declare the call's action or
//     surface (NotRegistered); Message is the SDK's text, Data
//     {"agent_slug", "action"} or {"agent_slug", "surface"};
//   - workspace_binding_missing: a token call to an agent whose contract
//     requires a workspace binding, without agent_workspace_ref.
func (s *Source) Allow(slug string, call Call) (*Contract, error) {
	c, err := s.Contract(slug)
	if err != nil {
		if re := refusal.As(err); re != nil {
			return nil, re
		}
		return nil, refuse(CodeAgentContractUnavailable, "The agent contract is unavailable")
	}
	if err := c.Allow(slug, call); err != nil {
		return nil, err
	}
	return c, nil
}

// Allow is the contract's part of Source.Allow for a call to agent slug:
// the declared action or surface, then the workspace binding. It returns
// nil or a *refusal.Refusal.
func (c *Contract) Allow(slug string, call Call) error {
	switch {
	case call.Action && !c.AllowsAction(call.ID):
		return NotRegistered(slug, true, call.ID, "")
	case !call.Action && !c.AllowsSurface(call.ID):
		return NotRegistered(slug, false, call.ID, "")
	case call.Token && c.WorkspaceBindingRequired() && call.AgentWorkspaceRef == "":
		return refuse(CodeWorkspaceBindingMissing,
			"Workspace is authorized in Studio but has no agent-side workspace binding.")
	}
	return nil
}
