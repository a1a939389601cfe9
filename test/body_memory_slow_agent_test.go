package test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestSlowAgentDoesNotHoldBodyMemory: a body is charged to body_memory
// until the agent has read it, not until it answers (docs/errors.md, "Body
// limits"). Eight workspaces' calls (ws_a0…ws_a7, one each: a workspace
// holds at most its share of the budget, docs/workspaces.md "Fair by
// default"), together almost the whole budget, are read by an agent that
// then takes its time to answer; meanwhile workspace B's call is admitted
// and answered (it was 503 server_busy while the others' bodies stayed
// charged until their answers). Their calls still get their answers,
// whole.
func TestSlowAgentDoesNotHoldBodyMemory(t *testing.T) {
	const budget, bound, holders = 8 << 20, 1 << 20, 8
	release := make(chan struct{})
	var aHeld, bServed atomic.Int64
	var once sync.Once
	ag := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		if strings.HasPrefix(r.Header.Get("X-Supervaize-Verified-Workspace-Id"), "ws_a") {
			aHeld.Add(1)
			<-release // the agent works on those calls for a long time
		} else {
			bServed.Add(1)
		}
		var env struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal(body, &env)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(env.ID) + `,"result":{"status":"ok","bytes":` + strconv.Itoa(len(body)) + `}}`))
	}))
	defer ag.Close()
	defer once.Do(func() { close(release) }) // before ag.Close, which waits for A's calls
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, strings.TrimPrefix(ag.URL, "http://"), jwksDirective(jw.url(),
		"\t\tmax_body_a2a 1MiB\n\t\tbody_memory 8MiB\n\t\tidempotency off\n"))
	tokenFor := func(ws string) string {
		return key.mintWith(t, func(c jwt.MapClaims) { c["workspace_id"], c["workspace_slug"] = ws, ws })
	}
	bodyFor := func(ws string, size int) []byte {
		b := actionBody(t, func(req map[string]any) {
			req["action"], req["workspace"] = "job.sync", map[string]any{"id": ws, "slug": ws}
		})
		if size == 0 {
			return b
		}
		return padTo(t, b, size)
	}
	aDone := make(chan response, holders)
	for i := range holders {
		ws := "ws_a" + strconv.Itoa(i)
		body, tok := bodyFor(ws, bound-100), tokenFor(ws)
		go func() { aDone <- sc.rpc(t, body, tok) }()
	}
	eventually(t, 30*time.Second, "the agent has read the eight bodies", func() bool { return aHeld.Load() == holders })

	r := sc.rpc(t, bodyFor("ws_b", 2048), tokenFor("ws_b")) // more than the 800 bytes the eight leave
	if r.Status != http.StatusOK || decodeRPC(t, r).Error != nil {
		t.Fatalf("B's call while the agent works on A's: %d %s", r.Status, r.Body)
	}
	if bServed.Load() != 1 {
		t.Fatalf("the agent served %d of B's calls, want 1", bServed.Load())
	}
	once.Do(func() { close(release) })
	for range holders {
		a := <-aDone
		if a.Status != http.StatusOK || !strings.Contains(string(a.Body), `"bytes":`+strconv.Itoa(bound-100)) {
			t.Fatalf("A's call: %d %.300s", a.Status, a.Body)
		}
	}
}
