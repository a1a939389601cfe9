package idempotency

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// Cluster mode: keys of several ids land on different masters; a waiter
// on another replica is woken by the holder's record through the one shared
// pattern subscription (cluster pub/sub reaches every node), and each key
// reaches the agent once.
func TestRedisClusterForwardOnce(t *testing.T) {
	cl := redistest.StartCluster(t)
	f := loadFixture(t)
	// A re-check period beyond the test's patience: only pub/sub wakes.
	opts := RedisOptions{Mode: RedisModeCluster, URL: cl.URL(), RecheckInterval: time.Hour}
	c := newCounters()
	st1 := newRedis(t, opts)
	g1 := New(st1, Options{})
	g2 := New(newRedis(t, opts), Options{Observer: c.observer()})
	ctx := context.Background()

	masters := map[string]bool{}
	for k := 0; k < 6; k++ {
		a := newAgent(f.Result)
		release := a.blocking()
		hreq := withKey(f.request(t, `0`), "cluster-"+itoa(k))
		m, err := st1.client.(*redis.ClusterClient).MasterForKey(ctx, st1.lockKey(hreq.Key.ID()))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
		results := []<-chan doResult{goDo(ctx, g1, hreq, a.forward(hreq))}
		a.waitStarted(t, 1)
		wreq := withKey(f.request(t, `1`), "cluster-"+itoa(k))
		results = append(results, goDo(ctx, g2, wreq, a.forward(wreq)))
		waitWaiters(t, c.waitCh, 1)
		release()
		if fresh := awaitSameResults(t, results, "cluster key "+itoa(k)); fresh != 1 || a.count() != 1 {
			t.Fatalf("key %d: %d fresh answers, %d agent calls, want 1 and 1", k, fresh, a.count())
		}
	}
	if len(masters) < 2 {
		t.Fatalf("the 6 keys all on %v: the test does not cross nodes", masters)
	}

	// MinReplicasAck in cluster mode: WAIT runs on the slot's master; with no
	// replicas the claim is refused and its mark released.
	acked := newRedis(t, RedisOptions{Mode: RedisModeCluster, URL: cl.URL(), MinReplicasAck: 1, ReplicaAckTimeout: 100 * time.Millisecond})
	if _, err := acked.Claim(ctx, "acked", time.Minute); codeOf(err) != CodeStoreUnavailable || !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("cluster claim without replicas: %v", err)
	}
	if n, err := acked.client.Exists(ctx, acked.lockKey("acked")).Result(); err != nil || n != 0 {
		t.Fatalf("refused claim left its mark: %d %v", n, err)
	}
}
