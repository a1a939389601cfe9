package grants

import (
	"net/http"
	"strings"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// data.code values of workspace authorization failures, one per row of the
// table "Workspace authorization messages" (docs/sdk-wire.md), in the SDK's
// order of checks. The JSON-RPC code for all of them is -32030.
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

// Settled reports whether err is a token refusal that a second
// verification of the same token a moment later would give again, whatever
// the keys loaded and the clock then: the token's form, its signature and
// its claims other than not-before (an expired token stays expired). A
// refusal that a JWKS refresh or the passing of time may undo (unknown kid,
// keys unavailable or invalid, not yet valid) is not settled.
func Settled(err error) bool {
	r := refusal.As(err)
	if r == nil {
		return false
	}
	switch r.Code {
	case CodeMissing, CodeMalformed, CodeUnsupportedAlg, CodeMissingKID, CodeBadSignature,
		CodeInvalidClaims, CodeWrongIssuer, CodeWrongAudience, CodeExpired, CodeWrongServer:
		return true
	}
	return false
}

// The SDK's message texts, verbatim (docs/sdk-wire.md, "Workspace
// authorization messages"). This is the one place they are written: the
// -32030 error.message on /a2a and the 403 "detail" on DataResource routes
// both come from here. messages holds the text of each data.code; the Msg*
// constants are the SDK's other texts for the same code, for the checks
// that have one; the Prefix* constants start the texts that end with a
// value of the request (the slug, the missing scopes, the failed claims).
var messages = map[string]string{
	CodeNotConfigured:      "Workspace authorization is required but is not configured for this Supervaizer server",
	CodeMissing:            "Missing X-Supervaize-Workspace-Authorization header",
	CodeMalformed:          "Workspace authorization token is malformed",
	CodeUnsupportedAlg:     "Workspace authorization token must be signed with EdDSA",
	CodeInvalidKey:         "Workspace authorization EdDSA public key could not be loaded",
	CodeMissingKID:         "Workspace authorization token header must include kid for JWKS",
	CodeJWKSUnavailable:    "Workspace authorization JWKS could not be loaded",
	CodeInvalidJWKS:        "Workspace authorization JWKS payload has no keys list",
	CodeUnknownKID:         "Workspace authorization JWKS has no key matching token kid",
	CodeInvalidJWK:         "Workspace authorization EdDSA JWK must be OKP/Ed25519",
	CodeBadSignature:       "Workspace authorization token signature is invalid",
	CodeInvalidClaims:      PrefixInvalidClaims + "[]",
	CodeWrongIssuer:        "Workspace authorization token issuer does not match this server configuration",
	CodeWrongAudience:      "Workspace authorization token audience does not match this server",
	CodeExpired:            "Workspace authorization token is expired",
	CodeNotYetValid:        "Workspace authorization token was issued in the future",
	CodeWrongServer:        "Workspace authorization token server_id does not match this server",
	CodeUnknownAgent:       PrefixUnknownAgent,
	CodeAgentNotRegistered: "Workspace authorization requires the Studio agent id from registration, but this agent has not been linked to Studio",
	CodeWrongAgent:         "Workspace authorization token agent_slug does not match the request",
	CodeWrongWorkspace:     "Workspace authorization token workspace_id does not match the request",
	CodeMissingScope:       PrefixMissingScope,
}

// The SDK's second texts of some codes, and the fixed starts of the texts
// that end with a value.
const (
	MsgNotCompactJWT      = "Workspace authorization token must be a compact JWT"                     // malformed: not three parts
	MsgNotObjects         = "Workspace authorization token header and claims must be JSON objects"    // malformed: a part is JSON but not an object
	MsgKeyNotEd25519      = "Workspace authorization EdDSA public key must be an Ed25519 public key"  // invalid_key
	MsgJWKSKeyNotObject   = "Workspace authorization JWKS keys must be JSON objects"                  // invalid_jwks
	MsgJWKNoX             = "Workspace authorization Ed25519 JWK must include x"                      // invalid_jwk
	MsgJWKBadX            = "Workspace authorization Ed25519 JWK x is invalid"                        // invalid_jwk
	MsgWrongAgentID       = "Workspace authorization token agent_id does not match the request"       // wrong_agent
	MsgWrongWorkspaceSlug = "Workspace authorization token workspace_slug does not match the request" // wrong_workspace
	PrefixInvalidClaims   = "Workspace authorization token claims are invalid: "                      // + the failed claims (claimsError)
	PrefixUnknownAgent    = "Unknown agent_slug for workspace authorization: "                        // + the request's agent_slug
	PrefixMissingScope    = "Workspace authorization token is missing scope(s): "                     // + the missing scopes, ", " between
)

// Message returns the SDK's message text for code (its first text when it
// has several; "" for a code that is not a workspace authorization code).
func Message(code string) string { return messages[code] }

// A workspace authorization failure is a *refusal.Refusal: Code is one of
// the Code* constants (the SDK's data.code), RPCCode -32030 on /a2a,
// Status 403 on REST routes; Message is the SDK's text for this failure,
// verbatim, the only text that goes on the wire; Detail is the sidecar's
// own diagnostic (which part of the check failed, in our words), for the
// audit line only; Token, for a token whose signature verified but that
// was refused on its claims (issuer, audience, times, server), names it
// for the audit line (iss, aud, grant_id, jti), never to authorize.
// Neither ever contains the token.

// fail is the failure code with the SDK's text of that code and our
// diagnostic detail (Refuse).
func fail(code, detail string) *refusal.Refusal { return Refuse(code, detail) }

// Refuse is the refusal of code with the SDK's text of that code and our
// diagnostic detail (Refusal). A code the SDK does not have (a
// sidecar-only check) has no SDK text: detail is its message too.
func Refuse(code, detail string) *refusal.Refusal {
	msg, ok := messages[code]
	if !ok {
		msg = detail
	}
	return Refusal(code, msg, detail)
}

// failText is the failure code with msg, one of the SDK's other texts for
// it (a Msg* constant, or a Prefix* constant and its value).
func failText(code, msg, detail string) *refusal.Refusal {
	return Refusal(code, msg, detail)
}

// Refusal is a workspace authorization refusal of code with the text msg
// and the audit detail: -32030 with data {"code": code} on /a2a, 403
// {"detail": msg} on REST routes. The gate's own token refusals
// (introspection, references) are built with it too.
func Refusal(code, msg, detail string) *refusal.Refusal {
	return &refusal.Refusal{Status: http.StatusForbidden, RPCCode: jsonrpc.CodeWorkspaceAuthorization,
		Code: code, Message: msg, Detail: detail}
}

// refusedToken names a signature-verified token refused on its claims, for
// the audit line.
func refusedToken(c *Claims) *refusal.Token {
	return &refusal.Token{Issuer: c.Issuer, Audience: c.Audience, GrantID: c.GrantID, JTI: c.JTI}
}

// missingScopes is the SDK's missing_scope failure: every scope of want not
// granted, in want's order, named in the text.
func missingScopes(missing []string) *refusal.Refusal {
	return failText(CodeMissingScope, PrefixMissingScope+strings.Join(missing, ", "), "")
}
