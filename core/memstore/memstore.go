// Package memstore is the in-memory idem.Store: the embedded default for a
// single process, and the store tests use. Records live in sharded maps, so
// requests for different keys rarely contend; a background purger deletes
// expired records until Close.
//
// The store is bounded twice, so that memory stays bounded and no tenant can
// lock the others out:
//
//   - WithMaxRecords (default 100,000) bounds the records of the whole store.
//   - WithMaxRecordsPerScope (default a tenth of that) bounds the records of
//     each scope (idem.ID.Scope, the tenant). The empty scope, that of an
//     application without tenants, is under it only while other scopes hold
//     records, so such an application has the whole store.
//
// A new key that finds either bound reached fails with idem.ErrStoreFull,
// once the records that have expired are swept to make room; a live record
// is never evicted, since a retry may still need it. The Engine answers the
// request 429 (problem type store-full) with Retry-After and does not run
// its handler; keys already held are replayed or answered 409 as usual, and
// other tenants keep getting new keys.
//
// Leases and expiry are reckoned on the monotonic clock whenever the times
// the Engine passes carry a monotonic reading (its default clock, time.Now,
// gives them one): a step of the wall clock, forward or back, neither lets
// a retry take over a handler that is still running nor keeps a lapsed
// lease alive.
//
// Records do not survive a restart and are not shared between processes:
// use a database store for several instances.
package memstore

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

const shardCount = 64

// Store is an in-memory idem.Store. Create it with New and stop its purger
// with Close.
type Store struct {
	shards [shardCount]shard
	seed   maphash.Seed
	bounds
	// base is the origin of the offsets records keep, read from time.Now
	// at New so that it carries a monotonic reading.
	base time.Time

	now       func() time.Time
	batch     int
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

type shard struct {
	mu      sync.Mutex
	records map[idem.ID]entry
}

// entry is a record as kept in memory, by value in its shard's map: times as
// nanoseconds since the store's base (see offset) and the response packed
// into one pointer-free slice (see response.go), so a store holding many
// records gives the garbage collector little to scan.
type entry struct {
	fp          idem.Fingerprint
	token       string
	resp        []byte // packed response; nil while in flight
	leaseUntil  int64
	expiresAt   int64
	createdAt   int64
	completedAt int64
	status      int32
	state       idem.State
}

const noTime = math.MinInt64

// offset turns t into nanoseconds since the store's base. Time.Sub uses the
// monotonic readings when both times carry one, as the Engine's default
// clock (time.Now) gives them: a step of the wall clock (NTP, an operator,
// a VM resumed) then neither lapses a running handler's lease nor keeps a
// dead one alive. UnixNano would keep only the wall reading. Times without
// a monotonic reading (a test clock, a time parsed from text) are reckoned
// by their wall reading, as before. Times more than 292 years from the base
// saturate, which keeps their order.
func (s *Store) offset(t time.Time) int64 {
	if t.IsZero() {
		return noTime
	}
	return int64(t.Sub(s.base))
}

// timeAt is the inverse of offset. The result carries the base's monotonic
// reading, so the Engine compares it with its own clock readings on the
// monotonic clock too; its wall reading is the base's plus the offset, and
// its location the base's (Local).
func (s *Store) timeAt(n int64) time.Time {
	if n == noTime {
		return time.Time{}
	}
	return s.base.Add(time.Duration(n))
}

// expiry is the offset from which the record is expired
// (idem.Record.Expired): its expiry, or the end of its lease if that is
// later and the record is still in flight.
func (e *entry) expiry() int64 {
	if e.state == idem.InFlight {
		return max(e.expiresAt, e.leaseUntil)
	}
	return e.expiresAt
}

func (s *Store) record(id idem.ID, e *entry) idem.Record {
	return idem.Record{
		ID:          id,
		Fingerprint: e.fp,
		State:       e.state,
		Token:       e.token,
		LeaseUntil:  s.timeAt(e.leaseUntil),
		ExpiresAt:   s.timeAt(e.expiresAt),
		CreatedAt:   s.timeAt(e.createdAt),
		CompletedAt: s.timeAt(e.completedAt),
		Response:    unpackResponse(int(e.status), e.resp),
	}
}

var (
	_ idem.Store      = (*Store)(nil)
	_ idem.LocalStore = (*Store)(nil)
)

// Local implements idem.LocalStore: every call is a short critical section
// in this process, so the Engine gives it no deadline.
func (*Store) Local() {}

// New returns a Store and starts its purger (unless disabled with
// WithPurgeInterval(0)).
func New(opts ...Option) *Store {
	o := options{
		maxRecords:    DefaultMaxRecords,
		purgeInterval: DefaultPurgeInterval,
		purgeBatch:    DefaultPurgeBatch,
		now:           time.Now,
	}
	for _, opt := range opts {
		opt(&o)
	}
	s := &Store{
		seed:  maphash.MakeSeed(),
		base:  time.Now(),
		now:   o.now,
		batch: o.purgeBatch,
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	s.maxRecords = int64(o.maxRecords)
	if o.maxPerScope > 0 {
		s.quota = min(int64(o.maxPerScope), s.maxRecords)
	} else {
		s.quota = max(1, s.maxRecords/defaultScopeShare)
	}
	s.sweepAfter.Store(math.MaxInt64) // nothing to sweep yet
	for i := range s.shards {
		s.shards[i].records = make(map[idem.ID]entry)
		s.scopes[i].counts = make(map[string]int64)
	}
	if o.purgeInterval > 0 {
		go s.purgeLoop(o.purgeInterval)
	} else {
		close(s.done)
	}
	return s
}

// Close stops the purger and waits for it to exit. The Store stays usable.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

func (s *Store) purgeLoop(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			// Batches release the shard locks between them, so requests
			// are never held up for a whole sweep.
			for {
				n, _ := s.Purge(context.Background(), s.now(), s.batch)
				if n < s.batch {
					break
				}
				select {
				case <-s.stop:
					return
				default:
				}
			}
		}
	}
}

