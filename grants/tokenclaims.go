package grants

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/tidwall/gjson"
)

// The claims the model reads (claimsModel), in the model's field order:
// indexes of tokenClaims.raw and claimNames.
const (
	claimIss = iota
	claimAud
	claimSub
	claimGrantID
	claimWorkspaceID
	claimWorkspaceSlug
	claimAgentID
	claimAgentSlug
	claimServerID
	claimScopes
	claimAgentWorkspaceRef
	claimIat
	claimExp
	claimJTI
	claimNbf
	claimDev
	numClaims
)

// claimNames are the JSON names of the claims, by index.
var claimNames = [numClaims]string{"iss", "aud", "sub", "grant_id", "workspace_id", "workspace_slug",
	"agent_id", "agent_slug", "server_id", "scopes", "agent_workspace_ref", "iat", "exp", "jti", "nbf", "dev"}

// tokenClaims is the claims segment of a token: the raw JSON value of each
// claim the model reads ("" when absent), recorded by the one scan of the
// segment (parseToken, with claimsSchema), without a map. Keys match
// exactly after unescaping, as a map's would ("ISS" is not "iss";
// encoding/json's struct decoding would take it); other keys are skipped.
// The segment is a strict JSON object (no duplicate key, valid UTF-8, no
// lone surrogate). A claim of the wrong JSON type is found by claimsModel
// once the signature verified, so that a forged token is bad_signature
// whatever its claims hold. UnmarshalJSON reads it the way golang-jwt's
// parser did (the tests' oracle, VerifyGolangJWT).
type tokenClaims struct {
	raw [numClaims]string
}

// UnmarshalJSON records the raw value of each claim of b, a JSON object.
func (t *tokenClaims) UnmarshalJSON(b []byte) error {
	*t = tokenClaims{}
	gjson.ParseBytes(b).ForEach(func(k, v gjson.Result) bool {
		name := rawString(k.Raw)
		for i := range claimNames {
			if claimNames[i] == name {
				t.raw[i] = v.Raw
				break
			}
		}
		return true
	})
	return nil
}

// rawKind classifies a raw JSON value by its first byte: 0 (absent), '"'
// (string), 'n' (null), 't' and 'f' (booleans), '[' (array), '{' (object),
// '0' (number).
func rawKind(v string) byte {
	switch {
	case v == "":
		return 0
	case v[0] == '-' || (v[0] >= '0' && v[0] <= '9'):
		return '0'
	}
	return v[0]
}

// rawString is the value of a raw JSON string literal, unescaped as
// encoding/json does (the decoder the claims went through before). Without
// an escape it is a substring of raw: no copy.
func rawString(raw string) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	if !strings.Contains(raw, `\`) {
		return raw[1 : len(raw)-1]
	}
	var s string
	if json.Unmarshal([]byte(raw), &s) != nil {
		return ""
	}
	return s
}

// The jwt.Claims methods. The Verifier parses with
// jwt.WithoutClaimsValidation and checks the claims itself (checkClaims:
// the SDK's order of checks, whole seconds, exp + leeway inclusive), so
// golang-jwt never calls them; they answer from the same model, a claim of
// the wrong type reading as absent.

func (t *tokenClaims) numericDate(i int) (*jwt.NumericDate, error) {
	if rawKind(t.raw[i]) != '0' {
		return nil, nil
	}
	n, bad := intClaim(t.raw[i], claimNames[i], false, nil)
	if len(bad) > 0 {
		return nil, nil
	}
	return jwt.NewNumericDate(time.Unix(n, 0)), nil
}

// GetExpirationTime implements jwt.Claims.
func (t *tokenClaims) GetExpirationTime() (*jwt.NumericDate, error) { return t.numericDate(claimExp) }

// GetIssuedAt implements jwt.Claims.
func (t *tokenClaims) GetIssuedAt() (*jwt.NumericDate, error) { return t.numericDate(claimIat) }

// GetNotBefore implements jwt.Claims.
func (t *tokenClaims) GetNotBefore() (*jwt.NumericDate, error) { return t.numericDate(claimNbf) }

// GetIssuer implements jwt.Claims.
func (t *tokenClaims) GetIssuer() (string, error) { return rawString(t.raw[claimIss]), nil }

// GetSubject implements jwt.Claims.
func (t *tokenClaims) GetSubject() (string, error) { return rawString(t.raw[claimSub]), nil }

// GetAudience implements jwt.Claims.
func (t *tokenClaims) GetAudience() (jwt.ClaimStrings, error) {
	aud, bad := audienceClaim(t.raw[claimAud], nil, []string{})
	if len(bad) > 0 {
		return nil, nil
	}
	return aud, nil
}

var _ jwt.Claims = (*tokenClaims)(nil)
