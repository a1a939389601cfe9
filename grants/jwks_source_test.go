// What a JWKS fetch installs, how a failed one is classified, and when the
// keys go stale (keys.go).

package grants_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/supervaize/supervaizer-sidecar/grants"
)

// TestJWKSKeylessDocumentKeepsKeys: a fetched document with no usable
// Ed25519 key (empty keys, only other key types, a bad x) never replaces
// the last good keys; the fetch is reported as a failure whose reason is
// no_usable_key, and cached tokens stay cached (same key set).
func TestJWKSKeylessDocumentKeepsKeys(t *testing.T) {
	k1 := newSigner(t, "k1")
	badX := k1.jwk()
	badX["x"] = "!!"
	with := func(field string, v any) map[string]any { // k1's key, marked for another purpose
		k := k1.jwk()
		k[field] = v
		return k
	}
	docs := map[string][]map[string]any{
		"empty keys":             {},
		"only RSA":               {rsaJWK2("k1")},
		"bad x":                  {badX},
		"RSA and bad x":          {rsaJWK2("k9"), badX},
		"alg RS256":              {with("alg", "RS256")},
		"use enc":                {with("use", "enc")},
		"key_ops without verify": {with("key_ops", []any{"sign"})},
	}
	for name, keys := range docs {
		t.Run(name, func(t *testing.T) {
			j := startJWKS(t, k1.jwk())
			var mu sync.Mutex
			var reasons []string
			obs := &observer{}
			v := jwksVerifier(t, j.url(), newClock(), func(c *grants.Config) {
				c.Observe = obs.observe
				c.JWKS.OnRefresh = func(err error) {
					mu.Lock()
					reasons = append(reasons, grants.JWKSFetchErrorReason(err))
					mu.Unlock()
				}
			})
			tok := k1.mintWith(t, nil)
			if _, err := v.Verify(ctx, tok); err != nil {
				t.Fatal(err)
			}
			j.setKeys(t, keys...)
			ok, err := v.RefreshJWKS(ctx)
			if !ok || grants.JWKSFetchErrorReason(err) != "no_usable_key" {
				t.Fatalf("RefreshJWKS: %v %v, want the no_usable_key error", ok, err)
			}
			if _, err := v.Verify(ctx, tok); err != nil || !obs.last(t).cached {
				t.Fatalf("cached token after a keyless document: %v %+v", err, obs.last(t))
			}
			if _, err := v.Verify(ctx, k1.mintWith(t, func(m jwt.MapClaims) { m["jti"] = "fresh" })); err != nil {
				t.Fatalf("fresh token after a keyless document: %v", err)
			}
			if !v.Ready() {
				t.Fatal("not ready after a keyless document")
			}
			mu.Lock()
			defer mu.Unlock()
			if len(reasons) != 2 || reasons[0] != "" || reasons[1] != "no_usable_key" {
				t.Fatalf("OnRefresh reasons %q", reasons)
			}
		})
	}
}

// TestJWKSFetchErrorReason: each failed fetch is classified for the metric.
func TestJWKSFetchErrorReason(t *testing.T) {
	k1 := newSigner(t, "k1")
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL + "/jwks.json"
	dead.Close()
	j := startJWKS(t, k1.jwk())
	for _, c := range []struct {
		status int
		doc    string
		want   string
	}{
		{200, `{"keys":[]}`, "no_usable_key"},
		{200, `{"keys":"x"}`, "invalid_document"},
		{200, `<html>`, "invalid_document"},
		{503, `down`, "http_status"},
	} {
		j.setDoc(c.status, []byte(c.doc))
		v := jwksVerifier(t, j.url(), newClock(), nil)
		_, _, lastErr, _ := v.JWKSStatus()
		if got := grants.JWKSFetchErrorReason(lastErr); got != c.want {
			t.Errorf("%d %s: reason %q (%v), want %q", c.status, c.doc, got, lastErr, c.want)
		}
	}
	v := jwksVerifier(t, deadURL, newClock(), nil)
	if _, _, lastErr, _ := v.JWKSStatus(); grants.JWKSFetchErrorReason(lastErr) != "unreachable" {
		t.Errorf("dead endpoint: %v", lastErr)
	}
	if grants.JWKSFetchErrorReason(nil) != "" {
		t.Error("nil error has a reason")
	}
}

