package idempotency

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestNewRedisStoreModes(t *testing.T) {
	st := newRedis(t, RedisOptions{Mode: RedisModeSentinel,
		URL: "redis://:sentpw@127.0.0.1:26379/2?master_name=mymaster&addr=127.0.0.1:26380&password=primarypw", DialTimeout: time.Second})
	if _, ok := st.client.(*redis.Client); !ok {
		t.Fatalf("sentinel client %T", st.client)
	}
	if st.confirm != time.Second+DefaultRedisReadTimeout {
		t.Fatalf("confirm bound %v", st.confirm)
	}

	cl := newRedis(t, RedisOptions{Mode: RedisModeCluster, URL: "redis://:clusterpw@127.0.0.1:7000?addr=127.0.0.1:7001&read_timeout=3s"})
	cc, ok := cl.client.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("cluster client %T", cl.client)
	}
	o := cc.Options()
	if strings.Join(o.Addrs, ",") != "127.0.0.1:7000,127.0.0.1:7001" || o.Password != "clusterpw" ||
		o.ReadTimeout != 3*time.Second || o.DialTimeout != DefaultRedisDialTimeout || o.WriteTimeout != 3*time.Second ||
		!o.ContextTimeoutEnabled || o.MaxRetries != 2 {
		t.Fatalf("cluster options: addrs=%v read=%v dial=%v write=%v ctx=%v retries=%d", o.Addrs, o.ReadTimeout, o.DialTimeout, o.WriteTimeout, o.ContextTimeoutEnabled, o.MaxRetries)
	}

	single := newRedis(t, RedisOptions{Mode: RedisModeSingle, URL: "redis://127.0.0.1:6390/1"})
	if so := single.client.(*redis.Client).Options(); so.DB != 1 || so.Addr != "127.0.0.1:6390" {
		t.Fatalf("single: %s db %d", so.Addr, so.DB)
	}
}

func TestNewRedisStoreErrorsNameModeAndHidePasswords(t *testing.T) {
	for _, c := range []struct {
		mode, url, want string
	}{
		{"", "http://:s3cr3tpw@host/0", "redis mode single"},
		{RedisModeSingle, "redis://:s3cr3tpw@host:bad/0", "redis mode single"},
		{RedisModeSingle, "redis://:s3cr3tpw@host/0?addr=h2:1", "unexpected option"},
		{RedisModeSingle, "redis://u:s3cr%40tpw@host/0?nope=1", "unexpected option"},
		{RedisModeSentinel, "redis://:s3cr3tpw@host:26379/0?addr=h2:26379", "master_name"},
		{RedisModeSentinel, "redis://host:26379/0?master_name=m&password=s3cr3tpw&bogus=1", "redis mode sentinel"},
		{RedisModeSentinel, "redis://:s3cr3tpw@host:bad?master_name=m", "redis mode sentinel"},
		{RedisModeCluster, "redis://:s3cr3tpw@host:7000/3", "no database number"},
		{RedisModeCluster, "redis://:s3cr3tpw@host:7000?addr=nope", "redis mode cluster"},
		{"replicated", "redis://:s3cr3tpw@host/0", `redis mode "replicated"`},
	} {
		_, err := NewRedisStore(RedisOptions{Mode: c.mode, URL: c.url})
		if err == nil {
			t.Fatalf("%s %s: accepted", c.mode, c.url)
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s %s: %q does not say %q", c.mode, c.url, msg, c.want)
		}
		for _, secret := range []string{"s3cr3tpw", "s3cr@tpw", "s3cr%40tpw"} {
			if strings.Contains(msg, secret) {
				t.Errorf("%s %s: error leaks the password: %q", c.mode, c.url, msg)
			}
		}
	}
	if _, err := NewRedisStore(RedisOptions{MinReplicasAck: -1}); err == nil {
		t.Fatal("negative MinReplicasAck accepted")
	}
}
