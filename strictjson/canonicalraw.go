// The canonical form hashed from the JSON text itself, without the tree.

package strictjson

import (
	"bytes"
	"encoding/binary"
	"hash"
	"math/bits"
	"slices"
	"unsafe"
)

// HashCanonicalRaw writes to h the canonical form of raw, one strict JSON
// value (Check finds nothing in it), in pieces of about hashChunk bytes:
// the bytes of AppendCanonical(nil, Decode(raw)), read from raw as it is
// instead of from a decoded tree, never holding the whole form. A tree
// costs tens of bytes a value (a map entry, an interface, a string header),
// so a body of millions of small values would cost many times its size;
// here an array costs nothing more and an object one entry a member (where
// its key starts: 4 bytes, 8 with the growth of the entries; a key with an
// escape also where its value starts and its unescaped bytes), for as long
// as its members are written. Its behaviour on text Check refuses is unspecified
// (it does not panic on text that is valid JSON).
//
// Every value is read a bounded number of times however deep it is (see
// canonEncoder.skip: at most 7 reads a byte to find the members of the
// objects, then one to write it), with at most 0.64 bytes a byte more for
// deep documents (none for ordinary ones).
func HashCanonicalRaw(h hash.Hash, raw []byte) {
	hashCanonicalRaw(h, raw)
}

// hashCanonicalRaw is HashCanonicalRaw; it returns, for the tests, the
// bytes read to skip member values and the member values kept (see
// canonEncoder.skip).
func hashCanonicalRaw(h hash.Hash, raw []byte) (walked, kept int) {
	e := canonEncoder{dst: make([]byte, 0, hashFirst), h: h}
	e.raw(raw, skipSpace(raw, 0))
	h.Write(e.dst)
	return e.walked, len(e.ends)
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
		if !esc {
			e.string(viewString(b[i+1 : end-1]))
		} else {
			e.scratch = appendUnescaped(e.scratch[:0], b[i:end])
			e.string(viewString(e.scratch))
		}
		e.spill()
		return end
	}
	// A number (its text as written, as json.Number keeps it) or a literal.
	end := skipValue(b, i)
	e.dst = append(e.dst, b[i:end]...)
	e.spill()
	return end
}

// rawMember is one member of an object being written, one offset (4
// bytes in the uint32 form): where its key starts in the text (the byte
// after its opening quote; a key without escape holds no '"': it ends at
// the first one, and its value starts after the ':' that follows); or, for
// a key that held an escape, with unescapedBit set, the offset in
// canonEncoder.keys of its entry: where its value starts and its length
// (uvarints), then its unescaped bytes.
type rawMember[O offset] struct{ at O }

// rawObject calls rawObjectOf with offsets that fit b: uint32 while an
// offset into b, or into the unescaped keys, fits in 31 bits (the entries
// of the unescaped keys of the objects open at once are at most twice as
// long as b: an entry's two uvarints and bytes at most 7 more than its
// member's text, which is at least 6), else uint64 (none is truncated).
func (e *canonEncoder) rawObject(b []byte, i int) int {
	if len(b) > wideAbove/2 {
		return rawObjectOf[uint64](e, b, i)
	}
	return rawObjectOf[uint32](e, b, i)
}

