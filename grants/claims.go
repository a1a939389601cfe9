package grants

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"golang.org/x/net/http/httpguts"

	"github.com/supervaize/supervaizer-sidecar/refusal"
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

	// scopeString is ScopeString's answer, joined once when the verifier
	// accepts the token (kept with it in the verified-token cache); "" for
	// claims built otherwise, which ScopeString joins on each call.
	scopeString string
	// headerSafe is HeaderSafe's answer, found once when the verifier
	// accepts the token; false for claims built otherwise.
	headerSafe bool
}

// HeaderSafe reports that every string claim (iss, aud, sub, the ids and
// slugs, agent_workspace_ref, jti) is one HeaderCarries takes and every
// scope one HeaderCarriesListItem takes, as found once when the verifier
// accepted the token. False for claims the verifier did not build: a
// caller that needs to know then checks the claims it uses itself.
func (c *Claims) HeaderSafe() bool { return c.headerSafe }

// HeaderCarries reports whether an HTTP header field carries v as it is: a
// value Go's transport sends (httpguts.ValidHeaderFieldValue: no control
// character but tab) without a leading or trailing space or tab (a parser
// trims them).
func HeaderCarries(v string) bool {
	return httpguts.ValidHeaderFieldValue(v) && strings.Trim(v, " \t") == v
}

// HeaderCarriesListItem reports whether an item of a list the verified
// headers join with spaces (the scopes) comes back as it is when the
// header is split on spaces: HeaderCarries, not empty, no space or tab.
func HeaderCarriesListItem(v string) bool {
	return v != "" && !strings.ContainsAny(v, " \t") && HeaderCarries(v)
}

