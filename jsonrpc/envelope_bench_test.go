package jsonrpc

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/supervaize/supervaizer-sidecar/strictjson"
)

// benchJobStartBody is the fixture's job.start action request
// (test/testdata/agent_interviewer_mvp.json, key "action_request") in a
// JSON-RPC envelope, built exactly as the end-to-end tests build it (the
// fixture's own indentation kept). compact removes insignificant whitespace,
// as Studio sends it.
func benchJobStartBody(b *testing.B, compact bool) []byte {
	b.Helper()
	raw, err := os.ReadFile("../test/testdata/agent_interviewer_mvp.json")
	if err != nil {
		b.Fatal(err)
	}
	var f struct {
		ActionRequest json.RawMessage `json:"action_request"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"jsonrpc":"2.0","id":7,"method":"supervaizer/action.invoke","params":{"action_request":` +
		string(f.ActionRequest) + `}}`)
	if compact {
		var buf bytes.Buffer
		if err := json.Compact(&buf, body); err != nil {
			b.Fatal(err)
		}
		body = buf.Bytes()
	}
	if _, perr := Parse(body); perr != nil {
		b.Fatalf("fixture body does not parse: %v", perr)
	}
	return body
}

// BenchmarkParse is the envelope parse of /a2a (UTF-8, JSON validity, depth,
// duplicate keys at every depth, the v2 request model; the body is valid, so
// one pass) on the fixture's job.start body. Target (bench.mk):
// fixture_job_start <= 2 us/op.
func BenchmarkParse(b *testing.B) {
	for _, c := range []struct {
		name    string
		compact bool
	}{{"fixture_job_start", false}, {"fixture_job_start_compact", true}} {
		body := benchJobStartBody(b, c.compact)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParseSteps splits Parse into its passes over the body, to show
// where the time goes. Parse reads a valid body in one pass, the scan
// (grammar, UTF-8, integer lengths, depth, lone surrogates, duplicate keys,
// and the spans of the members Parse reads: scan_and_record_fields), then
// reads the recorded members (read_request). A body the scan refuses goes
// through parseSlow, whose passes before the scan are utf8_valid,
// gjson_valid and has_long_integer.
func BenchmarkParseSteps(b *testing.B) {
	body := benchJobStartBody(b, false)
	var f fields
	if facts := scan(body, &f); !facts.OK() {
		b.Fatalf("scan: %+v", facts)
	}
	input := json.RawMessage(`{"campaign_id":"campaign_123"}`)
	steps := []struct {
		name string
		fn   func()
	}{
		{"utf8_valid", func() { _ = utf8.Valid(body) }},
		{"gjson_valid", func() { _ = gjson.ValidBytes(body) }},
		{"has_long_integer", func() { _ = hasLongInteger(body) }},
		{"scan_depth_surrogates_duplicates", func() { _ = strictjson.Scan(body, MaxDepth, nil, nil) }},
		{"scan_and_record_fields", func() {
			var f fields
			_ = scan(body, &f)
		}},
		{"read_request", func() {
			c := &Call{Method: MethodActionInvoke}
			_ = c.readRequest(body, &f, reqAction, input)
		}},
	}
	for _, s := range steps {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.fn()
			}
		})
	}
}
