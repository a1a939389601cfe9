package registration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"unicode/utf8"
)

// maxDepth bounds the nesting of a decoded JSON document (objects and arrays
// together). Real registrations nest about ten levels deep; the bound keeps a
// hostile document from exhausting the stack.
const maxDepth = 512

// decodeStrict decodes one JSON value into a tree of map[string]any, []any,
// string, json.Number, bool and nil. Unlike json.Unmarshal it refuses
// duplicate object keys (the SDK's Python json keeps the last one, a reader
// that keeps the first would see another document), data after the value, and
// nesting deeper than maxDepth. Numbers keep their text as written.
func decodeStrict(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := readValue(dec, "", 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return nil, errors.New("invalid JSON: data after the top-level value")
		}
		return nil, fmt.Errorf("invalid JSON after the top-level value: %w", err)
	}
	return v, nil
}

func readValue(dec *json.Decoder, path string, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return nil, errors.New("invalid JSON: unexpected end of input")
		}
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= maxDepth {
			return nil, fmt.Errorf("invalid JSON: nesting deeper than %d levels", maxDepth)
		}
		switch t {
		case '{':
			m := make(map[string]any)
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, fmt.Errorf("invalid JSON: %w", err)
				}
				key, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("invalid JSON: object key is not a string at %s", displayPath(path))
				}
				child := joinKey(path, key)
				if _, dup := m[key]; dup {
					return nil, fmt.Errorf("invalid JSON: duplicate key %q", child)
				}
				v, err := readValue(dec, child, depth+1)
				if err != nil {
					return nil, err
				}
				m[key] = v
			}
			if _, err := dec.Token(); err != nil { // '}'
				return nil, fmt.Errorf("invalid JSON: %w", err)
			}
			return m, nil
		case '[':
			a := make([]any, 0)
			for i := 0; dec.More(); i++ {
				v, err := readValue(dec, path+"["+strconv.Itoa(i)+"]", depth+1)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return nil, fmt.Errorf("invalid JSON: %w", err)
			}
			return a, nil
		default:
			return nil, fmt.Errorf("invalid JSON: unexpected %q", rune(t))
		}
	default:
		// string, json.Number, bool or nil.
		return tok, nil
	}
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func displayPath(path string) string {
	if path == "" {
		return "the top level"
	}
	return strconv.Quote(path)
}

// canonicalJSON writes v (a tree produced by decodeStrict) in canonical form:
// object keys sorted by byte-wise comparison of their UTF-8 encoding at every
// depth, no insignificant whitespace, numbers exactly as written in the source,
// strings escaped minimally (", \ and control characters only).
func canonicalJSON(v any) []byte {
	var b bytes.Buffer
	writeCanonical(&b, v)
	return b.Bytes()
}

func writeCanonical(b *bytes.Buffer, v any) {
	switch t := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if t {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case json.Number:
		b.WriteString(string(t))
	case string:
		writeCanonicalString(b, t)
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonicalString(b, k)
			b.WriteByte(':')
			writeCanonical(b, t[k])
		}
		b.WriteByte('}')
	default:
		// Unreachable for trees built by decodeStrict.
		panic(fmt.Sprintf("registration: canonicalJSON: unexpected %T", v))
	}
}

func writeCanonicalString(b *bytes.Buffer, s string) {
	const hexDigits = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"':
				b.WriteString(`\"`)
			case c == '\\':
				b.WriteString(`\\`)
			case c == '\n':
				b.WriteString(`\n`)
			case c == '\r':
				b.WriteString(`\r`)
			case c == '\t':
				b.WriteString(`\t`)
			case c == '\b':
				b.WriteString(`\b`)
			case c == '\f':
				b.WriteString(`\f`)
			case c < 0x20:
				b.WriteString(`\u00`)
				b.WriteByte(hexDigits[c>>4])
				b.WriteByte(hexDigits[c&0xf])
			default:
				b.WriteByte(c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			// decodeStrict never yields invalid UTF-8 (the decoder replaces
			// it), but stay well-defined for any input.
			b.WriteString(`\ufffd`)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
}

// sha256Hex returns the lowercase hex SHA-256 of b (64 characters).
func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// jsonType names the JSON type of a decoded value for error messages.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	default:
		return fmt.Sprintf("%T", v)
	}
}
