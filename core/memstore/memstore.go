// Package memstore is the in-memory idem.Store: the embedded default for a
// single process, and the store tests use. Records live in 64 shards, each
// with its own lock, so requests for different keys rarely contend; a
// background purger deletes expired records until Close.
//
// The store is bounded twice, so that memory stays bounded and no tenant can
// lock the others out:
//
//   - WithMaxRecords (default 1,000,000) bounds the records of the whole
//     store: the default 24 h TTL at 11.5 new keys a second.
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
// A completed record takes about 140 bytes of memory besides its
// response's body and header values (the names Content-Type and Location,
// and the usual content types, take a byte each): about 290 bytes with a
// 150-byte JSON response, so a million records take some 290 MB. Records are
// packed into large byte chunks that hold no pointers, so the garbage
// collector's work does not grow with their number, and a new key costs
// the same whether the store holds ten thousand records or a million.
// The room of deleted records is reclaimed: a chunk is freed once its
// records are gone, or moved out of once fewer than half of them remain.
//
// Leases and expiry are reckoned on the monotonic clock whenever the times
// the Engine passes carry a monotonic reading (its default clock, time.Now,
// gives them one): a step of the wall clock, forward or back, neither lets
// a retry take over a handler that is still running nor keeps a lapsed
// lease alive. The purger, whose clock may carry a monotonic reading when
// the Engine's times do not, goes by the earlier of its clock's two
// readings: after a step it may delete records late, never early.
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
	"unsafe"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/internal/purge"
)

const shardCount = 64

// Store is an in-memory idem.Store. Create it with New and stop its purger
// with Close.
type Store struct {
	shards [shardCount]shard
	seed   maphash.Seed
	// tagMask is all ones but in tests that make every index tag collide.
	tagMask uint32
	bounds
	purges purgeCounts
	// base is the origin of the offsets records keep, read from time.Now
	// at New so that it carries a monotonic reading.
	base time.Time

	purge     purge.Options
	stopPurge func() // nil without a purger
	closeOnce sync.Once
}

// shard holds the records whose IDs hash to it: in-flight ones in a map,
// completed ones packed in its arena (arena.go) and found by its index
// (index.go).
type shard struct {
	mu      sync.Mutex
	flights map[idem.ID]flight
	index   index
	arena   arena
	// peak is the most flights held since the map was made: a map never
	// shrinks, so one that grew for a burst is made afresh once empty.
	peak    int
	scratch []byte // where Complete packs a record
	// shared holds the headers made of common strings its replays share,
	// by their packed bytes (see commonHeader).
	shared map[uint64][]exchange.HeaderField
}

// flight is an in-flight record, by value in its shard's map. Times are
// nanoseconds since the store's base (see offset).
type flight struct {
	d          digest
	fp         idem.Fingerprint
	token      string
	leaseUntil int64
	expiresAt  int64
	createdAt  int64
	scope      scopeRef
}

// flightsPeak is the size past which an emptied flights map is replaced.
const flightsPeak = 1024

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

// expiry is the offset from which the in-flight record is expired
// (idem.Record.Expired): its expiry, or the end of its lease if later.
func (f *flight) expiry() int64 {
	return max(f.expiresAt, f.leaseUntil)
}

func (s *Store) flightRecord(id idem.ID, f *flight) idem.Record {
	return idem.Record{
		ID:          id,
		Fingerprint: f.fp,
		State:       idem.InFlight,
		Token:       f.token,
		LeaseUntil:  s.timeAt(f.leaseUntil),
		ExpiresAt:   s.timeAt(f.expiresAt),
		CreatedAt:   s.timeAt(f.createdAt),
	}
}

