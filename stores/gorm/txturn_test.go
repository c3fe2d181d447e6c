package gormstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// On SQLite the requests' transactions take the file's write turn from
// Tx's BEGIN to the COMMIT or ROLLBACK that ends them (see Tx). These tests
// hold the store to letting it go on every way a transaction ends, and to
// a wait for it that follows the caller's context: a turn kept by a
// transaction that ended would stop every write of the process.

// turnHeld reports whether a write of the process holds s's file turn.
func turnHeld(s *Store) bool { return len(s.local.file.turn) == 1 }

func TestTxTurnLetGo(t *testing.T) {
	db := openSQLite(t)
	s := newStore(t, db)
	charges := createCharges(t, db)
	complete := func(ctx context.Context, id idem.ID, _ func()) error {
		return s.Complete(ctx, id, "tok", idem.Completion{Response: exchange.Response{Status: 201}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)})
	}
	for i, c := range []struct {
		name string
		// end ends the request; done is the slot's cleanup.
		end func(ctx context.Context, id idem.ID, done func()) error
	}{
		{"Complete commits", complete},
		{"Release rolls back", func(ctx context.Context, id idem.ID, _ func()) error {
			if err := s.Release(ctx, id, "tok"); !errors.Is(err, idem.ErrRolledBack) {
				return fmt.Errorf("Release: %w", err)
			}
			return nil
		}},
		{"Complete of a lock lost rolls back", func(ctx context.Context, id idem.ID, _ func()) error {
			// The record in flight is gone (taken by another request,
			// say): Complete finds the lock lost.
			if err := s.releaseLocal(id, "tok"); err != nil {
				return err
			}
			if err := complete(ctx, id, nil); !errors.Is(err, idem.ErrLockLost) || !errors.Is(err, idem.ErrRolledBack) {
				return fmt.Errorf("Complete of a lost lock: %w, want ErrLockLost and ErrRolledBack", err)
			}
			return nil
		}},
		{"the cleanup rolls back", func(_ context.Context, _ idem.ID, done func()) error {
			done()
			return nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, done := WithTxSlot(testCtx(t))
			defer done()
			id := idem.ID{Key: fmt.Sprint("turn-", i)}
			if _, o, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil || o != idem.AcquireCreated {
				t.Fatalf("Acquire = %v, %v", o, err)
			}
			tx, err := Tx(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			if !turnHeld(s) {
				t.Fatal("the request's transaction does not hold the file's write turn")
			}
			if err := tx.Exec("INSERT INTO "+charges+" (charge_key, amount) VALUES (?, 1)", id.Key).Error; err != nil {
				t.Fatal(err)
			}
			if err := c.end(context.WithoutCancel(ctx), id, done); err != nil {
				t.Fatal(err)
			}
			if turnHeld(s) {
				t.Fatal("the write turn is still held after the request's transaction ended")
			}
			// and the store's own writes go on.
			if _, err := s.Purge(testCtx(t), t0, 10); err != nil {
				t.Fatalf("a write after the transaction: %v", err)
			}
		})
	}
}

// A transaction waiting for the turn gives up with its caller's context,
// and begins nothing.
func TestTxTurnWaitFollowsContext(t *testing.T) {
	db := openSQLite(t)
	s := newStore(t, db)
	first, done := WithTxSlot(testCtx(t))
	defer done()
	if _, _, err := s.Acquire(first, acquireAt(idem.ID{Key: "first"}, "tok-1", t0)); err != nil {
		t.Fatal(err)
	}
	if _, err := Tx(first, db); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	second, done2 := WithTxSlot(ctx)
	defer done2()
	if _, _, err := s.Acquire(second, acquireAt(idem.ID{Key: "second"}, "tok-2", t0)); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := Tx(second, db)
		got <- err
	}()
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("Tx waiting for the turn, cancelled: %v, want context.Canceled", err)
	}
	if _, err := Tx(second, db); !errors.Is(err, context.Canceled) {
		t.Fatalf("Tx again: %v, want context.Canceled (nothing was begun)", err)
	}
	done() // the first request ends: the turn is free
	if turnHeld(s) {
		t.Fatal("the turn is held after both requests ended")
	}
}

// Many requests, each inserting its charge in its transaction at once:
// every one commits with its record, none waits out a busy timeout.
func TestTxTurnConcurrent(t *testing.T) {
	db := openSQLite(t)
	s := newStore(t, db)
	charges := createCharges(t, db)
	url := serve(t, quietEngine(s, nil), chargeHandler(db, charges, nil, hooks{}))
	const n = 48
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if r, err := post(t, http.DefaultClient, url, fmt.Sprint("c-", i)); err != nil || r.status != http.StatusCreated {
				t.Errorf("POST %d = %d, %v", i, r.status, err)
			}
		})
	}
	wg.Wait()
	if got := countCharges(t, db, charges); got != n {
		t.Fatalf("%d charges, want %d", got, n)
	}
	if turnHeld(s) {
		t.Fatal("the turn is held after every request ended")
	}
}
