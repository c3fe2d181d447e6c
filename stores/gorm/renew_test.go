package gormstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// TestRenewBatch: one call renews the leases of every lock still held and
// reports each one that is not, exactly as Renew would for it.
func TestRenewBatch(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, b.open(t))
			ctx := testCtx(t)
			later := t0.Add(time.Minute)
			acquire := func(id idem.ID, token string, now time.Time) {
				t.Helper()
				if _, o, err := s.Acquire(ctx, acquireAt(id, token, now)); err != nil || o == idem.AcquireExisting {
					t.Fatalf("Acquire(%s) = %v, %v", id.Key, o, err)
				}
			}
			held := idem.ID{Scope: "acct", Key: "held"}
			sameLease := idem.ID{Scope: "acct", Key: "same-lease"}
			takenOver := idem.ID{Scope: "acct", Key: "taken-over"}
			completed := idem.ID{Scope: "acct", Key: "completed"}
			released := idem.ID{Scope: "acct", Key: "released"}
			otherScope := idem.ID{Scope: "other", Key: "held"}
			for _, id := range []idem.ID{held, takenOver, completed, released} {
				acquire(id, "tok-"+id.Key, t0)
			}
			acquire(otherScope, "tok-other-scope", t0)
			// sameLease already holds the lease the batch renews to: MySQL
			// counts such an UPDATE as changing no row, yet the lock holds.
			acquire(sameLease, "tok-same", later.Add(-30*time.Second))
			acquire(takenOver, "successor", t0.Add(31*time.Second)) // the lease ran out
			if err := s.Complete(ctx, completed, "tok-completed", idem.Completion{Response: exchange.Response{Status: 200}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			if err := s.Release(ctx, released, "tok-released"); err != nil {
				t.Fatal(err)
			}

			batch := []idem.Held{
				{ID: held, Token: "tok-held"},
				{ID: takenOver, Token: "tok-taken-over"},
				{ID: completed, Token: "tok-completed"},
				{ID: released, Token: "tok-released"},
				{ID: idem.ID{Scope: "acct", Key: "never"}, Token: "tok-never"},
				{ID: held, Token: "tok-other-scope"}, // another lock's token
				{ID: otherScope, Token: "tok-held"},  // the key's token in another scope
				{ID: otherScope, Token: "tok-other-scope"},
				{ID: sameLease, Token: "tok-same"},
				{ID: held, Token: "tok-held"}, // twice in one batch
			}
			wantLost := []bool{false, true, true, true, true, true, true, false, false, false}
			lost := make([]bool, len(batch))
			for i := range lost {
				lost[i] = !wantLost[i] // every flag must be set, whichever way
			}
			leaseUntil := later.Add(30 * time.Second)
			if err := s.RenewBatch(ctx, batch, leaseUntil, lost); err != nil {
				t.Fatal(err)
			}
			for i := range batch {
				if lost[i] != wantLost[i] {
					t.Errorf("lost[%d] (%s/%s, %s) = %v, want %v", i, batch[i].ID.Scope, batch[i].ID.Key, batch[i].Token, lost[i], wantLost[i])
				}
			}
			for _, c := range []struct {
				id    idem.ID
				token string
				lease time.Time
				state idem.State
			}{
				{held, "tok-held", leaseUntil, idem.InFlight},
				{otherScope, "tok-other-scope", leaseUntil, idem.InFlight},
				{sameLease, "tok-same", leaseUntil, idem.InFlight},
				{takenOver, "successor", t0.Add(31*time.Second + 30*time.Second), idem.InFlight},
				{completed, "tok-completed", t0.Add(30 * time.Second), idem.Completed},
			} {
				rec, err := s.Get(ctx, c.id)
				if err != nil || rec.Token != c.token || !rec.LeaseUntil.Equal(c.lease) || rec.State != c.state {
					t.Errorf("%s/%s after the batch: %v held by %q until %v (%v); want %v held by %q until %v",
						c.id.Scope, c.id.Key, rec.State, rec.Token, rec.LeaseUntil, err, c.state, c.token, c.lease)
				}
			}
			if _, err := s.Get(ctx, released); !errors.Is(err, idem.ErrNotFound) {
				t.Errorf("the released record after the batch: %v, want ErrNotFound", err)
			}
		})
	}
}

