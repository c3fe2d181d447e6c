package gormstore

import (
	"context"
	"strings"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"gorm.io/gorm"
)

type cancelOnInsertKey struct{}

// TestAcquireWriteOutlivesTheClient: a client that goes away while Acquire
// writes must not leave the outcome unknown. Here the request's context is
// cancelled just before the INSERT runs: the INSERT still runs, Acquire
// reports Created, and the record is held by the request's token, so the
// Engine can run or release it. Had the INSERT followed the request's
// context, a statement abandoned half-way could commit after Acquire had
// failed, leaving an in-flight record nobody holds, answering 409 to every
// retry until its lease ran out (seen under load in the storm).
func TestAcquireWriteOutlivesTheClient(t *testing.T) {
	opens := map[string]func(testing.TB) *gorm.DB{
		"sqlite": openSQLite,
		"postgres": func(tb testing.TB) *gorm.DB {
			db, err := openServer(dialPostgres(serverDSN(tb, postgresEnv)), 2)
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() {
				if sqlDB, err := db.DB(); err == nil {
					sqlDB.Close()
				}
			})
			return db
		},
	}
	for name, open := range opens {
		t.Run(name, func(t *testing.T) {
			db := open(t) // a pool of its own: the callback below must not reach other tests
			err := db.Callback().Raw().Before("gorm:raw").Register("test:cancel_on_insert", func(tx *gorm.DB) {
				cancel, _ := tx.Statement.Context.Value(cancelOnInsertKey{}).(context.CancelFunc)
				if cancel != nil && strings.HasPrefix(strings.TrimSpace(tx.Statement.SQL.String()), "INSERT") {
					cancel()
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			s := newStore(t, db)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ctx = context.WithValue(ctx, cancelOnInsertKey{}, cancel)
			id := idem.ID{Scope: "acct", Key: "client-gone"}
			_, outcome, err := s.Acquire(ctx, acquireAt(id, "tok", t0))
			if err != nil || outcome != idem.Created {
				t.Fatalf("Acquire with the client gone mid-write: %v, %v; want Created", outcome, err)
			}
			if ctx.Err() == nil {
				t.Fatal("the callback did not cancel the request's context: the test proves nothing")
			}
			rec, err := s.Get(context.Background(), id)
			if err != nil || rec.State != idem.InFlight || rec.Token != "tok" {
				t.Fatalf("record %+v, %v; want in flight, held by tok", rec, err)
			}
			if err := s.Release(context.Background(), id, "tok"); err != nil {
				t.Fatalf("Release: %v", err)
			}
		})
	}
}
