package jsonrpc

import (
	"bytes"
	"encoding/json"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/supervaize/supervaizer-sidecar/refusal"
	"github.com/supervaize/supervaizer-sidecar/strictjson"
)

// Supervaizer v2 controller methods (supervaizer-v2 seed, A2A controller).
const (
	MethodActionInvoke = "supervaizer/action.invoke"
	MethodSurfaceLoad  = "supervaizer/surface.load"
)

// MaxDepth is the deepest nesting of objects and arrays Parse accepts
// (the envelope itself is depth 1). Deeper bodies are -32600.
const MaxDepth = strictjson.MaxDepth

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
	CaseID         string          // "" when absent or null
	StepID         string          // "" when absent or null
	DraftSessionID string          // "" when absent or null
	Input          json.RawMessage // raw JSON object; "{}" when absent; a part of Parse's body (not a copy): valid while that body is unchanged
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
// Errors (*refusal.Refusal), in this order:
//   - CodeParseError (-32700): invalid UTF-8, a UTF-8 BOM or other leading
//     bytes, invalid JSON (NaN, Infinity, comments, trailing data included).
//   - HTTP 400 (HTTPLevel set, Message MsgBodyNotParsed): an integer
//     literal of more than MaxIntegerDigits digits anywhere (Python's json
//     cannot read it: the SDK's stack answers 400).
//   - CodeInvalidRequest (-32600): not an object (a batch array included),
//     nesting deeper than MaxDepth, a lone surrogate escape, a duplicate key
//     in any object at any depth (keys compared after unescaping), two keys
//     equal under Unicode case folding in an object the gate reads (the
//     envelope, params, the request and its actor, workspace and mission:
//     Go's encoding/json matches field names that way, so an agent could
//     read the other one; msgFoldDuplicate).
//   - HTTP 400 (HTTPLevel set, Message MsgBadID): an id the SDK cannot echo
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
// the audit line; Reason is "jsonrpc_<code>" (AuditReason), the audit
// line's code. The id is echoed for -32601 and -32602 (as the SDK reads
// it: true and false as 1 and 0, an integral number as that integer), and
// null for -32700 and -32600. docs/sdk-wire.md states the SDK rules these
// follow.
func Parse(body []byte) (*Call, *refusal.Refusal) {
	// One pass over body: scan (strictjson.Scan) checks the grammar, UTF-8,
	// the integer lengths, depth, lone surrogates and duplicate keys, and
	// records where the members read below are. A body it finds any
	// problem with goes to parseSlow, which checks again one rule at a time
	// in the order above, so that the error is the first problem's.
	var f fields
	facts := scan(body, &f)
	if !facts.OK() || facts.IntDigits > MaxIntegerDigits || strictjson.FirstByte(body) != '{' {
		return parseSlow(body)
	}
	return withReason(readCall(body, &f))
}

// withReason sets a refusal's Reason, the audit line's code.
func withReason(call *Call, e *refusal.Refusal) (*Call, *refusal.Refusal) {
	if e != nil {
		e.Reason = AuditReason(e.RPCCode)
	}
	return call, e
}

// AuditReason is the audit line's code of a refusal of Parse:
// "jsonrpc_<code>".
func AuditReason(code int) string {
	switch code {
	case CodeParseError:
		return "jsonrpc_-32700"
	case CodeInvalidRequest:
		return "jsonrpc_-32600"
	case CodeMethodNotFound:
		return "jsonrpc_-32601"
	case CodeInvalidParams:
		return "jsonrpc_-32602"
	}
	return "jsonrpc_" + strconv.Itoa(code)
}

// parseSlow is Parse one check at a time, each its own pass over body, in
// the order of Parse's doc: the first problem found is the error. Parse
// sends it the bodies its one pass refuses; it decides them as Parse did
// before that pass (the differential test and FuzzParseOnePass check that
// Parse and parseSlow agree on every body).
func parseSlow(body []byte) (*Call, *refusal.Refusal) {
	return withReason(parseChecks(body))
}

