package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/supervaize/supervaizer-sidecar/refusal"
	"github.com/supervaize/supervaizer-sidecar/test/redistest"
)

func TestRedisTwoReplicasForwardOnce(t *testing.T) {
	srv := redistest.Start(t)
	f := loadFixture(t)
	a := newAgent(f.Result)
	release := a.blocking()
	defer release()

	c := newCounters() // shared: counts the waits of both replicas
	g1 := New(newRedis(t, RedisOptions{URL: srv.URL()}), Options{Observer: c.observer()})
	g2 := New(newRedis(t, RedisOptions{URL: srv.URL()}), Options{Observer: c.observer()})

	const n = 50
	results := make([]<-chan doResult, n)
	for i := 0; i < n; i++ {
		g := g1
		if i%2 == 1 {
			g = g2
		}
		req := f.request(t, itoa(i))
		results[i] = goDo(context.Background(), g, req, a.forward(req))
	}
	a.waitStarted(t, 1)
	waitWaiters(t, c.waitCh, n-1)
	release()

	awaitSameResults(t, results, "replica Do")
	if a.count() != 1 {
		t.Fatalf("forward called %d times across two replicas, want 1", a.count())
	}
	if c.recorded.Load() != 1 || c.replay.Load() != n-1 {
		t.Fatalf("recorded=%d replay=%d", c.recorded.Load(), c.replay.Load())
	}
}

func TestRedisStoppedFailsClosedThenRecovers(t *testing.T) {
	srv := redistest.Start(t)
	f := loadFixture(t)
	a := newAgent(f.Result)
	c := newCounters()
	st := newRedis(t, RedisOptions{URL: srv.URL(), DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond})
	g := New(st, Options{Observer: c.observer()})
	ctx := context.Background()

	recorded := withKey(f.request(t, `1`), "before-stop")
	mustDo(t, g, recorded, a.forward(recorded))
	if err := st.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	srv.Stop()
	for _, req := range []Request{withKey(f.request(t, `2`), "while-down"), recorded} {
		_, err := g.Do(ctx, req, a.forward(req))
		var e *refusal.Refusal
		if !errors.As(err, &e) || e.Code != CodeStoreUnavailable {
			t.Fatalf("Do with Redis down: %v", err)
		}
		if strings.Contains(e.Message, srv.Addr()) {
			t.Fatalf("client message leaks the store address: %q", e.Message)
		}
	}
	if a.count() != 1 {
		t.Fatalf("forwarded without the guarantee: %d forwards", a.count())
	}
	if err := st.Ping(ctx); codeOf(err) != CodeStoreUnavailable {
		t.Fatalf("Ping with Redis down: %v", err)
	}
	if errs := c.errs(); len(errs) < 2 || errs[0].op != "claim" {
		t.Fatalf("observer store errors: %v", errs)
	}

	srv.Restart()
	down := withKey(f.request(t, `3`), "while-down")
	var rep Reply
	eventually(t, "the store to work again", func() bool {
		var err error
		rep, err = g.Do(ctx, down, a.forward(down))
		if err != nil && codeOf(err) != CodeStoreUnavailable {
			t.Fatalf("after restart: %v", err)
		}
		return err == nil
	})
	if rep.Replayed || a.count() != 2 {
		t.Fatalf("after restart: %+v, %d forwards", rep, a.count())
	}
	if again := mustDo(t, g, down, a.forward(down)); !again.Replayed {
		t.Fatal("not recorded after restart")
	}
	if err := st.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRedisDownAtStart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now

	st := newRedis(t, RedisOptions{URL: "redis://" + addr + "/0", DialTimeout: 300 * time.Millisecond})
	f := loadFixture(t)
	a := newAgent(f.Result)
	g := New(st, Options{})
	req := f.request(t, `1`)
	if _, err := g.Do(context.Background(), req, a.forward(req)); codeOf(err) != CodeStoreUnavailable {
		t.Fatalf("err = %v", err)
	}
	if a.count() != 0 {
		t.Fatal("forwarded with no store")
	}
}

