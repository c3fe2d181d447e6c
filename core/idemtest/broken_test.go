package idemtest

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemadmin"
	"github.com/idemkit/idemkit/core/memstore"
)

// The broken stores of TestStoreSuiteCatchesBrokenStores. Each wraps the
// memory store and gets one clause of the Store contract wrong, the way a
// store author would: a column left out of a statement, a condition left
// out of a WHERE, a decision read in one step and written in another.
// Where the mistake needs a write the memory store cannot make, the
// wrapper makes it with the store's own calls (replace).

// replace overwrites the in-flight record rec with a copy changed by
// edit, as a store's unconditional write would.
func replace(ctx context.Context, s *memstore.Store, rec idem.Record, edit func(*idem.Acquire)) error {
	if err := s.Release(ctx, rec.ID, rec.Token); err != nil {
		return err
	}
	a := idem.Acquire{ID: rec.ID, Fingerprint: rec.Fingerprint, Token: rec.Token, Now: rec.CreatedAt,
		LeaseUntil: rec.LeaseUntil, ExpiresAt: rec.ExpiresAt}
	edit(&a)
	_, _, err := s.Acquire(ctx, a)
	return err
}

// inFlightRecord returns the in-flight record of id, or false.
func inFlightRecord(ctx context.Context, s *memstore.Store, id idem.ID) (idem.Record, bool) {
	rec, err := s.Get(ctx, id)
	return rec, err == nil && rec.State == idem.InFlight
}

// acquiredRecord is the record an Acquire that wrote a makes, as stores
// that do not read it back answer it.
func acquiredRecord(a idem.Acquire) idem.Record {
	return idem.Record{ID: a.ID, Fingerprint: a.Fingerprint, State: idem.InFlight, Token: a.Token,
		LeaseUntil: a.LeaseUntil, ExpiresAt: a.ExpiresAt, CreatedAt: a.Now}
}

// takeOver gives a's caller the in-flight record rec whatever it holds,
// and answers TookOver.
func takeOver(ctx context.Context, s *memstore.Store, rec idem.Record, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	if err := s.Release(ctx, rec.ID, rec.Token); err != nil {
		return idem.Record{}, 0, err
	}
	if _, _, err := s.Acquire(ctx, a); err != nil {
		return idem.Record{}, 0, err
	}
	return acquiredRecord(a), idem.AcquireTookOver, nil
}

// lapsed reports whether rec is an in-flight record whose lease ran out
// at now, within its TTL: a takeover's case.
func lapsed(rec idem.Record, now time.Time) bool {
	return rec.State == idem.InFlight && !now.Before(rec.LeaseUntil) && !rec.Expired(now)
}

// forgetsFingerprint never writes the fingerprint: a column left out of
// the INSERT.
type forgetsFingerprint struct{ *memstore.Store }

func (s forgetsFingerprint) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	a.Fingerprint = idem.Fingerprint{}
	return s.Store.Acquire(ctx, a)
}

// wholeSeconds keeps times in whole seconds, as a DATETIME column without
// fractional seconds does.
type wholeSeconds struct{ *memstore.Store }

func (s wholeSeconds) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	a.Now, a.LeaseUntil, a.ExpiresAt = a.Now.Truncate(time.Second), a.LeaseUntil.Truncate(time.Second), a.ExpiresAt.Truncate(time.Second)
	return s.Store.Acquire(ctx, a)
}

// retryTakesOver lets a request with the holder's payload take over a
// lease that has not run out, taking the fingerprint for the holder's
// identity.
type retryTakesOver struct{ *memstore.Store }

func (s retryTakesOver) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	if rec, ok := inFlightRecord(ctx, s.Store, a.ID); ok && rec.Fingerprint == a.Fingerprint && !rec.Expired(a.Now) {
		return takeOver(ctx, s.Store, rec, a)
	}
	return s.Store.Acquire(ctx, a)
}

// noTakeover never frees a key whose holder crashed.
type noTakeover struct{ *memstore.Store }

func (s noTakeover) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	if rec, ok := inFlightRecord(ctx, s.Store, a.ID); ok && !rec.Expired(a.Now) {
		return rec, idem.AcquireExisting, nil
	}
	return s.Store.Acquire(ctx, a)
}

