// The JSON door's duplicate keys: Caddy decodes a JSON config into a map
// before any module sees it (caddy.Load, then each module's JSON again
// for its inline "handler" key), so a key given twice in a handler is
// dropped without a word, the last one kept. The handler cannot see it at
// run time; check reads the file itself and refuses it.

package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/supervaize/supervaizer-sidecar/strictjson"
)

// handlerJSONDepth bounds the nesting of a handler's JSON that
// duplicateKeyProblems reads (the handler's own nests 4 deep).
const handlerJSONDepth = 64

// duplicateKeyProblems returns, by the path findHandlers gives it, the
// problem of each supervaizer_auth handler of cfgJSON that holds a key
// twice at any depth, naming the key by its path in the handler.
func duplicateKeyProblems(cfgJSON []byte) map[string]string {
	raws := map[string]json.RawMessage{}
	rawHandlers(cfgJSON, "", raws)
	problems := map[string]string{}
	for path, raw := range raws {
		v, err := strictjson.Decode(raw, handlerJSONDepth)
		switch {
		case errors.Is(err, strictjson.ErrDuplicateKey):
			problems[path] = fmt.Sprintf("supervaizer_auth: %v: Caddy keeps the last one without a word; give each key once", err)
		case err == nil:
			if where, a, b := foldedDuplicate(v, ""); a != "" {
				problems[path] = fmt.Sprintf("supervaizer_auth: keys %q and %q of %q are equal but for letter case: Caddy reads "+
					"either one for the same setting (Unicode case folding, as Go's JSON decoding matches field names), "+
					"the one it meets last winning; give each key once", a, b, where)
			}
		}
	}
	return problems
}

// foldedDuplicate finds, in the decoded JSON v (strictjson.Decode: no
// exact duplicate), two keys of one object equal under Unicode case folding
// (bytes.EqualFold, which is how encoding/json matches a key to a struct
// field: "other_routeſ" and "forward_toKen", with a long s and a Kelvin
// sign, set other_routes and forward_token). It returns the object's path
// ("" for the handler itself) and the two keys; "" and no keys when none.
func foldedDuplicate(v any, path string) (where, a, b string) {
	switch v := v.(type) {
	case map[string]any:
		seen := make(map[string]string, len(v))
		for k := range v {
			f := strictjson.Fold(k)
			if o, ok := seen[f]; ok {
				return path, min(o, k), max(o, k)
			}
			seen[f] = k
		}
		for k, c := range v {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if w, x, y := foldedDuplicate(c, p); x != "" {
				return w, x, y
			}
		}
	case []any:
		for i, c := range v {
			if w, x, y := foldedDuplicate(c, path+"["+strconv.Itoa(i)+"]"); x != "" {
				return w, x, y
			}
		}
	}
	return "", "", ""
}

// rawHandlers walks raw as findHandlers walks the decoded config (the same
// paths) and records each supervaizer_auth handler object as written.
func rawHandlers(raw json.RawMessage, path string, out map[string]json.RawMessage) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) == nil {
		var name string
		if json.Unmarshal(obj["handler"], &name) == nil && name == "supervaizer_auth" {
			out[path] = raw
			return
		}
		for k, v := range obj {
			p := k
			if path != "" {
				p = path + "." + k
			}
			rawHandlers(v, p, out)
		}
		return
	}
	var arr []json.RawMessage
	if json.Unmarshal(raw, &arr) == nil {
		for i, v := range arr {
			rawHandlers(v, path+"["+strconv.Itoa(i)+"]", out)
		}
	}
}
