package gormstore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"time"

	"gorm.io/gorm"
)

// run runs one store call's statements, fn, under ctx: on a database
// server the driver cancels a statement when ctx ends; on SQLite see
// runSQLite. A call whose ctx has ended does nothing.
func (s *Store) run(ctx context.Context, fn func(db *gorm.DB) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.dialect == dialectSQLite {
		return s.runSQLite(ctx, fn)
	}
	return fn(s.db.WithContext(ctx))
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
// connection's busy timeout to the time left before ctx's deadline, at most
// sqliteSlice, and restores it afterwards. A statement that found the lock
// taken (SQLITE_BUSY) did nothing, so fn runs again while ctx lasts, at
// most for the connection's own busy timeout in all, as without a context.
// When the call returns nothing of it is left running: no write lands
// after the caller gave up.
func (s *Store) runSQLite(ctx context.Context, fn func(db *gorm.DB) error) (err error) {
	if ctx.Done() == nil {
		// Nothing to honour: the connection's busy timeout bounds the wait.
		return fn(s.db.WithContext(ctx))
	}
	conn, err := s.pool.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	quiet := context.WithoutCancel(ctx)
	var own int64 // the connection's busy timeout, in milliseconds
	if err := conn.QueryRowContext(quiet, "PRAGMA busy_timeout").Scan(&own); err != nil {
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
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	db := s.db.WithContext(quiet)
	db.Statement.ConnPool = conn

	deadline, hasDeadline := ctx.Deadline()
	start := time.Now()
	budget := time.Duration(own) * time.Millisecond
	for {
		wait := min(budget-time.Since(start), sqliteSlice)
		if hasDeadline {
			wait = min(wait, time.Until(deadline))
		}
		ms := max(int64((wait+time.Millisecond-1)/time.Millisecond), 0)
		if ms != set {
			if _, err := conn.ExecContext(quiet, "PRAGMA busy_timeout = "+strconv.FormatInt(ms, 10)); err != nil {
				return err
			}
			set = ms
		}
		err := fn(db)
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
