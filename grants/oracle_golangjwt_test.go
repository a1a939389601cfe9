package grants

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"

	"github.com/golang-jwt/jwt/v5"

	"github.com/supervaize/supervaizer-sidecar/refusal"
	"github.com/supervaize/supervaizer-sidecar/strictjson"
)

// The verify of an uncached token as it was before parseToken: the parts
// checked by segmentsError, then golang-jwt's ParseWithClaims (alg, key
// function, signature), then the claims. The oracle of
// TestVerifyMatchesGolangJWT and FuzzVerifyMatchesGolangJWT: Verify must
// answer every token as it does.

// VerifyGolangJWT is the old uncached verify (no cache, no Observe).
func (v *Verifier) VerifyGolangJWT(ctx context.Context, token string, o VerifyOptions) (*Claims, *refusal.Refusal) {
	if token == "" {
		return nil, fail(CodeMissing, "Workspace authorization token is missing")
	}
	if len(token) > MaxTokenBytes {
		return nil, fail(CodeMalformed, "Workspace authorization token is too large")
	}
	if e := segmentsError(token); e != nil {
		return nil, e
	}
	parser := jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}), jwt.WithoutClaimsValidation())
	var keyErr *refusal.Refusal
	var tc tokenClaims
	tok, err := parser.ParseWithClaims(token, &tc, func(t *jwt.Token) (any, error) {
		if _, ok := t.Header["crit"]; ok {
			keyErr = fail(CodeMalformed, "Workspace authorization token has an unsupported crit header")
			return nil, keyErr
		}
		var h tokenHeader
		h.alg, _ = t.Header["alg"].(string)
		h.kid, h.kidString = t.Header["kid"].(string)
		k, e := v.keys.key(ctx, h, o.RefreshUnknownKID)
		if e != nil {
			keyErr = e
			return nil, e
		}
		return k, nil
	})
	if keyErr != nil {
		return nil, keyErr
	}
	switch {
	case err == nil:
	case errors.Is(err, jwt.ErrTokenUnverifiable),
		errors.Is(err, jwt.ErrTokenSignatureInvalid) && tok != nil && tok.Method.Alg() != jwt.SigningMethodEdDSA.Alg():
		return nil, fail(CodeUnsupportedAlg, "Workspace authorization token must be signed with EdDSA")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return nil, fail(CodeBadSignature, "Workspace authorization token signature is invalid")
	default:
		return nil, fail(CodeMalformed, "Workspace authorization token is malformed")
	}
	claims, shapeErr := claimsModel(&tc)
	if shapeErr != nil {
		return nil, shapeErr
	}
	if e := v.checkClaims(claims, v.cfg.Now().Unix()); e != nil {
		e.Token = refusedToken(claims)
		return nil, e
	}
	if claims.ServerID != v.expectedServer {
		e := fail(CodeWrongServer, "Workspace authorization token is for another server")
		e.Token = refusedToken(claims)
		return nil, e
	}
	claims.scopeString = strings.Join(claims.Scopes, " ")
	claims.headerSafe = headerSafeClaims(claims)
	return claims, nil
}

// segmentsError checks that token has three dot-separated parts whose first
// two are base64url of exactly one JSON object each (no null, no trailing
// data, no duplicate key, bounded depth), so that golang-jwt, which would
// accept "null" or "{...} {}", and the SDK read the same claims.
func segmentsError(token string) *refusal.Refusal {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return failText(CodeMalformed, MsgNotCompactJWT, "not three dot-separated parts")
	}
	notObject := false
	for _, seg := range parts[:2] {
		b, err := base64.RawURLEncoding.DecodeString(seg)
		switch {
		case err != nil:
			return fail(CodeMalformed, "a part is not base64url of JSON")
		case strictjson.IsObject(b, strictjson.MaxDepth):
		case !json.Valid(b):
			return fail(CodeMalformed, "a part is not base64url of JSON")
		case bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{")):
			return fail(CodeMalformed, "a part is a JSON object with a duplicate key, a lone surrogate or deep nesting")
		default:
			notObject = true
		}
	}
	if notObject {
		return failText(CodeMalformed, MsgNotObjects, "a part is JSON but not an object")
	}
	return nil
}
