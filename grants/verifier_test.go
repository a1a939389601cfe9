package grants_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/refusal"
)

var ctx = context.Background()

// refresh lets a Verify trigger an unknown-kid JWKS refresh.
var refresh = grants.VerifyOptions{RefreshUnknownKID: true}

// rsaKey is generated once (slow).
var rsaKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// TestVerifyPEM: every data.code Verify returns with a PEM key, and the
// success path, on a fake clock.
func TestVerifyPEM(t *testing.T) {
	key := newSigner(t, "k1")
	other := newSigner(t, "k1") // same kid, other key
	good := key.mintWith(t, nil)
	parts := strings.Split(good, ".")

	hs256 := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, baseClaims())
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString([]byte(key.pub)) // the classic key confusion
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	rs256 := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, baseClaims())
		s, err := tok.SignedString(rsaKey())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	none := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodNone, baseClaims())
		s, err := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	claimsJSON := mustJSON(t, baseClaims())
	flipSig := func(tok string) string {
		p := strings.Split(tok, ".")
		sig, err := base64.RawURLEncoding.DecodeString(p[2])
		if err != nil {
			t.Fatal(err)
		}
		sig[10] ^= 0x01
		return p[0] + "." + p[1] + "." + base64.RawURLEncoding.EncodeToString(sig)
	}
	edit := func(f func(c jwt.MapClaims)) string { return key.mintWith(t, f) }

	type tc struct {
		name  string
		token string
		cfg   func(*grants.Config)
		want  string // "" for success
	}
	cases := []tc{
		{"valid", good, nil, ""},
		{"valid, aud list containing ours", edit(func(c jwt.MapClaims) { c["aud"] = []any{"x", testAud} }), nil, ""},
		{"valid, no iat", edit(func(c jwt.MapClaims) { delete(c, "iat") }), nil, ""},
		{"valid, optional strings null", edit(func(c jwt.MapClaims) { c["workspace_slug"], c["sub"], c["jti"] = nil, nil, nil }), nil, ""},
		{"valid, dev true", edit(func(c jwt.MapClaims) { c["dev"] = true }), nil, ""},

		{"missing", "", nil, grants.CodeMissing},

		{"one part", "abc", nil, grants.CodeMalformed},
		{"two parts", "abc.def", nil, grants.CodeMalformed},
		{"four parts", good + ".x", nil, grants.CodeMalformed},
		{"dots only", "..", nil, grants.CodeMalformed},
		{"header not base64url", "!!!." + parts[1] + "." + parts[2], nil, grants.CodeMalformed},
		{"claims not base64url", parts[0] + ".***." + parts[2], nil, grants.CodeMalformed},
		{"signature not base64url", parts[0] + "." + parts[1] + ".%%%", nil, grants.CodeMalformed},
		{"header not JSON", key.raw(`alg=EdDSA`, claimsJSON), nil, grants.CodeMalformed},
		{"header array", key.raw(`["EdDSA"]`, claimsJSON), nil, grants.CodeMalformed},
		{"header string", key.raw(`"EdDSA"`, claimsJSON), nil, grants.CodeMalformed},
		{"header with trailing data", key.raw(`{"alg":"EdDSA","kid":"k1"}x`, claimsJSON), nil, grants.CodeMalformed},
		{"claims not JSON", key.raw(`{"alg":"EdDSA","kid":"k1"}`, `grant_id=1`), nil, grants.CodeMalformed},
		{"claims array", key.raw(`{"alg":"EdDSA","kid":"k1"}`, `[`+claimsJSON+`]`), nil, grants.CodeMalformed},
		{"claims number", key.raw(`{"alg":"EdDSA","kid":"k1"}`, `1`), nil, grants.CodeMalformed},
		{"crit header", key.mint(t, baseClaims(), map[string]any{"crit": []any{"exp"}}), nil, grants.CodeMalformed},
		{"crit header empty", key.mint(t, baseClaims(), map[string]any{"crit": []any{}}), nil, grants.CodeMalformed},
		{"1 MB token", strings.Repeat("a", 1<<20), nil, grants.CodeMalformed},
		{"1 MB JWT-shaped token", parts[0] + "." + strings.Repeat("A", 1<<20) + "." + parts[2], nil, grants.CodeMalformed},
		{"just over MaxTokenBytes", parts[0] + "." + parts[1] + "." + parts[2] + strings.Repeat("A", grants.MaxTokenBytes), nil, grants.CodeMalformed},

		{"alg none", none(), nil, grants.CodeUnsupportedAlg},
		{"alg HS256 with the public key as secret", hs256(), nil, grants.CodeUnsupportedAlg},
		{"alg RS256", rs256(), nil, grants.CodeUnsupportedAlg},
		{"alg unknown", key.mint(t, baseClaims(), map[string]any{"alg": "ES999"}), nil, grants.CodeUnsupportedAlg},
		{"alg lower case", key.mint(t, baseClaims(), map[string]any{"alg": "eddsa"}), nil, grants.CodeUnsupportedAlg},
		{"alg Ed25519 (RFC 9864 name)", key.mint(t, baseClaims(), map[string]any{"alg": "Ed25519"}), nil, grants.CodeUnsupportedAlg},
		{"alg missing", key.raw(`{"typ":"JWT","kid":"k1"}`, claimsJSON), nil, grants.CodeUnsupportedAlg},
		{"alg number", key.raw(`{"alg":1,"kid":"k1"}`, claimsJSON), nil, grants.CodeUnsupportedAlg},
		{"alg null", key.raw(`{"alg":null,"kid":"k1"}`, claimsJSON), nil, grants.CodeUnsupportedAlg},
		{"alg none, unsigned and bad claims", b64(`{"alg":"none"}`) + "." + b64(`{}`) + ".", nil, grants.CodeUnsupportedAlg},

		{"signature bit flipped", flipSig(good), nil, grants.CodeBadSignature},
		{"signed by another key", other.mintWith(t, nil), nil, grants.CodeBadSignature},
		{"claims swapped under a valid signature", parts[0] + "." + b64(`{"grant_id":"g"}`) + "." + parts[2], nil, grants.CodeBadSignature},
		{"header swapped under a valid signature", b64(`{"alg":"EdDSA","kid":"k2"}`) + "." + parts[1] + "." + parts[2], nil, grants.CodeBadSignature},
		{"empty signature", parts[0] + "." + parts[1] + ".", nil, grants.CodeBadSignature},
		{"truncated signature", parts[0] + "." + parts[1] + "." + parts[2][:80], nil, grants.CodeBadSignature},
		{"bad signature wins over bad claims", flipSig(key.raw(`{"alg":"EdDSA","kid":"k1"}`, `{}`)), nil, grants.CodeBadSignature},

		{"grant_id missing", edit(func(c jwt.MapClaims) { delete(c, "grant_id") }), nil, grants.CodeInvalidClaims},
		{"grant_id empty", edit(func(c jwt.MapClaims) { c["grant_id"] = "" }), nil, grants.CodeInvalidClaims},
		{"grant_id number", edit(func(c jwt.MapClaims) { c["grant_id"] = 5 }), nil, grants.CodeInvalidClaims},
		{"workspace_id missing", edit(func(c jwt.MapClaims) { delete(c, "workspace_id") }), nil, grants.CodeInvalidClaims},
		{"workspace_id null", edit(func(c jwt.MapClaims) { c["workspace_id"] = nil }), nil, grants.CodeInvalidClaims},
		{"agent_id missing", edit(func(c jwt.MapClaims) { delete(c, "agent_id") }), nil, grants.CodeInvalidClaims},
		{"agent_slug list", edit(func(c jwt.MapClaims) { c["agent_slug"] = []any{testAgent} }), nil, grants.CodeInvalidClaims},
		{"server_id missing", edit(func(c jwt.MapClaims) { delete(c, "server_id") }), nil, grants.CodeInvalidClaims},
		{"exp missing", edit(func(c jwt.MapClaims) { delete(c, "exp") }), nil, grants.CodeInvalidClaims},
		{"exp string", edit(func(c jwt.MapClaims) { c["exp"] = "1800000300" }), nil, grants.CodeInvalidClaims},
		{"exp fractional", edit(func(c jwt.MapClaims) { c["exp"] = 1800000300.5 }), nil, grants.CodeInvalidClaims},
		{"exp bool", edit(func(c jwt.MapClaims) { c["exp"] = true }), nil, grants.CodeInvalidClaims},
		{"iat string", edit(func(c jwt.MapClaims) { c["iat"] = "now" }), nil, grants.CodeInvalidClaims},
		{"nbf string", edit(func(c jwt.MapClaims) { c["nbf"] = "now" }), nil, grants.CodeInvalidClaims},
		{"scopes missing: the SDK's default, refused later as missing_scope", edit(func(c jwt.MapClaims) { delete(c, "scopes") }), nil, ""},
		{"iss empty: wrong_issuer, as the SDK", edit(func(c jwt.MapClaims) { c["iss"] = "" }), nil, grants.CodeWrongIssuer},
		{"iss missing", edit(func(c jwt.MapClaims) { delete(c, "iss") }), nil, grants.CodeInvalidClaims},
		{"aud missing", edit(func(c jwt.MapClaims) { delete(c, "aud") }), nil, grants.CodeInvalidClaims},
		{"scopes empty", edit(func(c jwt.MapClaims) { c["scopes"] = []any{} }), nil, grants.CodeInvalidClaims},
		{"scopes string", edit(func(c jwt.MapClaims) { c["scopes"] = "supervaizer/action.invoke job.start" }), nil, grants.CodeInvalidClaims},
		{"scopes with a number", edit(func(c jwt.MapClaims) { c["scopes"] = []any{"job.start", 1} }), nil, grants.CodeInvalidClaims},
		{"aud number", edit(func(c jwt.MapClaims) { c["aud"] = 5 }), nil, grants.CodeInvalidClaims},
		{"aud list with a number", edit(func(c jwt.MapClaims) { c["aud"] = []any{testAud, 5} }), nil, grants.CodeInvalidClaims},
		{"iss number", edit(func(c jwt.MapClaims) { c["iss"] = 5 }), nil, grants.CodeInvalidClaims},
		{"dev string", edit(func(c jwt.MapClaims) { c["dev"] = "yes" }), nil, grants.CodeInvalidClaims},
		{"invalid claims win over wrong issuer", edit(func(c jwt.MapClaims) { c["iss"], c["grant_id"] = "x", 1 }), nil, grants.CodeInvalidClaims},

		{"wrong issuer", edit(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" }), nil, grants.CodeWrongIssuer},
		{"issuer with trailing slash", edit(func(c jwt.MapClaims) { c["iss"] = testIssuer + "/" }), nil, grants.CodeWrongIssuer},
		{"wrong issuer wins over expired", edit(func(c jwt.MapClaims) { c["iss"], c["exp"] = "x", t0.Unix()-3600 }), nil, grants.CodeWrongIssuer},

		{"wrong audience string", edit(func(c jwt.MapClaims) { c["aud"] = "supervaizer-server:OTHER" }), nil, grants.CodeWrongAudience},
		{"wrong audience list", edit(func(c jwt.MapClaims) { c["aud"] = []any{"a", "supervaizer-server:OTHER"} }), nil, grants.CodeWrongAudience},
		{"audience differs in case", edit(func(c jwt.MapClaims) { c["aud"] = strings.ToUpper(testAud) }), nil, grants.CodeWrongAudience},
		{"wrong audience wins over expired", edit(func(c jwt.MapClaims) { c["aud"], c["exp"] = "x", t0.Unix()-3600 }), nil, grants.CodeWrongAudience},

		{"expired beyond leeway", edit(func(c jwt.MapClaims) { c["exp"] = t0.Unix() - 31 }), nil, grants.CodeExpired},
		{"expired within leeway", edit(func(c jwt.MapClaims) { c["exp"] = t0.Unix() - 29 }), nil, ""},
		{"expired, no leeway", edit(func(c jwt.MapClaims) { c["exp"] = t0.Unix() - 1 }), func(c *grants.Config) { c.Leeway = new(time.Duration(0)) }, grants.CodeExpired},
		{"expired within a 5 min leeway", edit(func(c jwt.MapClaims) { c["exp"] = t0.Unix() - 200 }), func(c *grants.Config) { c.Leeway = new(5 * time.Minute) }, ""},
		{"expired wins over not yet valid", edit(func(c jwt.MapClaims) { c["exp"], c["iat"] = t0.Unix()-100, t0.Unix()+100 }), nil, grants.CodeExpired},
		{"expired wins over wrong server", edit(func(c jwt.MapClaims) { c["exp"], c["server_id"] = t0.Unix()-100, "OTHER" }), nil, grants.CodeExpired},

		{"iat in the future beyond leeway", edit(func(c jwt.MapClaims) { c["iat"] = t0.Unix() + 31 }), nil, grants.CodeNotYetValid},
		{"iat in the future within leeway", edit(func(c jwt.MapClaims) { c["iat"] = t0.Unix() + 29 }), nil, ""},
		{"iat in the future, no leeway", edit(func(c jwt.MapClaims) { c["iat"] = t0.Unix() + 1 }), func(c *grants.Config) { c.Leeway = new(time.Duration(0)) }, grants.CodeNotYetValid},
		{"nbf in the future beyond leeway", edit(func(c jwt.MapClaims) { c["nbf"] = t0.Unix() + 31 }), nil, grants.CodeNotYetValid},
		{"nbf in the future within leeway", edit(func(c jwt.MapClaims) { c["nbf"] = t0.Unix() + 29 }), nil, ""},
		{"nbf in the past", edit(func(c jwt.MapClaims) { c["nbf"] = t0.Unix() - 100 }), nil, ""},

		{"wrong server", edit(func(c jwt.MapClaims) { c["server_id"] = "OTHER" }), nil, grants.CodeWrongServer},
		{"server differs in case", edit(func(c jwt.MapClaims) { c["server_id"] = strings.ToLower(testServer) }), nil, grants.CodeWrongServer},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newClock()
			obs := &observer{}
			v := pemVerifier(t, key.pub, clk, func(cfg *grants.Config) {
				cfg.Observe = obs.observe
				if c.cfg != nil {
					c.cfg(cfg)
				}
			})
			claims, err := v.Verify(ctx, c.token)
			if got := codeOf(t, err); got != c.want {
				t.Fatalf("code %q (%v), want %q", got, err, c.want)
			}
			// Observe reports every Verify that reached the cache: a token
			// present and within MaxTokenBytes.
			if c.token == "" || len(c.token) > grants.MaxTokenBytes {
				if n := obs.count(); n != 0 {
					t.Fatalf("Observe called %d times for a token that cannot reach the cache", n)
				}
			} else if o := obs.last(t); o.code != c.want || o.cached {
				t.Fatalf("observed %+v", o)
			}
			if c.want == "" && (claims == nil || claims.GrantID != "grant_1") {
				t.Fatalf("claims %+v", claims)
			}
			if c.want != "" {
				if claims != nil {
					t.Fatalf("claims returned with an error: %+v", claims)
				}
				if c.token != "" && len(c.token) < 4096 && strings.Contains(err.Error(), c.token) {
					t.Fatalf("error message contains the token")
				}
			}
		})
	}
}

