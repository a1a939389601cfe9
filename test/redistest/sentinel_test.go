package redistest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestSentinelFailover(t *testing.T) {
	s := StartSentinel(t)
	if got, err := s.MasterAddr(); err != nil || got != s.Primary().Addr() {
		t.Fatalf("master at start = %q %v, want %s", got, err, s.Primary().Addr())
	}
	if !strings.HasPrefix(s.FailoverURL(), "redis://"+s.SentinelServer().Addr()+"/0?master_name="+MasterName) {
		t.Fatalf("FailoverURL = %q", s.FailoverURL())
	}
	fo, err := redis.ParseFailoverURL(s.FailoverURL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewFailoverClient(fo)
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// WAIT 1 proves the replica acknowledges the primary's writes.
	if n, err := c.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d %v", n, err)
	}

	s.KillPrimary()
	if got := s.WaitFailover(30 * time.Second); got != s.Replica().Addr() {
		t.Fatalf("new primary %s, want the replica %s", got, s.Replica().Addr())
	}
	// The failover client finds the promoted replica, with the write.
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := c.Get(ctx, "k").Result()
		if err == nil {
			if v != "v" {
				t.Fatalf("after failover k = %q", v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("failover client after failover: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestConnectedClients(t *testing.T) {
	s := Start(t)
	base, err := s.ConnectedClients()
	if err != nil || base != 0 {
		t.Fatalf("idle server: %d clients, %v", base, err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: 3})
	defer c.Close()
	ps := c.Subscribe(context.Background(), "ch")
	defer ps.Close()
	if _, err := ps.Receive(context.Background()); err != nil { // confirmed: connected
		t.Fatal(err)
	}
	if n, err := s.ConnectedClients(); err != nil || n != 1 {
		t.Fatalf("with one subscriber: %d clients, %v", n, err)
	}
}

func TestStartSentinelFailsWithoutBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for name, start := range map[string]func(testing.TB){
		"StartSentinel":   func(tb testing.TB) { StartSentinel(tb) },
		"sentinelCommand": func(tb testing.TB) { sentinelCommand(tb) },
	} {
		f := &fatalTB{TB: t}
		func() {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(fatalStop); !ok {
						panic(r)
					}
				}
			}()
			start(f)
		}()
		if !strings.Contains(f.msg, "apt-get install -y redis-server") {
			t.Fatalf("%s: Fatalf message = %q, want the install hint", name, f.msg)
		}
		if name == "sentinelCommand" && !strings.Contains(f.msg, "redis-sentinel") {
			t.Fatalf("%s: Fatalf message = %q, want the redis-sentinel hint", name, f.msg)
		}
	}
}
