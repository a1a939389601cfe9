// The verified context: which claims of an allowed call travel to the
// agent (one table, claimFields, from which every form is derived, in its
// order: the ten X-Supervaize-Verified-* headers, the compact header's
// members, and the identity placeholders and the names of the audit
// line's fields and the span's attributes that carry a claim, audit.go), the refusal of a decision whose claims would not
// reach the agent as they are (uncarriable), and the injection
// (injectVerified) in the form verified_headers asks for: the ten headers,
// or one header, X-Supervaize-Verified-Context, holding the same facts as
// one JSON object (verified_headers compact; docs/verified-context.md).
//
// Why a second form: every request header costs in Caddy's reverse_proxy
// (its per-request logger encodes all of them, the transport writes and the
// agent parses each one), whoever adds it; one header instead of ten removes
// most of that (bench/README.md, "Where the time goes").

package gate

import (
	"net/http"
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

// headerVerifiedMode carries the decision's mode (token, bootstrap, local),
// the first of the verified headers; its compact member is "mode".
const (
	headerVerifiedMode = "X-Supervaize-Verified-Mode"
	memberMode         = "mode"
)

// claimField is one claim of a verified token as the gate passes it on.
type claimField struct {
	// name is the claim's name in the token, and the name of every form
	// but the header: the compact member, the placeholder
	// supervaizer.<name>, the audit field, the span attribute
	// supervaizer.<name>.
	name string
	// header is its X-Supervaize-Verified-* header (canonical form).
	header string
	// value is its text (a header value; scopes space-separated).
	value func(*grants.Claims) string
	// list, when set, is its value as a JSON array in the compact form.
	list func(*grants.Claims) []string
	// identity: an identity placeholder, filled only while the decision
	// allows a verified token (audit.go).
	identity bool
}

// Indexes into claimFields, for the forms that name one claim.
const (
	claimGrantID = iota
	claimWorkspaceID
	claimWorkspaceSlug
	claimAgentID
	claimAgentSlug
	claimServerID
	claimScopes
	claimAgentWorkspaceRef
	claimJTI
)

// claimFields are the claims of the verified context, in the order of
// every form.
var claimFields = [...]claimField{
	claimGrantID: {name: "grant_id", header: "X-Supervaize-Verified-Grant-Id", identity: true,
		value: func(c *grants.Claims) string { return c.GrantID }},
	claimWorkspaceID: {name: "workspace_id", header: "X-Supervaize-Verified-Workspace-Id", identity: true,
		value: func(c *grants.Claims) string { return c.WorkspaceID }},
	claimWorkspaceSlug: {name: "workspace_slug", header: "X-Supervaize-Verified-Workspace-Slug", identity: true,
		value: func(c *grants.Claims) string { return c.WorkspaceSlug }},
	claimAgentID: {name: "agent_id", header: "X-Supervaize-Verified-Agent-Id", identity: true,
		value: func(c *grants.Claims) string { return c.AgentID }},
	claimAgentSlug: {name: "agent_slug", header: "X-Supervaize-Verified-Agent-Slug", identity: true,
		value: func(c *grants.Claims) string { return c.AgentSlug }},
	claimServerID: {name: "server_id", header: "X-Supervaize-Verified-Server-Id",
		value: func(c *grants.Claims) string { return c.ServerID }},
	claimScopes: {name: "scopes", header: "X-Supervaize-Verified-Scopes",
		value: (*grants.Claims).ScopeString, list: func(c *grants.Claims) []string { return c.Scopes }},
	claimAgentWorkspaceRef: {name: "agent_workspace_ref", header: "X-Supervaize-Verified-Agent-Workspace-Ref",
		value: func(c *grants.Claims) string { return c.AgentWorkspaceRef }},
	claimJTI: {name: "jti", header: "X-Supervaize-Verified-Token-Id", identity: true,
		value: func(c *grants.Claims) string { return c.JTI }},
}

// identityClaim is the identity claim whose name is name, or nil.
func identityClaim(name string) *claimField {
	for i := range claimFields {
		if f := &claimFields[i]; f.identity && f.name == name {
			return f
		}
	}
	return nil
}

// uncarriable refuses an allowed decision whose verified headers (with
// verified_headers on) would not reach the agent as they are: a claim value
// with a control character (Go's transport refuses to send the request, so
// the agent would get nothing and a covered call's key would stay in
// flight) or with a leading or trailing space or tab (the agent's parser
// trims it: a workspace id other than the verified one), or a scope that
// would not come back as it is from the space-separated Scopes header
// (empty, or with a space or tab in it: "admin job.cancel" would read as
// two scopes). The compact form escapes every value; off sends none.
func (g *Gate) uncarriable(d decision) decision {
	if !d.allowed() || g.verified != VerifiedEach || d.claims == nil || d.claims.HeaderSafe() {
		return d // HeaderSafe: every claim checked once, when the token was verified
	}
	for i := range claimFields {
		f := &claimFields[i]
		if !f.carried(d.claims) {
			out := deny(grants.UncarriableClaim(f.name))
			out.claims = d.claims
			return out
		}
	}
	return d
}

// carried reports whether f's header carries c's value as it is: every
// item of a list (joined with spaces) one grants.HeaderCarriesListItem
// takes, any other value one grants.HeaderCarries takes.
func (f *claimField) carried(c *grants.Claims) bool {
	if f.list == nil {
		return grants.HeaderCarries(f.value(c))
	}
	for _, v := range f.list(c) {
		if !grants.HeaderCarriesListItem(v) {
			return false
		}
	}
	return true
}

// injectVerified adds the verified context headers for an allowed request
// (none with verified_headers off; the one X-Supervaize-Verified-Context
// with verified_headers compact).
//
// They are added to the request's own header map, never to a new one:
// Caddy's {http.request.header.*} placeholders and its handle_errors routes
// read the map of the request Caddy's server made, which a handler before
// the gate (tracing, timeouts) shares through a shallow copy. A new map
// (tried for speed: the client's map grows twice to take ten more headers)
// left those views without the verified headers and with what pass removes
// after the decision (the token with forward_token off): a placeholder after
// the gate then sent the token on (TestVerifiedHeadersSharedWithCaddy).
func (g *Gate) injectVerified(h http.Header, d decision) {
	switch g.verified {
	case VerifiedOff:
		return
	case VerifiedCompact:
		h[headerVerifiedContext] = []string{verifiedContext(d.mode, d.claims)}
		return
	}
	c := d.claims
	if c == nil {
		h[headerVerifiedMode] = []string{d.mode}
		return
	}
	// Canonical names assigned directly: no canonicalisation, no
	// concatenation. The values share one backing array, each header a
	// one-element slice of it with capacity 1 (an append to one header
	// copies it instead of writing into the next one's value).
	vals := make([]string, 1, 1+len(claimFields)) // Mode and the claims
	vals[0] = d.mode
	h[headerVerifiedMode] = vals[0:1:1]
	for i := range claimFields {
		f := &claimFields[i]
		if value := f.value(c); value != "" {
			vals = append(vals, value)
			n := len(vals)
			h[f.header] = vals[n-1 : n : n]
		}
	}
}
