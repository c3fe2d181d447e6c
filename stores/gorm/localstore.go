package gormstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"gorm.io/gorm"
)

// The store's calls on SQLite, where records in flight live in memory
// (see local.go and inflight.go).

// OneProcess reports whether only this process uses the store's records:
// true on SQLite, whose file New locks against the stores of other
// processes, false on PostgreSQL and MySQL. The Engine then takes no
// leases: a key is held until its handler ends, and a crash frees every
// key the process held (see idem.Store).
func (s *Store) OneProcess() bool { return s.local != nil }

// acquireLocal is Acquire on SQLite: the key's completed record is read
// from the table, and the key is taken in memory. A new key writes
// nothing.
func (s *Store) acquireLocal(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	scope, key := hashID(a.ID)
	k := keyOf(scope, key)
	sh := s.local.table.shard(&k)
	for range maxAttempts {
		sh.mu.Lock()
		if f := sh.m[k]; f != nil {
			rec, outcome := takeFlight(sh, k, f, a)
			sh.mu.Unlock()
			return rec, outcome, nil
		}
		landed := sh.landed
		sh.mu.Unlock()
		// The read runs outside the shard's lock: a call waiting for the
		// lock could not honour its deadline.
		rec, err := s.readCompleted(ctx, a.ID, scope, key)
		switch {
		case errors.Is(err, idem.ErrNotFound):
		case err != nil:
			return idem.Record{}, 0, err
		case !rec.Expired(a.Now):
			return rec, idem.AcquireExisting, nil
		default:
			// Expired: deleted as Purge would, so that a key has one
			// record at a time, in memory or in the table (Get, and a
			// release of the new one, find no other). A key reused after
			// its TTL is rare: the purger usually deleted it before.
			if err := s.write(ctx, func(x session) error {
				_, err := x.exec(s.sql.native.dropExpired, scope, key, nanos(a.Now), nanos(a.Now))
				return err
			}); err != nil {
				return idem.Record{}, 0, err
			}
			continue
		}
		sh.mu.Lock()
		if sh.m[k] == nil && sh.landed == landed {
			// Still no record in flight, and no completion of the shard
			// wrote a row since the read: the row read is the key's.
			sh.m[k] = newFlight(a)
			sh.mu.Unlock()
			return idem.Record{}, idem.AcquireCreated, nil
		}
		sh.mu.Unlock()
	}
	return idem.Record{}, 0, fmt.Errorf("the record kept changing; gave up after %d attempts", maxAttempts)
}

func newFlight(a idem.Acquire) *flight {
	return &flight{id: a.ID, fp: a.Fingerprint, token: a.Token,
		lease: nanos(a.LeaseUntil), created: nanos(a.Now), expires: nanos(a.ExpiresAt)}
}

// takeFlight is Acquire of a key with a record in flight, f: replaced if
// it expired, taken over if its lease lapsed and the fingerprint matches,
// otherwise returned. One that is being completed holds its key. The
// caller holds the shard's lock.
func takeFlight(sh *shard, k rowKey, f *flight, a idem.Acquire) (idem.Record, idem.AcquireOutcome) {
	now := nanos(a.Now)
	switch {
	case f.completing:
	case f.expired(now):
		sh.m[k] = newFlight(a)
		return idem.Record{}, idem.AcquireCreated
	case now >= f.lease && f.fp == a.Fingerprint:
		sh.m[k] = newFlight(a)
		return idem.Record{}, idem.AcquireTookOver
	}
	rec := f.record()
	rec.ID = a.ID
	return rec, idem.AcquireExisting
}

// readCompleted reads id's completed record from the table. A record in
// flight found there was left by a process that died (or by a version of
// the store that kept them in the table): nobody holds it, and it is
// taken for none.
func (s *Store) readCompleted(ctx context.Context, id idem.ID, scope, key blob) (idem.Record, error) {
	var rec idem.Record
	err := s.read(ctx, func(x session) (err error) {
		rec, err = s.get(x, id, scope, key)
		return err
	})
	if err == nil && rec.State == idem.InFlight {
		return idem.Record{ID: id}, idem.ErrNotFound
	}
	return rec, err
}

