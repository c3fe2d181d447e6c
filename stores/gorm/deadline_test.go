package gormstore

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
	"gorm.io/gorm"
)

// holdWriteLock takes SQLite's write lock on db's file from a pool of its
// own, as another process or a request's long transaction would, and
// returns the function that lets it go.
func holdWriteLock(t *testing.T, db *gorm.DB) (release func()) {
	t.Helper()
	other, err := sqlitedb.Open(sqlitePaths.get(db), quiet())
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := other.DB()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := sqlDB.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
				t.Error(err)
			}
			conn.Close()
			sqlDB.Close()
		})
	}
	t.Cleanup(release)
	return release
}

// writerHolds is how long the other writer keeps the lock at most: far
// longer than any deadline below, far shorter than SQLite's busy timeout.
const writerHolds = 3 * time.Second

// callBefore runs call and returns its error, or fails the test if it has
// not returned once the other writer would have let go of the lock.
func callBefore(t *testing.T, name string, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(writerHolds):
		t.Fatalf("%s has not returned after %v while another writer holds the lock: its deadline is not honoured", name, writerHolds)
		return nil
	}
}

// TestSQLiteDeadlineBehindAnotherWriter: on SQLite a store call that needs
// the write lock (Complete, Purge) while another connection holds it gives
// up at its context's deadline, long before the other writer lets go (or
// before SQLite's own busy timeout), with the context's error, and writes
// nothing later. The Engine bounds every store call so (StoreTimeout). The
// other calls never wait for the lock: a key in flight lives in memory
// (Acquire, Renew, RenewBatch, Release), and reads never wait (WAL).
func TestSQLiteDeadlineBehindAnotherWriter(t *testing.T) {
	const deadline = 100 * time.Millisecond
	db := openSQLite(t)
	s := newStore(t, db)
	ctx := testCtx(t)
	held := idem.ID{Key: "held"}
	done := idem.ID{Key: "done"}
	other := idem.ID{Key: "other"}
	waiting := idem.ID{Key: "waiting"}
	for _, id := range []idem.ID{held, done, other, waiting} {
		if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Complete(ctx, done, "tok", idem.Completion{Response: exchange.Response{Status: 201}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	complete := func(ctx context.Context) error {
		return s.Complete(ctx, held, "tok", idem.Completion{Response: exchange.Response{Status: 201}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)})
	}
	purge := func(ctx context.Context) error { _, err := s.Purge(ctx, t0.Add(48*time.Hour), 10); return err }
	blocked := []struct {
		name string
		call func(context.Context) error
	}{{"Complete", complete}, {"Purge", purge}}

	release := holdWriteLock(t, db)
	for _, c := range blocked {
		t.Run(c.name, func(t *testing.T) {
			cctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			err := callBefore(t, c.name, func() error { return c.call(cctx) })
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s behind another writer: %v, want context.DeadlineExceeded", c.name, err)
			}
		})
		// A context cancelled without a deadline (an Engine on a clock of
		// its own cancels so) stops the wait too.
		t.Run(c.name+"/canceled", func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			time.AfterFunc(deadline, cancel)
			err := callBefore(t, c.name, func() error { return c.call(cctx) })
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("%s behind another writer, cancelled: %v, want context.Canceled", c.name, err)
			}
		})
	}
	// A write of the store's own that waits for the lock, its deadline far
	// off, holds the process's turn for writes meanwhile: the calls below
	// must not wait for it either.
	inWrite := make(chan struct{})
	s.onStatement = func(ctx context.Context, query string) func(int64, error) {
		if ctx.Value(holdKey{}) != nil {
			select {
			case inWrite <- struct{}{}:
			default:
			}
		}
		return nil
	}
	waited := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(context.WithValue(ctx, holdKey{}, true), writerHolds)
		defer cancel()
		waited <- s.Complete(wctx, waiting, "tok", idem.Completion{Response: exchange.Response{Status: 201}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)})
	}()
	<-inWrite
	fresh := idem.ID{Key: "fresh"}
	free := []struct {
		name string
		call func(context.Context) error
	}{
		{"Acquire of a new key", func(ctx context.Context) error {
			_, o, err := s.Acquire(ctx, acquireAt(fresh, "tok", t0))
			if err == nil && o != idem.AcquireCreated {
				err = errors.New(o.String())
			}
			return err
		}},
		{"Acquire of a completed key", func(ctx context.Context) error {
			_, o, err := s.Acquire(ctx, acquireAt(done, "tok-2", t0))
			if err == nil && o != idem.AcquireExisting {
				err = errors.New(o.String())
			}
			return err
		}},
		{"Renew", func(ctx context.Context) error { return s.Renew(ctx, held, "tok", t0.Add(time.Hour)) }},
		{"RenewBatch", func(ctx context.Context) error {
			lost := make([]bool, 1)
			err := s.RenewBatch(ctx, []idem.Held{{ID: held, Token: "tok"}}, t0.Add(time.Hour), lost)
			if err == nil && lost[0] {
				err = idem.ErrLockLost
			}
			return err
		}},
		{"Release", func(ctx context.Context) error { return s.Release(ctx, other, "tok") }},
		{"Get", func(ctx context.Context) error { _, err := s.Get(ctx, done); return err }},
	}
	for _, c := range free {
		cctx, cancel := context.WithTimeout(ctx, deadline)
		if err := callBefore(t, c.name, func() error { return c.call(cctx) }); err != nil {
			t.Errorf("%s beside another writer: %v, want it done without the write lock", c.name, err)
		}
		cancel()
	}
	release()
	if err := <-waited; err != nil {
		t.Fatalf("the write that waited for the lock: %v", err)
	}
	s.onStatement = nil

	// Nothing the calls that gave up would have written landed later.
	rec, err := s.Get(ctx, held)
	if err != nil || rec.State != idem.InFlight || !rec.LeaseUntil.Equal(t0.Add(time.Hour)) {
		t.Fatalf("the held record after the calls gave up: %v until %v (%v), want it in flight, renewed", rec.State, rec.LeaseUntil, err)
	}
	if n := countRecords(t, s); n != 2 {
		t.Fatalf("%d rows after the calls gave up, want the two completed", n)
	}
	// And the store works again at once, every connection's busy timeout
	// as sqlitedb set it, the writer's at 0.
	for _, c := range blocked {
		if err := c.call(ctx); err != nil {
			t.Fatalf("%s once the writer has gone: %v", c.name, err)
		}
	}
	var timeout int
	if err := s.local.writer.own.QueryRow("PRAGMA busy_timeout").Scan(&timeout); err != nil || timeout != 0 {
		t.Fatalf("the store's writer has a busy timeout of %d ms (%v), want 0", timeout, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*sql.Conn, sqlDB.Stats().OpenConnections)
	for i := range conns {
		if conns[i], err = sqlDB.Conn(ctx); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close()
		if err := conns[i].QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&timeout); err != nil || timeout != sqlitedb.BusyTimeoutMillis {
			t.Fatalf("connection %d has a busy timeout of %d ms (%v), want %d as sqlitedb set it", i, timeout, err, sqlitedb.BusyTimeoutMillis)
		}
	}
}