// takeoverKeepsToken moves the lease on a takeover but leaves the old
// holder's token (a column left out of the UPDATE), and answers with the
// record it meant to write: the old holder can still complete.
type takeoverKeepsToken struct{ *memstore.Store }

func (s takeoverKeepsToken) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	rec, ok := inFlightRecord(ctx, s.Store, a.ID)
	if !ok || !lapsed(rec, a.Now) || rec.Fingerprint != a.Fingerprint {
		return s.Store.Acquire(ctx, a)
	}
	err := replace(ctx, s.Store, rec, func(w *idem.Acquire) { w.Now, w.LeaseUntil, w.ExpiresAt = a.Now, a.LeaseUntil, a.ExpiresAt })
	return acquiredRecord(a), idem.AcquireTookOver, err
}

// takesOverAnyPayload takes over a lapsed lease whatever the fingerprint.
type takesOverAnyPayload struct{ *memstore.Store }

func (s takesOverAnyPayload) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	if rec, ok := inFlightRecord(ctx, s.Store, a.ID); ok && lapsed(rec, a.Now) {
		return takeOver(ctx, s.Store, rec, a)
	}
	return s.Store.Acquire(ctx, a)
}

// existingWithoutResponse answers Existing with the record's lock columns
// only, leaving the response for Get to read.
type existingWithoutResponse struct{ *memstore.Store }

func (s existingWithoutResponse) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	rec, o, err := s.Store.Acquire(ctx, a)
	if o == idem.AcquireExisting {
		rec.Response = exchange.Response{}
	}
	return rec, o, err
}

// mapsIDs keeps each record under mapID of its ID: the key a store builds
// from the scope and the key.
type mapsIDs struct {
	*memstore.Store
	mapID func(idem.ID) idem.ID
}

// joinScopeAndKey builds one key from both with a separator, which either
// may contain.
func joinScopeAndKey(id idem.ID) idem.ID { return idem.ID{Key: id.Scope + ":" + id.Key} }

// truncateID keeps the first 255 bytes of scope and key, as a fixed-width
// column does.
func truncateID(id idem.ID) idem.ID {
	if len(id.Scope) > 255 {
		id.Scope = id.Scope[:255]
	}
	if len(id.Key) > 255 {
		id.Key = id.Key[:255]
	}
	return id
}

func (s mapsIDs) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	id := a.ID
	a.ID = s.mapID(id)
	rec, o, err := s.Store.Acquire(ctx, a)
	rec.ID = id
	return rec, o, err
}

func (s mapsIDs) Renew(ctx context.Context, id idem.ID, token string, until time.Time) error {
	return s.Store.Renew(ctx, s.mapID(id), token, until)
}

func (s mapsIDs) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	return s.Store.Complete(ctx, s.mapID(id), token, c)
}

func (s mapsIDs) Release(ctx context.Context, id idem.ID, token string) error {
	return s.Store.Release(ctx, s.mapID(id), token)
}

func (s mapsIDs) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	rec, err := s.Store.Get(ctx, s.mapID(id))
	rec.ID = id
	return rec, err
}

// completedNeverExpire answers Existing for a completed record however
// old: expiry is checked for in-flight records only.
type completedNeverExpire struct{ *memstore.Store }

func (s completedNeverExpire) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	if rec, err := s.Get(ctx, a.ID); err == nil && rec.State == idem.Completed {
		return rec, idem.AcquireExisting, nil
	}
	return s.Store.Acquire(ctx, a)
}

// inFlightNeverExpire never frees an in-flight record for another
// payload: only a takeover replaces one.
type inFlightNeverExpire struct{ *memstore.Store }

func (s inFlightNeverExpire) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	if rec, ok := inFlightRecord(ctx, s.Store, a.ID); ok && rec.Fingerprint != a.Fingerprint {
		return rec, idem.AcquireExisting, nil
	}
	return s.Store.Acquire(ctx, a)
}

// expiresRenewedLease takes an in-flight record for expired at its
// ExpiresAt, though its holder renewed the lease past it: the lease left
// out of the expiry condition.
type expiresRenewedLease struct{ *memstore.Store }

