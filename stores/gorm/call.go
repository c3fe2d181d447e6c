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
	// own, if set, is where the statements run instead of q: the SQLite
	// writer's own connection (see ownConn).
	own ownConn
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
	if x.own != nil {
		return x.own.Exec(query, args...)
	}
	res, err := x.q.ExecContext(x.ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// rowScanner is a row read by a query: *sql.Row, or an ownConn's.
type rowScanner = interface{ Scan(dest ...any) error }

// row runs a query returning at most one row.
func (x session) row(query string, args ...any) rowScanner {
	if x.hook != nil {
		if after := x.hook(x.ctx, query); after != nil {
			defer after(-1, nil)
		}
	}
	if x.own != nil {
		return x.own.QueryRow(query, args...)
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
	return session{ctx: ctx, q: q, hook: s.onStatement}
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
// (a wait ctx ends at once, as no statement runs yet) and runs fn there as
// waitBusy says, within the connection's own busy timeout (read once per
// connection, see busyTimeouts). When the call returns nothing of it is
// left running: no write lands after the caller gave up.
func (s *Store) runSQLite(ctx context.Context, fn func(x session) error) error {
	if ctx.Done() == nil {
		// Nothing to honour: the connection's busy timeout bounds the wait.
		return fn(s.session(ctx, s.pool))
	}
	return s.onConn(ctx, func(quiet context.Context, conn *sql.Conn) error {
		own, err := s.busy.of(quiet, conn) // in milliseconds
		if err != nil {
			return err
		}
		setTimeout := func(ms int64) error {
			_, err := conn.ExecContext(quiet, "PRAGMA busy_timeout = "+strconv.FormatInt(ms, 10))
			return err
		}
		err = s.waitBusy(ctx, s.session(quiet, conn), setTimeout, own, time.Duration(own)*time.Millisecond, fn)
		if errors.Is(err, errTimeoutNotRestored) {
			// The pool must not keep a connection that waits less than its
			// owner chose.
			s.busy.forget(conn)
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		return err
	})
}

// onConn runs fn on a connection of the pool of its own: the wait for one
// follows ctx, and fn is given quiet, ctx without its end, for its
// statements.
func (s *Store) onConn(ctx context.Context, fn func(quiet context.Context, conn *sql.Conn) error) error {
	conn, err := s.pool.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return fn(context.WithoutCancel(ctx), conn)
}

// errTimeoutNotRestored: waitBusy could not set its connection's busy
// timeout back to what it was.
var errTimeoutNotRestored = errors.New("gormstore: the connection's busy timeout could not be restored")

// waitBusy runs fn on x, whose connection's busy timeout is own
// milliseconds and is set with setTimeout, shortened to the time left
// before ctx's deadline, at most sqliteSlice, so that a cancellation is
// seen too; own is restored afterwards. A statement that found the lock
// taken (SQLITE_BUSY) did nothing, so fn runs again while ctx lasts, at
// most for budget in all. With own at 0 (the store's writer), fn's first
// run does not wait at all, and costs nothing more: only a write that
// finds the lock taken by another connection pays for the waits.
func (s *Store) waitBusy(ctx context.Context, x session, setTimeout func(ms int64) error, own int64, budget time.Duration,
	fn func(x session) error) (err error) {
	set := own
	defer func() {
		if set != own {
			if rerr := setTimeout(own); rerr != nil {
				err = errors.Join(err, errTimeoutNotRestored, rerr)
			}
		}
	}()
	deadline, hasDeadline := ctx.Deadline()
	start := time.Now()
	for first := true; ; first = false {
		if !first || own != 0 {
			wait := min(budget-time.Since(start), sqliteSlice)
			if hasDeadline {
				wait = min(wait, time.Until(deadline))
			}
			if ms := max(int64((wait+time.Millisecond-1)/time.Millisecond), 0); ms != set {
				if err := setTimeout(ms); err != nil {
					return err
				}
				set = ms
			}
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
	if err == nil {
		return false // before coded, which escapes to the heap
	}
	var coded interface{ Code() int }
	return errors.As(err, &coded) && coded.Code()&0xff == sqliteBusy
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
