package gormstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"gorm.io/gorm"
)

// session is where one store call runs its statements: the pool, one
// connection taken from it, or a transaction, with the context its
// statements get. The hot path talks to database/sql directly, with
// statements rendered once in the dialect's own placeholders (see
// statements.native): GORM would build each of them again on every call
// (its clause builder and statement clones were most of a new key's
// allocations), and it adds nothing to SQL the store writes itself.
type session struct {
	ctx context.Context
	q   gorm.ConnPool // *sql.DB, *sql.Conn or *sql.Tx
	// hook, if set, sees every statement before it runs and gets its
	// result after (tests, see Store.onStatement).
	hook func(ctx context.Context, query string) (after func(n int64, err error))
}

// exec runs a statement and returns how many rows it changed.
func (x session) exec(query string, args ...any) (n int64, err error) {
	if x.hook != nil {
		if after := x.hook(x.ctx, query); after != nil {
			defer func() { after(n, err) }()
		}
	}
	res, err := x.q.ExecContext(x.ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// row runs a query returning at most one row.
func (x session) row(query string, args ...any) *sql.Row {
	if x.hook != nil {
		if after := x.hook(x.ctx, query); after != nil {
			defer after(-1, nil)
		}
	}
	return x.q.QueryRowContext(x.ctx, query, args...)
}

// query runs a query returning rows.
func (x session) query(query string, args ...any) (*sql.Rows, error) {
	if x.hook != nil {
		if after := x.hook(x.ctx, query); after != nil {
			defer after(-1, nil)
		}
	}
	return x.q.QueryContext(x.ctx, query, args...)
}

// session returns a session on q under ctx.
func (s *Store) session(ctx context.Context, q gorm.ConnPool) session {
	return session{ctx, q, s.onStatement}
}

// gorm returns the store's silent GORM session on x, for the statements
// that are built per call (a batch renewal) or run once (migrations).
func (s *Store) gorm(x session) *gorm.DB {
	db := s.db.WithContext(x.ctx)
	db.Statement.ConnPool = x.q
	return db
}

// run runs one store call's statements, fn, under ctx: on a database
// server the driver cancels a statement when ctx ends; on SQLite see
// runSQLite. A call whose ctx has ended does nothing.
func (s *Store) run(ctx context.Context, fn func(x session) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.dialect == dialectSQLite {
		return s.runSQLite(ctx, fn)
	}
	return fn(s.session(ctx, s.pool))
}

// sqliteSlice is the longest one wait for SQLite's write lock lasts:
// between two waits the call looks at ctx, which may be cancelled before
// its deadline, or have none (an Engine on a clock of its own cancels so).
const sqliteSlice = 50 * time.Millisecond

// runSQLite runs fn on SQLite so that the call ends at ctx's deadline (or
// soon after ctx is cancelled) even while another connection holds the
// write lock, without ever giving a statement a cancellable context.
//
// The driver interrupts a statement whose context ends from another
// goroutine, and that interrupt can arrive late, after the statement
// finished and its connection went back to the pool, and abort whatever
// runs there next, perhaps another request's completion or commit. So
// statements run under context.WithoutCancel, and what bounds them is the
// only wait an SQLite statement has: the wait for the write lock, which the
// connection's busy timeout limits. runSQLite takes a connection of its own
// (a wait ctx ends at once, as no statement runs yet), shortens that
// connection's busy timeout (read once per connection, see busyTimeouts) to the time left before ctx's deadline, at most
// sqliteSlice, and restores it afterwards. A statement that found the lock
// taken (SQLITE_BUSY) did nothing, so fn runs again while ctx lasts, at
// most for the connection's own busy timeout in all, as without a context.
// When the call returns nothing of it is left running: no write lands
// after the caller gave up.
func (s *Store) runSQLite(ctx context.Context, fn func(x session) error) error {
	return s.runSQLiteFrom(ctx, false, fn)
}

// runSQLiteFrom is runSQLite; with noWait, fn's first run finds the
// connection's busy timeout at 0, so that a statement finding the write
// lock taken fails at once (SQLITE_BUSY) instead of waiting: Acquire then
// reads the record instead (see Store.acquire), and if fn still reports
// SQLITE_BUSY it runs again with the usual waits.
func (s *Store) runSQLiteFrom(ctx context.Context, noWait bool, fn func(x session) error) (err error) {
	if ctx.Done() == nil && !noWait {
		// Nothing to honour: the connection's busy timeout bounds the wait.
		return fn(s.session(ctx, s.pool))
	}
	conn, err := s.pool.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	quiet := context.WithoutCancel(ctx)
	own, err := s.busy.of(quiet, conn) // the connection's busy timeout, in milliseconds
	if err != nil {
		return err
	}
	set := own
	defer func() {
		if set == own {
			return
		}
		if _, rerr := conn.ExecContext(quiet, "PRAGMA busy_timeout = "+strconv.FormatInt(own, 10)); rerr != nil {
			// The pool must not keep a connection that waits less than its
			// owner chose.
			s.busy.forget(conn)
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	x := s.session(quiet, conn)

	deadline, hasDeadline := ctx.Deadline()
	start := time.Now()
	budget := time.Duration(own) * time.Millisecond
	for {
		wait := min(budget-time.Since(start), sqliteSlice)
		if hasDeadline {
			wait = min(wait, time.Until(deadline))
		}
		ms := max(int64((wait+time.Millisecond-1)/time.Millisecond), 0)
		if noWait {
			ms, noWait = 0, false
		}
		if ms != set {
			if _, err := conn.ExecContext(quiet, "PRAGMA busy_timeout = "+strconv.FormatInt(ms, 10)); err != nil {
				return err
			}
			set = ms
		}
		err := fn(x)
		if !isBusy(err) {
			return err
		}
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("%w (waiting for SQLite's write lock: %w)", ctx.Err(), err)
		case hasDeadline && !time.Now().Before(deadline):
			return fmt.Errorf("%w (waiting for SQLite's write lock: %w)", context.DeadlineExceeded, err)
		case time.Since(start) >= budget:
			return err // as long as the connection itself would have waited
		}
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY, in any of its
// extended forms: the statement could not take a lock and did nothing. The
// driver is not imported here, so that PostgreSQL and MySQL users do not
// link an SQLite engine; its errors carry their result code.
func isBusy(err error) bool {
	const sqliteBusy = 5
	var coded interface{ Code() int }
	return err != nil && errors.As(err, &coded) && coded.Code()&0xff == sqliteBusy
}

// busyTimeouts remembers the busy timeout of each SQLite connection the
// store has used, as it was before the store shortened it: reading it
// again on every call cost a statement per call. Connections are told
// apart by their driver connection. A connection's own timeout is set
// when it is opened (sqlitedb's DSN) and the store restores it after every
// call, so what was read once stays true.
type busyTimeouts struct {
	mu sync.Mutex
	m  map[any]int64
}

// maxBusyTimeouts bounds the map: connections the pool closed stay in it
// until it is emptied, and are read again after that.
const maxBusyTimeouts = 256

// of returns conn's own busy timeout in milliseconds.
func (b *busyTimeouts) of(ctx context.Context, conn *sql.Conn) (int64, error) {
	dc := driverConn(conn)
	b.mu.Lock()
	own, ok := b.m[dc]
	b.mu.Unlock()
	if ok {
		return own, nil
	}
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&own); err != nil {
		return 0, err
	}
	b.mu.Lock()
	if b.m == nil || len(b.m) >= maxBusyTimeouts {
		b.m = make(map[any]int64)
	}
	b.m[dc] = own
	b.mu.Unlock()
	return own, nil
}

// forget drops what is known of conn, which is about to be discarded.
func (b *busyTimeouts) forget(conn *sql.Conn) {
	dc := driverConn(conn)
	b.mu.Lock()
	delete(b.m, dc)
	b.mu.Unlock()
}

// driverConn returns the driver's connection under conn, which identifies
// it for as long as it is open.
func driverConn(conn *sql.Conn) any {
	var dc any
	_ = conn.Raw(func(c any) error {
		dc = c
		return nil
	})
	return dc
}