func (s expiresRenewedLease) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	if rec, ok := inFlightRecord(ctx, s.Store, a.ID); ok && !a.Now.Before(rec.ExpiresAt) {
		if err := s.Release(ctx, rec.ID, rec.Token); err != nil {
			return idem.Record{}, 0, err
		}
	}
	return s.Store.Acquire(ctx, a)
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

// renewsExpiry checks the token but writes the new lease to the record's
// expiry: the wrong column in the UPDATE.
type renewsExpiry struct{ *memstore.Store }

func (s renewsExpiry) Renew(ctx context.Context, id idem.ID, token string, until time.Time) error {
	rec, ok := inFlightRecord(ctx, s.Store, id)
	if !ok || rec.Token != token {
		return idem.ErrLockLost
	}
	return replace(ctx, s.Store, rec, func(w *idem.Acquire) {
		if until.After(w.ExpiresAt) {
			w.ExpiresAt = until
		}
	})
}

// renewsAnyToken renews the lease of the record whoever asks: the token
// left out of the UPDATE's WHERE.
type renewsAnyToken struct{ *memstore.Store }

func (s renewsAnyToken) Renew(ctx context.Context, id idem.ID, _ string, until time.Time) error {
	rec, ok := inFlightRecord(ctx, s.Store, id)
	if !ok {
		return idem.ErrLockLost
	}
	return s.Store.Renew(ctx, id, rec.Token, until)
}

// renewsCompleted renews whatever record the token holds, a completed one
// too: the state left out of the UPDATE's WHERE.
type renewsCompleted struct{ *memstore.Store }

func (s renewsCompleted) Renew(ctx context.Context, id idem.ID, token string, until time.Time) error {
	if rec, err := s.Get(ctx, id); err == nil && rec.State == idem.Completed && rec.Token == token {
		return nil // the lease of a completed record, moved
	}
	return s.Store.Renew(ctx, id, token, until)
}

// movesLeaseBack sets the lease to what each renewal asks, so a late
// renewal shortens a newer one.
type movesLeaseBack struct{ *memstore.Store }

func (s movesLeaseBack) Renew(ctx context.Context, id idem.ID, token string, until time.Time) error {
	rec, ok := inFlightRecord(ctx, s.Store, id)
	if !ok || rec.Token != token {
		return idem.ErrLockLost
	}
	return replace(ctx, s.Store, rec, func(w *idem.Acquire) { w.LeaseUntil = until })
}

// batchWithoutFencing renews every record named, whoever holds it.
type batchWithoutFencing struct{ *memstore.Store }

func (s batchWithoutFencing) RenewBatch(ctx context.Context, held []idem.Held, until time.Time, lost []bool) error {
	for _, h := range held {
		if rec, ok := inFlightRecord(ctx, s.Store, h.ID); ok {
			_ = s.Renew(ctx, h.ID, rec.Token, until)
		}
	}
	return nil
}

// headerAsMap keeps the header as a map from name to values (a JSON
// object, say): the fields come back sorted by name, not in the order
// they were written.
type headerAsMap struct{ *memstore.Store }

func (s headerAsMap) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	c.Response.Header = slices.SortedFunc(slices.Values(c.Response.Header), func(a, b exchange.HeaderField) int {
		return cmp.Compare(a.Name, b.Name)
	})
	return s.Store.Complete(ctx, id, token, c)
}

// body64KiB keeps the body in a column of 64 KiB (MySQL's BLOB), cutting
// a longer one.
type body64KiB struct{ *memstore.Store }

func (s body64KiB) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	if len(c.Response.Body) > 1<<16-1 {
		c.Response.Body = c.Response.Body[:1<<16-1]
	}
	return s.Store.Complete(ctx, id, token, c)
}

// responses overrides the responses of some records, for stores that
// write a response where the memory store would not.
type responses struct {
	mu   sync.Mutex
	kept map[idem.ID]exchange.Response
}

func (r *responses) keep(id idem.ID, resp exchange.Response) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kept == nil {
		r.kept = map[idem.ID]exchange.Response{}
	}
	r.kept[id] = resp
}

func (r *responses) apply(rec idem.Record, err error) (idem.Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if resp, ok := r.kept[rec.ID]; ok && err == nil {
		rec.Response = resp
	}
	return rec, err
}

