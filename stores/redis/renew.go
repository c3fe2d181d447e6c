package redisstore

import (
	"context"
	"fmt"
	"sync"
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
// thousand, all sent at once: one round trip. On a Cluster each lease has
// a script of its own (its record's slot is its own), grouped by the
// master that holds it: one pipeline per master, all at once, each
// standing alone, so that a master that fails or stops answering takes
// only its own leases with it. On a Ring the scripts go in one pipeline
// that go-redis splits by shard. A plain client talking to a Cluster node
// gets a script per lease too: the server refuses one whose keys are on
// several slots.
//
// The error reports a failure of a node. When some nodes renewed their
// leases and others failed, the error has a method Unrenewed(i int) bool,
// true for each held[i] whose renewal is not known to have happened (its
// node failed): for every other lease lost[i] is as if RenewBatch had
// returned nil. When no node answered, the error has no such method:
// nothing is known to be renewed.
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
	if c := s.topo.cluster; c != nil {
		err = s.renewPerMaster(ctx, c, groups)
	} else {
		s.send(ctx, groups)
	}
	if err != nil {
		return fmt.Errorf("redisstore: renew batch: %w", err)
	}
	return settle(groups, len(held), lost)
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

// renewPerMaster sends the scripts of each master of c in a pipeline of
// their own, all at once. In one pipeline for all, a master that did not
// answer would fail every script: go-redis retries the failed part of a
// pipeline, and if the context ends meanwhile it sets that error on every
// command that has none, those that succeeded included.
func (s *Store) renewPerMaster(ctx context.Context, c clusterClient, gs []*renewal) error {
	byMaster := make(map[*redis.Client][]*renewal)
	for _, g := range gs {
		node, err := c.MasterForKey(ctx, g.keys[0])
		if err != nil {
			return err
		}
		byMaster[node] = append(byMaster[node], g)
	}
	var wg sync.WaitGroup
	for _, mine := range byMaster {
		wg.Go(func() { s.send(ctx, mine) })
	}
	wg.Wait()
	return nil
}

// settle reads the answers of gs, which renewed n leases, into lost, and
// returns the batch's error (see RenewBatch).
func settle(gs []*renewal, n int, lost []bool) error {
	var (
		first     error
		unrenewed []bool
		failed    int
	)
	for _, g := range gs {
		renewed, err := g.cmd.Int64Slice()
		if err == nil && len(renewed) != len(g.keys) {
			err = fmt.Errorf("%d answers for %d leases", len(renewed), len(g.keys))
		}
		if err != nil {
			if first == nil {
				first = err
				unrenewed = make([]bool, n)
			}
			for i := range g.keys {
				unrenewed[g.from+i] = true
			}
			failed += len(g.keys)
			continue
		}
		for i, r := range renewed {
			lost[g.from+i] = r != 1
		}
	}
	switch {
	case failed == 0:
		return nil
	case failed == n:
		return fmt.Errorf("redisstore: renew batch: %w", first)
	}
	return &partialRenewal{err: first, unrenewed: unrenewed, failed: failed}
}

// partialRenewal is RenewBatch's error when only some of its leases are
// not known to be renewed.
type partialRenewal struct {
	err       error // the first failure
	unrenewed []bool
	failed    int
}

var _ idem.PartialRenewal = (*partialRenewal)(nil)

func (e *partialRenewal) Error() string {
	return fmt.Sprintf("redisstore: renew batch: %d of %d leases not renewed: %v", e.failed, len(e.unrenewed), e.err)
}

func (e *partialRenewal) Unwrap() error { return e.err }

// Unrenewed reports whether the renewal of held[i] of the batch is not
// known to have happened; for every other lease the batch's lost[i] holds.
func (e *partialRenewal) Unrenewed(i int) bool { return e.unrenewed[i] }
