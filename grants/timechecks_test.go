// The SDK's time checks, in whole seconds: exp, iat, nbf with the leeway, and the
// lifetime bound (Config.MaxTokenLifetime).

package grants_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/supervaize/supervaizer-sidecar/grants"
	"github.com/supervaize/supervaizer-sidecar/refusal"
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

// TestTimeClaimNumbers: exp, iat and nbf as JSON numbers of every spelling,
// read as the SDK's model reads an int (docs/sdk-wire.md, "Validation error
// lists"): an integral float within int64 is its value (1e17 too), a
// fractional one int_from_float, an infinite one finite_number, a float
// outside int64 int_parsing_size; an integer literal outside int64 is
// int_parsing_size too, where Python would take it (README, "Where the
// sidecar differs from the SDK"). Each refusal's text is the pydantic entry.
func TestTimeClaimNumbers(t *testing.T) {
	key := newSigner(t, "k1")
	claims := mustJSON(t, baseClaims())
	cases := []struct {
		claim, number string
		want          string // the invalid_claims entry, "" for accepted
	}{
		{"exp", "1.0e11", ""},
		{"exp", "1e17", ""},
		{"exp", "9223372036854775807", ""},
		{"exp", "9223372036854775808", "{'type': 'int_parsing_size', 'loc': ('exp',), 'msg': 'Unable to parse input string as an integer, exceeded maximum size'}"},
		{"iat", "-9223372036854775809", "{'type': 'int_parsing_size', 'loc': ('iat',), 'msg': 'Unable to parse input string as an integer, exceeded maximum size'}"},
		{"nbf", "123456789012345678901234567890", "{'type': 'int_parsing_size', 'loc': ('nbf',), 'msg': 'Unable to parse input string as an integer, exceeded maximum size'}"},
		{"exp", "1e19", "{'type': 'int_parsing_size', 'loc': ('exp',), 'msg': 'Unable to parse input string as an integer, exceeded maximum size'}"},
		{"exp", "1e400", "{'type': 'finite_number', 'loc': ('exp',), 'msg': 'Input should be a finite number'}"},
		{"iat", "-1e400", "{'type': 'finite_number', 'loc': ('iat',), 'msg': 'Input should be a finite number'}"},
		{"exp", "1800000300.5", "{'type': 'int_from_float', 'loc': ('exp',), 'msg': 'Input should be a valid integer, got a number with a fractional part'}"},
	}
	for _, c := range cases {
		t.Run(c.claim+" "+c.number, func(t *testing.T) {
			v := pemVerifier(t, key.pub, newClock(), nil)
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte(claims), &m); err != nil {
				t.Fatal(err)
			}
			m[c.claim] = json.RawMessage(c.number)
			b, _ := json.Marshal(m)
			_, err := v.Verify(ctx, key.raw(`{"alg":"EdDSA","kid":"k1","typ":"JWT"}`, string(b)))
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ge *refusal.Refusal
			if !errors.As(err, &ge) || ge.Code != grants.CodeInvalidClaims || ge.Message != grants.PrefixInvalidClaims+"["+c.want+"]" {
				t.Fatalf("got %v, want invalid_claims [%s]", err, c.want)
			}
		})
	}
}

// TestEmptyAudienceIsWrongAudience: an aud of "" or [] is wrong_audience,
// as the SDK answers (its model takes both; no member is the expected one).
func TestEmptyAudienceIsWrongAudience(t *testing.T) {
	key := newSigner(t, "k1")
	for _, aud := range []any{"", []any{}, []any{""}} {
		v := pemVerifier(t, key.pub, newClock(), nil)
		_, err := v.Verify(ctx, key.mintWith(t, func(m jwt.MapClaims) { m["aud"] = aud }))
		if codeOf(t, err) != grants.CodeWrongAudience || err.(*refusal.Refusal).Message != "Workspace authorization token audience does not match this server" {
			t.Fatalf("aud %#v: %v", aud, err)
		}
	}
}
