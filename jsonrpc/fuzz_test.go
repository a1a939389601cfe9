package jsonrpc_test

import (
	"bytes"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
	"github.com/supervaize/supervaizer-sidecar/strictjson/oracle"
)

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

// FuzzParse: for any input, Parse decides as sdkOracle does (see
// checkAgainstOracle: accepted exactly when the SDK's models accept the body
// as encoding/json reads it and the strict-JSON oracle finds nothing, with
// the same fields; refused with the same code, status and message),
// IsJSONObject agrees with the oracle, and Parse neither modifies its input
// nor returns slices of it, nor panics.
func FuzzParse(f *testing.F) {
	fuzzBodies(f, append(corpusSeeds(f, "FuzzIsJSONObject"), envelopeSeeds(f)...), 2, checkAgainstOracle)
}

// fuzzBodies fuzzes check with the seeds of fuzzSeeds, extra, and 200
// envelopes from a generator seeded with genSeed.
func fuzzBodies(f *testing.F, extra [][]byte, genSeed uint64, check func(testing.TB, []byte)) {
	fuzzSeeds(f)
	for _, b := range extra {
		f.Add(b)
	}
	g := newGen(f, genSeed)
	for range 200 {
		f.Add(g.body())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		check(t, b)
	})
}

// FuzzIsJSONObject: IsJSONObject is exactly "valid UTF-8, one JSON value
// that is an object, no duplicate key at any depth, depth at most MaxDepth,
// no lone surrogate escape", as decided independently by strictjson/oracle.
// It is the JSON half of the X-Supervaize-Mission-Metadata check.
func FuzzIsJSONObject(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `[]`, `"x"`, `{"a":[{"b":{}}]}`,
		"\xef\xbb\xbf{}", `{"a":"\ud800"}`, `{"\ud800":1,"\udc00":2}`, `{} `, `{}{}`, `{"a":1e999}`,
		`{"a":` + nested(jsonrpc.MaxDepth) + `}`, `{"a":` + nested(jsonrpc.MaxDepth-1) + `}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		o := oracle.Read(b)
		if o.TooDeep {
			t.Skip("deeper than encoding/json reads")
		}
		if got, want := jsonrpc.IsJSONObject(b), o.Strict(jsonrpc.MaxDepth) && o.IsObject; got != want {
			t.Fatalf("IsJSONObject(%q) = %v, want %v (%+v)", b, got, want, o)
		}
	})
}
