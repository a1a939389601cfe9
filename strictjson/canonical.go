package strictjson

import (
	"encoding/json"
	"fmt"
	"hash"
	"slices"
	"unicode/utf8"
)

// Canonical returns the canonical form (see the package doc) of raw, one
// strict JSON value nesting at most maxDepth deep; Decode's errors.
func Canonical(raw []byte, maxDepth int) ([]byte, error) {
	v, err := Decode(raw, maxDepth)
	if err != nil {
		return nil, err
	}
	return AppendCanonical(nil, v), nil
}

// AppendCanonical appends the canonical form of v, a tree as Decode builds
// it, to dst. It panics on any other type.
func AppendCanonical(dst []byte, v any) []byte {
	e := canonEncoder{dst: dst}
	e.value(v)
	return e.dst
}

// hashChunk is the size of HashCanonicalRaw's pieces; hashFirst the size
// its buffer starts at, growing with the form up to about a piece (the input
// of a JSON-RPC call is most often well under a kilobyte: a buffer made at
// its full size for every call, 64 KiB zeroed, was most of what an
// idempotency replay allocated).
const (
	hashChunk = 32 << 10
	hashFirst = 1 << 10
)

// canonEncoder writes a canonical form: into dst, or with h set, into h
// each time dst holds hashChunk bytes (dst is then reused).
type canonEncoder struct {
	dst []byte
	h   hash.Hash
	// keys holds, for HashCanonicalRaw, the unescaped keys of the objects
	// being written that held an escape (see rawMember).
	keys []byte
	// scratch holds, for HashCanonicalRaw, the string being unescaped
	// (appendUnescaped), reused from string to string.
	scratch []byte
	// ends holds, for HashCanonicalRaw, where deep member values end, the
	// first sorted of them sorted by start; frames and deeper are the
	// frames of a walk of skip, and walked the bytes read by skip (see
	// skip).
	ends   []valueEnd
	sorted int
	frames [MaxDepth + 1]skipFrame
	deeper []skipFrame
	walked int
}

// spill hands dst to h once it holds hashChunk bytes (with h set).
func (e *canonEncoder) spill() {
	if e.h != nil && len(e.dst) >= hashChunk {
		e.h.Write(e.dst)
		e.dst = e.dst[:0]
	}
}

func (e *canonEncoder) value(v any) {
	switch t := v.(type) {
	case nil:
		e.dst = append(e.dst, "null"...)
	case bool:
		if t {
			e.dst = append(e.dst, "true"...)
		} else {
			e.dst = append(e.dst, "false"...)
		}
	case json.Number:
		e.dst = append(e.dst, t...)
	case string:
		e.string(t)
	case []any:
		e.dst = append(e.dst, '[')
		for i, x := range t {
			if i > 0 {
				e.dst = append(e.dst, ',')
			}
			e.value(x)
		}
		e.dst = append(e.dst, ']')
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		e.dst = append(e.dst, '{')
		for i, k := range keys {
			if i > 0 {
				e.dst = append(e.dst, ',')
			}
			e.string(k)
			e.dst = append(e.dst, ':')
			e.value(t[k])
		}
		e.dst = append(e.dst, '}')
	default:
		panic(fmt.Sprintf("strictjson: AppendCanonical: unexpected %T", v))
	}
	e.spill()
}

// string writes s quoted and escaped; with h set, in pieces of at most
// hashChunk bytes of s, cut only before the first byte of a UTF-8 sequence
// (a cut never splits a rune, valid or not: the escaping is the same as
// in one piece).
func (e *canonEncoder) string(s string) {
	e.dst = append(e.dst, '"')
	for e.h != nil && len(s) > hashChunk {
		cut := hashChunk
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		if cut == 0 {
			break
		}
		e.dst = appendEscaped(e.dst, s[:cut])
		s = s[cut:]
		e.spill()
	}
	e.dst = appendEscaped(e.dst, s)
	e.dst = append(e.dst, '"')
}

// AppendString appends the canonical form of the string s (as Go's
// encoding/json writes it without HTML escaping; invalid UTF-8 as \ufffd).
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	return append(appendEscaped(dst, s), '"')
}

// appendEscaped appends s escaped as AppendString does, without quotes.
func appendEscaped(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	start := 0 // s[start:i] is still to append as it is
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(dst, s[start:]...)
}
