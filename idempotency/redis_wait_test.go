package idempotency

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// 300 callers waiting on one in-flight key share the store's one pub/sub
// connection: Redis's connected_clients stays within the pool size plus the
// subscription, whatever the number of waiters (issue #12).
func TestRedisWaitersShareOneConnection(t *testing.T) {
	srv := redistest.Start(t)
	f := loadFixture(t)
	a := newAgent(f.Result)
	release := a.blocking()
	defer release()
	st := newRedis(t, RedisOptions{URL: srv.URL(), RecheckInterval: 200 * time.Millisecond})
	c := newCounters()
	g := New(st, Options{WaitTimeout: time.Minute, Observer: c.observer()})

	const n = 300
	results := make([]<-chan doResult, n+1)
	req := f.request(t, `0`)
	results[0] = goDo(context.Background(), g, req, a.forward(req))
	a.waitStarted(t, 1)
	for i := 1; i <= n; i++ {
		req := f.request(t, itoa(i))
		results[i] = goDo(context.Background(), g, req, a.forward(req))
	}
	waitWaiters(t, c.waitCh, n)
	eventually(t, "every caller to wait on the shared subscription", func() bool { return st.hub.count() == n })

	// Measure while the waiters go through two re-check rounds (each one a
	// Claim and a PTTL per waiter, on pooled connections).
	// + the subscription, + 2 connections the server may still count while
	// the pool replaces them.
	bound := st.client.(*redis.Client).Options().PoolSize + 3
	start := st.hub.registrations.Load()
	most := 0
	eventually(t, "two re-check rounds", func() bool {
		got, err := srv.ConnectedClients()
		if err != nil {
			t.Fatal(err)
		}
		if got > most {
			most = got
		}
		if got > bound {
			t.Fatalf("%d Redis connections for %d waiters, want at most %d (pool size + 3)", got, n, bound)
		}
		return st.hub.registrations.Load()-start >= 2*n
	})
	t.Logf("%d waiters: at most %d Redis connections (bound %d)", n, most, bound)

	release()
	if fresh := awaitSameResults(t, results, "waiter"); fresh != 1 {
		t.Fatalf("%d fresh answers, want 1 (the holder's)", fresh)
	}
	if a.count() != 1 {
		t.Fatalf("agent called %d times", a.count())
	}
}

// Close stops the dispatcher: after Close no goroutine of the store is left,
// and a Wait in progress fails with ErrClosed.
func TestRedisCloseStopsDispatcher(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		closeStopsDispatcher(t, RedisOptions{URL: redistest.Start(t).URL()})
	})
	t.Run("sentinel", func(t *testing.T) {
		sen := redistest.StartSentinel(t)
		closeStopsDispatcher(t, RedisOptions{Mode: RedisModeSentinel, URL: sen.FailoverURL(), MinReplicasAck: 1, ReplicaAckTimeout: ackPatience})
	})
}

func closeStopsDispatcher(t *testing.T, opts RedisOptions) {
	before := runtime.NumGoroutine()
	opts.RecheckInterval = time.Hour
	st, err := NewRedisStore(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if cl, err := st.Claim(ctx, "id", time.Hour); err != nil || cl.State != StateClaimed {
		t.Fatalf("%+v %v", cl, err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- st.Wait(ctx, "id") }()
	}
	eventually(t, "three waiters", func() bool { return st.hub.count() == 3 })
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i := 0; i < 3; i++ {
		if err := <-errs; codeOf(err) != CodeStoreUnavailable || !errors.Is(err, ErrClosed) {
			t.Fatalf("Wait across Close: %v", err)
		}
	}
	if err := st.Wait(ctx, "id"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	eventually(t, "the store's goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	st.hub.close() // twice is harmless
}

// A subscription that breaks wakes its waiters (a message may have been
// lost), and the next subscription serves them again.
func TestRedisBrokenSubscriptionWakesWaiters(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedis(t, RedisOptions{URL: srv.URL(), RecheckInterval: time.Hour})
	ctx := context.Background()
	if _, err := st.Claim(ctx, "id", time.Hour); err != nil {
		t.Fatal(err)
	}
	woke := make(chan error, 1)
	go func() { woke <- st.Wait(ctx, "id") }()
	eventually(t, "the waiter to register", func() bool { return st.hub.count() == 1 })
	eventually(t, "the subscription to be confirmed", st.hub.isConfirmed)

	rc := srv.Client()
	defer rc.Close()
	// Kill the pub/sub connection (CLIENT KILL TYPE pubsub), not Redis.
	if err := rc.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("woken waiter: %v", err)
		}
	case <-time.After(patience):
		t.Fatal("a broken subscription left its waiter hanging")
	}
	eventually(t, "a new subscription", st.hub.isConfirmed)
	// The new one delivers: a release wakes a new waiter at once.
	cl, err := st.Claim(ctx, "id2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	go func() { woke <- st.Wait(ctx, "id2") }()
	eventually(t, "the second waiter to register", func() bool { return st.hub.count() == 1 })
	if err := st.Release(ctx, "id2", cl.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(patience):
		t.Fatal("release did not wake the waiter on the new subscription")
	}
}

func TestGlobEscape(t *testing.T) {
	if got := globEscape(`a*b?c[d]e\f:`); got != `a\*b\?c\[d\]e\\f:` {
		t.Fatalf("globEscape = %q", got)
	}
	st := newRedis(t, RedisOptions{URL: "redis://127.0.0.1:1/0", KeyPrefix: "p*:"})
	if !strings.HasPrefix(st.hub.pattern, `p\*:{*}:done`) {
		t.Fatalf("pattern %q", st.hub.pattern)
	}
}

// An idle subscription is kept alive by PING (a read timeout is not a
// break), and one whose PING goes unanswered is replaced.
func TestRedisIdleSubscriptionPings(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedis(t, RedisOptions{URL: srv.URL(), RecheckInterval: time.Hour})
	st.hub.pingEvery = 50 * time.Millisecond // set before the first Wait starts the hub
	st.hub.pongWait = 300 * time.Millisecond
	ctx := context.Background()
	if _, err := st.Claim(ctx, "id", time.Hour); err != nil {
		t.Fatal(err)
	}
	woke := make(chan error, 1)
	go func() { woke <- st.Wait(ctx, "id") }()
	eventually(t, "the subscription to be confirmed", st.hub.isConfirmed)

	rc := srv.Client()
	defer rc.Close()
	// Ten ping periods: count the PINGs the server answered on the
	// subscription (INFO commandstats), all within one session.
	eventually(t, "ten PINGs on the idle subscription", func() bool {
		info, err := srv.Info("commandstats")
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		if v, ok := info["cmdstat_ping"]; ok {
			for _, kv := range strings.Split(v, ",") {
				if k, n, _ := strings.Cut(kv, "="); k == "calls" {
					calls, _ = strconv.Atoi(n)
				}
			}
		}
		return calls >= 10
	})
	if n := st.hub.sessions.Load(); n != 1 {
		t.Fatalf("%d subscription sessions, want 1: a read timeout broke the subscription", n)
	}
	select {
	case err := <-woke:
		t.Fatalf("waiter woken by an idle subscription: %v", err)
	default:
	}

	// A PING that gets no answer: pause the server's clients (CLIENT PAUSE
	// ALL blocks PING too) for longer than pongWait.
	if err := rc.Do(ctx, "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("woken waiter: %v", err)
		}
	case <-time.After(patience):
		t.Fatal("an unanswered PING did not end the session")
	}
	eventually(t, "a new session", func() bool { return st.hub.sessions.Load() >= 2 && st.hub.isConfirmed() })
}
