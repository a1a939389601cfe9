package strictjson_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/strictjson"
)

// rawKeyDocs are objects whose keys sort differently escaped and unescaped:
// escaped keys among plain ones, long escaped keys (a length of more than
// one uvarint byte), nested objects with escaped keys inside the values of
// an object whose own keys are escaped, and objects past the members kept
// on the stack.
func rawKeyDocs() []string {
	long := strings.Repeat(`\u0062`, 200) // 200 bytes unescaped
	docs := []string{
		`{"b":1,"\u0061":2,"c":{"\u00e9":1,"z":2,"\u0041":3},"\n":4,"é":5,"\ud83d\ude00":6,"\uffff":7,"":8,"\"":9}`,
		`{"` + long + `":1,"b":2,"` + long + `a":3,"` + long[:60] + `":{"\u0063":1,"` + long + `":2,"b":3}}`,
		`{ "\u0062" : { "\u0061" : [ { "\u0063" : 1 , "b" : 2 } ] , "a\u0000" : 3 } , "a" : 4 }`,
	}
	var sb strings.Builder
	sb.WriteString("{")
	for i := range 100 {
		if i > 0 {
			sb.WriteString(",")
		}
		switch i % 3 {
		case 0:
			fmt.Fprintf(&sb, `"k%d":%d`, i, i)
		case 1:
			fmt.Fprintf(&sb, `"\u006b%d":{"\u0078%d":1,"%s":2,"w":3}`, i, i, long)
		default:
			fmt.Fprintf(&sb, `"K\n%d":[{"\u0079":%d,"x":0}]`, i, i)
		}
	}
	sb.WriteString("}")
	return append(docs, sb.String())
}

// TestHashCanonicalRawEscapedKeys: the members of rawKeyDocs hash sorted by
// their unescaped keys, as the canonical form of the tree has them, with
// 32-bit offsets and with 64-bit ones.
func TestHashCanonicalRawEscapedKeys(t *testing.T) {
	for _, wide := range []bool{false, true} {
		for _, d := range rawKeyDocs() {
			v, err := strictjson.Decode([]byte(d), strictjson.MaxDepth)
			if err != nil {
				t.Fatalf("%.80s: %v", d, err)
			}
			restore := func() {}
			if wide {
				restore = strictjson.SetWideAbove(-1)
			}
			checkRawHash(t, []byte(d), strictjson.AppendCanonical(nil, v))
			restore()
		}
	}
}