// completedRecord is the record of c; the caller holds sh's lock.
func (s *Store) completedRecord(sh *shard, id idem.ID, c *completed) idem.Record {
	token := ""
	if len(c.token) > 0 {
		// A view of the arena, whose packed bytes never change.
		token = unsafe.String(&c.token[0], len(c.token))
	}
	return idem.Record{
		ID:          id,
		Fingerprint: c.fp,
		State:       idem.Completed,
		Token:       token,
		LeaseUntil:  s.timeAt(c.lease),
		ExpiresAt:   s.timeAt(c.expiresAt),
		CreatedAt:   s.timeAt(c.createdAt),
		CompletedAt: s.timeAt(c.completedAt),
		Response:    sh.response(c.status, c.resp),
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
		maxRecords: DefaultMaxRecords,
		purge:      purge.Defaults(DefaultPurgeInterval, DefaultPurgeBatch),
	}
	for _, opt := range opts {
		opt(&o)
	}
	s := &Store{
		seed:    maphash.MakeSeed(),
		tagMask: math.MaxUint32,
		base:    time.Now(),
		purge:   o.purge,
	}
	s.maxRecords = int64(o.maxRecords)
	if o.maxPerScope > 0 {
		s.quota = min(int64(o.maxPerScope), s.maxRecords)
	} else {
		s.quota = max(1, s.maxRecords/defaultScopeShare)
	}
	s.sweepAfter.Store(math.MaxInt64) // nothing to sweep yet
	for i := range s.shards {
		s.shards[i].flights = make(map[idem.ID]flight)
		s.scopes[i].index = make(map[string]uint32)
	}
	if s.purge.Interval > 0 {
		s.stopPurge = s.purge.Start(context.Background(), s.purgeExpired)
	}
	return s
}

// Close stops the purger and waits for a pass under way to end. The
// Store stays usable.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.stopPurge != nil {
			s.stopPurge()
		}
	})
	return nil
}

// purgeExpired deletes what has expired, batch by batch: the shard locks
// are released between batches, so requests are never held up for a whole
// sweep.
func (s *Store) purgeExpired(ctx context.Context) {
	for ctx.Err() == nil {
		if n, _ := s.Purge(ctx, s.purge.Now(s.base), s.purge.Batch); n < s.purge.Batch {
			return
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
	// Hashed before the lock is taken, to keep it short.
	d := digestOf(a.ID.Scope, a.ID.Key)
	tag := s.tagOf(&d)
	now := s.offset(a.Now)
	rec, outcome, ok := s.acquire(sh, a, &d, tag, now)
	if !ok {
		// The shard's lock is not held while the sweep takes every
		// shard's in turn; the key is looked up afresh after it.
		s.makeRoom(now)
		if rec, outcome, ok = s.acquire(sh, a, &d, tag, now); !ok {
			return idem.Record{}, 0, idem.ErrStoreFull
		}
	}
	return rec, outcome, nil
}

// acquire is Acquire under the shard's lock; ok is false when the key is
// new and there is no room for it.
func (s *Store) acquire(sh *shard, a idem.Acquire, d *digest, tag uint32, now int64) (rec idem.Record, outcome idem.AcquireOutcome, ok bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	outcome = idem.AcquireCreated
	f, found := sh.flights[a.ID]
	switch {
	case found && now >= f.expiry():
		// Replaced in place: the record was counted when it was added.
	case found && now >= f.leaseUntil && f.fp == a.Fingerprint:
		outcome = idem.AcquireTookOver
	case found:
		return s.flightRecord(a.ID, &f), idem.AcquireExisting, true
	default:
		slot, loc, done := sh.find(tag, d)
		switch {
		case done:
			c := unpackRecord(sh.arena.record(loc))
			if now < c.expiresAt {
				return s.completedRecord(sh, a.ID, &c), idem.AcquireExisting, true
			}
			// Replaced: the new record takes the expired one's count.
			f.scope = c.scope
			s.reclaim(sh, sh.deleteRecord(slot, loc))
		default:
			if f.scope, ok = s.reserve(a.ID.Scope); !ok {
				return idem.Record{}, 0, false
			}
		}
	}
	f = flight{
		d:          *d,
		fp:         a.Fingerprint,
		token:      a.Token,
		leaseUntil: s.offset(a.LeaseUntil),
		expiresAt:  s.offset(a.ExpiresAt),
		createdAt:  now,
		scope:      f.scope,
	}
	sh.flights[a.ID] = f
	sh.peak = max(sh.peak, len(sh.flights))
	s.noteExpiry(f.expiry())
	return s.flightRecord(a.ID, &f), outcome, true
}

// owned locks id's shard and returns it with the in-flight record that
// token holds; the caller unlocks the shard. It fails, with the shard
// unlocked, if ctx has ended or token holds no in-flight record of id.
func (s *Store) owned(ctx context.Context, id idem.ID, token string) (*shard, flight, error) {
	if err := ctx.Err(); err != nil {
		return nil, flight{}, err
	}
	sh := s.shard(id)
	sh.mu.Lock()
	f, ok := sh.flights[id]
	if !ok || f.token != token {
		sh.mu.Unlock()
		return nil, flight{}, idem.ErrLockLost
	}
	return sh, f, nil
}

// Renew implements idem.Store.
func (s *Store) Renew(ctx context.Context, id idem.ID, token string, leaseUntil time.Time) error {
	sh, f, err := s.owned(ctx, id, token)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	f.leaseUntil = max(f.leaseUntil, s.offset(leaseUntil)) // never moved back
	sh.flights[id] = f
	s.noteExpiry(f.expiry())
	return nil
}

// Complete implements idem.Store. The response is copied into the
// store's memory: the caller may reuse its own once Complete returns.
func (s *Store) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	sh, f, err := s.owned(ctx, id, token)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	expiresAt := s.offset(c.ExpiresAt)
	rec := packRecord(&sh.scratch, &f, c.Response.Status, s.offset(c.CompletedAt), expiresAt, c.Response)
	loc, err := sh.arena.put(rec)
	if cap(sh.scratch) > maxChunk {
		sh.scratch = nil // a big response's room is not kept
	}
	if err != nil {
		return err
	}
	sh.index.insert(s.tagOf(&f.d), loc)
	sh.deleteFlight(id)
	s.noteExpiry(expiresAt)
	return nil
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, id idem.ID, token string) error {
	sh, f, err := s.owned(ctx, id, token)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	sh.deleteFlight(id)
	s.unreserve(f.scope)
	return nil
}

func (sh *shard) deleteFlight(id idem.ID) {
	delete(sh.flights, id)
	if len(sh.flights) == 0 && sh.peak > flightsPeak {
		sh.flights, sh.peak = make(map[idem.ID]flight), 0
	}
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, err
	}
	sh := s.shard(id)
	d := digestOf(id.Scope, id.Key)
	tag := s.tagOf(&d)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if f, ok := sh.flights[id]; ok {
		return s.flightRecord(id, &f), nil
	}
	if _, loc, ok := sh.find(tag, &d); ok {
		c := unpackRecord(sh.arena.record(loc))
		return s.completedRecord(sh, id, &c), nil
	}
	return idem.Record{}, idem.ErrNotFound
}

