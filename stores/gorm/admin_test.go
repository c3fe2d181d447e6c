package gormstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemadmin"
	"github.com/idemkit/idemkit/core/idemtest"
)

// beforeStatement makes f run once, on s's next statement that begins with
// prefix, before it runs.
func beforeStatement(s *Store, prefix string, f func()) {
	done := false
	s.onStatement = func(_ context.Context, query string) func(int64, error) {
		if !done && strings.HasPrefix(query, prefix) {
			done = true
			f()
		}
		return nil
	}
}

// TestForgetFenced: on a database server, Forget reads the record, then
// deletes it with one DELETE whose WHERE clause names the state and token
// read; a record changed in between (completed, taken over, released,
// recreated) is left alone, and Forget says ErrChanged. The change is made
// from the statement hook, before the DELETE runs. (On SQLite a record in
// flight lives in this process's memory, and Forget drops it in one step:
// see TestForgetDuringSQLiteCompletion.)
func TestForgetFenced(t *testing.T) {
	for _, name := range []string{"postgres", "mysql"} {
		b := backendNamed(name)
		t.Run(name, func(t *testing.T) {
			idemtest.TestForgetFenced(t, func(tb testing.TB) idemtest.AdminStore { return newStore(tb, b.open(tb)) },
				func(s idemtest.AdminStore, f func()) { beforeStatement(s.(*Store), "DELETE", f) })
		})
	}
}

// TestForgetDuringSQLiteCompletion: on SQLite, an operator's Forget that
// comes while the holder's completion is being written (the record in
// flight is marked completing, the row not yet there) deletes nothing and
// says ErrChanged; the completion lands, and the response is kept. A
// Forget that dropped the record from memory then would say it forgot a
// response that is in fact stored.
func TestForgetDuringSQLiteCompletion(t *testing.T) {
	s := newStore(t, openSQLite(t))
	ctx := testCtx(t)
	id := idem.ID{Scope: "ops", Key: "k-completing"}
	if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil {
		t.Fatal(err)
	}
	var forgot error
	beforeStatement(s, "INSERT", func() { forgot = s.Forget(ctx, id, true) })
	c := idem.Completion{Response: exchange.Response{Status: 201, Body: []byte(`{"id":1}`)}, CompletedAt: t0, ExpiresAt: t0.Add(24 * time.Hour)}
	if err := s.Complete(ctx, id, "tok", c); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if !errors.Is(forgot, idemadmin.ErrChanged) {
		t.Fatalf("Forget while the completion is written: %v, want ErrChanged", forgot)
	}
	if rec, err := s.Get(ctx, id); err != nil || rec.State != idem.Completed || rec.Response.Status != 201 {
		t.Fatalf("after the completion: %v %d (%v), want the completed response", rec.State, rec.Response.Status, err)
	}
}

// TestCompleteAnotherLockOnASlotContext: a request's context carries its
// transaction slot; a second lock completed on that context (a job the
// handler runs with Engine.Do on its own context) must not take the
// request's transaction, which holds the request's own writes: they are
// committed with the request's completion, not before. (On SQLite the
// request's transaction holds the only write lock, so a second completion
// waits for it: not tested there.)
func TestCompleteAnotherLockOnASlotContext(t *testing.T) {
	for _, name := range []string{"postgres", "mysql"} {
		b := backendNamed(name)
		t.Run(name, func(t *testing.T) {
			db := b.open(t)
			s := newStore(t, db)
			charges := createCharges(t, db)
			ctx, done := WithTxSlot(testCtx(t))
			defer done()
			request, job := idem.ID{Key: "k-request"}, idem.ID{Key: "k-job"}
			if _, _, err := s.Acquire(ctx, acquireAt(request, "tok-request", t0)); err != nil {
				t.Fatal(err)
			}
			tx, err := Tx(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Exec("INSERT INTO "+charges+" (charge_key, amount) VALUES (?, ?)", "k-request", 100).Error; err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Acquire(ctx, acquireAt(job, "tok-job", t0)); err != nil {
				t.Fatal(err)
			}
			c := idem.Completion{Response: exchange.Response{Status: 200, Body: []byte("done")}, CompletedAt: t0, ExpiresAt: t0.Add(24 * time.Hour)}
			if err := s.Complete(ctx, job, "tok-job", c); err != nil {
				t.Fatalf("the job's Complete on the request's context: %v", err)
			}
			if n := countCharges(t, db, charges); n != 0 {
				t.Fatalf("after the job's completion, %d of the request's writes are committed, before its own response is recorded", n)
			}
			if err := s.Complete(ctx, request, "tok-request", c); err != nil {
				t.Fatalf("the request's Complete: %v", err)
			}
			if n := countCharges(t, db, charges); n != 1 {
				t.Fatalf("after the request's completion, %d of its writes are committed, want 1", n)
			}
		})
	}
}

// TestPurgeMySQLRechecksExpiry: on MySQL the purge reads the expired
// records, then deletes those by key, each checked again: a record taken
// anew between the two statements (its key acquired again once expired)
// is no longer expired, and stays.
func TestPurgeMySQLRechecksExpiry(t *testing.T) {
	s := newStore(t, openMySQL(t))
	ctx := testCtx(t)
	id := idem.ID{Scope: "ops", Key: "k-purge-raced"}
	if _, _, err := s.Acquire(ctx, acquireAt(id, "tok-old", t0)); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(25 * time.Hour) // the record in flight has expired, lease and TTL
	beforeStatement(s, "DELETE", func() {
		if _, out, err := s.Acquire(ctx, acquireAt(id, "tok-new", now)); err != nil || out != idem.AcquireCreated {
			t.Errorf("Acquire between the purge's read and its delete: %v, %v; want created", out, err)
		}
	})
	n, err := s.Purge(ctx, now, 100)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, id); err != nil || rec.State != idem.InFlight || rec.Token != "tok-new" {
		t.Fatalf("after the purge (%d deleted): %v by %q (%v); want the record taken anew, in flight by tok-new", n, rec.State, rec.Token, err)
	}
	if n != 0 {
		t.Fatalf("the purge says it deleted %d records; want 0", n)
	}
}
