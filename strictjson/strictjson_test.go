package strictjson_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/supervaize/supervaizer-sidecar/strictjson"
	"github.com/supervaize/supervaizer-sidecar/strictjson/oracle"
)

func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

var checkCases = []struct {
	in   string
	want error // nil: strict
}{
	{`{}`, nil},
	{`[]`, nil},
	{`"x"`, nil},
	{` 1 `, nil},
	{`{"a":1,"b":{"a":1},"c":[{"a":1},{"a":2}]}`, nil},
	{`{"a":1,"A":2}`, nil}, // case folding only matters in a Schema's objects
	{`{"a":"\ud83d\ude00"}`, nil},
	{`{"a":"\\ud800"}`, nil}, // an escaped backslash, then "ud800"
	{nested(strictjson.MaxDepth), nil},
	{nested(strictjson.MaxDepth + 1), strictjson.ErrTooDeep},
	{`{"a":1,"a":2}`, strictjson.ErrDuplicateKey},
	{`{"a":1,"\u0061":2}`, strictjson.ErrDuplicateKey},
	{`[{"x":{"k":1,"k":1}}]`, strictjson.ErrDuplicateKey},
	{`{"a":"\ud800"}`, strictjson.ErrLoneSurrogate},
	{`{"\udc00":1}`, strictjson.ErrLoneSurrogate},
	{`"\ud800\u0041"`, strictjson.ErrLoneSurrogate},
	{"\"\xff\"", strictjson.ErrUTF8},
	{"\xef\xbb\xbf{}", strictjson.ErrSyntax},
	{`{} {}`, strictjson.ErrSyntax},
	{`{"a":NaN}`, strictjson.ErrSyntax},
	{``, strictjson.ErrSyntax},
}

func TestCheck(t *testing.T) {
	for _, c := range checkCases {
		err := strictjson.Check([]byte(c.in), strictjson.MaxDepth)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("Check(%.40q) = %v, want %v", c.in, err, c.want)
		}
		if got, want := strictjson.IsObject([]byte(c.in), strictjson.MaxDepth), c.want == nil && strings.HasPrefix(strings.TrimSpace(c.in), "{"); got != want {
			t.Errorf("IsObject(%.40q) = %v", c.in, got)
		}
		if _, err := strictjson.Decode([]byte(c.in), strictjson.MaxDepth); c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("Decode(%.40q) = %v, want %v", c.in, err, c.want)
		}
	}
}