// Purge implements idem.Store. It holds one shard's lock at a time, and
// each shard's next batch goes on from where its last one stopped.
func (s *Store) Purge(ctx context.Context, now time.Time, limit int) (int, error) {
	deleted, start := 0, time.Now()
	defer func() { s.purges.add(deleted, time.Since(start)) }()
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

// sweep deletes up to limit records of sh expired at now, and lowers
// *least (if not nil) to the moment the earliest of those it keeps
// expires; the caller holds sh.mu. Completed records are visited chunk by
// chunk, oldest first mostly, from the chunk the last sweep stopped in.
func (s *Store) sweep(sh *shard, now int64, limit int, least *int64) int {
	n := 0
	for id, f := range sh.flights {
		if n >= limit {
			return n
		}
		if m := f.expiry(); m > now {
			if least != nil {
				*least = min(*least, m)
			}
			continue
		}
		sh.deleteFlight(id)
		s.unreserve(f.scope)
		n++
	}
	a := &sh.arena
	total := len(a.chunks)
	for k := range total {
		ci := (a.cursor + k) % total
		if n >= limit {
			a.cursor = ci
			return n
		}
		buf := a.chunks[ci].buf
		for off := 0; off < len(buf) && n < limit; {
			size, live := recordSize(buf[off:])
			if live {
				c := unpackRecord(buf[off:])
				if c.expiresAt > now {
					if least != nil {
						*least = min(*least, c.expiresAt)
					}
				} else {
					loc := uint32(ci)<<16 | uint32(off)
					sh.deleteRecord(sh.index.slotOf(s.tagOf(recordDigest(buf[off:])), loc), loc)
					s.unreserve(c.scope)
					n++
				}
			}
			off += size
		}
		s.reclaim(sh, ci)
	}
	return n
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
	ss := &s.scopes[s.scopeShardIndex(scope)]
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if slot, ok := ss.index[scope]; ok {
		return int(ss.slots[slot].n)
	}
	return 0
}
