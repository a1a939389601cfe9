// The verified context's fields: one table (claimFields) from which every
// form that carries them is derived, in its order: the ten
// X-Supervaize-Verified-* headers (headers.go, injectVerified), the compact
// header's members (verifiedcontext.go, verifiedContext), the identity
// placeholders (placeholders.go), and the names of the audit line's fields
// (audit.go) and the span's attributes (tracing.go) that carry a claim
// (docs/verified-context.md).

package gate

import "github.com/supervaize/supervaizer-sidecar/grants"

// headerVerifiedMode carries the decision's mode (token, bootstrap, local),
// the first of the verified headers; its compact member is "mode".
const (
	headerVerifiedMode = "X-Supervaize-Verified-Mode"
	memberMode         = "mode"
)

// claimField is one claim of a verified token as the gate passes it on.
type claimField struct {
	// name is the claim's name in the token, and the name of every form
	// but the header: the compact member, the placeholder
	// supervaizer.<name>, the audit field, the span attribute
	// supervaizer.<name>.
	name string
	// header is its X-Supervaize-Verified-* header (canonical form).
	header string
	// value is its text (a header value; scopes space-separated).
	value func(*grants.Claims) string
	// list, when set, is its value as a JSON array in the compact form.
	list func(*grants.Claims) []string
	// identity: an identity placeholder, filled only while the decision
	// allows a verified token (placeholders.go).
	identity bool
}

// Indexes into claimFields, for the forms that name one claim.
const (
	claimGrantID = iota
	claimWorkspaceID
	claimWorkspaceSlug
	claimAgentID
	claimAgentSlug
	claimServerID
	claimScopes
	claimAgentWorkspaceRef
	claimJTI
)

// claimFields are the claims of the verified context, in the order of
// every form.
var claimFields = [...]claimField{
	claimGrantID: {name: "grant_id", header: "X-Supervaize-Verified-Grant-Id", identity: true,
		value: func(c *grants.Claims) string { return c.GrantID }},
	claimWorkspaceID: {name: "workspace_id", header: "X-Supervaize-Verified-Workspace-Id", identity: true,
		value: func(c *grants.Claims) string { return c.WorkspaceID }},
	claimWorkspaceSlug: {name: "workspace_slug", header: "X-Supervaize-Verified-Workspace-Slug", identity: true,
		value: func(c *grants.Claims) string { return c.WorkspaceSlug }},
	claimAgentID: {name: "agent_id", header: "X-Supervaize-Verified-Agent-Id", identity: true,
		value: func(c *grants.Claims) string { return c.AgentID }},
	claimAgentSlug: {name: "agent_slug", header: "X-Supervaize-Verified-Agent-Slug", identity: true,
		value: func(c *grants.Claims) string { return c.AgentSlug }},
	claimServerID: {name: "server_id", header: "X-Supervaize-Verified-Server-Id",
		value: func(c *grants.Claims) string { return c.ServerID }},
	claimScopes: {name: "scopes", header: "X-Supervaize-Verified-Scopes",
		value: (*grants.Claims).ScopeString, list: func(c *grants.Claims) []string { return c.Scopes }},
	claimAgentWorkspaceRef: {name: "agent_workspace_ref", header: "X-Supervaize-Verified-Agent-Workspace-Ref",
		value: func(c *grants.Claims) string { return c.AgentWorkspaceRef }},
	claimJTI: {name: "jti", header: "X-Supervaize-Verified-Token-Id", identity: true,
		value: func(c *grants.Claims) string { return c.JTI }},
}

// identityClaim is the identity claim whose name is name, or nil.
func identityClaim(name string) *claimField {
	for i := range claimFields {
		if f := &claimFields[i]; f.identity && f.name == name {
			return f
		}
	}
	return nil
}
