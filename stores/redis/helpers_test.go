package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/internal/testservers"
	"github.com/redis/go-redis/v9"
)

// topology is a kind of Redis deployment the tests run against.
type topology struct {
	name string
	// dial returns a new client with hooks, closed when tb ends. The
	// hooks go in before the client's first command: a Cluster client
	// loads the cluster's state in the background from then on, and
	// AddHook races with it.
	dial func(tb testing.TB, hooks ...redis.Hook) redis.UniversalClient
}

var topologies = []topology{
	{"single", dialSingle},
	{"cluster", dialCluster},
}

func dialSingle(tb testing.TB, hooks ...redis.Hook) redis.UniversalClient {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: testservers.Require(tb, testservers.RedisAddr), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = c.Close() })
	for _, h := range hooks {
		c.AddHook(h)
	}
	ping(tb, c)
	return c
}

func dialCluster(tb testing.TB, hooks ...redis.Hook) redis.UniversalClient {
	tb.Helper()
	addrs := strings.Split(testservers.Require(tb, testservers.RedisClusterAddrs), ",")
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = c.Close() })
	for _, h := range hooks {
		c.AddHook(h)
	}
	ping(tb, c)
	return c
}

func ping(tb testing.TB, c redis.UniversalClient) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		tb.Fatalf("Redis does not answer: %v", err)
	}
}

// testPrefix returns a key prefix no other test uses, and removes every
// key under it when tb ends, so tests share the servers without meeting.
func testPrefix(tb testing.TB, c redis.UniversalClient) string {
	tb.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "idemtest:" + hex.EncodeToString(b[:]) + ":"
	tb.Cleanup(func() { dropPrefix(tb, c, prefix) })
	return prefix
}

// dropPrefix deletes every key under prefix on every master.
func dropPrefix(tb testing.TB, c redis.UniversalClient, prefix string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(c, WithPrefix(prefix))
	if err != nil {
		tb.Errorf("cleaning up %s: %v", prefix, err)
		return
	}
	nodes, err := s.masters(ctx)
	if err != nil {
		tb.Errorf("cleaning up %s: %v", prefix, err)
		return
	}
	for _, node := range nodes {
		iter := node.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				tb.Errorf("cleaning up %s: %v", prefix, err)
				return
			}
		}
		if err := iter.Err(); err != nil {
			tb.Errorf("cleaning up %s: %v", prefix, err)
		}
	}
}

// newStore returns a Store on c under a prefix of its own.
func newStore(tb testing.TB, c redis.UniversalClient) *Store {
	tb.Helper()
	s, err := New(c, WithPrefix(testPrefix(tb, c)))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// t0 is a fixed time, as the Engine would pass it.
var t0 = time.Date(2031, 3, 14, 15, 9, 26, 535_897_932, time.UTC)

const (
	lease = 30 * time.Second
	ttl   = 24 * time.Hour
)

var fp = idem.Fingerprint{0: 'a', 31: 1}

func acquireAt(id idem.ID, token string, now time.Time) idem.Acquire {
	return idem.Acquire{ID: id, Fingerprint: fp, Token: token, Now: now,
		LeaseUntil: now.Add(lease), ExpiresAt: now.Add(ttl)}
}

func testContext(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	tb.Cleanup(cancel)
	return ctx
}
