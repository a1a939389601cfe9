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
		// A key with an escape past manyKeys is kept in the table as where
		// it is in the document, unescaped again when compared: found by
		// a later key, escaped or not, its escapes holding '"' and '\\'.
		{checked(1000, `,"\u0078y":1,"xy":2`), "xy", false},
		{checked(many, `,"a\"b\\":1,"x":2,"a\u0022b\u005c":3`), `a"b\`, false},
		{checked(many, `,"a\"b\\":1,"x":2,"a\u0022b\u005C\\":3`), "", false},
		{read(1000, `,"\u0078y":1,"XY":2`), "", true},
		{read(many, `,"\u0078\"":1,"x\"":2`), `x"`, false},
		{read(many, `,"\u0078\"":1,"X\u0022":2`), "", true},
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

// workShapes are documents of about n keys, each a shape that could make
// finding duplicate keys cost more than a constant a key: one object of n
// distinct keys, checked or read by tableSchema (keys compared under case
// folding), with escapes or not ASCII, or short keys whose values the
// table's own loop does not read (containers, escaped strings); and n/32
// objects of 32 keys each (one under manyKeys, compared one by one) whose
// keys share their bit summaries (keyBit, keyBits and foldBit: same length,
// first and last eight bytes, middle byte), in an array or as the members
// of one object.
func workShapes(n int) map[string][]byte {
	objOf := func(n int, key func(i int) string, value func(i int) string) string {
		var sb strings.Builder
		sb.WriteString("{")
		for i := range n {
			if i > 0 {
				sb.WriteString(",")
			}
			fmt.Fprintf(&sb, `"%s":%s`, key(i), value(i))
		}
		return sb.String() + "}"
	}
	obj := func(n int, key func(i int) string) string {
		return objOf(n, key, func(int) string { return "0" })
	}
	short := func(i int) string { return fmt.Sprintf("%x", i) }
	notPlain := func(i int) string { return []string{"{}", "[]", `"\n"`, "1e2"}[i%4] }
	plain := func(i int) string { return fmt.Sprintf("k%07d", i) }
	escaped := func(i int) string { return fmt.Sprintf(`\u006b%07d`, i) }
	wide := func(i int) string { return fmt.Sprintf("é%07d", i) }
	alike := func(i int) string { return fmt.Sprintf("abcdefgh%03dm%03dijklmnop", i/1000%1000, i%1000) }
	var arr, members strings.Builder
	arr.WriteString("[")
	members.WriteString("{")
	for j := 0; j < n/strictjson.ManyKeys; j++ {
		if j > 0 {
			arr.WriteString(",")
			members.WriteString(",")
		}
		o := obj(strictjson.ManyKeys, func(i int) string { return alike(j*strictjson.ManyKeys + i) })
		arr.WriteString(o)
		fmt.Fprintf(&members, `"o%d":%s`, j, o)
	}
	return map[string][]byte{
		"checked":         []byte(obj(n, plain)),
		"checked_escaped": []byte(obj(n, escaped)),
		"read":            []byte(`{"b":` + obj(n, plain) + `}`),
		"read_escaped":    []byte(`{"b":` + obj(n, escaped) + `}`),
		"read_not_ascii":  []byte(`{"b":` + obj(n, wide) + `}`),
		"checked_values":  []byte(`{"a":` + objOf(n, short, notPlain) + `}`),
		"read_values":     []byte(`{"b":` + objOf(n, short, notPlain) + `}`),
		"small_alike":     []byte(arr.String() + "]"),
		"small_members":   []byte(`{"b":` + members.String() + `}}`),
	}
}

// TestKeyWorkIsLinear: finding duplicate keys costs a bounded number of
// probes and key comparisons a key, whatever the shape (workShapes) and
// however many keys: 8 times the keys cost about 8 times the work, and at
// most keyWorkBound a key. Counted, not timed (make test holds no timing):
// the count is what makes the many-keys bodies slow when it grows faster
// than the keys (BenchmarkScanManyKeys, BenchmarkParseThroughput in
// jsonrpc). The same count shows the quadratic case when every key hashes
// alike (the test's own check that it can see one).
func TestKeyWorkIsLinear(t *testing.T) {
	const n, keyWorkBound = 4096, 40
	small, large := workShapes(n), workShapes(8*n)
	for name, doc := range small {
		spans := make([]strictjson.Span, tableSchema.Len())
		f, w1 := strictjson.ScanWork(doc, tableSchema, spans)
		if !f.OK() {
			t.Fatalf("%s: %+v", name, f)
		}
		f, w8 := strictjson.ScanWork(large[name], tableSchema, spans)
		if !f.OK() {
			t.Fatalf("%s ×8: %+v", name, f)
		}
		t.Logf("%s: %d keys %d work (%.1f a key), %d keys %d work (%.1f a key)", name, n, w1, float64(w1)/n, 8*n, w8, float64(w8)/(8*n))
		if w1 > keyWorkBound*n || w8 > keyWorkBound*8*n {
			t.Errorf("%s: work %d for %d keys, %d for %d: over %d a key", name, w1, n, w8, 8*n, keyWorkBound)
		}
		if float64(w8) > 10*float64(w1) {
			t.Errorf("%s: 8 times the keys cost %.1f times the work (%d, %d)", name, float64(w8)/float64(w1), w1, w8)
		}
	}
	defer strictjson.SetHashMask(0)()
	doc1, doc2 := workShapes(1000)["checked"], workShapes(2000)["checked"]
	_, w1 := strictjson.ScanWork(doc1, nil, nil)
	_, w2 := strictjson.ScanWork(doc2, nil, nil)
	if w2 < 3*w1 {
		t.Errorf("every key hashing alike: twice the keys cost %d, %d: the count does not see the quadratic case", w1, w2)
	}
}

// TestFoldASCII: Fold (eight ASCII bytes at a time, then one by one, then
// rune by rune) upper-cases exactly the ASCII letters, at every offset.
func TestFoldASCII(t *testing.T) {
	var all []byte
	for c := range 128 {
		all = append(all, byte(c))
	}
	all = append(all, "ſKé"...)
	for start := range len(all) {
		for end := start; end <= len(all) && end <= start+20; end++ {
			k := string(all[start:end])
			want := strings.Map(func(r rune) rune {
				switch {
				case 'a' <= r && r <= 'z':
					return r - 'a' + 'A'
				case r == 'ſ':
					return 'S'
				case r == 'K': // Kelvin sign
					return 'K'
				case r == 'é':
					return 'É'
				}
				return r
			}, k)
			if got := strictjson.Fold(k); got != want {
				t.Fatalf("Fold(%q) = %q, want %q", k, got, want)
			}
		}
	}
}

// TestKeyTablesRandom: objects of 33 to 3000 keys of 3 to 7 of a few
// characters, escaped or not (so that duplicates come at any point of a
// table's growth, and keys with escapes are compared with keys without),
// checked: Scan finds a duplicate exactly when there is one, and names the
// first key in the document that repeats an earlier one; read (keys
// compared under case folding): Scan finds a problem exactly when two keys
// are equal under case folding, a duplicate only when two are equal. Under
// the real hash and with every key colliding.
func TestKeyTablesRandom(t *testing.T) {
	rnd := uint64(7)
	next := func(n int) int {
		rnd = rnd*6364136223846793005 + 1442695040888963407
		return int(rnd>>33) % n
	}
	chars := []struct{ raw, plain string }{
		{"a", "a"}, {"B", "B"}, {"b", "b"}, {`\u0061`, "a"}, {`\"`, `"`}, {`\\`, `\`}, {"é", "é"}, {`\u00c9`, "É"}, {"1", "1"},
	}
	for _, mask := range []uint64{^uint64(0), 0} {
		restore := strictjson.SetHashMask(mask)
		for round := range 300 {
			n := 33 + next(3000)
			if mask == 0 {
				n = 33 + next(300)
			}
			var raw strings.Builder
			var plains []string
			for i := range n {
				if i > 0 {
					raw.WriteString(",")
				}
				var k strings.Builder
				var p strings.Builder
				for range 3 + next(5) {
					c := chars[next(len(chars))]
					k.WriteString(c.raw)
					p.WriteString(c.plain)
				}
				fmt.Fprintf(&raw, `"%s":%d`, k.String(), i)
				plains = append(plains, p.String())
			}
			obj := "{" + raw.String() + "}"
			firstDup, foldPair, exactPair := "", false, false
			seen, folded := map[string]bool{}, map[string]bool{}
			for _, p := range plains {
				if seen[p] {
					exactPair = true
					if firstDup == "" {
						firstDup = p
					}
				}
				if folded[strictjson.Fold(p)] {
					foldPair = true
				}
				seen[p], folded[strictjson.Fold(p)] = true, true
			}
			f := strictjson.Scan([]byte(`{"a":`+obj+`}`), strictjson.MaxDepth, tableSchema, make([]strictjson.Span, tableSchema.Len()))
			if f.Invalid || f.Dup != exactPair || f.DupKey != firstDup || f.FoldDup {
				t.Fatalf("mask %x round %d checked: %+v, want duplicate %q", mask, round, f, firstDup)
			}
			f = strictjson.Scan([]byte(`{"b":`+obj+`}`), strictjson.MaxDepth, tableSchema, make([]strictjson.Span, tableSchema.Len()))
			if f.Invalid || (f.Dup || f.FoldDup) != foldPair || f.Dup && !exactPair {
				t.Fatalf("mask %x round %d read: %+v, want a problem %v (an exact duplicate among them %v)", mask, round, f, foldPair, exactPair)
			}
		}
		restore()
	}
}

// TestKeyTablesFullAtEnd: objects of short members (8 bytes) that end the
// document, of about three quarters of a table's size: their tables do not
// grow past three quarters full when the rest of the document cannot fill
// them past five sixths, and still find a duplicate as the last key (the
// table at its fullest) or none.
func TestKeyTablesFullAtEnd(t *testing.T) {
	const alpha = "0123456789abcdefghijklmnopqrstuvwxyz!#$%&()*+-./;<=>?@[]^_`{|}~"
	key := func(i int) string {
		return string([]byte{alpha[i%len(alpha)], alpha[i/len(alpha)%len(alpha)], alpha[i/len(alpha)/len(alpha)]})
	}
	for n := 2900; n < 3500; n += 23 {
		var sb strings.Builder
		for i := range n {
			fmt.Fprintf(&sb, `"%s":0,`, key(i))
		}
		body := sb.String()
		for _, c := range []struct{ last, dup string }{{key(n), ""}, {key(n - 1), key(n - 1)}, {key(0), key(0)}} {
			for _, doc := range []string{`{"a":{` + body + `"` + c.last + `":0}}`, `{"b":{` + body + `"` + c.last + `":0}}`} {
				f := strictjson.Scan([]byte(doc), strictjson.MaxDepth, tableSchema, make([]strictjson.Span, tableSchema.Len()))
				if f.Invalid || f.Dup != (c.dup != "") || f.DupKey != c.dup || f.FoldDup {
					t.Fatalf("%d keys and %q: %+v, want duplicate %q", n, c.last, f, c.dup)
				}
			}
		}
	}
}
