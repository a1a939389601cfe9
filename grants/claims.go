package grants

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/golang-jwt/jwt/v5"
)

// Claims are the verified claims of a workspace authorization token
// (workspace-agent-grants seed, WorkspaceAuthorizationClaims). Times are Unix
// seconds; optional strings are "" when absent or null.
type Claims struct {
	Issuer            string
	Audience          []string
	Subject           string
	GrantID           string
	WorkspaceID       string
	WorkspaceSlug     string // informational only
	AgentID           string
	AgentSlug         string
	ServerID          string
	Scopes            []string // non-empty
	AgentWorkspaceRef string
	IssuedAt          int64 // 0 when absent
	ExpiresAt         int64
	NotBefore         int64 // 0 when absent
	JTI               string
	Dev               bool // true for tokens minted by the dev CLI ("dev": true)
}

// HasScope reports whether scope is granted.
func (c *Claims) HasScope(scope string) bool {
	for _, s := range c.Scopes {
		if s == scope {
			return true
		}
	}
	return false
}

// claimsFromMap checks the claims model of the reference ("Claims model") on
// claims decoded with json.Number and returns the typed claims, or an *Error:
// CodeInvalidClaims whose text lists every claim that fails the model, in
// the model's field order, as the SDK's does (claimProblem), or, once the
// model fits, CodeWrongIssuer for an empty "iss" (the SDK's model takes ""
// and its issuer check then refuses it). Where the SDK's lax model would
// convert a value ("123" or true for an integer) this one refuses it
// (README, "Where the sidecar differs from the SDK, on purpose").
func claimsFromMap(m jwt.MapClaims) (*Claims, *Error) {
	c := &Claims{}
	var bad []claimProblem
	str := func(name string, required bool) string {
		v, ok := m[name]
		switch s, isStr := v.(string); {
		case isStr:
			return s
		case !ok && required:
			bad = append(bad, claimProblem{"missing", name, "", msgFieldRequired})
		case ok && (v != nil || required):
			bad = append(bad, claimProblem{"string_type", name, "", msgString})
		}
		return ""
	}

	c.Issuer = str("iss", true)
	c.Audience, bad = audienceClaim(m, bad)
	c.Subject = str("sub", false)
	c.GrantID = str("grant_id", true)
	if _, ok := m["grant_id"].(string); ok && c.GrantID == "" {
		// Stricter than the SDK, which takes an empty grant_id.
		bad = append(bad, claimProblem{"string_too_short", "grant_id", "", "String should have at least 1 character"})
	}
	c.WorkspaceID = str("workspace_id", true)
	c.WorkspaceSlug = str("workspace_slug", false)
	c.AgentID = str("agent_id", true)
	c.AgentSlug = str("agent_slug", true)
	c.ServerID = str("server_id", true)
	c.Scopes, bad = scopesClaim(m, bad)
	c.AgentWorkspaceRef = str("agent_workspace_ref", false)
	c.IssuedAt, bad = intClaim(m, "iat", false, bad)
	c.ExpiresAt, bad = intClaim(m, "exp", true, bad)
	c.JTI = str("jti", false)
	c.NotBefore, bad = intClaim(m, "nbf", false, bad)
	if dev, ok := m["dev"]; ok && dev != nil {
		b, isBool := dev.(bool)
		if !isBool {
			bad = append(bad, claimProblem{"bool_type", "dev", "", "Input should be a valid boolean"})
		}
		c.Dev = b
	}
	if len(bad) > 0 {
		return nil, failText(CodeInvalidClaims, PrefixInvalidClaims+pythonRepr(bad), "claim "+bad[0].name+": "+bad[0].msg)
	}
	if c.Issuer == "" {
		return nil, fail(CodeWrongIssuer, "empty iss")
	}
	return c, nil
}

// pydantic's texts for the claim problems (docs/sdk-wire.md, "Validation
// error lists").
const (
	msgFieldRequired = "Field required"
	msgString        = "Input should be a valid string"
	msgInt           = "Input should be a valid integer"
	msgIntFraction   = "Input should be a valid integer, got a number with a fractional part"
	msgIntParsing    = "Input should be a valid integer, unable to parse string as an integer"
	msgList          = "Input should be a valid list"
)

