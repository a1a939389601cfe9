package jsonrpc

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
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
	HasJobID       bool            // job_id is a string ("" included): the SDK's job_id is not None
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

// msgFoldDuplicate is the -32600 message for keys that differ only in case.
const msgFoldDuplicate = "Invalid Request: two keys of one object differ only in letter case"

// Parse reads body, the complete /a2a request body, and returns the Call.
//
// Errors (*Error), in this order:
//   - CodeParseError (-32700): invalid UTF-8, a UTF-8 BOM or other leading
//     bytes, invalid JSON (NaN, Infinity, comments, trailing data included).
//   - HTTP 400 (HTTPStatus set, Message MsgBodyNotParsed): an integer
//     literal of more than MaxIntegerDigits digits anywhere (Python's json
//     cannot read it: the SDK's stack answers 400).
//   - CodeInvalidRequest (-32600): not an object (a batch array included),
//     nesting deeper than MaxDepth, a lone surrogate escape, a duplicate key
//     in any object at any depth (keys compared after unescaping), two keys
//     equal under Unicode case folding in an object the gate reads (the
//     envelope, params, the request and its actor, workspace and mission:
//     Go's encoding/json matches field names that way, so an agent could
//     read the other one; msgFoldDuplicate).
//   - HTTP 400 (HTTPStatus set, Message MsgBadID): an id the SDK cannot echo
//     (a fractional or out-of-range number, an object, a list).
//   - CodeInvalidParams (-32602) with MsgInvalidJSONRPCRequest: the SDK's
//     envelope model fails: "jsonrpc" present and not "2.0", "method"
//     absent or not a string, "params" present and not an object.
//   - CodeMethodNotFound (-32601): a method other than MethodActionInvoke and
//     MethodSurfaceLoad ("Method not found: <method>").
//   - CodeInvalidParams (-32602) with MsgInvalidActionRequest /
//     MsgInvalidSurfaceRequest: the action request (params.action_request if
//     present, else params) or surface request (params.surface_request if
//     present, else params) missing request_id, actor.user_id, workspace.id,
//     mission_id, agent_slug, surface, or action (actions), or any of them
//     mistyped; idempotency_key, draft_session_id, job_id, case_id or
//     step_id neither a string nor null; input not an object; mission.id
//     different from mission_id or mission.metadata not an object; a
//     non-null workspace_authorization (only the controller sets it).
//
// Every -32602 has the SDK's data, {"errors": [...]} (ModelErrors: every
// problem of the failing model); Detail names the first problem found, for
// the audit line. The id is echoed for -32601 and -32602 (as the SDK reads
// it: true and false as 1 and 0, an integral number as that integer), and
// null for -32700 and -32600. docs/sdk-wire.md states the SDK rules these
// follow.
func Parse(body []byte) (*Call, *Error) {
	// Three passes over body: utf8.Valid, gjson.ValidBytes (the JSON
	// grammar), then scanJSON, which checks depth, lone surrogates and
	// duplicate keys and records where the members read below are.
	if !utf8.Valid(body) {
		return nil, &Error{Code: CodeParseError, Message: "Parse error: body is not valid UTF-8"}
	}
	if !gjson.ValidBytes(body) {
		return nil, &Error{Code: CodeParseError, Message: "Parse error: body is not valid JSON"}
	}
	if hasLongInteger(body) {
		return nil, &Error{Code: CodeParseError, HTTPStatus: 400, Message: MsgBodyNotParsed,
			Detail: "an integer of more than " + strconv.Itoa(MaxIntegerDigits) + " digits"}
	}
	// body is one valid JSON value: its first byte that is not whitespace
	// says what it is.
	if body[skipSpace(body, 0)] != '{' {
		return nil, &Error{Code: CodeInvalidRequest, Message: "Invalid Request: expected a single JSON-RPC request object"}
	}
	var f fields
	facts := scanJSON(body, &f)
	if facts.depth > MaxDepth {
		return nil, &Error{Code: CodeInvalidRequest, Message: "Invalid Request: JSON nesting is too deep"}
	}
	if facts.lone {
		return nil, &Error{Code: CodeInvalidRequest, Message: "Invalid Request: a string holds a lone UTF-16 surrogate escape"}
	}
	if facts.dup {
		return nil, &Error{Code: CodeInvalidRequest, Message: "Invalid Request: duplicate JSON object key " + quote(facts.dupKey)}
	}
	if facts.foldDup {
		return nil, &Error{Code: CodeInvalidRequest, Message: msgFoldDuplicate}
	}

	// The members were recorded by the scan: read them from body.
	id, ok := canonicalID(f.get(body, sRoot+eID))
	if !ok {
		return nil, &Error{Code: CodeInvalidRequest, HTTPStatus: 400, Message: MsgBadID,
			Detail: `"id" is not a string, an integer or null`}
	}
	call := &Call{ID: NullID}
	method := f.get(body, sRoot+eMethod)
	if d := envelopeProblem(f.get(body, sRoot+eJSONRPC), method, f.get(body, sRoot+eParams)); d != "" {
		call.setID(id, nil)
		return call, invalidParams(body, d)
	}
	var (
		wrapper string
		inner   int // index of the wrapper member in params
		r       int // request object read when the wrapper is present
	)
	switch {
	case stringIs(method, MethodActionInvoke):
		call.Method = MethodActionInvoke
		wrapper, inner, r = "action_request", fActionRequest, reqAction
	case stringIs(method, MethodSurfaceLoad):
		call.Method = MethodSurfaceLoad
		wrapper, inner, r = "surface_request", fSurfaceRequest, reqSurface
	default:
		call.Method = stringOf(method)
		call.setID(id, nil)
		return call, &Error{Code: CodeMethodNotFound, Message: PrefixMethodNotFound + call.Method}
	}

	req := reqParams
	if w := f.get(body, sReq+reqParams*nRequest+inner); len(w) > 0 {
		if !isObject(w) {
			call.setID(id, nil)
			return call, invalidParams(body, "params."+wrapper+" must be an object")
		}
		req = r
	}
	// Input is the raw input object, or {} when absent (or not an object,
	// which readRequest refuses).
	input := f.get(body, sReq+req*nRequest+fInput)
	if !isObject(input) {
		input = []byte("{}")
	}
	if err := call.readRequest(body, &f, req, call.setID(id, input)); err != nil {
		return call, err
	}
	return call, nil
}

