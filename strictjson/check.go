package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// The errors of Check and Decode (Decode wraps them with where it found
// them; errors.Is finds them).
var (
	ErrUTF8          = errors.New("invalid JSON: not valid UTF-8")
	ErrSyntax        = errors.New("invalid JSON")
	ErrTooDeep       = errors.New("invalid JSON: nesting too deep")
	ErrLoneSurrogate = errors.New("invalid JSON: a string holds a lone UTF-16 surrogate escape")
	ErrDuplicateKey  = errors.New("invalid JSON: duplicate key")
)

// Check reports whether b is one strict JSON value (see the package doc)
// nesting at most maxDepth deep: nil, or one of the errors above. A
// document Scan finds nothing wrong with is read once; any other is checked
// again one rule at a time (checkSlow), so that the error is the first rule's
// it breaks.
func Check(b []byte, maxDepth int) error {
	if f := Scan(b, maxDepth, nil, nil); f.OK() {
		return nil
	}
	return checkSlow(b, maxDepth)
}

// checkSlow is Check one rule at a time, each its own pass: UTF-8, the
// grammar, then Scan's depth, surrogates and duplicate keys.
func checkSlow(b []byte, maxDepth int) error {
	if !utf8.Valid(b) {
		return ErrUTF8
	}
	if !gjson.ValidBytes(b) {
		return ErrSyntax
	}
	return facts(Scan(b, maxDepth, nil, nil))
}

func facts(f Facts) error {
	switch {
	case f.TooDeep:
		return ErrTooDeep
	case f.Lone:
		return ErrLoneSurrogate
	case f.Dup:
		return fmt.Errorf("%w %q", ErrDuplicateKey, f.DupKey)
	}
	return nil
}

// IsObject reports whether b is exactly one strict JSON object nesting at
// most maxDepth deep.
func IsObject(b []byte, maxDepth int) bool {
	f := Scan(b, maxDepth, nil, nil)
	return f.OK() && FirstByte(b) == '{' // a document Scan finds OK is one valid value
}

// Decode decodes one strict JSON value nesting at most maxDepth deep into a
// tree of map[string]any, []any, string, json.Number (the number's text as
// written), bool and nil. Its errors name where the problem is (a duplicate
// key by its path, "a.b[2].c") and wrap the errors above (ErrSyntax for
// anything encoding/json refuses, trailing data included).
func Decode(raw []byte, maxDepth int) (any, error) {
	if !utf8.Valid(raw) {
		return nil, ErrUTF8
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := readValue(dec, "", 0, maxDepth)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return nil, fmt.Errorf("%w: data after the top-level value", ErrSyntax)
		}
		return nil, fmt.Errorf("%w after the top-level value: %w", ErrSyntax, err)
	}
	// The decoder turned lone surrogate escapes into U+FFFD: look for them
	// in the text (valid JSON now).
	if Scan(raw, maxDepth, nil, nil).Lone {
		return nil, ErrLoneSurrogate
	}
	return v, nil
}

func readValue(dec *json.Decoder, path string, depth, maxDepth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("%w: unexpected end of input", ErrSyntax)
		}
		return nil, fmt.Errorf("%w: %w", ErrSyntax, err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil // string, json.Number, bool or nil
	}
	if depth >= maxDepth {
		return nil, depthError(maxDepth)
	}
	switch d {
	case '{':
		m := make(map[string]any)
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrSyntax, err)
			}
			key := kt.(string) // the decoder reads only strings as keys
			child := key
			if path != "" {
				child = path + "." + key
			}
			if _, dup := m[key]; dup {
				return nil, fmt.Errorf("%w %q", ErrDuplicateKey, child)
			}
			v, err := readValue(dec, child, depth+1, maxDepth)
			if err != nil {
				return nil, err
			}
			m[key] = v
		}
		if _, err := dec.Token(); err != nil { // '}'
			return nil, fmt.Errorf("%w: %w", ErrSyntax, err)
		}
		return m, nil
	default: // '['; the decoder returns '}' and ']' only as closers
		a := make([]any, 0)
		for i := 0; dec.More(); i++ {
			v, err := readValue(dec, path+"["+strconv.Itoa(i)+"]", depth+1, maxDepth)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		if _, err := dec.Token(); err != nil { // ']'
			return nil, fmt.Errorf("%w: %w", ErrSyntax, err)
		}
		return a, nil
	}
}

// depthError is ErrTooDeep with the bound.
type depthError int

func (e depthError) Error() string {
	return "invalid JSON: nesting deeper than " + strconv.Itoa(int(e)) + " levels"
}

func (depthError) Is(target error) bool { return target == ErrTooDeep }
