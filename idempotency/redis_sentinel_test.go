package idempotency

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/supervaize/supervaizer-sidecar/refusal"
	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

// ackPatience is the ReplicaAckTimeout of tests whose replica is up: on a
// loaded machine a replica can take longer than the 500 ms default to
// acknowledge, and these tests are not about that bound.
const ackPatience = 5 * time.Second

// redisSentinelBackend is a Sentinel-managed primary with one replica, used
// through a failover client (Mode sentinel). srv is the primary: a
// single-mode store on it sees the same data. open returns a store that has
// already found the primary (Ping), as a replica that is up would have: the
// generic tests time short lock TTLs from their first call. Its stores do
// not wait for replicas (MinReplicasAck 0), for the same reason: on a loaded
// machine a WAIT can outlast those TTLs. TestRedisAckedStoreContract runs the
// store contract with MinReplicasAck 1.
func redisSentinelBackend(t testing.TB) *backend {
	sen := redistest.StartSentinel(t)
	return &backend{name: "redis-sentinel", srv: sen.Primary(), redis: true, open: func(t testing.TB) Store {
		st := newRedis(t, RedisOptions{Mode: RedisModeSentinel, URL: sen.FailoverURL()})
		if err := st.Ping(context.Background()); err != nil {
			t.Fatalf("sentinel store: %v", err)
		}
		return st
	}}
}

// The store contract through a failover client that waits for one replica
// on every claim and record: claim, in flight, a waiter woken by the record
// (pub/sub only: no re-check in time), replay, fencing, release.
func TestRedisAckedStoreContract(t *testing.T) {
	sen := redistest.StartSentinel(t)
	opts := RedisOptions{Mode: RedisModeSentinel, URL: sen.FailoverURL(), MinReplicasAck: 1,
		ReplicaAckTimeout: ackPatience, RecheckInterval: time.Hour}
	st, other := newRedis(t, opts), newRedis(t, opts)
	ctx := context.Background()

	cl, err := st.Claim(ctx, "id", time.Hour)
	if err != nil || cl.State != StateClaimed {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	if again, err := other.Claim(ctx, "id", time.Hour); err != nil || again.State != StateInFlight {
		t.Fatalf("second claim: %+v %v", again, err)
	}
	woke := make(chan error, 1)
	go func() { woke <- other.Wait(ctx, "id") }()
	eventually(t, "the waiter to register", func() bool { return other.hub.count() == 1 })
	if err := other.Record(ctx, "id", "not-the-token", Record{Fingerprint: "x", Status: 200, Result: []byte(`{}`)}, time.Hour); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("record with a wrong token: %v", err)
	}
	if err := st.Record(ctx, "id", cl.Token, Record{Fingerprint: "fp", Status: 200, Result: []byte(`{"a":1}`)}, time.Hour); err != nil {
		t.Fatalf("record: %v", err)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(patience):
		t.Fatal("the record did not wake the waiter")
	}
	rec, err := other.Claim(ctx, "id", time.Hour)
	if err != nil || rec.State != StateRecorded || string(rec.Record.Result) != `{"a":1}` {
		t.Fatalf("replay: %+v %v", rec, err)
	}
	// The record is on the replica: it was acknowledged.
	rc := sen.Replica().Client()
	defer rc.Close()
	if n, err := rc.Exists(ctx, st.recKey("id")).Result(); err != nil || n != 1 {
		t.Fatalf("record on the replica: %d %v", n, err)
	}

	cl2, err := st.Claim(ctx, "id2", time.Hour)
	if err != nil || cl2.State != StateClaimed {
		t.Fatalf("claim id2: %+v %v", cl2, err)
	}
	if err := other.Release(ctx, "id2", cl2.Token); err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, "id2", cl2.Token); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("second release: %v", err)
	}
	if again, err := other.Claim(ctx, "id2", time.Hour); err != nil || again.State != StateClaimed {
		t.Fatalf("claim after release: %+v %v", again, err)
	}
}

