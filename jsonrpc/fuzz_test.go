package jsonrpc_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
)

// jsonFacts is what an independent reading of a body with encoding/json's
// token stream finds: whether it is exactly one JSON value, its nesting
// depth, and the first duplicate object key (after unescaping) if any.
type jsonFacts struct {
	valid    bool
	depth    int
	dupKey   string
	hasDup   bool
	isObject bool
}

// readFacts walks b with json.Decoder.Token, independently of the gjson
// code under test.
func readFacts(b []byte) jsonFacts {
	var f jsonFacts
	if !utf8.Valid(b) || !json.Valid(b) {
		return f
	}
	type frame struct {
		object    bool
		expectKey bool
		keys      map[string]bool
	}
	var stack []*frame
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	first := true
	// valueDone records that the parent container received one value.
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].expectKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return jsonFacts{}
		}
		if first {
			f.isObject = tok == json.Delim('{')
			first = false
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].expectKey = false
			}
			stack = append(stack, &frame{object: tok == json.Delim('{'), expectKey: true, keys: map[string]bool{}})
			if len(stack) > f.depth {
				f.depth = len(stack)
			}
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
			continue
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].expectKey {
			key := tok.(string)
			if stack[n-1].keys[key] && !f.hasDup {
				f.dupKey, f.hasDup = key, true
			}
			stack[n-1].keys[key] = true
			stack[n-1].expectKey = false
			continue
		}
		valueDone()
	}
	f.valid = true
	return f
}

func TestReadFacts(t *testing.T) {
	cases := []struct {
		in       string
		depth    int
		dup      bool
		isObject bool
	}{
		{`{}`, 1, false, true},
		{`[]`, 1, false, false},
		{`1`, 0, false, false},
		{`{"a":{"a":1},"b":[{"a":1},{"a":2}]}`, 3, false, true},
		{`{"a":{"b":1,"b":2}}`, 2, true, true},
		{`{"a":1,"\u0061":2}`, 1, true, true},
		{`{"a":"a","b":"a"}`, 1, false, true},
		{`{"a":[],"a":[]}`, 2, true, true},
		{`[{"k":"k"},{"k":"v","v":"k"}]`, 2, false, false},
	}
	for _, c := range cases {
		f := readFacts([]byte(c.in))
		if !f.valid || f.depth != c.depth || f.hasDup != c.dup || f.isObject != c.isObject {
			t.Errorf("%s: %+v", c.in, f)
		}
	}
}

// stringAt reads a string member of a decoded object ("" when absent or null,
// ok false when present with another type).
func stringAt(m map[string]any, key string) (string, bool) {
	v, present := m[key]
	if !present || v == nil {
		return "", true
	}
	s, ok := v.(string)
	return s, ok
}

func fuzzSeeds(f *testing.F) {
	req := fixtureRequest(f)
	f.Add(body(f, jsonrpc.MethodActionInvoke, "action_request", req))
	f.Add(body(f, jsonrpc.MethodActionInvoke, "", req))
	f.Add(body(f, jsonrpc.MethodSurfaceLoad, "surface_request", req))
	f.Add(body(f, jsonrpc.MethodSurfaceLoad, "", req))
	valid := body(f, jsonrpc.MethodActionInvoke, "action_request", req)
	f.Add(bytes.Replace(valid, []byte(`"action":"job.start"`), []byte(`"action":"job.start","\u0061ction":"job.stop"`), 1))
	f.Add(bytes.Replace(valid, []byte(`"action":"job.start"`), []byte(`"\u0061ction":"job.stop"`), 1))
	f.Add(bytes.Replace(valid, []byte(`"params":{`), []byte(`"params":{"action_request":{},`), 1))
	f.Add([]byte(`{"jsonrpc":"2.0","id":null,"method":"supervaizer/surface.load","params":{"request_id":"r","actor":{"user_id":"u"},"workspace":{"id":"w","slug":null},"mission_id":"m","agent_slug":"a","surface":"s"}}`))
	f.Add([]byte(`[{"jsonrpc":"2.0"}]`))
	f.Add([]byte("\xef\xbb\xbf{}"))
	f.Add([]byte(`{"jsonrpc":"2.0","id":NaN}`))
}

