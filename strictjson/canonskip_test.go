package strictjson_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/strictjson"
)

// chain returns depth objects nested in one another, each written by
// level(inner) around the next, the innermost around leaf.
func chain(depth int, leaf string, level func(inner string) string) string {
	s := leaf
	for range depth {
		s = level(s)
	}
	return s
}

// repeatIn returns the JSON array of n copies of v.
func repeatIn(n int, v string) string {
	return "[" + strings.TrimSuffix(strings.Repeat(v+",", n), ",") + "]"
}

// deepSeeds are small deep documents for FuzzCheck (at most 16 levels, its
// depth): objects nested past the levels after which HashCanonicalRaw keeps
// a member value's end.
func deepSeeds() []string {
	member := func(inner string) string { return `{"a":` + inner + `}` }
	c, c9 := chain(12, `"x"`, member), chain(9, `"x"`, member)
	return []string{
		c,
		repeatIn(2, c),
		chain(2, `{"b":`+c9+`,"a":[`+c9+`,{"c":`+c9+`}]}`, func(in string) string { return `{"\u0062":1,"a":` + in + `}` }),
	}
}

// skipShapes are the documents whose skips TestHashCanonicalRawWork counts:
// deep objects (a long string, or a short one, at the bottom), deep objects
// inside arrays and arrays inside them, many small deep chunks (at the
// depths where the fewest values are kept), and wide and deep mixes.
func skipShapes() map[string]string {
	member := func(inner string) string { return `{"a":` + inner + `}` }
	long := `"` + strings.Repeat("x", 256<<10) + `"`
	short := `"` + strings.Repeat("x", 1000) + `"`
	shapes := map[string]string{
		"deep63 long string":   chain(63, long, member),
		"deep20 long string":   chain(20, long, member),
		"deep63 short strings": repeatIn(200, chain(62, short, member)),
		"deep63 spaced": chain(63, long, func(in string) string {
			return " {\n\t\"a\" :  " + in + " }\r\n"
		}),
		"deep in arrays": repeatIn(3, chain(31, long, func(in string) string {
			return `{"a":[` + in + `]}`
		})),
		"arrays in deep": chain(15, long, func(in string) string {
			return `{"b":[[1,[` + in + `]]]}`
		}),
		"small chunks": repeatIn(2000, chain(62, "{}", member)),
		"wide and deep": chain(60, long, func(in string) string {
			return `{"z":"` + strings.Repeat("y", 300) + `","a":` + in + `,"c":{"d":[1,{"e":"f"}],"g":{"h":{}}},"\u0062":` + short + `}`
		}),
	}
	for depth := 2; depth <= 13; depth++ {
		shapes[fmt.Sprintf("small chunks %d deep", depth)] = repeatIn(3000, chain(depth, "{}", member))
		shapes[fmt.Sprintf("strings %d deep", depth)] = repeatIn(200, chain(depth, short, member))
		shapes[fmt.Sprintf("members %d deep", depth)] = chain(1, repeatIn(500, chain(depth, `"`+strings.Repeat("s", 100)+`"`, member)), member)
	}
	return shapes
}

// TestHashCanonicalRawWork: however deep the objects, HashCanonicalRaw's
// skips read at most 7 bytes a byte of the text (the writing pass reads it
// once more) and keep the ends of at most a value a 25 bytes (and one a
// keepAbove bytes a level), and the hash is the one of the tree's canonical
// form. Walking every member value in full read a byte 63 objects deep 63
// times.
func TestHashCanonicalRawWork(t *testing.T) {
	for name, doc := range skipShapes() {
		raw := []byte(doc)
		v, err := strictjson.Decode(raw, strictjson.MaxDepth)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := sha256.Sum256(strictjson.AppendCanonical(nil, v))
		for _, keepAbove := range []int{64 << 10, 100} {
			restore := strictjson.SetKeepAbove(keepAbove)
			h := sha256.New()
			walked, kept := strictjson.HashCanonicalRawCost(h, raw)
			if string(h.Sum(nil)) != string(want[:]) {
				t.Fatalf("%s: the hash differs from the tree's canonical form", name)
			}
			n := len(raw)
			t.Logf("%s (keepAbove %d): %d bytes, %.2f reads a byte in skips, %d kept (%.3f B/B)",
				name, keepAbove, n, float64(walked)/float64(n), kept, float64(16*kept)/float64(n))
			if walked > 7*n {
				t.Errorf("%s: skips read %d bytes of %d (%.1f a byte), want at most 7 a byte", name, walked, n, float64(walked)/float64(n))
			}
			if limit := n/25 + strictjson.MaxDepth*(n/keepAbove+1); kept > limit {
				t.Errorf("%s: %d values kept for %d bytes, want at most %d", name, kept, n, limit)
			}
			if keepAbove == 64<<10 && 16*kept > n {
				t.Errorf("%s: %d values kept for %d bytes, more than a byte a byte", name, kept, n)
			}
			restore()
		}
	}
}

