package registration

import (
	"errors"
	"net/http"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// Error codes this package detects. They are the SDK-style data.code strings
// the HTTP layer puts in its answer; the HTTP layer chooses status and
// envelope.
const (
	// CodeContractVersionUnsupported: the registration pins a
	// supervaizer_contract_version, a2a_version or a2ui_version this sidecar
	// does not accept (seed "Versioning": reject incompatible versions
	// explicitly instead of guessing).
	CodeContractVersionUnsupported = "contract_version_unsupported"
	// CodeAgentContractUnavailable: no agent card has been read yet for the
	// agent slug, or the slug is not configured.
	CodeAgentContractUnavailable = "agent_contract_unavailable"
	// CodeAgentSlugMismatch: the card served for a configured slug declares
	// another agent.slug.
	CodeAgentSlugMismatch = "agent_slug_mismatch"
)

// The refusals of this package are *refusal.Refusal values (refuse,
// notRegistered): Code is one of the Code* constants (allow.go's
// included), Message a sentence naming what was seen and what was
// expected (for Allow's refusals, the SDK's own text). Messages never
// contain secrets or upstream addresses.

// refuse is the refusal of code with msg: on /a2a the workspace
// authorization error (-32030, data {"code": code}), as the other
// refusals of a call the contract does not allow; 403 on a REST route.
func refuse(code, msg string) *refusal.Refusal {
	return &refusal.Refusal{Status: http.StatusForbidden, RPCCode: jsonrpc.CodeWorkspaceAuthorization,
		Code: code, Message: msg}
}

// NotRegistered is the SDK's answer to a call whose action (isAction) or
// surface id no handler of agent slug declares: -32010
// "Action handler not registered: <id>" with data {"agent_slug", "action"},
// or -32011 "Surface handler not registered: <id>" with data
// {"agent_slug", "surface"} (docs/sdk-wire.md, "Bootstrap set"). detail is
// the audit line's.
func NotRegistered(slug string, isAction bool, id, detail string) *refusal.Refusal {
	if isAction {
		return &refusal.Refusal{Status: http.StatusNotFound, RPCCode: jsonrpc.CodeActionNotRegistered,
			Code: CodeActionNotRegistered, Message: jsonrpc.PrefixActionNotRegistered + id,
			Data: map[string]any{"agent_slug": slug, "action": id}, Detail: detail}
	}
	return &refusal.Refusal{Status: http.StatusNotFound, RPCCode: jsonrpc.CodeSurfaceNotRegistered,
		Code: CodeSurfaceNotRegistered, Message: jsonrpc.PrefixSurfaceNotRegistered + id,
		Data: map[string]any{"agent_slug": slug, "surface": id}, Detail: detail}
}

// ErrNoV2Extension is returned (wrapped) by FromAgentCard when the Agent Card
// carries no supervaizer.v2 extension at any documented placement.
var ErrNoV2Extension = errors.New("agent card has no supervaizer.v2 extension")

// codeOf returns the Code of the first refusal in err's chain, or "".
func codeOf(err error) string {
	if r := refusal.As(err); r != nil {
		return r.Code
	}
	return ""
}
