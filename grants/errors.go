package grants

// data.code values of workspace authorization failures, one per row of the
// reference table "Workspace token checks, in the SDK's order"
// (sdk-wire-behavior.md). The JSON-RPC code for all of them is -32030.
const (
	CodeNotConfigured      = "workspace_authorization_not_configured"
	CodeMissing            = "workspace_authorization_missing"
	CodeMalformed          = "workspace_authorization_malformed"
	CodeUnsupportedAlg     = "workspace_authorization_unsupported_alg"
	CodeInvalidKey         = "workspace_authorization_invalid_key"
	CodeMissingKID         = "workspace_authorization_missing_kid"
	CodeJWKSUnavailable    = "workspace_authorization_jwks_unavailable"
	CodeInvalidJWKS        = "workspace_authorization_invalid_jwks"
	CodeUnknownKID         = "workspace_authorization_unknown_kid"
	CodeInvalidJWK         = "workspace_authorization_invalid_jwk"
	CodeBadSignature       = "workspace_authorization_bad_signature"
	CodeInvalidClaims      = "workspace_authorization_invalid_claims"
	CodeWrongIssuer        = "workspace_authorization_wrong_issuer"
	CodeWrongAudience      = "workspace_authorization_wrong_audience"
	CodeExpired            = "workspace_authorization_expired"
	CodeNotYetValid        = "workspace_authorization_not_yet_valid"
	CodeWrongServer        = "workspace_authorization_wrong_server"
	CodeUnknownAgent       = "workspace_authorization_unknown_agent"
	CodeAgentNotRegistered = "workspace_authorization_agent_not_registered"
	CodeWrongAgent         = "workspace_authorization_wrong_agent"
	CodeWrongWorkspace     = "workspace_authorization_wrong_workspace"
	CodeMissingScope       = "workspace_authorization_missing_scope"
)

// Error is a workspace authorization failure. Code is one of the Code*
// constants (the SDK's data.code); Message is safe to show to the caller and
// never contains the token.
type Error struct {
	Code    string
	Message string
}

// Error implements error as "<code>: <message>".
func (e *Error) Error() string { return e.Code + ": " + e.Message }

func fail(code, msg string) *Error { return &Error{Code: code, Message: msg} }
