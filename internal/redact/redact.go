// Package redact is the one rule for every URL (and secret: Fingerprint) the sidecar prints: in log
// lines, in /_sidecar/* answers, in `supervaizer check` and in error texts.
// A printed URL has no userinfo at all (neither password nor user name), every
// query value replaced by "REDACTED" (the names kept, in order) and no
// fragment. A string that does not parse as a URL with a scheme and a host is
// printed as "(unparsable URL)": it may be a secret typed in the wrong place.
// docs/logging.md, "URLs", states the rule for users.
package redact

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/url"
	"regexp"
	"strings"
)

// Unparsable is what URL prints for a string that is not an absolute URL.
const Unparsable = "(unparsable URL)"

// queryValue replaces every query value.
const queryValue = "REDACTED"

// URL is the printable form of raw (see the package comment).
func URL(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	// An opaque form ("user:password@host" reads as scheme "user") is
	// refused; "unix:///path" (no host) is a URL.
	if err != nil || u.Scheme == "" || u.Opaque != "" || (u.Host == "" && u.Path == "") {
		return Unparsable
	}
	u.User = nil
	u.Fragment, u.RawFragment = "", ""
	if u.RawQuery != "" {
		parts := strings.FieldsFunc(u.RawQuery, func(r rune) bool { return r == '&' || r == ';' })
		for i, p := range parts {
			name, _, _ := strings.Cut(p, "=")
			parts[i] = name + "=" + queryValue
		}
		u.RawQuery = strings.Join(parts, "&")
	}
	u.ForceQuery = false
	return u.String()
}

// urlInText matches what looks like an absolute URL inside a message (error
// texts quote them as `Get "http://..."`).
var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)

// URLsIn replaces every URL inside a message by its URL form.
func URLsIn(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlInText.ReplaceAllStringFunc(s, URL)
}

// Error returns err with every URL its text carries printed by URL: a
// *url.Error (what net/http's client returns, its text embedding the full
// URL) gets its URL field replaced; any other error whose text has a URL is
// wrapped (its Unwrap is err, for errors.Is; its text redacted). nil stays
// nil; an error without a URL is returned as it is.
func Error(err error) error {
	if err == nil {
		return nil
	}
	var ue *url.Error
	if errors.As(err, &ue) && err == error(ue) {
		return &url.Error{Op: ue.Op, URL: URL(ue.URL), Err: Error(ue.Err)}
	}
	msg := err.Error()
	red := URLsIn(msg)
	if red == msg {
		return err
	}
	return &redactedError{msg: red, err: err}
}

// redactedError is an error whose text had URLs (Error).
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Fingerprint is the log-safe form of a secret: the first 8 hex characters
// of its SHA-256.
func Fingerprint(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:4])
}