// headerSafeClaims is HeaderSafe's finding for c.
func headerSafeClaims(c *Claims) bool {
	for _, v := range [...]string{c.Issuer, c.Subject, c.GrantID, c.WorkspaceID, c.WorkspaceSlug, c.AgentID,
		c.AgentSlug, c.ServerID, c.AgentWorkspaceRef, c.JTI} {
		if !HeaderCarries(v) {
			return false
		}
	}
	for _, v := range c.Audience {
		if !HeaderCarries(v) {
			return false
		}
	}
	for _, v := range c.Scopes {
		if !HeaderCarriesListItem(v) {
			return false
		}
	}
	return true
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

// claimsModel checks the claims model of the reference ("Claims model") on
// the claims segment as tokenClaims read it and returns the typed claims, or
// a *refusal.Refusal: CodeInvalidClaims whose text lists every claim that fails the
// model, in the model's field order, as the SDK's does (claimProblem), or,
// once the model fits, CodeWrongIssuer for an empty "iss" (the SDK's model
// takes "" and its issuer check then refuses it). Where the SDK's lax model
// would convert a value ("123" or true for an integer) this one refuses it
// (docs/sdk-differences.md, "Where the sidecar differs from the SDK, on purpose").
func claimsModel(t *tokenClaims) (*Claims, *refusal.Refusal) {
	c := &Claims{}
	var bad []claimProblem
	// aud and scopes are read into lists on the stack, then copied to
	// one array of the heap (packLists) once the model fits.
	var lists [16]string
	var aud, scopes []string
	str := func(i int, required bool) string {
		v := t.raw[i]
		switch k := rawKind(v); {
		case k == '"':
			return rawString(v)
		case k == 0 && required:
			bad = append(bad, claimProblem{"missing", claimNames[i], "", msgFieldRequired})
		case k != 0 && (k != 'n' || required):
			bad = append(bad, claimProblem{"string_type", claimNames[i], "", msgString})
		}
		return ""
	}

	c.Issuer = str(claimIss, true)
	aud, bad = audienceClaim(t.raw[claimAud], bad, lists[:0])
	c.Subject = str(claimSub, false)
	c.GrantID = str(claimGrantID, true)
	if rawKind(t.raw[claimGrantID]) == '"' && c.GrantID == "" {
		// Stricter than the SDK, which takes an empty grant_id.
		bad = append(bad, claimProblem{"string_too_short", "grant_id", "", "String should have at least 1 character"})
	}
	c.WorkspaceID = str(claimWorkspaceID, true)
	c.WorkspaceSlug = str(claimWorkspaceSlug, false)
	c.AgentID = str(claimAgentID, true)
	c.AgentSlug = str(claimAgentSlug, true)
	c.ServerID = str(claimServerID, true)
	scopes, bad = scopesClaim(t.raw[claimScopes], bad, after(lists[:], aud))
	c.AgentWorkspaceRef = str(claimAgentWorkspaceRef, false)
	c.IssuedAt, bad = intClaim(t.raw[claimIat], "iat", false, bad)
	c.ExpiresAt, bad = intClaim(t.raw[claimExp], "exp", true, bad)
	c.JTI = str(claimJTI, false)
	c.NotBefore, bad = intClaim(t.raw[claimNbf], "nbf", false, bad)
	switch rawKind(t.raw[claimDev]) {
	case 0, 'n':
	case 't':
		c.Dev = true
	case 'f':
	default:
		bad = append(bad, claimProblem{"bool_type", "dev", "", "Input should be a valid boolean"})
	}
	if len(bad) > 0 {
		return nil, failText(CodeInvalidClaims, PrefixInvalidClaims+pythonRepr(bad), "claim "+bad[0].name+": "+bad[0].msg)
	}
	if c.Issuer == "" {
		return nil, fail(CodeWrongIssuer, "empty iss")
	}
	c.Audience, c.Scopes = packLists(aud, scopes)
	return c, nil
}

// after is the empty room of lists past aud, read into lists[:0] (lists
// itself when aud outgrew it).
func after(lists, aud []string) []string {
	if len(aud) > len(lists) {
		return lists[:0]
	}
	return lists[len(aud):len(aud)]
}

// packLists copies aud and scopes to one new array: aud first, then scopes,
// each its own slice of it (appending to one cannot overwrite the other); a
// nil list stays nil, an empty one is empty.
func packLists(aud, scopes []string) ([]string, []string) {
	all := make([]string, len(aud)+len(scopes))
	copy(all, aud)
	copy(all[len(aud):], scopes)
	outAud, outScopes := all[:len(aud):len(aud)], all[len(aud):]
	if aud == nil {
		outAud = nil
	}
	if scopes == nil {
		outScopes = nil
	}
	return outAud, outScopes
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
	msgIntSize       = "Unable to parse input string as an integer, exceeded maximum size"
	msgFinite        = "Input should be a finite number"
)

// claimProblem is one entry of the SDK's invalid_claims list: pydantic's
// error type, the location (the claim name, then sub, a union member's name
// or a list index, when set) and its text.
type claimProblem struct {
	typ, name, sub, msg string
}

// UncarriableClaim is the refusal of a verified call whose claim name holds
// a value no HTTP header can carry as it is (the gate's verified headers:
// gate/verifiedcontext.go), in the SDK's invalid-claims form. Stricter than the SDK,
// which reads the claims in-process (docs/sdk-differences.md, "Where the sidecar differs
// from the SDK, on purpose").
func UncarriableClaim(name string) *refusal.Refusal {
	return failText(CodeInvalidClaims,
		PrefixInvalidClaims+pythonRepr([]claimProblem{{"header_value", name, "", msgHeaderValue}}),
		"claim "+name+": a control character, a leading or trailing space or tab, or (a scope) empty or with a space or tab in it, which a verified header cannot carry as it is")
}

// msgHeaderValue is UncarriableClaim's text for the claim.
const msgHeaderValue = "Value cannot be carried in an HTTP header"

// intClaim reads an integer claim from v, its raw JSON value ("" when
// absent) and adds its problem to bad. The number itself is read by
// intNumber.
func intClaim(v, name string, required bool, bad []claimProblem) (int64, []claimProblem) {
	switch rawKind(v) {
	case 0:
		if required {
			bad = append(bad, claimProblem{"missing", name, "", msgFieldRequired})
		}
		return 0, bad
	case 'n':
		if required {
			bad = append(bad, claimProblem{"int_type", name, "", msgInt})
		}
		return 0, bad
	case '"':
		return 0, append(bad, claimProblem{"int_parsing", name, "", msgIntParsing})
	case '0':
	default:
		return 0, append(bad, claimProblem{"int_type", name, "", msgInt})
	}
	i, p := intNumber(v, name)
	if p != nil {
		return 0, append(bad, *p)
	}
	return i, bad
}

// intNumber reads a JSON number (its text v) as the SDK's model reads an
// integer claim, or returns the problem (docs/sdk-wire.md, "Validation
// error lists"):
//   - an integer literal (no fraction, no exponent) is that integer; one
//     outside int64 is int_parsing_size, where Python takes any integer
//     (stricter: README, "Where the sidecar differs from the SDK");
//   - any other number is read as a float64, as Python reads it: infinite
//     (1e400) is finite_number, with a fractional part int_from_float,
//     outside int64 int_parsing_size, else its integer value (1.0e9, 1e17).
func intNumber(v, name string) (int64, *claimProblem) {
	if !strings.ContainsAny(v, ".eE") {
		if i, err := strconv.ParseInt(v, 10, 64); err == nil {
			return i, nil
		}
		return 0, &claimProblem{"int_parsing_size", name, "", msgIntSize}
	}
	f, _ := strconv.ParseFloat(v, 64) // a JSON number: only a range error (±Inf, or 0 on underflow)
	switch {
	case math.IsInf(f, 0):
		return 0, &claimProblem{"finite_number", name, "", msgFinite}
	case f != math.Trunc(f):
		return 0, &claimProblem{"int_from_float", name, "", msgIntFraction}
	case f >= 1<<63 || f < -(1<<63):
		return 0, &claimProblem{"int_parsing_size", name, "", msgIntSize}
	}
	return int64(f), nil
}

// audienceClaim reads "aud" from v, its raw JSON value: a string or a list
// of strings (required). The strings are appended to into (empty, not nil).
func audienceClaim(v string, bad []claimProblem, into []string) ([]string, []claimProblem) {
	switch rawKind(v) {
	case '"':
		return append(into, rawString(v)), bad
	case '[':
		out := into
		i, notString := 0, -1
		gjson.Parse(v).ForEach(func(_, e gjson.Result) bool {
			if e.Type != gjson.String {
				notString = i
				return false
			}
			out = append(out, rawString(e.Raw))
			i++
			return true
		})
		if notString >= 0 {
			return nil, append(bad, claimProblem{"string_type", "aud", "str", msgString},
				claimProblem{"string_type", "aud", "list[str]\x00" + strconv.Itoa(notString), msgString})
		}
		return out, bad
	case 0:
		return nil, append(bad, claimProblem{"missing", "aud", "", msgFieldRequired})
	}
	return nil, append(bad, claimProblem{"string_type", "aud", "str", msgString},
		claimProblem{"list_type", "aud", "list[str]", msgList})
}

// scopesClaim reads "scopes" from v, its raw JSON value: a non-empty list of
// strings. Absent, it is empty (the SDK's default), so the scope check
// refuses the call (missing_scope); present and empty, it fails the model,
// as in the SDK. The strings are appended to into (empty, not nil).
func scopesClaim(v string, bad []claimProblem, into []string) ([]string, []claimProblem) {
	switch rawKind(v) {
	case 0:
		return nil, bad
	case '[':
	default:
		return nil, append(bad, claimProblem{"list_type", "scopes", "", msgList})
	}
	out := into
	i := 0
	gjson.Parse(v).ForEach(func(_, e gjson.Result) bool {
		if e.Type != gjson.String {
			bad = append(bad, claimProblem{"string_type", "scopes", "\x00" + strconv.Itoa(i), msgString})
		} else {
			out = append(out, rawString(e.Raw))
		}
		i++
		return true
	})
	if i == 0 { // no element
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
func (c *Claims) ScopeString() string {
	if c.scopeString != "" {
		return c.scopeString
	}
	return strings.Join(c.Scopes, " ")
}

// checkClaims checks a verified token's iss, aud and times against the
// configuration at now (Unix seconds, floor of the clock), as the SDK does
// (workspace_authorization.py, _verify_signed_token and
// _validate_claims_against_request): wrong_issuer (iss differs), then
// wrong_audience (no aud member is the expected audience), expired
// (exp + leeway < now), not_yet_valid (iat - leeway > now; nbf the same
// way, which the SDK ignores), then invalid_claims for an empty iss (which
// claimsModel refuses first) and for a lifetime (exp - iat) over MaxTokenLifetime.
func (v *Verifier) checkClaims(c *Claims, now int64) *refusal.Refusal {
	issMissing := c.Issuer == ""
	switch {
	case !issMissing && c.Issuer != v.cfg.Issuer:
		return fail(CodeWrongIssuer, "Workspace authorization token issuer is not trusted")
	case !slices.Contains(c.Audience, v.cfg.Audience): // "" and [] too, as the SDK
		return fail(CodeWrongAudience, "Workspace authorization token audience does not match this server")
	case c.ExpiresAt < now-v.leeway: // exp + leeway < now, without overflow
		return fail(CodeExpired, "Workspace authorization token has expired")
	case c.IssuedAt > now+v.leeway, c.NotBefore > now+v.leeway: // iat - leeway > now
		return fail(CodeNotYetValid, "Workspace authorization token is not valid yet")
	case issMissing:
		return fail(CodeInvalidClaims, "Workspace authorization token claims are invalid")
	case v.maxLifetime > 0 && !lifetimeWithin(c, v.maxLifetime):
		return fail(CodeInvalidClaims, "Workspace authorization token claims are invalid: exp - iat exceeds the maximum token lifetime")
	}
	return nil
}

// lifetimeWithin reports whether c has an iat and exp - iat ≤ limit seconds
// (an exp - iat that overflows int64 is over any limit).
func lifetimeWithin(c *Claims, limit int64) bool {
	if c.IssuedAt == 0 {
		return false
	}
	life := c.ExpiresAt - c.IssuedAt
	if c.ExpiresAt > c.IssuedAt && life < 0 {
		return false
	}
	return life <= limit
}

// satAdd is a + b for b ≥ 0, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
