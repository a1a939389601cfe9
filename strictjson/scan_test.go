package strictjson_test

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/supervaize/supervaizer-sidecar/strictjson"
)

// scanPaths is the schema of checkScan: members at the root and nested.
var scanPaths = []string{"a", "b", "b.c", "b.d.e", "x"}

var scanSchema = strictjson.NewSchema(scanPaths)

// intDigits is the reference for Facts.IntDigits on a valid document: the
// most digits of a number without fraction or exponent, as encoding/json's
// token stream reads the numbers.
func intDigits(t testing.TB, b []byte) int {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	most := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return most
		}
		if err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		if n, ok := tok.(json.Number); ok && !strings.ContainsAny(string(n), ".eE") {
			most = max(most, len(strings.TrimPrefix(string(n), "-")))
		}
	}
}

// checkScan fails t when Scan disagrees with independent readings of b:
// Invalid only for documents utf8.Valid or gjson.ValidBytes refuse, and for
// each of them unless Scan stopped before (TooDeep, Dup); IntDigits as
// intDigits reads it; and, for an object it finds OK, the spans of
// scanPaths as gjson.GetBytes finds them.
func checkScan(t testing.TB, b []byte) {
	t.Helper()
	spans := make([]strictjson.Span, scanSchema.Len())
	f := strictjson.Scan(b, strictjson.MaxDepth, scanSchema, spans)
	valid := utf8.Valid(b) && gjson.ValidBytes(b)
	if f.Invalid && valid {
		t.Fatalf("Scan(%q) = %+v, but utf8.Valid and gjson.ValidBytes accept it", b, f)
	}
	if !f.Invalid && !valid && !f.TooDeep && !f.Dup {
		t.Fatalf("Scan(%q) = %+v, but utf8.Valid %v, gjson.ValidBytes %v", b, f, utf8.Valid(b), gjson.ValidBytes(b))
	}
	// What Scan finds OK encoding/json takes too (grants' segmentsError
	// relies on it: an object IsObject accepts is not checked again).
	if f.OK() && !json.Valid(b) {
		t.Fatalf("Scan(%q) = %+v (OK), but json.Valid refuses it", b, f)
	}
	if nf := strictjson.Scan(b, strictjson.MaxDepth, nil, nil); nf.Invalid != f.Invalid && !f.Dup && !nf.Dup {
		t.Fatalf("Scan(%q) without a schema = %+v, with one %+v", b, nf, f)
	}
	if !valid || f.TooDeep || f.Dup {
		return
	}
	if want := intDigits(t, b); f.IntDigits != want {
		t.Fatalf("Scan(%q).IntDigits = %d, want %d", b, f.IntDigits, want)
	}
	if !f.OK() || strictjson.FirstByte(b) != '{' {
		return
	}
	for i, p := range scanPaths {
		got := b[spans[i].Start:spans[i].End]
		if want := gjson.GetBytes(b, p).Raw; string(got) != want {
			t.Fatalf("Scan(%q): %s at %q, gjson finds %q", b, p, got, want)
		}
	}
}