// parseChecks is parseSlow's checks.
func parseChecks(body []byte) (*Call, *refusal.Refusal) {
	if !utf8.Valid(body) {
		return nil, &refusal.Refusal{RPCCode: CodeParseError, Message: "Parse error: body is not valid UTF-8"}
	}
	if !gjson.ValidBytes(body) {
		return nil, &refusal.Refusal{RPCCode: CodeParseError, Message: "Parse error: body is not valid JSON"}
	}
	if hasLongInteger(body) {
		return nil, &refusal.Refusal{RPCCode: CodeParseError, HTTPLevel: true, Status: 400, Message: MsgBodyNotParsed,
			Detail: "an integer of more than " + strconv.Itoa(MaxIntegerDigits) + " digits"}
	}
	// body is one valid JSON value: its first byte that is not whitespace
	// says what it is.
	if strictjson.FirstByte(body) != '{' {
		return nil, &refusal.Refusal{RPCCode: CodeInvalidRequest, Message: "Invalid Request: expected a single JSON-RPC request object"}
	}
	var f fields
	facts := scan(body, &f)
	if facts.Invalid {
		// Not reached: scan finds invalid only what utf8.Valid or
		// gjson.ValidBytes refuse (strictjson's TestScanValidity and
		// FuzzScan). Should it, the body is refused, never read in part.
		return nil, &refusal.Refusal{RPCCode: CodeParseError, Message: "Parse error: body is not valid JSON"}
	}
	if facts.TooDeep {
		return nil, &refusal.Refusal{RPCCode: CodeInvalidRequest, Message: "Invalid Request: JSON nesting is too deep"}
	}
	if facts.Lone {
		return nil, &refusal.Refusal{RPCCode: CodeInvalidRequest, Message: "Invalid Request: a string holds a lone UTF-16 surrogate escape"}
	}
	if facts.Dup {
		return nil, &refusal.Refusal{RPCCode: CodeInvalidRequest, Message: "Invalid Request: duplicate JSON object key " + quote(facts.DupKey)}
	}
	if facts.FoldDup {
		return nil, &refusal.Refusal{RPCCode: CodeInvalidRequest, Message: msgFoldDuplicate}
	}
	return readCall(body, &f)
}

// readCall reads the call from body, a strict JSON object, whose members
// scan recorded in f without finding a problem.
func readCall(body []byte, f *fields) (*Call, *refusal.Refusal) {
	// The members were recorded by the scan: read them from body.
	id, ok := canonicalID(f.get(body, eID))
	if !ok {
		return nil, &refusal.Refusal{RPCCode: CodeInvalidRequest, HTTPLevel: true, Status: 400, Message: MsgBadID,
			Detail: `"id" is not a string, an integer or null`}
	}
	call := &Call{ID: NullID}
	method := f.get(body, eMethod)
	if d := envelopeProblem(f.get(body, eJSONRPC), method, f.get(body, eParams)); d != "" {
		call.setID(id)
		return call, invalidParams(body, d)
	}
	var (
		wrapper string
		inner   int // span of the wrapper member
		r       int // request object read when the wrapper is present
	)
	switch {
	case stringIs(method, MethodActionInvoke):
		call.Method = MethodActionInvoke
		wrapper, inner, r = "action_request", eActionRequest, reqAction
	case stringIs(method, MethodSurfaceLoad):
		call.Method = MethodSurfaceLoad
		wrapper, inner, r = "surface_request", eSurfaceRequest, reqSurface
	default:
		call.Method = stringOf(method)
		call.setID(id)
		return call, &refusal.Refusal{RPCCode: CodeMethodNotFound, Message: PrefixMethodNotFound + call.Method}
	}

	req := reqParams
	if w := f.get(body, inner); len(w) > 0 {
		if !isObject(w) {
			call.setID(id)
			return call, invalidParams(body, "params."+wrapper+" must be an object")
		}
		req = r
	}
	// Input is the raw input object, or {} when absent (or not an object,
	// which readRequest refuses).
	input := f.get(body, sReq+req*nFields+fInput)
	if !isObject(input) {
		input = []byte("{}")
	}
	call.setID(id)
	if err := call.readRequest(body, f, req, input); err != nil {
		return call, err
	}
	return call, nil
}

