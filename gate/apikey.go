// The transport key check: X-API-Key against the configured keys, with the
// scope a route needs, and the SDK's answers (docs/sdk-wire.md, "API key
// answers").

package gate

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"

	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/internal/redact"
)

// Transport key answers (docs/sdk-wire.md, "API key answers").
const (
	DetailBadKey       = "Invalid or missing API key"
	DetailInsufficient = "Insufficient scope"
)

// Reasons of a transport key refusal, as audit and metric codes.
const (
	KeyMissing      = "api_key_missing"            // no X-API-Key, or an empty one
	KeyDuplicate    = "api_key_duplicate"          // two or more X-API-Key headers
	KeyUnknown      = "api_key_unknown"            // not a configured key
	KeyInsufficient = "api_key_insufficient_scope" // a read key where write is needed
)

// Key is one configured transport key, kept as its SHA-256 digest.
type Key struct {
	sum   [sha256.Size]byte // SHA-256 of the key: compared in constant time
	Write bool              // write scope (else read)
	FP    string            // fingerprint for logs and limits (never the key)
}

// NewKey returns the configured key with its scope and fingerprint.
func NewKey(key string, write bool, fp string) Key {
	return Key{sum: sha256.Sum256([]byte(key)), Write: write, FP: fp}
}

// Keys are the configured transport keys.
type Keys []Key

// Check checks the X-API-Key header values against ks for scope ("read" or
// "write": any configured key passes unless scope is "write"). It returns status 0 when allowed, else 401
// (no key, two or more X-API-Key headers, unknown key) or 403 (read key,
// write needed), with the FastAPI-style detail and the reason (one of the
// Key* codes). Keys are compared as SHA-256 digests in constant time, every
// configured key every time. The matching key's fingerprint is returned
// (for the audit line and the limits' transport key).
func (ks Keys) Check(values []string, scope string) (status int, detail, fp, reason string) {
	switch {
	case len(values) > 1:
		return http.StatusUnauthorized, DetailBadKey, "", KeyDuplicate
	case len(values) == 0 || values[0] == "":
		return http.StatusUnauthorized, DetailBadKey, "", KeyMissing
	}
	got := grants.SHA256String(values[0]) // no copy of the key: the hot path allocates nothing here
	match := -1
	for i, k := range ks {
		if subtle.ConstantTimeCompare(got[:], k.sum[:]) == 1 && match < 0 {
			match = i
		}
	}
	if match < 0 {
		return http.StatusUnauthorized, DetailBadKey, "", KeyUnknown
	}
	if scope == "write" && !ks[match].Write {
		return http.StatusForbidden, DetailInsufficient, ks[match].FP, KeyInsufficient
	}
	return 0, "", ks[match].FP, ""
}

// Fingerprint is the log-safe form of a secret: the first 8 hex characters
// of its SHA-256.
func Fingerprint(secret string) string { return redact.Fingerprint(secret) }
