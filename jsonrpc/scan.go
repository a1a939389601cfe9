package jsonrpc

import (
	"bytes"
	"encoding/json"
)

// jsonFacts is what one pass over a valid JSON document finds.
type jsonFacts struct {
	depth  int    // deepest nesting of objects and arrays
	lone   bool   // a string holds an escaped lone UTF-16 surrogate
	dup    bool   // an object holds the same key twice (after unescaping)
	dupKey string // the first duplicated key
}

// keyRef is one object key seen so far: its raw bytes between the quotes,
// unescaped when it held an escape.
type keyRef []byte

// objFrame is one open container; for objects, keys[start:] are its keys
// and seen indexes them once there are many.
type objFrame struct {
	object    bool
	expectKey bool
	start     int
	seen      map[string]struct{}
}

// manyKeys is the key count past which an object's keys are indexed in a map
// rather than compared one by one.
const manyKeys = 32

// scanJSON walks b, which must be valid JSON (gjson.ValidBytes), once:
// nesting depth, lone surrogate escapes (see surrogateEscape) and duplicate
// object keys at any depth, keys compared after JSON unescaping. It stops at
// the first duplicate. Keys without escapes are compared in place (no
// allocation).
func scanJSON(b []byte) jsonFacts {
	var (
		f        jsonFacts
		frameBuf [16]objFrame
		keyBuf   [64]keyRef
	)
	stack, keys := frameBuf[:0], keyBuf[:0] // on the stack for ordinary bodies
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '{', '[':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].expectKey = false
			}
			stack = append(stack, objFrame{object: c == '{', expectKey: c == '{', start: len(keys)})
			if len(stack) > f.depth {
				f.depth = len(stack)
			}
		case '}', ']':
			top := stack[len(stack)-1]
			keys = keys[:top.start]
			stack = stack[:len(stack)-1]
		case ',':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].expectKey = true
			}
		case ':':
			stack[len(stack)-1].expectKey = false
		case '"':
			start := i + 1
			escaped := false
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					escaped = true
					if b[i+1] == 'u' {
						n, lone := surrogateEscape(b, i)
						if lone {
							f.lone = true
						}
						i += n - 1
						continue
					}
					i++
				}
			}
			n := len(stack)
			if n == 0 || !stack[n-1].object || !stack[n-1].expectKey {
				continue // a value
			}
			key := keyRef(b[start:i])
			if escaped {
				var s string
				if err := json.Unmarshal(b[start-1:i+1], &s); err == nil {
					key = keyRef(s)
				}
			}
			top := &stack[n-1]
			if top.seen != nil {
				if _, ok := top.seen[string(key)]; ok {
					f.dup, f.dupKey = true, string(key)
					return f
				}
				top.seen[string(key)] = struct{}{}
			} else {
				for _, k := range keys[top.start:] {
					if bytes.Equal(k, key) {
						f.dup, f.dupKey = true, string(key)
						return f
					}
				}
				if len(keys)-top.start+1 > manyKeys {
					top.seen = make(map[string]struct{}, 2*manyKeys)
					for _, k := range keys[top.start:] {
						top.seen[string(k)] = struct{}{}
					}
					top.seen[string(key)] = struct{}{}
				}
			}
			keys = append(keys, key)
		}
	}
	return f
}
