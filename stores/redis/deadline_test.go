package redisstore

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/internal/acquireorder"
	"github.com/redis/go-redis/v9"
)

// TestDeadlineOfHungRedis: a Redis that accepts a command and never
// answers (the process stopped, a network black hole) costs a store call
// no more than its context allows, as the Engine's StoreTimeout and
// renewal deadlines need; the client's own read timeout (here a minute)
// does not decide.
func TestDeadlineOfHungRedis(t *testing.T) {
	p := startRedisProcess(t)
	c := redis.NewClient(&redis.Options{Addr: p.addr(), ReadTimeout: time.Minute, WriteTimeout: time.Minute,
		ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	// The same store leaning to read first, as in a storm of retries:
	// its Acquire starts with an HMGET.
	reads, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	for range acquireorder.Bound + 1 {
		reads.order.Saw(true)
	}
	ping(t, c)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) })

	id := idem.ID{Key: "hung"}
	calls := map[string]func(context.Context) error{
		"Acquire": func(ctx context.Context) error { _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); return err },
		"Acquire, reading first": func(ctx context.Context) error {
			_, _, err := reads.Acquire(ctx, acquireAt(id, "tok", t0))
			return err
		},
		"Renew": func(ctx context.Context) error { return s.Renew(ctx, id, "tok", t0) },
		"Complete": func(ctx context.Context) error {
			return s.Complete(ctx, id, "tok", idem.Completion{Response: exchange.Response{Status: 200}, CompletedAt: t0, ExpiresAt: t0})
		},
		"Release": func(ctx context.Context) error { return s.Release(ctx, id, "tok") },
		"Get":     func(ctx context.Context) error { _, err := s.Get(ctx, id); return err },
		"RenewBatch": func(ctx context.Context) error {
			return s.RenewBatch(ctx, []idem.Held{{ID: id, Token: "tok"}}, t0, make([]bool, 1))
		},
	}
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- call(ctx) }()
		select {
		case err := <-done:
			if err == nil || errors.Is(err, idem.ErrLockLost) || errors.Is(err, idem.ErrNotFound) {
				t.Errorf("%s on a hung Redis: %v, want a system error", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s on a hung Redis ignored its context's deadline for 30 s", name)
		}
		cancel()
	}
}
