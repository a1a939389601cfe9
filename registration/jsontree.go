package registration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/supervaize/supervaizer-sidecar/strictjson"
)

// maxDepth bounds the nesting of a decoded JSON document (objects and arrays
// together). Real registrations nest about ten levels deep; the bound keeps a
// hostile document from exhausting the stack.
const maxDepth = 512

// decodeStrict decodes one strict JSON value (strictjson.Decode: no
// duplicate key, no lone surrogate escape, valid UTF-8, nothing after the
// value, nesting at most maxDepth) into a tree of map[string]any, []any,
// string, json.Number (its text as written), bool and nil.
func decodeStrict(raw []byte) (any, error) { return strictjson.Decode(raw, maxDepth) }

// canonicalJSON writes v (a tree produced by decodeStrict) in the canonical
// form of strictjson (sorted keys, no whitespace, numbers as written).
func canonicalJSON(v any) []byte { return strictjson.AppendCanonical(nil, v) }

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

// joinKey is the path of member key of the object at path ("" the root).
func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
