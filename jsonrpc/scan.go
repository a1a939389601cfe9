package jsonrpc

import (
	"strings"

	"github.com/supervaize/supervaizer-sidecar/strictjson"
)

// The members Parse reads, each named once: the envelope's in
// envelopeFields, a request object's in requestFields (its path, the SDK
// model's rule for it and where its value goes in the Call). One scan of the
// body (strictjson.Scan with the schema built from both tables) checks the
// strict-JSON rules and records where each of their values lies; Parse and
// readRequest then read the values from the body.

// Members of the envelope, by path from the root.
const (
	eJSONRPC = iota
	eID
	eMethod
	eParams
	eActionRequest  // params.action_request
	eSurfaceRequest // params.surface_request
	nEnvelope
)

var envelopeFields = [nEnvelope]string{
	eJSONRPC:        "jsonrpc",
	eID:             "id",
	eMethod:         "method",
	eParams:         "params",
	eActionRequest:  "params.action_request",
	eSurfaceRequest: "params.surface_request",
}

// Request objects: params itself, params.action_request and
// params.surface_request. Parse decides which one it reads once it knows the
// method, which may come after params in the body, so all three are
// recorded, each with its own members.
const (
	reqParams  = 0
	reqAction  = 1
	reqSurface = 2
	nReq       = 3
)

var requestPrefixes = [nReq]string{
	reqParams:  "params.",
	reqAction:  "params.action_request.",
	reqSurface: "params.surface_request.",
}

// rule is what the SDK's V2ActionRequest / V2SurfaceRequest model requires
// of a member (docs/sdk-wire.md, "JSON-RPC messages").
type rule uint8

const (
	ruleString    rule = iota // a string (-32602 when absent, null or another type)
	ruleOptString             // a string, null or absent
	ruleObject                // an object (-32602 when absent, null or another type)
	ruleOptObject             // an object, null or absent
	ruleInput                 // absent or an object (null refused); Call.Input
	ruleMissionID             // a string equal to mission_id
	ruleAbsent                // absent or null: set by the controller only
)

// requestField is one member of a request object readRequest reads.
type requestField struct {
	path   string              // from the request object, dot-separated
	rule   rule                //
	action bool                // read for supervaizer/action.invoke only
	dst    func(*Call) *string // where a string value goes (nil: checked only)
}

// requestFields are checked in this order; the first problem is the
// -32602's Detail. A member whose parent object is absent or null is not
// checked (a required parent is refused before its members).
var requestFields = [...]requestField{
	{path: "request_id", rule: ruleString, dst: func(c *Call) *string { return &c.RequestID }},
	{path: "actor", rule: ruleObject},
	{path: "actor.user_id", rule: ruleString, dst: func(c *Call) *string { return &c.ActorUserID }},
	{path: "workspace", rule: ruleObject},
	{path: "workspace.id", rule: ruleString, dst: func(c *Call) *string { return &c.WorkspaceID }},
	{path: "workspace.slug", rule: ruleOptString, dst: func(c *Call) *string { return &c.WorkspaceSlug }},
	{path: "mission_id", rule: ruleString, dst: func(c *Call) *string { return &c.MissionID }},
	{path: "agent_slug", rule: ruleString, dst: func(c *Call) *string { return &c.AgentSlug }},
	{path: "surface", rule: ruleString, dst: func(c *Call) *string { return &c.Surface }},
	{path: "action", rule: ruleString, action: true, dst: func(c *Call) *string { return &c.Action }},
	{path: "idempotency_key", rule: ruleOptString, action: true, dst: func(c *Call) *string { return &c.IdempotencyKey }},
	{path: "job_id", rule: ruleOptString, dst: func(c *Call) *string { return &c.JobID }},
	{path: "draft_session_id", rule: ruleOptString, dst: func(c *Call) *string { return &c.DraftSessionID }},
	{path: "case_id", rule: ruleOptString, dst: func(c *Call) *string { return &c.CaseID }},
	{path: "step_id", rule: ruleOptString, dst: func(c *Call) *string { return &c.StepID }},
	{path: "input", rule: ruleInput},
	{path: "mission", rule: ruleOptObject},
	{path: "mission.id", rule: ruleMissionID},
	{path: "mission.metadata", rule: ruleOptObject},
	{path: "workspace_authorization", rule: ruleAbsent},
}

const nFields = len(requestFields)

// At most 64 request fields (textFields is a bit set).
var _ [64 - nFields]struct{}

// Spans of fields: the envelope's members, then request object r's members
// at sReq + r*nFields + (index in requestFields).
const (
	sReq   = nEnvelope
	nSpans = sReq + nReq*nFields
)

// fields holds the value spans of the members Parse reads, filled by one
// scan of the body.
type fields [nSpans]strictjson.Span

var (
	// schema is the strictjson schema of both tables, span i for path i.
	schema = func() *strictjson.Schema {
		paths := envelopeFields[:]
		for _, prefix := range requestPrefixes {
			for _, f := range requestFields {
				paths = append(paths, prefix+f.path)
			}
		}
		return strictjson.NewSchema(paths)
	}()
	// parents[i] is the index in requestFields of field i's parent object
	// (-1: the request itself).
	parents = func() (p [nFields]int) {
		for i, f := range requestFields {
			p[i] = -1
			if dot := strings.LastIndexByte(f.path, '.'); dot >= 0 {
				p[i] = fieldIndex(f.path[:dot])
			}
		}
		return p
	}()
	// textFields: bit i when field i's string value is read (its value
	// goes to the Call, or is compared).
	textFields = func() (m uint64) {
		for i, f := range requestFields {
			if f.dst != nil || f.rule == ruleMissionID {
				m |= 1 << i
			}
		}
		return m
	}()
	fInput = fieldIndex("input")
	fJobID = fieldIndex("job_id")
)

// fieldIndex returns the index in requestFields of path; it panics when
// there is none (at init).
func fieldIndex(path string) int {
	for i, f := range requestFields {
		if f.path == path {
			return i
		}
	}
	panic("jsonrpc: no request field " + path)
}

// scan checks body (any bytes: see strictjson.Scan) and records the spans
// of the members Parse reads in f.
func scan(body []byte, f *fields) strictjson.Facts {
	return strictjson.Scan(body, MaxDepth, schema, f[:])
}

// get returns the value recorded at span i.
func (f *fields) get(body []byte, i int) []byte {
	return body[f[i].Start:f[i].End]
}
