// Answers the gate writes itself: the one writer of refusals
// (refuseCall, refuseREST: a JSON-RPC error on /a2a, {"detail": ...} on
// REST routes), FastAPI-style {"detail": ...} bodies, and the detail text
// of each refusal status; what a call gets when the agent cannot be
// reached (agentUnavailable).

package gate

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/supervaize/supervaizer-sidecar/internal/redact"
	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/refusal"
	"go.uber.org/zap"
)

// refuseCall answers an /a2a call with rf: the JSON-RPC error of rf with
// id (jsonrpc.NullID when the body's id was not read), sent with HTTP
// rf.RPCStatus (200 when 0, as the SDK answers its errors); an HTTP-level
// refusal (rf.HTTPLevel) as refuseREST. a records the refusal (nil: the
// audit line keeps the call's decision, for a failure after the call was
// allowed).
func refuseCall(w http.ResponseWriter, a *audit, id []byte, rf *refusal.Refusal) error {
	if rf.HTTPLevel {
		return refuseREST(w, a, rf)
	}
	a.refused(rf)
	retryAfter(w, rf)
	status := rf.RPCStatus
	if status == 0 {
		status = http.StatusOK
	}
	return writeBody(w, status, jsonrpc.ErrorResponse(id, rf))
}

// refuseREST answers a request of a REST route (DataResource, events)
// with rf: HTTP rf.Status with {"detail": rf.Message}. a as in refuseCall.
func refuseREST(w http.ResponseWriter, a *audit, rf *refusal.Refusal) error {
	a.refused(rf)
	retryAfter(w, rf)
	status := rf.Status
	if status == 0 { // every refusal names its status; one that does not is the gate's failure
		status = http.StatusInternalServerError
	}
	if raw, ok := rf.Data.(json.RawMessage); ok { // a detail that is more than a text
		return writeBody(w, status, slices.Concat([]byte(`{"detail":`), raw, []byte(`}`)))
	}
	return writeDetail(w, status, rf.Message)
}

// retryAfter sets the Retry-After header of rf, when it has one.
func retryAfter(w http.ResponseWriter, rf *refusal.Refusal) {
	if rf.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(rf.RetryAfter))
	}
}

// writeDetail writes a FastAPI-style {"detail": "..."} answer.
func writeDetail(w http.ResponseWriter, status int, detail string) error {
	return writeJSON(w, status, map[string]string{"detail": detail})
}

// writeBody writes a JSON body with its status and length.
func writeBody(w http.ResponseWriter, status int, body []byte) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", itoa(len(body)))
	w.WriteHeader(status)
	_, err := w.Write(body)
	return err
}

func statusDetail(status int) string {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return "Request body too large"
	case http.StatusRequestTimeout:
		return "Request body not received in time"
	case http.StatusUnsupportedMediaType:
		return "Content-Encoding is not supported"
	case http.StatusMethodNotAllowed:
		return "Method Not Allowed"
	}
	return http.StatusText(status)
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, _ := jsonMarshal(v)
	return writeBody(w, status, b)
}

// refused records the refusal rf answered: outcome deny, its audit code,
// its detail and, for a token refused on its claims, the token's
// identifying claims. A nil a records nothing (refuseCall).
func (a *audit) refused(rf *refusal.Refusal) {
	if a == nil {
		return
	}
	a.deny(rf.AuditCode())
	if rf.Detail != "" {
		a.detail = rf.Detail
	}
	if t := rf.Token; t != nil {
		a.grantID, a.jti, a.iss = t.GrantID, t.JTI, t.Issuer
		a.aud = strings.Join(t.Audience, " ")
	}
}

// agentUnavailable answers a failed call to the agent on /a2a with HTTP 502
// and a JSON-RPC error body (not an HTML page), keeping the request id.
func (g *Gate) agentUnavailable(w http.ResponseWriter, id []byte, err error) error {
	g.log.Warn("agent call failed", zap.String("error", redact.URLsIn(err.Error())))
	status := http.StatusBadGateway
	if g.proxyErrors != nil && g.proxyErrors.Status(err) == http.StatusGatewayTimeout {
		status = http.StatusGatewayTimeout
	}
	return refuseCall(w, nil, id, jsonrpc.AgentUnavailable(status)) // the call was allowed: its audit line stays
}
