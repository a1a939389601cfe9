package test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

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
	sc := startAdminSidecar(t, fa.addr(), idemDirective(jw.url(), "			wait_timeout 200ms\n"+store))
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
		time.Sleep(time.Duration(100+rand.IntN(200)) * time.Millisecond)
		if restartRedis && i%2 == 1 { // reloads and restarts take turns
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
