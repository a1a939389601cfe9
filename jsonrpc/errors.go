package jsonrpc

import (
	"encoding/json"

	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// JSON-RPC error codes used by the Supervaizer v2 controller
// (docs/sdk-wire.md, "JSON-RPC messages"; -32700 and
// -32600 are the sidecar's own). The idempotency code, -32031, is the
// idempotency package's (idempotency.JSONRPCCode).
const (
	CodeParseError             = -32700 // body is not JSON or not UTF-8
	CodeInvalidRequest         = -32600 // not a single JSON-RPC 2.0 request object
	CodeMethodNotFound         = -32601 // method other than action.invoke / surface.load
	CodeInvalidParams          = -32602 // request model fails validation
	CodeInternalError          = -32603 // handler failed (no detail leaks)
	CodeActionNotRegistered    = -32010 // action not declared by the agent
	CodeSurfaceNotRegistered   = -32011 // surface not declared by the agent
	CodeWorkspaceAuthorization = -32030 // workspace authorization failed; data.code says why
	CodeRateLimited            = -32029 // a limits rule refused the call (the sidecar's own; retryable)
)

// HTTP-level answers (refusal.Refusal.HTTPLevel, status 400), for requests the SDK's stack
// refuses before its JSON-RPC controller runs (docs/sdk-wire.md, "Requests
// the SDK refuses over HTTP").
const (
	// MsgBodyNotParsed is FastAPI's text when Python's json cannot read the
	// body for a reason other than its syntax: here an integer of more than
	// MaxIntegerDigits digits.
	MsgBodyNotParsed = "There was an error parsing the body"
	// MsgBadID answers an id the SDK's model cannot echo (a fractional
	// number, an object, a list): the SDK fails building its answer, HTTP 400.
	MsgBadID = "Invalid JSON-RPC request id"
)

// MaxIntegerDigits is the longest integer literal Python's json reads (its
// int conversion limit): a body holding a longer one, anywhere, is refused.
const MaxIntegerDigits = 4300

// NullID is the JSON-RPC id used when the request's id cannot be trusted or
// read (parse errors, invalid requests).
var NullID = json.RawMessage("null")

type errorObject struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

type errorResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   errorObject     `json:"error"`
}

// ErrorResponse returns the body of the JSON-RPC error answer of r:
// {"jsonrpc":"2.0","id":<id>,"error":{"code":..,"message":..,"data":..}}
// (r.RPCCode, r.Message, r.JSONRPCData()). id must be a raw JSON value
// (string, number or null); an empty id is written as null. The body is
// sent with r.RPCStatus (HTTP 200 when 0, as the SDK does).
func ErrorResponse(id json.RawMessage, r *refusal.Refusal) []byte {
	if len(id) == 0 {
		id = NullID
	}
	b, err := json.Marshal(errorResponse{
		JSONRPC: "2.0",
		ID:      id,
		Error:   errorObject{Code: r.RPCCode, Message: r.Message, Data: r.JSONRPCData()},
	})
	if err != nil {
		// Data could not be marshalled: answer without it rather than fail.
		b, _ = json.Marshal(errorResponse{JSONRPC: "2.0", ID: id,
			Error: errorObject{Code: r.RPCCode, Message: r.Message}})
	}
	return b
}

// ResultResponse returns {"jsonrpc":"2.0","id":<id>,"result":<result>} where
// result is raw JSON. id as in ErrorResponse.
func ResultResponse(id json.RawMessage, result json.RawMessage) []byte {
	if len(id) == 0 {
		id = NullID
	}
	b := make([]byte, 0, len(result)+len(id)+40)
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	b = append(b, '}')
	return b
}
