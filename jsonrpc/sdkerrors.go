package jsonrpc

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode"

	"github.com/tidwall/gjson"

	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// The SDK controller's JSON-RPC message texts, verbatim (docs/sdk-wire.md,
// "JSON-RPC messages"). This is the one place they are written; the
// workspace authorization texts (-32030) are in grants/errors.go.
const (
	MsgInvalidJSONRPCRequest   = "Invalid JSON-RPC request"               // -32602: the envelope fails the SDK's JsonRpcRequest model
	MsgInvalidActionRequest    = "Invalid Supervaizer v2 action request"  // -32602: the action request fails V2ActionRequest
	MsgInvalidSurfaceRequest   = "Invalid Supervaizer v2 surface request" // -32602: the surface request fails V2SurfaceRequest
	PrefixMethodNotFound       = "Method not found: "                     // -32601, + the method
	PrefixActionNotRegistered  = "Action handler not registered: "        // -32010, + the action id
	PrefixSurfaceNotRegistered = "Surface handler not registered: "       // -32011, + the surface id
)

// FieldError is one entry of the SDK's -32602 data.errors list, in the
// shape of a pydantic validation error: Type is pydantic's error type
// ("missing", "string_type", ...), Loc the location (member names and list
// indexes from the validated object; empty for the object itself), Msg
// pydantic's text. The SDK 1.8.0 server lists its errors without pydantic's
// context (docs/sdk-wire.md, "Validation error lists"). Its entries also
// carry "input" (the offending value: for a missing field the whole
// enclosing object) and "url" (which names the pydantic version); these do
// not (docs/sdk-differences.md, "Where the sidecar differs from the SDK, on purpose").
type FieldError struct {
	Type string `json:"type"`
	Loc  []any  `json:"loc"`
	Msg  string `json:"msg"`
}

// pydantic's texts (docs/sdk-wire.md, "Validation error lists").
const (
	pyMissing   = "Field required"
	pyString    = "Input should be a valid string"
	pyDict      = "Input should be a valid dictionary"
	pyModelType = "Input should be a valid dictionary or instance of "
)

// invalidParams is a -32602 error for body, in the SDK's shape: the message
// names the model that failed (MsgInvalidJSONRPCRequest when the envelope
// did, else the method's request model) and data is {"errors": [...]}, every
// problem of that model in its field order (modelErrors). detail is our own
// diagnostic, for the audit line.
func invalidParams(body []byte, detail string) *refusal.Refusal {
	msg, errs := ModelErrors(body)
	return &refusal.Refusal{RPCCode: CodeInvalidParams, Message: msg, Data: map[string]any{"errors": errs}, Detail: detail}
}

// ModelErrors returns what the SDK's pydantic models find wrong in body, a
// JSON object: first the envelope model (jsonrpc "2.0" when present, method
// a string, params an object when present; the id is judged apart, see
// Parse), then, for a known method, the request model of the action or
// surface request (params.action_request / params.surface_request when
// present, else params). msg is the SDK's message for the model that
// failed; errs is empty when both models accept body.
func ModelErrors(body []byte) (msg string, errs []FieldError) {
	root := gjson.ParseBytes(body)
	if v := root.Get("jsonrpc"); v.Exists() && (v.Type != gjson.String || v.Str != "2.0") {
		errs = append(errs, FieldError{Type: "literal_error", Loc: loc("jsonrpc"), Msg: "Input should be '2.0'"})
	}
	method := root.Get("method")
	errs = strField(errs, method, true, "method")
	params := root.Get("params")
	if params.Exists() && !params.IsObject() {
		errs = append(errs, FieldError{Type: "dict_type", Loc: loc("params"), Msg: pyDict})
	}
	if len(errs) > 0 {
		return MsgInvalidJSONRPCRequest, errs
	}
	switch method.Str {
	case MethodActionInvoke:
		return MsgInvalidActionRequest, requestErrors(params, "action_request", "V2ActionRequest", true)
	case MethodSurfaceLoad:
		return MsgInvalidSurfaceRequest, requestErrors(params, "surface_request", "V2SurfaceRequest", false)
	}
	return "", nil
}

