package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/supervaize/supervaizer-sidecar/strictjson"
)

// Key is the scope of one idempotent operation: the verified workspace id and
// agent slug (from the workspace token, not from the request body), the action
// id (job.start, the registration's setup start action, or a configured
// action) and the request's idempotency_key. Two requests share a record only
// if all four fields are equal.
type Key struct {
	WorkspaceID    string
	AgentSlug      string
	Action         string
	IdempotencyKey string
}

// ID returns the storage id of k: 64 lowercase hex characters, the SHA-256 of
// a length-prefixed encoding of a version tag and the four fields (each as an
// 8-byte big-endian length followed by the bytes). Because every field is
// length-prefixed, no two different Keys share an ID through separators
// (Key{"a:b","c",..} and Key{"a","b:c",..} differ). The raw values never reach
// the store, so store key names are bounded and contain no client text.
func (k Key) ID() string {
	h := sha256.New()
	var n [8]byte
	for _, s := range [...]string{"supervaizer-idem-v1", k.WorkspaceID, k.AgentSlug, k.Action, k.IdempotencyKey} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Fingerprint returns the request identity compared between calls that share a
// Key: the SHA-256 (64 lowercase hex characters) of the canonical JSON
// (strictjson's canonical form: keys sorted by bytes at every depth, no
// whitespace, strings as Go's encoder writes them without HTML escaping, so
// "\u0041" and "A" are the same, numbers kept as their literal text, so 1
// and 1.0 differ) of
// {"input":<input>,"job_id":<jobID>,"mission_id":<missionID>}.
//
// An input that is empty (absent) or JSON null counts as {}, the SDK default.
// jobID "" means job_id absent and counts as null (FingerprintIdentities
// tells an empty job_id from an absent one); missionID is always a string.
//
// Errors: an input that is not one strict JSON value (strictjson: a
// duplicate key, which a proxy and an agent could read differently, a lone
// surrogate escape, nesting deeper than strictjson.MaxDepth, trailing data)
// is refused.
func Fingerprint(missionID, jobID string, input json.RawMessage) (string, error) {
	return FingerprintIdentities(missionID, jobID, jobID != "", input)
}

// FingerprintIdentities is Fingerprint with the job_id's presence given
// apart: hasJobID false (job_id absent or null, the SDK's None) writes
// "job_id":null, true writes jobID as a string, "" included. So a job.start
// with "job_id": "" and a retry without job_id have different fingerprints
// (idempotency_conflict), as the SDK sees two different identities.
//
// Stored records: a record made before this distinction from a request
// with "job_id": "" holds the fingerprint of "job_id":null; a retry of that
// request now fingerprints "job_id":"" and is answered idempotency_conflict
// until the record expires (ttl). Every other record (job_id a non-empty
// string, or absent, or null) keeps its fingerprint.
func FingerprintIdentities(missionID, jobID string, hasJobID bool, input json.RawMessage) (string, error) {
	return fingerprint(missionID, jobID, hasJobID, input, false)
}

// FingerprintChecked is FingerprintIdentities for an input already checked
// strict: a span of a document that strictjson.Scan found OK (as
// jsonrpc.Parse's Call.Input is: the whole body is scanned, at every depth,
// before a Call is made). It skips the second check of the input, which for
// a body of millions of object keys held memory again for every key while
// the first scan's was not yet collected (deploy/k8s/body_memory_test.go,
// input_many_keys). On an input that is not strict its fingerprint is
// unspecified (it does not panic on valid JSON); it never fails.
func FingerprintChecked(missionID, jobID string, hasJobID bool, input json.RawMessage) string {
	fp, _ := fingerprint(missionID, jobID, hasJobID, input, true)
	return fp
}

// fingerprint is FingerprintIdentities, checking the input first unless
// checked.
func fingerprint(missionID, jobID string, hasJobID bool, input json.RawMessage, checked bool) (string, error) {
	// The canonical form is hashed from the input's text, in pieces
	// (HashCanonicalRaw): no decoded tree (tens of bytes a value: a body of
	// millions of small values cost tens of times its size) and no
	// canonical copy of an input of megabytes. The same bytes as
	// AppendCanonical of the decoded tree: records made before keep their
	// fingerprints.
	h := sha256.New()
	h.Write([]byte(`{"input":`))
	trimmed := bytes.TrimSpace(input)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		h.Write([]byte("{}"))
	} else {
		if !checked {
			if err := strictjson.Check(trimmed, strictjson.MaxDepth); err != nil {
				return "", fmt.Errorf("idempotency: fingerprint input: %w", err)
			}
		}
		strictjson.HashCanonicalRaw(h, trimmed)
	}
	buf := []byte(`,"job_id":`)
	if !hasJobID {
		buf = append(buf, "null"...)
	} else {
		buf = strictjson.AppendString(buf, jobID)
	}
	buf = append(buf, `,"mission_id":`...)
	buf = strictjson.AppendString(buf, missionID)
	buf = append(buf, '}')
	h.Write(buf)
	sum := h.Sum(nil)
	return hex.EncodeToString(sum[:]), nil
}
