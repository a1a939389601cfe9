package jsonrpc_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/strictjson/oracle"
)

// The oracle check: what Parse and IsJSONObject decide about any input is
// decided again, independently, by sdkOracle: the strict-JSON facts from
// strictjson/oracle (encoding/json's token stream and a regular expression),
// then the SDK's envelope and request models applied to the body as
// encoding/json decodes it (maps, not Parse's spans). It shares no code with
// the parser, so a rule changes in the parser and is stated again here only
// as the SDK's model, not as a second parser.

// verdict is what sdkOracle expects of Parse.
type verdict struct {
	code   int    // 0: accepted
	status int    // the refusal's Status when HTTPLevel
	msg    string // the refusal's Message, "" when not predicted
	id     any    // the id echoed (as encoding/json decodes it) for -32601, -32602 and accepted calls
	call   jsonrpc.Call
	input  any // the decoded input of an accepted call
}

// sdkOracle decides b from scratch; skip is true for bodies outside its
// domain (nested deeper than encoding/json reads).
func sdkOracle(b []byte) (v verdict, skip bool) {
	o := oracle.Read(b)
	switch {
	case o.TooDeep:
		return v, true
	case !o.Valid:
		return verdict{code: jsonrpc.CodeParseError}, false
	case o.LongInteger:
		return verdict{code: jsonrpc.CodeParseError, status: 400, msg: jsonrpc.MsgBodyNotParsed}, false
	case !o.IsObject || !o.Strict(jsonrpc.MaxDepth):
		return verdict{code: jsonrpc.CodeInvalidRequest}, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var env map[string]any
	if err := dec.Decode(&env); err != nil {
		panic(err) // o.Valid
	}
	// The objects the gate reads: no two keys equal under case folding.
	params, _ := env["params"].(map[string]any)
	reads := []map[string]any{env, params}
	for _, w := range []string{"action_request", "surface_request"} {
		if m, ok := params[w].(map[string]any); ok {
			reads = append(reads, m)
		}
	}
	for _, r := range reads[1:] {
		for _, k := range []string{"actor", "workspace", "mission"} {
			if m, ok := r[k].(map[string]any); ok {
				reads = append(reads, m)
			}
		}
	}
	for _, m := range reads {
		var keys []string
		for k := range m {
			for _, o := range keys {
				if strings.EqualFold(k, o) {
					return verdict{code: jsonrpc.CodeInvalidRequest}, false
				}
			}
			keys = append(keys, k)
		}
	}
	// The id: str | int | None as the SDK reads it, else HTTP 400.
	v.id = nil
	if id, present := env["id"]; present {
		switch t := id.(type) {
		case string, nil:
			v.id = t
		case bool:
			v.id = map[bool]json.Number{true: "1", false: "0"}[t]
		case json.Number:
			if !strings.ContainsAny(string(t), ".eE") {
				v.id = t
				break
			}
			f, err := strconv.ParseFloat(string(t), 64)
			if err != nil || f != math.Trunc(f) {
				return verdict{code: jsonrpc.CodeInvalidRequest, status: 400, msg: jsonrpc.MsgBadID}, false
			}
			i, _ := new(big.Float).SetFloat64(f).Int(nil)
			v.id = json.Number(i.String())
		default:
			return verdict{code: jsonrpc.CodeInvalidRequest, status: 400, msg: jsonrpc.MsgBadID}, false
		}
	}
	// The envelope model.
	jv, hasJSONRPC := env["jsonrpc"]
	method, methodOK := env["method"].(string)
	p, hasParams := env["params"]
	if hasJSONRPC && jv != "2.0" || !methodOK || hasParams && params == nil {
		v.code, v.msg = jsonrpc.CodeInvalidParams, jsonrpc.MsgInvalidJSONRPCRequest
		return v, false
	}
	_ = p
	v.call.Method = method
	var wrapper string
	switch method {
	case jsonrpc.MethodActionInvoke:
		wrapper, v.msg = "action_request", jsonrpc.MsgInvalidActionRequest
	case jsonrpc.MethodSurfaceLoad:
		wrapper, v.msg = "surface_request", jsonrpc.MsgInvalidSurfaceRequest
	default:
		v.code, v.msg = jsonrpc.CodeMethodNotFound, jsonrpc.PrefixMethodNotFound+method
		return v, false
	}
	v.code = jsonrpc.CodeInvalidParams // until the request model accepts
	req := params
	if w, present := params[wrapper]; present {
		if req, _ = w.(map[string]any); req == nil {
			return v, false
		}
	}
	// The request model (V2ActionRequest / V2SurfaceRequest).
	c := &v.call
	str := func(m map[string]any, key string, dst *string, required bool) bool {
		switch s := m[key].(type) {
		case string:
			if dst != nil {
				*dst = s
			}
			return true
		case nil:
			return !required
		}
		return false
	}
	object := func(m map[string]any, key string, required bool) (map[string]any, bool) {
		switch o := m[key].(type) {
		case map[string]any:
			return o, true
		case nil:
			return nil, !required
		}
		return nil, false
	}
	actor, okActor := object(req, "actor", true)
	ws, okWS := object(req, "workspace", true)
	ok := str(req, "request_id", &c.RequestID, true) && okActor && str(actor, "user_id", &c.ActorUserID, true) &&
		okWS && str(ws, "id", &c.WorkspaceID, true) && str(ws, "slug", &c.WorkspaceSlug, false) &&
		str(req, "mission_id", &c.MissionID, true) && str(req, "agent_slug", &c.AgentSlug, true) &&
		str(req, "surface", &c.Surface, true) &&
		(!c.IsAction() || str(req, "action", &c.Action, true) && str(req, "idempotency_key", &c.IdempotencyKey, false)) &&
		str(req, "job_id", &c.JobID, false) &&
		str(req, "draft_session_id", &c.DraftSessionID, false) && str(req, "case_id", &c.CaseID, false) && str(req, "step_id", &c.StepID, false)
	_, c.HasJobID = req["job_id"].(string)
	in, hasInput := req["input"]
	if _, isObj := in.(map[string]any); hasInput && !isObj {
		ok = false
	}
	v.input = map[string]any{}
	if hasInput {
		v.input = in
	}
	mission, okMission := object(req, "mission", false)
	if !okMission {
		ok = false
	} else if mission != nil {
		var id string
		_, okMD := object(mission, "metadata", false)
		ok = ok && str(mission, "id", &id, true) && id == c.MissionID && okMD
	}
	if req["workspace_authorization"] != nil {
		ok = false
	}
	if ok {
		v.code, v.msg = 0, ""
	}
	return v, false
}

// checkAgainstOracle fails t when Parse or IsJSONObject decide b otherwise
// than sdkOracle: accepted exactly when the oracle accepts, with the same
// fields; refused with the oracle's code, HTTP status and message, the id
// echoed as the SDK echoes it. It also checks that Parse does not modify b
// and returns no slice that aliases it but Call.Input, and that the -32602
// data (ModelErrors) agrees with Parse.
func checkAgainstOracle(t testing.TB, b []byte) {
	t.Helper()
	in := bytes.Clone(b)
	call, e := jsonrpc.Parse(in)
	if !bytes.Equal(in, b) {
		t.Fatalf("Parse modified its input %q", b)
	}
	var callInput []byte
	if call != nil {
		callInput = bytes.Clone(call.Input) // Input is a part of the body by contract (Call.Input)
	}
	for i := range in { // what else Parse returned must not change with the body
		in[i] = 'X'
	}
	if call != nil {
		call.Input = callInput
	}
	if got, want := jsonrpc.IsJSONObject(b), func() bool { o := oracle.Read(b); return o.Strict(jsonrpc.MaxDepth) && o.IsObject }(); got != want {
		t.Fatalf("IsJSONObject(%q) = %v, oracle %v", b, got, want)
	}
	want, skip := sdkOracle(b)
	if skip {
		return
	}
	code, status, msg := 0, 0, ""
	if e != nil {
		code, msg = e.RPCCode, e.Message
		if e.HTTPLevel {
			status = e.Status
		}
	}
	if code != want.code || status != want.status || want.msg != "" && msg != want.msg {
		t.Fatalf("Parse(%q) = %s, %#v\n oracle: code %d, status %d, message %q", b, showCall(call), e, want.code, want.status, want.msg)
	}
	if code == jsonrpc.CodeParseError || code == jsonrpc.CodeInvalidRequest {
		if call != nil {
			t.Fatalf("Parse(%q) = %s with %v", b, showCall(call), e)
		}
		return
	}
	// -32601, -32602 and accepted calls echo the id as the SDK does.
	var gotID any
	d := json.NewDecoder(bytes.NewReader(call.ID))
	d.UseNumber()
	if err := d.Decode(&gotID); err != nil {
		t.Fatalf("Parse(%q): id %q: %v", b, call.ID, err)
	}
	if !reflect.DeepEqual(gotID, want.id) {
		t.Fatalf("Parse(%q): id %s, oracle %#v", b, call.ID, want.id)
	}
	if call.Method != want.call.Method {
		t.Fatalf("Parse(%q): method %q, oracle %q", b, call.Method, want.call.Method)
	}
	_, errs := jsonrpc.ModelErrors(b)
	if (code == jsonrpc.CodeInvalidParams) != (len(errs) > 0) {
		t.Fatalf("Parse(%q) = %v but ModelErrors finds %v", b, e, errs)
	}
	if code == jsonrpc.CodeInvalidParams {
		if got := e.Data.(map[string]any)["errors"]; !reflect.DeepEqual(got, errs) {
			t.Fatalf("Parse(%q): data %v, ModelErrors %v", b, got, errs)
		}
	}
	if code != 0 {
		return
	}
	got := *call
	got.ID, got.Input = nil, nil
	if !reflect.DeepEqual(got, want.call) {
		t.Fatalf("Parse(%q)\n got    %+v\n oracle %+v", b, got, want.call)
	}
	var input any
	d = json.NewDecoder(bytes.NewReader(call.Input))
	d.UseNumber()
	if err := d.Decode(&input); err != nil || !reflect.DeepEqual(input, want.input) {
		t.Fatalf("Parse(%q): input %s (%v), oracle %v", b, call.Input, err, want.input)
	}
	if string(call.Input) != "{}" && !bytes.Contains(b, call.Input) {
		t.Fatalf("Parse(%q): input %q is not a slice of the body", b, call.Input)
	}
}

func showCall(c *jsonrpc.Call) string {
	if c == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%+v (ID %q, Input %q)", *c, c.ID, c.Input)
}

// corpusSeeds returns the inputs stored in testdata/fuzz/<target> for the
// given fuzz targets ("go test fuzz v1" files holding one []byte each).
func corpusSeeds(t testing.TB, targets ...string) [][]byte {
	t.Helper()
	var seeds [][]byte
	for _, target := range targets {
		files, err := filepath.Glob(filepath.Join("testdata", "fuzz", target, "*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			raw, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
			if len(lines) != 2 || lines[0] != "go test fuzz v1" ||
				!strings.HasPrefix(lines[1], "[]byte(") || !strings.HasSuffix(lines[1], ")") {
				t.Fatalf("%s: not a one-[]byte corpus file", name)
			}
			s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			seeds = append(seeds, []byte(s))
		}
	}
	return seeds
}

// envelopeSeeds returns the bodies the envelope tests parse.
func envelopeSeeds(t testing.TB) [][]byte {
	var bodies [][]byte
	bodies = append(bodies, seedsParseErrors(t)...)
	bodies = append(bodies, seedsDuplicateKeys(t)...)
	bodies = append(bodies, seedsInvalidParams(t)...)
	bodies = append(bodies, seedsIsJSONObject()...)
	bodies = append(bodies, seedsOther(t)...)
	bodies = append(bodies, seedsScanner(t)...)
	return bodies
}

// seedsScanner: bodies aimed at the scanner's own paths: escapes at every
// offset of a string and of a key (the scan reads strings eight bytes at a
// time), objects with many keys (their keys go to a map past 32), duplicates
// in them, spelled with escapes or not.
func seedsScanner(t testing.TB) [][]byte {
	valid := string(actionBody(t, nil))
	var bodies [][]byte
	for _, esc := range []string{`\"`, `\\`, `\/`, `\n`, `\u00e9`, `\u00E9`, `\ud83d\ude00`, `\ud83d`, `\ude00`, `é`, `😀`} {
		for k := range 20 {
			s := strings.Repeat("a", k) + esc + strings.Repeat("b", 20-k)
			bodies = append(bodies,
				[]byte(strings.Replace(valid, `"agent_interviewer"`, `"`+s+`"`, 1)),
				[]byte(strings.Replace(valid, `"campaign_id"`, `"`+s+`"`, 1)),
				[]byte(strings.Replace(valid, `"campaign_id":"campaign_123"`, `"`+s+`":1,"`+s+`":2`, 1)))
		}
	}
	many := func(n int, extra string) []byte {
		var members []string
		for i := range n {
			members = append(members, fmt.Sprintf(`"k%d":%d`, i, i))
		}
		return []byte(strings.Replace(valid, `"campaign_id":"campaign_123"`, strings.Join(members, ",")+extra, 1))
	}
	for _, n := range []int{31, 32, 33, 40} {
		bodies = append(bodies, many(n, ""), many(n, `,"k0":0`), many(n, `,"k\u0030":0`),
			many(n, fmt.Sprintf(`,"k%d":0`, n-1)), many(n, `,"k1\u0000":0`), many(n, `,"x":{"k0":0,"k0":1}`))
	}
	// Objects with many keys nested in one another; duplicates after the
	// inner one closes.
	inner := func(n int) string {
		var members []string
		for i := range n {
			members = append(members, fmt.Sprintf(`"\u006b%d":{"k%d":%d}`, i, i, i))
		}
		return "{" + strings.Join(members, ",") + "}"
	}
	for _, extra := range []string{"", `,"k0":0`, `,"\u006b1":0`, `,"k39":0`, `,"k40":0`} {
		bodies = append(bodies, many(40, `,"in":`+inner(40)+`,"in2":[`+inner(35)+`,`+inner(3)+`]`+extra))
	}
	// Keys equal under case folding, in read objects and in data.
	for _, r := range [][2]string{
		{`"action":"job.start"`, `"action":"job.start","Action":"job.sync"`},
		{`"action":"job.start"`, `"\u0041CTION":"x","action":"job.start"`},
		{`"method":`, `"METHOD":"x","method":`},
		{`"method":`, `"param\u017f":{},"method":`},
		{`"workspace":{`, `"Workspace":{"id":"w2"},"workspace":{`},
		{`"id":"workspace_123"`, `"id":"workspace_123","ID":"w"`},
		{`"user_id":"user_123"`, `"user_id":"user_123","uſer_id":"x"`},
		{`"idempotency_key":`, `"idempotency_\u212aey":"k2","idempotency_key":`},
		{`"campaign_id":"campaign_123"`, `"campaign_id":"campaign_123","Campaign_ID":"x"`},
	} {
		bodies = append(bodies, []byte(strings.Replace(valid, r[0], r[1], 1)))
	}
	for _, extra := range []string{`,"K39":0`, `,"k\u017f":0`} {
		bodies = append(bodies, []byte(strings.Replace(valid, `"action":"job.start"`,
			`"action":"job.start",`+strings.Join(func() []string {
				var m []string
				for i := range 40 {
					m = append(m, fmt.Sprintf(`"k%d":%d`, i, i))
				}
				return m
			}(), ",")+extra, 1)))
	}
	return bodies
}

// seedsOther: the bodies of TestParseFixtureJobStart, TestParseInputIsRawSlice,
// TestDepthLimit, TestRequestSpelling and TestIDEcho.
func seedsOther(t testing.TB) [][]byte {
	valid := actionBody(t, nil)
	bodies := [][]byte{
		body(t, jsonrpc.MethodActionInvoke, "action_request", fixtureRequest(t)),
		body(t, jsonrpc.MethodActionInvoke, "", fixtureRequest(t)),
		[]byte(`{"jsonrpc":"2.0","id":1,"method":"supervaizer/action.invoke","params":{"request_id":"r","actor":{"user_id":"u"},` +
			`"workspace":{"id":"w"},"mission_id":"m","agent_slug":"a","surface":"s","action":"x","input": { "k" : [1, 2.50, "\u00e9"] } }}`),
		actionBody(t, func(r map[string]any) { delete(r, "input") }),
		[]byte(`{"jsonrpc":"2.0","id":"a","method":"tasks/send","params":{}}`),
	}

	// TestDepthLimit
	withX := func(x string) []byte { return replaceOnce(t, valid, `"jsonrpc":"2.0"`, `"x":`+x+`,"jsonrpc":"2.0"`) }
	for _, n := range []int{jsonrpc.MaxDepth - 1, jsonrpc.MaxDepth, jsonrpc.MaxDepth + 1, 10000} {
		bodies = append(bodies, withX(nested(n)))
	}
	bodies = append(bodies,
		withX(strings.Repeat(`{"a":`, jsonrpc.MaxDepth)+"1"+strings.Repeat("}", jsonrpc.MaxDepth)),
		withX(`"\"`+strings.Repeat("[{", 200)+`\\"`))

	// TestRequestSpelling
	inner := fixtureRequest(t)
	inner["action"], inner["agent_slug"] = "job.stop", "inner_agent"
	params := fixtureRequest(t)
	params["action_request"] = inner
	bodies = append(bodies, mustMarshal(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": jsonrpc.MethodActionInvoke, "params": params}))
	bodies = append(bodies, mustMarshal(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": jsonrpc.MethodActionInvoke,
		"params": map[string]any{"action_request": fixtureRequest(t), "workspace_authorization": map[string]any{"x": 1}, "action": 5}}))
	params = fixtureRequest(t)
	params["action_request"] = map[string]any{"request_id": "r"}
	bodies = append(bodies, mustMarshal(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": jsonrpc.MethodActionInvoke, "params": params}))
	sInner := fixtureRequest(t)
	sInner["surface"] = "mission.analytics"
	aInner := fixtureRequest(t)
	aInner["surface"] = "from_action_request"
	bare := fixtureRequest(t)
	bare["surface"] = "bare"
	bare["surface_request"] = sInner
	bare["action_request"] = aInner
	for _, m := range []string{jsonrpc.MethodSurfaceLoad, jsonrpc.MethodActionInvoke} {
		bodies = append(bodies, mustMarshal(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": m, "params": bare}))
	}
	delete(bare, "surface_request")
	bodies = append(bodies, mustMarshal(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": jsonrpc.MethodSurfaceLoad, "params": bare}))
	params = fixtureRequest(t)
	params["surface_request"] = map[string]any{}
	bodies = append(bodies, mustMarshal(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": jsonrpc.MethodActionInvoke, "params": params}))

	// TestIDEcho
	for _, spelled := range []string{`"id":7`, `"id":"abc"`, `"id":""`, `"id":"\u00e9\n"`, `"id":-1.5e3`, `"id":0`, `"id":null`, `"id" : 42 `, ``} {
		b := valid
		if spelled == "" {
			b = replaceOnce(t, valid, `"id":7,`, ``)
		} else {
			b = replaceOnce(t, valid, `"id":7`, spelled)
		}
		bodies = append(bodies, b,
			bytes.Replace(b, []byte(jsonrpc.MethodActionInvoke), []byte("x/y"), 1),
			bytes.Replace(b, []byte(`"mission_id":"mission_123"`), []byte(`"mission_id":1`), 1))
	}
	return bodies
}

// seedsParseErrors: the bodies of TestParseErrors.
func seedsParseErrors(t testing.TB) [][]byte {
	cases := parseErrorCases(t)
	var bodies [][]byte
	for _, c := range cases {
		bodies = append(bodies, []byte(c.body))
	}
	return bodies
}

// seedsDuplicateKeys: the bodies of TestDuplicateKeys.
func seedsDuplicateKeys(t testing.TB) [][]byte {
	valid := actionBody(t, nil)
	cases := duplicateKeyCases(t)
	bodies := [][]byte{
		replaceOnce(t, valid, `"campaign_id":"campaign_123"`, `"a":1,"A":2,"a ":3,"\u0000a":4,"a\u0000":5`),
		replaceOnce(t, valid, `"campaign_id":"campaign_123"`, `"x":{"a":1},"y":{"a":1},"z":[{"a":1},{"a":1}]`),
		replaceOnce(t, valid, `"action":"job.start"`, `"\u0061ction":"job.stop"`),
	}
	for _, c := range cases {
		bodies = append(bodies, c.body)
	}
	return bodies
}

// seedsInvalidParams: the bodies of TestInvalidParams.
func seedsInvalidParams(t testing.TB) [][]byte {
	cases, surfaceCases := invalidParamsCases()
	var bodies [][]byte
	for _, wrapper := range []string{"action_request", ""} {
		for _, c := range cases {
			bodies = append(bodies, body(t, jsonrpc.MethodActionInvoke, wrapper, edited(t, c.edit)))
		}
	}
	for _, wrapper := range []string{"surface_request", ""} {
		for _, c := range surfaceCases {
			bodies = append(bodies, body(t, jsonrpc.MethodSurfaceLoad, wrapper, edited(t, c.edit)))
		}
	}
	return bodies
}

// seedsIsJSONObject: the inputs of TestIsJSONObject.
func seedsIsJSONObject() [][]byte {
	cases := isJSONObjectCases()
	var bodies [][]byte
	for _, c := range cases {
		bodies = append(bodies, []byte(c.in))
	}
	return bodies
}

// allSeeds returns every seed of the differential check.
func allSeeds(t testing.TB) [][]byte {
	seeds := corpusSeeds(t, "FuzzParse", "FuzzIsJSONObject")
	return append(seeds, envelopeSeeds(t)...)
}

// TestParseMatchesOracle runs the oracle check on every seed, on byte
// mutations of them and on generated envelopes (see gen), so that it runs
// with every `go test`, not only when fuzzing (FuzzParse).
func TestParseMatchesOracle(t *testing.T) {
	checkGenerated(t, allSeeds(t), 1, 5000, 20, checkAgainstOracle)
}

// checkGenerated runs check on every seed, on n generated envelopes (a
// tenth with -short) from a generator seeded with genSeed, and on mutations
// byte mutations of each seed of at most 4 KiB.
func checkGenerated(t *testing.T, seeds [][]byte, genSeed uint64, n, mutations int, check func(testing.TB, []byte)) {
	t.Helper()
	for _, b := range seeds {
		check(t, b)
	}
	g := newGen(t, genSeed)
	if testing.Short() {
		n /= 10
	}
	for range n {
		check(t, g.body())
	}
	for _, b := range seeds {
		if len(b) > 4096 {
			continue
		}
		for range mutations {
			check(t, g.mutate(bytes.Clone(b)))
		}
	}
}

// jnode is a JSON value built by gen: an object's members are kept in order
// and may repeat a key (to make duplicates).
type jnode struct {
	kind byte // 'o' object, 'a' array, 's' string, 'r' raw number or literal
	keys []string
	vals []*jnode
	str  string // 's'
	raw  string // 'r'
}

func jstr(s string) *jnode { return &jnode{kind: 's', str: s} }
func jraw(s string) *jnode { return &jnode{kind: 'r', raw: s} }

func (n *jnode) get(key string) *jnode {
	for i, k := range n.keys {
		if k == key {
			return n.vals[i]
		}
	}
	return nil
}

func (n *jnode) set(key string, v *jnode) {
	for i, k := range n.keys {
		if k == key {
			n.vals[i] = v
			return
		}
	}
	n.keys, n.vals = append(n.keys, key), append(n.vals, v)
}

func (n *jnode) del(key string) {
	for i, k := range n.keys {
		if k == key {
			n.keys = append(n.keys[:i:i], n.keys[i+1:]...)
			n.vals = append(n.vals[:i:i], n.vals[i+1:]...)
			return
		}
	}
}

// objects appends n and every object inside it to out.
func (n *jnode) objects(out []*jnode) []*jnode {
	if n.kind == 'o' {
		out = append(out, n)
	}
	for _, v := range n.vals {
		out = v.objects(out)
	}
	return out
}

// gen builds random JSON-RPC envelopes around the fixture's request: fields
// missing, null, mistyped or replaced, the request bare or wrapped (or
// both), random methods, ids and jsonrpc versions, duplicate keys, deep
// nesting, members in random order, keys and strings escaped at random
// (surrogate pairs, lone surrogates now and then), random whitespace, and
// byte-level damage.
type gen struct {
	r       *rand.Rand
	fixture map[string]any
}

func newGen(t testing.TB, seed uint64) *gen {
	return &gen{r: rand.New(rand.NewPCG(seed, 0x5eed)), fixture: fixtureRequest(t)}
}

func (g *gen) chance(p float64) bool { return g.r.Float64() < p }
func (g *gen) n(k int) int           { return g.r.IntN(k) }

func oneOf[T any](g *gen, xs ...T) T { return xs[g.n(len(xs))] }

// fromAny converts a decoded JSON value, object members in random order.
func (g *gen) fromAny(v any) *jnode {
	switch v := v.(type) {
	case map[string]any:
		n := &jnode{kind: 'o'}
		for _, k := range slices.Sorted(maps.Keys(v)) { // envelope shuffles them
			n.keys, n.vals = append(n.keys, k), append(n.vals, g.fromAny(v[k]))
		}
		return n
	case []any:
		n := &jnode{kind: 'a'}
		for _, x := range v {
			n.vals = append(n.vals, g.fromAny(x))
		}
		return n
	case string:
		return jstr(v)
	case nil:
		return jraw("null")
	case bool:
		return jraw(strconv.FormatBool(v))
	case float64:
		return jraw(strconv.FormatFloat(v, 'g', -1, 64))
	}
	panic(fmt.Sprintf("fromAny %T", v))
}

var genNames = []string{"id", "user_id", "slug", "metadata", "action", "surface", "input", "mission", "mission_id",
	"actor", "workspace", "action_request", "surface_request", "params", "method", "jsonrpc", "request_id",
	"agent_slug", "job_id", "idempotency_key", "workspace_authorization", "x", "", "é", "😀"}

func (g *gen) randString() string {
	if g.chance(0.4) {
		return oneOf(g, "", "2.0", "2.0 ", jsonrpc.MethodActionInvoke, jsonrpc.MethodSurfaceLoad, "job.start",
			"mission_123", "workspace_123", "user_123", "a", "null", "{}")
	}
	var sb strings.Builder
	for range g.n(12) {
		sb.WriteString(oneOf(g, "a", "b", "_", ".", "/", "é", "😀", "\"", "\\", "\n", "\x00", "\u2028", "\x7f", " ", "7", "\t", "\ufffd"))
	}
	return sb.String()
}

func (g *gen) randScalar() *jnode {
	return jraw(oneOf(g, "0", "-0", "7", "-1.5e3", "1e999", "0.5E+2", "123456789012345678901234567890", "null", "true", "false"))
}

// randValue returns a random value nesting at most depth levels.
func (g *gen) randValue(depth int) *jnode {
	switch k := g.n(10); {
	case k < 4:
		return jstr(g.randString())
	case k < 7 || depth <= 0:
		return g.randScalar()
	case k < 9:
		n := &jnode{kind: 'o'}
		for range g.n(4) {
			n.keys, n.vals = append(n.keys, oneOf(g, genNames...)), append(n.vals, g.randValue(depth-1))
		}
		return n
	default:
		n := &jnode{kind: 'a'}
		for range g.n(4) {
			n.vals = append(n.vals, g.randValue(depth-1))
		}
		return n
	}
}

// mutateMember deletes, nulls or replaces member key of n now and then.
func (g *gen) mutateMember(n *jnode, key string, p float64) {
	if n == nil || n.kind != 'o' || !g.chance(p) {
		return
	}
	switch g.n(4) {
	case 0:
		n.del(key)
	case 1:
		n.set(key, jraw("null"))
	case 2:
		n.set(key, jstr(g.randString()))
	default:
		n.set(key, g.randValue(2))
	}
}

func (g *gen) request() *jnode {
	r := g.fromAny(g.fixture)
	for _, k := range []string{"request_id", "actor", "workspace", "mission_id", "agent_slug", "surface", "action",
		"idempotency_key", "job_id", "input", "mission", "workspace_authorization"} {
		g.mutateMember(r, k, 0.08)
	}
	g.mutateMember(r.get("actor"), "user_id", 0.1)
	g.mutateMember(r.get("workspace"), "id", 0.1)
	g.mutateMember(r.get("workspace"), "slug", 0.15)
	if g.chance(0.3) {
		m := &jnode{kind: 'o'}
		switch g.n(4) {
		case 0:
		case 1:
			m.set("id", jstr(g.randString()))
		default:
			if mid := r.get("mission_id"); mid != nil {
				m.set("id", mid)
			}
		}
		if g.chance(0.5) {
			m.set("metadata", oneOf(g, jraw("null"), &jnode{kind: 'o'}, &jnode{kind: 'a'}, jstr("{}"), g.randValue(2)))
		}
		if g.chance(0.3) {
			m.set("name", jstr("n"))
		}
		r.set("mission", oneOf(g, m, m, m, jraw("null"), jstr("m")))
	}
	if g.chance(0.1) {
		r.set("workspace_authorization", oneOf(g, jraw("null"), &jnode{kind: 'o'}, jstr(""), jraw("false")))
	}
	if g.chance(0.2) {
		r.set(oneOf(g, genNames...), g.randValue(2))
	}
	return r
}

func (g *gen) envelope() *jnode {
	env := &jnode{kind: 'o'}
	switch {
	case g.chance(0.9):
		env.set("jsonrpc", jstr("2.0"))
	case g.chance(0.5):
		env.set("jsonrpc", oneOf(g, jstr("1.0"), jraw("2.0"), jraw("null"), jstr("2.0 "), jstr(g.randString())))
	}
	switch {
	case g.chance(0.8):
		env.set("id", oneOf(g, jraw("7"), jstr("abc"), jraw("null"), jraw("-1.5e3"), jraw("0"), jstr(g.randString())))
	case g.chance(0.5):
		env.set("id", oneOf(g, jraw("true"), jraw("false"), &jnode{kind: 'o'}, &jnode{kind: 'a'}))
	}
	switch {
	case g.chance(0.9):
		env.set("method", oneOf(g, jstr(jsonrpc.MethodActionInvoke), jstr(jsonrpc.MethodSurfaceLoad)))
	case g.chance(0.5):
		env.set("method", jstr(g.randString()))
	case g.chance(0.5):
		env.set("method", g.randScalar())
	}
	var params *jnode
	switch g.n(10) {
	case 0, 1, 7, 8:
		params = g.request()
	case 2, 3:
		params = &jnode{kind: 'o'}
		params.set("action_request", g.request())
	case 4, 5:
		params = &jnode{kind: 'o'}
		params.set("surface_request", g.request())
	case 6:
		params = g.request()
		params.set("action_request", g.request())
		params.set("surface_request", g.request())
	default:
		params = g.randValue(2)
	}
	if params.kind == 'o' && g.chance(0.1) {
		params.set(oneOf(g, "action_request", "surface_request"), g.randValue(1))
	}
	if !g.chance(0.03) {
		env.set("params", params)
	}
	if g.chance(0.2) {
		env.set(oneOf(g, genNames...), g.randValue(2))
	}
	objs := env.objects(nil)
	if g.chance(0.08) { // a duplicate key somewhere
		o := objs[g.n(len(objs))]
		if len(o.keys) > 0 {
			i := g.n(len(o.keys))
			o.keys, o.vals = append(o.keys, o.keys[i]), append(o.vals, oneOf(g, o.vals[i], g.randValue(1)))
		}
	}
	if g.chance(0.05) { // deep nesting somewhere
		o := objs[g.n(len(objs))]
		v := g.randScalar()
		for range jsonrpc.MaxDepth - 6 + g.n(10) {
			if g.chance(0.5) {
				v = &jnode{kind: 'a', vals: []*jnode{v}}
			} else {
				v = &jnode{kind: 'o', keys: []string{oneOf(g, genNames...)}, vals: []*jnode{v}}
			}
		}
		o.set(oneOf(g, genNames...), v)
	}
	// Members in random order.
	for _, o := range objs {
		g.r.Shuffle(len(o.keys), func(i, j int) {
			o.keys[i], o.keys[j] = o.keys[j], o.keys[i]
			o.vals[i], o.vals[j] = o.vals[j], o.vals[i]
		})
	}
	return env
}

// body returns one generated body.
func (g *gen) body() []byte {
	e := &encoder{g: g, style: g.n(3), esc: oneOf(g, 0, 0, 0.05, 0.3, 1), lone: g.chance(0.05)}
	e.value(g.envelope(), 0)
	b := e.b
	if g.chance(0.1) {
		b = g.mutate(b)
	}
	return b
}

// mutate damages b at one to three random places.
func (g *gen) mutate(b []byte) []byte {
	for range 1 + g.n(3) {
		i := 0
		if len(b) > 0 {
			i = g.n(len(b))
		}
		c := oneOf(g, byte('{'), '}', '[', ']', ',', ':', '"', '\\', ' ', '0', 'a', 'u', '\xff', '\xc3', 0)
		switch g.n(6) {
		case 0:
			if len(b) > 0 {
				b = append(b[:i], b[i+1:]...)
			}
		case 1:
			b = append(b[:i], append([]byte{c}, b[i:]...)...)
		case 2:
			if len(b) > 0 {
				b[i] = c
			}
		case 3:
			b = b[:i]
		case 4:
			b = append(b, oneOf(g, " ", "x", "{}", "\x00", "\n")...)
		default:
			b = append([]byte(oneOf(g, "\xef\xbb\xbf", " ", "[", "\t")), b...)
		}
	}
	return b
}

// encoder writes a jnode as JSON text with random whitespace and escapes.
type encoder struct {
	g     *gen
	b     []byte
	style int     // 0 compact, 1 random spaces, 2 indented
	esc   float64 // chance of escaping a character that need not be
	lone  bool    // write a lone surrogate escape now and then
}

func (e *encoder) space(depth int) {
	switch e.style {
	case 1:
		if e.g.chance(0.3) {
			e.b = append(e.b, oneOf(e.g, " ", "\t", "\r\n", "  ")...)
		}
	case 2:
		e.b = append(e.b, '\n')
		e.b = append(e.b, strings.Repeat("  ", depth)...)
	}
}

func (e *encoder) value(n *jnode, depth int) {
	switch n.kind {
	case 's':
		e.string(n.str)
	case 'r':
		e.b = append(e.b, n.raw...)
	case 'o', 'a':
		open, end := byte('{'), byte('}')
		if n.kind == 'a' {
			open, end = '[', ']'
		}
		e.b = append(e.b, open)
		for i, v := range n.vals {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.space(depth + 1)
			if n.kind == 'o' {
				e.string(n.keys[i])
				if e.style == 1 && e.g.chance(0.3) {
					e.b = append(e.b, ' ')
				}
				e.b = append(e.b, ':')
				if e.style > 0 {
					e.b = append(e.b, ' ')
				}
			}
			e.value(v, depth+1)
		}
		if len(n.vals) > 0 {
			e.space(depth)
		}
		e.b = append(e.b, end)
	}
}

func (e *encoder) hex4(r rune) {
	h := fmt.Sprintf(`\u%04x`, r)
	if e.g.chance(0.5) {
		h = `\u` + strings.ToUpper(h[2:])
	}
	e.b = append(e.b, h...)
}

func (e *encoder) string(s string) {
	e.b = append(e.b, '"')
	for _, r := range s {
		if e.lone && e.g.chance(0.05) {
			e.hex4(rune(oneOf(e.g, 0xd800, 0xdbff, 0xdc00, 0xdfff)))
		}
		short := map[rune]string{'"': `\"`, '\\': `\\`, '\n': `\n`, '\t': `\t`, '\r': `\r`, '\b': `\b`, '\f': `\f`, '/': `\/`}[r]
		switch {
		case r < 0x20 || r == '"' || r == '\\' || e.g.chance(e.esc):
			if short != "" && e.g.chance(0.5) {
				e.b = append(e.b, short...)
			} else if r > 0xffff {
				r -= 0x10000
				e.hex4(0xd800 + r>>10)
				e.hex4(0xdc00 + r&0x3ff)
			} else {
				e.hex4(r)
			}
		default:
			e.b = utf8.AppendRune(e.b, r)
		}
	}
	e.b = append(e.b, '"')
}