func TestRedisStoppedWhileWaiting(t *testing.T) {
	srv := redistest.Start(t)
	f := loadFixture(t)
	a := newAgent(f.Result)
	release := a.blocking()
	defer release()
	ch, cw := newCounters(), newCounters()
	opts := RedisOptions{URL: srv.URL(), DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond}
	gh := New(newRedis(t, opts), Options{Observer: ch.observer()})
	gw := New(newRedis(t, opts), Options{Observer: cw.observer()})

	req := f.request(t, `1`)
	holder := goDo(context.Background(), gh, req, a.forward(req))
	a.waitStarted(t, 1)
	wreq := f.request(t, `2`)
	waiter := goDo(context.Background(), gw, wreq, a.forward(wreq))
	waitWaiters(t, cw.waitCh, 1)

	srv.Stop()
	w := await(t, waiter, "waiter")
	if codeOf(w.err) != CodeStoreUnavailable {
		t.Fatalf("waiter with Redis gone: %v", w.err)
	}
	// The holder's agent call completes; its answer is returned although it
	// cannot be recorded.
	release()
	h := await(t, holder, "holder")
	if h.err != nil || h.reply.Status != 200 {
		t.Fatalf("holder: %+v %v", h.reply, h.err)
	}
	found := false
	for _, e := range ch.errs() {
		if e.op == "record" {
			found = true
		}
	}
	if !found {
		t.Fatalf("record failure not reported: %v", ch.errs())
	}
	if a.count() != 1 {
		t.Fatalf("forwards = %d", a.count())
	}
}

func TestRedisLayoutAndTTLs(t *testing.T) {
	srv := redistest.Start(t)
	f := loadFixture(t)
	a := newAgent(f.Result)
	st := newRedis(t, RedisOptions{URL: srv.URL(), KeyPrefix: "test:idem:"})
	g := New(st, Options{TTL: time.Hour})
	req := f.request(t, `1`)
	rep := mustDo(t, g, req, a.forward(req))

	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	ctx := context.Background()
	keys, err := rc.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	id := req.Key.ID()
	recKey := "test:idem:{" + id + "}:rec"
	tag := groupTag(req.Key.WorkspaceID)
	expKey, sizeKey := "test:idem:{ws:"+tag+"}:exp", "test:idem:{ws:"+tag+"}:size"
	slices.Sort(keys)
	if want := []string{recKey, expKey, sizeKey}; !slices.Equal(keys, want) {
		t.Fatalf("keys = %v, want %v (the lock must be gone; the workspace's share)", keys, want)
	}
	raw, _ := rc.Get(ctx, recKey).Bytes()
	if size, _ := rc.HGet(ctx, sizeKey, id).Int64(); size != int64(len(raw)+len(id)) {
		t.Fatalf("reserved %d bytes, want %d", size, len(raw)+len(id))
	}
	if total, _ := rc.HGet(ctx, sizeKey, "total").Int64(); total != int64(len(raw)+len(id)) {
		t.Fatalf("workspace total %d", total)
	}
	for _, k := range []string{expKey, sizeKey} {
		if p, _ := rc.PTTL(ctx, k).Result(); p <= time.Hour-time.Minute || p > time.Hour+storeOpTimeout {
			t.Fatalf("%s PTTL %v, want the record's TTL plus the margin", k, p)
		}
	}
	for _, k := range keys {
		for _, raw := range []string{req.Key.IdempotencyKey, req.Key.WorkspaceID} {
			if strings.Contains(k, raw) {
				t.Fatalf("raw key material %q in %q", raw, k)
			}
		}
	}
	pttl, err := rc.PTTL(ctx, recKey).Result()
	if err != nil || pttl <= 0 || pttl > time.Hour {
		t.Fatalf("record PTTL = %v %v", pttl, err)
	}
	raw, err = rc.Get(ctx, recKey).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	var w wireRecord
	if err := json.Unmarshal(raw, &w); err != nil || w.Fingerprint != req.Fingerprint || w.V != 1 {
		t.Fatalf("stored record %s: %v", raw, err)
	}
	if !bytes.Equal(w.Result, decode(t, rep.Body).Result) {
		t.Fatalf("stored result %s differs from the answer", w.Result)
	}

	// While in flight: the lock holds a token with the lock TTL.
	cl, err := st.Claim(ctx, "some-id", 90*time.Second)
	if err != nil || cl.State != StateClaimed {
		t.Fatal(cl, err)
	}
	lockKey := "test:idem:{some-id}:lock"
	if v, _ := rc.Get(ctx, lockKey).Result(); v != cl.Token || len(v) != 65 || tagOfToken(v) != groupTag("") {
		t.Fatalf("lock value %q, token %q", v, cl.Token)
	}
	if p, _ := rc.PTTL(ctx, lockKey).Result(); p <= 0 || p > 90*time.Second {
		t.Fatalf("lock PTTL %v", p)
	}
}

