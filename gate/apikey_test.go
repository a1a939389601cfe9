package gate

import (
	"net/http"
	"testing"
)

// Each answer of the transport key check: missing, empty, duplicate and
// unknown keys are 401; a read key where write is needed is 403 with its
// fingerprint; an allowed key returns its fingerprint.
func TestKeysCheck(t *testing.T) {
	ks := Keys{NewKey("read-key", false, "fp-read"), NewKey("write-key", true, "fp-write")}
	cases := []struct {
		values             []string
		scope              string
		status             int
		detail, fp, reason string
	}{
		{nil, "read", http.StatusUnauthorized, DetailBadKey, "", KeyMissing},
		{[]string{""}, "read", http.StatusUnauthorized, DetailBadKey, "", KeyMissing},
		{[]string{"write-key", "write-key"}, "read", http.StatusUnauthorized, DetailBadKey, "", KeyDuplicate},
		{[]string{"other"}, "read", http.StatusUnauthorized, DetailBadKey, "", KeyUnknown},
		{[]string{"read-key"}, "write", http.StatusForbidden, DetailInsufficient, "fp-read", KeyInsufficient},
		{[]string{"read-key"}, "read", 0, "", "fp-read", ""},
		{[]string{"write-key"}, "write", 0, "", "fp-write", ""},
		{[]string{"write-key"}, "read", 0, "", "fp-write", ""},
	}
	for _, c := range cases {
		fp, rf := ks.Check(c.values, c.scope)
		status, detail, reason := 0, "", ""
		if rf != nil {
			status, detail, reason = rf.Status, rf.Message, rf.AuditCode()
		}
		if status != c.status || detail != c.detail || fp != c.fp || reason != c.reason {
			t.Errorf("%q %s: %d %q %q %q, want %d %q %q %q", c.values, c.scope,
				status, detail, fp, reason, c.status, c.detail, c.fp, c.reason)
		}
	}
}