// TestVerifyNonObjectSegments: the reference maps "header/claims not JSON
// objects" to workspace_authorization_malformed. JSON null is not an object.
func TestVerifyNonObjectSegments(t *testing.T) {
	key := newSigner(t, "k1")
	claimsJSON := mustJSON(t, baseClaims())
	cases := []struct{ name, token string }{
		{"header null", key.raw(`null`, claimsJSON)},
		{"claims null", key.raw(`{"alg":"EdDSA","typ":"JWT","kid":"k1"}`, `null`)},
		{"claims followed by trailing data", key.raw(`{"alg":"EdDSA","typ":"JWT","kid":"k1"}`, claimsJSON+` {}`)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := pemVerifier(t, key.pub, newClock(), nil)
			_, err := v.Verify(ctx, c.token)
			if got := codeOf(t, err); got != grants.CodeMalformed {
				t.Fatalf("code %q (%v), want %q", got, err, grants.CodeMalformed)
			}
		})
	}
}

// TestVerifyMissingIssuerOrAudience: a token without iss or aud is refused
// (as invalid claims or as the wrong issuer / audience).
func TestVerifyMissingIssuerOrAudience(t *testing.T) {
	key := newSigner(t, "k1")
	v := pemVerifier(t, key.pub, newClock(), nil)
	for claim, alt := range map[string]string{"iss": grants.CodeWrongIssuer, "aud": grants.CodeWrongAudience} {
		_, err := v.Verify(ctx, key.mintWith(t, func(c jwt.MapClaims) { delete(c, claim) }))
		if got := codeOf(t, err); got != grants.CodeInvalidClaims && got != alt {
			t.Errorf("no %s: code %q", claim, got)
		}
	}
}

