package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// BenchmarkStore measures each store step on a single node beside a
// baseline of the same number of plain Redis commands on the same client,
// so that what remains is the scripts' own cost: the round trips are the
// same. Run it with
//
//	go test ./stores/redis -run XXX -bench . -benchmem
//
// after `source scripts/redis-servers.sh && start_redis`.
func BenchmarkStore(b *testing.B) {
	c := dialSingle(b)
	s := newStore(b, c)
	ctx := context.Background() // no deadline: -count and -benchtime decide how long it runs
	body := bytes.Repeat([]byte("x"), 1024)
	resp := exchange.Response{Status: 201, Header: []exchange.HeaderField{{Name: "Content-Type", Values: []string{"application/json"}}}, Body: body}
	now := time.Now()
	// Keys of their own for every run of a sub-benchmark, so that each
	// run measures new keys.
	fresh := func(what string, i int) string { return fmt.Sprintf("%s-%d-%d", what, now.UnixNano(), i) }

	// A new key: Acquire, then Complete (two scripts), beside two HSETs.
	b.Run("first/store", func(b *testing.B) {
		now = time.Now()
		for i := range b.N {
			id := idem.ID{Scope: "bench", Key: fresh("first", i)}
			if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", now)); err != nil {
				b.Fatal(err)
			}
			if err := s.Complete(ctx, id, "tok", idem.Completion{Response: resp, CompletedAt: now, ExpiresAt: now.Add(ttl)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("first/raw-2-commands", func(b *testing.B) {
		now = time.Now()
		for i := range b.N {
			k := s.Key(idem.ID{Scope: "bench", Key: fresh("raw-first", i)})
			if err := c.HSet(ctx, k, "s", "1", "f", fp[:], "t", "tok").Err(); err != nil {
				b.Fatal(err)
			}
			if err := c.HSet(ctx, k, "s", "2", "r", body).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})

	// A retry of a completed key: Acquire answers the record (after the
	// first retries, one HMGET returning the 1 KiB response, see
	// Store.Acquire), beside one HGETALL of as much.
	replayed := idem.ID{Scope: "bench", Key: "replayed"}
	if _, _, err := s.Acquire(ctx, acquireAt(replayed, "tok", now)); err != nil {
		b.Fatal(err)
	}
	if err := s.Complete(ctx, replayed, "tok", idem.Completion{Response: resp, CompletedAt: now, ExpiresAt: now.Add(ttl)}); err != nil {
		b.Fatal(err)
	}
	b.Run("replay/store", func(b *testing.B) {
		for range b.N {
			if _, o, err := s.Acquire(ctx, acquireAt(replayed, "tok-2", now)); err != nil || o != idem.AcquireExisting {
				b.Fatal(o, err)
			}
		}
	})
	b.Run("replay/raw-1-command", func(b *testing.B) {
		k := s.Key(replayed)
		for range b.N {
			if err := c.HGetAll(ctx, k).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})

	// A renewal pass over 100 running handlers (one script on a single
	// node), beside one pipeline of 100 HSETs.
	const running = 100
	held := make([]idem.Held, running)
	for i := range held {
		held[i] = idem.Held{ID: idem.ID{Scope: "bench", Key: fmt.Sprint("held-", i)}, Token: "tok"}
		if _, _, err := s.Acquire(ctx, acquireAt(held[i].ID, "tok", now)); err != nil {
			b.Fatal(err)
		}
	}
	lost := make([]bool, running)
	b.Run("renew-100/store", func(b *testing.B) {
		for i := range b.N {
			if err := s.RenewBatch(ctx, held, now.Add(lease+time.Duration(i)), lost); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("renew-100/raw-100-pipelined", func(b *testing.B) {
		for i := range b.N {
			p := c.Pipeline()
			for _, h := range held {
				p.HSet(ctx, s.Key(h.ID), "ls", now.Unix()+int64(i), "ln", 0)
			}
			if _, err := p.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