// completeLocal is Complete on SQLite: one write, the INSERT of the
// completed record, on the store's writer or in the request's transaction
// tx, while the record in flight, marked completing, holds the key; the
// record is dropped once the row is written. A row in the way is one
// nobody holds (a record in flight a dead process left), replaced by
// completeRow, which leaves a live row alone: the key is then lost. scope
// and key are the record's key columns (hashID); args are completeRow's
// but the last four.
func (s *Store) completeLocal(ctx context.Context, scope, key blob, token string, tx *gorm.DB, args []any) error {
	k := keyOf(scope, key)
	sh := s.local.table.shard(&k)
	sh.mu.Lock()
	f := sh.held(k, token)
	if f == nil || f.completing {
		sh.mu.Unlock()
		if tx != nil {
			tx.Rollback()
			return fmt.Errorf("gormstore: complete: %w: %w", idem.ErrRolledBack, idem.ErrLockLost)
		}
		return idem.ErrLockLost
	}
	f.completing = true
	sh.mu.Unlock()
	args = append(args, f.fingerprintArg(), f.lease, f.created, f.created)
	var err error
	if tx != nil {
		err = s.completeInTx(ctx, tx, func(ctx context.Context) (int64, error) {
			n, ok, err := s.execInTx(ctx, tx, s.sql.native.insertCompleted, args[:len(args)-1]...)
			if !ok {
				res := quietTx(ctx, tx).Exec(s.sql.insertCompleted, args[:len(args)-1]...)
				n, err = res.RowsAffected, res.Error
			}
			if s.isDuplicate(err) {
				res := quietTx(ctx, tx).Exec(s.sql.completeRow, args...)
				n, err = res.RowsAffected, res.Error
			}
			return n, err
		})
	} else {
		err = s.write(ctx, func(x session) error {
			n, err := x.exec(s.sql.native.insertCompleted, args[:len(args)-1]...)
			if s.isDuplicate(err) {
				n, err = x.exec(s.sql.native.completeRow, args...)
			}
			if err == nil && n == 0 {
				err = idem.ErrLockLost
			}
			return err
		})
		if err != nil && !errors.Is(err, idem.ErrLockLost) {
			err = fmt.Errorf("gormstore: complete: %w", err)
		}
	}
	sh.mu.Lock()
	sh.landed++ // the row may have changed, even if the call failed
	if err == nil || errors.Is(err, idem.ErrLockLost) {
		// Written, or a live completed record was found that this store
		// did not write: either way the key is no longer in flight here.
		delete(sh.m, k)
	} else {
		f.completing = false
	}
	sh.mu.Unlock()
	return err
}

// fingerprintArg is f's fingerprint as a statement argument.
func (f *flight) fingerprintArg() blob { return blob(f.fp[:]) }

// renewLocal is Renew on SQLite: the lease of a record in flight moves in
// memory.
func (s *Store) renewLocal(id idem.ID, token string, leaseUntil time.Time) error {
	scope, key := hashID(id)
	k := keyOf(scope, key)
	sh := s.local.table.shard(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	f := sh.held(k, token)
	if f == nil {
		return idem.ErrLockLost
	}
	f.lease = max(f.lease, nanos(leaseUntil))
	return nil
}

// releaseLocal is Release on SQLite: the record in flight is dropped. One
// being completed is not: its completion decides.
func (s *Store) releaseLocal(id idem.ID, token string) error {
	scope, key := hashID(id)
	k := keyOf(scope, key)
	sh := s.local.table.shard(&k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if f := sh.held(k, token); f == nil || f.completing {
		return idem.ErrLockLost
	}
	delete(sh.m, k)
	return nil
}

// getLocal is Get on SQLite: the record in flight, else the table's.
func (s *Store) getLocal(ctx context.Context, id idem.ID) (idem.Record, error) {
	scope, key := hashID(id)
	k := keyOf(scope, key)
	sh := s.local.table.shard(&k)
	sh.mu.Lock()
	f := sh.m[k]
	var rec idem.Record
	if f != nil {
		rec = f.record()
		rec.ID = id
	}
	sh.mu.Unlock()
	if f != nil {
		return rec, nil
	}
	rec, err := s.readCompleted(ctx, id, scope, key)
	if err != nil && !errors.Is(err, idem.ErrNotFound) {
		return idem.Record{ID: id}, fmt.Errorf("gormstore: get: %w", err)
	}
	return rec, err
}

// purgeLocal is Purge on SQLite: the table's expired records, in one
// DELETE on the writer, then, if that left room in limit, the records in
// flight expired at now (none while the Engine takes no lease: their
// lease never ends). A purge that fails deletes none of them.
func (s *Store) purgeLocal(ctx context.Context, now time.Time, limit int) (int, error) {
	var purged int64
	err := s.write(ctx, func(x session) (err error) {
		purged, err = x.exec(s.sql.native.purge, nanos(now), nanos(now), limit)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("gormstore: purge: %w", err)
	}
	n := int(purged)
	return n + s.local.table.purge(nanos(now), limit-n), nil
}

// renewBatchLocal is RenewBatch on SQLite: Renew for each lock, in memory.
func (s *Store) renewBatchLocal(held []idem.Held, leaseUntil time.Time, lost []bool) {
	for i, h := range held {
		lost[i] = s.renewLocal(h.ID, h.Token, leaseUntil) != nil
	}
}

// freeLeftovers deletes the records in flight a process that died left in
// the table, once per table and process (see inflight.freed): kept in the
// table by an earlier version of the store, they would otherwise wait
// for their leases, and in a leaseless process no lease ever ran out.
// Nothing holds them: records in flight live in memory now. A table that
// does not exist yet has none.
func (s *Store) freeLeftovers(ctx context.Context) error {
	t := s.local.table
	if t.freed.Load() {
		return nil
	}
	var tables int
	err := s.read(ctx, func(x session) error {
		return x.row(s.sql.tableExists, s.local.name).Scan(&tables)
	})
	if err != nil || tables == 0 {
		return err
	}
	err = s.write(ctx, func(x session) error {
		_, err := x.exec(s.sql.native.freeInFlight)
		return err
	})
	if err == nil {
		t.freed.Store(true)
	}
	return err
}
