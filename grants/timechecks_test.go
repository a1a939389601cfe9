// The SDK's time checks, in whole seconds: exp, iat, nbf with the leeway, and the
// lifetime bound (Config.MaxTokenLifetime).

package grants_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/supervaize/supervaizer-sidecar/grants"
)

// TestWholeSecondTimeChecks: the time checks are the SDK's, in whole
// seconds (workspace_authorization.py, _validate_claims_against_request):
// now = floor(Unix time); expired only when exp + leeway < now; not yet
// valid when iat - leeway > now, and nbf the same way. The clock is set at
// and around each boundary, with sub-second parts.
func TestWholeSecondTimeChecks(t *testing.T) {
	key := newSigner(t, "k1")
	T := t0.Unix()
	ms := time.Millisecond
	cases := []struct {
		name   string
		claim  string // exp, iat or nbf, set to value
		value  int64
		leeway *time.Duration // nil: the default 30 s
		at     time.Duration  // the clock: t0 + at
		want   string
	}{
		{"exp + leeway == now", "exp", T - 30, nil, 0, ""},
		{"exp + leeway == now, 999 ms into the second", "exp", T - 30, nil, 999 * ms, ""},
		{"exp + leeway == now - 1", "exp", T - 31, nil, 0, grants.CodeExpired},
		{"exp + leeway == now - 1, clock 1 ms later", "exp", T - 30, nil, 1000 * ms, grants.CodeExpired},
		{"no leeway: exp == now", "exp", T, new(time.Duration(0)), 500 * ms, ""},
		{"no leeway: exp == now - 1", "exp", T - 1, new(time.Duration(0)), 0, grants.CodeExpired},
		{"iat - leeway == now", "iat", T + 30, nil, 0, ""},
		{"iat - leeway == now + 1", "iat", T + 31, nil, 0, grants.CodeNotYetValid},
		{"iat - leeway == now + 1, 999 ms into the second", "iat", T + 31, nil, 999 * ms, grants.CodeNotYetValid},
		{"iat - leeway == now + 1, next second", "iat", T + 31, nil, time.Second, ""},
		{"no leeway: iat == now", "iat", T, new(time.Duration(0)), 0, ""},
		{"no leeway: iat == now + 1", "iat", T + 1, new(time.Duration(0)), 999 * ms, grants.CodeNotYetValid},
		{"nbf - leeway == now", "nbf", T + 30, nil, 0, ""},
		{"nbf - leeway == now + 1", "nbf", T + 31, nil, 0, grants.CodeNotYetValid},
		{"nbf - leeway == now + 1, 999 ms into the second", "nbf", T + 31, nil, 999 * ms, grants.CodeNotYetValid},
		// Sub-second leeway: the fraction is dropped (the SDK's leeway is an int).
		{"leeway 1.9 s acts as 1 s: exp == now - 1", "exp", T - 1, new(1900 * ms), 0, ""},
		{"leeway 1.9 s acts as 1 s: exp == now - 2", "exp", T - 2, new(1900 * ms), 0, grants.CodeExpired},
		{"leeway 500 ms acts as 0: exp == now - 1", "exp", T - 1, new(500 * ms), 0, grants.CodeExpired},
		{"leeway 500 ms acts as 0: iat == now + 1", "iat", T + 1, new(500 * ms), 0, grants.CodeNotYetValid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newClock()
			clk.advance(c.at)
			v := pemVerifier(t, key.pub, clk, func(cfg *grants.Config) { cfg.Leeway = c.leeway })
			tok := key.mintWith(t, func(m jwt.MapClaims) { m[c.claim] = c.value })
			if _, err := v.Verify(ctx, tok); codeOf(t, err) != c.want {
				t.Fatalf("code %q (%v), want %q", codeOf(t, err), err, c.want)
			}
		})
	}
}

// TestMaxTokenLifetime: with MaxTokenLifetime, exp - iat above it (or no
// iat) is invalid_claims; without it any lifetime passes.
func TestMaxTokenLifetime(t *testing.T) {
	key := newSigner(t, "k1")
	T := t0.Unix()
	cases := []struct {
		name string
		max  time.Duration
		edit func(jwt.MapClaims)
		want string
	}{
		{"off: a year-long token", 0, func(m jwt.MapClaims) { m["iat"], m["exp"] = T-10, T+365*86400 }, ""},
		{"lifetime == max", 15 * time.Minute, func(m jwt.MapClaims) { m["iat"], m["exp"] = T-10, T-10+900 }, ""},
		{"lifetime == max + 1 s", 15 * time.Minute, func(m jwt.MapClaims) { m["iat"], m["exp"] = T-10, T-10+901 }, grants.CodeInvalidClaims},
		{"sub-second max is floored", 900*time.Second + 500*time.Millisecond, func(m jwt.MapClaims) { m["iat"], m["exp"] = T-10, T-10+901 }, grants.CodeInvalidClaims},
		{"no iat", 15 * time.Minute, func(m jwt.MapClaims) { delete(m, "iat") }, grants.CodeInvalidClaims},
		{"exp - iat overflows", 15 * time.Minute, func(m jwt.MapClaims) {
			m["iat"], m["exp"] = json.Number("-9000000000000000000"), json.Number("9000000000000000000")
		}, grants.CodeInvalidClaims},
		{"expired wins", 15 * time.Minute, func(m jwt.MapClaims) { m["iat"], m["exp"] = T-7200, T-3600 }, grants.CodeExpired},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := pemVerifier(t, key.pub, newClock(), func(cfg *grants.Config) { cfg.MaxTokenLifetime = c.max })
			if _, err := v.Verify(ctx, key.mintWith(t, c.edit)); codeOf(t, err) != c.want {
				t.Fatalf("code %q (%v), want %q", codeOf(t, err), err, c.want)
			}
		})
	}
}
