package memstore

import (
	"context"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemadmin"
)

var (
	_ idemadmin.Store   = (*Store)(nil)
	_ idemadmin.Locator = (*Store)(nil)
)

// location is what Inspect reports of where a record is kept.
const location = "memory of this process"

// Inspect implements idemadmin.Store.
func (s *Store) Inspect(ctx context.Context, id idem.ID) (idemadmin.Info, error) {
	rec, err := s.Get(ctx, id)
	if err != nil {
		return idemadmin.Info{}, err
	}
	// The body is a view of the arena, which a later Complete may move:
	// the caller gets a copy.
	rec.Response.Body = append([]byte(nil), rec.Response.Body...)
	return idemadmin.NewInfo(rec, location), nil
}

// Locate implements idemadmin.Locator: every record is in this process's
// memory.
func (s *Store) Locate(idem.ID) string { return location }

// Forget implements idemadmin.Store, under the record's shard lock: the
// read and the delete are one step, so ErrChanged never happens here.
func (s *Store) Forget(ctx context.Context, id idem.ID, force bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.shard(id)
	d := digestOf(id.Scope, id.Key)
	tag := s.tagOf(&d)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if f, ok := sh.flights[id]; ok {
		if !force {
			return idemadmin.ErrInFlight
		}
		// Its holder's later Complete or Release finds no record with its
		// token: idem.ErrLockLost.
		sh.deleteFlight(id)
		s.unreserve(f.scope)
		return nil
	}
	slot, loc, ok := sh.find(tag, &d)
	if !ok {
		return idem.ErrNotFound
	}
	c := unpackRecord(sh.arena.record(loc))
	s.reclaim(sh, sh.deleteRecord(slot, loc))
	s.unreserve(c.scope)
	return nil
}

// RecordStats implements idemadmin.Store. It holds one shard's lock at a
// time; the scopes are counted from the quota counts, which include
// expired records until they are swept, as Len does.
func (s *Store) RecordStats(ctx context.Context, now time.Time, topScopes int) (idemadmin.Stats, error) {
	var st idemadmin.Stats
	at := s.offset(now)
	oldest, lease := int64(0), int64(0)
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return idemadmin.Stats{}, err
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, f := range sh.flights {
			if st.InFlight == 0 || f.createdAt < oldest {
				oldest = f.createdAt
			}
			if st.InFlight == 0 || f.leaseUntil < lease {
				lease = f.leaseUntil
			}
			st.InFlight++
			if at >= f.expiry() {
				st.Expired++
			}
		}
		for ci := range sh.arena.chunks {
			buf := sh.arena.chunks[ci].buf
			for off := 0; off < len(buf); {
				size, live := recordSize(buf[off:])
				if live {
					st.Completed++
					if unpackRecord(buf[off:]).expiresAt <= at {
						st.Expired++
					}
				}
				off += size
			}
		}
		sh.mu.Unlock()
	}
	if st.InFlight > 0 {
		st.OldestInFlight, st.OldestLeaseEnd = s.timeAt(oldest), s.timeAt(lease)
	}
	counts := map[string]int64{}
	if n := s.unscoped.Load(); n > 0 {
		counts[idemadmin.ScopeDigest("")] = n
	}
	for i := range s.scopes {
		ss := &s.scopes[i]
		ss.mu.Lock()
		for name, slot := range ss.index {
			counts[idemadmin.ScopeDigest(name)] = ss.slots[slot].n
		}
		ss.mu.Unlock()
	}
	st.TopScopes = idemadmin.TopScopes(counts, topScopes)
	return st, nil
}
