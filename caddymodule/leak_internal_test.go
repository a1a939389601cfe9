package caddymodule

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"github.com/supervaize/supervaizer-sidecar/config"
	"github.com/supervaize/supervaizer-sidecar/idempotency"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/gate"
	"go.uber.org/zap"
)

// TestNoGoroutineLeakPerProvision: 50 gates built and cleaned up, as 50
// reloads or `supervaizer check` runs would, leave no goroutine or timer
// behind (token mode with a JWKS, the memory and the file idempotency
// stores, the SSE request memory).
func TestNoGoroutineLeakPerProvision(t *testing.T) {
	clearSupervaizerEnv(t)
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(map[string]any{"keys": []any{map[string]any{"kty": "OKP", "crv": "Ed25519", "kid": "k1",
		"x": base64.RawURLEncoding.EncodeToString(pub)}}})
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(doc) }))
	defer jwks.Close()
	on := true
	dir := t.TempDir()
	gate := func(i int) *Handler {
		ic := &config.IdempotencyConfig{}
		if i%2 == 1 {
			ic = &config.IdempotencyConfig{Store: "file", FilePath: filepath.Join(dir, "idem.db")}
		}
		return &Handler{Config: config.Config{ServerID: "srv-leak", APIKeys: []config.APIKey{{Key: "k"}}, Agents: map[string]string{"a": "A"},
			WorkspaceAuth: &config.WorkspaceAuth{Required: &on, Issuer: "https://studio.test", JWKSURL: jwks.URL},
			Registration:  &config.RegistrationConfig{Source: "off"}, Idempotency: ic}}
	}
	settle := func() int {
		jwks.CloseClientConnections()
		runtime.GC()
		return runtime.NumGoroutine()
	}
	// One gate first, so lazily started process-wide goroutines are counted
	// in the baseline.
	h := gate(0)
	g, err := h.build(zap.NewNop(), nil, pools{})
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	start := settle()
	for i := 0; i < 50; i++ {
		h := gate(i)
		g, err := h.build(zap.NewNop(), nil, pools{})
		if err != nil {
			t.Fatalf("gate %d: %v", i, err)
		}
		g.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := settle()
		if n <= start {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d after 50 gates, %d before\n%s", n, start, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSharedStoreSurvivesReloadAndDrains: a second gate with the same store
// identity shares the first gate's store; the store closes only when both
// are gone and the forward still running on it has ended.
func TestSharedStoreSurvivesReloadAndDrains(t *testing.T) {
	clearSupervaizerEnv(t)
	mk := func() (*gate.Gate, idempotency.Store) {
		local := true
		cfg := config.Config{APIKeys: []config.APIKey{{Key: "k"}}, LocalMode: &local, Registration: &config.RegistrationConfig{Source: "off"}}
		var st idempotency.Store
		g, _, err := gate.New(&cfg, gate.Deps{Log: zap.NewNop(), Placeholders: exposePlaceholders,
			ProxyErrors: proxyErrors{}, Shared: storeSeen{pools{}, &st}})
		if err != nil {
			t.Fatal(err)
		}
		return g, st
	}
	old, oldStore := mk()
	done := oldStore.(*idempotency.Shared).Begin() // a forward of the old gate, still running
	fresh, freshStore := mk()                      // the reload's gate
	if freshStore != oldStore {
		t.Fatal("a reload with the same settings opened a second store")
	}
	old.Close()
	third, _ := mk()
	fresh.Close()
	third.Close() // no gate holds the store now, but a forward still uses it
	if err := oldStore.Ping(t.Context()); err != nil {
		t.Fatalf("store closed under an in-flight forward: %v", err)
	}
	done()
	if err := oldStore.Ping(t.Context()); err == nil {
		t.Fatal("store still open after the last forward ended")
	}
}

// storeSeen is Caddy's pools (gate.Shared) telling the test which
// idempotency store they handed to the gate.
type storeSeen struct {
	pools
	seen *idempotency.Store
}

func (s storeSeen) IdempotencyStore(ic *config.IdempotencyConfig, serverID string) (idempotency.Store, func(), error) {
	st, release, err := s.pools.IdempotencyStore(ic, serverID)
	*s.seen = st
	return st, release, err
}
