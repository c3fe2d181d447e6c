package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// redisLog takes the Redis client library's own messages (a failed dial,
// a connection dropped from its pool) into the demo's log at Debug. Its
// default writes each one to stderr: during an outage that is a line per
// request, while the failures it describes already reach the log as
// idemkit's store-error events, a few lines a minute.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}

// LogRedisTo routes the Redis client library's messages to log. The
// library has one logger for the whole process, so the process's main
// sets it once.
func LogRedisTo(log *slog.Logger) { redis.SetLogger(redisLog{log}) }
