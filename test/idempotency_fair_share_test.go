package test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/tidwall/gjson"
)

// fairAgent answers every /a2a call with a small result and counts, per
// workspace, the calls it received.
type fairAgent struct {
	*agent
	mu    sync.Mutex
	perWS map[string]int
}

func startFairAgent(t *testing.T) *fairAgent {
	f := &fairAgent{agent: startAgent(t), perWS: map[string]int{}}
	f.noRecord.Store(true)
	f.serveCard(200, cardFor(t, nil))
	f.respond = func(w http.ResponseWriter, r *http.Request, body []byte) {
		f.mu.Lock()
		f.perWS[gjson.GetBytes(body, "params.action_request.workspace.id").String()]++
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"status":"ok","effects":[]}}`, gjson.GetBytes(body, "id").Raw)
	}
	return f
}

func (f *fairAgent) received(ws string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.perWS[ws]
}

// TestShippedBaseFairByDefault runs the k8s base's Caddyfile as shipped
// (deploy/k8s/base/configmap-caddyfile.yaml: the file idempotency store
// with its default bounds) in the real binary. Two workspaces flood
// job.start with distinct idempotency keys, two calls at a time each,
// until they are refused; a third workspace's job.start is then forwarded
// and recorded (over HTTP/1.1 and h2c), never refused. Counts, not
// timing:
//
//   - as shipped, its limits block refuses each flood first: -32029
//     rate_limited after the burst of `rate job.start` (10, plus a token
//     refilled every 2 s of the flood), the agent receiving exactly the
//     calls that passed;
//   - without its limits block (the configuration of the report in issue
//     35), the idempotency store's share refuses each flood: exactly
//     max_entries/8 = 1,250 keys recorded per workspace, then -32031
//     idempotency_store_unavailable naming max_entries_per_workspace; the
//     two floods together hold a quarter of the store.
func TestShippedBaseFairByDefault(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(t *testing.T, cf string) string
		allowed int    // keys of one flooding workspace that reach the agent
		slack   int    // more allowed: rate tokens refilled during the flood (30/m: one per 2 s)
		code    int    // the flood's refusal
		data    string // its data.code
		message string // in its message
		series  string // the metric series that counts the refusals
	}{
		{"as shipped", nil, 10, 5, -32029, "rate_limited", "Rate limit exceeded",
			`supervaizer_sidecar_decisions_total{code="rate_limited",outcome="deny",route="controller"}`},
		{"without its limits block", withoutLimits, 1250, 0, -32031, "idempotency_store_unavailable",
			"this workspace's share of the idempotency store is full (max_entries_per_workspace: 1250",
			`supervaizer_sidecar_decisions_total{code="idempotency_workspace_share_full",outcome="deny",route="controller"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ag := startFairAgent(t)
			key := newSigner(t, "k1")
			jw := startJWKS(t, key.jwk())
			c := deploymentConfig("k8s base", "deploy/k8s/base/configmap-caddyfile.yaml")
			dir := t.TempDir()
			port, mport := freePort(t), freePort(t)
			cf := c.text(t, port, mport, ag.addr(), dir)
			if !strings.Contains(cf, "store file "+dir+"/idempotency.db") {
				t.Fatalf("the base's idempotency store is no longer the file store: %s", cf)
			}
			if tc.edit != nil {
				cf = tc.edit(t, cf)
			}
			cfPath := filepath.Join(dir, "Caddyfile")
			writeFile(t, cfPath, cf)
			apiKey := secretKey()
			env := append(os.Environ(), cliExecEnv+"=1")
			env = append(env, c.env(jw.url(), apiKey, dir)...)
			startSidecarBinary(t, env, dir, cfPath, &lockedOutput{})
			base := fmt.Sprintf("http://127.0.0.1:%d", port)
			eventually(t, 15*time.Second, "the sidecar ready", func() bool {
				resp, err := http.Get(base + "/_sidecar/ready")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			})
			tokens := map[string]string{}
			for _, ws := range []string{"ws_flood_a", "ws_flood_b", "ws_third"} {
				tokens[ws] = key.mintWith(t, func(cl jwt.MapClaims) {
					cl["iss"], cl["server_id"], cl["aud"] = c.issuer, c.serverID, "supervaizer-server:"+c.serverID
					cl["agent_id"], cl["workspace_id"], cl["workspace_slug"] = c.agentID, ws, ws
					cl["exp"] = time.Now().Add(time.Hour).Unix()
				})
			}
			call := func(cl *http.Client, ws, idemKey string) response {
				body := actionBody(t, func(r map[string]any) {
					r["idempotency_key"] = idemKey
					r["workspace"] = map[string]any{"id": ws, "slug": ws}
				})
				return doWith(t, cl, http.MethodPost, base+"/a2a", body, "X-API-Key", apiKey,
					"Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", "Bearer "+tokens[ws])
			}

			// The two floods, concurrently, two calls at a time each (the
			// shipped concurrency job.start 4 holds a slot until the answer
			// is written, so a client sending its next call at once may
			// briefly have two per worker: never more than 4); bounded: at
			// most 2,000 keys a workspace.
			const workers, bound = 2, 2000
			type tally struct {
				ok, refused atomic.Int64
				first       atomic.Pointer[response]
			}
			tallies := map[string]*tally{"ws_flood_a": {}, "ws_flood_b": {}}
			var wg sync.WaitGroup
			for ws, tl := range tallies {
				var next atomic.Int64
				for range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						cl := &http.Client{}
						for tl.refused.Load() == 0 {
							i := next.Add(1)
							if i > bound {
								return
							}
							r := call(cl, ws, fmt.Sprintf("%s-%d", ws, i))
							if r.Status == http.StatusOK && gjson.GetBytes(r.Body, "result.status").String() == "ok" {
								tl.ok.Add(1)
								continue
							}
							tl.refused.Add(1)
							tl.first.CompareAndSwap(nil, &r)
						}
					}()
				}
			}
			wg.Wait()
			var refused int64
			for _, tl := range tallies {
				refused += tl.refused.Load()
			}
			// Operators see each refusal for what it is: never as the store
			// down (no store error, no idempotency_store_unavailable
			// decision, readiness unchanged).
			m := string(do(t, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", mport), nil).Body)
			if got := metricIn(m, tc.series); got != fmt.Sprint(refused) {
				t.Fatalf("%s = %q, want %d (the refusals)", tc.series, got, refused)
			}
			for _, series := range []string{`supervaizer_sidecar_idempotency_events_total{event="store_error"}`,
				`supervaizer_sidecar_decisions_total{code="idempotency_store_unavailable",outcome="deny",route="controller"}`} {
				if got := metricIn(m, series); got != "" && got != "0" {
					t.Fatalf("%s = %s after the floods: a workspace's share counted as the store failing", series, got)
				}
			}
			if tc.data == "idempotency_store_unavailable" {
				if got := metricIn(m, `supervaizer_sidecar_idempotency_events_total{event="share_full"}`); got != fmt.Sprint(refused) {
					t.Fatalf("share_full events = %q, want %d", got, refused)
				}
			}
			if r := do(t, http.MethodGet, base+"/_sidecar/ready", nil); r.Status != http.StatusOK {
				t.Fatalf("ready after the floods: %d %s", r.Status, r.Body)
			}
			for ws, tl := range tallies {
				r := tl.first.Load()
				if r == nil {
					t.Fatalf("%s was never refused in %d keys", ws, bound)
				}
				a := wantRPCError(t, *r, tc.code, tc.data)
				if !strings.Contains(a.Error.Message, tc.message) {
					t.Fatalf("%s's refusal: %s, want a message with %q", ws, r.Body, tc.message)
				}
				ok := tl.ok.Load()
				if ok < int64(tc.allowed) || ok > int64(tc.allowed+tc.slack) {
					t.Fatalf("%s: %d keys passed before the refusal, want %d (+%d)", ws, ok, tc.allowed, tc.slack)
				}
				if got := ag.received(ws); int64(got) != ok {
					t.Fatalf("the agent received %d calls of %s, %d passed (a refused call reached it)", got, ws, ok)
				}
			}

			// The third workspace, after both floods: forwarded, recorded,
			// replayed; over HTTP/1.1 and h2c.
			for i, cl := range []*http.Client{{}, {Transport: h2cTransport()}} {
				k := fmt.Sprintf("third-%d", i)
				first := call(cl, "ws_third", k)
				if a := decodeRPC(t, first); a.Error != nil || first.Header.Get("X-Supervaize-Idempotent-Replay") != "" {
					t.Fatalf("the third workspace's job.start after two floods: %s", first.Body)
				}
				again := call(cl, "ws_third", k)
				if again.Header.Get("X-Supervaize-Idempotent-Replay") != "true" {
					t.Fatalf("the third workspace's job.start was not recorded: %s", again.Body)
				}
			}
			if got := ag.received("ws_third"); got != 2 {
				t.Fatalf("the agent received %d calls of the third workspace, want 2", got)
			}
		})
	}
}

// withoutLimits removes the limits block from a shipped Caddyfile.
func withoutLimits(t *testing.T, cf string) string {
	t.Helper()
	start := strings.Index(cf, "\t\tlimits {\n")
	if start < 0 {
		t.Fatal("the shipped Caddyfile has no limits block")
	}
	end := strings.Index(cf[start:], "\n\t\t}\n")
	if end < 0 {
		t.Fatal("the limits block does not end")
	}
	return cf[:start] + cf[start+end+len("\n\t\t}\n"):]
}

// metricIn returns the value of one series in a /metrics text ("" when
// absent).
func metricIn(m, series string) string {
	for _, l := range strings.Split(m, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}
