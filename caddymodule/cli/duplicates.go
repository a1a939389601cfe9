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
		if _, err := strictjson.Decode(raw, handlerJSONDepth); errors.Is(err, strictjson.ErrDuplicateKey) {
			problems[path] = fmt.Sprintf("supervaizer_auth: %v: Caddy keeps the last one without a word; give each key once", err)
		}
	}
	return problems
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
