// Package oracle is the test oracle of the strict-JSON rules (see package
// strictjson): an independent reading of a document with encoding/json's
// token stream and a regular expression, sharing no code with strictjson's
// scanner. Tests and fuzz targets compare what strictjson and its users
// decide with what Read finds. It is not for production use.
package oracle

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Facts is what Read finds in a document.
type Facts struct {
	Valid    bool   // valid UTF-8 and exactly one JSON value (encoding/json)
	TooDeep  bool   // nests deeper than encoding/json reads (10000): Valid is unknown
	IsObject bool   // the value is an object
	Depth    int    // deepest nesting of objects and arrays
	Dup      bool   // an object holds a key twice (after unescaping)
	DupKey   string // the first such key
	Lone     bool   // a string holds a lone UTF-16 surrogate escape
	// LongInteger: an integer literal (no fraction or exponent) of more than
	// LongDigits digits.
	LongInteger bool
}

// LongDigits is the integer length Python's int() refuses past (its default
// int_max_str_digits).
const LongDigits = 4300

// Strict reports whether the facts are those of a strict JSON document
// nesting at most maxDepth deep.
func (f Facts) Strict(maxDepth int) bool {
	return f.Valid && !f.Dup && !f.Lone && f.Depth <= maxDepth
}

// Read walks b with json.Decoder.Token.
func Read(b []byte) Facts {
	var f Facts
	if !utf8.Valid(b) {
		return f
	}
	var raw json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		var se *json.SyntaxError
		f.TooDeep = errors.As(err, &se) && strings.Contains(se.Error(), "exceeded max depth")
		return f
	}
	type frame struct {
		object    bool
		expectKey bool
		keys      map[string]bool
	}
	var stack []*frame
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	first := true
	// valueDone records that the parent container received one value.
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].expectKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Facts{}
		}
		if first {
			f.IsObject = tok == json.Delim('{')
			first = false
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].expectKey = false
			}
			stack = append(stack, &frame{object: tok == json.Delim('{'), expectKey: true, keys: map[string]bool{}})
			f.Depth = max(f.Depth, len(stack))
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
			continue
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].expectKey {
			key := tok.(string)
			if stack[n-1].keys[key] && !f.Dup {
				f.DupKey, f.Dup = key, true
			}
			stack[n-1].keys[key] = true
			stack[n-1].expectKey = false
			continue
		}
		if n, ok := tok.(json.Number); ok && !strings.ContainsAny(string(n), ".eE") &&
			len(strings.TrimPrefix(string(n), "-")) > LongDigits {
			f.LongInteger = true
		}
		valueDone()
	}
	f.Valid = true
	f.Lone = LoneSurrogate(b)
	return f
}

// LoneSurrogate finds, with a regular expression over the raw text, a
// \uXXXX escape of a UTF-16 surrogate that is not part of a high+low pair.
// Escaped backslashes are neutralised first so that "\\u..." is not an
// escape.
func LoneSurrogate(b []byte) bool {
	text := strings.ReplaceAll(string(b), `\\`, "__")
	locs := escapeRE.FindAllStringSubmatchIndex(text, -1)
	for k := 0; k < len(locs); k++ {
		v, _ := strconv.ParseUint(text[locs[k][2]:locs[k][3]], 16, 16)
		switch {
		case v >= 0xDC00 && v <= 0xDFFF:
			return true
		case v >= 0xD800 && v <= 0xDBFF:
			if k+1 >= len(locs) || locs[k+1][0] != locs[k][1] {
				return true
			}
			w, _ := strconv.ParseUint(text[locs[k+1][2]:locs[k+1][3]], 16, 16)
			if w < 0xDC00 || w > 0xDFFF {
				return true
			}
			k++
		}
	}
	return false
}

var escapeRE = regexp.MustCompile(`\\u([0-9a-fA-F]{4})`)