func TestVerifiedClaims(t *testing.T) {
	key := newSigner(t, "k1")
	v := pemVerifier(t, key.pub, newClock(), nil)
	tok := key.mintWith(t, func(c jwt.MapClaims) {
		c["aud"] = []any{"other", testAud}
		c["agent_workspace_ref"] = "ref_1"
		c["nbf"] = t0.Unix() - 5
		c["dev"] = true
	})
	got, err := v.Verify(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	want := grants.AcceptedForTest(&grants.Claims{
		Issuer: testIssuer, Audience: []string{"other", testAud}, Subject: "user_123", GrantID: "grant_1",
		WorkspaceID: "workspace_123", WorkspaceSlug: "acme", AgentID: testAgentID, AgentSlug: testAgent,
		ServerID: testServer, Scopes: []string{"supervaizer/action.invoke", "job.start"}, AgentWorkspaceRef: "ref_1",
		IssuedAt: t0.Unix() - 10, ExpiresAt: t0.Unix() + 300, NotBefore: t0.Unix() - 5, JTI: "jti_1", Dev: true,
	})
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	if got.ScopeString() != "supervaizer/action.invoke job.start" || !got.HasScope("job.start") || got.HasScope("job") {
		t.Fatalf("scopes %q", got.ScopeString())
	}
}

// TestAudienceServerID: the expected audience and server_id, including "if
// the configured audience starts with supervaizer-server:, the expected
// server_id is the rest".
func TestAudienceServerID(t *testing.T) {
	key := newSigner(t, "k1")
	tok := func(aud, server string) string {
		return key.mintWith(t, func(c jwt.MapClaims) { c["aud"], c["server_id"] = aud, server })
	}
	cases := []struct {
		name           string
		audience, srv  string
		expectedServer string
		token          string
		want           string
	}{
		{"derived audience", "", "S1", "S1", tok("supervaizer-server:S1", "S1"), ""},
		{"derived audience, wrong aud", "", "S1", "S1", tok("supervaizer-server:S2", "S1"), grants.CodeWrongAudience},
		{"audience names the server", "supervaizer-server:S2", "S1", "S2", tok("supervaizer-server:S2", "S2"), ""},
		{"audience names the server, token has server_id", "supervaizer-server:S2", "S1", "S2", tok("supervaizer-server:S2", "S1"), grants.CodeWrongServer},
		{"audience names the server, no server_id configured", "supervaizer-server:S2", "", "S2", tok("supervaizer-server:S2", "S2"), ""},
		{"custom audience", "studio-agents", "S1", "S1", tok("studio-agents", "S1"), ""},
		{"custom audience, wrong server", "studio-agents", "S1", "S1", tok("studio-agents", "S2"), grants.CodeWrongServer},
		{"custom audience, derived aud refused", "studio-agents", "S1", "S1", tok("supervaizer-server:S1", "S1"), grants.CodeWrongAudience},
		{"prefix is case sensitive", "Supervaizer-Server:S2", "S1", "S1", tok("Supervaizer-Server:S2", "S1"), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := pemVerifier(t, key.pub, newClock(), func(cfg *grants.Config) { cfg.Audience, cfg.ServerID = c.audience, c.srv })
			if got := v.ExpectedServerID(); got != c.expectedServer {
				t.Fatalf("ExpectedServerID %q, want %q", got, c.expectedServer)
			}
			_, err := v.Verify(ctx, c.token)
			if got := codeOf(t, err); got != c.want {
				t.Fatalf("code %q (%v), want %q", got, err, c.want)
			}
		})
	}
}

