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

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// The references stores: the bindings survive what the store survives — a
// reload (every store), a restart (file), and hold across sidecars sharing
// Redis; Redis stopped fails closed for the calls carrying references only.

// refPost posts an action of workspace ws with refs to base's /a2a and
// returns its answer.
func refPost(t *testing.T, base, tok, ws, action string, refs map[string]any) response {
	t.Helper()
	st, b, err := rawPost(base+"/a2a", refAction(t, ws, action, "c", refs), "X-API-Key", testKey,
		"Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", "Bearer "+tok)
	if err != nil {
		t.Fatal(err)
	}
	return response{Status: st, Body: b}
}

// TestReferencesSurviveReload: a reload of the same configuration keeps
// the bindings of the memory store.
func TestReferencesSurviveReload(t *testing.T) {
	ag := refAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startAdminSidecar(t, ag.addr(), jwksDirective(jw.url(), "\t\treferences\n"))
	tokA, tokB := refTokens(t, key)
	wantPassed(t, ag, "A's job.stop", func() response { return refPost(t, sc.base, tokA, wsA, "job.stop", map[string]any{"job_id": "job-r"}) })
	sc.reload(t)
	wantRefused(t, ag, "job_id", "c", func() response { return refPost(t, sc.base, tokB, wsB, "job.stop", map[string]any{"job_id": "job-r"}) })
}

// TestReferencesFileStoreSurvivesRestart: with store file the bindings
// survive the sidecar process killed and started again.
func TestReferencesFileStoreSurvivesRestart(t *testing.T) {
	ag := refAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	dir := t.TempDir()
	port := freePort(t)
	cf := fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n\tauto_https off\n}\nhttp://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy %s\n}\n",
		port, jwksDirective(jw.url(), "\t\treferences {\n\t\t\tstore file "+filepath.Join(dir, "refs", "refs.db")+"\n\t\t}\n"), ag.addr())
	cfPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfPath, []byte(cf), 0o600); err != nil {
		t.Fatal(err)
	}
	tokA, tokB := refTokens(t, key)
	p := startProcess(t, cfPath, port)
	wantPassed(t, ag, "A's job.stop", func() response { return refPost(t, p.base, tokA, wsA, "job.stop", map[string]any{"job_id": "job-f"}) })
	wantPassed(t, ag, "A's job.sync learning a job", func() response {
		return refPost(t, p.base, tokA, wsA, "job.sync", map[string]any{"input": map[string]any{"snapshot": "snap-f"}})
	})
	p.kill()
	p = startProcess(t, cfPath, port)
	for _, job := range []string{"job-f", "snap-f-job"} {
		wantRefused(t, ag, "job_id", "c", func() response { return refPost(t, p.base, tokB, wsB, "job.stop", map[string]any{"job_id": job}) })
	}
	wantPassed(t, ag, "A's job.stop after the restart", func() response { return refPost(t, p.base, tokA, wsA, "job.stop", map[string]any{"job_id": "job-f"}) })
}

// TestReferencesTwoSidecarsShareRedis: a reference bound through one
// sidecar is refused to another workspace through the other; with Redis
// stopped, calls carrying references are refused (503, naming the store;
// readiness notes it) and the agent receives nothing, while calls without
// one pass.
func TestReferencesTwoSidecarsShareRedis(t *testing.T) {
	srv := redistest.Start(t)
	ag := refAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	var procs []*sidecarProcess
	for range 2 {
		port := freePort(t)
		cf := fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n\tauto_https off\n}\nhttp://127.0.0.1:%d {\n\tsupervaizer_auth {\n%s\n\t}\n\treverse_proxy %s\n}\n",
			port, jwksDirective(jw.url(), "\t\treferences {\n\t\t\tstore redis\n\t\t\tredis_url "+srv.URL()+"\n\t\t}\n"), ag.addr())
		path := filepath.Join(t.TempDir(), "Caddyfile")
		if err := os.WriteFile(path, []byte(cf), 0o600); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, startProcess(t, path, port))
	}
	tokA, tokB := refTokens(t, key)
	wantPassed(t, ag, "A's job.stop via sidecar 1", func() response {
		return refPost(t, procs[0].base, tokA, wsA, "job.stop", map[string]any{"job_id": "job-x"})
	})
	wantRefused(t, ag, "job_id", "c", func() response {
		return refPost(t, procs[1].base, tokB, wsB, "job.stop", map[string]any{"job_id": "job-x"})
	})
	wantPassed(t, ag, "A's job.stop via sidecar 2", func() response {
		return refPost(t, procs[1].base, tokA, wsA, "job.stop", map[string]any{"job_id": "job-x"})
	})

	// Load through both sidecars while Redis stops: a call carrying a
	// reference is answered or refused 503 naming the store, never
	// anything else; a call without one is always answered.
	stop := make(chan struct{})
	problems := make(chan string, 64)
	var wg sync.WaitGroup
	var sent atomic.Int64
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := procs[i%2]
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				refs := map[string]any{"job_id": "job-x"}
				if j%2 == 1 {
					refs = nil
				}
				st, b, err := rawPost(p.base+"/a2a", refAction(t, wsA, "job.stop", "c", refs), "X-API-Key", testKey,
					"Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", "Bearer "+tokA)
				sent.Add(1)
				ok := err == nil && (st == 200 && strings.Contains(string(b), `"result"`) ||
					refs != nil && st == 503 && strings.Contains(string(b), "References store (redis) unavailable"))
				if !ok {
					select {
					case problems <- fmt.Sprintf("refs %v: %d %s %v", refs, st, b, err):
					default:
					}
				}
			}
		}()
	}
	eventually(t, 10*time.Second, "calls before Redis stops", func() bool { return sent.Load() >= 20 })
	srv.Stop()
	after := sent.Load()
	eventually(t, 10*time.Second, "calls after Redis stopped", func() bool { return sent.Load() >= after+20 })
	close(stop)
	wg.Wait()
	close(problems)
	for p := range problems {
		t.Error(p)
	}
	for i, p := range procs {
		before := ag.count.Load()
		r := refPost(t, p.base, tokA, wsA, "job.stop", map[string]any{"job_id": "job-x"})
		if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), "References store (redis) unavailable") ||
			!strings.Contains(string(r.Body), `"references_store_error"`) {
			t.Fatalf("sidecar %d, Redis stopped, a call with a reference: %d %s", i+1, r.Status, r.Body)
		}
		if ag.count.Load() != before {
			t.Fatalf("sidecar %d forwarded a call whose reference it could not check", i+1)
		}
		// A call without a reference does not need the store.
		wantPassed(t, ag, "a call without a reference", func() response { return refPost(t, p.base, tokA, wsA, "job.sync", nil) })
		ready := do(t, http.MethodGet, p.base+"/_sidecar/ready", nil)
		if !strings.Contains(string(ready.Body), "references store failing since") {
			t.Fatalf("sidecar %d readiness without the store's note: %s", i+1, ready.Body)
		}
	}
}