// setID sets c.ID to a copy of id, the raw id (c.ID stays NullID when id is
// empty). The input is not copied: Call.Input is a part of the body (a copy
// held it twice: for a body of megabytes, megabytes more while the gate
// decides).
func (c *Call) setID(id []byte) {
	if len(id) > 0 {
		c.ID = bytes.Clone(id)
	}
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

// isPlain reports whether the string v (isString) holds no escape: its value is
// the text between its quotes.
func isPlain(v []byte) bool { return bytes.IndexByte(v[1:len(v)-1], '\\') < 0 }

// stringOf returns the value of the string v (isString), unescaped as gjson
// unescapes.
func stringOf(v []byte) string {
	if isPlain(v) {
		return string(v[1 : len(v)-1])
	}
	return gjson.Parse(string(v)).Str
}

// stringIs reports whether the string v (isString) holds s.
func stringIs(v []byte, s string) bool {
	if isPlain(v) {
		return string(v[1:len(v)-1]) == s
	}
	return gjson.Parse(string(v)).Str == s
}

// readRequest fills the V2ActionRequest / V2SurfaceRequest fields of c from
// request object r of the scanned body (see requestFields); input is
// c.Input's value once the string fields are read.
func (c *Call) readRequest(body []byte, fs *fields, r int, input json.RawMessage) *refusal.Refusal {
	f := fs[sReq+r*nFields : sReq+(r+1)*nFields]
	// The values of the strings read without escapes, end to end in one
	// string (one allocation for all): field i's at text[start[i]:].
	var (
		start [nFields]int
		plain uint64 // bit i: field i is read and a string without escapes
		n     int
	)
	for m := textFields; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		if v := body[f[i].Start:f[i].End]; isString(v) && isPlain(v) {
			plain |= 1 << i
			n += len(v) - 2
		}
	}
	var sb strings.Builder
	sb.Grow(n)
	for m := plain; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		start[i] = sb.Len()
		sb.Write(body[f[i].Start+1 : f[i].End-1])
	}
	text := sb.String()
	str := func(i int) string {
		if plain&(1<<i) == 0 {
			return stringOf(body[f[i].Start:f[i].End])
		}
		return text[start[i] : start[i]+f[i].End-f[i].Start-2]
	}

	c.HasJobID = isString(body[f[fJobID].Start:f[fJobID].End])
	action := c.IsAction()
	for i := range requestFields {
		rf := &requestFields[i]
		if rf.action && !action {
			continue
		}
		if p := parents[i]; p >= 0 && absent(body[f[p].Start:f[p].End]) {
			continue
		}
		val := body[f[i].Start:f[i].End]
		if err := c.readField(body, rf, i, val, input, str); err != nil {
			return err
		}
	}
	return nil
}

// readField checks one field of the request model by its rule (rf.rule)
// and stores its value in c: val is its text in body, str(i) its string.
func (c *Call) readField(body []byte, rf *requestField, i int, val []byte, input json.RawMessage, str func(int) string) *refusal.Refusal {
	switch rf.rule {
	case ruleString, ruleOptString, ruleMissionID:
		switch {
		case isString(val):
			if rf.dst != nil {
				*rf.dst(c) = str(i)
			} else if rf.rule == ruleMissionID && str(i) != c.MissionID {
				return invalidParams(body, rf.path+" must equal mission_id")
			}
		case absent(val):
			if rf.rule != ruleOptString {
				return invalidParams(body, rf.path+" is required")
			}
		default:
			return invalidParams(body, rf.path+" must be a string")
		}
	case ruleObject, ruleOptObject:
		switch {
		case isObject(val):
		case absent(val):
			if rf.rule == ruleObject {
				return invalidParams(body, rf.path+" is required")
			}
		default:
			return invalidParams(body, rf.path+" must be an object")
		}
	case ruleInput:
		c.Input = input
		if len(val) > 0 && !isObject(val) {
			return invalidParams(body, rf.path+" must be an object")
		}
	case ruleAbsent:
		if !absent(val) {
			return invalidParams(body, rf.path+" is set by the controller and cannot be supplied")
		}
	}
	return nil
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	if len(b) > 80 {
		b = append(bytes.Clone(b[:77]), "..."...)
	}
	return string(b)
}

// IsJSONObject reports whether b is exactly one strict JSON object nesting
// at most MaxDepth deep (strictjson.IsObject: UTF-8, no lone surrogate
// escape, no duplicate keys at any depth).
func IsJSONObject(b []byte) bool { return strictjson.IsObject(b, MaxDepth) }
