package jsonrpc

// This file is a test-only copy of Parse and IsJSONObject as they were before
// the single-pass field recording (commit df0a43d, jsonrpc/envelope.go and
// jsonrpc/scan.go), identifiers renamed with a ref/reference prefix. It is the
// reference the differential fuzz target FuzzParseMatchesReference compares
// Parse against: any input must give the same *Call and *Error. Do not
// "improve" it: its behaviour is the specification. (Since changed only to
// follow the SDK's envelope and request models, docs/sdk-wire.md: the
// -32602 texts and data, jsonrpc optional, ids read as the SDK reads them,
// draft_session_id / case_id / step_id typed, HasJobID.)

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// referenceParse reads body, the complete /a2a request body, and returns the Call.
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
func referenceParse(body []byte) (*Call, *Error) {
	if !utf8.Valid(body) {
		return nil, &Error{Code: CodeParseError, Message: "Parse error: body is not valid UTF-8"}
	}
	if !gjson.ValidBytes(body) {
		return nil, &Error{Code: CodeParseError, Message: "Parse error: body is not valid JSON"}
	}
	if hasLongInteger(body) {
		return nil, &Error{Code: CodeParseError, HTTPStatus: 400, Message: MsgBodyNotParsed,
			Detail: "an integer of more than 4300 digits"}
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil, &Error{Code: CodeInvalidRequest, Message: "Invalid Request: expected a single JSON-RPC request object"}
	}
	facts := refScanJSON(body)
	if facts.depth > MaxDepth {
		return nil, &Error{Code: CodeInvalidRequest, Message: "Invalid Request: JSON nesting is too deep"}
	}
	if facts.lone {
		return nil, &Error{Code: CodeInvalidRequest, Message: "Invalid Request: a string holds a lone UTF-16 surrogate escape"}
	}
	if facts.dup {
		return nil, &Error{Code: CodeInvalidRequest, Message: "Invalid Request: duplicate JSON object key " + refQuote(facts.dupKey)}
	}
	if refFoldDuplicate(root) {
		return nil, &Error{Code: CodeInvalidRequest, Message: msgFoldDuplicate}
	}

	var env [4]gjson.Result // jsonrpc, id, method, params
	refPick(root, refEnvelopeFields, env[:])
	call := &Call{ID: NullID}
	id := env[1]
	switch {
	case !id.Exists(), id.Type == gjson.String, id.Type == gjson.Null:
		if id.Exists() {
			call.ID = json.RawMessage(id.Raw)
		}
	case id.Type == gjson.True:
		call.ID = json.RawMessage("1")
	case id.Type == gjson.False:
		call.ID = json.RawMessage("0")
	case id.Type == gjson.Number && refIntegral(id):
		call.ID = json.RawMessage(refIntegerText(id))
	default:
		return nil, &Error{Code: CodeInvalidRequest, HTTPStatus: 400, Message: MsgBadID,
			Detail: `"id" is not a string, an integer or null`}
	}
	method := env[2]
	switch v, p := env[0], env[3]; {
	case v.Exists() && (v.Type != gjson.String || v.Str != "2.0"):
		return call, invalidParams(body, `"jsonrpc" must be "2.0"`)
	case method.Type != gjson.String:
		return call, invalidParams(body, `"method" must be a string`)
	case p.Exists() && !p.IsObject():
		return call, invalidParams(body, "params must be an object")
	}
	call.Method = method.Str

	var wrapper string
	switch call.Method {
	case MethodActionInvoke:
		wrapper = "action_request"
	case MethodSurfaceLoad:
		wrapper = "surface_request"
	default:
		return call, &Error{Code: CodeMethodNotFound, Message: PrefixMethodNotFound + call.Method}
	}

	params := env[3]
	req := params
	if inner := params.Get(wrapper); inner.Exists() {
		if !inner.IsObject() {
			return call, invalidParams(body, "params."+wrapper+" must be an object")
		}
		req = inner
	}
	if err := call.refReadRequest(body, req); err != nil {
		return call, err
	}
	return call, nil
}

// refIntegral reports whether the number id has an integer value the SDK
// echoes: an integer literal, or a finite number without a fraction.
func refIntegral(id gjson.Result) bool {
	if !strings.ContainsAny(id.Raw, ".eE") {
		return true
	}
	f, err := strconv.ParseFloat(id.Raw, 64)
	return err == nil && !math.IsInf(f, 0) && f == math.Trunc(f)
}

// refIntegerText is the integer text of an integral number id.
func refIntegerText(id gjson.Result) string {
	if !strings.ContainsAny(id.Raw, ".eE") {
		return id.Raw
	}
	f, _ := strconv.ParseFloat(id.Raw, 64)
	i, _ := new(big.Float).SetFloat64(f).Int(nil)
	return i.String()
}

// Fields of a V2ActionRequest / V2SurfaceRequest the gate reads, in the
// order refPick returns them.
var refRequestFields = []string{"request_id", "actor", "workspace", "mission_id", "agent_slug", "surface",
	"action", "idempotency_key", "job_id", "input", "mission", "workspace_authorization",
	"draft_session_id", "case_id", "step_id"}