// setID sets c.ID to a copy of id, the raw id (c.ID stays NullID when id is
// empty), and returns a copy of input; both copies share one allocation.
func (c *Call) setID(id, input []byte) json.RawMessage {
	buf := make([]byte, len(id)+len(input))
	copy(buf, id)
	copy(buf[len(id):], input)
	if len(id) > 0 {
		c.ID = buf[:len(id):len(id)]
	}
	return buf[len(id):]
}

// envelopeProblem says what the SDK's envelope model (JsonRpcRequest)
// refuses in the members jsonrpc, method and params (raw values, empty when
// absent): a jsonrpc present and not "2.0", a method absent or not a
// string, a params present and not an object. "" when none.
func envelopeProblem(jsonrpc, method, params []byte) string {
	switch {
	case len(jsonrpc) > 0 && !(isString(jsonrpc) && stringIs(jsonrpc, "2.0")):
		return `"jsonrpc" must be "2.0"`
	case !isString(method):
		return `"method" must be a string`
	case len(params) > 0 && !isObject(params):
		return "params must be an object"
	}
	return ""
}

// A member's value is read as its raw JSON text, a slice of the body (empty
// when the member is absent).

func isString(v []byte) bool { return len(v) > 0 && v[0] == '"' }
func isObject(v []byte) bool { return len(v) > 0 && v[0] == '{' }

// absent reports whether v is absent or null.
func absent(v []byte) bool { return len(v) == 0 || string(v) == "null" }

// plain reports whether the string v (isString) holds no escape: its value is
// the text between its quotes.
func plain(v []byte) bool { return bytes.IndexByte(v[1:len(v)-1], '\\') < 0 }

// stringOf returns the value of the string v (isString), unescaped as gjson
// unescapes.
func stringOf(v []byte) string {
	if plain(v) {
		return string(v[1 : len(v)-1])
	}
	return gjson.Parse(string(v)).Str
}

// stringIs reports whether the string v (isString) holds s.
func stringIs(v []byte, s string) bool {
	if plain(v) {
		return string(v[1:len(v)-1]) == s
	}
	return gjson.Parse(string(v)).Str == s
}

// get returns the value recorded at slot.
func (f *fields) get(body []byte, slot int) []byte {
	return body[f[slot].start:f[slot].end]
}

// Request strings: the string members of a request object readRequest
// reads, indexes in requestStrings.
const (
	rsRequestID = iota
	rsActorUserID
	rsWorkspaceID
	rsWorkspaceSlug
	rsMissionID
	rsAgentSlug
	rsSurface
	rsAction
	rsIdempotencyKey
	rsJobID
	rsMissionDotID
	nRequestStrings
)

// requestStrings holds the string members of a request object: their raw
// values, and the values of those without escapes end to end in one string
// (one allocation for all).
type requestStrings struct {
	v     [nRequestStrings][]byte // raw values
	plain uint16                  // bit i: v[i] is a string without escapes
	text  string                  // the values of the plain strings, end to end
	end   [nRequestStrings]int    // where each plain string ends in text
}