func TestDecodeErrorsNameThePath(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"agent":{"slug":"a","slug":"b"}}`, `invalid JSON: duplicate key "agent.slug"`},
		{`{"x":[{"id":1},{"m":1,"m":2}]}`, `invalid JSON: duplicate key "x[1].m"`},
		{`{"x":` + nested(10) + `}`, "invalid JSON: nesting deeper than 8 levels"},
		{`{"a":1} {}`, "invalid JSON: data after the top-level value"},
		{`{"a":`, "invalid JSON: unexpected end of input"},
	} {
		_, err := strictjson.Decode([]byte(c.in), 8)
		if err == nil || err.Error() != c.want {
			t.Errorf("Decode(%s) = %v, want %s", c.in, err, c.want)
		}
	}
}

func TestSchema(t *testing.T) {
	s := strictjson.NewSchema([]string{"a", "b.c", "b", "b.d.e", "x"})
	spans := make([]strictjson.Span, s.Len())
	b := []byte(` {"b" : {"d":{"e":[1, 2]},"c":"\u00e9", "zz":{}}, "a":null, "q":{"A":1,"a":2}} `)
	if f := strictjson.Scan(b, strictjson.MaxDepth, s, spans); !f.OK() {
		t.Fatalf("%+v", f)
	}
	get := func(i int) string { return string(b[spans[i].Start:spans[i].End]) }
	for i, want := range []string{"null", `"\u00e9"`, `{"d":{"e":[1, 2]},"c":"\u00e9", "zz":{}}`, "[1, 2]", ""} {
		if got := get(i); got != want {
			t.Errorf("span %d = %q, want %q", i, got, want)
		}
	}
	// Keys equal under case folding: refused in the schema's objects only.
	for in, fold := range map[string]bool{
		`{"a":1,"A":2}`:             true,
		`{"b":{"d":{"E":1,"e":1}}}`: true,
		`{"b":{"ſ":1,"S":1}}`:       true,
		`{"b":{"c":{"a":1,"A":1}}}`: false,
		`{"q":{"a":1,"A":1}}`:       false,
	} {
		f := strictjson.Scan([]byte(in), strictjson.MaxDepth, s, spans)
		if f.FoldDup != fold || f.Dup {
			t.Errorf("%s: %+v", in, f)
		}
	}
	if f := strictjson.Scan([]byte(`{"b":{"c":1,"\u0063":2}}`), strictjson.MaxDepth, s, spans); !f.Dup || f.DupKey != "c" {
		t.Errorf("exact duplicate in a schema object: %+v", f)
	}
}

func TestCanonical(t *testing.T) {
	same := []string{
		`{"b":[1,2.50,{"y":null,"x":true}],"a":"A\u00e9\n"}`,
		" { \"a\" : \"\\u0041é\\u000a\" , \"b\" : [ 1 , 2.50 , { \"x\" : true , \"y\" : null } ] } ",
	}
	want := `{"a":"Aé\n","b":[1,2.50,{"x":true,"y":null}]}`
	for _, in := range same {
		got, err := strictjson.Canonical([]byte(in), strictjson.MaxDepth)
		if err != nil || string(got) != want {
			t.Errorf("Canonical(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	if got, _ := strictjson.Canonical([]byte(`[1.0,1,1e0]`), 4); string(got) != `[1.0,1,1e0]` {
		t.Errorf("numbers: %s", got)
	}
	if _, err := strictjson.Canonical([]byte(`{"a":1,"a":1}`), 4); !errors.Is(err, strictjson.ErrDuplicateKey) {
		t.Errorf("duplicate: %v", err)
	}
}

// TestAppendStringIsEncodingJSON: canonical strings are written as Go's
// encoder writes them without HTML escaping, for any string (invalid UTF-8
// included).
func TestAppendStringIsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	parts := []string{"a", "\"", "\\", "\n", "\r", "\t", "\b", "\f", "\x00", "\x1f", "\x7f", "<", ">", "&", "é", "😀",
		"\u2028", "\u2029", "\ufffd", "\xff", "\xe2\x80", "\xed\xa0\x80", "/"}
	for range 5000 {
		var sb strings.Builder
		for range r.IntN(12) {
			sb.WriteString(parts[r.IntN(len(parts))])
		}
		s := sb.String()
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got, want := string(strictjson.AppendString(nil, s)), strings.TrimSuffix(b.String(), "\n"); got != want {
			t.Fatalf("AppendString(%q) = %s, want %s", s, got, want)
		}
	}
}

// FuzzCheck: Check agrees with the oracle (encoding/json's token stream and
// a regular expression), and Decode and Canonical with Check; the canonical
// form is a fixed point and decodes to the same tree.
func FuzzCheck(f *testing.F) {
	for _, c := range checkCases {
		f.Add([]byte(c.in))
	}
	for _, c := range keyCases() {
		f.Add([]byte(c.doc))
	}
	for _, d := range rawKeyDocs() {
		f.Add([]byte(d))
	}
	for _, d := range deepSeeds() {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		o := oracle.Read(b)
		if o.TooDeep {
			t.Skip("deeper than encoding/json reads")
		}
		const depth = 16
		err := strictjson.Check(b, depth)
		if (err == nil) != o.Strict(depth) {
			t.Fatalf("Check(%q) = %v, oracle %+v", b, err, o)
		}
		if got := strictjson.IsObject(b, depth); got != (o.Strict(depth) && o.IsObject) {
			t.Fatalf("IsObject(%q) = %v, oracle %+v", b, got, o)
		}
		if err == nil && !utf8.Valid(b) {
			t.Fatalf("accepted invalid UTF-8")
		}
		v, derr := strictjson.Decode(b, depth)
		if (derr == nil) != (err == nil) {
			t.Fatalf("Decode(%q) = %v, Check %v", b, derr, err)
		}
		if derr != nil {
			return
		}
		c := strictjson.AppendCanonical(nil, v)
		c2, err := strictjson.Canonical(c, depth)
		if err != nil || !bytes.Equal(c, c2) {
			t.Fatalf("canonical %s is not a fixed point: %s, %v", c, c2, err)
		}
		checkRawHash(t, b, c)
	})
}

// checkRawHash: HashCanonicalRaw of the strict JSON text b hashes exactly
// the canonical form c of its decoded tree.
func checkRawHash(t testing.TB, b, c []byte) {
	t.Helper()
	want := sha256.Sum256(c)
	h := sha256.New()
	strictjson.HashCanonicalRaw(h, b)
	if !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatalf("HashCanonicalRaw(%.200q) differs from the canonical form %.200q of its tree", b, c)
	}
}

// TestHashCanonicalRawGenerated: the canonical form hashed from the
// text (HashCanonicalRaw) is the one hashed from the decoded tree, for
// generated documents: objects whose keys sort differently escaped and
// unescaped, numbers as written, long strings cut into pieces, whitespace
// everywhere, nesting.
func TestHashCanonicalRawGenerated(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	strs := []string{"a", "b", "A", "é", "😀", `\u0061`, `\u00e9`, `\ud83d\ude00`, `\n`, `\\`, `\"`, `\/`,
		`\u2028`, "<&>", "", "zz", `a\u0000b`}
	nums := []string{"0", "-0", "1", "1.0", "1e0", "-2.50E+3", "12345678901234567890", "0.000"}
	ws := []string{"", " ", "\n", "\t", "\r\n "}
	var value func(depth int) string
	str := func() string {
		var sb strings.Builder
		sb.WriteByte('"')
		for range r.IntN(4) {
			sb.WriteString(strs[r.IntN(len(strs))])
		}
		if r.IntN(200) == 0 {
			sb.WriteString(strings.Repeat(`x\u00e9`, 40<<10)) // past hashChunk
		}
		sb.WriteByte('"')
		return sb.String()
	}
	value = func(depth int) string {
		w := ws[r.IntN(len(ws))]
		switch k := r.IntN(8); {
		case depth > 4 || k < 2:
			return w + nums[r.IntN(len(nums))] + w
		case k == 2:
			return w + []string{"true", "false", "null"}[r.IntN(3)] + w
		case k == 3:
			return w + str() + w
		case k == 4:
			items := make([]string, r.IntN(5))
			for i := range items {
				items[i] = value(depth + 1)
			}
			return w + "[" + strings.Join(items, ",") + "]" + w
		default:
			seen := map[string]bool{}
			var members []string
			for range r.IntN(7) {
				k := str()
				var u string
				if json.Unmarshal([]byte(k), &u) != nil || seen[u] {
					continue // a duplicate key is not strict JSON
				}
				seen[u] = true
				members = append(members, w+k+w+":"+value(depth+1))
			}
			return w + "{" + strings.Join(members, ",") + "}" + w
		}
	}
	long := []byte(`{"k":["` + strings.Repeat(`x\u00e9`, 40<<10) + `","` + strings.Repeat("é", 40<<10) + `"]}`)
	if v, err := strictjson.Decode(long, strictjson.MaxDepth); err != nil {
		t.Fatal(err)
	} else {
		checkRawHash(t, long, strictjson.AppendCanonical(nil, v))
	}
	for range 1500 {
		b := []byte(value(0))
		v, err := strictjson.Decode(b, strictjson.MaxDepth)
		if err != nil {
			t.Fatalf("generated %.200q: %v", b, err)
		}
		checkRawHash(t, b, strictjson.AppendCanonical(nil, v))
	}
}