const (
	refFRequestID = iota
	refFActor
	refFWorkspace
	refFMissionID
	refFAgentSlug
	refFSurface
	refFAction
	refFIdempotencyKey
	refFJobID
	refFInput
	refFMission
	refFWorkspaceAuthorization
	refFDraftSessionID
	refFCaseID
	refFStepID
)

// refPick walks obj once and stores, in out, the value of each key of names
// (at the same index; a zero Result when absent). Keys are compared after
// unescaping; obj has no duplicate key (referenceParse checked).
func refPick(obj gjson.Result, names []string, out []gjson.Result) {
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

// refReadRequest fills the V2ActionRequest / V2SurfaceRequest fields of c from
// req, reading each object once.
func (c *Call) refReadRequest(body []byte, req gjson.Result) *Error {
	var f [refFStepID + 1]gjson.Result
	refPick(req, refRequestFields, f[:])
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
				err = invalidParams(body, path+" is required")
			}
		default:
			err = invalidParams(body, path+" must be a string")
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
			err = invalidParams(body, name+" is required")
		} else {
			err = invalidParams(body, name+" must be an object")
		}
		return gjson.Result{}, false
	}

	str(&c.RequestID, f[refFRequestID], "request_id", true)
	if actor, ok := object(f[refFActor], "actor"); ok {
		var a [1]gjson.Result
		refPick(actor, refActorFields, a[:])
		str(&c.ActorUserID, a[0], "actor.user_id", true)
	}
	if ws, ok := object(f[refFWorkspace], "workspace"); ok {
		var w [2]gjson.Result
		refPick(ws, refWorkspaceFields, w[:])
		str(&c.WorkspaceID, w[0], "workspace.id", true)
		str(&c.WorkspaceSlug, w[1], "workspace.slug", false)
	}
	str(&c.MissionID, f[refFMissionID], "mission_id", true)
	str(&c.AgentSlug, f[refFAgentSlug], "agent_slug", true)
	str(&c.Surface, f[refFSurface], "surface", true)
	if c.IsAction() {
		str(&c.Action, f[refFAction], "action", true)
		str(&c.IdempotencyKey, f[refFIdempotencyKey], "idempotency_key", false)
	}
	str(&c.JobID, f[refFJobID], "job_id", false)
	c.HasJobID = f[refFJobID].Type == gjson.String
	for i, name := range []string{"draft_session_id", "case_id", "step_id"} {
		if v := f[refFDraftSessionID+i]; err == nil && v.Exists() && v.Type != gjson.Null && v.Type != gjson.String {
			err = invalidParams(body, name+" must be a string")
		}
	}
	if err != nil {
		return err
	}

	c.Input = json.RawMessage("{}")
	if in := f[refFInput]; in.Exists() {
		if !in.IsObject() {
			return invalidParams(body, "input must be an object")
		}
		c.Input = json.RawMessage(in.Raw)
	}
	if m := f[refFMission]; m.Exists() && m.Type != gjson.Null {
		if !m.IsObject() {
			return invalidParams(body, "mission must be an object")
		}
		var mf [2]gjson.Result
		refPick(m, refMissionFields, mf[:])
		var missionID string
		str(&missionID, mf[0], "mission.id", true)
		if err != nil {
			return err
		}
		if missionID != c.MissionID {
			return invalidParams(body, "mission.id must equal mission_id")
		}
		if md := mf[1]; md.Exists() && md.Type != gjson.Null && !md.IsObject() {
			return invalidParams(body, "mission.metadata must be an object")
		}
	}
	if wa := f[refFWorkspaceAuthorization]; wa.Exists() && wa.Type != gjson.Null {
		return invalidParams(body, "workspace_authorization is set by the controller and cannot be supplied")
	}
	return nil
}

var (
	refActorFields     = []string{"user_id"}
	refWorkspaceFields = []string{"id", "slug"}
	refMissionFields   = []string{"id", "metadata"}
	refEnvelopeFields  = []string{"jsonrpc", "id", "method", "params"}
)

// refSurrogateEscape reads the \uXXXX escape at b[i:] (b is valid JSON, so the
// hex digits are there) and returns its length in bytes (12 for a high+low
// surrogate pair, else 6) and whether it is a lone surrogate.
func refSurrogateEscape(b []byte, i int) (int, bool) {
	u := refHex4(b[i+2 : i+6])
	switch {
	case u >= 0xDC00 && u <= 0xDFFF:
		return 6, true
	case u >= 0xD800 && u <= 0xDBFF:
		if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
			if low := refHex4(b[i+8 : i+12]); low >= 0xDC00 && low <= 0xDFFF {
				return 12, false
			}
		}
		return 6, true
	}
	return 6, false
}

