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
	"github.com/supervaize/supervaizer-sidecar/refusal"
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

// The refusals of the transport key check: 401 with the SDK's detail for
// no key, two or more X-API-Key headers and an unknown key; 403 for a read
// key where write is needed. Shared: never changed.
var (
	refuseKeyMissing      = keyRefusal(http.StatusUnauthorized, DetailBadKey, KeyMissing)
	refuseKeyDuplicate    = keyRefusal(http.StatusUnauthorized, DetailBadKey, KeyDuplicate)
	refuseKeyUnknown      = keyRefusal(http.StatusUnauthorized, DetailBadKey, KeyUnknown)
	refuseKeyInsufficient = keyRefusal(http.StatusForbidden, DetailInsufficient, KeyInsufficient)
)

func keyRefusal(status int, detail, reason string) *refusal.Refusal {
	return &refusal.Refusal{Status: status, Message: detail, Reason: reason}
}

// Check checks the X-API-Key header values against ks for scope ("read" or
// "write": any configured key passes unless scope is "write"). It returns
// the matching key's fingerprint (for the audit line and the limits'
// transport key) and, when the key does not pass, its refusal (the Key*
// codes its Reason). Keys are compared as SHA-256 digests in constant
// time, every configured key every time.
func (ks Keys) Check(values []string, scope string) (fp string, rf *refusal.Refusal) {
	switch {
	case len(values) > 1:
		return "", refuseKeyDuplicate
	case len(values) == 0 || values[0] == "":
		return "", refuseKeyMissing
	}
	got := grants.SHA256String(values[0]) // no copy of the key: the hot path allocates nothing here
	match := -1
	for i, k := range ks {
		if subtle.ConstantTimeCompare(got[:], k.sum[:]) == 1 && match < 0 {
			match = i
		}
	}
	if match < 0 {
		return "", refuseKeyUnknown
	}
	if scope == "write" && !ks[match].Write {
		return ks[match].FP, refuseKeyInsufficient
	}
	return ks[match].FP, nil
}

// Fingerprint is the log-safe form of a secret: the first 8 hex characters
// of its SHA-256.
func Fingerprint(secret string) string { return redact.Fingerprint(secret) }
