package jsonrpc

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// Supervaizer v2 controller methods (supervaizer-v2 seed, A2A controller).
const (
	MethodActionInvoke = "supervaizer/action.invoke"
	MethodSurfaceLoad  = "supervaizer/surface.load"
)

// MaxDepth is the deepest nesting of objects and arrays Parse accepts
// (the envelope itself is depth 1). Deeper bodies are -32600.
const MaxDepth = 64

// Call is what a parsed /a2a request asks for. Strings are the decoded JSON
// strings; Raw* fields are raw JSON slices of the original body (not copies
// that could differ from it).
type Call struct {
	ID     json.RawMessage // raw JSON id: a string, a number, or null
	Method string          // MethodActionInvoke or MethodSurfaceLoad

	RequestID      string
	ActorUserID    string
	WorkspaceID    string
	WorkspaceSlug  string // "" when absent or null
	MissionID      string
	AgentSlug      string
	Surface        string
	Action         string          // "" for surface.load
	IdempotencyKey string          // "" when absent or null
	JobID          string          // "" when absent or null
	Input          json.RawMessage // raw JSON object; "{}" when absent
}

// IsAction reports whether the call is supervaizer/action.invoke.
func (c *Call) IsAction() bool { return c.Method == MethodActionInvoke }

// Target returns the action id for an action call, else the surface id: the
// capability the required scope names.
func (c *Call) Target() string {
	if c.IsAction() {
		return c.Action
	}
	return c.Surface
}

// Parse reads body, the complete /a2a request body, and returns the Call.
//
// Errors (*Error), in this order:
//   - CodeParseError (-32700): invalid UTF-8, a UTF-8 BOM or other leading
//     bytes, invalid JSON (NaN, Infinity, comments, trailing data included).
//   - CodeInvalidRequest (-32600): not an object (a batch array included),
//     nesting deeper than MaxDepth, a duplicate key in any object at any depth
//     (keys compared after unescaping), "jsonrpc" other than "2.0", an id that
//     is not a string, number or null, a missing or non-string "method".
//   - CodeMethodNotFound (-32601): a method other than MethodActionInvoke and
//     MethodSurfaceLoad.
//   - CodeInvalidParams (-32602): params not an object; the action request
//     (params.action_request if present, else params) or surface request
//     (params.surface_request if present, else params) missing request_id,
//     actor.user_id, workspace.id, mission_id, agent_slug, surface, or action
//     (actions), or any of them mistyped; input not an object; mission.id
//     different from mission_id or mission.metadata not an object; a non-null
//     workspace_authorization (only the controller sets it).
//
// The id is echoed for -32601 and -32602, and null for -32700 and -32600.
func Parse(body []byte) (*Call, *Error) {
	if !utf8.Valid(body) {
		return nil, &Error{Code: CodeParseError, Message: "Parse error: body is not valid UTF-8"}
	}
	if !gjson.ValidBytes(body) {
		return nil, &Error{Code: CodeParseError, Message: "Parse error: body is not valid JSON"}
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil, &Error{Code: CodeInvalidRequest, Message: "Invalid Request: expected a single JSON-RPC request object"}
	}
	facts := scanJSON(body)
	if facts.depth > MaxDepth {
		return nil, &Error{Code: CodeInvalidRequest, Message: "Invalid Request: JSON nesting is too deep"}
	}
	if facts.lone {
		return nil, &Error{Code: CodeInvalidRequest, Message: "Invalid Request: a string holds a lone UTF-16 surrogate escape"}
	}
	if facts.dup {
		return nil, &Error{Code: CodeInvalidRequest, Message: "Invalid Request: duplicate JSON object key " + quote(facts.dupKey)}
	}

	var env [4]gjson.Result // jsonrpc, id, method, params
	pick(root, envelopeFields, env[:])
	if v := env[0]; v.Type != gjson.String || v.Str != "2.0" {
		return nil, &Error{Code: CodeInvalidRequest, Message: `Invalid Request: "jsonrpc" must be "2.0"`}
	}
	call := &Call{ID: NullID}
	if id := env[1]; id.Exists() {
		switch id.Type {
		case gjson.String, gjson.Number, gjson.Null:
			call.ID = json.RawMessage(id.Raw)
		default:
			return nil, &Error{Code: CodeInvalidRequest, Message: `Invalid Request: "id" must be a string, a number or null`}
		}
	}
	method := env[2]
	if method.Type != gjson.String {
		return nil, &Error{Code: CodeInvalidRequest, Message: `Invalid Request: "method" must be a string`}
	}
	call.Method = method.Str

	var wrapper string
	switch call.Method {
	case MethodActionInvoke:
		wrapper = "action_request"
	case MethodSurfaceLoad:
		wrapper = "surface_request"
	default:
		return call, &Error{Code: CodeMethodNotFound, Message: "Method not found: " + call.Method}
	}

	params := env[3]
	if !params.IsObject() {
		return call, invalidParams("params must be an object")
	}
	req := params
	if inner := params.Get(wrapper); inner.Exists() {
		if !inner.IsObject() {
			return call, invalidParams("params." + wrapper + " must be an object")
		}
		req = inner
	}
	if err := call.readRequest(req); err != nil {
		return call, err
	}
	return call, nil
}

func invalidParams(msg string) *Error {
	return &Error{Code: CodeInvalidParams, Message: "Invalid params: " + msg}
}

// Fields of a V2ActionRequest / V2SurfaceRequest the gate reads, in the
// order pick returns them.
var requestFields = []string{"request_id", "actor", "workspace", "mission_id", "agent_slug", "surface",
	"action", "idempotency_key", "job_id", "input", "mission", "workspace_authorization"}

