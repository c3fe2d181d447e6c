package idemtest

import (
	"context"
	"sync"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
)

// The suite must catch the mistakes a store author is likely to make: each
// broken store below breaks one clause, and the check for it must fail.
func TestStoreSuiteCatchesBrokenStores(t *testing.T) {
	cases := []struct {
		check  string
		broken func(*memstore.Store) idem.Store
	}{
		{"Complete/StaleOwner", func(s *memstore.Store) idem.Store { return noFencing{s} }},
		{"Release/StaleOwner", func(s *memstore.Store) idem.Store { return noFencing{s} }},
		{"Acquire/TakeoverAfterLease", func(s *memstore.Store) idem.Store { return noTakeover{s} }},
		{"Context/Canceled", func(s *memstore.Store) idem.Store { return ignoresContext{s} }},
		{"Purge/Batched", func(s *memstore.Store) idem.Store { return unboundedPurge{s} }},
		{"Complete/CopiesResponse", func(s *memstore.Store) idem.Store { return &keepsLentResponse{Store: s} }},
		{"Concurrent/OneWinner", func(*memstore.Store) idem.Store { return &readThenWrite{records: map[idem.ID]idem.Record{}} }},
		{"IDs/AnyBytes", func(s *memstore.Store) idem.Store { return truncatesIDs{s} }},
		{"RenewBatch/OnlyHeldLeases", func(s *memstore.Store) idem.Store { return batchWithoutFencing{s} }},
		{"Expired/FarFuture", func(s *memstore.Store) idem.Store { return seconds32{s} }},
		{"Purge/AtExpiry", func(s *memstore.Store) idem.Store { return purgesLate{s} }},
	}
	for _, c := range cases {
		t.Run(c.check, func(t *testing.T) {
			var check func(context.Context, idem.Store) error
			for _, sc := range storeChecks {
				if sc.name == c.check {
					check = sc.check
				}
			}
			if check == nil {
				t.Fatalf("no check named %q", c.check)
			}
			s := memstore.New(memstore.WithPurgeInterval(0))
			if err := check(context.Background(), c.broken(s)); err == nil {
				t.Fatalf("check %s passed a store that breaks it", c.check)
			} else {
				t.Logf("caught: %v", err)
			}
		})
	}
}

// noFencing completes and releases for whoever holds the record now.
type noFencing struct{ *memstore.Store }

func (s noFencing) Complete(ctx context.Context, id idem.ID, _ string, c idem.Completion) error {
	rec, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	return s.Store.Complete(ctx, id, rec.Token, c)
}

func (s noFencing) Release(ctx context.Context, id idem.ID, _ string) error {
	rec, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	return s.Store.Release(ctx, id, rec.Token)
}

// purgesLate takes a record for expired only once its expiry has passed,
// a tick late.
type purgesLate struct{ *memstore.Store }

func (s purgesLate) Purge(ctx context.Context, now time.Time, limit int) (int, error) {
	return s.Store.Purge(ctx, now.Add(-time.Nanosecond), limit)
}

// seconds32 keeps its times as 32-bit Unix seconds, which wrap in 2038:
// right for the times of today, wrong for an expiry decades ahead.
type seconds32 struct{ *memstore.Store }

func wrap32(t time.Time) time.Time { return time.Unix(int64(int32(t.Unix())), 0).UTC() }

func (s seconds32) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	a.LeaseUntil, a.ExpiresAt = wrap32(a.LeaseUntil), wrap32(a.ExpiresAt)
	return s.Store.Acquire(ctx, a)
}

func (s seconds32) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	c.ExpiresAt = wrap32(c.ExpiresAt)
	return s.Store.Complete(ctx, id, token, c)
}

// noTakeover never frees a key whose holder crashed.
type noTakeover struct{ *memstore.Store }