// keepsLentResponse keeps the response Complete was given instead of a copy.
type keepsLentResponse struct {
	*memstore.Store
	responses
}

func (s *keepsLentResponse) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	if err := s.Store.Complete(ctx, id, token, c); err != nil {
		return err
	}
	s.keep(id, c.Response)
	return nil
}

func (s *keepsLentResponse) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	return s.apply(s.Store.Get(ctx, id))
}

// completesTwice fences Complete on the token but not on the state: a
// second completion overwrites the first.
type completesTwice struct {
	*memstore.Store
	responses
}

func (s *completesTwice) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	if rec, err := s.Store.Get(ctx, id); err == nil && rec.State == idem.Completed && rec.Token == token {
		s.keep(id, c.Response)
		return nil
	}
	return s.Store.Complete(ctx, id, token, c)
}

func (s *completesTwice) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	return s.apply(s.Store.Get(ctx, id))
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

// completesGoneRecord fences Complete only when it finds a record: one
// released or purged meanwhile is written anew (an upsert).
type completesGoneRecord struct{ *memstore.Store }

func (s completesGoneRecord) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	if _, err := s.Get(ctx, id); errors.Is(err, idem.ErrNotFound) {
		a := idem.Acquire{ID: id, Token: token, Now: c.CompletedAt, LeaseUntil: c.CompletedAt, ExpiresAt: c.ExpiresAt}
		if _, _, err := s.Store.Acquire(ctx, a); err != nil {
			return err
		}
	}
	return s.Store.Complete(ctx, id, token, c)
}

// releaseEndsLease ends the lease instead of deleting the record: the key
// stays held against another payload until its TTL.
type releaseEndsLease struct{ *memstore.Store }

func (s releaseEndsLease) Release(ctx context.Context, id idem.ID, token string) error {
	rec, ok := inFlightRecord(ctx, s.Store, id)
	if !ok || rec.Token != token {
		return idem.ErrLockLost
	}
	return replace(ctx, s.Store, rec, func(w *idem.Acquire) { w.LeaseUntil = time.Time{} })
}

// releasesCompleted deletes the record the token names whatever its
// state: the state left out of the DELETE's WHERE. (The memory store
// cannot delete a completed record, so this one hides it from Get.)
type releasesCompleted struct {
	*memstore.Store
	mu      sync.Mutex
	deleted map[idem.ID]bool
}

func (s *releasesCompleted) Release(ctx context.Context, id idem.ID, token string) error {
	if rec, err := s.Store.Get(ctx, id); err == nil && rec.State == idem.Completed && rec.Token == token {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.deleted == nil {
			s.deleted = map[idem.ID]bool{}
		}
		s.deleted[id] = true
		return nil
	}
	return s.Store.Release(ctx, id, token)
}

func (s *releasesCompleted) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	s.mu.Lock()
	deleted := s.deleted[id]
	s.mu.Unlock()
	if deleted {
		return idem.Record{}, idem.ErrNotFound
	}
	return s.Store.Get(ctx, id)
}

// emptyRecordForMissing answers Get for a missing record with an empty
// record rather than ErrNotFound (a query's zero row).
type emptyRecordForMissing struct{ *memstore.Store }

func (s emptyRecordForMissing) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	rec, err := s.Store.Get(ctx, id)
	if errors.Is(err, idem.ErrNotFound) {
		return idem.Record{ID: id}, nil
	}
	return rec, err
}

// unboundedPurge deletes everything at once.
type unboundedPurge struct{ *memstore.Store }

func (s unboundedPurge) Purge(ctx context.Context, now time.Time, _ int) (int, error) {
	return s.Store.Purge(ctx, now, 1<<30)
}

// purgesInFlight purges, besides the expired records, the in-flight
// records doomed says are done with: a purge condition of its own for
// in-flight records. It remembers the IDs acquired, to visit them as a
// scan of a table would.
type purgesInFlight struct {
	*memstore.Store
	doomed func(rec idem.Record, now time.Time) bool
	mu     sync.Mutex
	ids    map[idem.ID]bool
}

func newPurgesInFlight(s *memstore.Store, doomed func(idem.Record, time.Time) bool) *purgesInFlight {
	return &purgesInFlight{Store: s, doomed: doomed, ids: map[idem.ID]bool{}}
}