// requestErrors validates the request object of params (params[wrapper]
// when that key exists, else params) as the SDK's V2ActionRequest
// (action) or V2SurfaceRequest, in the model's field order.
func requestErrors(params gjson.Result, wrapper, model string, action bool) []FieldError {
	if !params.Exists() {
		params = gjson.Parse("{}") // the model's default
	}
	req := params
	if w := params.Get(gjson.Escape(wrapper)); w.Exists() {
		req = w
	}
	if !req.IsObject() {
		return []FieldError{modelType(nil, model)}
	}
	var errs []FieldError
	get := func(name string) gjson.Result { return req.Get(gjson.Escape(name)) }
	errs = strField(errs, get("request_id"), true, "request_id")
	errs = subModel(errs, get("actor"), "actor", "V2ActorContext", true, func(o gjson.Result, errs []FieldError) []FieldError {
		return strField(errs, o.Get("user_id"), true, "actor", "user_id")
	})
	errs = subModel(errs, get("workspace"), "workspace", "V2WorkspaceContext", true, func(o gjson.Result, errs []FieldError) []FieldError {
		errs = strField(errs, o.Get("id"), true, "workspace", "id")
		return strField(errs, o.Get("slug"), false, "workspace", "slug")
	})
	for _, name := range []string{"mission_id", "agent_slug", "surface"} {
		errs = strField(errs, get(name), true, name)
	}
	if action {
		errs = strField(errs, get("action"), true, "action")
	}
	if in := get("input"); in.Exists() && !in.IsObject() {
		errs = append(errs, FieldError{Type: "dict_type", Loc: loc("input"), Msg: pyDict})
	}
	optional := []string{"draft_session_id", "job_id", "case_id", "step_id"}
	if action {
		optional = append([]string{"idempotency_key"}, optional...)
	}
	for _, name := range optional {
		errs = strField(errs, get(name), false, name)
	}
	mission := get("mission")
	errs = subModel(errs, mission, "mission", "V2MissionContext", false, func(o gjson.Result, errs []FieldError) []FieldError {
		errs = strField(errs, o.Get("id"), true, "mission", "id")
		if md := o.Get("metadata"); md.Exists() && md.Type != gjson.Null && !md.IsObject() {
			errs = append(errs, FieldError{Type: "dict_type", Loc: loc("mission", "metadata"), Msg: pyDict})
		}
		return errs
	})
	if wa := get("workspace_authorization"); wa.Exists() && wa.Type != gjson.Null {
		errs = append(errs, FieldError{Type: "workspace_authorization_supplied", Loc: loc("workspace_authorization"),
			Msg: "workspace_authorization is set by the controller and cannot be supplied"})
	}
	if len(errs) == 0 && mission.IsObject() && mission.Get("id").Str != get("mission_id").Str {
		// The model's own check, run once every field is valid.
		errs = append(errs, FieldError{Type: "value_error", Loc: loc(),
			Msg: "Value error, mission.id " + pyStrRepr(mission.Get("id").Str) + " does not match mission_id " + pyStrRepr(get("mission_id").Str)})
	}
	return errs
}

// strField adds the problem of v, the member at path, as a str (required)
// or str | None field.
func strField(errs []FieldError, v gjson.Result, required bool, path ...string) []FieldError {
	switch {
	case v.Type == gjson.String:
	case !v.Exists():
		if required {
			errs = append(errs, FieldError{Type: "missing", Loc: loc(path...), Msg: pyMissing})
		}
	case v.Type == gjson.Null && !required:
	default:
		errs = append(errs, FieldError{Type: "string_type", Loc: loc(path...), Msg: pyString})
	}
	return errs
}

// subModel adds the problems of v, the member name holding a nested model
// (required, or Model | None): missing, not an object, or those fields finds
// in it.
func subModel(errs []FieldError, v gjson.Result, name, model string, required bool,
	fields func(gjson.Result, []FieldError) []FieldError) []FieldError {
	switch {
	case v.IsObject():
		return fields(v, errs)
	case !v.Exists():
		if required {
			errs = append(errs, FieldError{Type: "missing", Loc: loc(name), Msg: pyMissing})
		}
	case v.Type == gjson.Null && !required:
	default:
		errs = append(errs, modelType(loc(name), model))
	}
	return errs
}

func modelType(l []any, model string) FieldError {
	if l == nil {
		l = loc()
	}
	return FieldError{Type: "model_type", Loc: l, Msg: pyModelType + model}
}

func loc(path ...string) []any {
	l := make([]any, len(path))
	for i, p := range path {
		l[i] = p
	}
	return l
}