func TestNewVerifierRefuses(t *testing.T) {
	key := newSigner(t, "k1")
	cases := []struct {
		name string
		cfg  grants.Config
	}{
		{"no issuer", grants.Config{ServerID: "S", PublicKey: key.pub}},
		{"no key", grants.Config{Issuer: testIssuer, ServerID: "S"}},
		{"both keys", grants.Config{Issuer: testIssuer, ServerID: "S", PublicKey: key.pub, JWKS: &grants.JWKSOptions{URL: "http://127.0.0.1:1/jwks"}}},
		{"no server id, no audience", grants.Config{Issuer: testIssuer, PublicKey: key.pub}},
		{"no server id, custom audience", grants.Config{Issuer: testIssuer, Audience: "custom", PublicKey: key.pub}},
		{"audience prefix with empty server", grants.Config{Issuer: testIssuer, Audience: "supervaizer-server:", PublicKey: key.pub}},
		{"short public key", grants.Config{Issuer: testIssuer, ServerID: "S", PublicKey: key.pub[:31]}},
		{"empty JWKS URL", grants.Config{Issuer: testIssuer, ServerID: "S", JWKS: &grants.JWKSOptions{}}},
		{"JWKS URL not a URL", grants.Config{Issuer: testIssuer, ServerID: "S", JWKS: &grants.JWKSOptions{URL: "not a url"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := grants.NewVerifier(c.cfg)
			if err == nil {
				v.Close()
				t.Fatal("accepted")
			}
		})
	}
}

// TestVerifiedTokenCache: the second Verify of a token is answered by the
// cache; an entry never outlives exp+leeway; failures are not cached.
func TestVerifiedTokenCache(t *testing.T) {
	key := newSigner(t, "k1")
	clk := newClock()
	obs := &observer{}
	v := pemVerifier(t, key.pub, clk, func(c *grants.Config) { c.Observe = obs.observe })
	tok := key.mintWith(t, nil) // exp = t0+300, leeway 30 s

	step := func(name string, wantCached bool, wantCode string) *grants.Claims {
		t.Helper()
		c, err := v.Verify(ctx, tok)
		if got := codeOf(t, err); got != wantCode {
			t.Fatalf("%s: code %q, want %q", name, got, wantCode)
		}
		if o := obs.last(t); o.cached != wantCached || o.code != wantCode {
			t.Fatalf("%s: observed %+v, want cached=%v code=%q", name, o, wantCached, wantCode)
		}
		return c
	}
	first := step("first", false, "")
	second := step("second", true, "")
	if !reflect.DeepEqual(first, second) {
		t.Fatalf("cached claims differ: %+v vs %+v", first, second)
	}
	clk.advance(329 * time.Second) // exp+leeway-1s
	step("just before exp+leeway", true, "")
	clk.advance(time.Second) // exactly exp+leeway: still accepted, whole seconds (the SDK's exp + leeway < now)
	step("at exp+leeway", true, "")
	clk.advance(999 * time.Millisecond) // floor(now) is still exp+leeway
	step("at exp+leeway+0.999s", true, "")
	clk.advance(time.Millisecond) // exp+leeway+1s: the entry is dead
	step("after exp+leeway", false, grants.CodeExpired)
	step("still expired, never cached", false, grants.CodeExpired)

	// Failures are not cached.
	bad := key.mintWith(t, func(c jwt.MapClaims) { c["server_id"], c["exp"] = "OTHER", t0.Unix()+3600 })
	for i := 0; i < 2; i++ {
		v.Verify(ctx, bad)
		if o := obs.last(t); o.cached || o.code != grants.CodeWrongServer {
			t.Fatalf("failure %d observed %+v", i, o)
		}
	}

	// A token that becomes valid later (iat within leeway at first) is cached
	// only once verified, with its own exp.
	clk2 := newClock()
	obs2 := &observer{}
	v2 := pemVerifier(t, key.pub, clk2, func(c *grants.Config) { c.Observe = obs2.observe; c.Leeway = new(time.Duration(0)) })
	short := key.mintWith(t, func(c jwt.MapClaims) { c["exp"] = t0.Unix() + 5 })
	for i, want := range []bool{false, true} {
		if _, err := v2.Verify(ctx, short); err != nil || obs2.last(t).cached != want {
			t.Fatalf("no-leeway verify %d: %v %+v", i, err, obs2.last(t))
		}
	}
	clk2.advance(5 * time.Second)
	if _, err := v2.Verify(ctx, short); err != nil || !obs2.last(t).cached {
		t.Fatalf("no-leeway at exp: %v %+v", err, obs2.last(t))
	}
	clk2.advance(time.Second)
	if _, err := v2.Verify(ctx, short); codeOf(t, err) != grants.CodeExpired || obs2.last(t).cached {
		t.Fatalf("no-leeway at exp+1s: %v %+v", err, obs2.last(t))
	}
}

func TestCacheDisabledAndEviction(t *testing.T) {
	key := newSigner(t, "k1")
	obs := &observer{}
	v := pemVerifier(t, key.pub, newClock(), func(c *grants.Config) { c.Observe = obs.observe; c.CacheSize = -1 })
	tok := key.mintWith(t, nil)
	for i := 0; i < 3; i++ {
		if _, err := v.Verify(ctx, tok); err != nil || obs.last(t).cached {
			t.Fatalf("disabled cache, verify %d: %v %+v", i, err, obs.last(t))
		}
	}

	obs = &observer{}
	v = pemVerifier(t, key.pub, newClock(), func(c *grants.Config) { c.Observe = obs.observe; c.CacheSize = 1 })
	a := key.mintWith(t, func(c jwt.MapClaims) { c["jti"] = "a" })
	b := key.mintWith(t, func(c jwt.MapClaims) { c["jti"] = "b" })
	for _, step := range []struct {
		tok    string
		cached bool
	}{{a, false}, {a, true}, {b, false}, {a, false}, {a, true}} {
		if _, err := v.Verify(ctx, step.tok); err != nil || obs.last(t).cached != step.cached {
			t.Fatalf("size-1 cache: %v %+v, want cached=%v", err, obs.last(t), step.cached)
		}
	}
}

// TestCacheConcurrent: concurrent verifies of one token are all correct
// (run with -race).
func TestCacheConcurrent(t *testing.T) {
	key := newSigner(t, "k1")
	v := pemVerifier(t, key.pub, newClock(), nil)
	good := key.mintWith(t, nil)
	bad := key.mintWith(t, func(c jwt.MapClaims) { c["iss"] = "x" })
	var wg sync.WaitGroup
	var failures atomic.Int64
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				if c, err := v.Verify(ctx, good); err != nil || c.GrantID != "grant_1" {
					failures.Add(1)
				}
				if _, err := v.Verify(ctx, bad); err == nil {
					failures.Add(1)
				}
			}
		}(i)
	}
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d wrong answers", n)
	}
}

