package grants

// Supervaizer v2 controller methods, which are also the method scopes a
// token must carry (docs/sdk-wire.md, "Required scopes").
const (
	ScopeActionInvoke = "supervaizer/action.invoke"
	ScopeSurfaceLoad  = "supervaizer/surface.load"
)

// The bootstrap set, exactly (docs/sdk-wire.md, "Bootstrap set";
// first stated in the workspace-agent-grants seed, "Workspace Binding
// Registration"): these run without a
// workspace token. Custom ids named in a registration are not exempt.
var (
	bootstrapActions  = map[string]bool{"workspace_binding.options": true, "workspace_binding.create": true}
	bootstrapSurfaces = map[string]bool{"workspace_binding.create": true}
)

// IsBootstrapAction reports whether action runs without a workspace token.
func IsBootstrapAction(action string) bool { return bootstrapActions[action] }

// IsBootstrapSurface reports whether surface loads without a workspace token.
func IsBootstrapSurface(surface string) bool { return bootstrapSurfaces[surface] }

// ActionScopes are the scopes an action call needs: the method and the action id.
func ActionScopes(action string) []string { return []string{ScopeActionInvoke, action} }

// SurfaceScopes are the scopes a surface load needs: the method and the surface id.
func SurfaceScopes(surface string) []string { return []string{ScopeSurfaceLoad, surface} }

// ResourceOperations are the DataResource operations (docs/sdk-wire.md,
// "DataResource routes").
var ResourceOperations = []string{"list", "get", "create", "update", "delete", "import"}

// ResourceScopes are the scopes a DataResource call needs: "resource.<resource>.<operation>".
func ResourceScopes(resource, operation string) []string {
	return []string{"resource." + resource + "." + operation}
}

// Target is what one call asks for, from the request (not the token).
type Target struct {
	AgentSlug     string   // the agent the call is for
	WorkspaceID   string   // the request's workspace.id
	WorkspaceSlug string   // the request's workspace.slug ("" if absent)
	Scopes        []string // every scope the call needs
}

// Agents maps each agent slug this sidecar serves to its Studio agent id
// ("" when the slug is served but has no Studio id yet).
type Agents map[string]string

// Authorize runs the per-call checks of verified claims against t, in the
// SDK's order (docs/sdk-wire.md, "Workspace token checks"; texts from
// errors.go), and returns nil or a *refusal.Refusal with CodeUnknownAgent (t's agent
// is not served here), CodeWrongAgent (token agent_slug differs),
// CodeAgentNotRegistered (served, no Studio id), CodeWrongAgent (token
// agent_id differs), CodeWrongWorkspace (workspace_id differs or is empty,
// or both slugs present and different) or CodeMissingScope (the scopes of
// t.Scopes not granted, all named).
func Authorize(c *Claims, agents Agents, t Target) error {
	agentID, served := agents[t.AgentSlug]
	switch {
	case !served:
		return failText(CodeUnknownAgent, PrefixUnknownAgent+t.AgentSlug, "agent not served here")
	case c.AgentSlug != t.AgentSlug:
		return fail(CodeWrongAgent, "token agent_slug "+quoteID(c.AgentSlug))
	case agentID == "":
		return fail(CodeAgentNotRegistered, "agent "+quoteID(t.AgentSlug)+" has no Studio agent id configured")
	case c.AgentID != agentID:
		return failText(CodeWrongAgent, MsgWrongAgentID, "token agent_id "+quoteID(c.AgentID))
	case c.WorkspaceID == "" || c.WorkspaceID != t.WorkspaceID:
		// An empty workspace_id is refused even for a request whose
		// workspace.id is empty too (the SDK would let that pair through).
		return fail(CodeWrongWorkspace, "token workspace_id "+quoteID(c.WorkspaceID))
	case c.WorkspaceSlug != "" && t.WorkspaceSlug != "" && c.WorkspaceSlug != t.WorkspaceSlug:
		return failText(CodeWrongWorkspace, MsgWrongWorkspaceSlug, "token workspace_slug "+quoteID(c.WorkspaceSlug))
	}
	var missing []string
	for _, s := range t.Scopes {
		if !c.HasScope(s) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		return missingScopes(missing)
	}
	return nil
}

// quoteID quotes an identifier for a diagnostic, bounded to 128 bytes.
func quoteID(s string) string {
	if len(s) > 128 {
		s = s[:128] + "..."
	}
	return "'" + s + "'"
}
