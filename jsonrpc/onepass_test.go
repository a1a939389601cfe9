package jsonrpc_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/jsonrpc"
)

// checkOnePass fails t when Parse, which decides most bodies in one pass
// (strictjson.Scan), decides b otherwise than ParseSlow, the check-by-check
// sequence that decides every refusal: the same *Call and the same refusal
// (code, message, HTTP status, detail, data, echoed id), compared deeply.
func checkOnePass(t testing.TB, b []byte) {
	t.Helper()
	call, e := jsonrpc.Parse(bytes.Clone(b))
	slowCall, slowE := jsonrpc.ParseSlow(bytes.Clone(b))
	if !reflect.DeepEqual(call, slowCall) || !reflect.DeepEqual(e, slowE) {
		t.Fatalf("Parse(%q)\n = %s, %#v\n slow path: %s, %#v", b, showCall(call), e, showCall(slowCall), slowE)
	}
}

// onePassFragments are JSON values, valid and not, at the edges of the
// grammar one pass checks for gjson.ValidBytes, utf8.Valid and
// hasLongInteger: numbers, literals, strings (escapes, control characters,
// UTF-8), structure.
func onePassFragments() []string {
	long := strings.Repeat("7", jsonrpc.MaxIntegerDigits)
	frags := []string{
		// Numbers.
		`0`, `-0`, `-`, `01`, `-01`, `00`, `1.`, `.5`, `1.5`, `-0.0`, `1e5`, `1E+5`, `1e-5`, `1e`, `1e+`, `1E-`, `1.e5`,
		`1.0e999`, `-1.0e999`, `+1`, `0x10`, `1_0`, `NaN`, `Infinity`, `-Infinity`, `--1`, `1-`, `1e5e5`, `1.5.5`,
		`12345678901234567`, `-123456789012345678901234567890`,
		long, "-" + long, long + "7", "-" + long + "7", long + "7.0", long + "7e0", long + "7E+1", "0." + long + "7",
		`"` + long + `7"`, `"\"` + long + `7"`, `[1,` + long + "7]", `{"n":` + long + "7}",
		// Literals.
		`true`, `false`, `null`, `tru`, `truex`, `nul`, `nulll`, `True`, `falsy`, `t`, `f`, `n`, `[true,false,null]`,
		// Strings.
		`""`, `"\""`, `"\\"`, `"\/"`, `"\b\f\n\r\t"`, `"\'"`, `"\q"`, `"\x41"`, `"\u"`, `"\u12"`, `"\u12G4"`, `"\u00e9"`,
		`"\uD83D\uDE00"`, `"\ud800"`, `"\udc00"`, `"\ud800\u12G4"`, `"\ud800\u"`, `"\ud800\\"`, `"\\ud800"`, `"abc`, `"\`,
		"\"\x00\"", "\"\x1f\"", "\"\t\"", "\"\n\"", "\"\x7f\"", "\"\xff\"", "\"\xc3\"", "\"\xc3\x28\"", "\"\xed\xa0\x80\"",
		"\"\xf4\x90\x80\x80\"", "\"\xc0\xaf\"", "\"\xe2\x82\"", "\"\xe2\x82\xac\"", "\"é😀\"", "\"\xef\xbb\xbf\"", "\"\xef\xbf\xbd\"",
		// Structure.
		`{}`, `[]`, `{"a"}`, `{"a":}`, `{"a" 1}`, `{"a"::1}`, `{"a":1,}`, `{,}`, `[,]`, `[1,]`, `[,1]`, `[1,,2]`, `{]`, `[}`,
		`[1}`, `{"a":1]`, `{1:2}`, `{'a':1}`, `{"a":1 "b":2}`, `[[[]]`, `[]]`, `{"a":[}`, `[1 2]`, `{"a":1}}`, `{"a":1}{}`,
		` [ 1 , { "a" : 2 } ] `, "[\t1\n,\r2 ]", "[\v1]", "[\f1]", "[\x00]", "[\u00a0]", "[1]\u00a0",
		nested(jsonrpc.MaxDepth - 4), nested(jsonrpc.MaxDepth), strings.Repeat("[", jsonrpc.MaxDepth+5),
		strings.Repeat("[", jsonrpc.MaxDepth+5) + "\xff", strings.Repeat("[", 10) + "1" + strings.Repeat("]", 9) + "}",
		// Duplicate keys at depth, before and after other problems.
		`{"a":{"b":[{"c":1,"c":2}]}}`, `{"a":{"b":[{"c":1,"\u0063":2}]}}`, `{"c":1,"c":2,]`, `{"c":1,"c":2}}`,
		`{"c":1,"c":2,"d":"\xff"}`, `{"c":1,"c":2,"d":` + long + "7}", `{"c":"\ud800","c":1}`, `{"c":1,"C":2}`,
		`{"\xff":1}`, `{"a\x00":1}`, `{"\q":1}`, `{"\u0061":1,"a":2}`,
		// The review's list (issue 24): UTF-8 at its edges (overlong forms,
		// surrogates encoded in UTF-8, past U+10FFFF, U+FFFE, a BOM inside),
		// escapes cut at the end, keys equal only after unescaping at the
		// levels Parse reads, NUL and other bytes where a value starts.
		"\"\xc0\x80\"", "\"\xe0\x80\x80\"", "\"\xf0\x80\x80\x80\"", "\"\xed\xbf\xbf\"", "\"\xf5\x80\x80\x80\"",
		"\"\xef\xbf\xbe\"", "\"\xef\xbf\xbf\"", "\"a\xef\xbb\xbfb\"", `"\u`, `"\u0`, `"\ud800\u`, `"\ud800\udc0`, `"\ud800\`,
		`{"\u006dethod":1}`, `{"x":1,"\u0078":2}`, `{"X":1,"\u0078":2}`, `{"a":{"b":1,"\u0062":2}}`, "\x00", "[\x00", "{\"a\":\x00}",
		`-0e0`, `0e-0`, `-0.0e+0`, `1E`, `-.5`, `-e5`, `[-]`, `{"a":-}`, `[1.]`, `[01]`, `[.5]`, `[+1]`, `[tru]`, `[nul]`, `[1e]`,
	}
	// Every byte from 0x80 in a string, alone and before continuation bytes.
	for c := 0x80; c < 0x100; c++ {
		for _, tail := range []string{"", "\x80", "\xa0\x80", "\x90\x80\x80", "a"} {
			frags = append(frags, `"`+string([]byte{byte(c)})+tail+`"`)
		}
	}
	// An invalid byte, an escape or a quote at every offset of a string
	// (strings are read eight bytes at a time).
	for _, x := range []string{"\xff", "\x01", "\"", `\`, `\u0041`, `\ud800`, "é", "\xc3"} {
		for k := range 18 {
			frags = append(frags, `"`+strings.Repeat("a", k)+x+strings.Repeat("b", 18-k)+`"`)
		}
	}
	return frags
}

// onePassBodies places each fragment where one pass reads it: as the value
// of a member of input (data only), of agent_slug (a member Parse reads), of
// the id, as a key, and as a whole body; and damages a valid body at its
// edges (BOM, whitespace, trailing data, truncation).
func onePassBodies(t testing.TB) [][]byte {
	valid := string(actionBody(t, nil))
	var bodies [][]byte
	add := func(s string) { bodies = append(bodies, []byte(s)) }
	for _, x := range onePassFragments() {
		add(x)
		add(strings.Replace(valid, `"campaign_123"`, x, 1))
		add(strings.Replace(valid, `"agent_interviewer"`, x, 1))
		add(strings.Replace(valid, `"id":7`, `"id":`+x, 1))
		add(strings.Replace(valid, `"jsonrpc":"2.0"`, `"jsonrpc":"2.0","x":`+x, 1))
		if strings.HasPrefix(x, `"`) {
			add(strings.Replace(valid, `"campaign_id"`, x, 1))
			add(strings.Replace(valid, `"agent_slug"`, x, 1))
		}
	}
	for _, edge := range [][2]string{
		{"", ""}, {"\xef\xbb\xbf", ""}, {" \t\r\n", " \t\r\n"}, {"\v", ""}, {"", "\f"}, {"\x00", ""}, {"", "\x00"},
		{"", "x"}, {"", "{}"}, {"", ","}, {"", "]"}, {"\u00a0", ""}, {"", "\u00a0"}, {"[", "]"},
	} {
		add(edge[0] + valid + edge[1])
	}
	for _, cut := range []int{0, 1, 2, len(valid) / 2, len(valid) - 2, len(valid) - 1} {
		add(valid[:cut])
	}
	add(strings.NewReplacer(":", " :\n", ",", "\t,\r").Replace(valid))
	// Every 1-byte body, and the valid body cut at every byte.
	for c := range 256 {
		add(string([]byte{byte(c)}))
	}
	for cut := range len(valid) {
		add(valid[:cut])
	}
	add("")
	add(" ")
	return bodies
}

// TestParseOnePassMatchesSlow: Parse decides every seed of the oracle tests,
// the edge cases of onePassBodies, generated envelopes and byte mutations of
// them as ParseSlow does.
func TestParseOnePassMatchesSlow(t *testing.T) {
	checkGenerated(t, append(allSeeds(t), onePassBodies(t)...), 3, 3000, 10, checkOnePass)
}

// FuzzParseOnePass: for any input, Parse decides as ParseSlow does
// (checkOnePass).
func FuzzParseOnePass(f *testing.F) {
	fuzzBodies(f, append(corpusSeeds(f, "FuzzParse", "FuzzIsJSONObject"), onePassBodies(f)...), 4, checkOnePass)
}