// TestJWKS: the JWKS codes, against a real JWKS served on loopback.
func TestJWKS(t *testing.T) {
	k1 := newSigner(t, "k1")
	rsaJWK := map[string]any{"kty": "RSA", "kid": "k1", "n": base64.RawURLEncoding.EncodeToString(rsaKey().N.Bytes()), "e": "AQAB"}
	x25519 := map[string]any{"kty": "OKP", "crv": "X25519", "kid": "k1", "x": base64.RawURLEncoding.EncodeToString(make([]byte, 32))}
	oct := map[string]any{"kty": "oct", "kid": "k1", "k": base64.RawURLEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))}
	wrongAlg := k1.jwk()
	wrongAlg["alg"] = "RS256"
	shortX := k1.jwk()
	shortX["x"] = base64.RawURLEncoding.EncodeToString(k1.pub[:16])

	cases := []struct {
		name   string
		status int
		doc    string // raw document; keys used when empty
		keys   []map[string]any
		token  string
		want   string
		ready  bool
	}{
		{"valid", 200, "", []map[string]any{k1.jwk()}, k1.mintWith(t, nil), "", true},
		{"valid among other keys", 200, "", []map[string]any{newSigner(t, "k0").jwk(), k1.jwk(), rsaJWK2("k9")}, k1.mintWith(t, nil), "", true},
		{"no kid", 200, "", []map[string]any{k1.jwk()}, k1.mint(t, baseClaims(), map[string]any{"kid": nil}), grants.CodeMissingKID, true},
		{"empty kid", 200, "", []map[string]any{k1.jwk()}, k1.mint(t, baseClaims(), map[string]any{"kid": ""}), grants.CodeMissingKID, true},
		{"numeric kid", 200, "", []map[string]any{k1.jwk()}, k1.mint(t, baseClaims(), map[string]any{"kid": 1}), grants.CodeMissingKID, true},
		{"unsupported alg before kid", 200, "", []map[string]any{k1.jwk()}, k1.mint(t, baseClaims(), map[string]any{"kid": nil, "alg": "HS256"}), grants.CodeUnsupportedAlg, true},
		{"unknown kid", 200, "", []map[string]any{k1.jwk()}, k1.mint(t, baseClaims(), map[string]any{"kid": "nope"}), grants.CodeUnknownKID, true},
		{"empty key list", 200, "", []map[string]any{}, k1.mintWith(t, nil), grants.CodeUnknownKID, false},
		{"JWKS answers 500", 500, `{"keys":[]}`, nil, k1.mintWith(t, nil), grants.CodeJWKSUnavailable, false},
		{"JWKS answers 404", 404, `not found`, nil, k1.mintWith(t, nil), grants.CodeJWKSUnavailable, false},
		{"keys not a list", 200, `{"keys":"k1"}`, nil, k1.mintWith(t, nil), grants.CodeInvalidJWKS, false},
		{"no keys member", 200, `{}`, nil, k1.mintWith(t, nil), grants.CodeInvalidJWKS, false},
		{"document is a list", 200, `[` + mustJSON(t, k1.jwk()) + `]`, nil, k1.mintWith(t, nil), grants.CodeInvalidJWKS, false},
		{"key not an object", 200, `{"keys":[1]}`, nil, k1.mintWith(t, nil), grants.CodeInvalidJWKS, false},
		{"document not JSON", 200, `<html>`, nil, k1.mintWith(t, nil), grants.CodeInvalidJWKS, false},
		{"document over 1 MiB", 200, `{"keys":[],"pad":"` + strings.Repeat("x", grants.MaxJWKSBytes) + `"}`, nil, k1.mintWith(t, nil), grants.CodeInvalidJWKS, false},
		{"kid names an RSA key", 200, "", []map[string]any{rsaJWK}, k1.mintWith(t, nil), grants.CodeInvalidJWK, false},
		{"kid names an X25519 key", 200, "", []map[string]any{x25519}, k1.mintWith(t, nil), grants.CodeInvalidJWK, false},
		{"kid names an oct key", 200, "", []map[string]any{oct}, k1.mintWith(t, nil), grants.CodeInvalidJWK, false},
		{"JWK alg differs from EdDSA: not a usable key", 200, "", []map[string]any{wrongAlg}, k1.mintWith(t, nil), grants.CodeInvalidJWK, false},
		{"kid signed by another key", 200, "", []map[string]any{newSigner(t, "k1").jwk()}, k1.mintWith(t, nil), grants.CodeBadSignature, true},
		{"expired via JWKS", 200, "", []map[string]any{k1.jwk()}, k1.mintWith(t, func(c jwt.MapClaims) { c["exp"] = t0.Unix() - 60 }), grants.CodeExpired, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := startJWKS(t, c.keys...)
			if c.doc != "" {
				j.setDoc(c.status, []byte(c.doc))
			}
			v := jwksVerifier(t, j.url(), newClock(), nil)
			if v.Ready() != c.ready {
				t.Fatalf("Ready %v, want %v", v.Ready(), c.ready)
			}
			loaded, _, lastErr, ok := v.JWKSStatus()
			if !ok || loaded != c.ready || (lastErr == nil) != c.ready {
				t.Fatalf("JWKSStatus loaded=%v err=%v ok=%v", loaded, lastErr, ok)
			}
			_, err := v.Verify(ctx, c.token)
			if got := codeOf(t, err); got != c.want {
				t.Fatalf("code %q (%v), want %q", got, err, c.want)
			}
		})
	}
}