func TestRedisSentinelFailoverForwardsOnce(t *testing.T) {
	sen := redistest.StartSentinel(t)
	f := loadFixture(t)
	a := newAgent(f.Result)
	release := a.blocking()
	defer release()
	opts := RedisOptions{
		Mode: RedisModeSentinel, URL: sen.FailoverURL(), MinReplicasAck: 1, ReplicaAckTimeout: 2 * time.Second,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond,
		RecheckInterval: 200 * time.Millisecond,
	}
	ch := newCounters()
	holder := New(newRedis(t, opts), Options{LockTTL: time.Minute, Observer: ch.observer()})
	retrier := New(newRedis(t, opts), Options{LockTTL: time.Minute, WaitTimeout: 300 * time.Millisecond})

	req := f.request(t, `1`)
	first := goDo(context.Background(), holder, req, a.forward(req))
	a.waitStarted(t, 1) // claimed, and the claim acknowledged by the replica

	sen.KillPrimary()
	if got := sen.WaitFailover(patience); got != sen.Replica().Addr() {
		t.Fatalf("promoted %s, want the replica %s", got, sen.Replica().Addr())
	}

	// The mark survived the failover: the retry is told the key is in
	// flight (store errors are allowed while the clients find the new
	// primary), and it never reaches the agent.
	retry := f.request(t, `2`)
	eventually(t, "the retry to see the key in flight on the promoted replica", func() bool {
		_, err := retrier.Do(context.Background(), retry, a.forward(retry))
		if err == nil {
			t.Fatalf("retry answered before the first forward ended (agent calls %d)", a.count())
		}
		if c := codeOf(err); c != CodeInProgress && c != CodeStoreUnavailable {
			t.Fatalf("retry: %v", err)
		}
		return codeOf(err) == CodeInProgress
	})

	release()
	r := await(t, first, "first forward")
	if r.err != nil || r.reply.Status != 200 {
		t.Fatalf("first forward: %+v %v", r.reply, r.err)
	}
	// The record landed on the new primary, which has no replica left: Record
	// reports ErrNotReplicated.
	var notRepl bool
	for _, e := range ch.errs() {
		notRepl = notRepl || (e.op == "record" && errors.Is(e.err, ErrNotReplicated))
	}
	if !notRepl {
		t.Fatalf("record errors %v, want ErrNotReplicated (no replica after the failover)", ch.errs())
	}
	var rep Reply
	eventually(t, "the retry to be answered from the record", func() bool {
		var err error
		rep, err = retrier.Do(context.Background(), retry, a.forward(retry))
		if err != nil && codeOf(err) == "" {
			t.Fatalf("retry: %v", err)
		}
		return err == nil
	})
	if !rep.Replayed || a.count() != 1 {
		t.Fatalf("retry after the record: replayed=%v, agent calls %d, want a replay and 1 call", rep.Replayed, a.count())
	}
}

func TestRedisReplicaDownRefusesClaim(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	f := loadFixture(t)
	a := newAgent(f.Result)
	c := newCounters()
	st := newRedis(t, RedisOptions{URL: primary.URL(), MinReplicasAck: 1, ReplicaAckTimeout: ackPatience})
	g := New(st, Options{Observer: c.observer()})
	ctx := context.Background()

	replica.Stop()
	eventually(t, "the primary to see its replica gone", func() bool {
		info, err := primary.Info("replication")
		return err == nil && info["connected_slaves"] == "0"
	})
	req := f.request(t, `1`)
	_, err := g.Do(ctx, req, a.forward(req))
	if codeOf(err) != CodeStoreUnavailable || !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("claim with the replica down: %v", err)
	}
	if a.count() != 0 {
		t.Fatalf("forwarded without the replica's acknowledgement: %d calls", a.count())
	}
	// The fresh mark was released: nothing is left in Redis.
	rc := primary.Client()
	defer rc.Close()
	if keys, err := rc.Keys(ctx, "*").Result(); err != nil || len(keys) != 0 {
		t.Fatalf("keys left after the refused claim: %v %v", keys, err)
	}

	replica.Restart() // same --replicaof: it syncs again
	eventually(t, "the replica to be back in sync", func() bool {
		info, err := replica.Info("replication")
		return err == nil && info["master_link_status"] == "up"
	})
	rep := mustDo(t, g, req, a.forward(req))
	if rep.Replayed || a.count() != 1 || c.recorded.Load() != 1 {
		t.Fatalf("with the replica back: %+v, %d calls, %d recorded", rep, a.count(), c.recorded.Load())
	}
	if again := mustDo(t, g, req, a.forward(req)); !again.Replayed || a.count() != 1 {
		t.Fatal("not replayed")
	}
	// The record is on the replica too.
	repc := replica.Client()
	defer repc.Close()
	if n, err := repc.Exists(ctx, st.recKey(req.Key.ID())).Result(); err != nil || n != 1 {
		t.Fatalf("record on the replica: %d %v", n, err)
	}
}

func TestRedisMinReplicasAckMoreThanReplicas(t *testing.T) {
	primary := redistest.Start(t)
	redistest.StartReplica(t, primary)
	st := newRedis(t, RedisOptions{URL: primary.URL(), MinReplicasAck: 2, ReplicaAckTimeout: 100 * time.Millisecond})
	ctx := context.Background()
	if _, err := st.Claim(ctx, "id", time.Minute); codeOf(err) != CodeStoreUnavailable || !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("2 acks wanted, 1 replica: %v", err)
	}
	ok := newRedis(t, RedisOptions{URL: primary.URL(), MinReplicasAck: 1, ReplicaAckTimeout: ackPatience})
	cl, err := ok.Claim(ctx, "id", time.Minute)
	if err != nil || cl.State != StateClaimed {
		t.Fatalf("1 ack wanted, 1 replica: %+v %v", cl, err)
	}
	// A Record whose WAIT falls short returns ErrNotReplicated, not an
	// refusal, and the record is written on the primary.
	err = st.Record(ctx, "id", cl.Token, Record{Fingerprint: "fp", Status: 200, Result: []byte(`{}`)}, time.Hour)
	var e *refusal.Refusal
	if !errors.Is(err, ErrNotReplicated) || errors.As(err, &e) {
		t.Fatalf("record short of acks: %v", err)
	}
	if after, err := ok.Claim(ctx, "id", time.Minute); err != nil || after.State != StateRecorded {
		t.Fatalf("after the record: %+v %v", after, err)
	}
}