func (s *Store) shard(id idem.ID) *shard {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(id.Scope)
	h.WriteByte(0)
	h.WriteString(id.Key)
	return &s.shards[h.Sum64()%shardCount]
}

// Acquire implements idem.Store. A new key that finds the store, or its
// scope, full fails with idem.ErrStoreFull, after expired records have been
// swept to make room; a live record is never evicted.
func (s *Store) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, 0, err
	}
	sh := s.shard(a.ID)
	now := s.offset(a.Now)
	rec, outcome, ok := s.acquire(sh, a, now)
	if !ok {
		// The shard's lock is not held while the sweep takes every
		// shard's in turn; the key is looked up afresh after it.
		s.makeRoom(now)
		if rec, outcome, ok = s.acquire(sh, a, now); !ok {
			return idem.Record{}, 0, idem.ErrStoreFull
		}
	}
	return rec, outcome, nil
}

// acquire is Acquire under the shard's lock; ok is false when the key is
// new and there is no room for it.
func (s *Store) acquire(sh *shard, a idem.Acquire, now int64) (rec idem.Record, outcome idem.AcquireOutcome, ok bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, found := sh.records[a.ID]
	outcome = idem.Created
	switch {
	case !found:
		if !s.reserve(a.ID.Scope) {
			return idem.Record{}, 0, false
		}
	case now >= e.expiry():
		// Replaced in place: the record was counted when it was added.
	case e.state == idem.InFlight && now >= e.leaseUntil && e.fp == a.Fingerprint:
		outcome = idem.TookOver
	default:
		return s.record(a.ID, &e), idem.Existing, true
	}
	e = entry{
		fp:          a.Fingerprint,
		state:       idem.InFlight,
		token:       a.Token,
		leaseUntil:  s.offset(a.LeaseUntil),
		expiresAt:   s.offset(a.ExpiresAt),
		createdAt:   now,
		completedAt: noTime,
	}
	sh.records[a.ID] = e
	s.noteExpiry(e.expiry())
	return s.record(a.ID, &e), outcome, true
}

// Renew implements idem.Store.
func (s *Store) Renew(ctx context.Context, id idem.ID, token string, leaseUntil time.Time) error {
	return s.withOwned(ctx, id, token, func(e *entry) bool {
		e.leaseUntil = max(e.leaseUntil, s.offset(leaseUntil)) // never moved back
		return true
	})
}

// Complete implements idem.Store. The response is copied: the caller may
// reuse its memory once Complete returns.
func (s *Store) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	return s.withOwned(ctx, id, token, func(e *entry) bool {
		e.state = idem.Completed
		e.status = int32(c.Response.Status)
		e.resp = packResponse(c.Response)
		e.completedAt = s.offset(c.CompletedAt)
		e.expiresAt = s.offset(c.ExpiresAt)
		return true
	})
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, id idem.ID, token string) error {
	return s.withOwned(ctx, id, token, func(*entry) bool { return false })
}

// withOwned runs f under the shard lock on the in-flight record that token
// holds, then keeps the record as f left it, or deletes it if f says so.
func (s *Store) withOwned(ctx context.Context, id idem.ID, token string, f func(*entry) (keep bool)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.records[id]
	if !ok || e.state != idem.InFlight || e.token != token {
		return idem.ErrLockLost
	}
	if f(&e) {
		sh.records[id] = e
		s.noteExpiry(e.expiry())
	} else {
		delete(sh.records, id)
		s.unreserve(id.Scope)
	}
	return nil
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, err
	}
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.records[id]
	if !ok {
		return idem.Record{}, idem.ErrNotFound
	}
	return s.record(id, &e), nil
}

// Purge implements idem.Store. It holds one shard's lock at a time.
func (s *Store) Purge(ctx context.Context, now time.Time, limit int) (int, error) {
	deleted := 0
	for i := range s.shards {
		if deleted >= limit {
			break
		}
		if err := ctx.Err(); err != nil {
			return deleted, err
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		deleted += s.sweep(sh, s.offset(now), limit-deleted, nil)
		sh.mu.Unlock()
	}
	return deleted, nil
}

// Len returns the number of records held, expired ones included until
// they are swept.
func (s *Store) Len() int {
	return int(s.count.Load())
}

// LenScope returns the number of records scope holds, expired ones included
// until they are swept: what counts against its quota.
func (s *Store) LenScope(scope string) int {
	if scope == "" {
		return int(s.unscoped.Load())
	}
	ss := s.scopeShard(scope)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return int(ss.counts[scope])
}