// rsaJWK2 is an RSA public JWK with kid.
func rsaJWK2(kid string) map[string]any {
	return map[string]any{"kty": "RSA", "kid": kid, "n": base64.RawURLEncoding.EncodeToString(rsaKey().N.Bytes()), "e": "AQAB"}
}

// TestJWKSBadKeyMaterial: per the reference, a JWK that is OKP/Ed25519 but
// whose "x" is bad is workspace_authorization_invalid_jwk for a token with
// that kid (the SDK looks the key up by kid, then checks kty, crv and x), and
// does not affect tokens naming another, good key of the same document.
func TestJWKSBadKeyMaterial(t *testing.T) {
	k1 := newSigner(t, "k1")
	bad := newSigner(t, "bad")
	for name, x := range map[string]string{
		"short x":      base64.RawURLEncoding.EncodeToString(bad.pub[:16]),
		"x not base64": "!!not-base64!!",
	} {
		t.Run(name, func(t *testing.T) {
			badJWK := bad.jwk()
			badJWK["x"] = x
			j := startJWKS(t, k1.jwk(), badJWK)
			v := jwksVerifier(t, j.url(), newClock(), nil)
			if _, err := v.Verify(ctx, bad.mintWith(t, nil)); codeOf(t, err) != grants.CodeInvalidJWK {
				t.Errorf("token naming the bad key: code %q (%v), want %q", codeOf(t, err), err, grants.CodeInvalidJWK)
			}
			if _, err := v.Verify(ctx, k1.mintWith(t, nil)); err != nil {
				t.Errorf("token naming the good key k1 refused: %v", err)
			}
		})
	}
}

