package memstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// recount compares the store's counts with the records its maps hold. The
// caller makes sure no operation runs meanwhile.
func (s *Store) recount() error {
	held := map[string]int64{}
	total := int64(0)
	for i := range s.shards {
		for id := range s.shards[i].records {
			held[id.Scope]++
			total++
		}
	}
	if c := s.count.Load(); c != total {
		return fmt.Errorf("count %d, records %d", c, total)
	}
	if c := s.unscoped.Load(); c != held[""] {
		return fmt.Errorf("unscoped %d, records of the empty scope %d", c, held[""])
	}
	delete(held, "")
	if c := s.tenants.Load(); c != int64(len(held)) {
		return fmt.Errorf("tenants %d, non-empty scopes holding records %d", c, len(held))
	}
	for i := range s.scopes {
		for scope, c := range s.scopes[i].counts {
			if c != held[scope] {
				return fmt.Errorf("scope %q counted %d, holds %d", scope, c, held[scope])
			}
			if s.scopeShard(scope) != &s.scopes[i] {
				return fmt.Errorf("scope %q counted in the wrong shard", scope)
			}
			delete(held, scope)
		}
	}
	if len(held) > 0 {
		return fmt.Errorf("scopes holding records but not counted: %v", held)
	}
	return nil
}

// Many goroutines acquire, complete, renew, release, take over and purge
// keys of a few scopes in a small store whose clock runs so fast that
// records expire and leases lapse all the time; at the end, the counts
// match the records, and at no time did the store or a scope hold more than
// its bound.
func TestCountsUnderConcurrentChurn(t *testing.T) {
	const maxRecords, quota, workers, ops = 40, 8, 8, 3000
	ctx := context.Background()
	s := New(WithMaxRecords(maxRecords), WithMaxRecordsPerScope(quota), WithPurgeInterval(0))
	scopes := []string{"", "a", "b", "c", "d", "e", "f"}
	var clock atomic.Int64 // milliseconds after at
	at := time.Date(2031, 3, 14, 0, 0, 0, 0, time.UTC)
	var refused, tookOver, purged atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			held := map[idem.ID]string{}
			for i := range ops {
				now := at.Add(time.Duration(clock.Add(rng.Int64N(10))) * time.Millisecond)
				id := idem.ID{Scope: scopes[rng.IntN(len(scopes))], Key: fmt.Sprint(rng.IntN(12))}
				token := fmt.Sprint(w, "-", i)
				var err error
				switch op := rng.IntN(10); {
				case op < 5:
					// Leases of 50 ms and expiries of 500 ms: retries
					// find keys held, lapsed and expired.
					var outcome idem.AcquireOutcome
					_, outcome, err = s.Acquire(ctx, idem.Acquire{ID: id, Token: token, Now: now,
						LeaseUntil: now.Add(50 * time.Millisecond), ExpiresAt: now.Add(500 * time.Millisecond)})
					if err == nil && outcome != idem.Existing {
						held[id] = token
					}
					if outcome == idem.TookOver {
						tookOver.Add(1)
					}
				case op < 7:
					err = s.Complete(ctx, id, held[id], idem.Completion{Response: idem.Response{Status: 201},
						CompletedAt: now, ExpiresAt: now.Add(time.Duration(rng.IntN(500)) * time.Millisecond)})
				case op < 8:
					err = s.Release(ctx, id, held[id])
				case op < 9:
					err = s.Renew(ctx, id, held[id], now.Add(100*time.Millisecond))
				default:
					var n int
					n, err = s.Purge(ctx, now, 1+rng.IntN(5))
					purged.Add(int64(n))
				}
				switch {
				case errors.Is(err, idem.ErrStoreFull):
					refused.Add(1)
				case err != nil && !errors.Is(err, idem.ErrLockLost):
					t.Error(err)
					return
				}
				if n := s.Len(); n > maxRecords {
					t.Errorf("store holds %d records, bound %d", n, maxRecords)
					return
				}
				if n := s.LenScope(id.Scope); id.Scope != "" && n > quota {
					t.Errorf("scope %q holds %d records, quota %d", id.Scope, n, quota)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := s.recount(); err != nil {
		t.Fatal(err)
	}
	if refused.Load() == 0 || tookOver.Load() == 0 || purged.Load() == 0 {
		t.Fatalf("refused %d, took over %d, purged %d: the churn missed a path", refused.Load(), tookOver.Load(), purged.Load())
	}
	t.Logf("refused %d, took over %d, purged %d", refused.Load(), tookOver.Load(), purged.Load())
	// Purging everything leaves nothing counted, and no scope behind.
	if _, err := s.Purge(ctx, at.Add(24*time.Hour), maxRecords); err != nil {
		t.Fatal(err)
	}
	if err := s.recount(); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 0 || s.tenants.Load() != 0 {
		t.Fatalf("after purging everything: Len %d, tenants %d", s.Len(), s.tenants.Load())
	}
}
