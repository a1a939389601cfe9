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
