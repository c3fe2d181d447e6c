package memstore

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// The store's bounds: how many records it holds in all and per scope, and
// how room held by expired records is reclaimed for a new key.
//
// Every record is counted once, when Acquire adds it (not when it replaces
// an expired or lapsed record of the same ID, which keeps its place), and
// uncounted once, after Release, Purge or a sweep has deleted it, so the
// counts never fall below the records the maps hold and never rise above
// the bounds.

// bounds holds the counts; it lives in Store.
type bounds struct {
	maxRecords int64
	quota      int64 // per scope; see WithMaxRecordsPerScope

	// count (all records) and unscoped (records of scope "") change on
	// every new key of an application without tenants: side by side, they
	// share one cache line.
	count    atomic.Int64
	unscoped atomic.Int64
	// tenants is how many non-empty scopes hold records: while it is 0
	// the empty scope has the whole store.
	tenants atomic.Int64
	scopes  [shardCount]scopeShard

	// sweepMu lets one sweep for room run at a time; sweepAfter is an
	// offset before which no record can have expired (the least moment
	// a record expires, or later by at most sweepGap), so a store kept
	// full by live records refuses without scanning.
	sweepMu    sync.Mutex
	sweepAfter atomic.Int64
}

// scopeShard counts the records of the non-empty scopes that hash to it.
// Its lock is taken last, under a record shard's lock, and nothing is
// locked while it is held.
//
// A scope's count lives in a slot whose number, with the shard's, makes
// the scopeRef each of its records keeps: a record then names its scope
// with a small integer, not a string the collector would have to follow,
// and is uncounted without hashing the scope again.
type scopeShard struct {
	mu    sync.Mutex
	slots []scopeSlot
	index map[string]uint32 // scope -> its slot
	free  []uint32          // slots of scopes that hold no records
}

type scopeSlot struct {
	name string
	n    int64
}

// scopeRef names the count of a record's scope: 0 is the empty scope, and
// 1 + slot*shardCount + shard a slot of s.scopes[shard]. Small for the
// first scopes, so a record's uvarint of it is mostly one byte.
type scopeRef = uint32

// sweepGap is the least time, by the clock of the requests, between two
// sweeps made for a refused key. A sweep scans every record; without the
// gap, a tenant hammering at its quota while the store's records expire
// one by one would buy a whole scan with each refused request. A record
// that expires within the gap after a sweep waits at most that long (or
// for the purger) before its room is reclaimed.
const sweepGap = int64(time.Second)

func (s *Store) scopeShardIndex(scope string) uint64 {
	return maphash.String(s.seed, scope) % shardCount
}

// reserve counts a new record of scope, unless the store or the scope is
// full, and returns the reference the record keeps to its scope's count.
// The caller holds the lock of the record's shard.
func (s *Store) reserve(scope string) (scopeRef, bool) {
	if scope == "" {
		limit := s.maxRecords
		if s.tenants.Load() > 0 {
			limit = s.quota
		}
		if !increment(&s.unscoped, limit) {
			return 0, false
		}
		if !increment(&s.count, s.maxRecords) {
			s.unscoped.Add(-1)
			return 0, false
		}
		return 0, true
	}
	shard := s.scopeShardIndex(scope)
	ss := &s.scopes[shard]
	ss.mu.Lock()
	defer ss.mu.Unlock()
	slot, found := ss.index[scope]
	n := int64(0)
	if found {
		n = ss.slots[slot].n
	}
	if n >= s.quota || !increment(&s.count, s.maxRecords) {
		return 0, false
	}
	if !found {
		if k := len(ss.free); k > 0 {
			slot = ss.free[k-1]
			ss.free = ss.free[:k-1]
		} else {
			slot = uint32(len(ss.slots))
			ss.slots = append(ss.slots, scopeSlot{})
		}
		ss.slots[slot].name = scope
		ss.index[scope] = slot
		s.tenants.Add(1)
	}
	ss.slots[slot].n++
	return 1 + slot*shardCount + uint32(shard), true
}

// unreserve uncounts a record that has been deleted.
func (s *Store) unreserve(ref scopeRef) {
	s.count.Add(-1)
	if ref == 0 {
		s.unscoped.Add(-1)
		return
	}
	ref--
	ss := &s.scopes[ref%shardCount]
	ss.mu.Lock()
	defer ss.mu.Unlock()
	slot := ref / shardCount
	sl := &ss.slots[slot]
	if sl.n--; sl.n == 0 {
		// A scope without records takes no memory beyond its slot:
		// scopes may be many and short-lived (one per bearer token).
		delete(ss.index, sl.name)
		sl.name = ""
		ss.free = append(ss.free, slot)
		s.tenants.Add(-1)
	}
}

// increment adds one to c unless that would take it past limit. A
// compare-and-swap, not an Add undone on failure, so a refusal never
// comes from another request's passing attempt.
func increment(c *atomic.Int64, limit int64) bool {
	for {
		n := c.Load()
		if n >= limit {
			return false
		}
		if c.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// noteExpiry keeps sweepAfter at or before m, the moment a record just
// written expires. Records are mostly written to expire later than every
// record before them, so this is mostly one atomic load.
func (s *Store) noteExpiry(m int64) {
	for {
		b := s.sweepAfter.Load()
		if m >= b || s.sweepAfter.CompareAndSwap(b, m) {
			return
		}
	}
}

// makeRoom deletes every record expired at now, for an Acquire that found
// the store or its scope full, unless none can have expired since the last
// sweep. A concurrent caller waits for the sweep under way and then
// retries its key with the room that sweep made.
func (s *Store) makeRoom(now int64) {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	if now < s.sweepAfter.Load() {
		return
	}
	// Records written while the sweep runs lower sweepAfter from here, so
	// one written into a shard already scanned is not forgotten.
	s.sweepAfter.Store(math.MaxInt64)
	least := int64(math.MaxInt64)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		s.sweep(sh, now, math.MaxInt, &least)
		sh.mu.Unlock()
	}
	next := int64(math.MaxInt64)
	if now < math.MaxInt64-sweepGap {
		next = now + sweepGap
	}
	s.noteExpiry(max(least, next))
}
