package redisstore

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// silent drops go-redis's own log lines: the restart test makes it log
// every failed dial while Redis is down, and the tests check the errors
// the store returns instead.
type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(silent{})
	os.Exit(m.Run())
}
