package gormstore

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"gorm.io/gorm"
)

// On PostgreSQL the store ends a request's transaction in one round trip,
// its values written into the query as literals (pgtx.go). These tests
// hold that path to what the two statements did: every byte of the
// response stored as it was, whatever it holds, and the commit fenced by
// the owner token.
func TestTxOneTripPostgres(t *testing.T) {
	db := openPostgres(t)
	s := newStore(t, db)
	charges := createCharges(t, db)
	// begin acquires id for token and begins its transaction, which
	// inserts a charge.
	begin := func(id idem.ID, token string, now time.Time) (context.Context, func()) {
		ctx, done := WithTxSlot(testCtx(t))
		if _, o, err := s.Acquire(ctx, acquireAt(id, token, now)); err != nil || o != idem.AcquireCreated {
			t.Fatalf("Acquire = %v, %v", o, err)
		}
		tx, err := Tx(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := connTxOf(tx); !ok || s.oneTrip.Load() != tripYes {
			t.Fatalf("Tx began a %T, want the store's own transaction", tx.Statement.ConnPool)
		}
		if err := tx.Exec("INSERT INTO "+charges+" (charge_key, amount) VALUES (?, 1)", id.Key).Error; err != nil {
			t.Fatal(err)
		}
		return ctx, done
	}
	var every []byte
	for i := range 256 {
		every = append(every, byte(i))
	}
	body := append([]byte(`{"note":"it's \\x00 '); COMMIT; --"}`), every...)
	header := []exchange.HeaderField{{Name: "Content-Type", Values: []string{"application/json"}}, {Name: "X-Quote", Values: []string{`'"\`}}}

	t.Run("commits every byte", func(t *testing.T) {
		id := idem.ID{Scope: "tenant'\\", Key: "one-trip"}
		token := `tok'); DROP TABLE x; --\`
		ctx, done := begin(id, token, t0)
		defer done()
		err := s.Complete(ctx, id, token, idem.Completion{Response: exchange.Response{Status: 201, Header: header, Body: body},
			CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := s.Get(testCtx(t), id)
		if err != nil || rec.State != idem.Completed || rec.Response.Status != 201 || !bytes.Equal(rec.Response.Body, body) {
			t.Fatalf("record %+v (%v), want the response stored byte for byte", rec, err)
		}
		if len(rec.Response.Header) != 2 || rec.Response.Header[1].Values[0] != header[1].Values[0] {
			t.Fatalf("headers %q, want %q", rec.Response.Header, header)
		}
		if n := countCharges(t, db, charges); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})
	t.Run("an empty response", func(t *testing.T) {
		id := idem.ID{Key: "empty"}
		ctx, done := begin(id, "tok", t0)
		defer done()
		if err := s.Complete(ctx, id, "tok", idem.Completion{Response: exchange.Response{Status: 204},
			CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if rec, err := s.Get(testCtx(t), id); err != nil || rec.Response.Status != 204 || len(rec.Response.Body) != 0 || len(rec.Response.Header) != 0 {
			t.Fatalf("record %+v (%v)", rec, err)
		}
	})
	t.Run("a lost lock rolls back", func(t *testing.T) {
		id := idem.ID{Key: "taken-over"}
		ctx, done := begin(id, "first", t0)
		defer done()
		// The lease lapses and another request takes the key over.
		later := t0.Add(time.Minute)
		if _, o, err := s.Acquire(testCtx(t), acquireAt(id, "successor", later)); err != nil || o != idem.AcquireTookOver {
			t.Fatalf("takeover = %v, %v", o, err)
		}
		err := s.Complete(ctx, id, "first", idem.Completion{Response: exchange.Response{Status: 201, Body: body},
			CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)})
		if !errors.Is(err, idem.ErrLockLost) || !errors.Is(err, idem.ErrRolledBack) {
			t.Fatalf("Complete of a lost lock: %v, want ErrLockLost and ErrRolledBack", err)
		}
		var n int
		if err := db.Raw("SELECT COUNT(*) FROM "+charges+" WHERE charge_key = ?", id.Key).Scan(&n).Error; err != nil || n != 0 {
			t.Fatalf("%d charges of the lost request (%v), want 0", n, err)
		}
		if rec, err := s.Get(testCtx(t), id); err != nil || rec.State != idem.InFlight || rec.Token != "successor" {
			t.Fatalf("record %+v (%v), want the successor's in flight", rec, err)
		}
	})
	t.Run("savepoints and nested transactions", func(t *testing.T) {
		id := idem.ID{Key: "nested"}
		ctx, done := begin(id, "tok", t0)
		defer done()
		tx, _ := Tx(ctx, db)
		if err := tx.SavePoint("before").Error; err != nil {
			t.Fatal(err)
		}
		if err := tx.Exec("INSERT INTO "+charges+" (charge_key, amount) VALUES ('undone', 1)").Error; err != nil {
			t.Fatal(err)
		}
		if err := tx.RollbackTo("before").Error; err != nil {
			t.Fatal(err)
		}
		inner := errors.New("inner failed")
		if err := tx.Transaction(func(tx2 *gorm.DB) error {
			if err := tx2.Exec("INSERT INTO "+charges+" (charge_key, amount) VALUES ('inner', 1)").Error; err != nil {
				return err
			}
			return inner
		}); !errors.Is(err, inner) {
			t.Fatalf("nested Transaction: %v", err)
		}
		if err := s.Complete(ctx, id, "tok", idem.Completion{Response: exchange.Response{Status: 201},
			CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		var keys []string
		if err := db.Raw("SELECT charge_key FROM " + charges + " WHERE charge_key IN ('nested', 'undone', 'inner')").Scan(&keys).Error; err != nil {
			t.Fatal(err)
		}
		if len(keys) != 1 || keys[0] != "nested" {
			t.Fatalf("charges %q committed, want the one outside the rolled-back savepoints", keys)
		}
	})
	t.Run("a failed statement rolls back", func(t *testing.T) {
		id := idem.ID{Key: "failed"}
		ctx, done := begin(id, "tok", t0)
		defer done()
		tx, _ := Tx(ctx, db)
		_ = tx.Exec("SELECT 1 / 0").Error // the handler ignores the error: the transaction is aborted
		err := s.Complete(ctx, id, "tok", idem.Completion{Response: exchange.Response{Status: 201},
			CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)})
		if !errors.Is(err, idem.ErrRolledBack) || errors.Is(err, idem.ErrLockLost) {
			t.Fatalf("Complete after a failed statement: %v, want ErrRolledBack, not ErrLockLost", err)
		}
		if rec, err := s.Get(testCtx(t), id); err != nil || rec.State != idem.InFlight {
			t.Fatalf("record %+v (%v), want it still in flight", rec, err)
		}
	})
}
