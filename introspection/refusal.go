// The refusals of introspection: a covered call whose token Studio no
// longer confirms (docs/beyond-sdk.md, "Revocation before expiry
// (introspection)").

package introspection

import (
	"net/http"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// Refusal codes of introspection, answered as -32030 on /a2a and 403
// {"detail"} on DataResource routes, as the other token refusals.
const (
	CodeRevoked     = "workspace_authorization_revoked"
	CodeUnavailable = "workspace_authorization_introspection_unavailable"
)

// Refusal is the refusal of a covered call given Check's answer (v, err):
// nil when the token is active and agrees with the verified one; CodeRevoked
// when it is inactive or disagrees; CodeUnavailable (fail closed) when no
// usable answer came (err).
func (v Verdict) Refusal(err error) *refusal.Refusal {
	switch {
	case err != nil:
		return refuse(CodeUnavailable, "Workspace authorization could not be confirmed")
	case v.Result != Active:
		return refuse(CodeRevoked, "Workspace authorization has been revoked")
	}
	return nil
}

func refuse(code, msg string) *refusal.Refusal {
	return &refusal.Refusal{Status: http.StatusForbidden, RPCCode: jsonrpc.CodeWorkspaceAuthorization,
		Code: code, Message: msg}
}