func (s noTakeover) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	if rec, err := s.Get(ctx, a.ID); err == nil && rec.State == idem.InFlight && !rec.Expired(a.Now) {
		return rec, idem.AcquireExisting, nil
	}
	return s.Store.Acquire(ctx, a)
}

// ignoresContext does its work whatever the caller's context says.
type ignoresContext struct{ *memstore.Store }

func (s ignoresContext) Acquire(_ context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	return s.Store.Acquire(context.Background(), a)
}

// unboundedPurge deletes everything at once.
type unboundedPurge struct{ *memstore.Store }

func (s unboundedPurge) Purge(ctx context.Context, now time.Time, _ int) (int, error) {
	return s.Store.Purge(ctx, now, 1<<30)
}

// keepsLentResponse keeps the response Complete was given instead of a copy.
type keepsLentResponse struct {
	*memstore.Store
	mu   sync.Mutex
	kept map[idem.ID]idem.Response
}

func (s *keepsLentResponse) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	if err := s.Store.Complete(ctx, id, token, c); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kept == nil {
		s.kept = map[idem.ID]idem.Response{}
	}
	s.kept[id] = c.Response
	return nil
}

func (s *keepsLentResponse) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	rec, err := s.Store.Get(ctx, id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.kept[id]; ok && err == nil {
		rec.Response = r
	}
	return rec, err
}

// readThenWrite checks for a record and writes it in two steps.
type readThenWrite struct {
	mu      sync.Mutex
	records map[idem.ID]idem.Record
}

func (s *readThenWrite) Acquire(_ context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	s.mu.Lock()
	rec, ok := s.records[a.ID]
	s.mu.Unlock()
	if ok && !rec.Expired(a.Now) {
		return rec, idem.AcquireExisting, nil
	}
	time.Sleep(time.Millisecond) // the window every read-then-write has
	rec = idem.Record{ID: a.ID, Fingerprint: a.Fingerprint, State: idem.InFlight, Token: a.Token,
		LeaseUntil: a.LeaseUntil, ExpiresAt: a.ExpiresAt, CreatedAt: a.Now}
	s.mu.Lock()
	s.records[a.ID] = rec
	s.mu.Unlock()
	return rec, idem.AcquireCreated, nil
}

func (s *readThenWrite) Renew(context.Context, idem.ID, string, time.Time) error { return nil }
func (s *readThenWrite) Complete(context.Context, idem.ID, string, idem.Completion) error {
	return nil
}
func (s *readThenWrite) Release(context.Context, idem.ID, string) error { return nil }
func (s *readThenWrite) Get(context.Context, idem.ID) (idem.Record, error) {
	return idem.Record{}, idem.ErrNotFound
}
func (s *readThenWrite) Purge(context.Context, time.Time, int) (int, error) { return 0, nil }

// truncatesIDs keeps only the first 255 bytes of scope and key, as a
// fixed-width column does.
type truncatesIDs struct{ *memstore.Store }

func cut(id idem.ID) idem.ID {
	if len(id.Scope) > 255 {
		id.Scope = id.Scope[:255]
	}
	if len(id.Key) > 255 {
		id.Key = id.Key[:255]
	}
	return id
}

func (s truncatesIDs) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	id := a.ID
	a.ID = cut(id)
	rec, o, err := s.Store.Acquire(ctx, a)
	rec.ID = id
	return rec, o, err
}

func (s truncatesIDs) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	rec, err := s.Store.Get(ctx, cut(id))
	rec.ID = id
	return rec, err
}

// batchWithoutFencing renews every record named, whoever holds it.
type batchWithoutFencing struct{ *memstore.Store }

func (s batchWithoutFencing) RenewBatch(ctx context.Context, held []idem.Held, until time.Time, lost []bool) error {
	for _, h := range held {
		if rec, err := s.Get(ctx, h.ID); err == nil && rec.State == idem.InFlight {
			_ = s.Renew(ctx, h.ID, rec.Token, until)
		}
	}
	return nil
}
