// Package strictjson holds the sidecar's rules for JSON it must read exactly
// as the SDK's Python agent will: the rules are written here once, and
// jsonrpc (the /a2a envelope), grants (token segments), registration (Agent
// Cards and registration files) and idempotency (the request fingerprint)
// apply them through this package. It has no Caddy or net/http dependency.
//
// # What is refused, and why
//
// A document is strict JSON when it is exactly one JSON value (RFC 8259: no
// NaN, Infinity, comments, BOM or trailing data) and:
//
//   - It is valid UTF-8. Go's decoder replaces invalid bytes with U+FFFD
//     and Python refuses them: the gate would compare strings the agent
//     never sees.
//   - No object holds the same key twice, at any depth, keys compared after
//     unescaping ("a" and "\u0061" are one key). Readers disagree on
//     duplicates: Python's json and encoding/json keep the last value, gjson
//     returns the first, so the gate and the agent could act on different
//     values.
//   - In the objects a caller reads field by field (a Schema's objects), no
//     two keys are equal under Unicode case folding either
//     (bytes.EqualFold: "action" and "Action", "s" and "ſ"): Go's
//     encoding/json matches struct field names that way, so a Go agent
//     could read the other one.
//   - Objects and arrays nest at most the caller's bound deep (MaxDepth for
//     request bodies and tokens; the root container is depth 1). The bound
//     keeps a hostile document from exhausting a recursive reader's stack,
//     and every reader on the path must accept what the gate accepts.
//   - No string holds a lone UTF-16 surrogate escape ("\ud800" not followed
//     by a low surrogate escape, or a lone "\udc00"). Python keeps the lone
//     surrogate, Go turns it into U+FFFD: two different strings.
//
// Scan checks a document in one pass (the JSON grammar and UTF-8 included,
// stopping at the first problem) and, given a Schema, records where the
// values of the members a caller reads lie; Check and IsObject take a
// document Scan finds OK as it is, and Check checks any other UTF-8 and the
// grammar first (utf8.Valid, gjson.ValidBytes), so that those errors come
// first; Decode builds a tree of the document after the same checks.
//
// # Canonical form
//
// The canonical form of a value (AppendCanonical, Canonical) is what the
// fingerprints hash (the registration fingerprint and the idempotency
// request fingerprint), so that two spellings of one document hash the same
// and two documents do not:
//
//   - object members sorted by the bytes of their UTF-8 keys (= code point
//     order), at every depth;
//   - no insignificant whitespace;
//   - numbers exactly as written in the source (1 and 1.0 differ: a changed
//     literal counts as a changed document, the safe side);
//   - strings as Go's encoding/json writes them without HTML escaping:
//     \" \\ \n \r \t \b \f, other control characters as \u00xx (lowercase
//     hex), U+2028 and U+2029 as \u2028 and \u2029, everything else as its
//     UTF-8 bytes (so "\u0041" and "A" are one string).
//
// Only documents that pass the rules above have a canonical form.
package strictjson