// TestHashCanonicalRawLongStrings: HashCanonicalRaw hashes exactly the
// canonical form of the decoded tree for long strings (cut into pieces)
// holding escapes, multi-byte runes and invalid UTF-8 (written as \ufffd)
// at every offset around a cut, as values and as keys.
func TestHashCanonicalRawLongStrings(t *testing.T) {
	for _, unit := range []string{"x", "é", "\u2028", "\xe2\x80", "\xff", "\"\n", "😀"} {
		for pad := 0; pad < 4; pad++ {
			s := strings.Repeat("a", pad) + strings.Repeat(unit, (100<<10)/len(unit))
			raw, err := json.Marshal(map[string]any{"input": []any{s, map[string]any{s: s}, json.Number("1.0"), nil, true}})
			if err != nil {
				t.Fatal(err)
			}
			v, err := strictjson.Decode(raw, strictjson.MaxDepth)
			if err != nil {
				t.Fatal(err)
			}
			checkRawHash(t, raw, strictjson.AppendCanonical(nil, v))
		}
	}
}

// TestDuplicateKeyPastManyKeys: in an object of more keys than are compared
// one by one, a duplicate is still found (escaped or not, first or last,
// nested), and as many distinct keys are not taken for one.
func TestDuplicateKeyPastManyKeys(t *testing.T) {
	obj := func(n int, extra string) string {
		var sb strings.Builder
		sb.WriteString("{")
		for i := range n {
			fmt.Fprintf(&sb, `"k%d":%d,`, i, i)
		}
		sb.WriteString(extra + "}")
		return sb.String()
	}
	for _, c := range []struct {
		doc string
		dup string
	}{
		{obj(40, `"k5":1`), "k5"},
		{obj(40, `"\u006b39":1`), "k39"},
		{obj(100, `"k0":1`), "k0"},
		{`{"a":` + obj(50, `"k49":2`) + `}`, "k49"},
		{obj(1000, `"x":1`), ""},
		{`[` + obj(40, `"y":1`) + `,` + obj(40, `"y":1`) + `]`, ""},
	} {
		f := strictjson.Scan([]byte(c.doc), strictjson.MaxDepth, nil, nil)
		if f.Dup != (c.dup != "") || f.DupKey != c.dup {
			t.Errorf("Scan(%.60s…) = %+v, want duplicate %q", c.doc, f, c.dup)
		}
	}
}