// expiredIgnoringLease: past its TTL, however long its holder renewed its
// lease (the lease left out of the DELETE's WHERE).
func expiredIgnoringLease(rec idem.Record, now time.Time) bool { return !now.Before(rec.ExpiresAt) }

// leaseLapsed: its lease ran out, as if that abandoned the key.
func leaseLapsed(rec idem.Record, now time.Time) bool { return !now.Before(rec.LeaseUntil) }

func (s *purgesInFlight) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	s.mu.Lock()
	s.ids[a.ID] = true
	s.mu.Unlock()
	return s.Store.Acquire(ctx, a)
}

func (s *purgesInFlight) Purge(ctx context.Context, now time.Time, limit int) (int, error) {
	n, err := s.Store.Purge(ctx, now, limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.ids {
		if rec, ok := inFlightRecord(ctx, s.Store, id); ok && n < limit && err == nil && s.doomed(rec, now) {
			if s.Store.Release(ctx, id, rec.Token) == nil {
				n++
			}
		}
	}
	return n, err
}

// purgesLate takes a record for expired only once its expiry has passed,
// a tick late.
type purgesLate struct{ *memstore.Store }

func (s purgesLate) Purge(ctx context.Context, now time.Time, limit int) (int, error) {
	return s.Store.Purge(ctx, now.Add(-time.Nanosecond), limit)
}

// ignoresContext does its work whatever the caller's context says.
type ignoresContext struct{ *memstore.Store }

func (s ignoresContext) Acquire(_ context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	return s.Store.Acquire(context.Background(), a)
}

// readWindow is the time between a read and the write it decides, which
// every read-then-write has. A caller that has read waits in it until a
// second caller has read too (or a second has passed), so that the race
// such a store loses under load is met on every run.
type readWindow struct {
	second chan struct{} // closed at the second read
	mu     sync.Mutex
	reads  int
}

func newReadWindow() readWindow { return readWindow{second: make(chan struct{})} }

func (w *readWindow) wait() {
	w.mu.Lock()
	if w.reads++; w.reads == 2 {
		close(w.second)
	}
	w.mu.Unlock()
	select {
	case <-w.second:
	case <-time.After(time.Second):
	}
}

// overwrite writes a fresh in-flight record for a whatever the store
// holds, as an unconditional write (an upsert, a plain SET) does.
func overwrite(ctx context.Context, s *memstore.Store, mu *sync.Mutex, a idem.Acquire) error {
	mu.Lock()
	defer mu.Unlock()
	if rec, ok := inFlightRecord(ctx, s, a.ID); ok {
		if err := s.Release(ctx, a.ID, rec.Token); err != nil {
			return err
		}
	}
	_, _, err := s.Acquire(ctx, a)
	return err
}

// readThenWrite checks for a record and writes one in a second step.
type readThenWrite struct {
	*memstore.Store
	window readWindow
	mu     sync.Mutex
}

func newReadThenWrite(s *memstore.Store) *readThenWrite {
	return &readThenWrite{Store: s, window: newReadWindow()}
}

func (s *readThenWrite) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	if rec, err := s.Get(ctx, a.ID); err == nil && !rec.Expired(a.Now) {
		return rec, idem.AcquireExisting, nil
	}
	s.window.wait()
	return acquiredRecord(a), idem.AcquireCreated, overwrite(ctx, s.Store, &s.mu, a)
}

// readThenTakeOver decides a takeover on a read and writes it in a second
// step, whoever holds the record by then.
type readThenTakeOver struct {
	*memstore.Store
	window readWindow
	mu     sync.Mutex
}

func newReadThenTakeOver(s *memstore.Store) *readThenTakeOver {
	return &readThenTakeOver{Store: s, window: newReadWindow()}
}

func (s *readThenTakeOver) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	rec, ok := inFlightRecord(ctx, s.Store, a.ID)
	if !ok || !lapsed(rec, a.Now) || rec.Fingerprint != a.Fingerprint {
		return s.Store.Acquire(ctx, a)
	}
	s.window.wait()
	return acquiredRecord(a), idem.AcquireTookOver, overwrite(ctx, s.Store, &s.mu, a)
}

