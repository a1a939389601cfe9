package grants_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// fuzzSigner is a fixed Ed25519 key, so that tokens in the checked-in seed
// corpus keep verifying.
func fuzzSigner() *signer {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	return &signer{kid: "k1", pub: priv.Public().(ed25519.PublicKey), priv: priv}
}

var allCodes = map[string]bool{
	grants.CodeNotConfigured: true, grants.CodeMissing: true, grants.CodeMalformed: true,
	grants.CodeUnsupportedAlg: true, grants.CodeInvalidKey: true, grants.CodeMissingKID: true,
	grants.CodeJWKSUnavailable: true, grants.CodeInvalidJWKS: true, grants.CodeUnknownKID: true,
	grants.CodeInvalidJWK: true, grants.CodeBadSignature: true, grants.CodeInvalidClaims: true,
	grants.CodeWrongIssuer: true, grants.CodeWrongAudience: true, grants.CodeExpired: true,
	grants.CodeNotYetValid: true, grants.CodeWrongServer: true,
}

// checkVerifyError fails unless err is nil or a *refusal.Refusal with a known
// Verify code and a message that does not echo the token.
func checkVerifyError(t *testing.T, token string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var e *refusal.Refusal
	if !errors.As(err, &e) {
		t.Fatalf("error %T %v is not a *refusal.Refusal", err, err)
	}
	if !allCodes[e.Code] {
		t.Fatalf("unknown code %q", e.Code)
	}
	if len(token) >= 16 && strings.Contains(e.Message, token) {
		t.Fatalf("message echoes the token")
	}
}

// FuzzVerify: arbitrary token strings never panic, fail only with known
// codes, and are accepted only when the Ed25519 signature over the first two
// segments verifies with the real key (so a mutation is accepted only if it
// keeps the signature valid, e.g. a different spelling of the same signature
// bytes).
func FuzzVerify(f *testing.F) {
	s := fuzzSigner()
	good := s.mintWith(f, nil)
	parts := strings.Split(good, ".")
	f.Add(good)
	f.Add(parts[0] + "." + parts[1] + ".")
	f.Add(parts[0] + ".." + parts[2])
	f.Add(s.mint(f, baseClaims(), map[string]any{"crit": []any{"exp"}}))
	f.Add(s.mint(f, baseClaims(), map[string]any{"alg": "none"}))
	f.Add(s.mintWith(f, func(c jwt.MapClaims) { c["exp"] = t0.Unix() - 3600 }))
	f.Add(s.mintWith(f, func(c jwt.MapClaims) { c["server_id"] = "OTHER" }))
	f.Add("Bearer " + good)
	f.Add("")

	clk := newClock()
	v := pemVerifier(f, s.pub, clk, nil)
	f.Fuzz(func(t *testing.T, token string) {
		claims, err := v.Verify(ctx, token)
		checkVerifyError(t, token, err)
		if err != nil {
			if claims != nil {
				t.Fatal("claims returned with an error")
			}
			return
		}
		p := strings.Split(token, ".")
		if len(p) != 3 {
			t.Fatalf("accepted a token with %d segments", len(p))
		}
		sig, decErr := base64.RawURLEncoding.DecodeString(p[2])
		if decErr != nil || !ed25519.Verify(s.pub, []byte(p[0]+"."+p[1]), sig) {
			t.Fatalf("accepted a token whose signature does not verify: %q", token)
		}
		if claims == nil || claims.ServerID != testServer || claims.GrantID == "" || len(claims.Scopes) == 0 {
			t.Fatalf("accepted claims %+v", claims)
		}
	})
}

// FuzzVerifySigned: arbitrary header and claims JSON, validly signed with
// the real key. Verify never panics, fails only with known codes, and
// accepts only a header object with alg EdDSA and no crit, and a claims
// object (one JSON value, nothing after it) whose claims it returns as they
// are in the token.
func FuzzVerifySigned(f *testing.F) {
	s := fuzzSigner()
	claimsJSON, _ := json.Marshal(baseClaims())
	f.Add(`{"alg":"EdDSA","typ":"JWT","kid":"k1"}`, string(claimsJSON))
	f.Add(`{"alg":"EdDSA"}`, string(claimsJSON))
	f.Add(`{"alg":"EdDSA","crit":["exp"]}`, string(claimsJSON))
	f.Add(`{"alg":"none"}`, string(claimsJSON))
	f.Add(`{"alg":"EdDSA","alg":"HS256"}`, string(claimsJSON))
	f.Add(`null`, string(claimsJSON))
	f.Add(`{"alg":"EdDSA"}`, `null`)
	f.Add(`{"alg":"EdDSA"}`, `{"exp":1.8e9,"scopes":["a"],"grant_id":"g","workspace_id":"w","agent_id":"a","agent_slug":"s","server_id":"01SERVER","iss":"https://studio.supervaize.com","aud":["supervaizer-server:01SERVER"]}`)

	v := pemVerifier(f, s.pub, newClock(), nil)
	f.Fuzz(func(t *testing.T, header, claimsText string) {
		token := s.raw(header, claimsText)
		claims, err := v.Verify(ctx, token)
		checkVerifyError(t, token, err)
		if err != nil {
			return
		}
		var h map[string]any
		if json.Unmarshal([]byte(header), &h) != nil || h == nil {
			t.Fatalf("accepted header %q", header)
		}
		if h["alg"] != "EdDSA" {
			t.Fatalf("accepted alg %v", h["alg"])
		}
		if _, ok := h["crit"]; ok {
			t.Fatalf("accepted crit %v", h["crit"])
		}
		dec := json.NewDecoder(strings.NewReader(claimsText))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil || m == nil {
			t.Fatalf("accepted claims %q that are not a JSON object: %v", claimsText, err)
		}
		if json.Unmarshal([]byte(claimsText), new(any)) != nil {
			t.Fatalf("accepted claims %q that are not exactly one JSON value (data after the object?)", claimsText)
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		if m["iss"] != testIssuer || m["server_id"] != testServer {
			t.Fatalf("accepted iss %v server_id %v", m["iss"], m["server_id"])
		}
		if claims.GrantID != str("grant_id") || claims.WorkspaceID != str("workspace_id") || claims.AgentID != str("agent_id") ||
			claims.AgentSlug != str("agent_slug") || claims.GrantID == "" || claims.WorkspaceID == "" {
			t.Fatalf("claims %+v differ from token %v", claims, m)
		}
		list, ok := m["scopes"].([]any)
		if !ok || len(list) == 0 || len(list) != len(claims.Scopes) {
			t.Fatalf("accepted scopes %v", m["scopes"])
		}
		for i, sc := range list {
			if sc != claims.Scopes[i] {
				t.Fatalf("scope %d: %v vs %q", i, sc, claims.Scopes[i])
			}
		}
		exp, ok := m["exp"].(json.Number)
		if !ok {
			t.Fatalf("accepted exp %v", m["exp"])
		}
		if f, err := exp.Float64(); err != nil || f+30 < float64(t0.Unix()) {
			t.Fatalf("accepted expired exp %v", exp)
		}
		aud := m["aud"]
		switch a := aud.(type) {
		case string:
			if a != testAud {
				t.Fatalf("accepted aud %q", a)
			}
		case []any:
			found := false
			for _, x := range a {
				found = found || x == testAud
			}
			if !found {
				t.Fatalf("accepted aud %v", a)
			}
		default:
			t.Fatalf("accepted aud %v", aud)
		}
	})
}