func refHex4(h []byte) int {
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

func refQuote(s string) string {
	b, _ := json.Marshal(s)
	if len(b) > 80 {
		b = append(bytes.Clone(b[:77]), "..."...)
	}
	return string(b)
}

// referenceIsJSONObject reports whether b is exactly one valid JSON object (UTF-8,
// nesting at most MaxDepth, no lone surrogate escape, no duplicate keys at
// any depth).
func referenceIsJSONObject(b []byte) bool {
	if !utf8.Valid(b) || !gjson.ValidBytes(b) {
		return false
	}
	if f := refScanJSON(b); f.depth > MaxDepth || f.lone || f.dup {
		return false
	}
	return gjson.ParseBytes(b).IsObject()
}

// refJSONFacts is what one pass over a valid JSON document finds.
type refJSONFacts struct {
	depth  int    // deepest nesting of objects and arrays
	lone   bool   // a string holds an escaped lone UTF-16 surrogate
	dup    bool   // an object holds the same key twice (after unescaping)
	dupKey string // the first duplicated key
}

// refKeyRef is one object key seen so far: its raw bytes between the quotes,
// unescaped when it held an escape.
type refKeyRef []byte

// refObjFrame is one open container; for objects, keys[start:] are its keys
// and seen indexes them once there are many.
type refObjFrame struct {
	object    bool
	expectKey bool
	start     int
	seen      map[string]struct{}
}

// refManyKeys is the key count past which an object's keys are indexed in a map
// rather than compared one by one.
const refManyKeys = 32

// refScanJSON walks b, which must be valid JSON (gjson.ValidBytes), once:
// nesting depth, lone surrogate escapes (see refSurrogateEscape) and duplicate
// object keys at any depth, keys compared after JSON unescaping. It stops at
// the first duplicate. Keys without escapes are compared in place (no
// allocation).
func refScanJSON(b []byte) refJSONFacts {
	var (
		f        refJSONFacts
		frameBuf [16]refObjFrame
		keyBuf   [64]refKeyRef
	)
	stack, keys := frameBuf[:0], keyBuf[:0] // on the stack for ordinary bodies
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '{', '[':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].expectKey = false
			}
			stack = append(stack, refObjFrame{object: c == '{', expectKey: c == '{', start: len(keys)})
			if len(stack) > f.depth {
				f.depth = len(stack)
			}
		case '}', ']':
			top := stack[len(stack)-1]
			keys = keys[:top.start]
			stack = stack[:len(stack)-1]
		case ',':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].expectKey = true
			}
		case ':':
			stack[len(stack)-1].expectKey = false
		case '"':
			start := i + 1
			escaped := false
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					escaped = true
					if b[i+1] == 'u' {
						n, lone := refSurrogateEscape(b, i)
						if lone {
							f.lone = true
						}
						i += n - 1
						continue
					}
					i++
				}
			}
			n := len(stack)
			if n == 0 || !stack[n-1].object || !stack[n-1].expectKey {
				continue // a value
			}
			key := refKeyRef(b[start:i])
			if escaped {
				var s string
				if err := json.Unmarshal(b[start-1:i+1], &s); err == nil {
					key = refKeyRef(s)
				}
			}
			top := &stack[n-1]
			if top.seen != nil {
				if _, ok := top.seen[string(key)]; ok {
					f.dup, f.dupKey = true, string(key)
					return f
				}
				top.seen[string(key)] = struct{}{}
			} else {
				for _, k := range keys[top.start:] {
					if bytes.Equal(k, key) {
						f.dup, f.dupKey = true, string(key)
						return f
					}
				}
				if len(keys)-top.start+1 > refManyKeys {
					top.seen = make(map[string]struct{}, 2*refManyKeys)
					for _, k := range keys[top.start:] {
						top.seen[string(k)] = struct{}{}
					}
					top.seen[string(key)] = struct{}{}
				}
			}
			keys = append(keys, key)
		}
	}
	return f
}

// refFoldDuplicate is the case-folding rule written independently of
// scanJSON (added with it): in the envelope, params, params.action_request,
// params.surface_request, and the actor, workspace and mission objects of
// those three, no two keys equal under strings.EqualFold.
func refFoldDuplicate(root gjson.Result) bool {
	objs := []gjson.Result{root}
	if params := refMember(root, "params"); params.IsObject() {
		reqs := []gjson.Result{params}
		for _, w := range []string{"action_request", "surface_request"} {
			if v := refMember(params, w); v.IsObject() {
				reqs = append(reqs, v)
			}
		}
		for _, r := range reqs {
			objs = append(objs, r)
			for _, m := range []string{"actor", "workspace", "mission"} {
				if v := refMember(r, m); v.IsObject() {
					objs = append(objs, v)
				}
			}
		}
	}
	for _, o := range objs {
		var keys []string
		dup := false
		o.ForEach(func(k, _ gjson.Result) bool {
			for _, p := range keys {
				if strings.EqualFold(p, k.Str) {
					dup = true
					return false
				}
			}
			keys = append(keys, k.Str)
			return true
		})
		if dup {
			return true
		}
	}
	return false
}

// refMember is the member of obj named exactly name (after unescaping).
func refMember(obj gjson.Result, name string) gjson.Result {
	var v gjson.Result
	obj.ForEach(func(k, val gjson.Result) bool {
		if k.Str == name {
			v = val
			return false
		}
		return true
	})
	return v
}
