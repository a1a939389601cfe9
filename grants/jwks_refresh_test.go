// Who may trigger a JWKS refresh, and that it outlives its caller.

package grants_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/grants"
)

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
