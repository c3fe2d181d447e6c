package gormstore

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/internal/testservers"
	"gorm.io/gorm"
)

type cancelOnInsertKey struct{}

// holdInsertKey carries a channel the INSERT waits for after the cancel.
type holdInsertKey struct{}

// ownServerPool opens a pool of its own on the server in env, so that the
// callback a test registers reaches no other test.
func ownServerPool(env string, dial func(string) gorm.Dialector) func(testing.TB) *gorm.DB {
	return func(tb testing.TB) *gorm.DB {
		db, err := openServer(dial(testservers.Require(tb, env)), 2)
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
// Acquire runs must not leave a record behind that nobody holds. Here the
// request's context is cancelled just before Acquire's statement runs.
//   - On SQLite Acquire writes nothing: it reads the key's completed
//     record, and the context is cancelled before that read. No statement
//     follows the context (the driver could deliver its interrupt late, to
//     another statement on the connection); the read runs, and Acquire
//     reports Created, the key held in memory by the request's token,
//     which the Engine runs or releases.
//   - A database server commits a statement its client abandoned, so had
//     the INSERT followed the context it could land after Acquire failed
//     (seen under load in the storm: 409 to every retry until the lease
//     ran out). The INSERT runs detached, Acquire returns at once with the
//     context's error, and the store itself releases the record the INSERT
//     wrote once it has: no record remains, and a retry creates the key.
func TestAcquireWhenTheClientLeavesMidWrite(t *testing.T) {
	cases := []struct {
		name string
		open func(testing.TB) *gorm.DB
	}{
		{"sqlite", openSQLite},
		{"postgres", ownServerPool(testservers.PostgresDSN, dialPostgres)},
		{"mysql", ownServerPool(testservers.MySQLDSN, dialMySQL)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := c.open(t)
			var inserted atomic.Int32
			s := newStore(t, db)
			cancelAt := "INSERT"
			if c.name == "sqlite" {
				cancelAt = "SELECT"
			}
			s.onStatement = func(ctx context.Context, query string) func(int64, error) {
				if !strings.HasPrefix(strings.TrimSpace(query), cancelAt) {
					return nil
				}
				if cancel, _ := ctx.Value(cancelOnInsertKey{}).(context.CancelFunc); cancel != nil {
					cancel()
					if hold, _ := ctx.Value(holdInsertKey{}).(chan struct{}); hold != nil {
						select { // until Acquire has returned
						case <-hold:
						case <-time.After(10 * time.Second):
						}
					}
				}
				return func(n int64, err error) {
					if err == nil && n == 1 {
						inserted.Add(1)
					}
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ctx = context.WithValue(ctx, cancelOnInsertKey{}, cancel)
			hold := make(chan struct{})
			if c.name != "sqlite" {
				// The INSERT lands only after Acquire has returned.
				ctx = context.WithValue(ctx, holdInsertKey{}, hold)
			}
			id := idem.ID{Scope: "acct", Key: "client-gone"}
			_, outcome, err := s.Acquire(ctx, acquireAt(id, "tok", t0))
			close(hold)
			if ctx.Err() == nil {
				t.Fatal("the callback did not cancel the request's context: the test proves nothing")
			}
			if c.name == "sqlite" {
				rec, getErr := s.Get(context.Background(), id)
				if err != nil || outcome != idem.AcquireCreated {
					t.Fatalf("Acquire with the client gone mid-write: %v, %v; want Created", outcome, err)
				}
				if getErr != nil || rec.State != idem.InFlight || rec.Token != "tok" {
					t.Fatalf("record %+v, %v; want in flight, held by tok", rec, getErr)
				}
				if err := s.Release(context.Background(), id, "tok"); err != nil {
					t.Fatalf("Release: %v", err)
				}
				return
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Acquire with the client gone mid-write: %v, %v; want context.Canceled at once", outcome, err)
			}
			if err := s.Close(); err != nil { // waits for the detached INSERT
				t.Fatal(err)
			}
			s = reopen(t, s) // on the same table
			if inserted.Load() != 1 {
				t.Fatalf("%d INSERTs wrote a row: the test proves nothing", inserted.Load())
			}
			if rec, err := s.Get(context.Background(), id); !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("record after the abandoned Acquire: %v held by %q (%v), want none", rec.State, rec.Token, err)
			}
			if _, o, err := s.Acquire(context.Background(), acquireAt(id, "retry", t0)); err != nil || o != idem.AcquireCreated {
				t.Fatalf("the retry's Acquire: %v, %v; want Created", o, err)
			}
		})
	}
}
