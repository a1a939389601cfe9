package strictjson_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/strictjson"
	"github.com/supervaize/supervaizer-sidecar/strictjson/oracle"
)

// genDoc writes random JSON text of the shapes Scan reads eight bytes at a
// time and those it leaves to its general code: keys and strings of every
// length around a word, escapes, non-ASCII, a control character or an
// invalid byte now and then, numbers of every form, literals, whitespace,
// nesting, objects past ManyKeys keys, and keys that repeat (exactly, after
// unescaping, or in letter case only).
type genDoc struct {
	r  *rand.Rand
	sb strings.Builder
}

var (
	genKeys    = []string{"a", "A", "id", "ID", "name", "tags", "k0000000", "K0000000", "abcdefgh", "abcdefghi", `\u0061`, `a\"b`, "é", "ſ", "S", ""}
	genNumbers = []string{"0", "-0", "7", "12345", "-12", "1.5", "-0.25", "12.75", "1e5", "1E+2", "-3.5e-2", "01", "1.", "-", ".5", "123456789012345678901234567890"}
	genPieces  = []string{"a", "bc", "defgh", " ", "é", "😀", `\"`, `\\`, `\/`, `\n`, `\u0041`, `\ud83d\ude00`, `\ud800`, "\t", "\x01", "\xff", "\x7f"}
	genSpace   = []string{"", "", "", "", " ", "\n  ", "\t", "\r\n"}
)

func (g *genDoc) pick(s []string) string { return s[g.r.IntN(len(s))] }

func (g *genDoc) space() { g.sb.WriteString(g.pick(genSpace)) }

func (g *genDoc) str() {
	g.sb.WriteByte('"')
	for range g.r.IntN(12) {
		if g.r.IntN(4) == 0 {
			g.sb.WriteString(g.pick(genPieces))
		} else {
			g.sb.WriteString(strings.Repeat("x", g.r.IntN(9)))
		}
	}
	g.sb.WriteByte('"')
}

func (g *genDoc) value(depth int) {
	g.space()
	switch k := g.r.IntN(10); {
	case depth < 6 && k < 3:
		n := g.r.IntN(6)
		if g.r.IntN(8) == 0 {
			n = strictjson.ManyKeys + g.r.IntN(12)
		}
		g.sb.WriteByte('{')
		for i := range n {
			if i > 0 {
				g.sb.WriteByte(',')
			}
			g.space()
			if n > 8 && g.r.IntN(4) != 0 {
				g.sb.WriteString(`"k` + strings.Repeat("0", g.r.IntN(9)) + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `"`)
			} else if g.r.IntN(3) == 0 {
				g.str()
			} else {
				g.sb.WriteString(`"` + g.pick(genKeys) + `"`)
			}
			g.space()
			g.sb.WriteByte(':')
			g.value(depth + 1)
		}
		g.space()
		g.sb.WriteByte('}')
	case depth < 6 && k < 5:
		g.sb.WriteByte('[')
		for i := range g.r.IntN(5) {
			if i > 0 {
				g.sb.WriteByte(',')
			}
			g.value(depth + 1)
		}
		g.space()
		g.sb.WriteByte(']')
	case k < 7:
		g.str()
	case k < 9:
		g.sb.WriteString(g.pick(genNumbers))
	default:
		g.sb.WriteString(g.pick([]string{"true", "false", "null", "tru", "nul", "fals"}))
	}
	g.space()
}

// TestScanGenerated: on generated documents, cut short or with a byte
// changed, inserted or deleted,
// Check and IsObject agree with the oracle (duplicate keys included) and
// Scan with independent readings (checkScan).
func TestScanGenerated(t *testing.T) {
	const depth = 16
	r := rand.New(rand.NewPCG(34, 1))
	check := func(b []byte) {
		t.Helper()
		checkScan(t, b)
		o := oracle.Read(b)
		if o.TooDeep {
			return
		}
		if err := strictjson.Check(b, depth); (err == nil) != o.Strict(depth) {
			t.Fatalf("Check(%q) = %v, oracle %+v", b, err, o)
		}
		if got := strictjson.IsObject(b, depth); got != (o.Strict(depth) && o.IsObject) {
			t.Fatalf("IsObject(%q) = %v, oracle %+v", b, got, o)
		}
	}
	for n := range 4000 {
		g := genDoc{r: r}
		g.value(0)
		doc := []byte(g.sb.String())
		check(doc)
		if n < 40 {
			for cut := range len(doc) { // cut short at every byte
				check(doc[:cut])
			}
		}
		for range 4 {
			m := []byte(string(doc))
			if len(m) == 0 {
				break
			}
			at := r.IntN(len(m))
			switch r.IntN(3) {
			case 0:
				m = append(m[:at], m[at+1:]...)
			case 1:
				const bytes = "\"\\{}[],: 0e.-\xff"
				m[at] = bytes[r.IntN(len(bytes))]
			default:
				m = append(m[:at], append([]byte{m[r.IntN(len(m))]}, m[at:]...)...)
			}
			check(m)
		}
	}
}

// TestScanTablesCut: the key cases of objects past ManyKeys keys, cut short
// at every byte (where the members of a table's object are read in a loop
// of their own), agree with independent readings (checkScan).
func TestScanTablesCut(t *testing.T) {
	for _, c := range keyCases() {
		if len(c.doc) > 2000 {
			continue
		}
		for cut := range len(c.doc) {
			checkScan(t, []byte(c.doc[:cut]))
		}
	}
}
