package test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
)

// TestIdempotencyShareSDKAgent: in front of the real SDK 1.8.0 agent, seven
// workspaces each send distinct job.start keys until the idempotency store
// refuses them at their share (max_entries 64: 8 keys each, -32031
// idempotency_store_unavailable naming max_entries_per_workspace); an
// eighth workspace's job.start is then run by the agent, never refused: no
// group of fewer than 8 workspaces can fill the store for another
// (docs/workspaces.md, "Fair by default"). The agent's own log shows each
// recorded call run once and none of the refused ones.
func TestIdempotencyShareSDKAgent(t *testing.T) {
	key := newSigner(t, "k1")
	pemPath := writePEM(t, key)
	ag := startSDKAgent(t, sdkTokenEnv("SUPERVAIZER_WORKSPACE_AUTH_PUBLIC_KEY="+key.pem(t))...)
	sc := startSidecar(t, ag.addr(), sdkDirective(ag.addr(), "public_key "+pemPath,
		"\t\tidempotency {\n\t\t\tmax_entries 64\n\t\t}\n"))
	waitReady(t, sc)
	const share = 64 / 8
	jobStart := func(ws, tok, idem string) (string, response) {
		id := "req-" + randomID()
		body := sdkAction(t, ws, "job.start", func(req map[string]any) { req["request_id"], req["idempotency_key"] = id, idem })
		return id, do(t, http.MethodPost, sc.base+"/a2a", body, "X-API-Key", testKey,
			"Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", "Bearer "+tok)
	}
	var ran, refused []string
	for w := range 7 {
		ws := fmt.Sprintf("ws-flood-%d", w)
		tok := key.mint(t, sdkClaims(ws))
		for i := 0; ; i++ {
			if i > share {
				t.Fatalf("%s: %d keys recorded, its share is %d", ws, i, share)
			}
			id, r := jobStart(ws, tok, fmt.Sprintf("idem-%s-%d", ws, i))
			if r.Status != http.StatusOK {
				t.Fatalf("%s's job.start %d: %d %.300s", ws, i, r.Status, r.Body)
			}
			if bytes.Contains(r.Body, []byte(`"error"`)) {
				if i != share || !bytes.Contains(r.Body, []byte("-32031")) ||
					!bytes.Contains(r.Body, []byte("idempotency_store_unavailable")) || !bytes.Contains(r.Body, []byte("max_entries_per_workspace")) {
					t.Fatalf("%s's job.start %d: %.300s, want -32031 naming max_entries_per_workspace after %d keys", ws, i, r.Body, share)
				}
				refused = append(refused, id)
				break
			}
			ran = append(ran, id)
		}
	}
	ws := "ws-eighth"
	id, r := jobStart(ws, key.mint(t, sdkClaims(ws)), "idem-eighth")
	if r.Status != http.StatusOK || !bytes.Contains(r.Body, []byte(`"result"`)) || bytes.Contains(r.Body, []byte(`"error"`)) {
		t.Fatalf("the eighth workspace's job.start with seven at their share: %d %.300s", r.Status, r.Body)
	}
	ran = append(ran, id)
	runs := map[string]int{}
	for _, e := range ag.entries("action") {
		runs[e.RequestID]++
	}
	for _, id := range ran {
		if runs[id] != 1 {
			t.Errorf("the agent ran %s %d times, want 1", id, runs[id])
		}
	}
	for _, id := range refused {
		if runs[id] != 0 {
			t.Errorf("the agent ran refused call %s", id)
		}
	}
	if len(ran) != 7*share+1 || len(refused) != 7 {
		t.Errorf("%d calls ran, want %d", len(ran), 7*share+1)
	}
}
