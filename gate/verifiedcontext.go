// verifiedcontext.go — the compact form of the verified context: one header,
// X-Supervaize-Verified-Context, holding what the ten X-Supervaize-Verified-*
// headers hold, as one JSON object (verified_headers compact).
//
// Why a second form: every request header costs in Caddy's reverse_proxy
// (its per-request logger encodes all of them, the transport writes and the
// agent parses each one), whoever adds it; one header instead of ten removes
// most of that (bench/README.md, "Where the time goes").

package gate

import (
	"strings"
	"unicode/utf8"

	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/grants"
)

// headerVerifiedContext is the compact form's header.
const headerVerifiedContext = "X-Supervaize-Verified-Context"

// VerifiedForm is how a gate sends the verified context: none, the ten
// headers, or the compact header (its zero value sends none).
type VerifiedForm uint8

const (
	VerifiedOff VerifiedForm = iota
	VerifiedEach
	VerifiedCompact
)

// String is the form as `verified_headers` spells it: off, on or compact.
func (f VerifiedForm) String() string {
	switch f {
	case VerifiedEach:
		return "on"
	case VerifiedCompact:
		return config.VerifiedFormCompact
	}
	return "off"
}

// verifiedContext is the compact form's value for a decision: a JSON object
// whose members are, in this order, "mode" and, when set, each claim of
// claimFields under its name ("grant_id", "workspace_id", "workspace_slug",
// "agent_id", "agent_slug", "server_id", "scopes" as an array,
// "agent_workspace_ref", "jti": the claim names of the token;
// docs/verified-context.md). The text is ASCII only: other
// characters are \u escapes, so the value is a valid header value whatever
// the claims hold.
func verifiedContext(mode string, c *grants.Claims) string {
	var b strings.Builder
	b.Grow(512)
	b.WriteString(`{"` + memberMode + `":`)
	writeJSONString(&b, mode)
	for i := range claimFields {
		switch f := &claimFields[i]; {
		case c == nil:
		case f.list != nil:
			writeJSONList(&b, f.name, f.list(c))
		default:
			if v := f.value(c); v != "" {
				b.WriteString(`,"`)
				b.WriteString(f.name)
				b.WriteString(`":`)
				writeJSONString(&b, v)
			}
		}
	}
	b.WriteByte('}')
	return b.String()
}

// writeJSONList writes the member ,"name":[...] of a non-empty list.
func writeJSONList(b *strings.Builder, name string, list []string) {
	if len(list) == 0 {
		return
	}
	b.WriteString(`,"`)
	b.WriteString(name)
	b.WriteString(`":[`)
	for i, s := range list {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(b, s)
	}
	b.WriteByte(']')
}

// writeJSONString writes s as a JSON string of ASCII characters: ", \ and
// control characters escaped, every non-ASCII rune as \uXXXX (a surrogate
// pair above U+FFFF), invalid UTF-8 as U+FFFD.
func writeJSONString(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	u4 := func(r rune) {
		b.WriteString(`\u`)
		b.WriteByte(hex[r>>12&0xf])
		b.WriteByte(hex[r>>8&0xf])
		b.WriteByte(hex[r>>4&0xf])
		b.WriteByte(hex[r&0xf])
	}
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
			i++
		case c < 0x20 || c == 0x7f:
			u4(rune(c))
			i++
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r > 0xffff {
				r -= 0x10000
				u4(0xd800 + r>>10)
				u4(0xdc00 + r&0x3ff)
			} else {
				u4(r)
			}
			i += size
		}
	}
	b.WriteByte('"')
}
