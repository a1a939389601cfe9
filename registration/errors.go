package registration

import "errors"

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

// Error is the typed error of this package. Messages never contain
// secrets or upstream addresses.
type Error struct {
	// Code is one of the Code* constants (allow.go's included).
	Code string
	// Message is a human-readable sentence naming what was seen and what
	// was expected; for Allow's refusals, the SDK's own text.
	Message string
	// RPCCode is the JSON-RPC error code of the refusal on /a2a; 0 leaves
	// it to the caller (the gate's workspace authorization code, -32030).
	// Set by Allow for an undeclared action (-32010) or surface (-32011).
	RPCCode int
	// Data is the JSON-RPC error data of the refusal; nil leaves it to the
	// caller ({"code": Code}). Set by Allow with RPCCode.
	Data map[string]any
}

// Error returns "<code>: <message>".
func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Is reports whether target is an *Error with the same Code, so that
// errors.Is(err, &Error{Code: CodeAgentSlugMismatch}) works through wrapping.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && t.Code == e.Code
}

// ErrNoV2Extension is returned (wrapped) by FromAgentCard when the Agent Card
// carries no supervaizer.v2 extension at any documented placement.
var ErrNoV2Extension = errors.New("agent card has no supervaizer.v2 extension")

// codeOf returns the Code of the first *Error in err's chain, or "".
func codeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