// Broken stores of the operator's calls (idemadmin.Store).

// forgetMissingSucceeds answers a Forget of a missing record with success:
// the count of the DELETE is not read.
type forgetMissingSucceeds struct{ *memstore.Store }

func (s forgetMissingSucceeds) Forget(ctx context.Context, id idem.ID, force bool) error {
	if err := s.Store.Forget(ctx, id, force); !errors.Is(err, idem.ErrNotFound) {
		return err
	}
	return nil
}

// forgetIgnoresForce forgets a record in flight without force.
type forgetIgnoresForce struct{ *memstore.Store }

func (s forgetIgnoresForce) Forget(ctx context.Context, id idem.ID, _ bool) error {
	return s.Store.Forget(ctx, id, true)
}

// forgetsCompletedOnly deletes only completed records: a DELETE that names
// the completed state whatever it read. A record in flight stays, its
// stuck holder's key locked.
type forgetsCompletedOnly struct{ *memstore.Store }

func (s forgetsCompletedOnly) Forget(ctx context.Context, id idem.ID, force bool) error {
	if rec, err := s.Get(ctx, id); err == nil && rec.State == idem.InFlight {
		if !force {
			return idemadmin.ErrInFlight
		}
		return nil
	}
	return s.Store.Forget(ctx, id, force)
}

// forgetsInFlightOnly deletes only records in flight: the state the other
// way round.
type forgetsInFlightOnly struct{ *memstore.Store }

func (s forgetsInFlightOnly) Forget(ctx context.Context, id idem.ID, force bool) error {
	if rec, err := s.Get(ctx, id); err == nil && rec.State == idem.Completed {
		return nil
	}
	return s.Store.Forget(ctx, id, force)
}

// forgetIgnoresScope forgets the key in every scope: a DELETE without the
// scope column. It keeps the scopes it saw to play that.
type forgetIgnoresScope struct {
	*memstore.Store
	mu     sync.Mutex
	scopes map[string]bool
}

func newForgetIgnoresScope(s *memstore.Store) *forgetIgnoresScope {
	return &forgetIgnoresScope{Store: s, scopes: map[string]bool{}}
}

func (s *forgetIgnoresScope) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	s.mu.Lock()
	s.scopes[a.ID.Scope] = true
	s.mu.Unlock()
	return s.Store.Acquire(ctx, a)
}

func (s *forgetIgnoresScope) Forget(ctx context.Context, id idem.ID, force bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.Store.Forget(ctx, id, force)
	for scope := range s.scopes {
		if scope != id.Scope {
			_ = s.Store.Forget(ctx, idem.ID{Scope: scope, Key: id.Key}, force)
		}
	}
	return err
}

// twoStepForget reads the record, runs between (TestForgetFenced's
// change), then deletes it if it still is what it read, as cond decides:
// the condition of a DELETE that names too little of what it read. With
// uncounted, a DELETE that found nothing is taken for done: its count of
// rows is not read.
type twoStepForget struct {
	*memstore.Store
	between   func()
	cond      func(read, now idem.Record) bool
	uncounted bool
}

func newTwoStepForget(s *memstore.Store, cond func(read, now idem.Record) bool) *twoStepForget {
	return &twoStepForget{Store: s, cond: cond}
}

func forgetByKey(_, _ idem.Record) bool        { return true }
func forgetByToken(read, now idem.Record) bool { return now.Token == read.Token }
func forgetByState(read, now idem.Record) bool { return now.State == read.State }
func forgetByBoth(read, now idem.Record) bool {
	return forgetByToken(read, now) && forgetByState(read, now)
}

func (s *twoStepForget) Forget(ctx context.Context, id idem.ID, force bool) error {
	read, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	if read.State == idem.InFlight && !force {
		return idemadmin.ErrInFlight
	}
	if f := s.between; f != nil {
		s.between = nil
		f()
	}
	now, err := s.Get(ctx, id)
	switch {
	case errors.Is(err, idem.ErrNotFound) && s.uncounted:
		return nil
	case err != nil || !s.cond(read, now):
		return idemadmin.ErrChanged
	}
	return s.Store.Forget(ctx, id, true)
}