// TestSQLiteStatementsNeverCancellable: the SQLite driver interrupts a
// statement whose context ends, and that interrupt can land late, on the
// next statement of the connection, perhaps another request's commit. So
// however the store bounds its calls, no statement it runs on SQLite has a
// context that can end.
func TestSQLiteStatementsNeverCancellable(t *testing.T) {
	db := openSQLite(t)
	var (
		mu         sync.Mutex
		statements int
		cancelable []string
	)
	check := func(tx *gorm.DB) {
		mu.Lock()
		defer mu.Unlock()
		statements++
		if tx.Statement.Context.Done() != nil {
			cancelable = append(cancelable, tx.Statement.SQL.String())
		}
	}
	if err := db.Callback().Raw().Before("gorm:raw").Register("test:raw_context", check); err != nil {
		t.Fatal(err)
	}
	if err := db.Callback().Row().Before("gorm:row").Register("test:row_context", check); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, db)
	// The statements of the hot path go to database/sql directly.
	s.onStatement = func(ctx context.Context, query string) func(int64, error) {
		mu.Lock()
		defer mu.Unlock()
		statements++
		if ctx.Done() != nil {
			cancelable = append(cancelable, query)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := idem.ID{Key: "k"}
	if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(ctx, id, "tok", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	batch := make([]idem.Held, renewChunk+1) // two statements, in a transaction
	for i := range batch {
		batch[i] = idem.Held{ID: id, Token: "tok"}
	}
	if err := s.RenewBatch(ctx, batch, t0.Add(time.Minute), make([]bool, len(batch))); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, id, "tok", idem.Completion{Response: exchange.Response{Status: 201}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, id); err != nil {
		t.Fatal(err)
	}
	// The completion in the request's transaction.
	txID := idem.ID{Key: "tx"}
	tctx, done := WithTxSlot(ctx)
	defer done()
	if _, _, err := s.Acquire(tctx, acquireAt(txID, "tok", t0)); err != nil {
		t.Fatal(err)
	}
	if _, err := Tx(tctx, db); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(tctx, txID, "tok", idem.Completion{Response: exchange.Response{Status: 201}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Acquire(ctx, acquireAt(idem.ID{Key: "r"}, "tok", t0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, idem.ID{Key: "r"}, "tok"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Purge(ctx, t0.Add(48*time.Hour), 10); err != nil {
		t.Fatal(err)
	}
	if err := s.AutoMigrate(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if statements < 12 {
		t.Fatalf("only %d statements seen: the test proves nothing", statements)
	}
	if len(cancelable) > 0 {
		t.Fatalf("%d of %d statements ran under a context that can end, first %q", len(cancelable), statements, cancelable[0])
	}
}

// TestServerAcquireDeadlineBehindALock: on PostgreSQL and MySQL, an
// Acquire whose INSERT waits behind another transaction's uncommitted row
// for the same key returns at its deadline with the context's error,
// before that transaction ends. The INSERT, which the server would commit
// anyway, finishes on its own once the row's fate is known; if it took the
// key, the store releases it, as nobody holds it.
func TestServerAcquireDeadlineBehindALock(t *testing.T) {
	const deadline = 100 * time.Millisecond
	for _, name := range []string{"postgres", "mysql"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := backendNamed(name).open(t)
			s := newStore(t, db)
			ctx := testCtx(t)
			id := idem.ID{Scope: "acct", Key: "contended"}
			scope, key := hashID(id)
			other := db.WithContext(ctx).Begin()
			if other.Error != nil {
				t.Fatal(other.Error)
			}
			defer other.Rollback()
			a := acquireAt(id, "other", t0)
			if err := other.Exec(s.sql.insert, scope, key, blob(fpA[:]), "other", nanos(a.LeaseUntil), nanos(t0), nanos(a.ExpiresAt)).Error; err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			err := callBefore(t, "Acquire", func() error {
				_, _, err := s.Acquire(cctx, acquireAt(id, "tok", t0))
				return err
			})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Acquire behind another transaction's row: %v, want context.DeadlineExceeded", err)
			}
			// The other transaction gives up its row: the INSERT left
			// running takes the key, for nobody.
			if err := other.Rollback().Error; err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil { // waits for the INSERT
				t.Fatal(err)
			}
			s = reopen(t, s) // on the same table
			if rec, err := s.Get(ctx, id); !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("after the abandoned Acquire: %v held by %q (%v), want no record", rec.State, rec.Token, err)
			}
			if _, o, err := s.Acquire(ctx, acquireAt(id, "retry", t0)); err != nil || o != idem.AcquireCreated {
				t.Fatalf("the retry's Acquire: %v, %v; want Created", o, err)
			}
		})
	}
}
