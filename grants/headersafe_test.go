package grants_test

import (
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/net/http/httpguts"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

// TestHeaderSafe: a verified token's claims are HeaderSafe unless a string
// claim (any of them, carried or not) holds a control character or a
// leading or trailing space or tab; claims built by hand are not.
func TestHeaderSafe(t *testing.T) {
	key := newSigner(t, "k1")
	v := pemVerifier(t, key.pub, newClock(), nil)
	for _, tc := range []struct {
		claim string
		value any
		safe  bool
	}{
		{"", nil, true},
		{"jti", "a\tb", true},
		{"workspace_slug", "Zürich", true},
		{"jti", "tok\n1", false},
		{"sub", " user", false},
		{"agent_workspace_ref", "ref\x7f", false},
		{"scopes", []any{"supervaizer/action.invoke", "job.start", "x\x01"}, false},
		{"scopes", []any{"supervaizer/action.invoke", "job.start", "admin job.cancel"}, false},
		{"scopes", []any{"supervaizer/action.invoke", "", "job.start"}, false},
		{"sub", "a b", true},
		{"aud", []any{testAud, "other\r"}, false},
	} {
		tok := key.mintWith(t, func(c jwt.MapClaims) {
			if tc.claim != "" {
				c[tc.claim] = tc.value
			}
		})
		c, err := v.Verify(ctx, tok)
		if err != nil {
			t.Fatalf("%s=%q: %v", tc.claim, tc.value, err)
		}
		if c.HeaderSafe() != tc.safe {
			t.Errorf("%s=%q: HeaderSafe %v, want %v", tc.claim, tc.value, c.HeaderSafe(), tc.safe)
		}
	}
}

// TestHeaderCarriesIsHTTPGuts: HeaderCarries takes exactly what Go's
// transport sends (httpguts.ValidHeaderFieldValue) with no leading or
// trailing space or tab, for every byte alone, first, inside and last.
func TestHeaderCarriesIsHTTPGuts(t *testing.T) {
	for b := range 256 {
		for _, v := range []string{string([]byte{byte(b)}), string([]byte{byte(b)}) + "x", "x" + string([]byte{byte(b)}) + "y", "x" + string([]byte{byte(b)})} {
			want := httpguts.ValidHeaderFieldValue(v) && strings.Trim(v, " \t") == v
			if got := grants.HeaderCarries(v); got != want {
				t.Fatalf("HeaderCarries(%q) = %v, want %v", v, got, want)
			}
		}
	}
}