// TestJWKSMaxStale: past MaxStale since the last good fetch, the keys stop
// verifying (cached tokens too: jwks_unavailable) and Ready is false; the
// next good fetch restores both. Without MaxStale keys never go stale.
func TestJWKSMaxStale(t *testing.T) {
	k1 := newSigner(t, "k1")
	j := startJWKS(t, k1.jwk())
	clk := newClock()
	v := jwksVerifier(t, j.url(), clk, func(c *grants.Config) { c.JWKS.MaxStale, c.JWKS.UnknownKIDInterval = time.Minute, time.Millisecond })
	forever := jwksVerifier(t, j.url(), clk, nil)
	tok := k1.mintWith(t, func(m jwt.MapClaims) { m["exp"] = t0.Unix() + 3600 })
	for _, x := range []*grants.Verifier{v, forever} {
		if _, err := x.Verify(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	j.setDoc(503, []byte("down"))
	clk.advance(time.Minute) // exactly MaxStale: still usable
	if _, err := v.Verify(ctx, tok); err != nil || !v.Ready() || v.KeysStale() {
		t.Fatalf("at MaxStale: %v ready=%v", err, v.Ready())
	}
	clk.advance(time.Second)
	if v.Ready() || !v.KeysStale() {
		t.Fatal("ready with stale keys")
	}
	for _, name := range []string{"cached", "cached, with refresh"} {
		o := grants.VerifyOptions{RefreshUnknownKID: name != "cached"}
		if _, err := v.VerifyWith(ctx, tok, o); codeOf(t, err) != grants.CodeJWKSUnavailable {
			t.Fatalf("%s token with stale keys: %v", name, err)
		}
	}
	if _, err := forever.Verify(ctx, tok); err != nil || !forever.Ready() {
		t.Fatalf("no MaxStale: %v", err)
	}
	// A stale source recovers at the next good fetch, here one that a call
	// allowed to refresh triggers.
	j.setKeys(t, k1.jwk())
	if _, err := v.VerifyWith(ctx, tok, refresh); err != nil || !v.Ready() {
		t.Fatalf("after a good fetch: %v ready=%v", err, v.Ready())
	}
}

// TestJWKSRedirectNotFollowed: a JWKS endpoint that answers a redirect to
// another host gets a failed fetch ("http_status"), the Verifier's and
// FetchJWKS's alike (a caller's client included), and the other host is
// never asked: the keys come from the configured URL only.
func TestJWKSRedirectNotFollowed(t *testing.T) {
	k1 := newSigner(t, "k1")
	elsewhere := startJWKS(t, k1.jwk()) // a good document, on another server
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.url(), http.StatusFound)
	}))
	t.Cleanup(redirecting.Close)

	v := jwksVerifier(t, redirecting.URL+"/jwks.json", newClock(), nil)
	if _, _, lastErr, _ := v.JWKSStatus(); grants.JWKSFetchErrorReason(lastErr) != "http_status" {
		t.Errorf("Verifier fetch: %v, want an http_status failure", lastErr)
	}
	if v.Ready() {
		t.Error("ready with keys from a redirect")
	}
	if _, err := v.Verify(ctx, k1.mintWith(t, nil)); codeOf(t, err) != grants.CodeJWKSUnavailable {
		t.Errorf("Verify: %v, want jwks_unavailable", err)
	}
	_, err := grants.FetchJWKS(ctx, &http.Client{Timeout: 2 * time.Second}, redirecting.URL+"/jwks.json")
	if grants.JWKSFetchErrorReason(err) != "http_status" {
		t.Errorf("FetchJWKS: %v, want an http_status failure", err)
	}
	if n := elsewhere.fetches.Load(); n != 0 {
		t.Fatalf("the redirect target was fetched %d times, want 0", n)
	}
}

// TestJWKSOptionsValidate: max_stale needs a URL and must be longer than
// the refresh period in effect (the default when unset); each problem
// names the settings.
func TestJWKSOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		o    grants.JWKSOptions
		want string
	}{
		{grants.JWKSOptions{}, ""},
		{grants.JWKSOptions{URL: "https://s.test/jwks"}, ""},
		{grants.JWKSOptions{MaxStale: time.Hour}, "jwks_max_stale needs jwks_url (a public_key never goes stale)"},
		{grants.JWKSOptions{URL: "https://s.test/jwks", MaxStale: grants.DefaultJWKSRefresh},
			"jwks_max_stale (5m0s) must be longer than jwks_refresh (5m0s)"},
		{grants.JWKSOptions{URL: "https://s.test/jwks", MaxStale: grants.DefaultJWKSRefresh + time.Second}, ""},
		{grants.JWKSOptions{URL: "https://s.test/jwks", MaxStale: time.Second, RefreshInterval: time.Second},
			"jwks_max_stale (1s) must be longer than jwks_refresh (1s)"},
		{grants.JWKSOptions{URL: "https://s.test/jwks", MaxStale: 2 * time.Second, RefreshInterval: time.Second}, ""},
	} {
		err := c.o.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v, want nil", c.o, err)
		case c.want != "" && (err == nil || err.Error() != c.want):
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
}
