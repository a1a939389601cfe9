package test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/tidwall/gjson"
)

// blobAgent answers every job.start with a ~1 MB result and counts, per
// idempotency_key, the calls it executed.
type blobAgent struct {
	*agent
	mu     sync.Mutex
	perKey map[string]int
}

func startBlobAgent(t *testing.T, blob int) *blobAgent {
	b := &blobAgent{agent: startAgent(t), perKey: map[string]int{}}
	b.noRecord.Store(true)
	result := `{"status":"ok","blob":"` + strings.Repeat("x", blob) + `"}`
	b.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		b.mu.Lock()
		b.perKey[gjson.GetBytes(body, "params.action_request.idempotency_key").String()]++
		b.mu.Unlock()
		id := gjson.GetBytes(body, "id").Raw
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, id, result)
	}
	return b
}

func (b *blobAgent) executions(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.perKey[key]
}

// TestWorkspaceBytesShareThroughGate: through the real gate, with each
// store (memory, file), workspace A fills its
// max_bytes_per_workspace (2 MiB) with ~1 MB answers: its third answer is
// returned once, unrecorded, and its key stays in flight (the retry gets
// idempotency_in_progress, the agent is not called again). Workspace B's
// job.start is then forwarded, recorded and replayed, never
// idempotency_store_unavailable; A's recorded answers still replay.
func TestWorkspaceBytesShareThroughGate(t *testing.T) {
	stores := []struct{ name, lines string }{
		{"memory", ""},
		{"file", "			store file " + filepath.Join(t.TempDir(), "store.db") + "\n"},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ag := startBlobAgent(t, 1_000_000)
			key := newSigner(t, "k1")
			jw := startJWKS(t, key.jwk())
			sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), st.lines+
				"			max_record_bytes 2MiB\n			max_bytes_per_workspace 2MiB\n			wait_timeout 100ms\n"))
			tokenOf := func(ws string) string {
				return key.mintWith(t, func(c jwt.MapClaims) { c["workspace_id"], c["workspace_slug"] = ws, ws })
			}
			call := func(ws, k string) response {
				body := actionBody(t, func(r map[string]any) {
					r["idempotency_key"] = k
					r["workspace"] = map[string]any{"id": ws, "slug": ws}
				})
				return sc.rpc(t, body, tokenOf(ws))
			}
			replayed := func(r response) bool { return r.Header.Get("X-Supervaize-Idempotent-Replay") == "true" }

			for _, k := range []string{"a1", "a2"} {
				if r := call("ws_a", k); replayed(r) || !strings.Contains(string(decodeRPC(t, r).Result), `"blob"`) {
					t.Fatalf("A's %s: %.200s", k, r.Body)
				}
			}
			over := call("ws_a", "a3")
			if a := decodeRPC(t, over); a.Error != nil || !strings.Contains(string(a.Result), `"blob"`) {
				t.Fatalf("A's answer over its share was not returned: %.200s", over.Body)
			}
			wantInProgress(t, call("ws_a", "a3"))
			for _, k := range []string{"b1", "b2"} {
				first := call("ws_b", k)
				if a := decodeRPC(t, first); a.Error != nil || replayed(first) {
					t.Fatalf("B's %s after A filled its share: %.300s", k, first.Body)
				}
				if !replayed(call("ws_b", k)) {
					t.Fatalf("B's %s was not recorded", k)
				}
			}
			if !replayed(call("ws_a", "a1")) {
				t.Fatal("A's first record lost")
			}
			for k, want := range map[string]int{"a1": 1, "a2": 1, "a3": 1, "b1": 1, "b2": 1} {
				if n := ag.executions(k); n != want {
					t.Fatalf("agent executed %s %d times, want %d", k, n, want)
				}
			}
		})
	}
}
