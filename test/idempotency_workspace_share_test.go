package test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/tidwall/gjson"

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
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
// store (memory, file, Redis single and Cluster), workspace A sends eight
// job.start calls with ~1 MB answers against a max_bytes_per_workspace of
// 2 MiB: two are recorded; the six others are returned once, unrecorded,
// their keys kept in flight (a retry gets idempotency_in_progress, the
// agent is not called again). Workspace B's job.start calls are then
// forwarded, recorded and replayed, never idempotency_store_unavailable;
// A's recorded answers still replay. For the single Redis, maxmemory
// (noeviction) leaves 6 MiB of room: without the share A's eight records
// would fill it and B's claims would fail (issue 21).
func TestWorkspaceBytesShareThroughGate(t *testing.T) {
	rs := redistest.Start(t)
	cluster := redistest.StartCluster(t)
	stores := []struct {
		name, lines string
		prepare     func(t *testing.T)
	}{
		{"memory", "", nil},
		{"file", "			store file " + filepath.Join(t.TempDir(), "store.db") + "\n", nil},
		{"redis", "			store redis\n			redis_url " + rs.URL() + "\n", func(t *testing.T) { tightMaxmemory(t, rs, 6<<20) }},
		{"redis cluster", "			store redis\n			redis_mode cluster\n			redis_url " + cluster.URL() + "\n", nil},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ag := startBlobAgent(t, 1_000_000)
			key := newSigner(t, "k1")
			jw := startJWKS(t, key.jwk())
			sc := startSidecar(t, ag.addr(), idemDirective(jw.url(), st.lines+
				"			max_record_bytes 2MiB\n			max_bytes_per_workspace 2MiB\n			wait_timeout 1s\n"))
			if st.prepare != nil {
				st.prepare(t)
			}
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

			over := []string{"a3", "a4", "a5", "a6", "a7", "a8"}
			for _, k := range append([]string{"a1", "a2"}, over...) {
				r := call("ws_a", k)
				if a := decodeRPC(t, r); a.Error != nil || replayed(r) || !strings.Contains(string(a.Result), `"blob"`) {
					t.Fatalf("A's %s: %.300s", k, r.Body)
				}
			}
			for _, k := range []string{"a1", "a2"} {
				if !replayed(call("ws_a", k)) {
					t.Fatalf("A's %s (within its share) was not recorded", k)
				}
			}
			for _, k := range over {
				r := call("ws_a", k)
				if a := decodeRPC(t, r); a.Error == nil || !strings.Contains(string(a.Error.Data), "idempotency_in_progress") {
					t.Fatalf("retry of A's unrecorded %s: %.300s", k, r.Body)
				}
			}
			for _, k := range []string{"b1", "b2"} {
				first := call("ws_b", k)
				if a := decodeRPC(t, first); a.Error != nil || replayed(first) {
					t.Fatalf("B's %s after A filled its share: %.300s", k, first.Body)
				}
				if !replayed(call("ws_b", k)) {
					t.Fatalf("B's %s was not recorded", k)
				}
			}
			for _, k := range append([]string{"a1", "a2", "b1", "b2"}, over...) {
				if n := ag.executions(k); n != 1 {
					t.Fatalf("agent executed %s %d times, want 1", k, n)
				}
			}
		})
	}
}

// tightMaxmemory sets srv's maxmemory to its memory in use plus room
// (noeviction), and restores it when t ends.
func tightMaxmemory(t *testing.T, srv *redistest.Server, room int64) {
	t.Helper()
	info, err := srv.Info("memory")
	if err != nil {
		t.Fatal(err)
	}
	used, err := strconv.ParseInt(info["used_memory"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	for k, v := range map[string]string{"maxmemory-policy": "noeviction", "maxmemory": strconv.FormatInt(used+room, 10)} {
		if err := c.ConfigSet(ctx, k, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		c := srv.Client()
		defer c.Close()
		_ = c.ConfigSet(context.Background(), "maxmemory", "0").Err()
	})
}