// canonicalID is the id the SDK echoes for the raw JSON id v (Parse checked
// it is a string, a number, true, false or null): the SDK's model reads the
// id as str | int | None, converting true and false to 1 and 0 and a number
// without a fractional part to that integer. ok is false for an id the SDK
// cannot echo (a fractional or non-finite number, an object, a list): it
// answers those with HTTP 400.
func canonicalID(v []byte) (id []byte, ok bool) {
	if len(v) == 0 {
		return v, true
	}
	switch v[0] {
	case '"', 'n':
		return v, true
	case 't':
		return []byte("1"), true
	case 'f':
		return []byte("0"), true
	case '{', '[':
		return nil, false
	}
	if IsIntegerLiteral(v) {
		return v, true
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsInf(f, 0) || f != math.Trunc(f) {
		return nil, false
	}
	i, _ := new(big.Float).SetFloat64(f).Int(nil)
	return []byte(i.String()), true
}

// IsIntegerLiteral reports whether the JSON number v has no fraction and no
// exponent (the SDK's integer; idempotency reads an error's code by it).
func IsIntegerLiteral(v []byte) bool {
	for _, c := range v {
		if c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

// hasLongInteger reports whether the valid JSON document b holds, outside
// strings, an integer literal (no fraction, no exponent) of more than
// MaxIntegerDigits digits. A first pass looks for any run of that many
// digits, so a body without one is read once, quickly.
func hasLongInteger(b []byte) bool {
	run, long := 0, false
	for _, c := range b {
		if c >= '0' && c <= '9' {
			if run++; run > MaxIntegerDigits {
				long = true
				break
			}
		} else {
			run = 0
		}
	}
	if !long {
		return false
	}
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString:
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == '-' || (c >= '0' && c <= '9'):
			j := i
			if c == '-' {
				j++
			}
			start := j
			for j < len(b) && b[j] >= '0' && b[j] <= '9' {
				j++
			}
			digits := j - start
			if digits > MaxIntegerDigits && (j == len(b) || (b[j] != '.' && b[j] != 'e' && b[j] != 'E')) {
				return true
			}
			for j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E' || b[j] == '+' || b[j] == '-' || (b[j] >= '0' && b[j] <= '9')) {
				j++
			}
			i = j - 1
		}
	}
	return false
}

// IdempotencyKeyRequired is the -32602 of a covered action without an
// idempotency_key when the sidecar requires one (require_idempotency_key):
// not an SDK rule, so its entry type is the sidecar's own, in the SDK's
// shape (MsgInvalidActionRequest, data.errors). Audit code
// "idempotency_key_required".
func IdempotencyKeyRequired(action string) *refusal.Refusal {
	return &refusal.Refusal{RPCCode: CodeInvalidParams, Message: MsgInvalidActionRequest,
		Data: map[string]any{"errors": []FieldError{{Type: "idempotency_key_required", Loc: loc("idempotency_key"),
			Msg: "idempotency_key is required for " + action}}},
		Reason: "idempotency_key_required"}
}

// ServerBusy is the sidecar's retryable answer to a POST /a2a call whose
// body does not fit the process's body memory budget now (the SDK has no
// such bound): -32603 "Server busy, retry later", data {"code":
// "server_busy"}. It is sent with id null (the body was not read), HTTP
// 503 and Retry-After (retryAfter seconds), so that a client tells "busy,
// retry" from a refusal.
func ServerBusy(retryAfter int) *refusal.Refusal {
	return &refusal.Refusal{RPCCode: CodeInternalError, RPCStatus: 503, Status: 503, Code: "server_busy",
		Message: "Server busy, retry later", RetryAfter: retryAfter}
}

// BodyTooLarge is the sidecar's answer to a POST /a2a body over limit bytes
// (the SDK reads any size, so it has no such error): -32600 "Request body
// too large", data {"code": "request_body_too_large", "max_body": limit}.
// It is sent with id null (the body, and its id, were not read) and HTTP
// 200. Audit code "body_too_large".
func BodyTooLarge(limit int64) *refusal.Refusal {
	return &refusal.Refusal{RPCCode: CodeInvalidRequest, Status: 413, Code: "request_body_too_large",
		Message: "Request body too large",
		Data:    map[string]any{"code": "request_body_too_large", "max_body": limit},
		Reason:  "body_too_large"}
}

// AgentUnavailable is the /a2a answer to a call the agent did not answer
// (it could not be reached, or failed before answering): HTTP status (502,
// or 504 for a timeout) with -32603 "Agent unavailable", data {"code":
// "agent_unavailable"}. The audit line keeps the decision's code (the
// call was allowed).
func AgentUnavailable(status int) *refusal.Refusal {
	return &refusal.Refusal{RPCCode: CodeInternalError, RPCStatus: status, Status: status,
		Code: "agent_unavailable", Message: "Agent unavailable"}
}

// pyStrRepr is Python's repr() of a str, as the SDK's texts embed values
// (f"{value!r}"): single quotes unless the text holds a single quote and no
// double quote; backslash, the quote, \n, \r, \t escaped; other characters
// that are not printable (unicode.IsPrint, close to str.isprintable) as
// \xNN, \uNNNN or \UNNNNNNNN.
func pyStrRepr(v string) string {
	q := byte('\'')
	if strings.ContainsRune(v, '\'') && !strings.ContainsRune(v, '"') {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range v {
		switch {
		case r == '\\' || r == rune(q):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == ' ' || unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
	return b.String()
}
