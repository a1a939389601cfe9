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
// claims decoded with json.Number and returns the typed claims, or an *Error
// with CodeInvalidClaims naming the first offending claim.
func claimsFromMap(m jwt.MapClaims) (*Claims, *Error) {
	c := &Claims{}
	var bad string
	str := func(name string, required bool) string {
		if bad != "" {
			return ""
		}
		v, ok := m[name]
		if !ok || v == nil {
			if required {
				bad = name + " is required"
			}
			return ""
		}
		s, isStr := v.(string)
		if !isStr || (required && s == "") {
			bad = name + " must be a non-empty string"
			return ""
		}
		return s
	}
	num := func(name string, required bool) int64 {
		if bad != "" {
			return 0
		}
		v, ok := m[name]
		if !ok || v == nil {
			if required {
				bad = name + " is required"
			}
			return 0
		}
		n, isNum := v.(json.Number)
		if !isNum {
			bad = name + " must be an integer"
			return 0
		}
		if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
			return i
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			bad = name + " must be an integer"
			return 0
		}
		return int64(f)
	}

	c.Issuer = str("iss", false)
	c.Subject = str("sub", false)
	c.GrantID = str("grant_id", true)
	c.WorkspaceID = str("workspace_id", true)
	c.WorkspaceSlug = str("workspace_slug", false)
	c.AgentID = str("agent_id", true)
	c.AgentSlug = str("agent_slug", true)
	c.ServerID = str("server_id", true)
	c.AgentWorkspaceRef = str("agent_workspace_ref", false)
	c.JTI = str("jti", false)
	c.ExpiresAt = num("exp", true)
	c.IssuedAt = num("iat", false)
	c.NotBefore = num("nbf", false)
	if bad == "" {
		switch aud := m["aud"].(type) {
		case nil:
		case string:
			c.Audience = []string{aud}
		case []any:
			for _, a := range aud {
				s, ok := a.(string)
				if !ok {
					bad = "aud must be a string or a list of strings"
					break
				}
				c.Audience = append(c.Audience, s)
			}
		default:
			bad = "aud must be a string or a list of strings"
		}
	}
	if bad == "" {
		list, ok := m["scopes"].([]any)
		if !ok || len(list) == 0 {
			bad = "scopes must be a non-empty list of strings"
		}
		for _, s := range list {
			scope, ok := s.(string)
			if !ok {
				bad = "scopes must be a non-empty list of strings"
				break
			}
			c.Scopes = append(c.Scopes, scope)
		}
	}
	if bad == "" {
		if dev, ok := m["dev"]; ok && dev != nil {
			b, isBool := dev.(bool)
			if !isBool {
				bad = "dev must be a boolean"
			}
			c.Dev = b
		}
	}
	if bad != "" {
		return nil, fail(CodeInvalidClaims, "Workspace authorization token claims are invalid: "+bad)
	}
	return c, nil
}

// ScopeString returns the scopes space separated (the verified header form).
func (c *Claims) ScopeString() string { return strings.Join(c.Scopes, " ") }