// rawObjectOf writes the object starting at b[i] with its members sorted by
// key (as Go sorts strings, as AppendCanonical does) and returns the index
// after it. Each member costs a rawMember while the object is written (8
// bytes at most with the doubling of members), and a key with an escape its
// entry in e.keys.
func rawObjectOf[O offset](e *canonEncoder, b []byte, i int) int {
	var buf [16]rawMember[O]
	members := buf[:0]
	mark := len(e.keys)
	i = skipSpace(b, i+1)
	for b[i] != '}' {
		end, esc, _, _ := str(b, i)
		k := i
		i = skipSpace(b, skipSpace(b, end)+1) // past the ':'
		m := rawMember[O]{O(k + 1)}
		if esc {
			m.at = O(len(e.keys)) | unescapedBit[O]()
			e.scratch = appendUnescaped(e.scratch[:0], b[k:end])
			e.keys = reserve(e.keys, 2*binary.MaxVarintLen64+len(e.scratch))
			e.keys = binary.AppendUvarint(e.keys, uint64(i))
			e.keys = binary.AppendUvarint(e.keys, uint64(len(e.scratch)))
			e.keys = append(e.keys, e.scratch...)
		}
		members = append(reserve(members, 1), m)
		i = skipSpace(b, e.skip(b, i))
		if b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	e.sortEnds()
	slices.SortFunc(members, func(x, y rawMember[O]) int {
		if (x.at|y.at)&unescapedBit[O]() == 0 {
			return comparePlainKeys(b, int(x.at), int(y.at))
		}
		return bytes.Compare(x.key(b, e.keys), y.key(b, e.keys))
	})
	e.dst = append(e.dst, '{')
	for n, m := range members {
		if n > 0 {
			e.dst = append(e.dst, ',')
		}
		// e.keys is read again for each member: the members' values
		// append to it (and may move it), then cut it back.
		k := m.key(b, e.keys)
		e.string(viewString(k))
		e.dst = append(e.dst, ':')
		e.raw(b, m.value(b, e.keys, len(k)))
	}
	e.keys = e.keys[:mark]
	e.dst = append(e.dst, '}')
	e.spill()
	return i + 1
}

// key returns the member's key, unescaped: in b, up to its closing quote,
// or in keys.
func (m rawMember[O]) key(b, keys []byte) []byte {
	if bit := unescapedBit[O](); m.at&bit != 0 {
		at := int(m.at &^ bit)
		_, w := binary.Uvarint(keys[at:])
		n, w2 := binary.Uvarint(keys[at+w:])
		return keys[at+w+w2 : at+w+w2+int(n)]
	}
	return b[m.at:keyEnd(b, int(m.at))]
}

// value returns where the member's value starts in b; n is the length of
// its key.
func (m rawMember[O]) value(b, keys []byte, n int) int {
	if bit := unescapedBit[O](); m.at&bit != 0 {
		v, _ := binary.Uvarint(keys[m.at&^bit:])
		return int(v)
	}
	return skipSpace(b, skipSpace(b, int(m.at)+n+1)+1) // past the ':'
}

// comparePlainKeys compares, as bytes.Compare does, the keys without
// escape whose bytes start at b[x] and b[y] (each ends at its first '"'),
// eight bytes at a time while both go on: the sort compares keys many
// times, and finding their ends first cost it a tenth of its time.
func comparePlainKeys(b []byte, x, y int) int {
	for x+8 <= len(b) && y+8 <= len(b) {
		vx, vy := binary.LittleEndian.Uint64(b[x:]), binary.LittleEndian.Uint64(b[y:])
		// The first '"' of each word (its bit, 8 a byte; 64: none).
		qx, qy := firstQuote(vx), firstQuote(vy)
		n := min(qx, qy) // the bits of the bytes both keys hold
		if n > 0 {
			// Those bytes, the first one highest: compared as numbers.
			hx, hy := bits.ReverseBytes64(vx)>>(64-n), bits.ReverseBytes64(vy)>>(64-n)
			if hx != hy {
				if hx < hy {
					return -1
				}
				return 1
			}
		}
		if n < 64 { // one key, or both, ends here
			return cmpInt(qx, qy)
		}
		x, y = x+8, y+8
	}
	return bytes.Compare(b[x:keyEnd(b, x)], b[y:keyEnd(b, y)])
}

// firstQuote returns 8 times the index of the first '"' among the eight
// bytes of v (little-endian), or 64 when there is none: the lowest byte
// the zero test flags in v^'"' is the first '"' (a flag above it may be
// false: a borrow, as in stops).
func firstQuote(v uint64) int {
	q := v ^ ('"' * ones)
	return bits.TrailingZeros64((q-ones)&^q&highs) &^ 7
}

// cmpInt compares a and b: -1, 0 or +1; a key whose end comes first is
// the shorter one, so the smaller one.
func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// keyEnd returns where the key without escape whose bytes start at b[at]
// ends: at its first '"'.
func keyEnd(b []byte, at int) int { return at + bytes.IndexByte(b[at:], '"') }

// viewString views b as a string without a copy, for e.string, which
// writes it and keeps nothing of it: b (the document, or the encoder's
// scratch) is not changed while it is written.
func viewString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
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