// FuzzParse: whatever Parse accepts, encoding/json reads the same method,
// agent_slug, action or surface, workspace id and slug and idempotency key
// (from params.action_request / params.surface_request if present, else
// params); nothing accepted has a duplicate key or is nested deeper than
// MaxDepth; -32700 exactly when the body is not valid UTF-8 JSON; Parse never
// panics.
func FuzzParse(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		call, e := jsonrpc.Parse(b)
		facts := readFacts(b)
		if (e != nil && e.Code == jsonrpc.CodeParseError && e.HTTPStatus == 0) == facts.valid {
			t.Fatalf("Parse error %v, but encoding/json finds valid=%v", e, facts.valid)
		}
		if e != nil {
			if e.Code == jsonrpc.CodeInvalidRequest && call != nil && string(call.ID) != "null" {
				t.Fatalf("-32600 echoes id %s", call.ID)
			}
			if facts.valid && facts.isObject && e.Code != jsonrpc.CodeInvalidRequest && (facts.hasDup || facts.depth > jsonrpc.MaxDepth) {
				t.Fatalf("duplicate %q / depth %d not refused with -32600 but %v", facts.dupKey, facts.depth, e)
			}
			return
		}
		if facts.hasDup {
			t.Fatalf("accepted a duplicate key %q", facts.dupKey)
		}
		if facts.depth > jsonrpc.MaxDepth {
			t.Fatalf("accepted depth %d", facts.depth)
		}

		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var env map[string]any
		if err := dec.Decode(&env); err != nil {
			t.Fatalf("accepted, but encoding/json cannot decode it: %v", err)
		}
		if v, ok := env["jsonrpc"]; ok && v != "2.0" { // absent: the SDK's default
			t.Fatalf("jsonrpc %v", env["jsonrpc"])
		}
		if env["method"] != call.Method {
			t.Fatalf("method %q, encoding/json reads %v", call.Method, env["method"])
		}
		if id, ok := env["id"]; ok {
			var want json.RawMessage
			want, _ = json.Marshal(sdkID(t, id))
			var got any
			d := json.NewDecoder(bytes.NewReader(call.ID))
			d.UseNumber()
			if err := d.Decode(&got); err != nil {
				t.Fatalf("id %s: %v", call.ID, err)
			}
			gotJSON, _ := json.Marshal(got)
			if string(gotJSON) != string(want) {
				t.Fatalf("id %s, encoding/json reads %s", call.ID, want)
			}
		} else if string(call.ID) != "null" {
			t.Fatalf("absent id echoed as %s", call.ID)
		}
		params, ok := env["params"].(map[string]any)
		if !ok {
			t.Fatalf("accepted params %T", env["params"])
		}
		wrapper := "surface_request"
		if call.IsAction() {
			wrapper = "action_request"
		}
		req := params
		if inner, present := params[wrapper]; present {
			req, ok = inner.(map[string]any)
			if !ok {
				t.Fatalf("accepted %s of type %T", wrapper, inner)
			}
		}
		check := func(name, got string, m map[string]any, key string) {
			t.Helper()
			want, ok := stringAt(m, key)
			if !ok {
				t.Fatalf("%s: accepted a non-string %T", name, m[key])
			}
			if got != want {
				t.Fatalf("%s: Parse reads %q, encoding/json reads %q", name, got, want)
			}
		}
		check("agent_slug", call.AgentSlug, req, "agent_slug")
		check("surface", call.Surface, req, "surface")
		check("request_id", call.RequestID, req, "request_id")
		check("mission_id", call.MissionID, req, "mission_id")
		check("job_id", call.JobID, req, "job_id")
		if call.IsAction() {
			check("action", call.Action, req, "action")
			check("idempotency_key", call.IdempotencyKey, req, "idempotency_key")
		} else if call.Action != "" || call.IdempotencyKey != "" {
			t.Fatalf("surface call with action %q / key %q", call.Action, call.IdempotencyKey)
		}
		ws, ok := req["workspace"].(map[string]any)
		if !ok {
			t.Fatalf("accepted workspace %T", req["workspace"])
		}
		check("workspace.id", call.WorkspaceID, ws, "id")
		check("workspace.slug", call.WorkspaceSlug, ws, "slug")
		actor, ok := req["actor"].(map[string]any)
		if !ok {
			t.Fatalf("accepted actor %T", req["actor"])
		}
		check("actor.user_id", call.ActorUserID, actor, "user_id")
		if wa, present := req["workspace_authorization"]; present && wa != nil {
			t.Fatalf("accepted workspace_authorization %v", wa)
		}
		if in, present := req["input"]; present {
			if _, ok := in.(map[string]any); !ok {
				t.Fatalf("accepted input %T", in)
			}
		}
		var input map[string]any
		if err := json.Unmarshal(call.Input, &input); err != nil || input == nil {
			t.Fatalf("Input %q is not an object: %v", call.Input, err)
		}
		if !bytes.Contains(b, call.Input) && string(call.Input) != "{}" {
			t.Fatalf("Input %q is not a slice of the body", call.Input)
		}
		if m, present := req["mission"]; present && m != nil {
			mo, ok := m.(map[string]any)
			if !ok || mo["id"] != call.MissionID {
				t.Fatalf("accepted mission %v with mission_id %q", m, call.MissionID)
			}
			if md, present := mo["metadata"]; present && md != nil {
				if _, ok := md.(map[string]any); !ok {
					t.Fatalf("accepted mission.metadata %T", md)
				}
			}
		}
	})
}

