// Package refusal is the sidecar's one refusal type: every "no" the
// domain packages (grants, registration, idempotency, jsonrpc, limits,
// introspection) and the gate give is a *Refusal, and the gate's one writer
// renders it (docs/architecture.md, "One refusal type"). It imports only
// the standard library.
//
// A Refusal holds the whole answer and the audit facts: the HTTP status of
// the {"detail": Message} answer on a REST route, the JSON-RPC error (code,
// message, data) and the HTTP status it goes with on /a2a, an optional
// Retry-After, and what the audit line says (its code, detail and, for a
// verified token refused on its claims, the token's identifying claims).
// Message is the only text on the wire: where the SDK has the same
// refusal, it is the SDK's text byte for byte (docs/sdk-wire.md).
package refusal

import (
	"errors"
	"strconv"
)

// Refusal is one refusal. Its zero value is not a meaningful refusal:
// every producer sets at least Message and a status or an RPC code. A
// returned refusal may be shared (a contract source's standing refusal):
// its receivers read it, never change it.
type Refusal struct {
	// Status is the HTTP status of the answer {"detail": Message} on a
	// REST route (DataResource routes, /a2a/events), and on /a2a too when
	// HTTPLevel is set.
	Status int
	// HTTPLevel: on /a2a too the answer is Status with {"detail": Message},
	// not a JSON-RPC error: a request the SDK's stack refuses before its
	// JSON-RPC controller runs (docs/sdk-wire.md, "Requests the SDK
	// refuses over HTTP"). RPCCode then only names it for the audit line.
	HTTPLevel bool
	// RPCCode is the JSON-RPC error code of the answer on /a2a.
	RPCCode int
	// RPCStatus is the HTTP status of the JSON-RPC answer on /a2a; 0 means
	// 200, as the SDK answers its JSON-RPC errors. The sidecar's own
	// retryable failures (server busy, a store down, the agent
	// unreachable) set 503, 502 or 504.
	RPCStatus int
	// Code is the machine-readable reason, the JSON-RPC data.code; "" for
	// the JSON-RPC errors whose data has no code (the SDK's -32700,
	// -32600, -32601, -32602).
	Code string
	// Data is the JSON-RPC error data when it is more than {"code": Code}
	// (marshalled with encoding/json; it holds "code" itself when the
	// answer has one). nil: {"code": Code}, or no data when Code is "".
	Data any
	// Message is the answer's text: the JSON-RPC error.message and the
	// REST "detail". Never a secret or an upstream address.
	Message string
	// RetryAfter, when not 0, is the Retry-After header of the answer, in
	// seconds.
	RetryAfter int

	// Reason is the audit line's code and the decisions_total label when
	// it is not Code (AuditCode). Never on the wire.
	Reason string
	// Detail is the sidecar's own diagnostic, for the audit line only
	// (which part of a check failed, in our words). Never on the wire,
	// never a token.
	Detail string
	// Token names a token whose signature verified but that was refused
	// on its claims (issuer, audience, times, server), for the audit line
	// only; never to authorize. nil for every other refusal.
	Token *Token
	// Cause is the underlying error (a store's, a context's), for logs and
	// errors.Is/As through Unwrap. Never on the wire.
	Cause error
}

// Token is what the audit line names of a token refused on its claims.
// None of it is a secret.
type Token struct {
	Issuer   string
	Audience []string
	GrantID  string
	JTI      string
}

// Error implements error as "<code>: <message>", " (<detail>)" when the
// detail says more, ": <cause>" when there is one; a refusal without a
// data.code is named by its JSON-RPC code ("jsonrpc <code>"), else by its
// Reason.
func (r *Refusal) Error() string {
	s := r.Code
	switch {
	case s != "":
	case r.RPCCode != 0:
		s = "jsonrpc " + strconv.Itoa(r.RPCCode)
	default:
		s = r.Reason
	}
	if r.Message != "" {
		if s != "" {
			s += ": "
		}
		s += r.Message
	}
	if r.Detail != "" && r.Detail != r.Message {
		s += " (" + r.Detail + ")"
	}
	if r.Cause != nil {
		s += ": " + r.Cause.Error()
	}
	return s
}

// Unwrap returns the cause, or nil.
func (r *Refusal) Unwrap() error { return r.Cause }

// Is reports whether target is a *Refusal with the same non-empty Code, so
// that errors.Is(err, &Refusal{Code: c}) finds a refusal of code c through
// wrapping.
func (r *Refusal) Is(target error) bool {
	t, ok := target.(*Refusal)
	return ok && t != nil && t.Code != "" && t.Code == r.Code
}

// AuditCode is the code of the audit line and the decisions_total label:
// Reason when set, else Code.
func (r *Refusal) AuditCode() string {
	if r.Reason != "" {
		return r.Reason
	}
	return r.Code
}

// JSONRPCData is the JSON-RPC error's data member: Data, else
// {"code": Code}, else nil (no data member).
func (r *Refusal) JSONRPCData() any {
	switch {
	case r.Data != nil:
		return r.Data
	case r.Code != "":
		return map[string]string{"code": r.Code}
	}
	return nil
}

// As returns the first *Refusal in err's chain, or nil. No error and a
// refusal itself are answered without errors.As (whose target escapes: an
// allocation on every call).
func As(err error) *Refusal {
	switch e := err.(type) {
	case nil:
		return nil
	case *Refusal:
		return e
	}
	var r *Refusal
	if errors.As(err, &r) {
		return r
	}
	return nil
}
