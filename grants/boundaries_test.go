package grants_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
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

// TestVerifyWithoutRefreshNeverFetches: without RefreshUnknownKID, an
// unknown kid, or a JWKS never loaded, causes no fetch.
func TestVerifyWithoutRefreshNeverFetches(t *testing.T) {
	k1, k2 := newSigner(t, "k1"), newSigner(t, "k2")
	j := startJWKS(t, k1.jwk())
	v := jwksVerifier(t, j.url(), newClock(), func(c *grants.Config) { c.JWKS.UnknownKIDInterval = time.Millisecond })
	j.setKeys(t, k1.jwk(), k2.jwk())
	for i := 0; i < 20; i++ {
		if _, err := v.Verify(ctx, k2.mintWith(t, nil)); codeOf(t, err) != grants.CodeUnknownKID {
			t.Fatalf("unknown kid: %v", err)
		}
	}
	if n := j.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches, want 1 (the first)", n)
	}

	down := startJWKS(t)
	down.setDoc(503, []byte("down"))
	v2 := jwksVerifier(t, down.url(), newClock(), func(c *grants.Config) { c.JWKS.UnknownKIDInterval = time.Millisecond })
	down.setKeys(t, k1.jwk())
	if _, err := v2.Verify(ctx, k1.mintWith(t, nil)); codeOf(t, err) != grants.CodeJWKSUnavailable || down.fetches.Load() != 1 {
		t.Fatalf("never loaded: %v, %d fetches", err, down.fetches.Load())
	}
	if ok, err := v2.RefreshJWKS(ctx); !ok || err != nil {
		t.Fatalf("RefreshJWKS: %v %v", ok, err)
	}
	if _, err := v2.Verify(ctx, k1.mintWith(t, nil)); err != nil || !v2.Ready() {
		t.Fatalf("after RefreshJWKS: %v", err)
	}
	if ok, err := pemVerifier(t, k1.pub, newClock(), nil).RefreshJWKS(ctx); ok || err != nil {
		t.Fatalf("PEM RefreshJWKS: %v %v", ok, err)
	}
}

// TestUnknownKIDRefreshDetached: a caller whose context ends while its
// unknown-kid refresh is in flight returns, and the fetch goes on (its
// request is not cancelled) and installs the new key.
func TestUnknownKIDRefreshDetached(t *testing.T) {
	k1, k2 := newSigner(t, "k1"), newSigner(t, "k2")
	var hold atomic.Bool
	release := make(chan struct{})
	arrived := make(chan struct{}, 4)
	var cancelled atomic.Bool
	var doc atomic.Value
	doc.Store(mustJSON(t, map[string]any{"keys": []any{k1.jwk()}}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hold.Load() {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
				cancelled.Store(true)
				return
			}
		}
		w.Write([]byte(doc.Load().(string)))
	}))
	defer srv.Close()
	v := jwksVerifier(t, srv.URL, newClock(), func(c *grants.Config) { c.JWKS.HTTPTimeout = 10 * time.Second })
	hold.Store(true)
	doc.Store(mustJSON(t, map[string]any{"keys": []any{k1.jwk(), k2.jwk()}}))

	callCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := v.VerifyWith(callCtx, k2.mintWith(t, nil), refresh)
		done <- err
	}()
	<-arrived // the refresh is in flight
	cancel()  // the client goes away
	if err := <-done; err == nil {
		t.Fatal("verified although the caller left before the refresh ended")
	}
	close(release)
	var err error
	eventually(t, "the detached refresh to install k2", func() bool {
		_, err = v.Verify(ctx, k2.mintWith(t, nil))
		return err == nil
	}, func() string { return fmt.Sprint(err) })
	if cancelled.Load() {
		t.Fatal("the caller's cancellation reached the JWKS request")
	}
	if !errors.Is(callCtx.Err(), context.Canceled) {
		t.Fatal("unreachable")
	}
}