func (rs *requestStrings) read(body []byte, f *fields, r int) {
	base := sReq + r*nRequest
	for i, slot := range [nRequestStrings]int{
		rsRequestID:      base + fRequestID,
		rsActorUserID:    sActor + r,
		rsWorkspaceID:    sWorkspace + 2*r,
		rsWorkspaceSlug:  sWorkspace + 2*r + 1,
		rsMissionID:      base + fMissionID,
		rsAgentSlug:      base + fAgentSlug,
		rsSurface:        base + fSurface,
		rsAction:         base + fAction,
		rsIdempotencyKey: base + fIdempotencyKey,
		rsJobID:          base + fJobID,
		rsMissionDotID:   sMission + 2*r,
	} {
		rs.v[i] = f.get(body, slot)
	}
	n := 0
	for i, v := range rs.v {
		if isString(v) && plain(v) {
			rs.plain |= 1 << i
			n += len(v) - 2
		}
	}
	var sb strings.Builder
	sb.Grow(n)
	for i, v := range rs.v {
		if rs.plain&(1<<i) != 0 {
			sb.Write(v[1 : len(v)-1])
		}
		rs.end[i] = sb.Len()
	}
	rs.text = sb.String()
}

// str returns the value of string i (isString).
func (rs *requestStrings) str(i int) string {
	if rs.plain&(1<<i) == 0 {
		return stringOf(rs.v[i])
	}
	start := 0
	if i > 0 {
		start = rs.end[i-1]
	}
	return rs.text[start:rs.end[i]]
}

// readRequest fills the V2ActionRequest / V2SurfaceRequest fields of c from
// request object r of the scanned body (see fields); input is c.Input's
// value once the string fields are read.
func (c *Call) readRequest(body []byte, fs *fields, r int, input json.RawMessage) *Error {
	f := fs[sReq+r*nRequest : sReq+(r+1)*nRequest]
	var rs requestStrings
	rs.read(body, fs, r)
	var err *Error
	str := func(dst *string, i int, path string, required bool) {
		if err != nil {
			return
		}
		switch v := rs.v[i]; {
		case isString(v):
			*dst = rs.str(i)
		case absent(v):
			if required {
				err = invalidParams(body, path+" is required")
			}
		default:
			err = invalidParams(body, path+" must be a string")
		}
	}
	object := func(v []byte, name string) bool {
		if err != nil {
			return false
		}
		if isObject(v) {
			return true
		}
		if absent(v) {
			err = invalidParams(body, name+" is required")
		} else {
			err = invalidParams(body, name+" must be an object")
		}
		return false
	}
	get := func(sp span) []byte { return body[sp.start:sp.end] }

	str(&c.RequestID, rsRequestID, "request_id", true)
	if object(get(f[fActor]), "actor") {
		str(&c.ActorUserID, rsActorUserID, "actor.user_id", true)
	}
	if object(get(f[fWorkspace]), "workspace") {
		str(&c.WorkspaceID, rsWorkspaceID, "workspace.id", true)
		str(&c.WorkspaceSlug, rsWorkspaceSlug, "workspace.slug", false)
	}
	str(&c.MissionID, rsMissionID, "mission_id", true)
	str(&c.AgentSlug, rsAgentSlug, "agent_slug", true)
	str(&c.Surface, rsSurface, "surface", true)
	if c.IsAction() {
		str(&c.Action, rsAction, "action", true)
		str(&c.IdempotencyKey, rsIdempotencyKey, "idempotency_key", false)
	}
	str(&c.JobID, rsJobID, "job_id", false)
	c.HasJobID = isString(rs.v[rsJobID])
	for _, o := range [...]struct {
		field int
		name  string
	}{{fDraftSessionID, "draft_session_id"}, {fCaseID, "case_id"}, {fStepID, "step_id"}} {
		if v := get(f[o.field]); err == nil && !absent(v) && !isString(v) {
			err = invalidParams(body, o.name+" must be a string")
		}
	}
	if err != nil {
		return err
	}

	c.Input = input
	if in := get(f[fInput]); len(in) > 0 && !isObject(in) {
		return invalidParams(body, "input must be an object")
	}
	if m := get(f[fMission]); !absent(m) {
		if !isObject(m) {
			return invalidParams(body, "mission must be an object")
		}
		var missionID string
		str(&missionID, rsMissionDotID, "mission.id", true)
		if err != nil {
			return err
		}
		if missionID != c.MissionID {
			return invalidParams(body, "mission.id must equal mission_id")
		}
		if md := get(fs[sMission+2*r+1]); !absent(md) && !isObject(md) {
			return invalidParams(body, "mission.metadata must be an object")
		}
	}
	if !absent(get(f[fWorkspaceAuthorization])) {
		return invalidParams(body, "workspace_authorization is set by the controller and cannot be supplied")
	}
	return nil
}

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
	if !utf8.Valid(b) || !gjson.ValidBytes(b) || b[skipSpace(b, 0)] != '{' {
		return false
	}
	f := scanJSON(b, nil)
	return !f.bad()
}