// scanCases are documents at the edges of the grammar gjson.ValidBytes and
// utf8.Valid accept: whitespace, numbers, literals, strings (escapes,
// control characters, UTF-8), structure, and the bytes where Scan stops.
func scanCases() []string {
	cases := []string{
		"", " ", " \t\r\n", "{}", " \t\r\n{} \t\r\n", "\v{}", "{}\f", "\x00{}", "{}\x00", "\xef\xbb\xbf{}", "{}{}",
		"{} x", "{},", "\u00a0{}", "{}\u00a0", "[\u00a0]",
		`0`, `-0`, `-`, `01`, `-01`, `00`, `1.`, `.5`, `1.5`, `-0.0`, `1e5`, `1E+5`, `1e-5`, `1e`, `1e+`, `1E-`, `1.e5`,
		`1.0e999`, `+1`, `0x10`, `NaN`, `Infinity`, `-Infinity`, `--1`, `1-`, `1e5e5`, `1.5.5`, ` 7 `,
		`[12345,1.5,-1234567,1e10,"123456789",123456.0]`, `{"a":-12345678901234567890}`, `[0,-0,10]`,
		`true`, `false`, `null`, `tru`, `truex`, `nul`, `nulll`, `True`, `t`, `f`, `n`, `[true,false,null]`, `[true false]`,
		`""`, `"\""`, `"\\"`, `"\/"`, `"\b\f\n\r\t"`, `"\'"`, `"\q"`, `"\u"`, `"\u12"`, `"\u12G4"`, `"\u00e9"`,
		`"\uD83D\uDE00"`, `"\ud800"`, `"\ud800\u12G4"`, `"\ud800\u"`, `"\ud800\\"`, `"abc`, `"\`,
		"\"\x00\"", "\"\x1f\"", "\"\t\"", "\"\x7f\"", "\"\xff\"", "\"\xc3\"", "\"\xc3\x28\"", "\"\xed\xa0\x80\"",
		"\"\xf4\x90\x80\x80\"", "\"\xc0\xaf\"", "\"\xe2\x82\"", "\"é😀\"", "\"\xef\xbb\xbf\"",
		`{"a"}`, `{"a":}`, `{"a" 1}`, `{"a"::1}`, `{"a":1,}`, `{,}`, `[,]`, `[1,]`, `[,1]`, `[1,,2]`, `{]`, `[}`,
		`[1}`, `{"a":1]`, `{1:2}`, `{'a':1}`, `{"a":1 "b":2}`, `[[[]]`, `[]]`, `{"a":[}`, `{"a":1}}`,
		` { "b" : { "d" : { "e" : [ 1 , 2 ] } , "c" : "\u00e9" } , "a" : null , "x" : -1.5e3 } `,
		`{"\u0062":{"\u0063":true},"a":[{"a":{}}]}`, `{"b":{"c":1},"a":1,"b2":{"c":1,"c":2}}`,
		`{"a":1,"a":2,]`, `{"a":1,"a":2,"b":"\xff"}`, `{"b":{"c":1,"C":2},"a":"\xff"}`,
		nested(strictjson.MaxDepth), nested(strictjson.MaxDepth + 1), strings.Repeat("[", strictjson.MaxDepth+1) + "\xff",
		strings.Repeat("[", 10) + "1" + strings.Repeat("]", 9) + "}",
		// UTF-8 at its edges: overlong forms, surrogates encoded in UTF-8,
		// past U+10FFFF, noncharacters, a BOM inside a string.
		"\"\xc0\x80\"", "\"\xe0\x80\x80\"", "\"\xf0\x80\x80\x80\"", "\"\xed\xbf\xbf\"", "\"\xf5\x80\x80\x80\"",
		"\"\xef\xbf\xbe\"", "\"\xef\xbf\xbf\"", "\"a\xef\xbb\xbfb\"", "\"\xf4\x8f\xbf\xbf\"",
		// Escapes cut short and keys equal after unescaping.
		`"\u0`, `"\ud800\udc0`, `{"a":1,"\u0061":2}`, `{"b":{"c":1,"\u0063":2}}`, `{"\u0062":{"c":1,"C":2}}`,
		// Numbers where a value starts, and NUL there.
		`-0e0`, `-.5`, `-e5`, `[-]`, `[1.]`, `[01]`, `[.5]`, `[+1]`, `[tru]`, `[nul]`, `[1e]`, "\x00", "[\x00]",
	}
	// Every byte alone, and every byte from 0x80 in a string, alone, then
	// before each continuation-byte edge and before ASCII.
	for c := range 256 {
		cases = append(cases, string([]byte{byte(c)}))
		if c >= 0x80 {
			for _, tail := range []string{"", "\x80", "\xbf", "\x80\x80", "\x9f\xbf", "\xa0\x80", "\x8f\xbf\xbf", "\x90\x80\x80", "a"} {
				cases = append(cases, `"`+string([]byte{byte(c)})+tail+`"`)
			}
		}
	}
	for _, x := range []string{"\xff", "\x01", "\"", `\`, `\u0041`, `\ud800`, "é", "\xc3"} {
		for k := range 18 {
			s := `"` + strings.Repeat("a", k) + x + strings.Repeat("b", 18-k) + `"`
			cases = append(cases, s, `{"a":`+s+`}`, `{`+s+`:1}`)
		}
	}
	return cases
}

// TestScanValidity runs checkScan on scanCases and on every document cut
// short at each byte.
func TestScanValidity(t *testing.T) {
	for _, c := range scanCases() {
		for n := len(c); n >= 0; n-- {
			checkScan(t, []byte(c[:n]))
		}
	}
	for _, c := range checkCases {
		checkScan(t, []byte(c.in))
	}
	// IntDigits, spelled out.
	for in, want := range map[string]int{`[12345,1.5,-1234567,1e10,"123456789",123456.0]`: 7, `{"a":-0}`: 1, `"12"`: 0, `1E0`: 0} {
		if f := strictjson.Scan([]byte(in), strictjson.MaxDepth, nil, nil); f.IntDigits != want || !f.OK() {
			t.Errorf("Scan(%s) = %+v, want IntDigits %d", in, f, want)
		}
	}
}

// FuzzScan: for any input, Scan agrees with utf8.Valid, gjson.ValidBytes,
// encoding/json's numbers and gjson's paths (checkScan).
func FuzzScan(f *testing.F) {
	for _, c := range scanCases() {
		f.Add([]byte(c))
	}
	for _, c := range checkCases {
		f.Add([]byte(c.in))
	}
	for _, c := range keyCases() {
		f.Add([]byte(c.doc))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkScan(t, b)
	})
}
