package strictjson_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/strictjson"
)

// keysObject returns an object of n keys "k0"… followed by the members
// extra (with its comma).
func keysObject(n int, extra string) string {
	var sb strings.Builder
	sb.WriteString("{")
	for i := range n {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `"k%d":%d`, i, i)
	}
	return sb.String() + extra + "}"
}

// keyCase is a document and what Scan must find in it with tableSchema.
type keyCase struct {
	doc     string
	dup     string // the duplicate key ("": none)
	foldDup bool
}

// tableSchema reads object "b" (and the root): their keys are compared
// under case folding.
var tableSchema = strictjson.NewSchema([]string{"b.c"})

// keyCases: duplicates in objects past manyKeys keys, checked only (inside
// "a", an array, or at the root) and read by tableSchema (inside "b").
func keyCases() []keyCase {
	many := strictjson.ManyKeys + 8
	read := func(n int, extra string) string { return `{"b":` + keysObject(n, extra) + `}` }
	checked := func(n int, extra string) string { return `{"a":` + keysObject(n, extra) + `}` }
	return []keyCase{
		// Checked objects: found only past the table's growth (it starts
		// at 64 slots), escaped one way or the other, first or last key.
		{checked(many, `,"k5":1`), "k5", false},
		{checked(1000, `,"k0":1`), "k0", false},
		{checked(1000, `,"k999":1`), "k999", false},
		{checked(1000, `,"x":1,"k517":1`), "k517", false},
		{checked(1000, `,"\u006b700":1`), "k700", false},
		{`{"a":{"\u006b0":0,` + keysObject(1000, "")[1:] + `}`, "k0", false},
		{checked(1000, `,"K5":1,"x":1`), "", false}, // no folding here
		{`[` + keysObject(many, `,"y":1`) + `,` + keysObject(1000, `,"y":1`) + `]`, "", false},
		{`[` + keysObject(1000, `,"y":1,"y":2`) + `]`, "y", false},
		// Read objects: an exact duplicate stops the scan, a fold one is
		// recorded; past the growth too, escaped or not.
		{read(many, `,"K5":1`), "", true},
		{read(many, `,"k5":1`), "k5", false},
		{read(many, `,"\u006b5":1`), "k5", false},
		{read(many, `,"\u004b5":1`), "", true},
		{read(1000, `,"K999":1,"x":1`), "", true},
		{read(1000, `,"k999":1`), "k999", false},
		{read(1000, `,"\u006b0":1`), "k0", false},
		{`{"b":{"\u006b0":0,` + keysObject(1000, "")[1:] + `}`, "k0", false},
		{read(1000, `,"ſ":1,"S":2`), "", true}, // "ſ" folds to "s"
		{read(1000, `,"x":1`), "", false},
		// A class of keys past manyKeys is one key in the table: the first
		// one, compared exactly; a fold duplicate, then the first again.
		{read(many, `,"x":1,"X":2,"x":3`), "x", true},
		{read(many, `,"x":1,"X":2,"X":3`), "", true},
		// Within the first manyKeys+1 keys a class keeps its last key (as
		// a set from folded key to key did): an exact duplicate of the
		// first one past them is taken for a fold duplicate only.
		{`{"b":{"a":0,"A":1,` + keysObject(many, `,"A":2`)[1:] + `}`, "A", true},
		{`{"b":{"a":0,"A":1,` + keysObject(many, `,"a":2`)[1:] + `}`, "", true},
		{`{"b":{"a":0,"A":1,` + keysObject(4, `,"a":2`)[1:] + `}`, "a", true},
		{`{"b":{"a":0,"A":1,` + keysObject(1000, `,"A":2`)[1:] + `}`, "A", true},
		{`{"b":{"a":0,"A":1,` + keysObject(1000, `,"a":2`)[1:] + `}`, "", true},
	}
}

// checkKeyCases fails t when Scan does not find what keyCases say.
func checkKeyCases(t *testing.T) {
	t.Helper()
	spans := make([]strictjson.Span, tableSchema.Len())
	for _, c := range keyCases() {
		f := strictjson.Scan([]byte(c.doc), strictjson.MaxDepth, tableSchema, spans)
		if f.Invalid || f.Dup != (c.dup != "") || f.DupKey != c.dup || f.FoldDup != c.foldDup {
			t.Errorf("Scan(%.40s…%s) = %+v, want duplicate %q, fold duplicate %v", c.doc, c.doc[max(0, len(c.doc)-30):], f, c.dup, c.foldDup)
		}
	}
}

// TestKeyTables: duplicates past manyKeys, in checked and read objects.
func TestKeyTables(t *testing.T) { checkKeyCases(t) }

// TestKeyTablesCollide: the same when every key hashes alike (each is then
// told from the others by its bytes alone).
func TestKeyTablesCollide(t *testing.T) {
	defer strictjson.SetHashMask(0)()
	checkKeyCases(t)
}

// TestScanWide: Scan with 64-bit offsets (the documents longer than 2 GiB)
// finds what it finds with 32-bit ones, spans included.
func TestScanWide(t *testing.T) {
	docs := scanCases()
	for _, c := range checkCases {
		docs = append(docs, c.in)
	}
	for _, c := range keyCases() {
		docs = append(docs, c.doc)
	}
	for _, schema := range []*strictjson.Schema{nil, scanSchema, tableSchema} {
		var n int
		if schema != nil {
			n = schema.Len()
		}
		for _, d := range docs {
			narrow, wide := make([]strictjson.Span, n), make([]strictjson.Span, n)
			fn := strictjson.Scan([]byte(d), strictjson.MaxDepth, schema, narrow)
			restore := strictjson.SetWideAbove(-1)
			fw := strictjson.Scan([]byte(d), strictjson.MaxDepth, schema, wide)
			restore()
			if fn != fw || fmt.Sprint(narrow) != fmt.Sprint(wide) {
				t.Errorf("Scan(%.60q): %+v %v, wide %+v %v", d, fn, narrow, fw, wide)
			}
		}
	}
	defer strictjson.SetWideAbove(-1)()
	checkKeyCases(t)
}
