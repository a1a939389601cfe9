// The canonical form hashed from the JSON text itself, without the tree.

package strictjson

import (
	"encoding/json"
	"hash"
	"slices"
	"strings"
	"unsafe"
)

// HashCanonicalRaw writes to h the canonical form of raw, one strict JSON
// value (Check finds nothing in it), in pieces of about hashChunk bytes:
// the bytes of AppendCanonical(nil, Decode(raw)), read from raw as it is
// instead of from a decoded tree, never holding the whole form. A tree costs tens of bytes a value (a map entry, an
// interface, a string header), so a body of millions of small values would
// cost many times its size; here an array costs nothing more and an object
// one entry a member (its key and where its value starts), for as long as
// its members are written. Its behaviour on text Check refuses is
// unspecified (it does not panic on text that is valid JSON).
func HashCanonicalRaw(h hash.Hash, raw []byte) {
	e := canonEncoder{dst: make([]byte, 0, hashFirst), h: h}
	e.raw(raw, skipSpace(raw, 0))
	h.Write(e.dst)
}

// raw writes the canonical form of the value starting at b[i] and returns
// the index after it.
func (e *canonEncoder) raw(b []byte, i int) int {
	switch b[i] {
	case '{':
		return e.rawObject(b, i)
	case '[':
		e.dst = append(e.dst, '[')
		i = skipSpace(b, i+1)
		for n := 0; b[i] != ']'; n++ {
			if n > 0 {
				e.dst = append(e.dst, ',')
			}
			i = skipSpace(b, e.raw(b, i))
			if b[i] == ',' {
				i = skipSpace(b, i+1)
			}
		}
		e.dst = append(e.dst, ']')
		e.spill()
		return i + 1
	case '"':
		end, esc, _, _ := str(b, i)
		e.string(rawString(b[i:end], esc))
		e.spill()
		return end
	}
	// A number (its text as written, as json.Number keeps it) or a literal.
	end := skipValue(b, i)
	e.dst = append(e.dst, b[i:end]...)
	e.spill()
	return end
}

// rawMember is one member of an object being written: its key (unescaped)
// and where its value starts.
type rawMember struct {
	key   string
	value int
}

// rawObject writes the object starting at b[i] with its members sorted by
// key (as Go sorts strings, as AppendCanonical does) and returns the index
// after it.
func (e *canonEncoder) rawObject(b []byte, i int) int {
	var buf [16]rawMember
	members := buf[:0]
	i = skipSpace(b, i+1)
	for b[i] != '}' {
		end, esc, _, _ := str(b, i)
		key := rawString(b[i:end], esc)
		i = skipSpace(b, skipSpace(b, end)+1) // past the ':'
		members = append(members, rawMember{key: key, value: i})
		i = skipSpace(b, skipValue(b, i))
		if b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	slices.SortFunc(members, func(x, y rawMember) int { return strings.Compare(x.key, y.key) })
	e.dst = append(e.dst, '{')
	for n, m := range members {
		if n > 0 {
			e.dst = append(e.dst, ',')
		}
		e.string(m.key)
		e.dst = append(e.dst, ':')
		e.raw(b, m.value)
	}
	e.dst = append(e.dst, '}')
	e.spill()
	return i + 1
}

// rawString returns the string the JSON string literal q (quotes included)
// stands for, as encoding/json decodes it. Without an escape it is q's own
// bytes between the quotes, viewed as a string without a copy: the text is
// not changed while the hash is written.
func rawString(q []byte, esc bool) string {
	if !esc {
		s := q[1 : len(q)-1]
		if len(s) == 0 {
			return ""
		}
		return unsafe.String(&s[0], len(s))
	}
	var s string
	_ = json.Unmarshal(q, &s) // q is a valid JSON string: Check passed
	return s
}

// skipValue returns the index after the value starting at b[i], in valid
// JSON.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		end, _, _, _ := str(b, i)
		return end
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				end, _, _, _ := str(b, i)
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	case 't', 'f', 'n':
		return literal(b, i)
	}
	end, _ := number(b, i)
	return end
}