// TestJWKSUnreachable: a JWKS URL nobody listens on is jwks_unavailable.
func TestJWKSUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/jwks.json"
	srv.Close()
	k1 := newSigner(t, "k1")
	v := jwksVerifier(t, url, newClock(), nil)
	if v.Ready() {
		t.Fatal("ready without keys")
	}
	if _, err := v.Verify(ctx, k1.mintWith(t, nil)); codeOf(t, err) != grants.CodeJWKSUnavailable {
		t.Fatalf("code %q (%v)", codeOf(t, err), err)
	}
}

// TestJWKSRotationAndRecovery: an unknown kid triggers one refresh, which
// finds a rotated-in key; a JWKS that recovers is used.
func TestJWKSRotationAndRecovery(t *testing.T) {
	k1, k2 := newSigner(t, "k1"), newSigner(t, "k2")
	j := startJWKS(t, k1.jwk())
	refreshes := make(chan error, 16)
	v := jwksVerifier(t, j.url(), newClock(), func(c *grants.Config) {
		c.JWKS.OnRefresh = func(err error) { refreshes <- err }
	})
	if _, err := v.Verify(ctx, k1.mintWith(t, nil)); err != nil {
		t.Fatal(err)
	}
	j.setKeys(t, k1.jwk(), k2.jwk())
	if _, err := v.Verify(ctx, k2.mintWith(t, nil)); codeOf(t, err) != grants.CodeUnknownKID || j.fetches.Load() != 1 {
		t.Fatalf("rotated key without RefreshUnknownKID: %v, %d fetches (want unknown_kid, 1)", err, j.fetches.Load())
	}
	if _, err := v.VerifyWith(ctx, k2.mintWith(t, nil), refresh); err != nil {
		t.Fatalf("rotated key: %v", err)
	}
	if n := j.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2 (start + one unknown-kid refresh)", n)
	}
	if len(refreshes) < 2 {
		t.Fatalf("OnRefresh called %d times", len(refreshes))
	}

	// Down at start, then up: the next unknown-kid refresh loads the keys.
	j2 := startJWKS(t)
	j2.setDoc(503, []byte("down"))
	v2 := jwksVerifier(t, j2.url(), newClock(), func(c *grants.Config) { c.JWKS.UnknownKIDInterval = 20 * time.Millisecond })
	if _, err := v2.VerifyWith(ctx, k1.mintWith(t, nil), refresh); codeOf(t, err) != grants.CodeJWKSUnavailable {
		t.Fatalf("down: %v", err)
	}
	j2.setKeys(t, k1.jwk())
	if _, err := v2.VerifyWith(ctx, k1.mintWith(t, nil), refresh); err != nil || !v2.Ready() {
		t.Fatalf("recovered: %v ready=%v", err, v2.Ready())
	}
	// A bad document after a good one keeps the good keys; an unknown kid
	// is answered from the bad document, as the SDK 1.8.0 server does
	// (test/sdk_reference_test.go): invalid_jwks.
	j2.setDoc(200, []byte(`{"keys":"broken"}`))
	if _, err := v2.VerifyWith(ctx, k2.mint(t, baseClaims(), nil), refresh); codeOf(t, err) != grants.CodeInvalidJWKS {
		t.Fatalf("unknown kid after a bad document: %v", err)
	}
	if _, err := v2.VerifyWith(ctx, k1.mintWith(t, func(c jwt.MapClaims) { c["jti"] = "again" }), refresh); err != nil {
		t.Fatalf("good key lost after a bad document: %v", err)
	}
}

