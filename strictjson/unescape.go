// Unescaping a JSON string literal without encoding/json.

package strictjson

import (
	"unicode/utf16"
	"unicode/utf8"
)

// appendUnescaped appends to dst the string that q, one JSON string literal
// that str accepts (quotes included), stands for, exactly as encoding/json
// decodes it: the escapes of JSON, a \u surrogate pair as its one rune, a
// lone or mismatched surrogate escape as U+FFFD (the bytes of q are valid
// UTF-8: str refuses others). It allocates nothing but dst's growth: a
// json.Unmarshal per escaped key cost a decoder's state and a string, ~80
// bytes a key, so a body of escaped keys cost several times the body
// (deploy/k8s/body_memory_test.go, escaped_keys).
func appendUnescaped(dst, q []byte) []byte {
	s := q[1 : len(q)-1]
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			j := i + 1
			for j < len(s) && s[j] != '\\' {
				j++
			}
			dst = append(dst, s[i:j]...)
			i = j
			continue
		}
		switch e := s[i+1]; e {
		case 'u':
			r := rune(hex4(s[i+2 : i+6]))
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
					if d := utf16.DecodeRune(r, rune(hex4(s[i+2:i+6]))); d != utf8.RuneError {
						dst = utf8.AppendRune(dst, d)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
			continue
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		default: // '"', '\\', '/'
			dst = append(dst, e)
		}
		i += 2
	}
	return dst
}
