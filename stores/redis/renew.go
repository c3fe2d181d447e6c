package redisstore

import (
	"context"
	"fmt"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/redis/go-redis/v9"
)

// maxBatchScript bounds the leases one script renews, so that a renewal
// pass never holds a Redis node for long (a script runs alone).
const maxBatchScript = 1000

// RenewBatch implements idem.BatchRenewer. Each lease's renewal is atomic
// and fenced by its token exactly as Renew is; the batch as a whole is not
// one transaction.
//
// On a single node (or Sentinel) the leases go in one script per
// thousand, all sent at once: one round trip. On a Cluster or a Ring each
// lease has a script of its own (its record's slot is its own), all in one
// pipeline that go-redis splits by node: one round trip to each node that
// holds some of them, all at once. A plain client talking to a Cluster
// node gets a script per lease too: the server refuses one whose keys are
// on several slots.
func (s *Store) RenewBatch(ctx context.Context, held []idem.Held, leaseUntil time.Time, lost []bool) error {
	if len(lost) != len(held) {
		return fmt.Errorf("redisstore: renew batch: %d leases but %d results", len(held), len(lost))
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: renew batch: %w", err)
	}
	if len(held) == 0 {
		return nil
	}
	perKey, err := s.oneKeyPerScript(ctx)
	if err != nil {
		return fmt.Errorf("redisstore: renew batch: %w", err)
	}
	size := maxBatchScript
	if perKey {
		size = 1
	}
	groups := make([]*renewal, 0, (len(held)+size-1)/size)
	for from := 0; from < len(held); from += size {
		groups = append(groups, s.renewal(held, from, min(from+size, len(held)), leaseUntil))
	}
	s.send(ctx, groups)
	for _, g := range groups {
		renewed, err := g.cmd.Int64Slice()
		if err == nil && len(renewed) != len(g.keys) {
			err = fmt.Errorf("%d answers for %d leases", len(renewed), len(g.keys))
		}
		if err != nil {
			return fmt.Errorf("redisstore: renew batch: %w", err)
		}
		for i, n := range renewed {
			lost[g.from+i] = n != 1
		}
	}
	return nil
}

// renewal is one script of a batch: the leases held[from:from+len(keys)].
type renewal struct {
	from int
	keys []string
	args []any
	cmd  *redis.Cmd
}

// renewal returns the script renewing held[from:to] until leaseUntil.
func (s *Store) renewal(held []idem.Held, from, to int, leaseUntil time.Time) *renewal {
	g := &renewal{from: from, keys: make([]string, 0, to-from), args: make([]any, 0, 2+to-from)}
	g.args = append(g.args, leaseUntil.Unix(), leaseUntil.Nanosecond())
	for _, h := range held[from:to] {
		g.keys = append(g.keys, s.Key(h.ID))
		g.args = append(g.args, h.Token)
	}
	return g
}

// send runs gs in one pipeline, and again, in full, those a node refused
// because it did not know the script yet (its first use there, or a
// restart since): NOSCRIPT means it did not run.
func (s *Store) send(ctx context.Context, gs []*renewal) {
	pipe := func(gs []*renewal, eval bool) {
		_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, g := range gs {
				if eval {
					g.cmd = renewBatchScript.Eval(ctx, p, g.keys, g.args...)
				} else {
					g.cmd = renewBatchScript.EvalSha(ctx, p, g.keys, g.args...)
				}
			}
			return nil
		})
	}
	pipe(gs, false)
	var unknown []*renewal
	for _, g := range gs {
		if redis.HasErrorPrefix(g.cmd.Err(), "NOSCRIPT") {
			unknown = append(unknown, g)
		}
	}
	if len(unknown) > 0 {
		pipe(unknown, true)
	}
}