// TestRenewBatchLarge: a batch larger than one statement may carry (bind
// parameters are limited) is renewed whole, in chunks.
func TestRenewBatchLarge(t *testing.T) {
	const n = 2*renewChunk + 7
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, b.open(t))
			ctx := testCtx(t)
			batch := make([]idem.Held, n)
			for i := range batch {
				batch[i] = idem.Held{ID: idem.ID{Scope: "acct", Key: fmt.Sprint("k-", i)}, Token: fmt.Sprint("tok-", i)}
			}
			insertInFlight(t, s, batch, t0.Add(30*time.Second))
			// Every third lock is lost: its token changed.
			for i := 0; i < n; i += 3 {
				batch[i].Token += "-stale"
			}
			lost := make([]bool, n)
			leaseUntil := t0.Add(time.Hour)
			if err := s.RenewBatch(ctx, batch, leaseUntil, lost); err != nil {
				t.Fatal(err)
			}
			for i := range batch {
				if lost[i] != (i%3 == 0) {
					t.Fatalf("lost[%d] = %v, want %v", i, lost[i], i%3 == 0)
				}
			}
			for _, i := range []int{1, renewChunk - 1, renewChunk, renewChunk + 1, n - 1} {
				rec, err := s.Get(ctx, batch[i].ID)
				want := leaseUntil
				if i%3 == 0 {
					want = t0.Add(30 * time.Second)
				}
				if err != nil || !rec.LeaseUntil.Equal(want) {
					t.Fatalf("lock %d: lease until %v (%v), want %v", i, rec.LeaseUntil, err, want)
				}
			}
		})
	}
}

// insertInFlight writes an in-flight record for each of held, in
// multi-row INSERTs, faster than one Acquire each. On SQLite, where
// records in flight live in memory, it acquires each.
func insertInFlight(t *testing.T, s *Store, held []idem.Held, leaseUntil time.Time) {
	t.Helper()
	if s.local != nil {
		ctx := testCtx(t)
		for _, h := range held {
			a := acquireAt(h.ID, h.Token, t0)
			a.LeaseUntil = leaseUntil
			if _, _, err := s.Acquire(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	const perStatement = 200
	for start := 0; start < len(held); start += perStatement {
		sql := "INSERT INTO " + s.sql.quotedTableName +
			" (scope_hash, key_hash, fingerprint, idem_state, owner_token, lease_until, created_at, expires_at, resp_status) VALUES "
		var args []any
		for i, h := range held[start:min(start+perStatement, len(held))] {
			if i > 0 {
				sql += ", "
			}
			sql += "(?, ?, ?, 1, ?, ?, ?, ?, 0)"
			scope, key := hashID(h.ID)
			args = append(args, scope, key, blob(fpA[:]), h.Token, nanos(leaseUntil), nanos(t0), nanos(t0.Add(24*time.Hour)))
		}
		if err := s.db.Exec(sql, args...).Error; err != nil {
			t.Fatal(err)
		}
	}
}

// TestRenewBatchArguments: a canceled context renews nothing, an empty
// batch is no call, and lost must match held.
func TestRenewBatchArguments(t *testing.T) {
	s := newStore(t, openSQLite(t))
	ctx := testCtx(t)
	id := idem.ID{Key: "k"}
	if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	held := []idem.Held{{ID: id, Token: "tok"}}
	if err := s.RenewBatch(canceled, held, t0.Add(time.Hour), make([]bool, 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("RenewBatch with a canceled context: %v, want context.Canceled", err)
	}
	if rec, err := s.Get(ctx, id); err != nil || !rec.LeaseUntil.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("lease after a canceled batch: %v (%v), want it unchanged", rec.LeaseUntil, err)
	}
	if err := s.RenewBatch(ctx, nil, t0.Add(time.Hour), nil); err != nil {
		t.Fatalf("RenewBatch of nothing: %v", err)
	}
	if err := s.RenewBatch(ctx, held, t0.Add(time.Hour), nil); err == nil {
		t.Fatal("RenewBatch with fewer lost flags than locks succeeded")
	}
}
