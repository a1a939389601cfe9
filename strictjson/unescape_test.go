package strictjson

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// unescapeCases are JSON string literals with every kind of escape, valid
// and lone surrogates, and raw UTF-8 next to escapes.
var unescapeCases = []string{
	`""`, `"plain"`, `"\""`, `"\\"`, `"\/"`, `"\b\f\n\r\t"`, `"a\u0041b"`, `"\u0000"`,
	`"\u00e9é"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00"`, `"\ud83dx"`, `"\ud83d\u0041"`,
	`"\ud83d\ud83d\ude00"`, `"\udbff\udfff"`, `"\uD83D\uDE00"`, `"\uffff\ufffe"`, `"x\\u0041"`,
	`"😀\n😀"`, `"\u2028\u2029"`, `"\\\\\\\""`,
}

// TestAppendUnescapedMatchesEncodingJSON: appendUnescaped decodes every
// literal as json.Unmarshal does, the generated ones included.
func TestAppendUnescapedMatchesEncodingJSON(t *testing.T) {
	cases := append([]string(nil), unescapeCases...)
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{`\u`, `d83d`, `de00`, `dc00`, `0041`, `\\`, `\"`, `\n`, `a`, `é`, `😀`, `\ud800`, `\udfff`, `\/`}
	for range 5000 {
		var b strings.Builder
		b.WriteByte('"')
		for range rng.IntN(12) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		b.WriteByte('"')
		cases = append(cases, b.String())
	}
	checked := 0
	for _, q := range cases {
		if end, _, _, ok := str([]byte(q), 0); !ok || end != len(q) {
			continue // not one literal str accepts: appendUnescaped is never given it
		}
		var want string
		if err := json.Unmarshal([]byte(q), &want); err != nil {
			t.Fatalf("%s: encoding/json refuses what str accepts: %v", q, err)
		}
		if got := string(appendUnescaped([]byte("prefix"), []byte(q))); got != "prefix"+want {
			t.Errorf("%s: %q, want %q", q, got, "prefix"+want)
		}
		checked++
	}
	if checked < 1000 {
		t.Fatalf("only %d literals checked", checked)
	}
}

// FuzzAppendUnescaped compares appendUnescaped with json.Unmarshal on every
// literal str accepts.
func FuzzAppendUnescaped(f *testing.F) {
	for _, q := range unescapeCases {
		f.Add([]byte(q))
	}
	f.Fuzz(func(t *testing.T, q []byte) {
		if len(q) == 0 || q[0] != '"' {
			return
		}
		if end, _, _, ok := str(q, 0); !ok || end != len(q) {
			return
		}
		var want string
		if err := json.Unmarshal(q, &want); err != nil {
			t.Fatalf("%q: encoding/json refuses what str accepts: %v", q, err)
		}
		if got := string(appendUnescaped(nil, q)); got != want {
			t.Fatalf("%q: %q, want %q", q, got, want)
		}
	})
}
