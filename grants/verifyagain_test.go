// VerifyAgain: a token checked a second time in one request answers as
// VerifyWith would.

package grants_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

// TestVerifyAgainAnswersAsVerifyWith: while the cache holds the token,
// VerifyAgain gives VerifyOnce's claims and is observed as a cache answer
// (or not at all, Unobserved); past exp + leeway it refuses as VerifyWith
// does; for another token, a refused one, another verifier's, or with the
// cache off, it is VerifyWith.
func TestVerifyAgainAnswersAsVerifyWith(t *testing.T) {
	key := newSigner(t, "k1")
	clk := newClock()
	obs := &observer{}
	v := pemVerifier(t, key.pub, clk, func(c *grants.Config) { c.Observe = obs.observe })
	tok := key.mintWith(t, nil) // exp = t0+300, leeway 30 s
	first, err := v.VerifyOnce(ctx, tok, grants.VerifyOptions{})
	if err != nil || first.Claims == nil {
		t.Fatalf("VerifyOnce: %v", err)
	}
	if c, err := v.VerifyAgain(ctx, tok, first, grants.VerifyOptions{}); err != nil || c != first.Claims || !obs.last(t).cached {
		t.Fatalf("again: %v, same claims %v, %+v (want a cache answer)", err, c == first.Claims, obs.last(t))
	}
	n := obs.count()
	if c, err := v.VerifyAgain(ctx, tok, first, grants.VerifyOptions{Unobserved: true}); err != nil || c != first.Claims || obs.count() != n {
		t.Fatalf("again, unobserved: %v, %d observations (want %d)", err, obs.count(), n)
	}

	other := key.mintWith(t, func(m jwt.MapClaims) { m["jti"] = "jti_other" })
	want, _ := v.Verify(ctx, other)
	if c, err := v.VerifyAgain(ctx, other, first, grants.VerifyOptions{}); err != nil || c.JTI != want.JTI {
		t.Fatalf("another token: %v %+v", err, c)
	}
	bad := newSigner(t, "k1").mintWith(t, nil)
	if _, err := v.VerifyAgain(ctx, bad, first, grants.VerifyOptions{}); codeOf(t, err) != grants.CodeBadSignature {
		t.Fatalf("another token, forged: %v", err)
	}
	refused, err := v.VerifyOnce(ctx, bad, grants.VerifyOptions{})
	if codeOf(t, err) != grants.CodeBadSignature || refused.Claims != nil {
		t.Fatalf("VerifyOnce of a forged token: %v %+v", err, refused.Claims)
	}
	if _, err := v.VerifyAgain(ctx, bad, refused, grants.VerifyOptions{}); codeOf(t, err) != grants.CodeBadSignature {
		t.Fatalf("again after a refusal: %v", err)
	}
	if _, err := v.VerifyAgain(ctx, tok, grants.Verified{}, grants.VerifyOptions{}); err != nil {
		t.Fatalf("no earlier verification: %v", err)
	}

	strict := pemVerifier(t, key.pub, clk, func(c *grants.Config) { c.Issuer = "https://other.example" })
	if _, err := strict.VerifyAgain(ctx, tok, first, grants.VerifyOptions{}); codeOf(t, err) != grants.CodeWrongIssuer {
		t.Fatalf("another verifier's verification: %v, want wrong_issuer", err)
	}
	uncachedObs := &observer{}
	uncached := pemVerifier(t, key.pub, clk, func(c *grants.Config) { c.CacheSize = -1; c.Observe = uncachedObs.observe })
	prev, err := uncached.VerifyOnce(ctx, tok, grants.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := uncached.VerifyAgain(ctx, tok, prev, grants.VerifyOptions{}); err != nil || c == prev.Claims || uncachedObs.last(t).cached {
		t.Fatalf("cache off: %v, same claims %v, %+v (want verified again)", err, c == prev.Claims, uncachedObs.last(t))
	}

	clk.advance(331 * time.Second) // past exp + leeway
	if _, err := v.VerifyAgain(ctx, tok, first, grants.VerifyOptions{}); codeOf(t, err) != grants.CodeExpired {
		t.Fatalf("again past exp+leeway: %v, want expired", err)
	}
}

// TestVerifyAgainAfterRotation: once a refresh installs another key set,
// VerifyAgain verifies again (here: the kid is gone, unknown_kid).
func TestVerifyAgainAfterRotation(t *testing.T) {
	k1, k2 := newSigner(t, "k1"), newSigner(t, "k2")
	j := startJWKS(t, k1.jwk())
	v := jwksVerifier(t, j.url(), newClock(), nil)
	tok := k1.mintWith(t, nil)
	first, err := v.VerifyOnce(ctx, tok, grants.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := v.VerifyAgain(ctx, tok, first, grants.VerifyOptions{}); err != nil || c != first.Claims {
		t.Fatalf("before the rotation: %v", err)
	}
	j.setKeys(t, k2.jwk())
	if ok, err := v.RefreshJWKS(ctx); !ok || err != nil {
		t.Fatalf("RefreshJWKS: %v %v", ok, err)
	}
	if _, err := v.VerifyAgain(ctx, tok, first, grants.VerifyOptions{}); codeOf(t, err) != grants.CodeUnknownKID {
		t.Fatalf("after the rotation: %v, want unknown_kid", err)
	}
}
