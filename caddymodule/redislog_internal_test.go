package caddymodule

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestGoRedisLogsThroughZap: a Sentinel that does not answer makes go-redis
// log; the line reaches the zap logger (not go-redis's plain-text stderr
// logger), URLs redacted.
func TestGoRedisLogsThroughZap(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	redis.SetLogger(redisLogger{log: func() *zap.Logger { return zap.New(core) }})
	t.Cleanup(func() { redis.SetLogger(goRedisLogger) })

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{addr},
		DialTimeout: 500 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Ping(ctx).Err()
	if logs.FilterMessageSnippet("sentinel").Len() == 0 {
		t.Fatalf("go-redis's sentinel failure did not reach the zap logger: %v", logs.All())
	}

	redisLogger{log: func() *zap.Logger { return zap.New(core) }}.Printf(ctx, "redis: %s", fmt.Sprint("dial redis://u:pw@h:1/0?password=x failed"))
	last := logs.All()[logs.Len()-1]
	if last.Level != zapcore.WarnLevel || strings.Contains(last.Message, "pw") || strings.HasPrefix(last.Message, "redis: ") ||
		!strings.Contains(last.Message, "redis://h:1/0?password=REDACTED") {
		t.Errorf("go-redis line = %s %q", last.Level, last.Message)
	}
}