// claimProblem is one entry of the SDK's invalid_claims list: pydantic's
// error type, the location (the claim name, then sub, a union member's name
// or a list index, when set) and its text.
type claimProblem struct {
	typ, name, sub, msg string
}

// intClaim reads an integer claim (a JSON integer, or a number without a
// fractional part within ±2^53) and adds its problem to bad.
func intClaim(m jwt.MapClaims, name string, required bool, bad []claimProblem) (int64, []claimProblem) {
	v, ok := m[name]
	if !ok || v == nil {
		switch {
		case required && !ok:
			bad = append(bad, claimProblem{"missing", name, "", msgFieldRequired})
		case required:
			bad = append(bad, claimProblem{"int_type", name, "", msgInt})
		}
		return 0, bad
	}
	n, isNum := v.(json.Number)
	if _, isStr := v.(string); isStr {
		return 0, append(bad, claimProblem{"int_parsing", name, "", msgIntParsing})
	}
	if !isNum {
		return 0, append(bad, claimProblem{"int_type", name, "", msgInt})
	}
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i, bad
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, append(bad, claimProblem{"int_from_float", name, "", msgIntFraction})
	}
	return int64(f), bad
}

// audienceClaim reads "aud": a string or a list of strings (required).
func audienceClaim(m jwt.MapClaims, bad []claimProblem) ([]string, []claimProblem) {
	v, ok := m["aud"]
	switch aud := v.(type) {
	case string:
		return []string{aud}, bad
	case []any:
		out := make([]string, 0, len(aud))
		for i, a := range aud {
			s, isStr := a.(string)
			if !isStr {
				return nil, append(bad, claimProblem{"string_type", "aud", "str", msgString},
					claimProblem{"string_type", "aud", "list[str]\x00" + strconv.Itoa(i), msgString})
			}
			out = append(out, s)
		}
		return out, bad
	}
	if !ok {
		return nil, append(bad, claimProblem{"missing", "aud", "", msgFieldRequired})
	}
	return nil, append(bad, claimProblem{"string_type", "aud", "str", msgString},
		claimProblem{"list_type", "aud", "list[str]", msgList})
}

// scopesClaim reads "scopes": a non-empty list of strings. Absent, it is
// empty (the SDK's default), so the scope check refuses the call
// (missing_scope); present and empty, it fails the model, as in the SDK.
func scopesClaim(m jwt.MapClaims, bad []claimProblem) ([]string, []claimProblem) {
	v, ok := m["scopes"]
	if !ok {
		return nil, bad
	}
	list, isList := v.([]any)
	if !isList {
		return nil, append(bad, claimProblem{"list_type", "scopes", "", msgList})
	}
	out := make([]string, 0, len(list))
	for i, s := range list {
		scope, isStr := s.(string)
		if !isStr {
			bad = append(bad, claimProblem{"string_type", "scopes", "\x00" + strconv.Itoa(i), msgString})
			continue
		}
		out = append(out, scope)
	}
	if len(list) == 0 {
		bad = append(bad, claimProblem{"value_error", "scopes", "", "Value error, workspace authorization token must include scopes"})
	}
	return out, bad
}

// pythonRepr writes problems as Python prints the list of pydantic error
// dicts the SDK puts in its text: [{'type': 'missing', 'loc': ('grant_id',),
// 'msg': 'Field required'}, ...]. The SDK's dicts also hold 'input' (the
// offending value, or the whole claims) and 'url' (which names the pydantic
// version); these do not. In sub, a NUL byte starts a list index (an int in
// the location).
func pythonRepr(problems []claimProblem) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, p := range problems {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("{'type': '" + p.typ + "', 'loc': ('" + p.name + "'")
		sub := p.sub
		if name, idx, isIdx := strings.Cut(sub, "\x00"); isIdx {
			if name != "" {
				b.WriteString(", '" + name + "'")
			}
			b.WriteString(", " + idx)
		} else if sub != "" {
			b.WriteString(", '" + sub + "'")
		} else {
			b.WriteByte(',')
		}
		b.WriteString("), 'msg': '" + p.msg + "'}")
	}
	b.WriteByte(']')
	return b.String()
}

// ScopeString returns the scopes space separated (the verified header form).
func (c *Claims) ScopeString() string { return strings.Join(c.Scopes, " ") }
