package gormstore

import (
	"context"
	"strings"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"gorm.io/gorm"
)

type cancelOnInsertKey struct{}

// ownServerPool opens a pool of its own on the server in env, so that the
// callback a test registers reaches no other test.
func ownServerPool(env string, dial func(string) gorm.Dialector) func(testing.TB) *gorm.DB {
	return func(tb testing.TB) *gorm.DB {
		db, err := openServer(dial(serverDSN(tb, env)), 2)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			if sqlDB, err := db.DB(); err == nil {
				sqlDB.Close()
			}
		})
		return db
	}
}

// TestAcquireWhenTheClientLeavesMidWrite: a client that goes away while
// Acquire writes must not leave a record behind that nobody holds. Here the
// request's context is cancelled just before the INSERT runs; the INSERT
// runs to completion anyway, Acquire reports Created, held by the request's
// token, and the Engine runs or releases it. Had the INSERT followed the
// request's context, a database server could commit the statement its
// client abandoned after Acquire had failed (seen under load in the storm:
// 409 to every retry until the lease ran out), and SQLite's driver could
// deliver the interrupt late, to another statement on the connection.
func TestAcquireWhenTheClientLeavesMidWrite(t *testing.T) {
	cases := []struct {
		name string
		open func(testing.TB) *gorm.DB
	}{
		{"sqlite", openSQLite},
		{"postgres", ownServerPool(postgresEnv, dialPostgres)},
		{"mysql", ownServerPool(mysqlEnv, dialMySQL)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := c.open(t)
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
			if ctx.Err() == nil {
				t.Fatal("the callback did not cancel the request's context: the test proves nothing")
			}
			rec, getErr := s.Get(context.Background(), id)
			if err != nil || outcome != idem.Created {
				t.Fatalf("Acquire with the client gone mid-write: %v, %v; want Created", outcome, err)
			}
			if getErr != nil || rec.State != idem.InFlight || rec.Token != "tok" {
				t.Fatalf("record %+v, %v; want in flight, held by tok", rec, getErr)
			}
			if err := s.Release(context.Background(), id, "tok"); err != nil {
				t.Fatalf("Release: %v", err)
			}
		})
	}
}
