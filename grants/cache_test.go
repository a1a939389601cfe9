// The verified-token cache at the edge of a token's validity.

package grants_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/supervaize/supervaizer-sidecar/grants"
)

// TestCacheAtTheBoundary: a verified token is answered by the cache through
// the second exp + leeway (its last valid second) and not one second
// longer; ValidUntil is the first refused instant.
func TestCacheAtTheBoundary(t *testing.T) {
	key := newSigner(t, "k1")
	clk := newClock()
	obs := &observer{}
	v := pemVerifier(t, key.pub, clk, func(c *grants.Config) { c.Observe = obs.observe; c.Leeway = new(10 * time.Second) })
	exp := t0.Unix() + 60
	tok := key.mintWith(t, func(m jwt.MapClaims) { m["exp"] = exp })
	claims, err := v.Verify(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := v.ValidUntil(claims), time.Unix(exp+10+1, 0); !got.Equal(want) {
		t.Fatalf("ValidUntil %v, want %v", got, want)
	}
	clk.advance(70*time.Second + 999*time.Millisecond) // floor(now) == exp + leeway
	if _, err := v.Verify(ctx, tok); err != nil || !obs.last(t).cached {
		t.Fatalf("at exp+leeway: %v, %+v (want a cache hit)", err, obs.last(t))
	}
	clk.advance(time.Millisecond) // exp + leeway + 1 s == ValidUntil
	if _, err := v.Verify(ctx, tok); codeOf(t, err) != grants.CodeExpired || obs.last(t).cached {
		t.Fatalf("one second later: %v, %+v (want expired, not cached)", err, obs.last(t))
	}
}

// TestVerifyUnobserved: a verification with Unobserved answers as any
// other (the cache, the checks at the time of the call) but is not
// reported to Observe (the gate checks a token twice per /a2a call, once
// before the body to charge it to its workspace: gate/body.go, bodyOwner).
func TestVerifyUnobserved(t *testing.T) {
	key := newSigner(t, "k1")
	clk := newClock()
	obs := &observer{}
	v := pemVerifier(t, key.pub, clk, func(c *grants.Config) { c.Observe = obs.observe })
	tok := key.mintWith(t, nil) // exp = t0+300, leeway 30 s
	quiet := grants.VerifyOptions{Unobserved: true}
	if _, err := v.VerifyWith(ctx, tok, grants.VerifyOptions{}); err != nil {
		t.Fatal(err)
	}
	if c, err := v.VerifyWith(ctx, tok, quiet); err != nil || c == nil {
		t.Fatalf("unobserved check of a verified token: %v", err)
	}
	clk.advance(331 * time.Second) // past exp+leeway
	if _, err := v.VerifyWith(ctx, tok, quiet); codeOf(t, err) != grants.CodeExpired {
		t.Fatalf("unobserved check past exp+leeway: %v, want expired", err)
	}
	if n := obs.count(); n != 1 {
		t.Fatalf("Observe called %d times, want 1 (the observed check only)", n)
	}
}
