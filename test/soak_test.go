package test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// soakDuration is SOAK_DURATION (a Go duration; `make soak` sets 60s), 3 s
// by default so that `make test` stays quick.
func soakDuration(t *testing.T) time.Duration {
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SOAK_DURATION: %v", err)
		}
		return d
	}
	return 3 * time.Second
}

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestSoak mixes allowed, denied, bootstrap, replayed and SSE calls at fixed
// concurrency for a bounded time and checks: no unexpected status, no growth
// trend in memory, goroutines back to baseline afterwards.
func TestSoak(t *testing.T) {
	ag := startJobStartAgent(t)
	ag.noRecord.Store(true)
	sseAgent(ag.agent)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startSidecar(t, ag.addr(), jwksDirective(jw.url(), ""))
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	cl := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	tok := key.mint(t, baseClaims())
	bodies := map[string][]byte{
		"allowed":   actionFor(t, "job.sync"),
		"replayed":  jobStartBody(t),
		"bootstrap": actionFor(t, "workspace_binding.options"),
		"denied":    actionFor(t, "job.sync"),
	}
	send := func(kind string) error {
		if kind == "sse" {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", sc.base+"/a2a/events", nil)
			req.Header.Set("X-API-Key", testReadKey)
			req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+tok)
			resp, err := cl.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			buf := make([]byte, 64)
			if _, err := resp.Body.Read(buf); err != nil || resp.StatusCode != 200 || !strings.Contains(string(buf), "supervaizer.connected") {
				t.Errorf("sse: %d %v %q", resp.StatusCode, err, buf)
			}
			return nil
		}
		req, _ := http.NewRequest("POST", sc.base+"/a2a", strings.NewReader(string(bodies[kind])))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", testKey)
		if kind != "denied" && kind != "bootstrap" {
			req.Header.Set("X-Supervaize-Workspace-Authorization", "Bearer "+tok)
		}
		resp, err := cl.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ok := resp.StatusCode == 200
		switch kind {
		case "denied":
			ok = ok && strings.Contains(string(b), "workspace_authorization_missing")
		default:
			ok = ok && strings.Contains(string(b), `"result"`)
		}
		if !ok {
			t.Errorf("%s: unexpected answer %d %s", kind, resp.StatusCode, b)
		}
		return nil
	}
	kinds := []string{"allowed", "replayed", "bootstrap", "denied", "allowed", "sse"}
	var count atomic.Int64
	run := func(deadline time.Time) *sync.WaitGroup {
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := w; time.Now().Before(deadline); i++ {
					if err := send(kinds[i%len(kinds)]); err != nil {
						t.Errorf("transport error: %v", err)
						return
					}
					count.Add(1)
				}
			}(w)
		}
		return &wg
	}
	// Warm up at the same concurrency (the proxy keeps idle upstream
	// connections), then take the goroutine baseline.
	run(time.Now().Add(300 * time.Millisecond)).Wait()
	tr.CloseIdleConnections()
	baseGoroutines := settledGoroutines(t)

	dur := soakDuration(t)
	var heaps []uint64
	deadline := time.Now().Add(dur)
	wg := run(deadline)
	sampler := time.NewTicker(dur / 6)
	for time.Now().Before(deadline) {
		<-sampler.C
		heaps = append(heaps, heapAfterGC())
	}
	sampler.Stop()
	wg.Wait()
	t.Logf("%d calls in %s; heap samples %v", count.Load(), dur, heaps)

	// No growth trend: the last heap sample is within 1.5x (+8 MiB) of the
	// second one (the first may still include warm-up garbage).
	if len(heaps) >= 3 {
		first, last := heaps[1], heaps[len(heaps)-1]
		if last > first+first/2+8<<20 {
			t.Fatalf("heap grew from %d to %d bytes", first, last)
		}
	}
	// Goroutines back to baseline once clients are gone.
	tr.CloseIdleConnections()
	t.Logf("goroutines: baseline %d, now %d", baseGoroutines, runtime.NumGoroutine())
	eventually(t, 15*time.Second, "goroutines back to baseline", func() bool {
		tr.CloseIdleConnections()
		return runtime.NumGoroutine() <= baseGoroutines+20
	})
}

// TestFaultSoak is the randomized fault soak of issue 12 (`make soak` runs
// it for SOAK_DURATION; `make test` for 3 s): concurrent clients retry
// job.start calls over a fixed set of idempotency keys while the agent
// randomly resets connections, aborts bodies or answers slowly, and the
// harness reloads the config through the admin API and restarts Redis (with
// its data kept on disk, as a production Redis keeps it). At the end no key
// was executed twice by the agent.
func TestFaultSoak(t *testing.T) {
	d := soakDuration(t) / 2
	rs := redistest.StartDurable(t)
	for name, store := range map[string]string{
		"redis": fmt.Sprintf("			store redis\n			redis_url %s\n", rs.URL()),
		"file":  "			store file " + filepath.Join(t.TempDir(), "soak.db") + "\n",
	} {
		t.Run(name, func(t *testing.T) { faultSoak(t, d, store, name == "redis", rs) })
	}
}

func faultSoak(t *testing.T, d time.Duration, store string, restartRedis bool, rs *redistest.Server) {
	fa := startFaultAgent(t)
	key := newSigner(t, "k1")
	jw := startJWKS(t, key.jwk())
	sc := startAdminSidecar(t, fa.addr(), idemDirective(jw.url(), "			wait_timeout 1s\n"+store))
	fa.mode.Store(answerRandom)
	tok := key.mint(t, baseClaims())
	// The keys in use move on every 150 ms (a window of 6, half of it new),
	// so new keys keep meeting the faults, and each key is retried by
	// several clients.
	begin := time.Now()
	stop := begin.Add(d)
	var bodiesMu sync.Mutex
	bodies := map[string][]byte{}
	pick := func() []byte {
		k := fmt.Sprintf("soak-%s-%d", t.Name(), int(time.Since(begin)/(150*time.Millisecond))*3+rand.IntN(6))
		bodiesMu.Lock()
		defer bodiesMu.Unlock()
		if bodies[k] == nil {
			bodies[k] = jobStartWithKey(t, k)
		}
		return bodies[k]
	}
	var sent, answered, reloads, restarts atomic.Int64
	var wg sync.WaitGroup
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				sent.Add(1)
				st, _, err := rawPost(sc.base+"/a2a", pick(), "X-API-Key", testKey,
					"Content-Type", "application/json", "X-Supervaize-Workspace-Authorization", "Bearer "+tok)
				if err == nil && st == 200 {
					answered.Add(1)
				}
			}
		}()
	}
	for i := 0; time.Now().Before(stop); i++ {
		time.Sleep(time.Duration(100+rand.IntN(200)) * time.Millisecond) // pacing: a reload or restart every 100-300 ms
		if restartRedis && i%2 == 1 {                                    // reloads and restarts take turns
			rs.Restart()
			restarts.Add(1)
		} else {
			sc.reload(t)
			reloads.Add(1)
		}
	}
	wg.Wait()
	executed := 0
	for k := range bodies {
		switch n := fa.executions(k); {
		case n > 1:
			t.Errorf("key %s executed %d times", k, n)
		case n == 1:
			executed++
		}
	}
	t.Logf("%d calls sent, %d answered 200, %d of %d keys executed once, %d reloads, %d Redis restarts",
		sent.Load(), answered.Load(), executed, len(bodies), reloads.Load(), restarts.Load())
	if executed == 0 || reloads.Load() == 0 {
		t.Fatalf("the soak exercised nothing: %d keys executed, %d reloads", executed, reloads.Load())
	}
}