// hasLoneSurrogate finds, with a regular expression over the raw text (an
// implementation independent of the scanner under test), a \uXXXX escape of
// a UTF-16 surrogate that is not part of a high+low pair. Escaped
// backslashes are neutralised first so that "\\u..." is not an escape.
func hasLoneSurrogate(b []byte) bool {
	text := strings.ReplaceAll(string(b), `\\`, "__")
	locs := escapeRE.FindAllStringSubmatchIndex(text, -1)
	for k := 0; k < len(locs); k++ {
		v, _ := strconv.ParseUint(text[locs[k][2]:locs[k][3]], 16, 16)
		switch {
		case v >= 0xDC00 && v <= 0xDFFF:
			return true
		case v >= 0xD800 && v <= 0xDBFF:
			if k+1 >= len(locs) || locs[k+1][0] != locs[k][1] {
				return true
			}
			w, _ := strconv.ParseUint(text[locs[k+1][2]:locs[k+1][3]], 16, 16)
			if w < 0xDC00 || w > 0xDFFF {
				return true
			}
			k++
		}
	}
	return false
}

var escapeRE = regexp.MustCompile(`\\u([0-9a-fA-F]{4})`)

// FuzzIsJSONObject: IsJSONObject is exactly "valid UTF-8, one JSON value
// that is an object, no duplicate key at any depth, depth at most MaxDepth,
// no lone surrogate escape",
// as decided independently with encoding/json. It is the JSON half of the
// X-Supervaize-Mission-Metadata check.
func FuzzIsJSONObject(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `[]`, `"x"`, `{"a":[{"b":{}}]}`,
		"\xef\xbb\xbf{}", `{"a":"\ud800"}`, `{"\ud800":1,"\udc00":2}`, `{} `, `{}{}`, `{"a":1e999}`,
		`{"a":` + nested(jsonrpc.MaxDepth) + `}`, `{"a":` + nested(jsonrpc.MaxDepth-1) + `}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := jsonrpc.IsJSONObject(b)
		facts := readFacts(b)
		want := facts.valid && facts.isObject && !facts.hasDup && facts.depth <= jsonrpc.MaxDepth && !hasLoneSurrogate(b)
		if got != want {
			t.Fatalf("IsJSONObject(%q) = %v, want %v (%+v)", b, got, want, facts)
		}
	})
}

// sdkID is the id the SDK echoes for id as encoding/json decoded it (with
// UseNumber): true and false as 1 and 0, a number as its integer value
// (Parse refuses the others), strings and null as they are.
func sdkID(t *testing.T, id any) any {
	switch v := id.(type) {
	case bool:
		if v {
			return json.Number("1")
		}
		return json.Number("0")
	case json.Number:
		if _, ok := new(big.Int).SetString(string(v), 10); ok {
			return v
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || f != math.Trunc(f) {
			t.Fatalf("accepted id %s", v)
		}
		i, _ := new(big.Float).SetFloat64(f).Int(nil)
		return json.Number(i.String())
	}
	return id
}
