package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
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
// Key: the SHA-256 (64 lowercase hex characters) of the canonical JSON of
// {"input":<input>,"job_id":<jobID>,"mission_id":<missionID>}.
//
// Canonical JSON: object keys sorted by byte order (= code point order) at
// every depth, no insignificant whitespace, strings re-encoded by Go's encoder
// without HTML escaping (so "\u0041" and "A" are the same), numbers kept as
// their literal text (so 1 and 1.0 differ: a changed literal is treated as a
// changed input, the safe side).
//
// An input that is empty (absent) or JSON null counts as {}, the SDK default.
// jobID "" means job_id absent and counts as null (FingerprintIdentities
// tells an empty job_id from an absent one); missionID is always a string.
//
// Errors: input that is not exactly one valid JSON value, or that contains an
// object with a duplicate key (a proxy and an agent could read such an object
// differently), is refused.
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
	var buf bytes.Buffer
	buf.WriteString(`{"input":`)
	if err := canonicalInput(&buf, input); err != nil {
		return "", err
	}
	buf.WriteString(`,"job_id":`)
	if !hasJobID {
		buf.WriteString("null")
	} else {
		writeJSONString(&buf, jobID)
	}
	buf.WriteString(`,"mission_id":`)
	writeJSONString(&buf, missionID)
	buf.WriteByte('}')
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

// canonicalJSON returns the canonical form of one JSON value as Fingerprint
// defines it (sorted keys, no whitespace, literal numbers). It refuses invalid
// JSON, trailing data and duplicate object keys.
func canonicalJSON(v []byte) ([]byte, error) {
	var buf bytes.Buffer
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := canonicalValue(&buf, dec); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("idempotency: trailing data after JSON value")
	}
	return buf.Bytes(), nil
}

func canonicalInput(buf *bytes.Buffer, input json.RawMessage) error {
	trimmed := bytes.TrimSpace(input)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		buf.WriteString("{}")
		return nil
	}
	c, err := canonicalJSON(trimmed)
	if err != nil {
		return fmt.Errorf("idempotency: fingerprint input: %w", err)
	}
	buf.Write(c)
	return nil
}

func canonicalValue(buf *bytes.Buffer, dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return errors.New("idempotency: empty JSON value")
		}
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return canonicalObject(buf, dec)
		case '[':
			buf.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					buf.WriteByte(',')
				}
				if err := canonicalValue(buf, dec); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil { // ']'
				return err
			}
			buf.WriteByte(']')
			return nil
		default:
			return fmt.Errorf("idempotency: unexpected delimiter %q", t)
		}
	case string:
		writeJSONString(buf, t)
	case json.Number:
		buf.WriteString(t.String())
	case bool:
		if t {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case nil:
		buf.WriteString("null")
	default:
		return fmt.Errorf("idempotency: unexpected JSON token %T", tok)
	}
	return nil
}

func canonicalObject(buf *bytes.Buffer, dec *json.Decoder) error {
	members := map[string][]byte{}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name, ok := tok.(string)
		if !ok {
			return fmt.Errorf("idempotency: object key is %T", tok)
		}
		if _, dup := members[name]; dup {
			return fmt.Errorf("idempotency: duplicate object key %q", name)
		}
		var vb bytes.Buffer
		if err := canonicalValue(&vb, dec); err != nil {
			return err
		}
		members[name] = vb.Bytes()
		keys = append(keys, name)
	}
	if _, err := dec.Token(); err != nil { // '}'
		return err
	}
	sort.Strings(keys)
	buf.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		writeJSONString(buf, k)
		buf.WriteByte(':')
		buf.Write(members[k])
	}
	buf.WriteByte('}')
	return nil
}

// writeJSONString writes s as a JSON string without HTML escaping.
func writeJSONString(buf *bytes.Buffer, s string) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	buf.Write(bytes.TrimSuffix(b.Bytes(), []byte{'\n'}))
}