// TestHashCanonicalRawDeepGenerated: HashCanonicalRaw hashes the canonical
// form of the decoded tree for random deep documents (objects nested up to
// MaxDepth, arrays among them, escaped keys, whitespace, strings long and
// short), keeping the ends of values by their height and by their length,
// and its skips stay within 7 reads a byte.
func TestHashCanonicalRawDeepGenerated(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	keys := []string{`"a"`, `"b"`, `"\u0061a"`, `"é"`, `""`, `"\n"`, `"A"`, `"aa"`, `"\u00e9"`}
	ws := []string{"", " ", "\n\t"}
	var value func(depth, maxDepth int) string
	value = func(depth, maxDepth int) string {
		w := ws[r.IntN(len(ws))]
		if depth >= maxDepth {
			return w + []string{"1", "null", `"s"`, `{}`, `[]`, `"` + strings.Repeat("x", r.IntN(300)) + `"`}[r.IntN(6)] + w
		}
		switch k := r.IntN(10); {
		case k == 0:
			items := make([]string, 1+r.IntN(3))
			for i := range items {
				d := depth + 1 // an array is a level too
				if i > 0 {
					d = max(d, maxDepth-r.IntN(7))
				}
				items[i] = value(d, maxDepth)
			}
			return w + "[" + strings.Join(items, ",") + "]" + w
		case k == 1:
			return w + `"` + strings.Repeat(`y\u00e9`, r.IntN(100)) + `"` + w
		default:
			seen := map[string]bool{}
			var members []string
			// One member going deeper, sometimes a few shallower ones.
			n := 1 + r.IntN(2)*r.IntN(4)
			for range n {
				key := keys[r.IntN(len(keys))]
				var u string
				if json.Unmarshal([]byte(key), &u) != nil || seen[u] {
					continue
				}
				seen[u] = true
				d := depth + 1
				if len(members) > 0 {
					d = max(d, maxDepth-r.IntN(7)) // a sibling at most 7 levels deep
				}
				members = append(members, w+key+w+":"+value(d, maxDepth))
			}
			return w + "{" + strings.Join(members, ",") + "}" + w
		}
	}
	for i := range 2000 {
		keepAbove := 64 << 10
		if i%2 == 1 {
			keepAbove = 1 + r.IntN(500)
		}
		restore := strictjson.SetKeepAbove(keepAbove)
		md := 1 + r.IntN(strictjson.MaxDepth-2)
		raw := []byte(value(0, md))
		v, err := strictjson.Decode(raw, strictjson.MaxDepth)
		if err != nil {
			d, m := 0, 0
			for _, c := range raw {
				switch c {
				case '{', '[':
					d++
					m = max(m, d)
				case '}', ']':
					d--
				}
			}
			t.Fatalf("generated %.200q (%d deep, md %d): %v", raw, m, md, err)
		}
		checkRawHash(t, raw, strictjson.AppendCanonical(nil, v))
		if walked, _ := strictjson.HashCanonicalRawCost(sha256.New(), raw); walked > 7*len(raw) {
			t.Fatalf("generated %.200q: skips read %d bytes of %d", raw, walked, len(raw))
		}
		restore()
	}
}

// FuzzHashCanonicalRawKept: HashCanonicalRaw hashes the canonical form of
// the tree for any strict document when its skips keep the end of every
// member value they walk under the one they skip (keepAbove 1: every jump
// and every search of the kept ends is taken).
func FuzzHashCanonicalRawKept(f *testing.F) {
	for _, d := range deepSeeds() {
		f.Add([]byte(d))
	}
	for _, d := range rawKeyDocs() {
		f.Add([]byte(d))
	}
	f.Cleanup(strictjson.SetKeepAbove(1))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := strictjson.Decode(b, strictjson.MaxDepth)
		if err != nil {
			return
		}
		checkRawHash(t, b, strictjson.AppendCanonical(nil, v))
	})
}
