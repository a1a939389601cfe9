package test

import (
	"context"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
	eventually(t, "goroutines back to baseline", func() bool {
		tr.CloseIdleConnections()
		return runtime.NumGoroutine() <= baseGoroutines+20
	})
}
