package jsonrpc_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// fixtureRequest returns the SDK fixture's job.start action request
// (../shared/fixtures/agent_interviewer_mvp.json, key "action_request").
func fixtureRequest(t testing.TB) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../test/testdata/agent_interviewer_mvp.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		ActionRequest map[string]any `json:"action_request"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if f.ActionRequest == nil {
		t.Fatal("fixture has no action_request")
	}
	return f.ActionRequest
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// body builds {"jsonrpc":"2.0","id":7,"method":method,"params":{wrapper: req}}
// (params is req itself when wrapper is "").
func body(t testing.TB, method, wrapper string, req map[string]any) []byte {
	t.Helper()
	var params any = req
	if wrapper != "" {
		params = map[string]any{wrapper: req}
	}
	return mustMarshal(t, map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
}

// edited returns the fixture request with edit applied.
func edited(t testing.TB, edit func(r map[string]any)) map[string]any {
	t.Helper()
	r := fixtureRequest(t)
	if edit != nil {
		edit(r)
	}
	return r
}

func actionBody(t testing.TB, edit func(r map[string]any)) []byte {
	return body(t, jsonrpc.MethodActionInvoke, "action_request", edited(t, edit))
}

// replaceOnce replaces the single occurrence of old in b, failing if old does
// not occur exactly once.
func replaceOnce(t testing.TB, b []byte, old, repl string) []byte {
	t.Helper()
	if n := bytes.Count(b, []byte(old)); n != 1 {
		t.Fatalf("%q occurs %d times in %s", old, n, b)
	}
	return bytes.Replace(b, []byte(old), []byte(repl), 1)
}

func TestParseFixtureJobStart(t *testing.T) {
	for _, wrapper := range []string{"action_request", ""} {
		t.Run("wrapper="+wrapper, func(t *testing.T) {
			c, e := jsonrpc.Parse(body(t, jsonrpc.MethodActionInvoke, wrapper, fixtureRequest(t)))
			if e != nil {
				t.Fatalf("Parse: %v", e)
			}
			want := jsonrpc.Call{
				ID:             json.RawMessage("7"),
				Method:         jsonrpc.MethodActionInvoke,
				RequestID:      "req_start_123",
				ActorUserID:    "user_123",
				WorkspaceID:    "workspace_123",
				WorkspaceSlug:  "acme",
				MissionID:      "mission_123",
				AgentSlug:      "agent_interviewer",
				Surface:        "job.start",
				Action:         "job.start",
				IdempotencyKey: "idem_start_campaign_123",
				JobID:          "job_123",
			}
			if string(c.ID) != string(want.ID) || c.Method != want.Method || c.RequestID != want.RequestID ||
				c.ActorUserID != want.ActorUserID || c.WorkspaceID != want.WorkspaceID ||
				c.WorkspaceSlug != want.WorkspaceSlug || c.MissionID != want.MissionID ||
				c.AgentSlug != want.AgentSlug || c.Surface != want.Surface || c.Action != want.Action ||
				c.IdempotencyKey != want.IdempotencyKey || c.JobID != want.JobID {
				t.Fatalf("got %+v\nwant %+v", *c, want)
			}
			var in map[string]any
			if err := json.Unmarshal(c.Input, &in); err != nil || in["campaign_id"] != "campaign_123" || len(in) != 1 {
				t.Fatalf("input %s (%v)", c.Input, err)
			}
			if !c.IsAction() || c.Target() != "job.start" {
				t.Fatalf("IsAction %v Target %q", c.IsAction(), c.Target())
			}
		})
	}
}

// TestParseInputIsRawSlice: Input is the raw JSON of the body, byte for byte.
func TestParseInputIsRawSlice(t *testing.T) {
	b := []byte(`{"jsonrpc":"2.0","id":1,"method":"supervaizer/action.invoke","params":{"request_id":"r","actor":{"user_id":"u"},` +
		`"workspace":{"id":"w"},"mission_id":"m","agent_slug":"a","surface":"s","action":"x","input": { "k" : [1, 2.50, "\u00e9"] } }}`)
	c, e := jsonrpc.Parse(b)
	if e != nil {
		t.Fatal(e)
	}
	if want := `{ "k" : [1, 2.50, "\u00e9"] }`; string(c.Input) != want {
		t.Fatalf("Input %q, want %q", c.Input, want)
	}
	// Absent input is {}.
	c, e = jsonrpc.Parse(actionBody(t, func(r map[string]any) { delete(r, "input") }))
	if e != nil || string(c.Input) != "{}" {
		t.Fatalf("absent input: %v %q", e, c.Input)
	}
}

// parseErrorCase is a body Parse refuses and the code it answers.
type parseErrorCase struct {
	name string
	body string
	code int
}

// parseErrorCases are TestParseErrors' bodies: every error class of Parse.
func parseErrorCases(t testing.TB) []parseErrorCase {
	valid := string(actionBody(t, nil))
	cases := []parseErrorCase{
		// -32700
		{"empty body", ``, jsonrpc.CodeParseError},
		{"whitespace only", "  \n", jsonrpc.CodeParseError},
		{"invalid UTF-8 in a string", strings.Replace(valid, "acme", "ac\xffme", 1), jsonrpc.CodeParseError},
		{"invalid UTF-8 in a key", strings.Replace(valid, `"slug"`, "\"sl\xc3ug\"", 1), jsonrpc.CodeParseError},
		{"overlong UTF-8", strings.Replace(valid, "acme", "ac\xc0\xafme", 1), jsonrpc.CodeParseError},
		{"UTF-8 BOM", "\xef\xbb\xbf" + valid, jsonrpc.CodeParseError},
		{"UTF-16 BOM", "\xfe\xff" + valid, jsonrpc.CodeParseError},
		{"NaN", strings.Replace(valid, `"id":7`, `"id":NaN`, 1), jsonrpc.CodeParseError},
		{"Infinity", strings.Replace(valid, `"campaign_id":"campaign_123"`, `"n":Infinity`, 1), jsonrpc.CodeParseError},
		{"-Infinity", strings.Replace(valid, `"campaign_id":"campaign_123"`, `"n":-Infinity`, 1), jsonrpc.CodeParseError},
		{"line comment", "// c\n" + valid, jsonrpc.CodeParseError},
		{"block comment", strings.Replace(valid, `"id":7`, `"id":/* c */7`, 1), jsonrpc.CodeParseError},
		{"trailing object", valid + ` {}`, jsonrpc.CodeParseError},
		{"trailing garbage", valid + `x`, jsonrpc.CodeParseError},
		{"trailing NUL", valid + "\x00", jsonrpc.CodeParseError},
		{"single quotes", `{'jsonrpc':'2.0'}`, jsonrpc.CodeParseError},
		{"trailing comma", strings.Replace(valid, `"id":7,`, `"id":7,,`, 1), jsonrpc.CodeParseError},
		{"unquoted key", `{jsonrpc:"2.0"}`, jsonrpc.CodeParseError},
		{"raw control char in string", strings.Replace(valid, "acme", "ac\x01me", 1), jsonrpc.CodeParseError},
		{"leading zero", strings.Replace(valid, `"id":7`, `"id":07`, 1), jsonrpc.CodeParseError},
		{"hex number", strings.Replace(valid, `"id":7`, `"id":0x7`, 1), jsonrpc.CodeParseError},
		{"truncated", valid[:len(valid)-1], jsonrpc.CodeParseError},
		// -32600
		{"batch", `[` + valid + `]`, jsonrpc.CodeInvalidRequest},
		{"empty batch", `[]`, jsonrpc.CodeInvalidRequest},
		{"string", `"x"`, jsonrpc.CodeInvalidRequest},
		{"number", `7`, jsonrpc.CodeInvalidRequest},
		{"null", `null`, jsonrpc.CodeInvalidRequest},
		// ids the SDK cannot echo: HTTP 400 (refusal.Refusal.HTTPLevel)
		{"id object", strings.Replace(valid, `"id":7`, `"id":{}`, 1), jsonrpc.CodeInvalidRequest},
		{"id array", strings.Replace(valid, `"id":7`, `"id":[7]`, 1), jsonrpc.CodeInvalidRequest},
		{"id fractional", strings.Replace(valid, `"id":7`, `"id":1.5`, 1), jsonrpc.CodeInvalidRequest},
		{"id too large for a float", strings.Replace(valid, `"id":7`, `"id":1e400`, 1), jsonrpc.CodeInvalidRequest},
		// -32602: the SDK's envelope model (JsonRpcRequest)
		{"jsonrpc 1.0", strings.Replace(valid, `"jsonrpc":"2.0"`, `"jsonrpc":"1.0"`, 1), jsonrpc.CodeInvalidParams},
		{"jsonrpc number", strings.Replace(valid, `"jsonrpc":"2.0"`, `"jsonrpc":2.0`, 1), jsonrpc.CodeInvalidParams},
		{"jsonrpc null", strings.Replace(valid, `"jsonrpc":"2.0"`, `"jsonrpc":null`, 1), jsonrpc.CodeInvalidParams},
		{"jsonrpc 2.0 with space", strings.Replace(valid, `"jsonrpc":"2.0"`, `"jsonrpc":"2.0 "`, 1), jsonrpc.CodeInvalidParams},
		{"method missing", `{"jsonrpc":"2.0","id":1,"params":{}}`, jsonrpc.CodeInvalidParams},
		{"method number", `{"jsonrpc":"2.0","id":1,"method":5,"params":{}}`, jsonrpc.CodeInvalidParams},
		{"method null", `{"jsonrpc":"2.0","id":1,"method":null,"params":{}}`, jsonrpc.CodeInvalidParams},
		{"params array, unknown method", `{"jsonrpc":"2.0","id":1,"method":"x","params":[]}`, jsonrpc.CodeInvalidParams},
		// -32601
		{"unknown method", `{"jsonrpc":"2.0","id":1,"method":"supervaizer/other","params":{}}`, jsonrpc.CodeMethodNotFound},
		{"method case differs", `{"jsonrpc":"2.0","id":1,"method":"Supervaizer/action.invoke","params":{}}`, jsonrpc.CodeMethodNotFound},
		{"empty method", `{"jsonrpc":"2.0","id":1,"method":"","params":{}}`, jsonrpc.CodeMethodNotFound},
		// -32602 on the envelope
		{"params missing", `{"jsonrpc":"2.0","id":1,"method":"supervaizer/action.invoke"}`, jsonrpc.CodeInvalidParams},
		{"params array", `{"jsonrpc":"2.0","id":1,"method":"supervaizer/action.invoke","params":[]}`, jsonrpc.CodeInvalidParams},
		{"params null", `{"jsonrpc":"2.0","id":1,"method":"supervaizer/action.invoke","params":null}`, jsonrpc.CodeInvalidParams},
		{"action_request array", `{"jsonrpc":"2.0","id":1,"method":"supervaizer/action.invoke","params":{"action_request":[]}}`, jsonrpc.CodeInvalidParams},
		{"action_request null", `{"jsonrpc":"2.0","id":1,"method":"supervaizer/action.invoke","params":{"action_request":null}}`, jsonrpc.CodeInvalidParams},
		{"surface_request string", `{"jsonrpc":"2.0","id":1,"method":"supervaizer/surface.load","params":{"surface_request":"x"}}`, jsonrpc.CodeInvalidParams},
		{"empty action_request", `{"jsonrpc":"2.0","id":1,"method":"supervaizer/action.invoke","params":{"action_request":{}}}`, jsonrpc.CodeInvalidParams},
	}
	return cases
}

// TestParseErrors: every error class of Parse, with the code and whether the
// request id is echoed.
func TestParseErrors(t *testing.T) {
	cases := parseErrorCases(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			call, e := jsonrpc.Parse([]byte(c.body))
			if e == nil {
				t.Fatalf("accepted: %+v", call)
			}
			if e.RPCCode != c.code {
				t.Fatalf("code %d (%s), want %d", e.RPCCode, e.Message, c.code)
			}
			checkIDEcho(t, []byte(c.body), call, e)
		})
	}
}

// checkIDEcho: -32700 and -32600 never carry the request id; -32601 and
// -32602 echo it.
func checkIDEcho(t *testing.T, b []byte, call *jsonrpc.Call, e *refusal.Refusal) {
	t.Helper()
	switch e.RPCCode {
	case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest:
		if call != nil && string(call.ID) != "null" {
			t.Fatalf("code %d echoes id %s", e.RPCCode, call.ID)
		}
	case jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidParams:
		if call == nil {
			t.Fatalf("code %d: no call, id not echoed", e.RPCCode)
		}
		var env struct {
			ID json.RawMessage `json:"id"`
		}
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatal(err)
		}
		want := string(env.ID)
		if want == "" {
			want = "null"
		}
		if string(call.ID) != want {
			t.Fatalf("id %s, want %s", call.ID, want)
		}
	}
}

func TestMethodNotFoundMessage(t *testing.T) {
	_, e := jsonrpc.Parse([]byte(`{"jsonrpc":"2.0","id":"a","method":"tasks/send","params":{}}`))
	if e == nil || e.RPCCode != -32601 || e.Message != "Method not found: tasks/send" {
		t.Fatalf("%+v", e)
	}
	if e.Error() != "jsonrpc -32601: Method not found: tasks/send" {
		t.Fatalf("Error() = %q", e.Error())
	}
}

// TestDuplicateKeys: a duplicate key at any level that matters is -32600,
// including a duplicate spelled with escapes (Python keeps the last value).
// bodyCase is a named request body.
type bodyCase struct {
	name string
	body []byte
}

// duplicateKeyCases are TestDuplicateKeys' bodies: a key twice (spelled
// alike or with escapes) in every object of a request.
func duplicateKeyCases(t testing.TB) []bodyCase {
	valid := actionBody(t, nil)
	surface := body(t, jsonrpc.MethodSurfaceLoad, "surface_request", fixtureRequest(t))
	cases := []bodyCase{
		{"envelope method", replaceOnce(t, valid, `"method":"supervaizer/action.invoke"`,
			`"method":"supervaizer/action.invoke","method":"supervaizer/surface.load"`)},
		{"envelope jsonrpc", replaceOnce(t, valid, `"jsonrpc":"2.0"`, `"jsonrpc":"2.0","jsonrpc":"2.0"`)},
		{"envelope id", replaceOnce(t, valid, `"id":7`, `"id":7,"id":8`)},
		{"envelope params", replaceOnce(t, valid, `"method":`, `"params":{},"method":`)},
		{"escaped envelope key", replaceOnce(t, valid, `"method":"supervaizer/action.invoke"`,
			`"method":"supervaizer/action.invoke","\u006dethod":"supervaizer/surface.load"`)},
		{"params action_request", replaceOnce(t, valid, `"params":{`, `"params":{"action_request":{},`)},
		{"params action_request escaped", replaceOnce(t, valid, `"params":{`, `"params":{"action\u005frequest":{},`)},
		{"action", replaceOnce(t, valid, `"action":"job.start"`, `"action":"job.start","action":"job.stop"`)},
		{"action escaped", replaceOnce(t, valid, `"action":"job.start"`, `"action":"job.start","\u0061ction":"job.stop"`)},
		{"action escaped first", replaceOnce(t, valid, `"action":"job.start"`, `"\u0061ction":"job.stop","action":"job.start"`)},
		{"action all escaped", replaceOnce(t, valid, `"action":"job.start"`, `"action":"job.start","\u0061\u0063\u0074\u0069\u006f\u006e":"job.stop"`)},
		{"agent_slug", replaceOnce(t, valid, `"agent_slug":"agent_interviewer"`, `"agent_slug":"agent_interviewer","agent_slug":"other"`)},
		{"agent_slug escaped", replaceOnce(t, valid, `"agent_slug":"agent_interviewer"`, `"agent_slug":"agent_interviewer","agent\u005Fslug":"other"`)},
		{"surface", replaceOnce(t, valid, `"surface":"job.start"`, `"surface":"job.start","surface":"x"`)},
		{"workspace", replaceOnce(t, valid, `"workspace":{`, `"workspace":{"id":"w2"},"workspace":{`)},
		{"workspace.id", replaceOnce(t, valid, `"id":"workspace_123"`, `"id":"workspace_123","id":"workspace_999"`)},
		{"workspace.id escaped", replaceOnce(t, valid, `"id":"workspace_123"`, `"id":"workspace_123","\u0069d":"workspace_999"`)},
		{"workspace.slug", replaceOnce(t, valid, `"slug":"acme"`, `"slug":"acme","slug":"evil"`)},
		{"actor.user_id", replaceOnce(t, valid, `"user_id":"user_123"`, `"user_id":"user_123","user_id":"admin"`)},
		{"idempotency_key", replaceOnce(t, valid, `"idempotency_key":"idem_start_campaign_123"`,
			`"idempotency_key":"idem_start_campaign_123","idempotency_key":"k2"`)},
		{"mission_id", replaceOnce(t, valid, `"mission_id":"mission_123"`, `"mission_id":"mission_123","mission_id":"m2"`)},
		{"input member", replaceOnce(t, valid, `"campaign_id":"campaign_123"`, `"campaign_id":"campaign_123","campaign_id":"c2"`)},
		{"deep in input array", replaceOnce(t, valid, `"campaign_id":"campaign_123"`, `"campaign_id":"campaign_123","l":[1,{"a":{"b":1,"b":2}}]`)},
		{"surface_request surface", replaceOnce(t, surface, `"surface":"job.start"`, `"surface":"job.start","surf\u0061ce":"x"`)},
		{"surface_request wrapper", replaceOnce(t, surface, `"params":{`, `"params":{"surface_request":{},`)},
		// Keys that differ only after decoding different escapes of the same character.
		{"two escapes of one key", replaceOnce(t, valid, `"campaign_id":"campaign_123"`, `"\u00e9":1,"\u00E9":2`)},
		{"escape vs raw non-ASCII", replaceOnce(t, valid, `"campaign_id":"campaign_123"`, `"é":1,"\u00e9":2`)},
		{"surrogate pair vs raw", replaceOnce(t, valid, `"campaign_id":"campaign_123"`, `"😀":1,"\ud83d\ude00":2`)},
		{"escaped solidus", replaceOnce(t, valid, `"campaign_id":"campaign_123"`, `"a/b":1,"a\/b":2`)},
	}
	return cases
}

func TestDuplicateKeys(t *testing.T) {
	valid := actionBody(t, nil)
	cases := duplicateKeyCases(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !json.Valid(c.body) {
				t.Fatalf("test body is not JSON: %s", c.body)
			}
			call, e := jsonrpc.Parse(c.body)
			if e == nil || e.RPCCode != jsonrpc.CodeInvalidRequest {
				t.Fatalf("got %v (%+v), want -32600", e, call)
			}
			if !strings.Contains(e.Message, "duplicate") {
				t.Fatalf("message %q", e.Message)
			}
			checkIDEcho(t, c.body, call, e)
		})
	}
	// Keys that merely look alike are not duplicates.
	for _, b := range [][]byte{
		replaceOnce(t, valid, `"campaign_id":"campaign_123"`, `"a":1,"A":2,"a ":3,"\u0000a":4,"a\u0000":5`),
		replaceOnce(t, valid, `"campaign_id":"campaign_123"`, `"x":{"a":1},"y":{"a":1},"z":[{"a":1},{"a":1}]`),
	} {
		if _, e := jsonrpc.Parse(b); e != nil {
			t.Fatalf("distinct keys refused: %v\n%s", e, b)
		}
	}
	// An escaped key is read as its decoded name, as Python reads it.
	b := replaceOnce(t, valid, `"action":"job.start"`, `"\u0061ction":"job.stop"`)
	if c, e := jsonrpc.Parse(b); e != nil || c.Action != "job.stop" {
		t.Fatalf("escaped action key: %v %+v", e, c)
	}
}

// TestCaseFoldedKeys: in the objects the gate reads, two keys that Go's
// encoding/json would both match to one field (equal under Unicode case
// folding) are refused: a Go agent could act on the one the gate did not
// check. Elsewhere (input, mission.metadata) such keys are data and pass.
func TestCaseFoldedKeys(t *testing.T) {
	valid := actionBody(t, nil)
	surface := body(t, jsonrpc.MethodSurfaceLoad, "surface_request", fixtureRequest(t))
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"action", replaceOnce(t, valid, `"action":"job.start"`, `"action":"job.start","Action":"job.sync"`)},
		{"action first", replaceOnce(t, valid, `"action":"job.start"`, `"ACTION":"job.sync","action":"job.start"`)},
		{"escaped Action", replaceOnce(t, valid, `"action":"job.start"`, `"action":"job.start","\u0041ction":"job.sync"`)},
		{"envelope Method", replaceOnce(t, valid, `"method":`, `"Method":"x","method":`)},
		{"envelope params long s", replaceOnce(t, valid, `"method":`, `"param\u017f":{},"method":`)},
		{"request Workspace", replaceOnce(t, valid, `"workspace":{`, `"Workspace":{"id":"w2"},"workspace":{`)},
		{"workspace Id", replaceOnce(t, valid, `"id":"workspace_123"`, `"id":"workspace_123","Id":"workspace_999"`)},
		{"actor User_Id", replaceOnce(t, valid, `"user_id":"user_123"`, `"user_id":"user_123","User_Id":"admin"`)},
		{"params Action_Request", replaceOnce(t, valid, `"params":{`, `"params":{"Action_Request":{},`)},
		{"kelvin sign", replaceOnce(t, valid, `"idempotency_key":`, `"idempotency_\u212aey":"k2","idempotency_key":`)},
		{"surface_request Surface", replaceOnce(t, surface, `"surface":"job.start"`, `"surface":"job.start","Surface":"x"`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !json.Valid(c.body) {
				t.Fatalf("test body is not JSON: %s", c.body)
			}
			call, e := jsonrpc.Parse(c.body)
			if e == nil || e.RPCCode != jsonrpc.CodeInvalidRequest || !strings.Contains(e.Message, "letter case") {
				t.Fatalf("got %v (%+v), want -32600 for keys equal but for case", e, call)
			}
		})
	}
	// Many keys in a read object (the set path) and in input (not read).
	var many []string
	for i := range 40 {
		many = append(many, fmt.Sprintf(`"k%d":%d`, i, i))
	}
	manyRead := replaceOnce(t, valid, `"action":"job.start"`, `"action":"job.start",`+strings.Join(many, ",")+`,"K39":1`)
	if _, e := jsonrpc.Parse(manyRead); e == nil || !strings.Contains(e.Message, "letter case") {
		t.Fatalf("case-folded key among 41 in the request: %v", e)
	}
	for _, b := range [][]byte{
		replaceOnce(t, valid, `"campaign_id":"campaign_123"`, `"a":1,"A":2,"Name":"x","name":"y"`),
		replaceOnce(t, valid, `"campaign_id":"campaign_123"`, strings.Join(many, ",")+`,"K39":1`),
	} {
		if _, e := jsonrpc.Parse(b); e != nil {
			t.Fatalf("case-variant keys in input refused: %v", e)
		}
	}
}

// nested returns n nested arrays: [[...]].
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

func TestDepthLimit(t *testing.T) {
	valid := actionBody(t, nil)
	withX := func(x string) []byte { return replaceOnce(t, valid, `"jsonrpc":"2.0"`, `"x":`+x+`,"jsonrpc":"2.0"`) }
	// The envelope is depth 1, so "x" may nest MaxDepth-1 levels.
	if _, e := jsonrpc.Parse(withX(nested(jsonrpc.MaxDepth - 1))); e != nil {
		t.Fatalf("depth %d refused: %v", jsonrpc.MaxDepth, e)
	}
	for _, n := range []int{jsonrpc.MaxDepth, jsonrpc.MaxDepth + 1, 10000} {
		_, e := jsonrpc.Parse(withX(nested(n)))
		if e == nil || e.RPCCode != jsonrpc.CodeInvalidRequest {
			t.Fatalf("depth %d: %v, want -32600", n+1, e)
		}
	}
	// Objects count as well as arrays.
	deepObj := strings.Repeat(`{"a":`, jsonrpc.MaxDepth) + "1" + strings.Repeat("}", jsonrpc.MaxDepth)
	if _, e := jsonrpc.Parse(withX(deepObj)); e == nil || e.RPCCode != jsonrpc.CodeInvalidRequest {
		t.Fatalf("deep objects: %v", e)
	}
	// Brackets inside strings (escaped quotes included) do not count.
	s := `"\"` + strings.Repeat("[{", 200) + `\\"`
	if _, e := jsonrpc.Parse(withX(s)); e != nil {
		t.Fatalf("brackets in string: %v", e)
	}
}

// paramsCase is one edit of the fixture's request and whether Parse accepts it.
type paramsCase struct {
	name string
	edit func(r map[string]any)
	ok   bool
}

// invalidParamsCases are TestInvalidParams' edits: every required field
// missing, null or mistyped, and the other request rules, for action requests
// and (the fields without action / idempotency_key) surface requests.
func invalidParamsCases() (action, surface []paramsCase) {
	type edit = func(r map[string]any)
	sub := func(obj, key string, v any) edit {
		return func(r map[string]any) { r[obj].(map[string]any)[key] = v }
	}
	del := func(key string) edit { return func(r map[string]any) { delete(r, key) } }
	delSub := func(obj, key string) edit { return func(r map[string]any) { delete(r[obj].(map[string]any), key) } }
	set := func(key string, v any) edit { return func(r map[string]any) { r[key] = v } }

	cases := []paramsCase{
		{"request_id missing", del("request_id"), false},
		{"request_id null", set("request_id", nil), false},
		{"request_id number", set("request_id", 5), false},
		{"actor missing", del("actor"), false},
		{"actor null", set("actor", nil), false},
		{"actor string", set("actor", "user_123"), false},
		{"actor.user_id missing", delSub("actor", "user_id"), false},
		{"actor.user_id number", sub("actor", "user_id", 1), false},
		{"workspace missing", del("workspace"), false},
		{"workspace null", set("workspace", nil), false},
		{"workspace array", set("workspace", []any{}), false},
		{"workspace.id missing", delSub("workspace", "id"), false},
		{"workspace.id null", sub("workspace", "id", nil), false},
		{"workspace.id object", sub("workspace", "id", map[string]any{}), false},
		{"workspace.slug number", sub("workspace", "slug", 3), false},
		{"workspace.slug null", sub("workspace", "slug", nil), true},
		{"workspace.slug missing", delSub("workspace", "slug"), true},
		{"mission_id missing", del("mission_id"), false},
		{"mission_id number", set("mission_id", 123), false},
		{"agent_slug missing", del("agent_slug"), false},
		{"agent_slug bool", set("agent_slug", true), false},
		{"surface missing", del("surface"), false},
		{"surface list", set("surface", []any{"job.start"}), false},
		{"action missing", del("action"), false},
		{"action null", set("action", nil), false},
		{"action number", set("action", 1), false},
		{"idempotency_key number", set("idempotency_key", 1), false},
		{"idempotency_key null", set("idempotency_key", nil), true},
		{"job_id number", set("job_id", 1), false},
		{"draft_session_id number", set("draft_session_id", 1), false},
		{"case_id object", set("case_id", map[string]any{}), false},
		{"step_id list", set("step_id", []any{"s"}), false},
		{"case_id null", set("case_id", nil), true},
		{"job_id null", set("job_id", nil), true},
		{"input string", set("input", "x"), false},
		{"input array", set("input", []any{}), false},
		{"input null", set("input", nil), false},
		{"input number", set("input", 1), false},
		{"mission string", set("mission", "m"), false},
		{"mission null", set("mission", nil), true},
		{"mission without id", set("mission", map[string]any{"name": "n"}), false},
		{"mission id number", set("mission", map[string]any{"id": 1}), false},
		{"mission id differs", set("mission", map[string]any{"id": "mission_999"}), false},
		{"mission id equal", set("mission", map[string]any{"id": "mission_123", "name": "n"}), true},
		{"mission metadata object", set("mission", map[string]any{"id": "mission_123", "metadata": map[string]any{"a": 1}}), true},
		{"mission metadata null", set("mission", map[string]any{"id": "mission_123", "metadata": nil}), true},
		{"mission metadata array", set("mission", map[string]any{"id": "mission_123", "metadata": []any{}}), false},
		{"mission metadata string", set("mission", map[string]any{"id": "mission_123", "metadata": "{}"}), false},
		{"workspace_authorization object", set("workspace_authorization", map[string]any{"grant_id": "g"}), false},
		{"workspace_authorization empty object", set("workspace_authorization", map[string]any{}), false},
		{"workspace_authorization string", set("workspace_authorization", ""), false},
		{"workspace_authorization false", set("workspace_authorization", false), false},
		{"workspace_authorization null", set("workspace_authorization", nil), true},
		{"empty strings are strings", func(r map[string]any) { r["request_id"], r["action"] = "", "" }, true},
	}
	// Surface requests: same fields without action / idempotency_key.
	surfaceCases := []paramsCase{
		{"fixture", nil, true},
		{"no action", del("action"), true},
		{"action number ignored", set("action", 1), true},
		{"idempotency_key number ignored", set("idempotency_key", 1), true},
		{"surface missing", del("surface"), false},
		{"workspace.id missing", delSub("workspace", "id"), false},
		{"agent_slug missing", del("agent_slug"), false},
		{"workspace_authorization", set("workspace_authorization", map[string]any{}), false},
		{"mission id differs", set("mission", map[string]any{"id": "x"}), false},
		{"input array", set("input", []any{}), false},
	}
	return cases, surfaceCases
}

// TestInvalidParams: every required field missing, null or mistyped, and the
// other V2ActionRequest / V2SurfaceRequest rules, for both request spellings.
func TestInvalidParams(t *testing.T) {
	cases, surfaceCases := invalidParamsCases()
	for _, wrapper := range []string{"action_request", ""} {
		for _, c := range cases {
			t.Run(c.name+"/wrapper="+wrapper, func(t *testing.T) {
				b := body(t, jsonrpc.MethodActionInvoke, wrapper, edited(t, c.edit))
				call, e := jsonrpc.Parse(b)
				if c.ok {
					if e != nil {
						t.Fatalf("refused: %v", e)
					}
					return
				}
				if e == nil || e.RPCCode != jsonrpc.CodeInvalidParams {
					t.Fatalf("got %v, want -32602", e)
				}
				wantModelErrors(t, e, jsonrpc.MsgInvalidActionRequest)
				checkIDEcho(t, b, call, e)
			})
		}
	}
	for _, wrapper := range []string{"surface_request", ""} {
		for _, c := range surfaceCases {
			t.Run("surface/"+c.name+"/wrapper="+wrapper, func(t *testing.T) {
				b := body(t, jsonrpc.MethodSurfaceLoad, wrapper, edited(t, c.edit))
				call, e := jsonrpc.Parse(b)
				if c.ok {
					if e != nil {
						t.Fatalf("refused: %v", e)
					}
					if call.IsAction() || call.Action != "" || call.IdempotencyKey != "" || call.Target() != "job.start" {
						t.Fatalf("surface call %+v", call)
					}
					return
				}
				if e == nil || e.RPCCode != jsonrpc.CodeInvalidParams {
					t.Fatalf("got %v, want -32602", e)
				}
				wantModelErrors(t, e, jsonrpc.MsgInvalidSurfaceRequest)
				checkIDEcho(t, b, call, e)
			})
		}
	}
}

// TestRequestSpelling: params.action_request is used when present (even if
// bare params fields say otherwise), else params; same for surface_request.
func TestRequestSpelling(t *testing.T) {
	inner := fixtureRequest(t)
	inner["action"], inner["agent_slug"] = "job.stop", "inner_agent"
	params := fixtureRequest(t) // bare fields, different values
	params["action_request"] = inner
	b := mustMarshal(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": jsonrpc.MethodActionInvoke, "params": params})
	c, e := jsonrpc.Parse(b)
	if e != nil || c.Action != "job.stop" || c.AgentSlug != "inner_agent" {
		t.Fatalf("action_request not preferred: %v %+v", e, c)
	}

	// Bare params with invalid fields are ignored when action_request exists.
	b = mustMarshal(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": jsonrpc.MethodActionInvoke,
		"params": map[string]any{"action_request": fixtureRequest(t), "workspace_authorization": map[string]any{"x": 1}, "action": 5}})
	if c, e := jsonrpc.Parse(b); e != nil || c.Action != "job.start" {
		t.Fatalf("bare fields not ignored: %v %+v", e, c)
	}

	// An invalid action_request is not rescued by valid bare fields.
	params = fixtureRequest(t)
	params["action_request"] = map[string]any{"request_id": "r"}
	b = mustMarshal(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": jsonrpc.MethodActionInvoke, "params": params})
	if _, e := jsonrpc.Parse(b); e == nil || e.RPCCode != jsonrpc.CodeInvalidParams {
		t.Fatalf("invalid action_request: %v", e)
	}

	// surface.load reads surface_request, not action_request.
	sInner := fixtureRequest(t)
	sInner["surface"] = "mission.analytics"
	aInner := fixtureRequest(t)
	aInner["surface"] = "from_action_request"
	bare := fixtureRequest(t)
	bare["surface"] = "bare"
	bare["surface_request"] = sInner
	bare["action_request"] = aInner
	b = mustMarshal(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": jsonrpc.MethodSurfaceLoad, "params": bare})
	if c, e := jsonrpc.Parse(b); e != nil || c.Surface != "mission.analytics" {
		t.Fatalf("surface_request not preferred: %v %+v", e, c)
	}
	delete(bare, "surface_request")
	b = mustMarshal(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": jsonrpc.MethodSurfaceLoad, "params": bare})
	if c, e := jsonrpc.Parse(b); e != nil || c.Surface != "bare" {
		t.Fatalf("bare surface params: %v %+v", e, c)
	}
	// action.invoke ignores surface_request.
	params = fixtureRequest(t)
	params["surface_request"] = map[string]any{}
	b = mustMarshal(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": jsonrpc.MethodActionInvoke, "params": params})
	if c, e := jsonrpc.Parse(b); e != nil || c.Action != "job.start" {
		t.Fatalf("action with surface_request member: %v %+v", e, c)
	}
}

func TestIDEcho(t *testing.T) {
	valid := actionBody(t, nil)
	cases := []struct{ spelled, want string }{
		{`"id":7`, `7`},
		{`"id":"abc"`, `"abc"`},
		{`"id":""`, `""`},
		{`"id":"\u00e9\n"`, `"\u00e9\n"`},
		{`"id":-1.5e3`, `-1500`}, // the SDK's model reads it as the integer -1500
		{`"id":1.0`, `1`},
		{`"id":true`, `1`}, // and true, false as 1, 0
		{`"id":false`, `0`},
		{`"id":0`, `0`},
		{`"id":null`, `null`},
		{`"id" : 42 `, `42`},
		{``, `null`}, // absent
	}
	for _, c := range cases {
		b := valid
		if c.spelled == "" {
			b = replaceOnce(t, valid, `"id":7,`, ``)
		} else {
			b = replaceOnce(t, valid, `"id":7`, c.spelled)
		}
		call, e := jsonrpc.Parse(b)
		if e != nil {
			t.Fatalf("%s: %v", c.spelled, e)
		}
		if string(call.ID) != c.want {
			t.Fatalf("%s: id %s, want %s", c.spelled, call.ID, c.want)
		}
		// The same id is echoed by -32601 and -32602.
		nf := bytes.Replace(b, []byte(jsonrpc.MethodActionInvoke), []byte("x/y"), 1)
		if call, e := jsonrpc.Parse(nf); e == nil || e.RPCCode != -32601 || string(call.ID) != c.want {
			t.Fatalf("%s -32601: %v %v", c.spelled, e, call)
		}
		ip := bytes.Replace(b, []byte(`"mission_id":"mission_123"`), []byte(`"mission_id":1`), 1)
		if call, e := jsonrpc.Parse(ip); e == nil || e.RPCCode != -32602 || string(call.ID) != c.want {
			t.Fatalf("%s -32602: %v %v", c.spelled, e, call)
		}
		// An answer built from it is valid JSON with that id.
		var resp map[string]json.RawMessage
		if err := json.Unmarshal(jsonrpc.ErrorResponse(call.ID, &refusal.Refusal{RPCCode: -32030, Message: "m"}), &resp); err != nil {
			t.Fatal(err)
		}
		if string(resp["id"]) != c.want {
			t.Fatalf("answer id %s, want %s", resp["id"], c.want)
		}
	}
}

func TestErrorResponse(t *testing.T) {
	type errObj struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	cases := []struct {
		name string
		id   json.RawMessage
		err  *refusal.Refusal
		want string
	}{
		{"with data", json.RawMessage("7"),
			&refusal.Refusal{RPCCode: -32030, Message: "Workspace authorization is required", Data: map[string]any{"code": "workspace_authorization_missing"}},
			`{"jsonrpc":"2.0","id":7,"error":{"code":-32030,"message":"Workspace authorization is required","data":{"code":"workspace_authorization_missing"}}}`},
		{"without data", json.RawMessage(`"a"`), &refusal.Refusal{RPCCode: -32601, Message: "Method not found: x"},
			`{"jsonrpc":"2.0","id":"a","error":{"code":-32601,"message":"Method not found: x"}}`},
		{"nil id", nil, &refusal.Refusal{RPCCode: -32700, Message: "Parse error"},
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`},
		{"empty id", json.RawMessage{}, &refusal.Refusal{RPCCode: -32600, Message: "m"},
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"m"}}`},
		{"handler data", json.RawMessage("1"), &refusal.Refusal{RPCCode: -32010, Message: "m", Data: map[string]any{"agent_slug": "a", "action": "b"}},
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32010,"message":"m","data":{"action":"b","agent_slug":"a"}}}`},
		{"unmarshalable data is dropped", json.RawMessage("1"), &refusal.Refusal{RPCCode: -32603, Message: "m", Data: make(chan int)},
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"m"}}`},
		{"message escaping", json.RawMessage("1"), &refusal.Refusal{RPCCode: -32602, Message: "a\"<b>\n"},
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"a\"\u003cb\u003e\n"}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := jsonrpc.ErrorResponse(c.id, c.err)
			if string(got) != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
			var r struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Error   *errObj         `json:"error"`
				Result  json.RawMessage `json:"result"`
			}
			if err := json.Unmarshal(got, &r); err != nil || r.JSONRPC != "2.0" || r.Error == nil || r.Result != nil ||
				r.Error.Code != c.err.RPCCode || r.Error.Message != c.err.Message {
				t.Fatalf("shape: %v %+v", err, r)
			}
		})
	}
}

func TestResultResponse(t *testing.T) {
	cases := []struct {
		id     json.RawMessage
		result string
		want   string
	}{
		{json.RawMessage("7"), `{"status":"ok"}`, `{"jsonrpc":"2.0","id":7,"result":{"status":"ok"}}`},
		{json.RawMessage(`"x"`), `null`, `{"jsonrpc":"2.0","id":"x","result":null}`},
		{nil, `[1,2]`, `{"jsonrpc":"2.0","id":null,"result":[1,2]}`},
		{json.RawMessage("null"), ` { "a" : 1 } `, `{"jsonrpc":"2.0","id":null,"result": { "a" : 1 } }`},
	}
	for _, c := range cases {
		got := jsonrpc.ResultResponse(c.id, json.RawMessage(c.result))
		if string(got) != c.want {
			t.Fatalf("got  %s\nwant %s", got, c.want)
		}
		if !json.Valid(got) {
			t.Fatalf("not JSON: %s", got)
		}
	}
}

// objectCase is an input of IsJSONObject and its answer.
type objectCase struct {
	in   string
	want bool
}

// isJSONObjectCases are TestIsJSONObject's inputs.
func isJSONObjectCases() []objectCase {
	cases := []objectCase{
		{`{}`, true},
		{` {"a":{"b":[1,{"c":null}]}} `, true},
		{`{"a":1,"b":1}`, true},
		{`{"a":1,"a":2}`, false},
		{`{"a":1,"\u0061":2}`, false},
		{`{"x":[{"a":1,"a":1}]}`, false},
		{`[]`, false},
		{`"{}"`, false},
		{`null`, false},
		{`1`, false},
		{``, false},
		{`{`, false},
		{`{} {}`, false},
		{`{}x`, false},
		{"\xef\xbb\xbf{}", false},
		{"{\"a\":\"\xff\"}", false},
		{`{"a":NaN}`, false},
		{`{/*c*/}`, false},
		{`{"a":` + nested(jsonrpc.MaxDepth-1) + `}`, true},
		{`{"a":` + nested(jsonrpc.MaxDepth) + `}`, false},
	}
	return cases
}

func TestIsJSONObject(t *testing.T) {
	cases := isJSONObjectCases()
	for _, c := range cases {
		if got := jsonrpc.IsJSONObject([]byte(c.in)); got != c.want {
			t.Errorf("IsJSONObject(%.60q) = %v, want %v", c.in, got, c.want)
		}
	}
}

// wantModelErrors asserts e is -32602 with the SDK's message msg and data
// {"errors": [...]} holding at least one pydantic-style entry.
func wantModelErrors(t *testing.T, e *refusal.Refusal, msg string) {
	t.Helper()
	if e.Message != msg {
		t.Fatalf("message %q, want %q", e.Message, msg)
	}
	data, _ := e.Data.(map[string]any)
	errs, _ := data["errors"].([]jsonrpc.FieldError)
	if len(errs) == 0 || errs[0].Type == "" || errs[0].Msg == "" || errs[0].Loc == nil {
		t.Fatalf("data %#v: want a non-empty pydantic-style errors list", e.Data)
	}
}

// TestJSONRPCMemberOptional: the SDK's envelope model defaults jsonrpc to
// "2.0", so a request without it is read.
func TestJSONRPCMemberOptional(t *testing.T) {
	b := replaceOnce(t, actionBody(t, nil), `"jsonrpc":"2.0",`, ``)
	if c, e := jsonrpc.Parse(b); e != nil || c.Action != "job.start" {
		t.Fatalf("without jsonrpc: %v %+v", e, c)
	}
}
