package caddymodule

import (
	"context"
	"fmt"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// go-redis logs its own events (a Sentinel that does not answer, a pool
// connection with unread data, …) through one process-wide logger that
// writes plain text to stderr, in the middle of Caddy's JSON lines. It is
// routed here into Caddy's default logger, as JSON warn lines of the logger
// "go-redis", URLs redacted (docs/logging.md, "URLs").

func init() { redis.SetLogger(goRedisLogger) }

// goRedisLogger is the logger go-redis gets: Caddy's default logger.
var goRedisLogger = redisLogger{log: func() *zap.Logger { return caddy.Log().Named("go-redis") }}

// redisLogger is go-redis's logger interface over a zap logger, looked up
// at each line (the current config's default log).
type redisLogger struct{ log func() *zap.Logger }

// Printf writes one go-redis message as a warn line (go-redis logs only
// what went wrong), without its "redis: " prefix.
func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	l.log().Warn(redactURLsIn(strings.TrimSpace(msg)))
}
