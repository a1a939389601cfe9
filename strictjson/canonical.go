package strictjson

import (
	"encoding/json"
	"fmt"
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
	switch t := v.(type) {
	case nil:
		return append(dst, "null"...)
	case bool:
		if t {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case json.Number:
		return append(dst, t...)
	case string:
		return AppendString(dst, t)
	case []any:
		dst = append(dst, '[')
		for i, e := range t {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendCanonical(dst, e)
		}
		return append(dst, ']')
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendString(dst, k)
			dst = append(dst, ':')
			dst = AppendCanonical(dst, t[k])
		}
		return append(dst, '}')
	}
	panic(fmt.Sprintf("strictjson: AppendCanonical: unexpected %T", v))
}

// AppendString appends the canonical form of the string s (as Go's
// encoding/json writes it without HTML escaping; invalid UTF-8 as \ufffd).
func AppendString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
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
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
