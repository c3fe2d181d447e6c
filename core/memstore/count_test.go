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
	"github.com/idemkit/idemkit/core/exchange"
)

// recount compares the store's counts with the records its shards hold,
// after checking each shard's index against its arena. The caller makes
// sure no operation runs meanwhile.
func (s *Store) recount() error {
	held := map[string]int64{}
	total := int64(0)
	for i := range s.shards {
		sh := &s.shards[i]
		if err := s.checkShard(sh); err != nil {
			return fmt.Errorf("shard %d: %w", i, err)
		}
		for id := range sh.flights {
			held[id.Scope]++
			total++
		}
		for _, ch := range sh.arena.chunks {
			for off := 0; off < len(ch.buf); {
				size, live := recordSize(ch.buf[off:])
				if live {
					name, err := s.scopeName(unpackRecord(ch.buf[off:]).scope)
					if err != nil {
						return err
					}
					held[name]++
					total++
				}
				off += size
			}
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
		ss := &s.scopes[i]
		for scope, slot := range ss.index {
			if c := ss.slots[slot].n; c != held[scope] {
				return fmt.Errorf("scope %q counted %d, holds %d", scope, c, held[scope])
			}
			if ss.slots[slot].name != scope || &s.scopes[s.scopeShardIndex(scope)] != ss {
				return fmt.Errorf("scope %q counted in the wrong slot or shard", scope)
			}
			delete(held, scope)
		}
	}
	if len(held) > 0 {
		return fmt.Errorf("scopes holding records but not counted: %v", held)
	}
	return nil
}

// scopeName is the scope a record's scopeRef counts it in.
func (s *Store) scopeName(ref scopeRef) (string, error) {
	if ref == 0 {
		return "", nil
	}
	ss := &s.scopes[(ref-1)%shardCount]
	slot := (ref - 1) / shardCount
	if int(slot) >= len(ss.slots) || ss.slots[slot].n == 0 {
		return "", fmt.Errorf("a record refers to scope slot %d of shard %d, which counts nothing", slot, (ref-1)%shardCount)
	}
	return ss.slots[slot].name, nil
}

// checkShard checks that sh's index holds exactly its live completed
// records, each found from its digest, that each chunk's live bytes are
// those of its live records, and that the arena's size is its chunks'.
func (s *Store) checkShard(sh *shard) error {
	live, size := 0, 0
	for ci, ch := range sh.arena.chunks {
		size += cap(ch.buf)
		bytes := 0
		for off := 0; off < len(ch.buf); {
			n, ok := recordSize(ch.buf[off:])
			if ok {
				live++
				bytes += n
				d := recordDigest(ch.buf[off:])
				_, loc, found := sh.find(s.tagOf(d), d)
				if want := uint32(ci)<<16 | uint32(off); !found || loc != want {
					return fmt.Errorf("record at chunk %d offset %d: index finds %v at %#x", ci, off, found, loc)
				}
			}
			off += n
		}
		if bytes != ch.live {
			return fmt.Errorf("chunk %d: %d live bytes counted, %d held", ci, ch.live, bytes)
		}
	}
	if live != sh.index.n {
		return fmt.Errorf("index holds %d records, arena %d", sh.index.n, live)
	}
	used := 0
	for _, v := range sh.index.slots {
		if v != 0 {
			used++
		}
	}
	if used != sh.index.n {
		return fmt.Errorf("index counts %d records in %d used slots", sh.index.n, used)
	}
	if size != sh.arena.size {
		return fmt.Errorf("arena size %d, chunks %d", sh.arena.size, size)
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
					if err == nil && outcome != idem.AcquireExisting {
						held[id] = token
					}
					if outcome == idem.AcquireTookOver {
						tookOver.Add(1)
					}
				case op < 7:
					err = s.Complete(ctx, id, held[id], idem.Completion{Response: exchange.Response{Status: 201},
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