func TestRedisUndecodableRecordFailsClosed(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedis(t, RedisOptions{URL: srv.URL()})
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	ctx := context.Background()
	if err := rc.Set(ctx, DefaultRedisKeyPrefix+"{x}:rec", "not json", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, "x", time.Minute); codeOf(err) != CodeStoreUnavailable {
		t.Fatalf("err = %v", err)
	}
}

func TestRedisRetriedScriptsAreIdempotent(t *testing.T) {
	// go-redis may resend a script after a lost reply; the same token must
	// not turn a success into a failure.
	srv := redistest.Start(t)
	st := newRedis(t, RedisOptions{URL: srv.URL()})
	ctx := context.Background()
	id := "retry"
	token := "0123456789abcdef0123456789abcdef"
	keys := []string{st.recKey(id), st.lockKey(id)}
	for i := 0; i < 2; i++ {
		res, err := claimScript.Run(ctx, st.client, keys, token, "60000").Slice()
		if err != nil || res[0].(int64) != 2 {
			t.Fatalf("claim attempt %d: %v %v", i, res, err)
		}
	}
	raw := `{"v":1,"fp":"f","status":200,"result":{}}`
	for i := 0; i < 2; i++ {
		n, err := recordScript.Run(ctx, st.client, keys, token, raw, "60000", st.channel(id)).Int64()
		if err != nil || n != 1 {
			t.Fatalf("record attempt %d: %v %v", i, n, err)
		}
	}
	// A different record with a stale token is still refused.
	if n, _ := recordScript.Run(ctx, st.client, keys, token, `{"v":1,"fp":"g","status":200,"result":{}}`, "60000", st.channel(id)).Int64(); n != 0 {
		t.Fatal("stale token overwrote the record")
	}
}

func TestNewRedisStoreOptions(t *testing.T) {
	if _, err := NewRedisStore(RedisOptions{URL: "http://nope"}); err == nil {
		t.Fatal("bad URL accepted")
	}
	st, err := NewRedisStore(RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	o := st.client.(*redis.Client).Options()
	if o.Addr != "127.0.0.1:6379" || o.DB != 0 || st.prefix != DefaultRedisKeyPrefix ||
		o.DialTimeout != DefaultRedisDialTimeout || o.ReadTimeout != DefaultRedisReadTimeout || o.WriteTimeout != DefaultRedisReadTimeout {
		t.Fatalf("defaults: addr=%s db=%d prefix=%s dial=%v read=%v write=%v", o.Addr, o.DB, st.prefix, o.DialTimeout, o.ReadTimeout, o.WriteTimeout)
	}
	st2, err := NewRedisStore(RedisOptions{URL: "redis://127.0.0.1:6390/3?read_timeout=7s", DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	o2 := st2.client.(*redis.Client).Options()
	if o2.DB != 3 || o2.ReadTimeout != 7*time.Second || o2.DialTimeout != time.Second || !strings.HasSuffix(o2.Addr, ":"+strconv.Itoa(6390)) {
		t.Fatalf("URL options: %+v", o2)
	}
}

func TestRedisCloseFailsClosed(t *testing.T) {
	srv := redistest.Start(t)
	st, err := NewRedisStore(RedisOptions{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	f := loadFixture(t)
	a := newAgent(f.Result)
	req := f.request(t, `1`)
	_, err = New(st, Options{}).Do(context.Background(), req, a.forward(req))
	if codeOf(err) != CodeStoreUnavailable || !errors.Is(err, ErrClosed) || a.count() != 0 {
		t.Fatalf("after Close: %v", err)
	}
}