// TestUnknownKIDRateLimited: 200 tokens with unknown kids (concurrent and
// sequential) cause a bounded number of JWKS fetches.
func TestUnknownKIDRateLimited(t *testing.T) {
	k1 := newSigner(t, "k1")
	j := startJWKS(t, k1.jwk())
	v := jwksVerifier(t, j.url(), newClock(), nil)
	start := j.fetches.Load()

	concurrent := make([]string, 100)
	sequential := make([]string, 100)
	for i := range concurrent {
		concurrent[i] = k1.mint(t, baseClaims(), map[string]any{"kid": fmt.Sprintf("unknown-%d", i)})
		sequential[i] = k1.mint(t, baseClaims(), map[string]any{"kid": fmt.Sprintf("seq-%d", i)})
	}
	var wg sync.WaitGroup
	codes := make(chan string, 200)
	for _, tok := range concurrent {
		wg.Add(1)
		go func(tok string) {
			defer wg.Done()
			_, err := v.VerifyWith(ctx, tok, refresh)
			var e *refusal.Refusal
			if errors.As(err, &e) {
				codes <- e.Code
			} else {
				codes <- fmt.Sprint(err)
			}
		}(tok)
	}
	wg.Wait()
	for _, tok := range sequential {
		_, err := v.VerifyWith(ctx, tok, refresh)
		codes <- codeOf(t, err)
	}
	close(codes)
	for c := range codes {
		if c != grants.CodeUnknownKID {
			t.Fatalf("code %q, want unknown_kid", c)
		}
	}
	if n := j.fetches.Load() - start; n > 2 {
		t.Fatalf("%d JWKS fetches for 200 unknown-kid tokens", n)
	}
	// The known key still works.
	if _, err := v.Verify(ctx, k1.mintWith(t, nil)); err != nil {
		t.Fatal(err)
	}
}

// TestHeaderKeyURLsNeverFetched: jku, x5u and jwk header members are never
// used: the URLs they name get no request, and a key they carry is not
// trusted.
func TestHeaderKeyURLsNeverFetched(t *testing.T) {
	k1 := newSigner(t, "k1")
	attacker := newSigner(t, "k1")
	var hits atomic.Int64
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(mustJSON(t, map[string]any{"keys": []any{attacker.jwk()}})))
	}))
	defer evil.Close()
	header := func(kid string) map[string]any {
		return map[string]any{
			"kid": kid,
			"jku": evil.URL + "/jwks.json",
			"x5u": evil.URL + "/cert.pem",
			"jwk": attacker.jwk(),
			"x5c": []any{base64.StdEncoding.EncodeToString([]byte("not a cert"))},
		}
	}
	j := startJWKS(t, k1.jwk())
	verifiers := map[string]*grants.Verifier{
		"pem":  pemVerifier(t, k1.pub, newClock(), nil),
		"jwks": jwksVerifier(t, j.url(), newClock(), nil),
	}
	for name, v := range verifiers {
		if _, err := v.Verify(ctx, attacker.mint(t, baseClaims(), header("k1"))); codeOf(t, err) != grants.CodeBadSignature {
			t.Errorf("%s, attacker key, known kid: %v", name, err)
		}
		want := grants.CodeUnknownKID
		if name == "pem" {
			want = grants.CodeBadSignature
		}
		if _, err := v.Verify(ctx, attacker.mint(t, baseClaims(), header("attacker"))); codeOf(t, err) != want {
			t.Errorf("%s, attacker key, attacker kid: %v", name, err)
		}
		v.Verify(ctx, k1.mint(t, baseClaims(), header("k1")))
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("header key URL fetched %d times", n)
	}
}

func TestTokenFromHeader(t *testing.T) {
	cases := []struct {
		values []string
		want   string
	}{
		{nil, ""},
		{[]string{}, ""},
		{[]string{""}, ""},
		{[]string{"   "}, ""},
		{[]string{"Bearer abc.def.ghi"}, "abc.def.ghi"},
		{[]string{"bearer abc.def.ghi"}, "abc.def.ghi"},
		{[]string{"BEARER abc.def.ghi"}, "abc.def.ghi"},
		{[]string{"Bearer   abc.def.ghi  "}, "abc.def.ghi"},
		{[]string{"  Bearer abc.def.ghi"}, "abc.def.ghi"},
		{[]string{"abc.def.ghi"}, "abc.def.ghi"},
		{[]string{"  abc.def.ghi\t"}, "abc.def.ghi"},
		{[]string{"Bearer a", "Bearer b"}, ""},
		{[]string{"a", "a"}, ""},
		{[]string{"", "Bearer a"}, ""},
		{[]string{"Bearerabc"}, "Bearerabc"},
	}
	for _, c := range cases {
		if got := grants.TokenFromHeader(c.values); got != c.want {
			t.Errorf("TokenFromHeader(%q) = %q, want %q", c.values, got, c.want)
		}
	}
}