const (
	fRequestID = iota
	fActor
	fWorkspace
	fMissionID
	fAgentSlug
	fSurface
	fAction
	fIdempotencyKey
	fJobID
	fInput
	fMission
	fWorkspaceAuthorization
)

// pick walks obj once and stores, in out, the value of each key of names
// (at the same index; a zero Result when absent). Keys are compared after
// unescaping; obj has no duplicate key (Parse checked).
func pick(obj gjson.Result, names []string, out []gjson.Result) {
	obj.ForEach(func(k, v gjson.Result) bool {
		for i, n := range names {
			if k.Str == n {
				out[i] = v
				break
			}
		}
		return true
	})
}

// readRequest fills the V2ActionRequest / V2SurfaceRequest fields of c from
// req, reading each object once.
func (c *Call) readRequest(req gjson.Result) *Error {
	var f [fWorkspaceAuthorization + 1]gjson.Result
	pick(req, requestFields, f[:])
	var err *Error
	str := func(dst *string, v gjson.Result, path string, required bool) {
		if err != nil {
			return
		}
		switch {
		case v.Type == gjson.String:
			*dst = v.Str
		case !v.Exists() || v.Type == gjson.Null:
			if required {
				err = invalidParams(path + " is required")
			}
		default:
			err = invalidParams(path + " must be a string")
		}
	}
	object := func(v gjson.Result, name string) (gjson.Result, bool) {
		if err != nil {
			return gjson.Result{}, false
		}
		if v.IsObject() {
			return v, true
		}
		if !v.Exists() || v.Type == gjson.Null {
			err = invalidParams(name + " is required")
		} else {
			err = invalidParams(name + " must be an object")
		}
		return gjson.Result{}, false
	}

	str(&c.RequestID, f[fRequestID], "request_id", true)
	if actor, ok := object(f[fActor], "actor"); ok {
		var a [1]gjson.Result
		pick(actor, actorFields, a[:])
		str(&c.ActorUserID, a[0], "actor.user_id", true)
	}
	if ws, ok := object(f[fWorkspace], "workspace"); ok {
		var w [2]gjson.Result
		pick(ws, workspaceFields, w[:])
		str(&c.WorkspaceID, w[0], "workspace.id", true)
		str(&c.WorkspaceSlug, w[1], "workspace.slug", false)
	}
	str(&c.MissionID, f[fMissionID], "mission_id", true)
	str(&c.AgentSlug, f[fAgentSlug], "agent_slug", true)
	str(&c.Surface, f[fSurface], "surface", true)
	if c.IsAction() {
		str(&c.Action, f[fAction], "action", true)
		str(&c.IdempotencyKey, f[fIdempotencyKey], "idempotency_key", false)
	}
	str(&c.JobID, f[fJobID], "job_id", false)
	if err != nil {
		return err
	}

	c.Input = json.RawMessage("{}")
	if in := f[fInput]; in.Exists() {
		if !in.IsObject() {
			return invalidParams("input must be an object")
		}
		c.Input = json.RawMessage(in.Raw)
	}
	if m := f[fMission]; m.Exists() && m.Type != gjson.Null {
		if !m.IsObject() {
			return invalidParams("mission must be an object")
		}
		var mf [2]gjson.Result
		pick(m, missionFields, mf[:])
		var missionID string
		str(&missionID, mf[0], "mission.id", true)
		if err != nil {
			return err
		}
		if missionID != c.MissionID {
			return invalidParams("mission.id must equal mission_id")
		}
		if md := mf[1]; md.Exists() && md.Type != gjson.Null && !md.IsObject() {
			return invalidParams("mission.metadata must be an object")
		}
	}
	if wa := f[fWorkspaceAuthorization]; wa.Exists() && wa.Type != gjson.Null {
		return invalidParams("workspace_authorization is set by the controller and cannot be supplied")
	}
	return nil
}

var (
	actorFields     = []string{"user_id"}
	workspaceFields = []string{"id", "slug"}
	missionFields   = []string{"id", "metadata"}
	envelopeFields  = []string{"jsonrpc", "id", "method", "params"}
)

// surrogateEscape reads the \uXXXX escape at b[i:] (b is valid JSON, so the
// hex digits are there) and returns its length in bytes (12 for a high+low
// surrogate pair, else 6) and whether it is a lone surrogate.
func surrogateEscape(b []byte, i int) (int, bool) {
	u := hex4(b[i+2 : i+6])
	switch {
	case u >= 0xDC00 && u <= 0xDFFF:
		return 6, true
	case u >= 0xD800 && u <= 0xDBFF:
		if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
			if low := hex4(b[i+8 : i+12]); low >= 0xDC00 && low <= 0xDFFF {
				return 12, false
			}
		}
		return 6, true
	}
	return 6, false
}

func hex4(h []byte) int {
	n := 0
	for _, c := range h {
		n <<= 4
		switch {
		case c >= '0' && c <= '9':
			n |= int(c - '0')
		case c >= 'a' && c <= 'f':
			n |= int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			n |= int(c-'A') + 10
		}
	}
	return n
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	if len(b) > 80 {
		b = append(bytes.Clone(b[:77]), "..."...)
	}
	return string(b)
}

// IsJSONObject reports whether b is exactly one valid JSON object (UTF-8,
// nesting at most MaxDepth, no lone surrogate escape, no duplicate keys at
// any depth).
func IsJSONObject(b []byte) bool {
	if !utf8.Valid(b) || !gjson.ValidBytes(b) {
		return false
	}
	if f := scanJSON(b); f.depth > MaxDepth || f.lone || f.dup {
		return false
	}
	return gjson.ParseBytes(b).IsObject()
}
